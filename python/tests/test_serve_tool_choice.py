"""Constrained tool calls, grammars with stop strings, masked log-probabilities and end-of-turn
tokens in `colibri serve`, through the official `openai` client on the shipped default model.

Served with a family's chat template (`--chat-template-file`, tests/fixtures/chat_templates/;
the default model's tokenizer has none of their markers as special tokens, so the grammar writes
them as text), `tool_choice: "required"` and a named function force the family's call syntax with
arguments held to the tool's JSON Schema: every reply that finishes with "tool_calls" is checked
with `jsonschema`. (A tiny random-text model never starts a call by itself: "auto" with a started
call is tested per syntax in Rust, tests/tool_grammar.rs.)"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, Iterator, List

import jsonschema
import openai
import pytest

from conftest import REPO, serve_openai

TEMPLATES = REPO / "tests" / "fixtures" / "chat_templates"
WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "add"}}


def _server(template: str) -> Iterator[openai.OpenAI]:
    # The templates' tool prompts are longer than the model's 512 positions: a longer context.
    yield from serve_openai(["--chat-template-file", str(TEMPLATES / template), "-c", "2048"])


@pytest.fixture(scope="module")
def plain() -> Iterator[openai.OpenAI]:
    yield from serve_openai([])


@pytest.fixture(scope="module", params=[
    "Qwen-Qwen2.5-7B-Instruct.jinja",  # Hermes <tool_call>
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",  # [TOOL_CALLS][{...}]
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",  # [TOOL_CALLS]NAME[ARGS]{...}
])
def tagged(request: Any) -> Iterator[openai.OpenAI]:
    yield from _server(request.param)


def _calls_valid(msg: Any, only: str | None = None) -> List[Dict[str, Any]]:
    assert msg.tool_calls, msg
    out = []
    for call in msg.tool_calls:
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, SCHEMAS[call.function.name])
        assert only is None or call.function.name == only
        out.append({"name": call.function.name, "arguments": args})
    return out


def _bad_param(call) -> str:
    with pytest.raises(openai.BadRequestError) as e:
        call()
    body = e.value.body
    assert isinstance(body, dict)
    return body["param"]


@pytest.mark.parametrize("choice", ["required", NAMED])
def test_required_and_named_calls_parse_and_validate(tagged: openai.OpenAI, choice: Any) -> None:
    only = None if choice == "required" else "add"
    for seed in range(4):
        r = tagged.chat.completions.create(
            model="default", messages=ASK, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False,
            max_tokens=120, seed=seed, temperature=1.0,
        )
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert len(_calls_valid(c.message, only)) == 1
        assert not c.message.content
    # Parallel calls: each one valid; the random model may chain calls past max_tokens.
    for seed in range(3):
        r = tagged.chat.completions.create(
            model="default", messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=200, seed=seed, temperature=1.0
        )
        c = r.choices[0]
        assert c.finish_reason in ("tool_calls", "length"), c
        if c.finish_reason == "tool_calls":
            _calls_valid(c.message, only)


def test_streamed_calls_are_the_whole_ones(tagged: openai.OpenAI) -> None:
    kw: Dict[str, Any] = dict(
        model="default", messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=120, seed=7, temperature=1.0,
    )
    whole = tagged.chat.completions.create(**kw)
    calls: Dict[int, Dict[str, str]] = {}
    reasons = []
    for chunk in tagged.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            reasons.append(c.finish_reason)
            for d in c.delta.tool_calls or []:
                got = calls.setdefault(d.index, {"name": "", "arguments": ""})
                got["name"] += (d.function and d.function.name) or ""
                got["arguments"] += (d.function and d.function.arguments) or ""
    assert reasons[-1] == "tool_calls"
    assert [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in calls.values()] == _calls_valid(
        whole.choices[0].message
    )


def test_harmony_required_call() -> None:
    for client in _server("openai-gpt-oss-120b.jinja"):
        for seed in range(3):
            # Token 69 ("c") chooses the commentary channel over analysis: the random model would
            # otherwise write an analysis message that never ends (a real GPT-OSS ends it).
            r = client.chat.completions.create(
                model="default", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120, seed=seed,
                temperature=1.0, logit_bias={"69": 100},
            )
            c = r.choices[0]
            assert c.finish_reason == "tool_calls", c
            assert len(_calls_valid(c.message)) == 1


def test_reasoning_first_then_calls_or_still_reasoning() -> None:
    # DeepSeek-R1's prompt opens <think>: the grammar lets the reasoning run to </think> first
    # (the random model never closes it), and nothing but calls after it.
    for client in _server("llama-cpp-deepseek-r1.jinja"):
        for seed in range(2):
            r = client.chat.completions.create(
                model="default", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=60, seed=seed,
                temperature=1.0,
            )
            c = r.choices[0]
            if c.finish_reason == "tool_calls":
                _calls_valid(c.message)
            else:
                assert c.finish_reason == "length" and (c.message.model_extra or {}).get("reasoning_content")
                assert not c.message.content and not c.message.tool_calls


def test_auto_replies_are_text_or_valid_calls(tagged: openai.OpenAI) -> None:
    for seed in range(3):
        r = tagged.chat.completions.create(
            model="default", messages=ASK, tools=TOOLS, max_tokens=40, seed=seed, temperature=1.0
        )
        c = r.choices[0]
        if c.message.tool_calls:
            _calls_valid(c.message)
        else:
            assert c.finish_reason in ("length", "stop") and c.message.content


def test_tool_choice_refusals_name_the_field(tagged: openai.OpenAI) -> None:
    def make(**kw: Any):
        return lambda: tagged.chat.completions.create(model="default", messages=ASK, max_tokens=4, **kw)

    missing = {"type": "function", "function": {"name": "no_such_tool"}}
    assert _bad_param(make(tools=TOOLS, tool_choice=missing)) == "tool_choice"
    assert _bad_param(make(tool_choice="required")) == "tool_choice"
    assert _bad_param(make(tools=TOOLS, tool_choice={"type": "function"})) == "tool_choice"
    fmt = {"type": "json_object"}
    assert _bad_param(make(tools=TOOLS, tool_choice="required", response_format=fmt)) == "response_format"
    assert _bad_param(make(tools=TOOLS, tool_choice=NAMED, extra_body={"ignore_eos": True})) == "ignore_eos"
    # auto with a response format: the format's grammar holds the reply.
    r = make(tools=TOOLS, response_format=fmt)()
    assert r.choices[0].finish_reason in ("length", "stop")


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}


def test_stop_strings_end_a_grammar_reply(plain: openai.OpenAI) -> None:
    kw: Dict[str, Any] = dict(model="default", messages=ASK, response_format=FORMAT, max_tokens=80, temperature=0)
    whole = plain.chat.completions.create(**kw).choices[0]
    text = whole.message.content or ""
    assert ", " in text, text
    cut = plain.chat.completions.create(stop=[", "], **kw).choices[0]
    # Cut at the stop string, which is not part of the output: the document is incomplete.
    assert cut.finish_reason == "stop"
    assert cut.message.content == text[: text.index(", ")]
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut.message.content)
    if whole.finish_reason == "stop":
        jsonschema.validate(json.loads(text), PERSON)
    assert _bad_param(lambda: plain.chat.completions.create(extra_body={"ignore_eos": True}, **kw)) == "ignore_eos"


def test_logprobs_under_a_grammar_are_the_masked_distribution(plain: openai.OpenAI) -> None:
    r = plain.chat.completions.create(
        model="default", messages=ASK, response_format={"type": "json_object"}, max_tokens=6, temperature=0,
        logprobs=True, top_logprobs=10,
    )
    steps = r.choices[0].logprobs.content
    # The document starts with "{": every alternative the first step reports starts with it, and
    # the allowed ones carry the whole probability.
    first = steps[0].top_logprobs
    assert first and all(t.token.startswith("{") for t in first), first
    assert all(math.isfinite(t.logprob) for s in steps for t in s.top_logprobs)
    assert steps[0].logprob == max(t.logprob for t in first)
    assert sum(math.exp(t.logprob) for t in first) <= 1.0 + 1e-5
    plain_r = plain.chat.completions.create(
        model="default", messages=ASK, max_tokens=1, temperature=0, logprobs=True, top_logprobs=10
    )
    assert not all(t.token.startswith("{") for t in plain_r.choices[0].logprobs.content[0].top_logprobs)


def test_the_templates_end_of_turn_token_ends_a_chat_reply(plain: openai.OpenAI) -> None:
    # The default model's EOS is <|endoftext|> (id 0); its ChatML template ends turns with
    # <|im_end|> (id 2), which it was never trained to write: the bias makes it the first token.
    r = plain.chat.completions.create(
        model="default", messages=ASK, max_tokens=20, temperature=0, logit_bias={"2": 100}
    )
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == ""
    assert r.usage is not None and r.usage.completion_tokens == 1
