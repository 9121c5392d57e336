//! `colibri serve` and web pages: a page's no-cors `fetch` (a POST with Content-Type text/plain
//! and a foreign Origin, Host localhost) runs nothing; JSON endpoints want
//! `Content-Type: application/json` (415); a foreign Origin is refused (403) unless listed in
//! `--allowed-origins`, whose preflights get the Access-Control-* headers (others 403); requests
//! without an Origin and same-origin ones are served as before.

mod serve_support;

use serde_json::Value;
use serve_support::{raw, request, Resp, Server};

fn model() -> String {
    serve_support::default_model().to_str().unwrap().to_string()
}

fn generated(s: &Server) -> u64 {
    let text = s.get("/metrics").text();
    let line = text.lines().find(|l| l.starts_with("colibri_generated_tokens_total ")).unwrap();
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn error(r: &Resp, status: u16, code: &str) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], code, "{v}");
    v
}

const BODY: &str = r#"{"prompt": "And", "max_tokens": 4}"#;

#[test]
fn a_no_cors_fetch_from_a_web_page_runs_no_generation() {
    let s = Server::start(&["-m", &model()]);
    // What `fetch(url, {method: "POST", mode: "no-cors", body: "..."})` sends.
    let page = [("Content-Type", "text/plain;charset=UTF-8"), ("Origin", "http://evil.example")];
    for path in ["/generate", "/v1/completions", "/v1/chat/completions"] {
        error(&request(&s.addr, "POST", path, &page, BODY.as_bytes()), 403, "invalid_origin");
    }
    // Without the Origin (a page in a browser that omits it): the content type alone refuses it.
    for ct in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let r = request(&s.addr, "POST", "/generate", &[("Content-Type", ct)], BODY.as_bytes());
        error(&r, 415, "unsupported_media_type");
    }
    // No Content-Type at all (a Blob body) is refused too.
    let head = format!(
        "POST /generate HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    );
    error(&raw(&s.addr, &[head.as_bytes(), BODY.as_bytes()].concat(), false), 415, "unsupported_media_type");
    assert_eq!(generated(&s), 0, "nothing ran");
    // The JSON content type (any case, with parameters) is served.
    let r =
        request(&s.addr, "POST", "/generate", &[("Content-Type", "Application/JSON; charset=utf-8")], BODY.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn foreign_origins_are_refused_unless_allowed() {
    let s = Server::start(&["-m", &model(), "--allowed-origins", "http://localhost:3000,https://app.example"]);
    let json = ("Content-Type", "application/json");
    let post = |origin: &str| request(&s.addr, "POST", "/generate", &[json, ("Origin", origin)], BODY.as_bytes());
    for bad in ["http://evil.example", "http://localhost:3001", "null", "http://app.example"] {
        error(&post(bad), 403, "invalid_origin");
        assert_eq!(request(&s.addr, "GET", "/v1/models", &[("Origin", bad)], b"").status, 403, "{bad}");
    }
    let r = post("http://localhost:3000");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("http://localhost:3000"));
    assert!(r.header("vary").is_some_and(|v| v.contains("Origin")));
    // The server's own origin (same host and port as Host) needs no listing and gets no CORS headers.
    let own = format!("http://{}", s.addr);
    let r = request(&s.addr, "POST", "/generate", &[json, ("Origin", &own), ("Host", &s.addr)], BODY.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), None);
    // Without an Origin header (curl, SDKs): as before.
    assert_eq!(s.post("/generate", &serde_json::from_str(BODY).unwrap()).status, 200);
    // The DNS-rebinding Host check still holds, Origin or not.
    let r =
        request(&s.addr, "GET", "/v1/models", &[("Host", "evil.example"), ("Origin", "http://localhost:3000")], b"");
    error(&r, 403, "invalid_host");
}

#[test]
fn preflights_get_access_control_headers_for_allowed_origins_only() {
    let s = Server::start(&["-m", &model(), "--allowed-origins", "http://localhost:3000", "--api-key", "k"]);
    let preflight = |origin: &str| {
        let h = [
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization, content-type, x-stainless-os"),
        ];
        request(&s.addr, "OPTIONS", "/v1/chat/completions", &h, b"")
    };
    // No API key on a preflight (browsers send none).
    let r = preflight("http://localhost:3000");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("http://localhost:3000"));
    assert!(r.header("access-control-allow-methods").is_some_and(|m| m.contains("POST")));
    assert_eq!(r.header("access-control-allow-headers"), Some("authorization, content-type, x-stainless-os"));
    assert!(r.header("access-control-max-age").is_some());
    error(&preflight("http://evil.example"), 403, "invalid_origin");
    // The real request after the preflight still needs the key.
    let h = [("Origin", "http://localhost:3000"), ("Content-Type", "application/json")];
    assert_eq!(request(&s.addr, "POST", "/generate", &h, BODY.as_bytes()).status, 401);
    let h = [h[0], h[1], ("Authorization", "Bearer k")];
    assert_eq!(request(&s.addr, "POST", "/generate", &h, BODY.as_bytes()).status, 200);
    // `*` allows any origin.
    let s = Server::start(&["-m", &model(), "--allowed-origins", "*"]);
    let r = request(&s.addr, "GET", "/v1/models", &[("Origin", "http://anything.example")], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://anything.example"));
}
