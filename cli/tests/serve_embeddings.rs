//! `POST /v1/embeddings` of `colibri serve` on the shipped default model: each input's vector is
//! the library's embedding (`colibri::embed`, itself checked against transformers in
//! tests/embeddings.rs) — bit for bit when embedded in the same batch, as floats and as base64; every input shape (string, strings,
//! token ids, lists of ids) and batches split into groups by --max-request-tokens; `--pooling`;
//! usage; the refusals (dimensions, encoding_format, unknown and generation fields, empty or
//! too-long input, ids outside the vocabulary, a KV budget it can never fit); and generation
//! running at the same time gives exactly what it gives alone.

mod serve_support;

use colibri::embed::{self, EmbedOptions, Pooling};
use colibri::tokenizer::Tokenizer;
use colibri::{LoadOptions, Model};
use serde_json::{json, Value};
use serve_support::{default_model, Server};

fn start(extra: &[&str]) -> Server {
    let model = default_model();
    let mut args = vec!["-m", model.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// The library's embedding of each text (tokenised as the server does: with special tokens).
fn library(texts: &[&str], pooling: Pooling) -> Vec<Vec<f32>> {
    let model = Model::open(&default_model(), &LoadOptions::default()).unwrap();
    let tok = Tokenizer::from_model(&model).unwrap();
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t, true).unwrap()).collect();
    let refs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    embed::embed(&model, &refs, &EmbedOptions { pooling, ..EmbedOptions::default() }).unwrap()
}

/// The vectors of a 200 response, decoded from floats or base64, checked for order and shape.
fn vectors(v: &Value) -> Vec<Vec<f32>> {
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "default");
    let data = v["data"].as_array().unwrap();
    data.iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!((d["object"].as_str(), d["index"].as_u64()), (Some("embedding"), Some(i as u64)));
            match &d["embedding"] {
                Value::String(b) => base64::decode(b)
                    .unwrap()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                Value::Array(a) => a.iter().map(|x| x.as_f64().unwrap() as f32).collect(),
                other => panic!("embedding is {other}"),
            }
        })
        .collect()
}

/// The default model is bf16 and computes with bf16 activations: a step of 16 rows or more takes
/// the bf16 GEMM, whose sums differ in the last bit from the one-row kernel's, and bf16 rounding
/// of later activations can make that a 2⁻⁸ step. So an input embedded next to others (a
/// different number of rows) may differ from itself embedded alone by about this much (of a
/// unit vector); the same batch gives the same bits.
const BATCH_TOL: f32 = 2e-3;

fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: count");
    for (g, w) in got.iter().zip(want) {
        let d = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(g.len() == w.len() && d <= BATCH_TOL, "{what}: differs by {d}");
    }
}

const TEXTS: [&str; 3] = ["In the beginning God created the heaven and the earth.", "And God said", "Amen."];

#[test]
fn vectors_are_the_librarys_for_every_input_shape() {
    let s = start(&[]);
    let want = library(&TEXTS, Pooling::Mean);
    assert_eq!(want[0].len(), 256);
    let r = s.post("/v1/embeddings", &json!({"model": "default", "input": TEXTS}));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(vectors(&v), want, "a batch of strings");
    let model = Model::open(&default_model(), &LoadOptions::default()).unwrap();
    let tok = Tokenizer::from_model(&model).unwrap();
    let ids: Vec<Vec<u32>> = TEXTS.iter().map(|t| tok.encode(t, true).unwrap()).collect();
    let n: usize = ids.iter().map(Vec::len).sum();
    assert_eq!(v["usage"], json!({"prompt_tokens": n, "total_tokens": n}));
    let norm: f64 = want[0].iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "L2-normalised: {norm}");

    let one = s.post("/v1/embeddings", &json!({"input": TEXTS[1], "encoding_format": "float"})).json();
    assert_eq!(vectors(&one), library(&TEXTS[1..2], Pooling::Mean), "one string");
    let b64 = s.post("/v1/embeddings", &json!({"input": TEXTS[1], "encoding_format": "base64"})).json();
    assert_eq!(vectors(&b64), vectors(&one), "base64 carries the same floats");
    assert_close(&vectors(&one), &want[1..2], "one string vs in a batch");
    let r = s.post("/v1/embeddings", &json!({"input": ids[0], "dimensions": 256})).json();
    assert_eq!(vectors(&r), library(&TEXTS[..1], Pooling::Mean), "token ids, dimensions equal to the hidden size");
    let r = s.post("/v1/embeddings", &json!({"input": ids, "user": "u1"})).json();
    assert_eq!(vectors(&r), want, "lists of token ids");
    let mixed = json!({"input": [TEXTS[0], ids[1]]});
    assert_eq!(vectors(&s.post("/v1/embeddings", &mixed).json()), library(&TEXTS[..2], Pooling::Mean), "mixed");
}

