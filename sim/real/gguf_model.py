"""Turn a GGUF file of a real instruct model into a Hugging Face directory
the CPU build of vLLM serves (make real-aftercut; sim/real/aftercut.yaml).

The weights are dequantized by transformers' own GGUF reader (it needs the
gguf and accelerate packages, locked in sim/real/vllm/uv.lock with the rest
of vLLM's environment) and written as float32 safetensors; the tokenizer, with the
chat template the GGUF file carries, is written beside them as
tokenizer.json and tokenizer_config.json. The program reads that
tokenizer.json (policy.tokenizer), vLLM the whole directory.

Usage: python gguf_model.py GGUF_FILE OUT_DIR. Prints one line per fact a
reader of the measurement needs: the architecture, the parameter count,
the end-of-turn token and whether a chat template came with the file.
"""

import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    gguf, out = sys.argv[1], sys.argv[2]
    src, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    if not tok.chat_template:
        sys.exit(f"{gguf}: no chat template in the file: not an instruct model's")
    # transformers marks a model read from GGUF as quantized and will not
    # save it, though its weights are dequantized by then: the same
    # architecture made afresh from the configuration (less the mark)
    # takes them and saves.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    if unexpected or [k for k in missing if k not in plain._tied_weights_keys]:
        sys.exit(f"{gguf}: weights do not fit the architecture: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    os.makedirs(out, exist_ok=True)
    plain.save_pretrained(out)
    model = plain
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"gguf model: {model.config.architectures[0]}, {n / 1e6:.1f}M parameters, "
          f"eos {tok.eos_token!r} (id {tok.eos_token_id}), chat template {len(tok.chat_template)} chars -> {out}")


if __name__ == "__main__":
    main()
