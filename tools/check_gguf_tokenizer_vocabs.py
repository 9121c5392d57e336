#!/usr/bin/env python3
"""Real-size check of the GGUF tokenizer builder: llama.cpp's own test vocabularies
(models/ggml-vocab-NAME.gguf, full hub vocabularies) with their .inp texts and .out ids, which
llama.cpp's convert_hf_to_gguf_update.py wrote from the HF tokenizer (add_special_tokens=False).

    /work/venv/bin/python tools/check_gguf_tokenizer_vocabs.py /tmp/gguf-vocabs
    GGUF_TOKENIZER_CHECK_DIR=/tmp/gguf-vocabs cargo test --release -p colibri-convert \\
        --test gguf_tokenizer -- --ignored

Writes OUT/NAME/vocab.json (the GGUF's tokenizer keys, as make_gguf_tokenizer_fixtures.py writes
them) and OUT/NAME/expected.json (cases of text and ids) for every gpt2 / llama vocabulary. Nothing
of it is committed: the vocabularies are llama.cpp's files (up to 16 MB).
"""

import json
import sys
from pathlib import Path

from make_gguf_tokenizer_fixtures import LLAMA_CPP, read_vocab, write_json


def main():
    out = Path(sys.argv[1])
    for gguf_path in sorted((LLAMA_CPP / "models").glob("ggml-vocab-*.gguf")):
        inp, exp = Path(f"{gguf_path}.inp"), Path(f"{gguf_path}.out")
        vocab = read_vocab(gguf_path)
        if not (inp.is_file() and exp.is_file()) or vocab["model"] not in ("gpt2", "llama"):
            continue
        texts = inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")[:-1]
        ids = [[int(i) for i in line.split()] for line in exp.read_text(encoding="utf-8").splitlines()]
        assert len(texts) == len(ids), gguf_path
        name = gguf_path.name[len("ggml-vocab-") : -len(".gguf")]
        (out / name).mkdir(parents=True, exist_ok=True)
        write_json(out / name / "vocab.json", vocab)
        write_json(out / name / "expected.json", {"cases": [{"text": t, "ids": i} for t, i in zip(texts, ids)]})
        print(f"{name}: {vocab['model']}/{vocab['pre']}, {len(vocab['tokens'])} tokens, {len(texts)} texts")


if __name__ == "__main__":
    main()
