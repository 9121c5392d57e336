"""The description and the code agree: every route in cli/src/serve/mod.rs is described with its
methods, every described path is routed (a live server answers each described method with a
documented status and each other method with 405), the error codes are the server's, the request
examples are valid and served, and the description is valid OpenAPI 3.1."""

from __future__ import annotations

import json
import re

from openapi_spec_validator import validate

from conftest import KEY
from http_raw import request
from spec import METHODS, REPO

SERVE = REPO / "cli" / "src" / "serve"
ROUTER = SERVE / "mod.rs"
# What an axum method router answers: `get` also serves HEAD.
AXUM = {"get": {"get", "head"}, "post": {"post"}}
PROBE = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
AUTH = [("Authorization", f"Bearer {KEY}")]


def routes_in_source() -> dict:
    src = ROUTER.read_text(encoding="utf-8")
    found = re.findall(r'\.route\(\s*"([^"]+)",\s*([a-z_]+)\(', src)
    assert found, f"no .route(...) found in {ROUTER}"
    routes: dict = {}
    for path, method in found:
        assert method in AXUM, f"{path}: method router {method}() unknown to this test"
        routes.setdefault(path, set()).update(AXUM[method])
    return routes


def test_description_is_valid_openapi(spec) -> None:
    assert spec.doc["openapi"].startswith("3.1")
    validate(spec.doc)


def test_every_route_is_described_and_every_description_routed(spec) -> None:
    routes = routes_in_source()
    described = {p: {m for m in item if m in METHODS} for p, item in spec.doc["paths"].items()}
    assert set(routes) == set(described), f"router {sorted(routes)} vs description {sorted(described)}"
    for path, methods in routes.items():
        # Every path also answers CORS preflights (guard.rs, before routing).
        assert described[path] == methods | {"options"}, f"{path}: router {methods}, described {described[path]}"


def test_error_codes_match_the_source(spec) -> None:
    """The `code` values the description lists are those the server's code can write."""
    source = {
        code
        for f in SERVE.rglob("*.rs")
        for code in re.findall(r'code: Some\("([a-z_]+)"\)', f.read_text(encoding="utf-8"))
    }
    assert len(source) >= 10, source
    described = set(spec.deref(spec.schema("Error"))["properties"]["error"]["properties"]["code"]["enum"])
    assert described == source | {None}, f"only in the source {source - described}, only described {described - source}"


def concrete(path: str) -> str:
    return path.replace("{id}", "default")


def test_each_method_of_each_path_live(spec, server) -> None:
    for template, item in spec.doc["paths"].items():
        path = concrete(template)
        for method in PROBE:
            body = b"{}" if method in ("POST", "PUT", "PATCH") else None
            headers = AUTH + ([("Content-Type", "application/json")] if body else [])
            r = request(server.addr, method, path, headers, body)
            spec.check(method, path, r)
            if method == "OPTIONS":
                assert r.status == 405, f"OPTIONS {path} without Access-Control-Request-Method: {r.status}"
            elif method.lower() in item:
                assert r.status not in (404, 405), f"{method} {path} is described but answers {r.status}"
            else:
                assert r.status == 405, f"{method} {path} is not described but answers {r.status}"
    for path in ["/", "/v1", "/v1/models/", "/v1/models/a/b", "/generate/", "/v2/completions"]:
        r = request(server.addr, "GET", path, AUTH)
        assert r.status == 404, f"GET {path}: {r.status}"
        spec.check("GET", path, r)


def request_examples(spec):
    for path, item in spec.doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS or "requestBody" not in op:
                continue
            media = op["requestBody"]["content"]["application/json"]
            for name, ex in (media.get("examples") or {}).items():
                yield path, method, name, ex["value"], media["schema"]


def test_request_examples_are_valid_and_served(spec, server) -> None:
    seen = 0
    for path, method, name, value, schema in request_examples(spec):
        spec.validate(value, schema)
        r = request(server.addr, method.upper(), path, AUTH + [("Content-Type", "application/json")],
                    json.dumps(value).encode())
        assert r.status == 200, f"{method} {path} example {name}: {r.status} {r.body[:300]!r}"
        spec.check(method.upper(), path, r)
        seen += 1
    assert seen >= 3, "every generating endpoint has an example"
