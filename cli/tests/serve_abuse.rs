//! `colibri serve` under bad input: body cap (413), malformed JSON and out-of-range or
//! wrong-typed parameters (400, OpenAI-shaped), unknown model (404), unknown path / method
//! (404 / 405), the API key (401, /health open), the loopback Host allowlist (403), a full
//! server (503 + Retry-After), and a client that disconnects mid-stream (its sequence is
//! cancelled and its slot freed).

mod serve_support;

use serde_json::{json, Value};
use serve_support::{connect, read_chunk, read_head, request, send_request, Resp, Server};
use std::io::BufReader;

fn model() -> String {
    serve_support::default_model().to_str().unwrap().to_string()
}

fn assert_error(r: &Resp, status: u16, param: Option<&str>) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.as_object().unwrap().contains_key("code"), "{v}");
    assert_eq!(e["param"].as_str(), param, "{v}");
    v
}

#[test]
fn bad_requests_get_openai_shaped_errors() {
    let s = Server::start(&["-m", &model(), "--max-body", "4096"]);
    let raw = |path: &str, body: &[u8]| request(&s.addr, "POST", path, &[], body);
    // 413 above the cap, also on /generate.
    let big = json!({"prompt": "a".repeat(5000)});
    assert_error(&s.post("/v1/completions", &big), 413, None);
    assert_error(&s.post("/generate", &big), 413, None);
    // Malformed JSON, NaN literal, not an object.
    for body in [&b"{"[..], b"{\"prompt\": NaN}", b"[1,2]", b"", b"\xff\xfe"] {
        assert_error(&raw("/v1/completions", body), 400, None);
    }
    let cases: Vec<(&str, Value, &str)> = vec![
        ("/v1/completions", json!({"prompt": "a", "max_tokens": -1}), "max_tokens"),
        ("/v1/completions", json!({"prompt": "a", "max_tokens": 1e300}), "max_tokens"),
        ("/v1/completions", json!({"prompt": "a", "max_tokens": "5"}), "max_tokens"),
        ("/v1/completions", json!({"prompt": "a", "temperature": -0.5}), "temperature"),
        ("/v1/completions", json!({"prompt": "a", "temperature": 1e30}), "temperature"),
        ("/v1/completions", json!({"prompt": "a", "temperature": "hot"}), "temperature"),
        ("/v1/completions", json!({"prompt": "a", "top_p": 0}), "top_p"),
        ("/v1/completions", json!({"prompt": "a", "top_p": 1.5}), "top_p"),
        ("/v1/completions", json!({"prompt": "a", "min_p": -1}), "min_p"),
        ("/v1/completions", json!({"prompt": "a", "top_k": 2.5}), "top_k"),
        ("/v1/completions", json!({"prompt": "a", "presence_penalty": 3}), "presence_penalty"),
        ("/v1/completions", json!({"prompt": "a", "repetition_penalty": 0}), "repetition_penalty"),
        ("/v1/completions", json!({"prompt": "a", "seed": -3}), "seed"),
        ("/v1/completions", json!({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}), "stop"),
        ("/v1/completions", json!({"prompt": "a", "stop": "x".repeat(300)}), "stop"),
        ("/v1/completions", json!({"prompt": "a", "stop": 5}), "stop"),
        ("/v1/completions", json!({"prompt": "a", "n": 0}), "n"),
        ("/v1/completions", json!({"prompt": "a", "n": 129}), "n"),
        ("/v1/completions", json!({"prompt": "a", "logit_bias": {"5": 101}}), "logit_bias"),
        ("/v1/completions", json!({"prompt": "a", "logit_bias": {"99999": 1}}), "logit_bias"),
        ("/v1/completions", json!({"prompt": "a", "logit_bias": {"x": 1}}), "logit_bias"),
        ("/v1/completions", json!({"prompt": "a", "logit_bias": [1]}), "logit_bias"),
        ("/generate", json!({"prompt": "a", "n": 2}), "n"),
        ("/tokenize", json!({}), "content"),
        ("/tokenize", json!({"content": "a", "parse": 1}), "parse"),
        ("/detokenize", json!({"tokens": [99999]}), "tokens"),
        ("/detokenize", json!({"tokens": "a"}), "tokens"),
        ("/v1/completions", json!({"prompt": "a", "stream": "yes"}), "stream"),
        ("/v1/completions", json!({"prompt": "a", "logprobs": 50}), "logprobs"),
        ("/v1/completions", json!({"prompt": "a", "moe_top_k": 0}), "moe_top_k"),
        ("/v1/completions", json!({"prompt": "a", "moe_top_k": 9}), "moe_top_k"),
        ("/v1/completions", json!({"prompt": "a", "routing": "random"}), "routing"),
        ("/v1/completions", json!({"prompt": [1, 99999]}), "prompt"),
        ("/v1/completions", json!({"prompt": ["a", "b"]}), "prompt"),
        ("/v1/completions", json!({"prompt": 5}), "prompt"),
        ("/v1/completions", json!({}), "prompt"),
        ("/v1/completions", json!({"prompt": ""}), "prompt"),
        ("/v1/completions", json!({"prompt": "a", "model": 5}), "model"),
        ("/v1/chat/completions", json!({"messages": []}), "messages"),
        ("/v1/chat/completions", json!({"messages": "hi"}), "messages"),
        ("/v1/chat/completions", json!({"messages": [{"content": "hi"}]}), "messages"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": 5}]}), "messages"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2}),
            "top_logprobs",
        ),
        ("/generate", json!({"prompt": 5}), "prompt"),
        ("/generate", json!({"max_tokens": 3}), "prompt"),
        ("/generate", json!({"prompt": "a", "ignore_eos": 1}), "ignore_eos"),
    ];
    for (path, body, param) in cases {
        let r = s.post(path, &body);
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        assert_error(&r, 400, Some(param));
    }
    // The context (512) caps the prompt: too many tokens, and far too many bytes (capped
    // before tokenising; under the body cap here thanks to a larger server below).
    let long: Vec<u32> = vec![5; 600];
    let v = assert_error(&s.post("/v1/completions", &json!({"prompt": long})), 400, Some("prompt"));
    assert!(v["error"]["message"].as_str().unwrap().contains("context"));
    // A huge max_tokens is clamped to the context, not an error.
    let r = s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 100000, "stop": ["\n"], "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.text());
    // Unknown model → 404 model_not_found; unknown path → 404; wrong method → 405.
    let v = assert_error(&s.post("/v1/completions", &json!({"prompt": "a", "model": "gpt-4"})), 404, Some("model"));
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_error(
        &s.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "a"}], "model": "x"})),
        404,
        Some("model"),
    );
    assert_error(&s.get("/v1/nothing"), 404, None);
    assert_error(&s.get("/v1/completions"), 405, None);
    assert_error(&s.get("/generate"), 405, None);
    // Still serving afterwards.
    assert_eq!(s.post("/generate", &json!({"prompt": "a", "max_tokens": 2})).status, 200);

    let s = Server::start(&["-m", &model(), "--max-body", "1000000"]);
    let v = assert_error(&s.post("/generate", &json!({"prompt": "a".repeat(900_000)})), 400, Some("prompt"));
    assert!(v["error"]["message"].as_str().unwrap().contains("bytes"), "{v}");
}

