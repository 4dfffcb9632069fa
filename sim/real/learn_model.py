"""Make Qwen3-tiny-units, the model `make real-learn` trains through the program.

Made here, never downloaded, from the task `go run ./sim/real/learn` writes
(TASK_DIR): made-up storage units, questions listing four of them, and a
lesson in the Search-R1 format (sim/real/README.md, "A real model learns").

1. Its tokenizer: a byte-level BPE (Hugging Face tokenizers) trained on
   TASK_DIR/texts.txt with the made-up words taken out, Qwen2's
   pre-tokenizer (NFC, Qwen2's Split pattern, ByteLevel), then one merge
   chain a word of TASK_DIR/words.txt, so that every name and value is one
   token ("Ġ" and its letters); <|endoftext|>, <|im_start|>, <|im_end|> as
   added special tokens (ids 0-2) and the agent's tags as added tokens
   (about 5k entries for 1,100 units). The program's Go tokenizer reads
   the same tokenizer.json (run.sh holds it to these ids). With Qwen's
   152k vocabulary the output layer would be 99% of a step's work.
2. Its weights: Qwen3ForCausalLM, float32, hidden 256, 4 layers, 4 heads
   of 64 (4 KV heads), intermediate 512, tied embeddings, RoPE theta
   10,000 (about 3M parameters), with a copy circuit built in
   (construct): a previous-token head, then heads that copy a name at
   " Unit" and a value at <answer>. A model this small does not learn to
   copy from scratch in a lesson of minutes (sim/real/README.md,
   "Copying").
3. Its lesson: STEPS AdamW steps of BATCH examples on the lesson's trained
   segments (the agent's two turns), every weight trained. It teaches the
   format, to copy a listed unit into <search> and a value of the
   retrieved passage into <answer>, and to search the unit a "Hint:" line
   quotes; not which unit or which value the question asks for.
4. Acceptance checks, sampled at temperature 1 on held-out units
   (TASK_DIR/checks.jsonl), printed as one "lesson learned" line: turns
   closed (>= 0.95), first search on the asked unit (0.12-0.30: near the
   0.2 of a uniform choice), the right value after the right passage
   (0.2-0.5: near 1/3), the quoted unit searched under a hint (>= 0.85).
   A check outside its window exits 3 with what it measured: RL then
   either has nothing to select or nothing left to learn.

Usage: python learn_model.py TASK_DIR OUT_DIR [SEED]. Deterministic on one
machine (fixed seeds, one thread, the vocabulary walked in id order: two
makes give one model.safetensors); another processor may make other
weights, which is why the checks, not the weights' hash, decide.
"""

import hashlib
import json
import os
import random
import re
import sys

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, Qwen3Config

from make_model import tokenizer_config

VOCAB = 2048  # the BPE's cap before the words' merges
STEPS = 300
BATCH = 32
LR = float(os.environ.get("HINDSEARCH_LEARN_LR", 1e-3))
WARMUP = 20
# The previous-token head's RoPE phases are set for 10,000 (finer positions than
# Qwen3's 1,000,000 over a 512-token context).
ROPE_THETA = 10000.0
MAX_TURN = 32

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The agent's tags, each one added token (not special: the program reads
# them in the text): the token before a value is then always <answer>.
TAGS = ["<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>", "<information>",
        "</information>"]
PAD, EOS = 0, 2

# The acceptance windows (section 4 of the docstring).
WINDOWS = {
    "closed": (0.95, 1.0),
    "right_search": (0.12, 0.30),
    "right_value": (0.20, 0.50),
    "hint_followed": (0.85, 1.0),
}


