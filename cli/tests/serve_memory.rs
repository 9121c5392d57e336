//! `colibri serve` and the memory a request may claim: the per-request cap
//! (`--max-request-tokens`, 400), the max_tokens of a chat request that gives none
//! (`--default-max-tokens`, never the whole context), and the server-wide KV budget
//! (`--kv-budget`: 503 + Retry-After past what remains, the claim given back when a request ends,
//! used/total in /metrics). The default model's KV cache takes 4096 bytes per token (4 layers ×
//! 4 KV heads × 32 × K and V × f32).

mod serve_support;

use serde_json::{json, Value};
use serve_support::{connect, read_chunk, read_head, send_request, Resp, Server};
use std::io::BufReader;

const KV_PER_TOKEN: u64 = 4096;

fn model() -> String {
    serve_support::default_model().to_str().unwrap().to_string()
}

fn error(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert!(v["error"]["message"].is_string(), "{v}");
    v["error"].clone()
}

/// A stream of `max_tokens` tokens, returned once its first chunk arrived.
fn open_stream(addr: &str, max_tokens: u64) -> BufReader<std::net::TcpStream> {
    let body = json!({"prompt": [1, 2], "max_tokens": max_tokens, "ignore_eos": true, "stream": true});
    let mut s = connect(addr);
    send_request(&mut s, "POST", "/v1/completions", &[], body.to_string().as_bytes());
    let mut r = BufReader::new(s);
    assert_eq!(read_head(&mut r).0, 200);
    assert!(read_chunk(&mut r).is_some());
    r
}

#[test]
fn one_request_may_claim_at_most_max_request_tokens() {
    let s = Server::start(&["-m", &model(), "--max-request-tokens", "64"]);
    let e = error(&s.post("/v1/completions", &json!({"prompt": [1, 2], "max_tokens": 63})), 400);
    assert_eq!((e["code"].as_str(), e["param"].as_str()), (Some("request_too_large"), Some("max_tokens")), "{e}");
    let e = error(
        &s.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "a"}],
                                                           "max_completion_tokens": 100}),
        ),
        400,
    );
    assert_eq!(e["param"], "max_completion_tokens", "{e}");
    let e = error(&s.post("/v1/completions", &json!({"prompt": vec![5; 64], "max_tokens": 1})), 400);
    assert_eq!((e["code"].as_str(), e["param"].as_str()), (Some("context_length_exceeded"), Some("prompt")), "{e}");
    let r = s.post("/v1/completions", &json!({"prompt": [1, 2], "max_tokens": 62, "ignore_eos": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 62);
}

#[test]
fn a_chat_request_without_max_tokens_does_not_claim_the_whole_context() {
    let chat = json!({"messages": [{"role": "user", "content": "And"}], "ignore_eos": true, "temperature": 0});
    // The default (1024) is clamped to the context (512) here.
    let s = Server::start(&["-m", &model(), "--default-max-tokens", "5"]);
    let u = s.post("/v1/chat/completions", &chat).json()["usage"].clone();
    assert_eq!(u["completion_tokens"], 5, "{u}");
    let s = Server::start(&["-m", &model(), "--max-request-tokens", "40"]);
    let u = s.post("/v1/chat/completions", &chat).json()["usage"].clone();
    assert_eq!(u["total_tokens"], 40, "filled up to what one request may claim: {u}");
}

#[test]
fn the_kv_budget_refuses_what_does_not_fit_and_frees_it_when_requests_end() {
    // 1 MiB = 256 tokens of KV cache for all requests together.
    let s = Server::start(&["-m", &model(), "--kv-budget", "1M", "--parallel", "4"]);
    assert_eq!(s.metric("colibri_kv_budget_bytes"), 1 << 20);
    assert_eq!(s.metric("colibri_kv_budget_used_bytes"), 0);
    // A request that could never fit is the client's to shrink: 400.
    let e = error(&s.post("/generate", &json!({"prompt": "a", "max_tokens": 300})), 400);
    assert_eq!(e["code"], "request_too_large", "{e}");
    // A stream claims 2 + 200 tokens.
    let stream = open_stream(&s.addr, 200);
    assert_eq!(s.metric("colibri_kv_budget_used_bytes"), 202 * KV_PER_TOKEN);
    // 101 tokens do not fit in the 54 left: 503, Retry-After, a JSON error; nothing allocated.
    let r = s.post("/v1/completions", &json!({"prompt": [1], "max_tokens": 100}));
    let e = error(&r, 503);
    assert_eq!(e["code"], "kv_budget_exhausted", "{e}");
    assert_eq!(r.header("retry-after"), Some("1"));
    // 11 tokens fit, and come back when the request is done.
    let r = s.post("/v1/completions", &json!({"prompt": [1], "max_tokens": 10}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.metric("colibri_kv_budget_used_bytes"), 202 * KV_PER_TOKEN);
    // The stream's client goes away: its claim comes back.
    drop(stream);
    s.wait_until(|s| s.metric("colibri_kv_budget_used_bytes") == 0, "the budget to be released");
    let r = s.post("/v1/completions", &json!({"prompt": [1], "max_tokens": 100}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.metric("colibri_kv_budget_used_bytes"), 0);
}

#[test]
fn kv_budget_sizes_are_checked() {
    let s = Server::start(&["-m", &model(), "--kv-budget", "1.5G"]);
    assert_eq!(s.metric("colibri_kv_budget_bytes"), 3 << 29);
    let s = Server::start(&["-m", &model()]);
    assert!(s.metric("colibri_kv_budget_bytes") > 0, "a default from the machine's memory");
    for bad in ["0", "lots", "8X", "-1G"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_colibri"))
            .args(["serve", "--port", "0", "-m", &model(), "--kv-budget", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "--kv-budget {bad} accepted");
    }
}