#[test]
fn api_key_and_host_checks() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "s3cret-key\n").unwrap();
    let s = Server::start(&["-m", &model(), "--api-key-file", key_file.to_str().unwrap()]);
    let body = json!({"prompt": "a", "max_tokens": 1}).to_string();
    let post = |headers: &[(&str, &str)]| request(&s.addr, "POST", "/generate", headers, body.as_bytes());
    let v = assert_error(&post(&[]), 401, None);
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert_error(&post(&[("Authorization", "Bearer wrong")]), 401, None);
    assert_error(&post(&[("Authorization", "Bearer s3cret-ke")]), 401, None);
    assert_error(&post(&[("Authorization", "s3cret-key")]), 401, None);
    assert_eq!(post(&[("Authorization", "Bearer s3cret-key")]).status, 200);
    assert_error(&s.get("/v1/models"), 401, None);
    assert_error(&s.get("/metrics"), 401, None);
    assert_eq!(s.get("/health").status, 200, "/health stays open");
    // DNS rebinding: a foreign Host is refused on a loopback bind; localhost names pass.
    let auth = ("Authorization", "Bearer s3cret-key");
    let r = request(&s.addr, "GET", "/v1/models", &[("Host", "evil.example:8080"), auth], b"");
    assert_error(&r, 403, None);
    let port = s.addr.rsplit(':').next().unwrap();
    for host in ["localhost".to_string(), format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        assert_eq!(request(&s.addr, "GET", "/v1/models", &[("Host", &host), auth], b"").status, 200, "{host}");
    }
    let m = request(&s.addr, "GET", "/metrics", &[auth], b"").text();
    assert!(m.contains("colibri_requests_total{endpoint=\"/generate\",status=\"401\"} 4"), "{m}");
}

/// Open a stream that runs long; returns the reader after the first SSE chunk arrived.
fn open_stream(addr: &str) -> BufReader<std::net::TcpStream> {
    let body = json!({"prompt": "And", "max_tokens": 400, "ignore_eos": true, "stream": true, "temperature": 0.8});
    let mut s = connect(addr);
    send_request(&mut s, "POST", "/v1/completions", &[], body.to_string().as_bytes());
    let mut r = BufReader::new(s);
    let (status, _) = read_head(&mut r);
    assert_eq!(status, 200);
    assert!(read_chunk(&mut r).is_some());
    r
}

