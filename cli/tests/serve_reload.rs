//! `colibri serve` hot reload and shutdown: SIGUSR1 while streams run (every request completes,
//! on the model it started with; new requests get the new model), SIGUSR1 with a corrupt or
//! missing file (rejected, the old model keeps serving), SIGTERM (in-flight work finishes, exit 0,
//! pid file removed).

mod common;
mod serve_support;

use serde_json::{json, Value};
use serve_support::{request, sse_chunks, Server};
use std::path::Path;
use std::time::Instant;

/// A model different from the default one (2 layers, 400-token vocabulary) at `out`.
fn convert_fixture(out: &Path) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/mixtral_gqa");
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["convert", dir.to_str().unwrap(), "-o", out.to_str().unwrap(), "--no-progress"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
}

fn generation(s: &Server) -> u64 {
    s.get("/health").json()["generation"].as_u64().unwrap()
}

fn active(s: &Server) -> u64 {
    let m = s.get("/metrics").text();
    let line = m.lines().find(|l| l.starts_with("colibri_active_sequences ")).unwrap();
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn model_info(s: &Server) -> Value {
    s.get("/v1/models").json()["data"][0].clone()
}

#[test]
fn reload_during_streams_drops_nothing_and_rejects_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served.colibri");
    std::fs::copy(serve_support::default_model(), &served).unwrap();
    let next = dir.path().join("next.colibri");
    convert_fixture(&next);
    let s = Server::start(&["-m", served.to_str().unwrap(), "-c", "2048", "--parallel", "4"]);
    assert_eq!(model_info(&s)["colibri"]["n_layers"], 4);
    let before = s.post("/generate", &json!({"prompt": "And", "max_tokens": 8, "temperature": 0})).json();

    // Two long streams and a stream of short requests, all while the model is swapped.
    let streams: Vec<_> = (0..2)
        .map(|i| {
            let addr = s.addr.clone();
            std::thread::spawn(move || {
                let body = json!({"prompt": format!("And {i}"), "max_tokens": 1500, "ignore_eos": true, "stream": true,
                                  "stream_options": {"include_usage": true}, "model": "served"});
                let r = request(&addr, "POST", "/v1/completions", &[], body.to_string().as_bytes());
                (r, Instant::now())
            })
        })
        .collect();
    let addr = s.addr.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shorts = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let body = json!({"prompt": "And", "max_tokens": 4});
                statuses.push(request(&addr, "POST", "/generate", &[], body.to_string().as_bytes()).status);
            }
            statuses
        })
    };
    s.wait_until(|s| active(s) >= 2, "the streams to run");
    std::fs::rename(&next, &served).unwrap();
    s.signal(libc::SIGUSR1);
    s.wait_until(|s| generation(s) == 2, "generation 2");
    let reloaded_at = Instant::now();
    for h in streams {
        let (r, ended_at) = h.join().unwrap();
        let chunks = sse_chunks(&r);
        let usage = &chunks.last().unwrap()["usage"];
        assert_eq!(usage["completion_tokens"], 1500, "the stream finished whole");
        assert_eq!(chunks[chunks.len() - 2]["choices"][0]["finish_reason"], "length");
        assert!(ended_at > reloaded_at, "the stream was still running when the new model took over");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = shorts.join().unwrap();
    assert!(!statuses.is_empty() && statuses.iter().all(|&c| c == 200), "{statuses:?}");
    // New requests get the new model.
    let info = model_info(&s);
    assert_eq!((info["id"].as_str(), info["colibri"]["n_layers"].as_u64()), (Some("served"), Some(2)));
    assert_eq!(info["colibri"]["generation"], 2);
    let after = s.post("/generate", &json!({"prompt": "And", "max_tokens": 8, "temperature": 0})).json();
    assert_ne!(after["tokens"], before["tokens"]);
    assert!(after["tokens"].as_array().unwrap().iter().all(|t| t.as_u64().unwrap() < 400));
    assert!(s.log().contains("reloaded model served: generation 2"));

    // A corrupt file (one flipped byte in the tensor data: checksum) is rejected.
    let mut bytes = std::fs::read(serve_support::default_model()).unwrap();
    let at = bytes.len() - 1000;
    bytes[at] ^= 0x55;
    let bad = dir.path().join("bad.colibri");
    std::fs::write(&bad, &bytes).unwrap();
    std::fs::rename(&bad, &served).unwrap();
    s.signal(libc::SIGUSR1);
    s.wait_until(|s| s.log().matches("reload rejected").count() == 1, "the corrupt file to be rejected");
    // An intact file that cannot serve (routers at the f32/bf16 maximum: every checksum right,
    // every value finite, the canary forward pass overflows) is rejected too.
    let overflow = dir.path().join("overflow.colibri");
    common::rewrite_model(
        &serve_support::default_model(),
        &overflow,
        |_, v| v,
        |t, v| {
            if t.kind != colibri::format::TensorKind::Router {
                return v;
            }
            let max: &[u8] =
                if t.dtype == colibri::format::DType::F32 { &[0xFF, 0xFF, 0x7F, 0x7F] } else { &[0x7F, 0x7F] };
            max.iter().copied().cycle().take(v.len()).collect()
        },
    );
    std::fs::rename(&overflow, &served).unwrap();
    s.signal(libc::SIGUSR1);
    s.wait_until(|s| s.log().matches("reload rejected").count() == 2, "the overflowing file to be rejected");
    assert!(s.log().contains("non-finite logit"), "{}", s.log());
    // A missing file too.
    std::fs::remove_file(&served).unwrap();
    s.signal(libc::SIGUSR1);
    s.wait_until(|s| s.log().matches("reload rejected").count() == 3, "the missing file to be rejected");
    assert_eq!(generation(&s), 2);
    assert_eq!(s.post("/generate", &json!({"prompt": "And", "max_tokens": 8, "temperature": 0})).json(), after);
    let m = s.get("/metrics").text();
    assert!(m.contains("colibri_reloads_total 1") && m.contains("colibri_reload_failures_total 3"), "{m}");
}

