"""Structured output: colibri.Grammar through Session.complete on the shipped default model, and
``response_format`` of ``colibri serve`` through the official openai client. Every generation
that finishes on end-of-sequence ("eos"; "stop" over HTTP) must be JSON valid against the
schema by the ``jsonschema`` package, over many seeds."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator

import jsonschema
import openai
import pytest
from test_serve_openai import client  # noqa: F401  (the server fixture)

import colibri
from conftest import REPO

SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "kind": {"enum": ["prophet", "king", "judge"]},
        "sons": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
    },
    "required": ["name", "age", "kind", "sons"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def default_model() -> Iterator[colibri.Model]:
    with colibri.Model(REPO / "models" / "default.colibri") as m:
        yield m


def test_finished_generations_validate_over_many_seeds(default_model: colibri.Model) -> None:
    g = colibri.Grammar(default_model, SCHEMA)
    finished = 0
    with default_model.session() as s:
        for seed in range(16):
            s.reset()
            r = s.complete("And Samuel said:", max_tokens=64, temperature=1.0, top_k=0, seed=seed, grammar=g)
            if r.finish_reason == "eos":
                jsonschema.validate(json.loads(r.text), SCHEMA)
                finished += 1
            else:
                assert r.finish_reason == "length", r.finish_reason
    assert finished >= 12, f"{finished}/16 seeds finished a document"
    g.close()


def test_any_object_and_refused_schemas(default_model: colibri.Model) -> None:
    g = colibri.Grammar(default_model)
    with default_model.session() as s:
        r = s.complete("In the beginning", max_tokens=48, temperature=1.0, seed=5, grammar=g)
        if r.finish_reason == "eos":
            assert isinstance(json.loads(r.text), dict)
        # A stop string ends the output under a grammar, the document then incomplete.
        s.reset()
        cut = s.complete("In the beginning", max_tokens=48, temperature=1.0, seed=5, grammar=g, stop=["}"])
        assert cut.finish_reason == "stop" and "}" not in cut.text and cut.text.startswith("{")
        if r.finish_reason == "eos":
            assert cut.text == r.text[: r.text.index("}")]
    for bad in ['{"type": ', {"type": "no-such-type"}, 3]:
        with pytest.raises(colibri.ColibriError) as e:
            colibri.Grammar(default_model, bad)
        assert e.value.status == colibri.Status.INVALID_ARGUMENT, bad


def test_openai_response_format(client: openai.OpenAI) -> None:  # noqa: F811
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": SCHEMA}}
    stopped = 0
    for seed in range(12):
        r = client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Describe a man of Israel."}],
            response_format=fmt,
            max_tokens=80,
            seed=seed,
        )
        c = r.choices[0]
        if c.finish_reason == "stop":
            jsonschema.validate(json.loads(c.message.content or ""), SCHEMA)
            stopped += 1
        else:
            assert c.finish_reason == "length"
    assert stopped >= 9, f"{stopped}/12 seeds finished a document"
    r2 = client.completions.create(model="default", prompt="In the beginning", max_tokens=60, seed=2,
                                   extra_body={"response_format": {"type": "json_object"}})
    if r2.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r2.choices[0].text), dict)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}],
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "x", "schema": {"type": "no-such-type"}}})
    assert e.value.body is not None and e.value.body.get("param") == "response_format"  # type: ignore[union-attr]