#[test]
fn pooling_flag_and_groups_under_the_request_limit() {
    // Groups of at most 16 tokens: the three texts (14, 4 and 3 tokens or so) run as two groups.
    let s = start(&["--pooling", "last", "--max-request-tokens", "16"]);
    let want = library(&TEXTS, Pooling::Last);
    let r = s.post("/v1/embeddings", &json!({"input": TEXTS}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_close(&vectors(&r.json()), &want, "in two groups");
    assert!(r.json()["usage"]["prompt_tokens"].as_u64().unwrap() > 16, "more tokens than one group holds");
    let long = "And the earth was without form, and void; and darkness was upon the face of the deep.";
    let r = s.post("/v1/embeddings", &json!({"input": [TEXTS[2], long]}));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("context_length_exceeded")));
    assert_eq!(r.json()["error"]["param"], "input");
    let s = start(&["--pooling", "cls"]);
    let r = s.post("/v1/embeddings", &json!({"input": TEXTS[0]}));
    assert_eq!(vectors(&r.json()), library(&TEXTS[..1], Pooling::Cls));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["serve", "--pooling", "max", "-m", default_model().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad --pooling is a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("mean, last or cls"));
}

#[test]
fn refusals_name_their_field() {
    let s = start(&["--kv-budget", "20K"]);
    let cases = [
        (json!({"input": "a", "dimensions": 64}), 400, "dimensions"),
        (json!({"input": "a", "encoding_format": "int8"}), 400, "encoding_format"),
        (json!({"input": "a", "temperature": 0.5}), 400, "temperature"),
        (json!({"input": "a", "max_tokens": 5}), 400, "max_tokens"),
        (json!({"input": "a", "frobnicate": 1}), 400, "frobnicate"),
        (json!({"model": "default"}), 400, "input"),
        (json!({"input": []}), 400, "input"),
        (json!({"input": [""]}), 400, "input"),
        (json!({"input": [[]]}), 400, "input"),
        (json!({"input": [1, 4096]}), 400, "input"),
        (json!({"input": [-1]}), 400, "input"),
        (json!({"input": {"text": "a"}}), 400, "input"),
        (json!({"input": [["a"]]}), 400, "input"),
        (json!({"input": vec!["a"; 2049]}), 400, "input"),
        (json!({"input": "a", "model": "gpt-4"}), 404, "model"),
    ];
    for (body, status, param) in cases {
        let r = s.post("/v1/embeddings", &body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
    // 4096 bytes of KV cache per token: 20 KiB never holds 6 tokens' worth.
    let r = s.post("/v1/embeddings", &json!({"input": TEXTS[0]}));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("request_too_large")), "{}", r.text());
    assert_eq!(s.post("/v1/embeddings", &json!({"input": [1]})).status, 200, "one token fits");
    let get = s.get("/v1/embeddings");
    assert_eq!(get.status, 405);
}

/// Embedding requests while a completion generates: the completion's text is what it is alone.
#[test]
fn generation_is_not_disturbed() {
    let s = start(&["--parallel", "2"]);
    let req = json!({"prompt": "And the LORD said", "max_tokens": 40, "temperature": 0});
    let alone = s.post("/v1/completions", &req).json()["choices"][0]["text"].clone();
    let want = library(&TEXTS, Pooling::Mean);
    std::thread::scope(|sc| {
        let embedder = sc.spawn(|| {
            for _ in 0..20 {
                let r = s.post("/v1/embeddings", &json!({"input": TEXTS}));
                assert_eq!(r.status, 200, "{}", r.text());
                assert_eq!(vectors(&r.json()), want);
            }
        });
        for _ in 0..3 {
            let r = s.post("/v1/completions", &req);
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.json()["choices"][0]["text"], alone);
        }
        embedder.join().unwrap();
    });
    let m = s.get("/metrics").text();
    assert!(m.contains("endpoint=\"/v1/embeddings\",status=\"200\"} 20"), "{m}");
}
