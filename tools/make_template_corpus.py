#!/usr/bin/env python3
"""tests/fixtures/chat_templates/ (read by tests/template_corpus.rs): the model chat templates llama.cpp keeps in
models/templates/ (MIT repository; copied verbatim as <name>.jinja) and, in expected.json, what transformers'
`apply_chat_template(tokenize=False)` renders from each for a fixed set of conversations: plain turns, tools,
assistant tool calls (arguments as objects, the form templates expect), tool results and reasoning.

transformers' own path is followed: messages normalised by `_normalize_chat_messages` (keys whose value is None
dropped), then `render_jinja_template` with `bos_token` / `eos_token` as template variables. `strftime_now` is
pinned to CLOCK (the Rust test pins colibri's to the same instant). A case transformers refuses (the template's
`raise_exception`, a Python error) is recorded as {"error": message}. To stay small, a rendering that shares a
prefix of 64 or more characters with an earlier case of its template is stored as {"base": that case, "keep": the
prefix length in characters (code points), "tail": the rest}; otherwise as {"rendered": text}.

    /work/venv/bin/python tools/make_template_corpus.py [/path/to/llama.cpp/models/templates]
"""

import datetime as dt
import json
import os
import sys
from pathlib import Path

import transformers.utils.chat_template_utils as ctu

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "chat_templates"
DEFAULT_SRC = Path("/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")
# 2026-01-15 12:34:56 UTC: what strftime_now sees.
CLOCK = 1_768_480_496
BOS, EOS = "<s>", "</s>"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    }
]
CALL = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}
SYSTEM = {"role": "system", "content": "You are terse."}
ASK = {"role": "user", "content": "Weather in Paris?"}
CALLING = {"role": "assistant", "content": "", "tool_calls": [CALL]}
# What OpenAI clients send (transformers drops the None key; some templates then fail).
CALLING_NULL = {"role": "assistant", "content": None, "tool_calls": [CALL]}
RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temp": 18, "sky": "clear"}'}

# name -> (messages, tools, add_generation_prompt)
CASES = {
    "chat": ([SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
              {"role": "user", "content": "Name a café <tag> & \"quote\"."}], None, True),
    "chat_no_prompt": ([SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}], None, False),
    "user_only": ([{"role": "user", "content": "Hi"}], None, True),
    "tools": ([SYSTEM, ASK], TOOLS, True),
    "tool_call": ([ASK, CALLING], TOOLS, False),
    "tool_call_null": ([ASK, CALLING_NULL], TOOLS, False),
    "tool_result": ([ASK, CALLING, RESULT], TOOLS, True),
    "tool_round": ([SYSTEM, ASK, CALLING, RESULT, {"role": "assistant", "content": "18 C and clear."},
                    {"role": "user", "content": "Thanks"}], TOOLS, True),
    "reasoning": ([{"role": "user", "content": "2+2?"},
                   {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
                   {"role": "user", "content": "3+3?"}], None, True),
}


class FrozenDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime.fromtimestamp(CLOCK, tz or dt.timezone.utc).replace(tzinfo=tz)


def render(template: str, messages, tools, agp: bool) -> dict:
    chat = ctu._normalize_chat_messages(json.loads(json.dumps(messages)))
    try:
        out, _ = ctu.render_jinja_template(
            conversations=[chat], tools=tools, chat_template=template, add_generation_prompt=agp,
            bos_token=BOS, eos_token=EOS,
        )
        return {"rendered": out[0]}
    except Exception as e:  # noqa: BLE001 — every refusal is recorded, whatever its type
        return {"error": f"{type(e).__name__}: {e}"}


def compact(results: dict) -> dict:
    """Each rendering as a tail after the longest prefix it shares with an earlier one (see the module doc)."""
    out, done = {}, {}
    for name, r in results.items():
        text = r.get("rendered")
        if text is None:
            out[name] = r
            continue
        keep, base = max(((len(os.path.commonprefix([prev, text])), b) for b, prev in done.items()), default=(0, None))
        out[name] = {"base": base, "keep": keep, "tail": text[keep:]} if keep >= 64 else r
        done[name] = text
    return out


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SRC
    ctu.datetime = FrozenDatetime
    OUT.mkdir(parents=True, exist_ok=True)
    expected = {}
    for path in sorted(src.glob("*.jinja")):
        template = path.read_text(encoding="utf-8")
        (OUT / path.name).write_text(template, encoding="utf-8")
        expected[path.stem] = compact({name: render(template, m, t, agp) for name, (m, t, agp) in CASES.items()})
    cases = {name: {"messages": m, "tools": t, "add_generation_prompt": agp} for name, (m, t, agp) in CASES.items()}
    doc = {"clock": CLOCK, "bos_token": BOS, "eos_token": EOS, "cases": cases, "expected": expected}
    (OUT / "expected.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    rendered = sum("error" not in r for e in expected.values() for r in e.values())
    print(f"{len(expected)} templates, {rendered} renderings, {sum(len(e) for e in expected.values()) - rendered} refusals")


if __name__ == "__main__":
    main()
