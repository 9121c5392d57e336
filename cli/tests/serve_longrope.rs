//! `colibri serve` on a LongRoPE model (the phimoe_long fixture, original context 12): a greedy
//! completion whose decoding crosses the original context gets, at every step, the logits of one
//! forward call over the sequence so far — what transformers' generate() computes (it re-encodes
//! the sequence at the crossing) — not those of token-by-token decoding.

mod common;
mod serve_support;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::{Session, SessionOptions};
use colibri::{LoadOptions, Model};
use serde_json::json;
use serve_support::Server;
use std::path::Path;
use std::process::Command;

/// log softmax(logits)[token] in f64.
fn logprob(logits: &[f32], token: usize) -> f64 {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z: f64 = logits.iter().map(|&v| (f64::from(v) - m).exp()).sum();
    f64::from(logits[token]) - m - z.ln()
}

#[test]
fn greedy_completion_past_the_original_context_matches_one_call_per_step() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = common::fixtures().into_iter().find(|d| d.ends_with("phimoe_long")).unwrap();
    let file = tmp.path().join("m.colibri");
    let o = Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["convert", dir.to_str().unwrap(), "-o", file.to_str().unwrap(), "--dtype", "f32"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = Model::open(Path::new(&file), &LoadOptions::default()).unwrap();
    let original = model.config().longrope_original().unwrap();
    let prompt: Vec<u32> = vec![1, 40, 41, 42];
    let n = 12;
    assert!(prompt.len() < original && prompt.len() + n > original + 1);

    let s = Server::start(&["-m", file.to_str().unwrap()]);
    let body = json!({"prompt": [prompt], "max_tokens": n, "temperature": 0, "logprobs": 1, "ignore_eos": true});
    let r = s.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let served = v["choices"][0]["logprobs"]["token_logprobs"].as_array().unwrap().clone();
    assert_eq!(served.len(), n);

    // The reference: one call over prompt + the tokens so far, greedy.
    let mut seq = prompt.clone();
    let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
    for (j, lp) in served.iter().enumerate() {
        let mut one = Session::new(model.config(), &SessionOptions { n_ctx: 64, ..Default::default() }).unwrap();
        forward(&model, &mut one, Input::Tokens(&seq), &last).unwrap();
        let next = common::argmax(one.logits());
        let want = logprob(one.logits(), next as usize);
        let got = lp.as_f64().unwrap();
        assert!((got - want).abs() < 1e-4, "step {j} (sequence of {}): served {got}, one call {want}", seq.len());
        seq.push(next);
    }
}
