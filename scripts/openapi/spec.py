"""docs/openapi.yaml loaded, and responses checked against it: the status is documented for the
operation, the documented headers are there and valid, and the body validates against the
schema of its content type (JSON bodies, and every `data:` frame of an event stream against the
endpoint's chunk schema or the error schema)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import jsonschema
import yaml

from http_raw import Response

REPO = Path(__file__).resolve().parents[2]
SPEC_PATH = REPO / "docs" / "openapi.yaml"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def load() -> Dict[str, Any]:
    with open(SPEC_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


class Spec:
    def __init__(self, doc: Optional[Dict[str, Any]] = None) -> None:
        self.doc = doc if doc is not None else load()

    def deref(self, obj: Dict[str, Any]) -> Dict[str, Any]:
        while "$ref" in obj:
            node: Any = self.doc
            for part in obj["$ref"].lstrip("#/").split("/"):
                node = node[part]
            obj = node
        return obj

    def validate(self, instance: Any, schema: Dict[str, Any]) -> None:
        """Validate against `schema`, whose `$ref`s point into the spec's components."""
        root = {"components": self.doc["components"], **schema}
        jsonschema.Draft202012Validator(root).validate(instance)

    def schema(self, name: str) -> Dict[str, Any]:
        return {"$ref": f"#/components/schemas/{name}"}

    def template(self, path: str) -> Optional[str]:
        """The spec path whose template matches a concrete request path."""
        path = path.split("?", 1)[0]
        for t in self.doc["paths"]:
            pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(t)) + "$"
            if re.match(pattern, path):
                return t
        return None

    def operation(self, path: str, method: str) -> Optional[Dict[str, Any]]:
        t = self.template(path)
        return None if t is None else self.doc["paths"][t].get(method.lower())

    def check(self, method: str, path: str, resp: Response) -> None:
        """Raise AssertionError when `resp` disagrees with the description of `method path`.
        A path the spec does not describe must be answered 404 with the Error object."""
        op = self.operation(path, method)
        where = f"{method} {path} → {resp.status}"
        if op is None:
            t = self.template(path)
            expected = 404 if t is None else 405
            assert resp.status == expected, f"{where}: undescribed, expected {expected}"
            if method != "HEAD":
                self._check_json(resp, self.schema("Error"), where)
            return
        documented = op["responses"]
        assert str(resp.status) in documented, f"{where}: status not documented ({sorted(documented)})"
        r = self.deref(documented[str(resp.status)])
        for name, h in (r.get("headers") or {}).items():
            h = self.deref(h)
            value = resp.header(name)
            if h.get("required"):
                assert value is not None, f"{where}: header {name} missing"
            if value is not None:
                typed: Any = int(value) if h["schema"].get("type") == "integer" else value
                self._valid(typed, h["schema"], f"{where}: header {name}")
        content = r.get("content")
        if method == "HEAD" or not content:
            assert method == "HEAD" or resp.body == b"", f"{where}: undocumented body {resp.body[:200]!r}"
            return
        full = (resp.header("content-type") or "").strip()
        media = content.get(full) or content.get(resp.content_type)
        assert media is not None, f"{where}: content type {full!r} not documented ({sorted(content)})"
        if resp.content_type == "application/json":
            self._check_json(resp, media["schema"], where)
        elif resp.content_type == "text/event-stream":
            for payload in sse_payloads(resp.body.decode("utf-8")):
                self.check_event(payload, media["schema"], f"{where}: stream event")
        else:
            self._valid(resp.body.decode("utf-8"), media["schema"], where)

    def check_event(self, payload: str, schema: Dict[str, Any], where: str) -> None:
        """An event `{"event": "message", "data": payload}` against the event schema; a JSON
        payload also against the `contentSchema` of the `data` alternative that names JSON
        (JSON Schema leaves `contentSchema` to the application)."""
        self._valid({"event": "message", "data": payload}, schema, where)
        data = self.deref(self.deref(schema)["properties"]["data"])
        json_branches = [b for b in data.get("anyOf", [data]) if b.get("contentMediaType") == "application/json"]
        assert json_branches, f"{where}: the event schema names no JSON payload"
        if payload == "[DONE]":
            return
        try:
            value = json.loads(payload)
        except ValueError as e:
            raise AssertionError(f"{where}: payload is not JSON ({e}): {payload[:200]!r}") from e
        self._valid(value, json_branches[0]["contentSchema"], where)

    def _check_json(self, resp: Response, schema: Dict[str, Any], where: str) -> None:
        assert resp.content_type == "application/json", f"{where}: content type {resp.content_type!r}"
        try:
            body = json.loads(resp.body)
        except ValueError as e:
            raise AssertionError(f"{where}: body is not JSON ({e}): {resp.body[:200]!r}") from e
        self._valid(body, schema, where)

    def _valid(self, instance: Any, schema: Dict[str, Any], where: str) -> None:
        try:
            self.validate(instance, schema)
        except jsonschema.ValidationError as e:
            raise AssertionError(f"{where}: {e.message} at {list(e.absolute_path)}: {instance!r:.300}") from e


def sse_payloads(text: str) -> List[str]:
    """The `data` payloads of a complete event stream, strictly as the server writes it:
    `data: X` events and `: comment` frames, each ending with a blank line, one final `[DONE]`."""
    frames = text.split("\n\n")
    assert frames[-1] == "", f"unterminated stream: {text[-200:]!r}"
    payloads = []
    for frame in frames[:-1]:
        if frame.startswith(":"):
            continue
        assert frame.startswith("data: ") and "\n" not in frame, f"bad frame {frame!r}"
        payloads.append(frame[len("data: "):])
    assert payloads and payloads[-1] == "[DONE]", f"stream does not end with [DONE]: {text[-200:]!r}"
    assert payloads.count("[DONE]") == 1, "more than one [DONE]"
    return payloads
