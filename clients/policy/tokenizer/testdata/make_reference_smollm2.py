"""Write testdata/smollm2_reference.jsonl, the reference ids of SmolLM2's
tokenizer (testdata/smollm2_tokenizer.json.gz; see README.md beside this
file). It is not run by go test.

The ids are Hugging Face tokenizers' own (the Rust library, the version
sim/real/vllm/uv.lock pins), for encode(text, add_special_tokens=False).
Run from the repository root with the Python of that environment (made by
make real or make real-aftercut):

    ~/.cache/hindsearch/real/venv-vllm/bin/python \\
        clients/policy/tokenizer/testdata/make_reference_smollm2.py
"""

import gzip
import hashlib
import json
import os

from tokenizers import Tokenizer

HERE = "clients/policy/tokenizer/testdata"
raw = gzip.open(os.path.join(HERE, "smollm2_tokenizer.json.gz")).read()
WANT = "bf346d64f6f0fbcefb4c1b6928a98241467dff36c6fbae5fe1785c4ff90667f4"
sha = hashlib.sha256(raw).hexdigest()
if sha != WANT:
    raise SystemExit(f"smollm2_tokenizer.json.gz holds sha256 {sha}, want {WANT}")
tok = Tokenizer.from_str(raw.decode("utf-8"))


def enc(text):
    return tok.encode(text, add_special_tokens=False).ids


# Known encodings: the chat markers are one id each.
for text, want in [("<|im_start|>", [1]), ("<|im_end|>", [2]), ("<|endoftext|>", [0])]:
    if enc(text) != want:
        raise SystemExit(f"{text!r} encodes to {enc(text)}, want {want}")


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


passages = lines("recipes/data/corpus/passages.jsonl")
qa = sorted(f for f in os.listdir("recipes/data/qa") if f.endswith(".jsonl"))
questions = [q for f in qa for q in lines(f"recipes/data/qa/{f}")]
hard = lines(os.path.join(HERE, "hard.jsonl"))

INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query "
    "</search> and it will return the top searched results between <information> and </information>. You can search as "
    "many times as your want. If you find no further external knowledge needed, you can directly provide the answer "
    "inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
)
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chat(q):
    q = q.strip()
    q = q if q.endswith("?") else q + "?"
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{INSTRUCTION}Question: {q}\n<|im_end|>\n"
            "<|im_start|>assistant\n")


texts = []
texts += [("corpus", p["contents"]) for i, p in enumerate(passages) if i % 48 == 0]
texts += [(f"qa/{q.get('dataset', '')}", q["question"]) for i, q in enumerate(questions) if i % 5 == 0]
texts += [("smollm2 chat prompt", chat(q["question"])) for i, q in enumerate(questions) if i % 40 == 0]
for i in range(0, len(passages) - 3, 150):
    docs = "".join(f"Doc {j + 1}(Title: {p['contents'].splitlines()[0]}) {p['contents']}\n" for j, p in enumerate(passages[i:i + 3]))
    texts.append(("information block", f"\n\n<information>{docs.strip()}</information>\n\n"))
texts += [("hard", h["text"]) for h in hard]
# Bytes the vocabulary has no token for (0x04, 0x06, 0x13, 0x14, 0x16, 0x1d)
# are dropped before merging: the bytes on either side may merge.
texts += [("unknown bytes", t) for t in ["a\x04b", "\x04", "the\x06re", " x\x13\x14 y", "\x16\x1d\n", "1\x042", "\x04 \x06"]]

with open(os.path.join(HERE, "smollm2_reference.jsonl"), "w", encoding="utf-8") as out:
    for source, text in texts:
        out.write(json.dumps({"source": source, "text": text, "ids": enc(text)}, ensure_ascii=False) + "\n")
print(f"{len(texts)} texts")
