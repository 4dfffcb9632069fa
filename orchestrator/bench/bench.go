// Package bench measures the control plane on the simulator (orchestrate
// bench): the async schedule against lockstep, hindsight's cost, replica
// scaling, and the orchestrator's CPU and memory per policy turn, measured
// side by side in one run and reported as ratios.
package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
	"github.com/sourcegraph/conc/pool"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	ometrics "github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// Options configure orchestrate bench.
type Options struct {
	// Recipe is the base recipe every scenario overrides (recipes/sim.yaml).
	Recipe string
	// Dir receives the scenarios' run directories.
	Dir string
	// Scale multiplies the scenarios' workloads (1: the documented sizes;
	// tests use less).
	Scale float64
	// SimCommand starts the zero-latency simulator in a separate process
	// for the CPU scenario: the argv of `orchestrate serve sim`, to which
	// the recipe path and --set flags are appended. Nil skips the CPU and
	// memory figures.
	SimCommand []string
	// Out receives progress lines.
	Out io.Writer
	// Only, when non-empty, runs only these scenario groups: speedup
	// (async, lockstep: async_speedup, busy_fraction,
	// retriever_calls_saved), hindsight, replicas, affinity, cpu,
	// cpu-real.
	Only []string
	// RealPolicy are the --set flags that point the policy at real
	// servers (policy.urls, policy.model, policy.tokenizer, ...): the
	// cpu-real group measures the CPU per turn against them beside the
	// same rollouts against the simulator, in pairs. Empty: no cpu-real.
	RealPolicy []string
	// RealRollout are --set flags both sides of cpu-real share (the
	// turn and context budgets a small real model needs).
	RealRollout []string
	// Seeds are the recipe seeds (the data order and every sampling
	// seed) each scheduling scenario runs with, one run per seed; the
	// figures are the means over them, with their ranges in
	// Report.Spreads. Empty: DefaultSeeds. The CPU groups run at the
	// recipe's own seed.
	Seeds []int64
}

// Groups are the scenario groups Options.Only may name ("retrieval" is
// the retrieval scale benchmark, run alone by orchestrate bench).
var Groups = []string{"speedup", "hindsight", "replicas", "affinity", "cpu", "cpu-real", "retrieval"}

// DefaultSeedCount is how many seeds the scheduling figures are measured
// over by default: at 5, the mean async_speedup of one commit moves by
// less than the difference docs/bench.md says two commits must differ by
// to be told apart (measured there).
const DefaultSeedCount = 5

// DefaultSeeds returns the seeds 1..DefaultSeedCount.
func DefaultSeeds() []int64 { return SeedRange(DefaultSeedCount) }

// SeedRange returns the seeds 1..n (none for n < 1).
func SeedRange(n int) []int64 {
	out := make([]int64, 0, max(n, 0))
	for s := range max(n, 0) {
		out = append(out, int64(s+1))
	}
	return out
}