/// The operator's mistake: the served file rewritten in place. Truncating it under a running
/// stream ends that stream with an error (never a SIGBUS, never tokens from zeroed pages); new
/// requests get 503 `model_changed` with Retry-After; once the path holds a whole model again
/// (written in place, as `cp` does) the server reloads it within seconds and serves it.
#[test]
fn a_file_rewritten_in_place_is_survived_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served.colibri");
    std::fs::copy(serve_support::default_model(), &served).unwrap();
    let next = dir.path().join("next.colibri");
    convert_fixture(&next);
    let s = Server::start(&["-m", served.to_str().unwrap(), "-c", "2048"]);
    let addr = s.addr.clone();
    let stream = std::thread::spawn(move || {
        let body = json!({"prompt": "And", "max_tokens": 1500, "ignore_eos": true, "stream": true});
        request(&addr, "POST", "/v1/completions", &[], body.to_string().as_bytes())
    });
    s.wait_until(|s| active(s) == 1, "the stream to run");
    std::fs::OpenOptions::new().write(true).open(&served).unwrap().set_len(8192).unwrap();
    let r = stream.join().unwrap();
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("model file changed"), "the stream ends with the error: {text}");
    let r = s.post("/generate", &json!({"prompt": "And", "max_tokens": 4}));
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["code"], "model_changed");
    // `cp next.colibri served.colibri`: the same inode, truncated and rewritten.
    std::fs::write(&served, std::fs::read(&next).unwrap()).unwrap();
    s.wait_until(|s| generation(s) == 2, "the rewritten file to be reloaded");
    let after = s.post("/generate", &json!({"prompt": "And", "max_tokens": 4, "temperature": 0}));
    assert_eq!(after.status, 200, "{}", String::from_utf8_lossy(&after.body));
    assert_eq!(model_info(&s)["colibri"]["n_layers"], 2);
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("colibri.pid");
    let model = serve_support::default_model();
    let mut s = Server::start(&["-m", model.to_str().unwrap(), "--pid-file", pid_file.to_str().unwrap()]);
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert_eq!(pid, s.child.id());
    let addr = s.addr.clone();
    let stream = std::thread::spawn(move || {
        let body = json!({"prompt": "And", "max_tokens": 300, "ignore_eos": true, "stream": true});
        request(&addr, "POST", "/v1/completions", &[], body.to_string().as_bytes())
    });
    s.wait_until(|s| active(s) == 1, "the stream to run");
    s.signal(libc::SIGTERM);
    let r = stream.join().unwrap();
    let chunks = sse_chunks(&r);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length", "the in-flight stream finished");
    assert_eq!(s.wait_exit(), Some(0));
    assert!(!pid_file.exists(), "pid file removed on exit");
    assert!(s.log().contains("shutting down"));
}

#[test]
fn a_bad_model_at_start_exits_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.colibri");
    std::fs::write(&bad, b"not a model").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["serve", "--port", "0", "-m", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: "));
}

/// A tokenizer with an added token whose id is past the model's vocabulary: any prompt holding
/// that token's text would reach the forward pass with it (and fail every sequence batched with
/// it). `validate`, the server's start and a reload all refuse such a model.
#[test]
fn a_tokenizer_that_does_not_fit_the_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.colibri");
    serve_support::with_tokenizer(&serve_support::default_model(), &bad, |t| {
        let evil = json!({"id": 4096, "content": "<|evil|>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true});
        t["added_tokens"].as_array_mut().unwrap().push(evil);
    });
    let colibri =
        |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_colibri")).args(args).output().unwrap();
    let out = colibri(&["validate", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("\"<|evil|>\" has id 4096"), "validate: {err}");
    let out = colibri(&["serve", "--port", "0", "-m", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));

    let served = dir.path().join("served.colibri");
    std::fs::copy(serve_support::default_model(), &served).unwrap();
    let s = Server::start(&["-m", served.to_str().unwrap()]);
    std::fs::rename(&bad, &served).unwrap();
    s.signal(libc::SIGUSR1);
    s.wait_until(|s| s.log().contains("reload rejected"), "the reload to be rejected");
    assert!(s.log().contains("has id 4096"), "{}", s.log());
    assert_eq!(generation(&s), 1);
    let r = s.post("/v1/completions", &json!({"prompt": "And <|evil|>", "max_tokens": 3}));
    assert_eq!(r.status, 200, "{}", r.text());
}
