"""Drive a Tinker API server with the official Tinker SDK, as its users do.

A LoRA training client: forward_backward, forward, optim_step, a named sampler save,
a training state save, save_weights_and_get_sampling_client, sampling with
and without prompt logprobs, the REST client's checkpoint listing and a
checkpoint delete. Prints one JSON object that says what each call gave
(shapes and kinds, not values), so that the same script run against the
real SkyRL and against `orchestrate serve sim` can be compared
(sim/real/sdk_test.go). A call that raises is recorded with its exception's
class and status, and the script goes on.

Usage: python sdk_drive.py BASE_URL BASE_MODEL TOKENS_JSON
TOKENS_JSON is a JSON list of token ids of the base model's vocabulary.
"""

import json
import sys

import tinker
from tinker import types


def done(x):
    """The value of an SDK call: newer SDKs return futures (.result()),
    older ones the object itself."""
    return x.result() if hasattr(x, "result") and callable(x.result) else x


def main():
    base_url, base_model, tokens = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out = {"sdk_version": tinker.__version__}

    tc = None

    def call(name, fn):
        try:
            value = fn()
            out[name] = {"ok": True}
            return value
        except Exception as e:  # recorded, not raised: the next call still runs
            status = getattr(e, "status_code", None)
            msg = str(e)[:300]
            if tc is not None:
                msg = msg.replace(tc.model_id, "<model_id>")
            out[name] = {"ok": False, "error": type(e).__name__, "status": status, "message": msg}
            return None

    # SkyRL checks no key; the SDK wants one that looks like Tinker's.
    sc = tinker.ServiceClient(base_url=base_url, api_key="tml-hindsearch-real")
    caps = call("get_server_capabilities", lambda: sc.get_server_capabilities())
    if caps is not None:
        out["get_server_capabilities"]["models"] = sorted(m.model_name for m in caps.supported_models)
    tc = call("create_lora_training_client", lambda: done(sc.create_lora_training_client(base_model=base_model, rank=8, seed=1)))
    if tc is None:
        print(json.dumps(out, sort_keys=True))
        return
    n = len(tokens) - 1
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:n]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "weights": [0.0] * (n // 2) + [1.0] * (n - n // 2),
            "logprobs": [0.0] * (n // 2) + [-2.0] * (n - n // 2),
            "advantages": [0.0] * (n // 2) + [1.0] * (n - n // 2),
        },
    )
    fb = call("forward_backward", lambda: tc.forward_backward([datum, datum], "importance_sampling").result())
    if fb is not None:
        outs = fb.loss_fn_outputs
        out["forward_backward"]["outputs"] = len(outs)
        out["forward_backward"]["output_keys"] = sorted(outs[0].keys()) if outs else []
        lp = outs[0].get("logprobs") if outs else None
        out["forward_backward"]["logprobs_len"] = len(lp.data) if lp is not None else None
        out["forward_backward"]["loss_fn_output_type"] = fb.loss_fn_output_type
    fw = call("forward", lambda: done(tc.forward([datum], "importance_sampling")))
    if fw is not None:
        out["forward"]["outputs"] = len(fw.loss_fn_outputs)
    call("optim_step", lambda: tc.optim_step(types.AdamParams(learning_rate=1e-3)).result())
    saved = call("save_weights_for_sampler", lambda: tc.save_weights_for_sampler(name="sdk-s1").result())
    if saved is not None:
        out["save_weights_for_sampler"]["path_shape"] = saved.path.replace(tc.model_id, "<model_id>")
    state = call("save_state", lambda: tc.save_state("sdk-w1").result())
    if state is not None:
        out["save_state"]["path_shape"] = state.path.replace(tc.model_id, "<model_id>")
    samp = call("save_weights_and_get_sampling_client", lambda: done(tc.save_weights_and_get_sampling_client()))
    if samp is not None:
        prompt = types.ModelInput.from_ints(tokens)
        params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
        res = call("sample", lambda: samp.sample(prompt=prompt, num_samples=2, sampling_params=params).result())
        if res is not None:
            out["sample"]["sequences"] = len(res.sequences)
            out["sample"]["stop_reasons"] = sorted(str(s.stop_reason) for s in res.sequences)
            out["sample"]["tokens"] = [len(s.tokens) for s in res.sequences]
            out["sample"]["logprobs"] = [len(s.logprobs or []) for s in res.sequences]
        lps = call("compute_logprobs", lambda: samp.compute_logprobs(prompt).result())
        if lps is not None:
            out["compute_logprobs"]["len"] = len(lps)
            out["compute_logprobs"]["first_is_none"] = lps[0] is None
            out["compute_logprobs"]["finite"] = all(x is not None and x <= 0 for x in lps[1:])
    rc = tinker.RestClient(base_url=base_url, api_key="tml-hindsearch-real") if hasattr(tinker, "RestClient") else sc.create_rest_client()
    listed = call("list_checkpoints", lambda: rc.list_checkpoints(tc.model_id).result())
    if listed is not None:
        out["list_checkpoints"]["checkpoints"] = sorted(
            (c.checkpoint_type, c.checkpoint_id) for c in listed.checkpoints if not c.checkpoint_id.startswith("ss"))
    if saved is not None:
        call("delete_checkpoint", lambda: rc.delete_checkpoint_from_tinker_path(saved.path).result())
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