// Spread is one scheduling figure over the seeds it was measured with:
// the mean (the figure reported), the lowest and highest seed's value,
// and each seed's value in the order of Seeds.
type Spread struct {
	Mean   float64   `json:"mean"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Seeds  []int64   `json:"seeds"`
	Values []float64 `json:"values"`
}

// newSpread summarises vs, measured at seeds (one seed per value, in
// order).
func newSpread(seeds []int64, vs []float64) Spread {
	sp := Spread{Seeds: slices.Clone(seeds[:min(len(seeds), len(vs))]), Values: slices.Clone(vs)}
	if len(vs) == 0 {
		return sp
	}
	sp.Min, sp.Max = slices.Min(vs), slices.Max(vs)
	for _, v := range vs {
		sp.Mean += v
	}
	sp.Mean /= float64(len(vs))
	return sp
}

func (o Options) wants(group string) bool {
	return len(o.Only) == 0 || slices.Contains(o.Only, group)
}

// Report is what orchestrate bench measures; docs/bench.md defines
// every figure and its scenario.
type Report struct {
	AsyncSpeedup      float64 `json:"async_speedup"`
	HindsightOverhead float64 `json:"hindsight_overhead"`
	BusyFraction      float64 `json:"busy_fraction"`
	CPUMicrosPerTurn  float64 `json:"cpu_us_per_turn"`
	// CPUMicrosPerTurnLocal is cpu_us_per_turn with policy.tokenize local
	// (environment text and prompts tokenized in this process, no
	// /tokenize round trips), the median of runs paired with the others.
	CPUMicrosPerTurnLocal float64 `json:"cpu_us_per_turn_local"`
	BytesPerInflightToken float64 `json:"bytes_per_inflight_token"`
	ReplicaScaling2       float64 `json:"replica_scaling_2"`
	ReplicaScaling4       float64 `json:"replica_scaling_4"`
	// PrefixHitRateSticky and PrefixHitRateSpread are the affinity
	// group's share of prompt tokens served from the replicas' prefix
	// caches with policy.affinity trajectory and none, and
	// AffinitySpeedup its rollout time without affinity over with.
	PrefixHitRateSticky float64 `json:"prefix_hit_rate_sticky"`
	PrefixHitRateSpread float64 `json:"prefix_hit_rate_spread"`
	AffinitySpeedup     float64 `json:"affinity_speedup"`
	RetrieverCallsSaved float64 `json:"retriever_calls_saved"`
	// CPUMicrosPerTurnRealVLLM and CPUMicrosPerTurnRealSim are the
	// cpu-real group's medians: the orchestrator's CPU per policy turn
	// against real policy servers (Options.RealPolicy) and against the
	// simulator with the same rollout settings, run in alternating pairs
	// (0 when the group did not run).
	CPUMicrosPerTurnRealVLLM float64 `json:"cpu_us_per_turn_real_policy,omitempty"`
	CPUMicrosPerTurnRealSim  float64 `json:"cpu_us_per_turn_real_sim,omitempty"`
	// CPUSecondsPerPaperStep is cpu_us_per_turn over a paper-scale step's
	// benchPaperTurns policy turns, in seconds: the control plane's CPU
	// next to a step's minutes of GPU time (docs/bench.md).
	CPUSecondsPerPaperStep float64 `json:"cpu_seconds_per_paper_step"`
	// Spreads holds each scheduling figure over the seeds (async_speedup,
	// busy_fraction, retriever_calls_saved, hindsight_overhead,
	// replica_scaling_2, replica_scaling_4): the figures above are their
	// means.
	Spreads map[string]Spread `json:"spreads"`
	// Scenarios holds the raw measurements behind the figures, by
	// scenario name; a scheduling scenario's name ends in -s<seed>.
	Scenarios map[string]map[string]float64 `json:"scenarios"`
	// Simulated is always true: the figures come from the simulator's
	// latency model.
	Simulated bool    `json:"simulated"`
	Seconds   float64 `json:"seconds"`
}

// benchPaperTurns is the policy turns of a paper-scale step at most: 2,560
// trajectories (512 questions x 5) of up to 4 turns (docs/gpu.md).
const benchPaperTurns = 2560 * 4

// benchLatency is the simulated GPU and servers of the timed scenarios: a
// vLLM-like replica (decode step 6 ms + 0.03 ms per running sequence,
// 1 us per token beyond a step's 512-token compute slack, 8192-token prefill
// chunks, capacity 256), long-tail generation lengths (60 hidden thinking
// tokens on average, lognormal sigma 1), a 50 ms judge, a trainer at 1 ms per
// datum and 100 ms per optimiser step, and a retriever at 10 ms per call plus
// 0.5 ms per query.
var benchLatency = []string{
	"sim.capacity=256", "sim.decode_ms=6", "sim.decode_per_seq_ms=0.03",
	"sim.prefill_us_per_token=1", "sim.prefill_free_tokens=512", "sim.prefill_chunk_tokens=8192",
	"sim.think_tokens=60", "sim.think_sigma=1",
	"sim.judge_ms=50", "sim.trainer_datum_ms=1", "sim.trainer_step_ms=100",
	"sim.retriever_batch_ms=10", "sim.retriever_query_ms=0.5",
}

// benchPrefillUSPerToken is the affinity group's prefill cost, in
// microseconds a token: Qwen2.5-3B's forward pass is about 2 x 2.77e9
// non-embedding parameters = 5.5 GFLOP a token, and an H100's dense bf16
// peak of 989 TFLOPS at 40% utilisation prefills a token in about 14 us
// (an estimate, docs/bench.md). The other groups keep benchLatency's
// 1 us: they measure scheduling, which prefill barely moves.
const benchPrefillUSPerToken = 14.0

// benchLongTailQuestions are the questions (x5 samples, all in flight on
// one replica) of the async, lockstep, plain and hindsight scenarios: at
// 32 (before issue 36) async_speedup's standard deviation over ten seeds
// was 0.30, one long trajectory setting the async makespan; at 48 it is
// 0.19 (docs/bench.md, "How many seeds").
const benchLongTailQuestions = 48

// benchCommon makes every scenario one training step with no evaluation.
var benchCommon = []string{
	"train.steps=1", "output.trajectories=0", "judge.concurrency=256",
	"eval.datasets.nq=", "eval.datasets.triviaqa=", "eval.datasets.popqa=", "eval.datasets.hotpotqa=",
	"eval.datasets.2wikimultihopqa=", "eval.datasets.musique=", "eval.datasets.bamboogle=",
}

// benchOutcome is one scenario run's measurements.
type benchOutcome struct {
	rollout, wall, busy float64
	// throughput is trajectories per second until 80% of them finished,
	// the steady state before the tail.
	throughput float64
	// hitRate is the share of the policy replicas' prompt tokens served
	// from their prefix caches during the run.
	hitRate         float64
	trajectories    int
	turns           int
	searches, calls int64
}

// Bench runs the fixed scenarios side by side and returns the figures.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	t0 := time.Now()
	rep := &Report{Scenarios: map[string]map[string]float64{}, Simulated: true}
	n := func(v int) int { return max(1, int(float64(v)*o.Scale+0.5)) }
	run := func(name string, sets ...string) (*benchOutcome, error) {
		all := append(append(append([]string{}, benchCommon...), benchLatency...), sets...)
		all = append(all, "output.dir="+filepath.Join(o.Dir, name))
		fmt.Fprintf(o.Out, "bench: %s ...\n", name)
		out, err := benchRun(ctx, o.Recipe, all)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", name, err)
		}
		rep.Scenarios[name] = map[string]float64{"rollout_seconds": out.rollout, "step_seconds": out.wall,
			"busy_seconds": out.busy, "trajectories": float64(out.trajectories), "turns": float64(out.turns),
			"searches": float64(out.searches), "retriever_calls": float64(out.calls), "throughput_80": out.throughput,
			"prefix_hit_rate": out.hitRate}
		fmt.Fprintf(o.Out, "bench: %s: %d trajectories, rollout %.2fs, step %.2fs\n", name, out.trajectories, out.rollout, out.wall)
		return out, nil
	}
	// The scheduling figures, each over every seed of o.Seeds: a figure
	// set by the paths a seed's trajectories happen to take (async_speedup
	// is the longest trajectory's critical path against the sum of each
	// round's slowest) is that seed's luck, so the report is the mean over
	// seeds with its range (Report.Spreads).
	seeds := o.Seeds
	if len(seeds) == 0 {
		seeds = DefaultSeeds()
	}
	// Each figure's values with the seeds they were measured at (a seed
	// can give no value: retriever_calls_saved without a search).
	type measured struct {
		seeds  []int64
		values []float64
	}
	per := map[string]*measured{}
	for si, seed := range seeds {
		add := func(key string, v float64) {
			if per[key] == nil {
				per[key] = &measured{}
			}
			per[key].seeds = append(per[key].seeds, seed)
			per[key].values = append(per[key].values, v)
		}
		seedSet, sfx := fmt.Sprintf("seed=%d", seed), fmt.Sprintf("-s%d", seed)
		// Long-tail rollouts, async and lockstep, on one replica.
		longTail := []string{fmt.Sprintf("train.batch_size=%d", n(benchLongTailQuestions)), "train.group_size=5", "policy.concurrency=256", seedSet}
		if o.wants("speedup") {
			async, err := run("async"+sfx, append(longTail, "hindsight.enabled=false", "rollout.schedule=async")...)
			if err != nil {
				return nil, err
			}
			lock, err := run("lockstep"+sfx, append(longTail, "hindsight.enabled=false", "rollout.schedule=lockstep")...)
			if err != nil {
				return nil, err
			}
			add("async_speedup", lock.rollout/async.rollout)
			add("busy_fraction", min(async.busy/async.rollout, 1))
			if async.searches > 0 {
				add("retriever_calls_saved", 1-float64(async.calls)/float64(async.searches))
			}
		}
		// Hindsight against plain GRPO: the same step, the order
		// alternating from seed to seed (plain first, then hindsight
		// first), so that a drift in the machine's pace does not favour
		// one side.
		if o.wants("hindsight") {
			var plain, hs *benchOutcome
			for k := range 2 {
				var err error
				if (si+k)%2 == 0 {
					plain, err = run("plain"+sfx, append(longTail, "hindsight.enabled=false")...)
				} else {
					hs, err = run("hindsight"+sfx, append(longTail, "hindsight.enabled=true")...)
				}
				if err != nil {
					return nil, err
				}
			}
			add("hindsight_overhead", hs.wall/plain.wall)
		}
		// Replica scaling: the same load per replica on 1, 2 and 4 replicas.
		if o.wants("replicas") {
			var tput [3]float64
			for i, reps := range []int{1, 2, 4} {
				urls := strings.TrimSuffix(strings.Repeat("embedded,", reps), ",")
				out, err := run(fmt.Sprintf("replicas-%d%s", reps, sfx), "policy.urls="+urls, "policy.concurrency=64", "sim.capacity=64",
					fmt.Sprintf("train.batch_size=%d", n(40)*reps), "train.group_size=4", "hindsight.enabled=false", seedSet)
				if err != nil {
					return nil, err
				}
				tput[i] = out.throughput
			}
			if tput[0] > 0 {
				add("replica_scaling_2", tput[1]/tput[0])
				add("replica_scaling_4", tput[2]/tput[0])
			}
		}
		// Trajectory affinity: multi-turn rollouts on 4 replicas with
		// prefix caching, each trajectory pinned to a replica or every
		// turn to the least-loaded one, the order alternating by seed. A
		// turn's prompt is the previous turn's plus its output and
		// passages, so only a pinned trajectory finds it cached; the
		// prefill is charged at benchPrefillUSPerToken, and the agent
		// searches as a trained one does (sim.agent.search_bias).
		if o.wants("affinity") {
			var sticky, spread *benchOutcome
			for k := range 2 {
				common := []string{"policy.urls=embedded,embedded,embedded,embedded", "policy.concurrency=64", "sim.capacity=64",
					// A trained agent's turns: 2.7 searches a trajectory
					// (0.75 at the base model's 0).
					"sim.agent.search_bias=2",
					"sim.prefix_caching=true", fmt.Sprintf("sim.prefill_us_per_token=%g", benchPrefillUSPerToken),
					fmt.Sprintf("train.batch_size=%d", n(40)*4), "train.group_size=4", "hindsight.enabled=false", seedSet}
				var err error
				if (si+k)%2 == 0 {
					sticky, err = run("affinity-sticky"+sfx, append(common, "policy.affinity=trajectory")...)
				} else {
					spread, err = run("affinity-spread"+sfx, append(common, "policy.affinity=none")...)
				}
				if err != nil {
					return nil, err
				}
			}
			add("prefix_hit_rate_sticky", sticky.hitRate)
			add("prefix_hit_rate_spread", spread.hitRate)
			if sticky.rollout > 0 {
				add("affinity_speedup", spread.rollout/sticky.rollout)
			}
		}
	}
	means := map[string]*float64{"async_speedup": &rep.AsyncSpeedup, "busy_fraction": &rep.BusyFraction,
		"retriever_calls_saved": &rep.RetrieverCallsSaved, "hindsight_overhead": &rep.HindsightOverhead,
		"replica_scaling_2": &rep.ReplicaScaling2, "replica_scaling_4": &rep.ReplicaScaling4,
		"prefix_hit_rate_sticky": &rep.PrefixHitRateSticky, "prefix_hit_rate_spread": &rep.PrefixHitRateSpread,
		"affinity_speedup": &rep.AffinitySpeedup}
	rep.Spreads = map[string]Spread{}
	for key, m := range per {
		sp := newSpread(m.seeds, m.values)
		rep.Spreads[key] = sp
		*means[key] = sp.Mean
	}
	// The control plane's own cost, against zero-latency servers in another
	// process.
	// It runs benchCPURuns times, each from scratch (its own simulator
	// process, connections and trajectories); the figures are the median
	// run's, so that one run disturbed by other work on a shared machine
	// does not decide them. Every run is in Scenarios (cpu-1, ...).
	if o.SimCommand != nil && o.wants("cpu") {
		// Each run is followed by one that tokenizes in process
		// (policy.tokenize=local), so that the two are compared at the
		// same machine pace.
		var runs, locals []map[string]float64
		for i := range benchCPURuns {
			var pair [2]map[string]float64
			for k, v := range []struct{ name, set string }{
				{fmt.Sprintf("cpu-%d", i+1), "policy.tokenize=" + recipes.TokenizeServer},
				{fmt.Sprintf("cpu-local-%d", i+1), "policy.tokenize=" + recipes.TokenizeLocal},
			} {
				fmt.Fprintf(o.Out, "bench: %s ...\n", v.name)
				cpu, err := benchCPU(ctx, o, n(400), v.name, v.set)
				if err != nil {
					return nil, fmt.Errorf("scenario %s: %w", v.name, err)
				}
				fmt.Fprintf(o.Out, "bench: %s: %.0f turns, %.0f us CPU per turn\n", v.name, cpu["turns"], cpu["cpu_us_per_turn"])
				rep.Scenarios[v.name] = cpu
				pair[k] = cpu
			}
			runs, locals = append(runs, pair[0]), append(locals, pair[1])
		}
		cpu := medianRun(runs, "cpu_us_per_turn")
		rep.Scenarios["cpu"] = cpu
		rep.Scenarios["cpu-local"] = medianRun(locals, "cpu_us_per_turn")
		rep.CPUMicrosPerTurn = cpu["cpu_us_per_turn"]
		rep.CPUMicrosPerTurnLocal = rep.Scenarios["cpu-local"]["cpu_us_per_turn"]
		rep.BytesPerInflightToken = cpu["bytes_per_token"]
		rep.CPUSecondsPerPaperStep = rep.CPUMicrosPerTurn * benchPaperTurns / 1e6
	}
	if o.SimCommand != nil && len(o.RealPolicy) > 0 && o.wants("cpu-real") {
		var reals, sims []map[string]float64
		for i := range benchRealPairs {
			order := []bool{true, false} // the real side first, then the simulator
			if i%2 == 1 {
				order = []bool{false, true} // and the other way round
			}
			for _, real := range order {
				name := fmt.Sprintf("cpu-real-sim-%d", i+1)
				var policySets []string
				if real {
					name, policySets = fmt.Sprintf("cpu-real-policy-%d", i+1), o.RealPolicy
				}
				fmt.Fprintf(o.Out, "bench: %s ...\n", name)
				extra := append([]string{"policy.tokenize=" + recipes.TokenizeLocal}, o.RealRollout...)
				cpu, err := benchCPUWith(ctx, o, n(benchRealBatch), name, policySets, extra...)
				if err != nil {
					return nil, fmt.Errorf("scenario %s: %w", name, err)
				}
				fmt.Fprintf(o.Out, "bench: %s: %.0f turns, %.0f us CPU per turn\n", name, cpu["turns"], cpu["cpu_us_per_turn"])
				rep.Scenarios[name] = cpu
				if real {
					reals = append(reals, cpu)
				} else {
					sims = append(sims, cpu)
				}
			}
		}
		rep.Scenarios["cpu-real-policy"] = medianRun(reals, "cpu_us_per_turn")
		rep.Scenarios["cpu-real-sim"] = medianRun(sims, "cpu_us_per_turn")
		rep.CPUMicrosPerTurnRealVLLM = rep.Scenarios["cpu-real-policy"]["cpu_us_per_turn"]
		rep.CPUMicrosPerTurnRealSim = rep.Scenarios["cpu-real-sim"]["cpu_us_per_turn"]
	}
	rep.Seconds = time.Since(t0).Seconds()
	return rep, nil
}

// The cpu-real group: pairs of runs, questions per run (x5 samples).
const (
	benchRealPairs = 3
	benchRealBatch = 8
)

// benchRun runs one scenario recipe against its own embedded servers.
func benchRun(ctx context.Context, path string, sets []string) (*benchOutcome, error) {
	r, deps, emb, err := setup.LoadAndConnect(ctx, path, sets, nil, nil)
	if err != nil {
		return nil, err
	}
	defer emb.Close()
	// The policy replicas are the first of the simulator's policy servers
	// (the rest serve the KL reference).
	policies := emb.Sim().Policies[:min(len(r.Policy.URLs), len(emb.Sim().Policies))]
	// The replicas' busy seconds and prompt and cached tokens so far.
	counters := func() (b, prompt, cached float64) {
		for _, p := range policies {
			st := p.Stats()
			b += st.BusySeconds
			prompt += float64(st.PromptTokens)
			cached += float64(st.CachedTokens)
		}
		return b, prompt, cached
	}
	b0, p0, c0 := counters()
	rn := &orchestrator.Runner{Recipe: r, Deps: deps, Out: io.Discard, Overwrite: true}
	sum, err := rn.Run(ctx)
	if err != nil {
		return nil, err
	}
	st := sum.Steps[0]
	b1, p1, c1 := counters()
	out := &benchOutcome{rollout: st.PhaseSeconds["rollout"], wall: st.WallSeconds, busy: b1 - b0,
		trajectories: st.Trajectories, turns: int(st.MeanTurns*float64(st.Trajectories) + 0.5)}
	if p1 > p0 {
		out.hitRate = (c1 - c0) / (p1 - p0)
	}
	ro := rn.LastRollouts()
	if ends := ro.Finished; len(ends) > 0 {
		k := max(int(0.8*float64(len(ends)))-1, 0)
		out.throughput = float64(k+1) / ends[k]
	}
	if ro.RetrieverCalls > 0 {
		out.searches, out.calls = ro.Searches, ro.RetrieverCalls
	} else if er := emb.Retriever(); er != nil {
		out.calls, out.searches = er.Stats()
	}
	return out, nil
}

// benchCPU measures the orchestrator's CPU time per policy turn and heap
// per held token, rolling out batch*5 trajectories against zero-latency
// simulated servers started in a separate process.
func benchCPU(ctx context.Context, o Options, batch int, name string, extra ...string) (map[string]float64, error) {
	return benchCPUWith(ctx, o, batch, name, nil, extra...)
}

// benchCPUWith is benchCPU with the policy given by policySets (real
// servers: policy.urls and what their model needs) instead of the
// simulator's; the retriever stays the simulator process's either way.
func benchCPUWith(ctx context.Context, o Options, batch int, name string, policySets []string, extra ...string) (map[string]float64, error) {
	// The simulator runs in another process: its tokenizer is built here
	// from the same recipe (policy.tokenizer sim).
	sets := append(append([]string{}, benchCommon...), "policy.tokenizer="+recipes.TokenizerSim)
	sets = append(sets, extra...)
	urls, stop, err := startSimProcess(ctx, o.SimCommand, o.Recipe, sets)
	if err != nil {
		return nil, err
	}
	defer stop()
	sets = append(sets, "policy.urls="+strings.Join(urls.Policy, ","), "retriever.url="+urls.Retriever,
		"judge.url="+urls.Judge, "trainer.url="+urls.Trainer, "trainer.checkpoints_dir="+urls.Checkpoints,
		"output.dir="+filepath.Join(o.Dir, name))
	sets = append(sets, policySets...)
	calls := ometrics.New()
	r, deps, emb, err := setup.LoadAndConnect(ctx, o.Recipe, sets, nil, nil, setup.WithMetrics(calls))
	if err != nil {
		return nil, err
	}
	defer emb.Close()
	train := []dataset.Question{}
	for _, f := range r.Train.Data {
		qs, err := dataset.Load(f)
		if err != nil {
			return nil, err
		}
		train = append(train, qs...)
	}
	rl, err := rollout.NewEngine(r, deps, nil)
	if err != nil {
		return nil, err
	}
	const group = 5
	trajs := make([]*rollout.Trajectory, 0, batch*group)
	for i := range batch {
		q := train[i%len(train)]
		for k := range group {
			trajs = append(trajs, &rollout.Trajectory{ID: fmt.Sprintf("b%d-%d", i, k), Group: i, Sample: k, Question: q})
		}
	}
	// Prompts first (one tokenization per question), outside the measure.
	for i := 0; i < len(trajs); i += group {
		ids, err := rl.PromptIDs(ctx, trajs[i].Question.Question, "")
		if err != nil {
			return nil, err
		}
		for k := range group {
			trajs[i+k].PromptIDs = ids
		}
	}
	tok0 := calls.Requests("policy", "/tokenize")
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rt0 := readRuntimeMetrics(benchRuntimeMetrics...)
	busy0, sim0 := machineBusy(), procCPU(urls.pid)
	user0, sys0 := processCPU()
	wall0 := time.Now()
	var turns atomic.Int64
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(benchCPUConcurrency)
	sp := policy.Neutral()
	for _, t := range trajs {
		p.Go(func(ctx context.Context) error {
			err := rl.Rollout(ctx, t, r.Policy.Model, sp, roles.Seed(r.Seed, int64(t.Group), int64(t.Sample)))
			turns.Add(int64(len(t.Turns)))
			return err
		})
	}
	if err := p.Wait(); err != nil {
		return nil, err
	}
	user1, sys1 := processCPU()
	busy1, sim1 := machineBusy(), procCPU(urls.pid)
	rt1 := readRuntimeMetrics(benchRuntimeMetrics...)
	user, sys := user1-user0, sys1-sys0
	cpu := user + sys
	wall := time.Since(wall0).Seconds()
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	tokens := 0
	for _, t := range trajs {
		tokens += len(t.PromptIDs) + len(t.Tokens)
	}
	held := float64(int64(m1.HeapAlloc) - int64(m0.HeapAlloc))
	runtime.KeepAlive(trajs)
	out := map[string]float64{
		"trajectories": float64(len(trajs)), "turns": float64(turns.Load()), "cpu_seconds": cpu, "user_seconds": user, "system_seconds": sys, "wall_seconds": wall,
		"cpu_us_per_turn": cpu / float64(turns.Load()) * 1e6, "tokens": float64(tokens),
		"heap_bytes": held, "bytes_per_token": held / float64(tokens),
	}
	// The Go runtime's own account of the same window, to see where the
	// CPU goes: its estimate of GC CPU time, and allocations per turn; and
	// the collector's setting (GOGC) in force.
	for i := range benchRuntimeMetrics {
		d := rt1[i] - rt0[i]
		if i > 0 {
			d /= float64(turns.Load())
		}
		out[benchRuntimeKeys[i]] = d
	}
	out["gogc"] = readRuntimeMetrics("/gc/gogc:percent")[0]
	// The work the figure is per turn of: turns by kind, retriever calls
	// (the searches batched into them), /tokenize calls. Two runs that do
	// different work are not the same measurement (docs/bench.md).
	for _, t := range trajs {
		for _, tr := range t.Turns {
			switch tr.Action {
			case format.ActionSearch:
				out["turns_search"]++
			case format.ActionAnswer:
				out["turns_answer"]++
			default:
				out["turns_invalid"]++
			}
		}
	}
	searches, rcalls := rl.SearchStats()
	out["searches"], out["retriever_calls"] = float64(searches), float64(rcalls)
	out["tokenize_calls"] = calls.Requests("policy", "/tokenize") - tok0
	// How busy the machine was with other work meanwhile (neither this
	// process nor the simulator): CPU time per unit of work grows with it
	// on a shared machine. Linux only; absent elsewhere.
	if busy1 > 0 {
		other := max(busy1-busy0-cpu-(sim1-sim0), 0)
		out["sim_cpu_seconds"] = sim1 - sim0
		out["other_cpu_seconds"] = other
		out["other_cpu_share"] = other / (wall * float64(runtime.NumCPU()))
	}
	return out, nil
}

// benchRuntimeMetrics are read around the CPU scenario's rollouts and
// reported under benchRuntimeKeys (all but the first per turn).
var (
	benchRuntimeMetrics = []string{"/cpu/classes/gc/total:cpu-seconds", "/gc/heap/allocs:bytes", "/gc/heap/allocs:objects", "/gc/cycles/total:gc-cycles"}
	benchRuntimeKeys    = []string{"gc_cpu_seconds", "alloc_bytes_per_turn", "allocs_per_turn", "gc_cycles_per_turn"}
)

// readRuntimeMetrics reads runtime/metrics values as floats (0 for one
// this Go does not have).
func readRuntimeMetrics(names ...string) []float64 {
	samples := make([]metrics.Sample, len(names))
	for i, name := range names {
		samples[i].Name = name
	}
	metrics.Read(samples)
	out := make([]float64, len(samples))
	for i, s := range samples {
		switch s.Value.Kind() {
		case metrics.KindFloat64:
			out[i] = s.Value.Float64()
		case metrics.KindUint64:
			out[i] = float64(s.Value.Uint64())
		}
	}
	return out
}

// processCPU is this process's user and system CPU time, in seconds.
func processCPU() (user, sys float64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6, float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
}

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// machineBusy is the CPU seconds the machine has spent busy (not idle or
// waiting for I/O) since boot, from /proc/stat; 0 where unreadable.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	busy := 0.0
	// user nice system idle iowait irq softirq steal
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0
		}
		busy += n
	}
	return busy / clockTicks
}

// procCPU is process pid's user plus system CPU seconds, from
// /proc/PID/stat; 0 where unreadable.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the first, utime and stime the 12th and 13th.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return (ut + st) / clockTicks
}

// simURLs is what `orchestrate serve sim` prints.
type simURLs struct {
	Policy      []string `json:"policy"`
	Judge       string   `json:"judge"`
	Trainer     string   `json:"trainer"`
	Retriever   string   `json:"retriever"`
	Checkpoints string   `json:"checkpoints_dir"`
	// pid is the simulator process's.
	pid int
}

// startSimProcess starts `orchestrate serve sim RECIPE --set ...` and reads
// its addresses; stop ends it.
func startSimProcess(ctx context.Context, argv []string, recipe string, sets []string) (simURLs, func(), error) {
	args := append(append([]string{}, argv[1:]...), recipe)
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return simURLs{}, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return simURLs{}, nil, err
	}
	if err := cmd.Start(); err != nil {
		return simURLs{}, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	stop := func() {
		_ = stdin.Close() // serve sim stops when its stdin pipe closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return simURLs{}, nil, fmt.Errorf("serve sim printed no addresses: %w", err)
	}
	var u simURLs
	if err := json.Unmarshal([]byte(line), &u); err != nil || len(u.Policy) == 0 {
		stop()
		return simURLs{}, nil, errors.Join(fmt.Errorf("serve sim printed %q", strings.TrimSpace(line)), err)
	}
	u.pid = cmd.Process.Pid
	return u, stop, nil
}

// BenchTargets are the targets, for the table.
var benchTargets = []struct {
	key, target, scenario string
	get                   func(*Report) float64
	// optional rows are left out when their group did not run (0).
	optional bool
}{
	{"async_speedup", ">= 1.5", "rollout makespan, lockstep / async, long-tail workload", func(r *Report) float64 { return r.AsyncSpeedup }, false},
	{"hindsight_overhead", "<= 1.05", "step wall time, hindsight / plain GRPO", func(r *Report) float64 { return r.HindsightOverhead }, false},
	{"busy_fraction", ">= 0.95", "share of the async rollout with policy work running", func(r *Report) float64 { return r.BusyFraction }, false},
	{"cpu_us_per_turn", "<= 400", "orchestrator CPU per policy turn, servers in another process", func(r *Report) float64 { return r.CPUMicrosPerTurn }, false},
	{"cpu_us_per_turn_local", "-", "the same with policy.tokenize local (no /tokenize round trips)", func(r *Report) float64 { return r.CPUMicrosPerTurnLocal }, false},
	{"cpu_seconds_per_paper_step", "<= 4", "cpu_us_per_turn x 10,240 turns (a paper-scale step), in seconds", func(r *Report) float64 { return r.CPUSecondsPerPaperStep }, false},
	{"cpu_us_per_turn_real_policy", "-", "cpu-real: orchestrator CPU per turn against the real policy servers (--real-policy-set)", func(r *Report) float64 { return r.CPUMicrosPerTurnRealVLLM }, true},
	{"cpu_us_per_turn_real_sim", "-", "cpu-real: the same rollouts against the simulator, paired", func(r *Report) float64 { return r.CPUMicrosPerTurnRealSim }, true},
	{"bytes_per_inflight_token", "-", "orchestrator heap per token held by trajectories", func(r *Report) float64 { return r.BytesPerInflightToken }, false},
	{"replica_scaling_2", ">= 1.8", "throughput, 2 replicas / 1", func(r *Report) float64 { return r.ReplicaScaling2 }, false},
	{"replica_scaling_4", ">= 3.4", "throughput, 4 replicas / 1", func(r *Report) float64 { return r.ReplicaScaling4 }, false},
	{"prefix_hit_rate_sticky", "-", "affinity: share of prompt tokens from the replica's prefix cache, trajectories pinned (4 replicas)", func(r *Report) float64 { return r.PrefixHitRateSticky }, true},
	{"prefix_hit_rate_spread", "-", "affinity: the same, every turn to the least-loaded replica", func(r *Report) float64 { return r.PrefixHitRateSpread }, true},
	{"affinity_speedup", "> 1", "affinity: rollout time, spread / sticky", func(r *Report) float64 { return r.AffinitySpeedup }, true},
	{"retriever_calls_saved", "-", "share of searches without an HTTP call of their own", func(r *Report) float64 { return r.RetrieverCallsSaved }, false},
}

// WriteTable prints the figures with their targets.
func WriteTable(w io.Writer, r *Report) error {
	t := tablewriter.NewTable(w, tablewriter.WithConfig(tablewriter.Config{
		Header: tw.CellConfig{Formatting: tw.CellFormatting{AutoFormat: tw.Off}},
	}))
	t.Header("figure", "value", "range over seeds", "target", "measured as")
	for _, b := range benchTargets {
		if b.optional && b.get(r) == 0 {
			continue
		}
		if err := t.Append(b.key, fmt.Sprintf("%.3f", b.get(r)), r.rangeCell(b.key), b.target, b.scenario); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if seeds := r.seedsMeasured(); seeds != nil {
		if _, err := fmt.Fprintf(w, "scheduling figures: the mean over recipe seeds %s; the range is the lowest and highest seed's\n", seedList(seeds)); err != nil {
			return err
		}
	}
	for _, k := range []string{"cpu", "cpu-local"} {
		if c := r.Scenarios[k]; c != nil {
			if _, err := fmt.Fprintln(w, WorkLine(k, c)); err != nil {
				return err
			}
		}
	}
	_, err := fmt.Fprintf(w, "SIMULATED: figures from the simulator's latency model (docs/bench.md); %.0f s on %d CPUs.\n", r.Seconds, runtime.NumCPU())
	return err
}

// rangeCell is a figure's range over seeds as the tables print it,
// "low-high (seeds)", or "-" for a figure not measured over seeds.
func (r *Report) rangeCell(key string) string {
	if sp, ok := r.Spreads[key]; ok && len(sp.Values) > 0 {
		return fmt.Sprintf("%.3f-%.3f (%d)", sp.Min, sp.Max, len(sp.Values))
	}
	return "-"
}

// seedsMeasured returns the seeds of the first scheduling figure in the
// table's order that was measured over seeds (nil for none): the seeds
// the table's caption names.
func (r *Report) seedsMeasured() []int64 {
	for _, b := range benchTargets {
		if sp, ok := r.Spreads[b.key]; ok {
			return sp.Seeds
		}
	}
	return nil
}

// seedList writes seeds as "1-5" when they run on one by one, else
// "1, 3, 7".
func seedList(seeds []int64) string {
	consecutive := len(seeds) > 1
	for i := 1; i < len(seeds); i++ {
		consecutive = consecutive && seeds[i] == seeds[i-1]+1
	}
	if consecutive {
		return fmt.Sprintf("%d-%d", seeds[0], seeds[len(seeds)-1])
	}
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = strconv.FormatInt(s, 10)
	}
	return strings.Join(parts, ", ")
}

// WorkLine says the work a CPU run's figure is per turn of: turns by
// kind, the searches and the retriever calls they took, the /tokenize
// calls, and the allocations per turn.
func WorkLine(name string, c map[string]float64) string {
	return fmt.Sprintf("%s: %.0f us per turn over %.0f turns (%.0f search, %.0f answer, %.0f invalid), %.0f searches in %.0f retriever calls, %.0f /tokenize calls, %.0f allocations (%.0f bytes) per turn",
		name, c["cpu_us_per_turn"], c["turns"], c["turns_search"], c["turns_answer"], c["turns_invalid"], c["searches"], c["retriever_calls"],
		c["tokenize_calls"], c["allocs_per_turn"], c["alloc_bytes_per_turn"])
}

// benchSimArgs is the argv of this binary's `serve sim`.
func SimCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe, "serve", "sim"}, nil
}

// benchCPUConcurrency is the trajectories in flight in the CPU scenario.
var benchCPUConcurrency = 64

// benchCPURuns is how many times the CPU scenario runs.
const benchCPURuns = 5

// medianRun returns the run whose key is the median (the lower middle one
// for an even count); nil for none.
func medianRun(runs []map[string]float64, key string) map[string]float64 {
	if len(runs) == 0 {
		return nil
	}
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b map[string]float64) int { return cmp.Compare(a[key], b[key]) })
	return sorted[(len(sorted)-1)/2]
}
