"""Make the tiny Qwen3 model every real server of `make real` loads.

Made here, never downloaded: Qwen3ForCausalLM with random weights from a
fixed seed (hidden 64, 2 layers, 2 heads, 1 KV head, head_dim 32: the
smallest head vLLM's CPU attention takes), float32, in Hugging Face's
layout. The tokenizer is the program's built-in Qwen3 tokenizer: Qwen2.5's
tokenizer.json embedded in the Go binary
(clients/policy/tokenizer/qwen2.5/tokenizer.json.gz) with the four tokens
Qwen3 adds (ids 151665-151668, as tokenizer.Qwen3 adds them). The chat
template renders what the program's roles.Qwen3Chat renders (system, user
and assistant turns, no tools, no default system message); the real
servers' rendering of it is checked against the Go one by the tests.

generation_config.json carries sampling defaults on purpose (Qwen's
instruct models ship such defaults, which vLLM applies to any field a
request leaves out): a client that leaves a field to the server samples
differently, and the tests see it.

Random weights know no format: every turn would run to its token limit
and never search or answer, and a run against the real servers would never
meet retrieval, <information> blocks, answers or rewards. So the random
model then takes a short lesson (LESSON_STEPS AdamW steps on the token ids
`go run ./sim/real/teach` writes: Search-R1 prompts and turns that think,
search and answer, in the program's own format and tokenizer). It learns
the tags, not the questions: its searches and answers stay mostly wrong.

Usage: python make_model.py REPO_ROOT OUT_DIR LESSON_JSONL [SEED].
Deterministic on one machine (fixed seeds, fixed thread count), not across
processors: another CPU may make other weights, so what make real's tests
need of the model is checked here (checks: first turns that search,
critiques the program accepts) and a model that falls short exits 3 with
what it measured (run.sh then tries the next seed).
"""

import gzip
import hashlib
import json
import os
import sys

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, Qwen3Config

SEED = 20261203
LESSON_STEPS = 200
LESSON_BATCH = 16
LESSON_LR = 3e-3

# Qwen3's added tokens beyond Qwen2.5's (none special, none normalised).
QWEN3_ADDED = [
    (151665, "<tool_response>"),
    (151666, "</tool_response>"),
    (151667, "<think>"),
    (151668, "</think>"),
]

