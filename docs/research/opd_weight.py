#!/usr/bin/env python3
"""How much of a step's gradient weight the hindsight (OPD) term carries,
under each loss aggregation: a measuring tool for docs/simulator.md, not
part of the program (standard library only).

Reads a run directory's kept trajectories (trajectories/step-*.jsonl; keep
every one with --set output.trajectories=N at least the step's trajectory
count) and, per step, weighs each policy token's advantage as each
trainer.loss_agg would: token-mean (and sum, which differs from it by one
factor per mini-batch) gives every token the same weight; seq-mean-token-mean
gives each trajectory the same total weight, spread over its tokens. It
prints, per aggregation, the OPD term's share of the step's total
|advantage| weight (sum over tokens of weight x |term|, OPD over GRPO plus
OPD), and the share of policy tokens carrying a non-zero term.

    python3 docs/research/opd_weight.py RUN_DIR [--coef 1]
"""
import argparse
import glob
import json
import os


def step_shares(trajs, coef):
    rows = []
    for t in trajs:
        pol = t.get("policy") or []
        opd = t.get("opd") or []
        n = sum(1 for p in pol if p)
        if n == 0:
            continue
        grpo = abs(t.get("advantage", 0.0))
        term = [abs(coef * opd[j]) if opd and pol[j] else 0.0 for j in range(len(pol))]
        rows.append((n, grpo * n, sum(term), sum(1 for x in term if x > 0)))
    if not rows:
        return None
    B = len(rows)
    N = sum(r[0] for r in rows)
    # token-mean: weight 1/N on every token.
    g_tm = sum(r[1] for r in rows) / N
    o_tm = sum(r[2] for r in rows) / N
    # seq-mean-token-mean: weight 1/(B n_i) on trajectory i's tokens.
    g_sm = sum(r[1] / r[0] for r in rows) / B
    o_sm = sum(r[2] / r[0] for r in rows) / B
    opd_tokens = sum(r[3] for r in rows)
    share = lambda o, g: o / (o + g) if o + g > 0 else 0.0
    return {"trajectories": B, "policy_tokens": N, "opd_tokens": opd_tokens,
            "opd_token_share": opd_tokens / N,
            "token_mean": share(o_tm, g_tm), "seq_mean_token_mean": share(o_sm, g_sm)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--coef", type=float, default=1.0, help="hindsight.coef of the run")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.run_dir, "trajectories", "step-*.jsonl")))
    if not files:
        raise SystemExit(f"{a.run_dir}: no trajectories/step-*.jsonl")
    print("step  trajs  tokens  opd_tokens  opd_token_share  opd_weight_token_mean  opd_weight_seq_mean")
    tot = {"token_mean": 0.0, "seq_mean_token_mean": 0.0, "opd_token_share": 0.0}
    k = 0
    for f in files:
        with open(f) as fh:
            trajs = [json.loads(line) for line in fh if line.strip()]
        s = step_shares(trajs, a.coef)
        if s is None:
            continue
        step = int(os.path.basename(f)[5:9])
        print(f"{step:4d}  {s['trajectories']:5d}  {s['policy_tokens']:6d}  {s['opd_tokens']:10d}  "
              f"{s['opd_token_share']:15.4f}  {s['token_mean']:21.4f}  {s['seq_mean_token_mean']:19.4f}")
        for key in tot:
            tot[key] += s[key]
        k += 1
    print(f"mean over {k} steps: opd_token_share {tot['opd_token_share'] / k:.4f}, "
          f"OPD weight share token-mean {tot['token_mean'] / k:.4f}, seq-mean-token-mean {tot['seq_mean_token_mean'] / k:.4f}")


if __name__ == "__main__":
    main()
