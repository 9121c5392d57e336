//! `colibri serve` and the details of HTTP: a body shorter than its Content-Length (400, not
//! 413), `WWW-Authenticate: Bearer` on 401, the Bearer scheme in any case, OpenAI fields that
//! are not implemented (400 naming the field, never silently ignored), the Host check (port
//! compared, duplicate Host headers refused), the 64 KiB cap on a request head (431) and path
//! segments that do not decode (400 JSON).

mod serve_support;

use serde_json::{json, Value};
use serve_support::{raw, request, Resp, Server};

fn model() -> String {
    serve_support::default_model().to_str().unwrap().to_string()
}

fn error(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert!(v["error"]["message"].is_string(), "{v}");
    v["error"].clone()
}

#[test]
fn a_body_shorter_than_its_content_length_is_a_400() {
    let s = Server::start(&["-m", &model()]);
    let head =
        "POST /generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
    let r = raw(&s.addr, format!("{head}{{\"prompt\": \"a\"}}").as_bytes(), true);
    let e = error(&r, 400);
    assert_eq!(e["code"], "incomplete_body", "{e}");
    // A body above the cap is still a 413.
    let big = json!({"prompt": "a".repeat(5 << 20)});
    assert_eq!(s.post("/generate", &big).status, 413);
}

#[test]
fn a_401_names_the_bearer_scheme_and_the_scheme_is_case_insensitive() {
    let s = Server::start(&["-m", &model(), "--api-key", "s3cret"]);
    let r = s.get("/v1/models");
    error(&r, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    for auth in ["bearer s3cret", "BEARER s3cret", "Bearer  s3cret", "bEaReR\ts3cret"] {
        assert_eq!(request(&s.addr, "GET", "/v1/models", &[("Authorization", auth)], b"").status, 200, "{auth:?}");
    }
    for auth in ["Basic s3cret", "Bearers3cret", "s3cret", "Bearer s3cret x"] {
        assert_eq!(request(&s.addr, "GET", "/v1/models", &[("Authorization", auth)], b"").status, 401, "{auth:?}");
    }
}

#[test]
fn unimplemented_openai_fields_are_refused_not_ignored() {
    let s = Server::start(&["-m", &model()]);
    let msgs = json!([{"role": "user", "content": "a"}]);
    let chat = |extra: Value| {
        let mut b = json!({"messages": msgs, "max_tokens": 2});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        s.post("/v1/chat/completions", &b)
    };
    for (field, value) in [
        ("tools", json!([{"type": "function", "function": {"name": "f"}}])),
        ("response_format", json!({"type": "xml"})),
        ("functions", json!([{"name": "f"}])),
        ("tool_choice", json!("required")),
        ("max_tokns", json!(5)),
    ] {
        let e = error(&chat(json!({ field: value })), 400);
        assert_eq!(e["param"], field, "{e}");
    }
    let e = error(&chat(json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{}]}]})), 400);
    assert_eq!(e["param"], "messages", "{e}");
    for (field, value) in [("suffix", json!("end")), ("tools", json!([{}]))] {
        let e = error(&s.post("/v1/completions", &json!({"prompt": "a", field: value})), 400);
        assert_eq!(e["param"], field, "{e}");
    }
    // Values that ask for nothing pass.
    let r = chat(json!({"tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "logit_bias": {},
                        "user": "u1", "n": 1}));
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn the_host_check_compares_the_port_and_refuses_duplicates() {
    let s = Server::start(&["-m", &model()]);
    let port = s.addr.rsplit(':').next().unwrap();
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}"), "localhost".into()]
    {
        assert_eq!(request(&s.addr, "GET", "/v1/models", &[("Host", &host)], b"").status, 200, "{host}");
    }
    let other = if port == "1" { "2" } else { "1" };
    for host in [format!("localhost:{other}"), format!("127.0.0.1:{other}"), "localhost:x".into()] {
        let e = error(&request(&s.addr, "GET", "/v1/models", &[("Host", &host)], b""), 403);
        assert_eq!(e["code"], "invalid_host", "{host}");
    }
    let dup =
        format!("GET /v1/models HTTP/1.1\r\nHost: localhost:{port}\r\nHost: evil.example\r\nConnection: close\r\n\r\n");
    error(&raw(&s.addr, dup.as_bytes(), false), 400);
}

#[test]
fn a_request_head_above_64_kib_is_a_431() {
    let s = Server::start(&["-m", &model()]);
    for size in [70_000, 100_000] {
        let value = "a".repeat(size);
        let r = request(&s.addr, "GET", "/health", &[("X-Big", &value)], b"");
        assert_eq!(r.status, 431, "a {size}-byte header");
    }
    let value = "a".repeat(60_000);
    assert_eq!(request(&s.addr, "GET", "/health", &[("X-Big", &value)], b"").status, 200);
}

/// A model id in the path that does not percent-decode to UTF-8 gets the JSON error object, not
/// the extractor's plain-text 400 (found by the OpenAPI conformance check).
#[test]
fn an_undecodable_model_id_is_a_json_400() {
    let s = Server::start(&["-m", &model()]);
    for path in ["/v1/models/%FF", "/v1/models/a%C3", "/v1/models/%80%80"] {
        let r = s.get(path);
        assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{path}: {r:?}");
        let e = error(&r, 400);
        assert_eq!(e["param"], "id", "{path}: {e}");
    }
    // A percent-encoded id that decodes is compared as decoded.
    assert_eq!(s.get("/v1/models/%64efault").status, 200);
    assert_eq!(error(&s.get("/v1/models/d%2Ffault"), 404)["code"], "model_not_found");
}
