#!/usr/bin/env python3
"""tests/fixtures/harmony/expected.json (read by tests/harmony_template.rs): transformers' apply_chat_template
output of GPT-OSS's harmony chat template for a few conversations. The template (chat_template.jinja) is the
one openai/gpt-oss-120b ships, as llama.cpp keeps it in models/templates/openai-gpt-oss-120b.jinja. It prints
"Current date: " + strftime_now("%Y-%m-%d"): the expected texts hold the date of generation, which the test
replaces by the date of its run (after checking the format).

    /work/venv/bin/python tools/make_harmony_fixture.py
"""

import json
from pathlib import Path

from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "harmony"
TOKENIZER = ROOT / "tests" / "fixtures" / "models" / "gpt_oss_bf16"

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "What is 2+2?"}], "extra": {}},
    {
        "messages": [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "Four."},
            {"role": "user", "content": "And in words, café-style? \U0001f642"},
        ],
        "extra": {},
    },
    {
        "messages": [
            {"role": "developer", "content": "Be terse.\nNo lists."},
            {"role": "user", "content": "Hi"},
        ],
        "extra": {"reasoning_effort": "high", "model_identity": "You are a test model."},
    },
]


def main() -> None:
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
    template = (OUT / "chat_template.jinja").read_text(encoding="utf-8")
    cases = []
    for conv in CONVERSATIONS:
        for agp in (True, False):
            text = tok.apply_chat_template(
                conv["messages"], chat_template=template, tokenize=False, add_generation_prompt=agp, **conv["extra"]
            )
            cases.append({"messages": conv["messages"], "extra": conv["extra"], "add_generation_prompt": agp, "rendered": text})
    (OUT / "expected.json").write_text(json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