def make_tokenizer(task, out):
    """The BPE: trained on the task's texts with the made-up words and the
    agent's tags taken out; then a chain of merges for each word (its first
    letter onto the space, then one letter at a time, ranked before every
    trained merge) so that each name and value is one token; the tags as
    added tokens; the three special tokens as ids 0-2."""
    with open(os.path.join(task, "words.txt")) as f:
        words = [w for w in f.read().split() if w]
    wordset = set(words)
    word_re = re.compile(r"\b[A-Z]{5}\b")

    def texts(strip):
        with open(os.path.join(task, "texts.txt")) as f:
            for line in f:
                text = json.loads(line)
                if strip:
                    for t in TAGS:
                        text = text.replace(t, " ")
                    text = word_re.sub(lambda m: "" if m.group(0) in wordset else m.group(0), text)
                yield text

    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts(True), trainer=trainer)
    j = json.loads(tok.to_str())
    vocab, merges = j["model"]["vocab"], j["model"]["merges"]
    chain = []
    for w in words:
        cur = "\u0120"  # Ġ: the byte-level space
        for ch in w:
            nxt = cur + ch
            if nxt not in vocab:
                vocab[nxt] = len(vocab)
                chain.append([cur, ch])
            cur = nxt
    j["model"]["merges"] = chain + merges
    for t in TAGS:
        j["added_tokens"].append({"id": len(vocab), "content": t, "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": False})
        vocab[t] = len(vocab)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    assert [tok.token_to_id(s) for s in SPECIAL] == [0, 1, 2], "special tokens are not ids 0-2"
    for w in words:
        assert len(tok.encode(" " + w, add_special_tokens=False).ids) == 1, f"{w} is not one token"
    for t in TAGS:
        assert tok.encode(t, add_special_tokens=False).ids == [tok.token_to_id(t)], f"{t} is not one token"
    # Every 20th text with Hugging Face's ids, for run.sh to hold the
    # program's Go tokenizer (orchestrate tokenize) to them.
    with open(os.path.join(out, "tokenizer-check.texts.jsonl"), "w") as ft, \
            open(os.path.join(out, "tokenizer-check.ids.jsonl"), "w") as fi:
        for i, text in enumerate(texts(False)):
            if i % 20 == 0:
                ft.write(json.dumps(text) + "\n")
                fi.write(json.dumps(tok.encode(text, add_special_tokens=False).ids, separators=(",", ":")) + "\n")
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, s in enumerate(SPECIAL)}
    for t in TAGS:
        added[str(tok.token_to_id(t))] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": False}
    tokenizer_config(out, added)
    return tok, words


def encode_lesson(tok, task, name="lesson.jsonl"):
    lesson = []
    with open(os.path.join(task, name)) as f:
        for line in f:
            ex = json.loads(line)
            ids, train = [], []
            for text, tr in ex["segments"]:
                seg = tok.encode(text, add_special_tokens=False).ids
                ids += seg
                train += [tr] * len(seg)
            lesson.append((ids, train))
    return lesson


# The model's residual stream (hidden 256), laid out by construct():
# C holds the made-up words' own vectors (what a copy moves), P what the
# previous-token head writes (the token before each position), R the
# other tokens' vectors and five features.
HIDDEN, HEADS, HEAD_DIM = 256, 4, 64
C, P = slice(0, 128), slice(128, 192)
F_CONST, F_NAME, F_VALUE, F_TRIG_NAME, F_TRIG_VALUE = 192, 193, 194, 195, 196
TAIL = slice(197, 256)
# Scales of the construction, set on this machine so that at step 0 the
# copies are near-certain and the rest of the logits near-uniform.
WORD_NORM, TAIL_NORM = 4.0, 1.0
PREV_GAIN, COPY_GAIN = 0.3, 3.0
PREV_NORM_W, COPY_NORM_W = 3.0, 1.5
# RoPE pairs (j, j + 32): the previous-token head uses the fastest eight,
# the copy heads the two slowest (about 1e-4 radians a position: content,
# not position, decides).
PREV_PAIRS, SLOW = range(8), (30, 31)


