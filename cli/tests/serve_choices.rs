//! `colibri serve` on the shipped default model: `logit_bias`, `n` choices (whole and streamed,
//! seeds per choice, admission limits), chat logprobs streamed, `--alias`, /tokenize and
//! /detokenize, and the per-request log line.

mod serve_support;

use serde_json::{json, Value};
use serve_support::{sse_chunks, Server};

fn model() -> String {
    serve_support::default_model().to_str().unwrap().to_string()
}

fn server(extra: &[&str]) -> Server {
    let m = model();
    let mut args = vec!["-m", m.as_str(), "--parallel", "4"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn ids(s: &Server, text: &str) -> Vec<u64> {
    let v = s.post("/tokenize", &json!({"content": text})).json();
    v["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

/// Greedy completion of `prompt` and the generated ids (through /generate, which returns them).
fn greedy(s: &Server, extra: Value) -> Vec<u64> {
    let mut b = json!({"prompt": "And the LORD said", "max_tokens": 6, "temperature": 0, "ignore_eos": true});
    b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let r = s.post("/generate", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn logit_bias_forces_and_bans_tokens() {
    let s = server(&[]);
    let plain = greedy(&s, json!({}));
    // +100 on one token: greedy picks it every step.
    let forced = greedy(&s, json!({"logit_bias": {"300": 100}}));
    assert_eq!(forced, vec![300; 6]);
    // -100 on greedy's tokens: none of them is ever chosen, and the first step changes.
    let ban: serde_json::Map<String, Value> = plain.iter().map(|t| (t.to_string(), json!(-100))).collect();
    let banned = greedy(&s, json!({ "logit_bias": ban }));
    assert_ne!(banned[0], plain[0]);
    assert!(banned.iter().all(|t| !plain.contains(t)), "{plain:?} {banned:?}");
    // A small bias shifts without forcing: logprobs see the bias (OpenAI's semantics).
    let lp = |bias: Value| {
        let b = json!({"prompt": "And the LORD said", "max_tokens": 1, "temperature": 0, "logprobs": 0, "logit_bias": bias});
        s.post("/v1/completions", &b).json()["choices"][0]["logprobs"]["token_logprobs"][0].as_f64().unwrap()
    };
    let first = plain[0].to_string();
    assert!(lp(json!({ first.clone(): 2 })) > lp(json!({})), "a positive bias raises the chosen token's logprob");
    // Chat takes it too.
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0,
                      "ignore_eos": true, "logit_bias": {"300": 100}, "logprobs": true});
    let v = s.post("/v1/chat/completions", &chat).json();
    let toks = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let piece = s.post("/tokenize", &json!({"content": "", "with_pieces": true})).json();
    assert!(piece["tokens"].as_array().unwrap().is_empty());
    assert_eq!(toks.len(), 3);
    assert!(toks.iter().all(|t| t["token"] == toks[0]["token"]), "{toks:?}");
}

#[test]
fn n_choices_are_independent_seeded_and_streamed() {
    let s = server(&[]);
    let req = json!({"prompt": "In the beginning", "max_tokens": 8, "temperature": 1.0, "seed": 41, "n": 3,
                     "ignore_eos": true});
    let v = s.post("/v1/completions", &req).json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    let texts: Vec<&str> = choices.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        // Choice i repeats as choice 0 of the same request with seed + i.
        let mut one = req.clone();
        one["n"] = json!(1);
        one["seed"] = json!(41 + i);
        assert_eq!(s.post("/v1/completions", &one).json()["choices"][0]["text"], texts[i], "choice {i}");
    }
    assert!(texts[0] != texts[1] || texts[1] != texts[2], "three samples at temperature 1 all equal: {texts:?}");
    assert_eq!(v["usage"]["completion_tokens"], 24);
    let prompt = s.post("/tokenize", &json!({"content": "In the beginning", "add_special": true})).json();
    assert_eq!(v["usage"]["prompt_tokens"], prompt["tokens"].as_array().unwrap().len(), "the prompt counts once");

    // Streamed: every chunk names its choice; each choice's text and finish as whole.
    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let chunks = sse_chunks(&s.post("/v1/completions", &sreq));
    for (i, want) in texts.iter().enumerate() {
        let mine: Vec<&Value> =
            chunks.iter().flat_map(|c| c["choices"].as_array().unwrap()).filter(|c| c["index"] == i).collect();
        let text: String = mine.iter().filter_map(|c| c["text"].as_str()).collect();
        assert_eq!(&text, want, "choice {i}");
        let finishes: Vec<&Value> = mine.iter().map(|c| &c["finish_reason"]).filter(|f| !f.is_null()).collect();
        assert_eq!(finishes, vec![&json!("length")], "choice {i}");
    }
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 24);

    // Chat: n choices whole and streamed, each with its role first and its logprobs.
    let chat = json!({"messages": [{"role": "user", "content": "Who made the heaven?"}], "max_tokens": 4, "n": 2,
                      "seed": 5, "ignore_eos": true, "logprobs": true, "top_logprobs": 2});
    let v = s.post("/v1/chat/completions", &chat).json();
    let whole: Vec<&str> =
        v["choices"].as_array().unwrap().iter().map(|c| c["message"]["content"].as_str().unwrap()).collect();
    assert_eq!(whole.len(), 2);
    let mut schat = chat.clone();
    schat["stream"] = json!(true);
    let chunks = sse_chunks(&s.post("/v1/chat/completions", &schat));
    for (i, want) in whole.iter().enumerate() {
        let mine: Vec<&Value> =
            chunks.iter().flat_map(|c| c["choices"].as_array().unwrap()).filter(|c| c["index"] == i).collect();
        assert_eq!(mine[0]["delta"]["role"], "assistant");
        let text: String = mine.iter().filter_map(|c| c["delta"]["content"].as_str()).collect();
        assert_eq!(&text, want, "chat choice {i}");
        let lps: Vec<&Value> =
            mine.iter().flat_map(|c| c["logprobs"]["content"].as_array().into_iter().flatten()).collect();
        assert_eq!(lps.len(), 4, "one logprob entry per streamed token");
        let streamed: String = lps.iter().map(|t| t["token"].as_str().unwrap()).collect();
        assert_eq!(&streamed, want);
        assert!(lps.iter().all(|t| t["top_logprobs"].as_array().unwrap().len() == 2 && t["bytes"].is_array()));
    }
}

#[test]
fn n_counts_against_admission_and_the_kv_budget() {
    let s = server(&["--queue", "1"]);
    // --parallel 4 + --queue 1: n = 6 can never be admitted.
    let e = s.post("/v1/completions", &json!({"prompt": "a", "n": 6, "max_tokens": 1})).json();
    assert_eq!(e["error"]["param"], "n", "{e}");
    assert_eq!(s.post("/v1/completions", &json!({"prompt": "a", "n": 5, "max_tokens": 1})).status, 200);
    drop(s);
    // A budget one sequence fits (102 tokens × 4 KiB) and three do not: n = 3 is refused whole, n = 1 passes.
    let s = server(&["--kv-budget", "1M", "-c", "256"]);
    let one = json!({"prompt": "a", "max_tokens": 100});
    assert_eq!(s.post("/v1/completions", &one).status, 200);
    let mut three = one.clone();
    three["n"] = json!(3);
    let r = s.post("/v1/completions", &three);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "request_too_large");
}

#[test]
fn aliases_name_the_model_and_others_are_not_found() {
    let s = server(&["--alias", "gpt-4o-mini", "--alias", "local"]);
    let ids: Vec<Value> =
        s.get("/v1/models").json()["data"].as_array().unwrap().iter().map(|m| m["id"].clone()).collect();
    assert_eq!(ids, vec![json!("default"), json!("gpt-4o-mini"), json!("local")]);
    for name in ["default", "gpt-4o-mini", "local"] {
        let r = s.post("/v1/completions", &json!({"model": name, "prompt": "a", "max_tokens": 1}));
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert_eq!(r.json()["model"], "default");
        assert_eq!(s.get(&format!("/v1/models/{name}")).json()["id"], name);
    }
    let r = s.post("/v1/chat/completions", &json!({"model": "gpt-5", "messages": [{"role": "user", "content": "a"}]}));
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
}

#[test]
fn tokenize_and_detokenize_round_trip() {
    let s = server(&[]);
    let text = "And God said, Let there be light: and there was light.";
    let plain = ids(&s, text);
    assert!(plain.len() > 5);
    let with = s.post("/tokenize", &json!({"content": text, "add_special": true})).json();
    let with: Vec<u64> = with["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    // The served prompt is what /tokenize with add_special gives.
    let v = s.post("/v1/completions", &json!({"prompt": text, "max_tokens": 1})).json();
    assert_eq!(v["usage"]["prompt_tokens"], with.len());
    assert!(with.ends_with(&plain));
    let pieces = s.post("/tokenize", &json!({"content": text, "with_pieces": true})).json();
    let pieces = pieces["tokens"].as_array().unwrap();
    assert_eq!(pieces.iter().map(|p| p["id"].as_u64().unwrap()).collect::<Vec<_>>(), plain);
    assert_eq!(pieces.iter().map(|p| p["piece"].as_str().unwrap()).collect::<String>(), text);
    let back = s.post("/detokenize", &json!({ "tokens": plain })).json();
    assert_eq!(back["content"], text);
    assert_eq!(s.post("/detokenize", &json!({"tokens": []})).json()["content"], "");
}

/// The JSON request lines in the server's log.
fn request_lines(s: &Server) -> Vec<Value> {
    s.log().lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["event"] == "request").collect()
}

#[test]
fn one_log_line_per_request() {
    let s = server(&[]);
    let v = s.post("/v1/completions", &json!({"prompt": "And", "max_tokens": 3, "n": 2, "ignore_eos": true})).json();
    let id = v["id"].as_str().unwrap().to_string();
    let chunks = sse_chunks(&s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "a"}],
        "max_tokens": 2, "stream": true, "ignore_eos": true}),
    ));
    let chat_id = chunks[0]["id"].as_str().unwrap().to_string();
    assert_eq!(s.post("/v1/completions", &json!({"prompt": "a", "top_p": 7})).status, 400);
    s.wait_until(|s| request_lines(s).len() >= 3, "three request lines");
    let lines = request_lines(&s);
    let done = lines.iter().find(|l| l["id"] == id).expect("the completion's line");
    assert_eq!(done["endpoint"], "/v1/completions");
    assert_eq!((done["status"].as_u64(), done["completion_tokens"].as_u64()), (Some(200), Some(6)));
    assert_eq!(done["finish_reason"], "length,length");
    for k in ["queue_ms", "ttft_ms", "total_ms"] {
        assert!(done[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {done}");
    }
    assert!(done["ttft_ms"].as_f64() <= done["total_ms"].as_f64());
    let chat = lines.iter().find(|l| l["id"] == chat_id).expect("the stream's line");
    assert_eq!((chat["completion_tokens"].as_u64(), chat["finish_reason"].as_str()), (Some(2), Some("length")));
    assert!(lines.iter().any(|l| l["status"] == 400 && l["endpoint"] == "/v1/completions"));
    assert!(lines.iter().all(|l| l["endpoint"] != "/health"), "health probes are not logged");
    drop(s);

    let s = server(&["--request-log", "logfmt"]);
    s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 1}));
    s.wait_until(|s| s.log().contains("event=request "), "a logfmt line");
    assert!(s.log().lines().any(|l| l.starts_with("event=request id=cmpl-") && l.contains(" status=200 ")));
    drop(s);
    let s = server(&["--request-log", "off"]);
    s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 1}));
    s.get("/v1/models");
    assert!(!s.log().contains("request"), "{}", s.log());
}

