//! `colibri serve`'s prompt cache: a request whose prompt starts with the tokens of an earlier
//! request (and its answer) reuses that KV cache — reported in
//! `usage.prompt_tokens_details.cached_tokens` and /metrics — and gets what a server without the
//! cache computes (the same greedy tokens; logprobs to the rounding of the model's activation
//! path, since reused answer tokens were computed by decode steps); the cache stays within
//! `--prompt-cache` bytes; a hybrid model with recurrent (DeltaNet) layers reuses a session only
//! at a point its state can be restored, with the same results as no cache; a hit copies the
//! kept session, so requests at once all reuse it; `--prompt-cache 0` keeps nothing.

mod common;
mod serve_support;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::{Session, SessionOptions};
use colibri::{LoadOptions, Model};
use serde_json::{json, Value};
use serve_support::Server;
use std::path::Path;
use std::process::Command;

/// A greedy completion of `prompt`: (generated ids' logprobs, text, cached tokens).
fn complete(s: &Server, prompt: &[u32], n: usize) -> (Vec<Value>, String, u64) {
    let body = json!({"prompt": [prompt], "max_tokens": n, "temperature": 0, "logprobs": 1, "ignore_eos": true});
    let r = s.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let lp = v["choices"][0]["logprobs"]["token_logprobs"].as_array().unwrap().clone();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    (lp, v["choices"][0]["text"].as_str().unwrap().to_string(), cached)
}

/// `n` greedy ids after `prompt`, computed in-process (the server's answer, as ids).
fn greedy(m: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(m.config(), &SessionOptions { n_ctx: 512, ..Default::default() }).unwrap();
    let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
    let mut out = Vec::new();
    let mut feed = prompt.to_vec();
    for _ in 0..n {
        forward(m, &mut s, Input::Tokens(&feed), &last).unwrap();
        let l = s.logits();
        let best = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
        out.push(best);
        feed = vec![best];
    }
    out
}

fn m_text(m: &Model, ids: &[u32]) -> String {
    let tok = colibri::tokenizer::Tokenizer::from_model(m).unwrap();
    tok.decode(ids, true).unwrap()
}

fn ids(n: u32, salt: u32, vocab: u32) -> Vec<u32> {
    (0..n).map(|i| (i * 97 + salt * 31 + 5) % vocab).collect()
}

/// Three requests growing one conversation, then one sharing only its start: the cached server
/// reuses the longest prefix each time and answers exactly as the uncached one.
/// The reused part of a prompt was computed partly by decode steps (one row at a time) where
/// the uncached server prefills it in one call: equal up to the rounding of the model's
/// activation path (`tol`), never a different token.
fn close(a: &[Value], b: &[Value], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        let d = (x.as_f64().unwrap() - y.as_f64().unwrap()).abs();
        assert!(d <= tol, "{what}: logprobs {x} vs {y}");
    }
}

fn conversation(model: &str, vocab: u32, tol: f64) -> (Vec<u64>, Server) {
    let cached = Server::start(&["-m", model]);
    let plain = Server::start(&["-m", model, "--prompt-cache", "0"]);
    let m = Model::open(Path::new(model), &LoadOptions::default()).unwrap();
    let mut prompt = ids(40, 1, vocab);
    let mut reused = Vec::new();
    for turn in 0..3 {
        let (lp_c, text_c, n_c) = complete(&cached, &prompt, 6);
        let (lp_p, text_p, n_p) = complete(&plain, &prompt, 6);
        assert_eq!(n_p, 0, "the server without a cache reused tokens");
        assert_eq!(text_c, text_p, "turn {turn}: the cached answer differs");
        close(&lp_c, &lp_p, tol, &format!("turn {turn}"));
        reused.push(n_c);
        // The next turn: this prompt, the greedy answer's ids and a new user part.
        let answer = greedy(&m, &prompt, 6);
        assert_eq!(text_p, m_text(&m, &answer), "turn {turn}: the in-process greedy answer differs");
        prompt.extend(&answer);
        prompt.extend(ids(9, turn + 2, vocab));
    }
    // Sharing only the first 40 tokens with what is kept.
    let mut branch = ids(40, 1, vocab);
    branch.extend(ids(5, 99, vocab));
    let (lp_c, _, n_c) = complete(&cached, &branch, 4);
    let (lp_p, _, _) = complete(&plain, &branch, 4);
    close(&lp_c, &lp_p, tol, "branch");
    reused.push(n_c);
    assert_eq!(cached.metric("colibri_cached_prompt_tokens_total"), reused.iter().sum::<u64>());
    (reused, cached)
}

