"""Tools and reasoning in `colibri serve` through the official `openai` client. The shipped default
model's own chat template has no tools: there `tools` is a 400 naming the field. Served with
`--chat-template-file` QwQ-32B's template (tests/fixtures/chat_templates/, Hermes `<tool_call>`
syntax, `<think>` opened by the generation prompt when `enable_thinking`), tools are rendered
into the prompt, assistant tool calls (arguments as JSON strings) and tool results are accepted
back, and generated text inside the reasoning block comes back as `reasoning_content`, whole and
streamed. (The tiny default model never writes a tool call itself: reading calls back is tested
per syntax in Rust: src/chat_output/tests.rs, cli/src/serve/chat_reply.rs.)"""

from __future__ import annotations

from typing import Iterator

import openai
import pytest

from conftest import REPO, serve_openai

TEMPLATE = REPO / "tests" / "fixtures" / "chat_templates" / "Qwen-QwQ-32B.jinja"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
THINK = {"chat_template_kwargs": {"enable_thinking": True}}


@pytest.fixture(scope="module")
def plain() -> Iterator[openai.OpenAI]:
    yield from serve_openai([])


@pytest.fixture(scope="module")
def qwq() -> Iterator[openai.OpenAI]:
    yield from serve_openai(["--chat-template-file", str(TEMPLATE)])


def _bad_param(call) -> str:
    with pytest.raises(openai.BadRequestError) as e:
        call()
    body = e.value.body
    assert isinstance(body, dict)
    return body["param"]


def test_tools_need_a_template_that_renders_them(plain: openai.OpenAI) -> None:
    assert _bad_param(lambda: plain.chat.completions.create(model="default", messages=ASK, tools=TOOLS)) == "tools"
    # tool_choice "none" asks for no tools: accepted anywhere.
    r = plain.chat.completions.create(model="default", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=2)
    assert r.choices[0].message.tool_calls is None


def test_tools_are_rendered_into_the_prompt(qwq: openai.OpenAI) -> None:
    def prompt_tokens(**kw) -> int:
        r = qwq.chat.completions.create(model="default", messages=ASK, max_tokens=1, temperature=0, **kw)
        assert r.usage is not None
        return r.usage.prompt_tokens

    without = prompt_tokens()
    with_tools = prompt_tokens(tools=TOOLS)
    assert with_tools > without + 20, (without, with_tools)
    assert prompt_tokens(tools=TOOLS, tool_choice="auto") == with_tools
    assert prompt_tokens(tools=TOOLS, tool_choice="none") == without
    # required / a named function render every tool too (test_serve_tool_choice.py: the calls).
    assert prompt_tokens(tools=TOOLS, tool_choice="required") == with_tools
    assert prompt_tokens(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}) == with_tools


def test_tool_calls_and_results_go_back_into_the_template(qwq: openai.OpenAI) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 18}'},
    ]
    r = qwq.chat.completions.create(model="default", messages=history, tools=TOOLS, max_tokens=3, temperature=0)
    short = qwq.chat.completions.create(model="default", messages=ASK, tools=TOOLS, max_tokens=3, temperature=0)
    assert r.usage is not None and short.usage is not None
    assert r.usage.prompt_tokens > short.usage.prompt_tokens + 10
    bad = dict(call, function={"name": "get_weather", "arguments": "{not json"})
    history[1] = {"role": "assistant", "content": None, "tool_calls": [bad]}
    create = lambda: qwq.chat.completions.create(model="default", messages=history, tools=TOOLS, max_tokens=3)
    assert _bad_param(create) == "messages"


def test_reasoning_comes_back_apart_from_content(qwq: openai.OpenAI) -> None:
    r = qwq.chat.completions.create(model="default", messages=ASK, max_tokens=12, temperature=0, extra_body=THINK)
    msg = r.choices[0].message
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    # The prompt opened <think>; the tiny model never closes it: all of its text is reasoning.
    assert reasoning and not msg.content, msg
    chunks = list(
        qwq.chat.completions.create(
            model="default", messages=ASK, max_tokens=12, temperature=0, stream=True, extra_body=THINK
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    streamed = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert streamed == reasoning
    assert "".join(d.content or "" for d in deltas) == ""
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    # Without enable_thinking the template closes the block itself: the text is content.
    r = qwq.chat.completions.create(model="default", messages=ASK, max_tokens=12, temperature=0)
    assert r.choices[0].message.content and not (r.choices[0].message.model_extra or {}).get("reasoning_content")


def test_assistant_reasoning_is_accepted_in_history(qwq: openai.OpenAI) -> None:
    history = ASK + [
        {"role": "assistant", "content": "Sunny.", "reasoning_content": "Paris is sunny today."},
        {"role": "user", "content": "And tomorrow?"},
    ]
    r = qwq.chat.completions.create(model="default", messages=history, max_tokens=2, temperature=0)
    assert r.choices[0].finish_reason == "length"