/// A prompt long enough for the batched GEMM path (≥ 16 rows) with n = 3: it is computed once
/// (the prompt-token counter grows by its length, not three times it) and each choice starts from
/// the very logits a single-choice request with the same prompt gets. Then each choice decodes
/// alone (`--parallel 1`) or in steps of three rows with the others (`--parallel 4`: a decode
/// step below the GEMM switch gives each row the bits of its row alone): either way its tokens
/// and logprobs equal, bit for bit, those of a single-choice request with that choice's seed.
#[test]
fn n_choices_compute_a_long_prompt_once() {
    for parallel in ["1", "4"] {
        let s = Server::start(&["-m", &model(), "--parallel", parallel, "--prompt-cache", "0"]);
        let prompt: Vec<u64> = (0..48).map(|i| (i * 97 + 5) % 4096).collect();
        let req = json!({"prompt": [prompt], "max_tokens": 8, "temperature": 1.0, "seed": 11, "n": 3,
                         "ignore_eos": true, "logprobs": 2});
        let before = s.metric("colibri_prompt_tokens_total");
        let v = s.post("/v1/completions", &req).json();
        assert_eq!(v["usage"]["prompt_tokens"], 48, "{v}");
        let computed = s.metric("colibri_prompt_tokens_total") - before;
        assert_eq!(computed, 48, "--parallel {parallel}: the prompt was computed once for 3 choices");
        let choices = v["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 3);
        for (i, c) in choices.iter().enumerate() {
            let mut one = req.clone();
            one["n"] = json!(1);
            one["seed"] = json!(11 + i);
            let alone = &s.post("/v1/completions", &one).json()["choices"][0];
            let what = format!("--parallel {parallel}, choice {i}");
            let first = |v: &Value| (v["logprobs"]["tokens"][0].clone(), v["logprobs"]["top_logprobs"][0].clone());
            assert_eq!(first(c), first(alone), "{what}: the first token and its logprobs");
            assert_eq!(c["text"], alone["text"], "{what}");
            assert_eq!(c["logprobs"], alone["logprobs"], "{what}: logprobs differ");
        }
        let texts: Vec<&Value> = choices.iter().map(|c| &c["text"]).collect();
        assert!(texts[0] != texts[1] || texts[1] != texts[2], "three samples at temperature 1 all equal: {texts:?}");
    }
}