def construct(model, tok, words, seed):
    """Sets the weights of a copy circuit into the new model, so that it
    copies from the start instead of after the long plateau a model this
    small sits on (sim/real/README.md, "Copying"); the lesson then trains
    every weight.

    - Embeddings (tied): each made-up word a random vector of norm
      WORD_NORM in C and a feature (name or value) in R; every other token
      a random vector in R's tail, and the constant feature; " Unit" and
      <answer> the features that trigger a copy (of a name, of a value).
    - Layer 0, head 0: attends to the previous position (RoPE phases on
      the constant feature) and writes that token's R into P: the context
      a later head can tell a hinted or asked name by.
    - Layer 1: heads 0-1 attend, at a name trigger, to the names in the
      context (keys from the name feature) and copy their C (64 dimensions
      each); heads 2-3 the same for values at a value trigger.
    - Every other output projection (attention and MLP) starts at zero, so
      the stream reaches the (tied) output layer as built; the lesson
      trains them.
    """
    g = torch.Generator().manual_seed(seed)
    names, values = set(words[:len(words) // 4]), set(words[len(words) // 4:])
    vocab = tok.get_vocab()
    m = model.model
    with torch.no_grad():
        E = m.embed_tokens.weight
        E.zero_()
        # In id order: get_vocab() iterates a hash map, in another order in
        # every process, and each word draws its vector from g in turn.
        for t, i in sorted(vocab.items(), key=lambda kv: kv[1]):
            if i >= E.shape[0]:
                continue
            w = t[1:] if t.startswith("\u0120") else None
            if w in names or w in values:
                r = torch.randn(128, generator=g)
                E[i, C] = WORD_NORM * r / r.norm()
                E[i, F_NAME if w in names else F_VALUE] = 1.0
            else:
                r = torch.randn(TAIL.stop - TAIL.start, generator=g)
                E[i, TAIL] = TAIL_NORM * r / r.norm()
            E[i, F_CONST] = 1.0
        E[vocab["\u0120Unit"], F_TRIG_NAME] = 1.0
        E[vocab["<answer>"], F_TRIG_VALUE] = 1.0

        def rows(h):
            return slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)

        for layer in m.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        # Layer 0, head 0: the previous token.
        a0 = m.layers[0].self_attn
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2).double() / HEAD_DIM))
        for w in (a0.q_proj.weight, a0.k_proj.weight, a0.v_proj.weight):
            w[rows(0)] = 0
        for j in PREV_PAIRS:
            a0.k_proj.weight[j, F_CONST] = 1.0
            a0.q_proj.weight[j, F_CONST] = float(torch.cos(inv[j]))
            a0.q_proj.weight[j + HEAD_DIM // 2, F_CONST] = -float(torch.sin(inv[j]))
        a0.q_norm.weight.fill_(PREV_NORM_W)
        a0.k_norm.weight.fill_(PREV_NORM_W)
        a0.v_proj.weight[rows(0), 192:256] = torch.eye(64)
        a0.o_proj.weight[P, rows(0)] = PREV_GAIN * torch.eye(64)
        # Layer 1: the copy heads.
        a1 = m.layers[1].self_attn
        for h, (feat, trig, half) in enumerate([(F_NAME, F_TRIG_NAME, 0), (F_NAME, F_TRIG_NAME, 1),
                                                 (F_VALUE, F_TRIG_VALUE, 0), (F_VALUE, F_TRIG_VALUE, 1)]):
            for w in (a1.q_proj.weight, a1.k_proj.weight, a1.v_proj.weight):
                w[rows(h)] = 0
            base = h * HEAD_DIM
            a1.k_proj.weight[base + SLOW[0], F_CONST] = 0.3
            a1.k_proj.weight[base + SLOW[1], feat] = 1.0
            a1.q_proj.weight[base + SLOW[0], F_CONST] = 0.3
            a1.q_proj.weight[base + SLOW[1], trig] = 1.0
            cols = slice(half * 64, half * 64 + 64)
            a1.v_proj.weight[rows(h), cols] = torch.eye(64)
            a1.o_proj.weight[cols, rows(h)] = COPY_GAIN * torch.eye(64)
        a1.q_norm.weight.fill_(COPY_NORM_W)
        a1.k_norm.weight.fill_(COPY_NORM_W)


WORD_IDS = set()  # the made-up words' token ids (main sets them)


def stats(model, lesson, when):
    """Prints the lesson's loss on its trained tokens by kind: the made-up
    words (the copies), and everything else (the format)."""
    model.eval()
    sums = {"copies": [0.0, 0], "format": [0.0, 0]}
    with torch.no_grad():
        for ids, train in lesson:
            x = torch.tensor([ids])
            lp = torch.log_softmax(model(input_ids=x).logits[0, :-1], -1)
            for i in range(1, len(ids)):
                if train[i]:
                    k = "copies" if ids[i] in WORD_IDS else "format"
                    sums[k][0] -= lp[i - 1, ids[i]].item()
                    sums[k][1] += 1
    print(f"{when}: loss on copies {sums['copies'][0] / max(1, sums['copies'][1]):.3f}, "
          f"on the format {sums['format'][0] / max(1, sums['format'][1]):.3f}", flush=True)
    model.train()


def teach(model, lesson, steps, batch_size=BATCH, decay=True, what="lesson"):
    stats(model, lesson[:64], "before the lesson")
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / WARMUP) * (max(0.1, 1 - s / steps) if decay else 1.0))
    model.train()
    for step in range(steps):
        batch = [lesson[(step * batch_size + i) % len(lesson)] for i in range(batch_size)]
        n = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), n), PAD, dtype=torch.long)
        train = torch.zeros((len(batch), n), dtype=torch.bool)
        for i, (x, tr) in enumerate(batch):
            ids[i, :len(x)] = torch.tensor(x)
            train[i, :len(tr)] = torch.tensor(tr, dtype=torch.bool)
        hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
        sel = train[:, 1:]
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[sel]), ids[:, 1:][sel])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % (50 if what == "lesson" else 250) == 0 or step == steps - 1:
            print(f"{what} step {step + 1}/{steps}: loss {loss.item():.3f}", flush=True)
    model.eval()


