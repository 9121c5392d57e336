#!/usr/bin/env python3
"""Run llama.cpp's convert_hf_to_gguf.py with a sentencepiece vocabulary for OLMoE and Qwen2-MoE.

    /work/venv/bin/python bench/gguf_convert.py --llama-cpp /work/llama/llama.cpp \\
        CHECKPOINT_DIR --outtype bf16 --outfile X-bf16.gguf

Everything after --llama-cpp DIR is passed to the converter unchanged.

Why: the converter handles OLMoE and Qwen2-MoE tokenizers only through its BPE path, which accepts a
pre-tokenizer only if it hashes to one of the published models it knows. The bench checkpoints
(tools/make_bench_models.py) carry a Llama-style sentencepiece tokenizer (tokenizer.model), so for
those two architectures this wrapper replaces `set_vocab` — at run time, on the two classes only,
without editing the vendored file — with the sentencepiece path (`_set_vocab_sentencepiece`, or
`_set_vocab_llama_hf` from tokenizer.json if that fails). Mixtral already goes through
sentencepiece (LlamaModel.set_vocab) and is left alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

# HF architecture names whose converter class gets the sentencepiece vocabulary.
SENTENCEPIECE_ARCHS = ("OlmoeForCausalLM", "Qwen2MoeForCausalLM", "DeepseekV2ForCausalLM", "GptOssForCausalLM",
                      "Qwen3NextForCausalLM")


def split_argv(argv: list[str]) -> tuple[Path, list[str]]:
    """Take `--llama-cpp DIR` out of argv; the rest belongs to the converter."""
    if len(argv) < 2 or argv[0] != "--llama-cpp":
        sys.exit("usage: gguf_convert.py --llama-cpp LLAMA_CPP_DIR CONVERTER_ARGS...")
    return Path(argv[1]), argv[2:]


def sentencepiece_set_vocab(self) -> None:
    """Replacement set_vocab: Llama-style sentencepiece vocabulary from tokenizer.model."""
    try:
        self._set_vocab_sentencepiece()
    except FileNotFoundError:
        self._set_vocab_llama_hf()


def patch_classes() -> None:
    """Give the converter classes of SENTENCEPIECE_ARCHS the sentencepiece set_vocab."""
    from conversion import get_model_class

    for arch in SENTENCEPIECE_ARCHS:
        cls = get_model_class(arch)
        cls.set_vocab = sentencepiece_set_vocab
        print(f"gguf_convert: {arch} ({cls.__name__}) uses the sentencepiece vocabulary", file=sys.stderr)


def patch_deepseek_q_lora() -> None:
    """DeepSeek-V2 without a q low-rank path: write attention.q_lora_rank = 0. llama.cpp's loader
    recognises that variant (V2-Lite) only by its layer count (26 or 27) and otherwise requires the
    key; a value of 0 makes it load `attn_q` directly, as it does for V2-Lite."""
    from conversion import get_model_class

    cls = get_model_class("DeepseekV2ForCausalLM")
    base = cls.set_gguf_parameters

    def set_gguf_parameters(self) -> None:
        base(self)
        if self.hparams.get("q_lora_rank") is None:
            self.gguf_writer.add_q_lora_rank(0)

    cls.set_gguf_parameters = set_gguf_parameters


def no_qwen3_next_mtp() -> None:
    """Qwen3-Next without multi-token-prediction layers: the converter asserts that a Qwen3-Next
    checkpoint has them (its config does not say how many) unless told `--no-mtp`; the bench
    checkpoints have none, and colibri skips them in any case."""
    from conversion import get_model_class

    get_model_class("Qwen3NextForCausalLM").no_mtp = True


def main() -> None:
    llama_cpp, converter_args = split_argv(sys.argv[1:])
    sys.path.insert(0, str(llama_cpp))
    sys.path.insert(1, str(llama_cpp / "gguf-py"))
    import convert_hf_to_gguf  # noqa: E402  (the vendored converter, imported as a module)

    patch_classes()
    patch_deepseek_q_lora()
    no_qwen3_next_mtp()
    sys.argv = [str(llama_cpp / "convert_hf_to_gguf.py"), *converter_args]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