#[test]
fn a_shared_prefix_is_reused_and_changes_nothing() {
    let model = serve_support::default_model();
    // The bf16 default model rounds its activations to bf16: where decode and prefill differ
    // in f32 (attention's sums), a value on a rounding boundary moves by a bf16 step and the
    // logprobs by up to a few 1e-3 (AMX Xeon, eight variants of this conversation: largest
    // difference per variant 0 to 4.3e-3, 5.8e-3 on this one).
    let (reused, s) = conversation(model.to_str().unwrap(), 4096, 1e-2);
    // Turn 1 has nothing to reuse; turns 2 and 3 reuse the previous prompt + answer; the branch
    // reuses its 40 shared tokens.
    assert_eq!(reused[0], 0);
    assert_eq!(reused[1], 40 + 5, "{reused:?}");
    assert_eq!(reused[2], 40 + 6 + 9 + 5, "{reused:?}");
    assert_eq!(reused[3], 40, "{reused:?}");
    assert!(s.metric("colibri_prompt_cache_sessions") >= 1);
}

/// A hit copies the kept prefix and keeps the entry: the three choices of one request (Gumbel
/// routing: each computes its own prompt) all reuse it at once, and a later request still does.
#[test]
fn requests_at_once_all_reuse_a_kept_prefix() {
    let model = serve_support::default_model();
    let s = Server::start(&["-m", model.to_str().unwrap(), "--parallel", "4"]);
    let system = ids(40, 3, 4096);
    // One generated token, not fed: the kept session holds the 40 prompt tokens.
    assert_eq!(complete(&s, &system, 1).2, 0);
    let with = |salt: u32| [&system[..], &ids(6, salt, 4096)[..]].concat();
    let body = json!({"prompt": [with(8)], "max_tokens": 2, "n": 3, "routing": "gumbel", "routing_seed": 1,
                      "ignore_eos": true});
    let before = s.metric("colibri_cached_prompt_tokens_total");
    let r = s.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 40);
    assert_eq!(s.metric("colibri_cached_prompt_tokens_total") - before, 3 * 40, "every choice reused the prefix");
    assert_eq!(complete(&s, &with(9), 2).2, 40, "the entry is still kept");
}

#[test]
fn the_cache_stays_within_its_bound() {
    let model = serve_support::default_model();
    // The default model's KV takes 4096 bytes per token: 256 KiB hold 64 positions.
    let s = Server::start(&["-m", model.to_str().unwrap(), "--prompt-cache", "256K"]);
    for salt in 0..6 {
        complete(&s, &ids(30, salt, 4096), 2);
        let bytes = s.metric("colibri_prompt_cache_bytes");
        assert!(bytes <= 256 << 10, "{bytes} bytes held");
        assert!(bytes > 0, "nothing kept");
    }
    // Too long to fit at all: not kept, nothing else evicted for it.
    let before = s.metric("colibri_prompt_cache_sessions");
    complete(&s, &ids(200, 7, 4096), 2);
    assert_eq!(s.metric("colibri_prompt_cache_sessions"), before);
    let off = Server::start(&["-m", model.to_str().unwrap(), "--prompt-cache", "0"]);
    complete(&off, &ids(30, 0, 4096), 2);
    assert_eq!(off.metric("colibri_prompt_cache_sessions"), 0);
    assert_eq!(complete(&off, &ids(30, 0, 4096), 2).2, 0);
}

#[test]
fn a_hybrid_model_reuses_only_restorable_points() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = common::fixtures().into_iter().find(|d| d.ends_with("qwen3_next_hybrid")).unwrap();
    let file = tmp.path().join("m.colibri");
    let o = Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["convert", dir.to_str().unwrap(), "-o", file.to_str().unwrap(), "--dtype", "f32"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (reused, _s) = conversation(file.to_str().unwrap(), 400, 1e-5);
    // The recurrent state stands for the whole kept sequence: a continuation of it is reused
    // up to the last fed token; the branch (a cut inside it) cannot be restored and recomputes.
    assert_eq!(reused[0], 0);
    assert!(reused[1] > 0 && reused[2] > reused[1], "{reused:?}");
    assert_eq!(reused[3], 0, "{reused:?}");
}