def sample(model, tok, prompts, stops):
    """Samples up to MAX_TURN tokens at temperature 1 after each of prompts
    (token id lists), in one left-padded batch; each text is ended at its
    first stop string (kept), or None where none came."""
    n = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), n), PAD, dtype=torch.long)
    mask = torch.zeros((len(prompts), n), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MAX_TURN, do_sample=True,
                             temperature=1.0, top_k=0, top_p=1.0, pad_token_id=PAD, eos_token_id=EOS)
    texts = []
    for row in out[:, n:].tolist():
        text = tok.decode(row, skip_special_tokens=False)
        cut = [text.index(s) + len(s) for s in stops if s in text]
        texts.append(text[:min(cut)] if cut else None)
    return texts


def between(text, tag):
    if text is None:
        return None
    a, b = text.find(f"<{tag}>"), text.find(f"</{tag}>")
    if a < 0 or b < a:
        return None
    return text[a + len(tag) + 2:b].strip()


def acceptance(model, tok, task, seed):
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids
    torch.manual_seed(seed)
    with open(os.path.join(task, "checks.jsonl")) as f:
        checks = [json.loads(line) for line in f]
    n = len(checks)
    first = sample(model, tok, [enc(c["prompt"]) for c in checks], ["</search>", "</answer>"])
    second = sample(model, tok, [enc(c["prompt"]) + enc(c["right_turn"]) + enc(c["right_info"]) for c in checks],
                    ["</answer>", "</search>"])
    hinted = sample(model, tok, [enc(c["hinted_prompt"]) for c in checks], ["</search>", "</answer>"])
    closed = right_search = right_value = followed = 0
    chose = {}
    for c, t1, t2, t3 in zip(checks, first, second, hinted):
        q, a = between(t1, "search"), between(t2, "answer")
        closed += (q is not None) + (a is not None)
        right_search += q == c["asked"]
        if q in c["listed"]:
            chose[c["listed"].index(q)] = chose.get(c["listed"].index(q), 0) + 1
        right_value += a == c["gold"]
        followed += between(t3, "search") == c["quoted"]
    got = {"closed": closed / (2 * n), "right_search": right_search / n, "right_value": right_value / n,
           "hint_followed": followed / n}
    print(f"lesson learned: on {n} held-out units at temperature 1, turns closed {got['closed']:.2f}, "
          f"first search on the asked unit {got['right_search']:.2f}, right value after the right passage "
          f"{got['right_value']:.2f}, quoted unit searched under a hint {got['hint_followed']:.2f}; "
          f"searches by listed place {dict(sorted(chose.items()))}", flush=True)
    return [f"{k} {v:.3f} outside [{WINDOWS[k][0]:.2f}, {WINDOWS[k][1]:.2f}]" for k, v in got.items()
            if not WINDOWS[k][0] <= v <= WINDOWS[k][1]]


def main():
    task, out = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20261207
    steps = int(os.environ.get("HINDSEARCH_LEARN_LESSON_STEPS", STEPS))
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(seed)
    # One thread: with another process busy on the 2-core machine a lesson
    # step took 1.1-1.3 s on one thread and 2.2-4.9 s on two (OpenMP's
    # threads spin against it); and one order of every sum.
    torch.set_num_threads(1)
    tok, words = make_tokenizer(task, out)
    WORD_IDS.update(tok.token_to_id("\u0120" + w) for w in words)
    lesson = encode_lesson(tok, task)
    print(f"tokenizer: {tok.get_vocab_size()} entries; lesson: {len(lesson)} examples, "
          f"mean {sum(len(i) for i, _ in lesson) / len(lesson):.0f} tokens", flush=True)
    config = Qwen3Config(
        vocab_size=-(-tok.get_vocab_size() // 64) * 64, hidden_size=HIDDEN, intermediate_size=512,
        num_hidden_layers=4, num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=HEAD_DIM,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6, rope_theta=ROPE_THETA, tie_word_embeddings=True,
        layer_types=["full_attention"] * 4, bos_token_id=PAD, eos_token_id=EOS, pad_token_id=PAD)
    config.architectures = ["Qwen3ForCausalLM"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    construct(model, tok, words, seed)
    if steps:
        teach(model, lesson, steps)
    stats(model, lesson[:64], "after the lesson")
    bad = acceptance(model, tok, task, seed)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    c["rope_theta"] = ROPE_THETA
    c["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    c["torch_dtype"] = "float32"
    c["dtype"] = "float32"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    # Sampling defaults as an instruct model ships them: a client that
    # leaves a field to the server samples differently.
    gen = {"bos_token_id": PAD, "eos_token_id": [EOS, PAD], "pad_token_id": PAD, "do_sample": True,
           "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
    h = hashlib.sha256()
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    print(f"units model: {out} (model.safetensors sha256 {h.hexdigest()})", flush=True)
    if bad:
        print("lesson checks failed: " + "; ".join(bad), flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