# What roles.Qwen3Chat renders: each message as
# "<|im_start|>{role}\n{content}<|im_end|>\n", then the generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tokenizer_files(repo, out):
    with gzip.open(os.path.join(repo, "clients/policy/tokenizer/qwen2.5/tokenizer.json.gz")) as f:
        tok = json.load(f)
    for tid, content in QWEN3_ADDED:
        tok["added_tokens"].append(
            {"id": tid, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": False})
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    added = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
             for t in tok["added_tokens"]}
    tokenizer_config(out, added)


def tokenizer_config(out, added):
    """Writes tokenizer_config.json and special_tokens_map.json beside a
    tokenizer.json whose added tokens are added (id -> their fields): a
    Qwen2 tokenizer with <|im_end|> as its end and <|endoftext|> as its
    pad, and the chat template roles.Qwen3Chat renders."""
    cfg = {
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 4096,
        "split_special_tokens": False,
        "add_prefix_space": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f, indent=2, sort_keys=True)


def teach(model, lesson):
    """LESSON_STEPS steps of AdamW on the lesson's trained tokens, in order."""
    opt = torch.optim.AdamW(model.parameters(), lr=LESSON_LR)
    pad = 151643
    for step in range(LESSON_STEPS):
        batch = lesson[step * LESSON_BATCH:(step + 1) * LESSON_BATCH]
        n = max(len(ex["ids"]) for ex in batch)
        ids = torch.full((len(batch), n), pad, dtype=torch.long)
        train = torch.zeros((len(batch), n), dtype=torch.bool)
        for i, ex in enumerate(batch):
            ids[i, :len(ex["ids"])] = torch.tensor(ex["ids"])
            train[i, :len(ex["train"])] = torch.tensor(ex["train"], dtype=torch.bool)
        # Right padding needs no mask: a causal model never attends ahead.
        hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
        sel = train[:, 1:]
        logits = model.lm_head(hidden[sel])
        loss = torch.nn.functional.cross_entropy(logits, ids[:, 1:][sel])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == LESSON_STEPS - 1:
            print(f"lesson step {step + 1}/{LESSON_STEPS}: loss {loss.item():.3f}", flush=True)
    model.eval()


# What make real's tests need of the model, checked on the lesson's last
# examples (never trained on), so that no test's outcome depends on what a
# model made on this processor happens to write: agent turns sampled at
# temperature 1 (the recipe's) must search in at least MIN_SEARCH of them,
# and critiques written greedily (judge.temperature 0) must be ones the
# program accepts (<|im_end|> within the recipe's 48 tokens, no agent tag)
# in at least MIN_CRITIQUE of them.
MIN_SEARCH = 0.8
MIN_CRITIQUE = 0.95


def checks(model, lesson, decode, seed):
    got = {"agent": [0, 0], "judge": [0, 0]}
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for ex in lesson[LESSON_STEPS * LESSON_BATCH:]:
            start = ex["train"].index(1)
            ids = torch.tensor([ex["ids"][:start]])
            text_ids = []
            ok = False
            past = None
            for _ in range(48):
                res = model(input_ids=ids, past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[0, -1]
                if ex["kind"] == "judge":
                    nxt = torch.argmax(logits).view(1)
                else:
                    nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
                ids = nxt.view(1, 1)
                text_ids.append(int(nxt))
                text = decode(text_ids)
                if ex["kind"] == "agent" and ("</search>" in text or "</answer>" in text):
                    ok = "</search>" in text
                    break
                if ex["kind"] == "judge" and text.endswith("<|im_end|>"):
                    ok = "<search>" not in text and "<answer>" not in text and "<information>" not in text
                    break
            got[ex["kind"]][0] += ok
            got[ex["kind"]][1] += 1
    search, critique = got["agent"][0] / got["agent"][1], got["judge"][0] / got["judge"][1]
    print(f"lesson learned: {got['agent'][0]}/{got['agent'][1]} sampled first turns search (need {MIN_SEARCH:.0%}), "
          f"{got['judge'][0]}/{got['judge'][1]} greedy critiques accepted (need {MIN_CRITIQUE:.0%})", flush=True)
    bad = []
    if search < MIN_SEARCH:
        bad.append(f"first turns search {search:.2f} < {MIN_SEARCH}")
    if critique < MIN_CRITIQUE:
        bad.append(f"critiques accepted {critique:.2f} < {MIN_CRITIQUE}")
    return bad


def main():
    repo, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        layer_types=["full_attention", "full_attention"],
        bos_token_id=151643,
        eos_token_id=151645,
        pad_token_id=151643,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else SEED
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tokenizer_files(repo, out)
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    with open(sys.argv[3]) as f:
        lesson = [json.loads(line) for line in f]
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)
    teach(model, lesson)
    bad = checks(model, lesson, decode, seed)
    model.save_pretrained(out, safe_serialization=True)
    # transformers writes config.json and generation_config.json; both are
    # rewritten here so that what every server reads is spelled out.
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    c["rope_theta"] = 1000000.0
    c["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    c["torch_dtype"] = "float32"
    c["dtype"] = "float32"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    gen = {
        "bos_token_id": 151643,
        "eos_token_id": [151645, 151643],
        "pad_token_id": 151643,
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.05,
    }
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
    h = hashlib.sha256()
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    print(f"tiny model: {out} (seed {seed}, model.safetensors sha256 {h.hexdigest()})", flush=True)
    if bad:
        print("lesson checks failed: " + "; ".join(bad), flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