#[test]
fn full_server_503_and_disconnect_cancels() {
    let s = Server::start(&["-m", &model(), "--parallel", "1", "--queue", "0", "--ctx", "512"]);
    let stream = open_stream(&s.addr);
    assert_eq!(s.metric("colibri_active_sequences"), 1);
    let r = s.post("/generate", &json!({"prompt": "a", "max_tokens": 1}));
    let v = assert_error(&r, 503, None);
    assert_eq!(v["error"]["code"], "server_busy");
    assert_eq!(r.header("retry-after"), Some("1"));
    // The client goes away mid-stream: the sequence is dropped within a step and its slot is free.
    let generated_at_drop = s.metric("colibri_generated_tokens_total");
    drop(stream);
    s.wait_until(|s| s.metric("colibri_active_sequences") == 0, "the cancelled sequence to go");
    let after = s.metric("colibri_generated_tokens_total");
    assert!(after < 400, "generation stopped early ({generated_at_drop} → {after} of 400 tokens)");
    let r = s.post("/generate", &json!({"prompt": "a", "max_tokens": 1}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.metric("colibri_generated_tokens_total"), after + 1, "nothing else kept generating");
}

/// A client that waits for each answer before sending the next never finds its own finished
/// request still holding the only place: the place is given back before the last event (found
/// while writing the OpenAPI conformance tests; before, ~1 request in 10 got 503 here).
#[test]
fn back_to_back_requests_on_a_full_size_server_are_never_busy() {
    let s = Server::start(&["-m", &model(), "--parallel", "1", "--queue", "0", "--ctx", "256"]);
    let bodies = [
        ("/generate", json!({"prompt": "a", "max_tokens": 1})),
        ("/v1/completions", json!({"prompt": "a", "max_tokens": 1, "stream": true})),
        ("/v1/completions", json!({"prompt": "a", "max_tokens": 0})),
    ];
    for (path, body) in &bodies {
        let busy = (0..150).filter(|_| s.post(path, body).status == 503).count();
        assert_eq!(busy, 0, "{path} {body}: {busy} of 150 sequential requests got 503");
    }
}

#[test]
fn a_queued_request_waits_for_a_slot() {
    let s = Server::start(&["-m", &model(), "--parallel", "1", "--queue", "1"]);
    let stream = open_stream(&s.addr);
    let addr = s.addr.clone();
    let queued = std::thread::spawn(move || {
        request(&addr, "POST", "/generate", &[], json!({"prompt": "a", "max_tokens": 2}).to_string().as_bytes())
    });
    s.wait_until(|s| s.metric("colibri_queue_depth") == 1, "the second request to queue");
    assert_error(&s.post("/generate", &json!({"prompt": "a", "max_tokens": 1})), 503, None);
    drop(stream);
    assert_eq!(queued.join().unwrap().status, 200);
}

#[test]
fn the_request_timeout_ends_a_generation() {
    let s = Server::start(&["-m", &model(), "--timeout", "1", "-c", "2048"]);
    let t0 = std::time::Instant::now();
    let v = s.post("/generate", &json!({"prompt": "And", "max_tokens": 2000, "ignore_eos": true})).json();
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(v["finish_reason"], "length");
    assert!(v["completion_tokens"].as_u64().unwrap() < 2000, "{v}");
    // A body that never completes gets 408 (the body wait is capped by --timeout too).
    let mut c = connect(&s.addr);
    use std::io::Write;
    c.write_all(b"POST /generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n").unwrap();
    c.write_all(b"Content-Length: 100\r\n\r\n{\"prompt\":").unwrap();
    let mut r = BufReader::new(c);
    let (status, _) = read_head(&mut r);
    assert_eq!(status, 408);
}

/// A client that trickles its request head, or leaves a keep-alive connection idle, is cut off
/// after --header-timeout; the server keeps answering everyone else meanwhile.
#[test]
fn slow_and_idle_connections_are_closed() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let s = Server::start(&["-m", &model(), "--header-timeout", "1"]);
    let mut slow = serve_support::connect(&s.addr);
    let mut idle = serve_support::connect(&s.addr);
    let t0 = Instant::now();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n").unwrap();
    // Keep trickling header bytes: activity does not reset the head deadline.
    let mut closed_after = None;
    let mut buf = [0u8; 256];
    slow.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    while t0.elapsed() < Duration::from_secs(10) {
        if slow.write_all(b"X-Slow: 1\r\n").is_err() {
            closed_after = Some(t0.elapsed());
            break;
        }
        match slow.read(&mut buf) {
            // Still open: the read just timed out.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            // EOF, a reset, or an error response: the server gave up on the head.
            _ => {
                closed_after = Some(t0.elapsed());
                break;
            }
        }
        // Other clients are served while the slow one hangs.
        assert_eq!(s.get("/health").status, 200);
    }
    let closed_after = closed_after.expect("a trickling request head was never cut off");
    assert!(closed_after >= Duration::from_millis(900), "closed too early: {closed_after:?}");
    // The idle connection (opened at t0, never wrote) is gone too.
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(idle.read(&mut buf).unwrap_or(0), 0, "an idle connection stayed open");
    assert!(t0.elapsed() < Duration::from_secs(8));
    assert_eq!(s.get("/health").status, 200);
}
