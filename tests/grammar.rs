//! Structured output on the default model: every generation that ends on end-of-sequence under a
//! JSON Schema grammar parses and validates (over many seeds), a complete document leaves only
//! the end-of-sequence ids, token bytes concatenate to the text the tokenizer encodes, and bad
//! schemas are InvalidArgument.

use colibri::decoder::{DecodeParams, Finish};
use colibri::forward::Input;
use colibri::generate::{generate, GenerateParams};
use colibri::grammar::{vocab::token_bytes, GrammarVocab, ResponseFormat, VocabCache};
use colibri::sampler::SamplerParams;
use colibri::session::{Session, SessionOptions};
use colibri::tokenizer::Tokenizer;
use colibri::{Config, Error, LoadOptions, Model};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn default_model() -> (Model, Tokenizer) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri");
    let model = Model::open(&path, &LoadOptions::default()).expect("open the default model");
    let tok = Tokenizer::from_model(&model).expect("its tokenizer");
    (model, tok)
}

/// The schema the seeds run under: bounded strings, an enum, a ranged integer, a short array.
fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
        },
        "required": ["name", "age", "color", "tags"],
        "additionalProperties": false,
    })
}

/// Whether `v` is valid against the subset of JSON Schema `person_schema` uses (checked here
/// independently of the engine).
fn valid(schema: &Value, v: &Value) -> bool {
    let s = |k: &str| schema.get(k);
    if let Some(options) = s("enum").and_then(Value::as_array) {
        return options.contains(v);
    }
    let type_ok = match s("type").and_then(Value::as_str) {
        Some("object") => v.is_object(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("array") => v.is_array(),
        _ => true,
    };
    let in_range = |x: f64| {
        s("minimum").and_then(Value::as_f64).is_none_or(|m| x >= m)
            && s("maximum").and_then(Value::as_f64).is_none_or(|m| x <= m)
    };
    type_ok
        && match v {
            Value::Object(o) => {
                let props = s("properties").and_then(Value::as_object);
                let required = s("required").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
                required.iter().all(|k| k.as_str().is_some_and(|k| o.contains_key(k)))
                    && o.iter().all(|(k, x)| match props.and_then(|p| p.get(k)) {
                        Some(sub) => valid(sub, x),
                        None => s("additionalProperties") != Some(&Value::Bool(false)),
                    })
            }
            Value::String(t) => s("maxLength").and_then(Value::as_u64).is_none_or(|m| t.chars().count() as u64 <= m),
            Value::Array(a) => {
                s("maxItems").and_then(Value::as_u64).is_none_or(|m| a.len() as u64 <= m)
                    && a.iter().all(|x| s("items").is_none_or(|it| valid(it, x)))
            }
            Value::Number(n) => n.as_f64().is_some_and(in_range),
            _ => true,
        }
}

fn run(
    model: &Model,
    tok: &Tokenizer,
    format: &ResponseFormat,
    vocab: &Arc<GrammarVocab>,
    seed: u64,
) -> (String, Finish) {
    let grammar = vocab.compile(format).expect("compile");
    let sampler = SamplerParams { temperature: 1.0, seed, ..SamplerParams::greedy() };
    let decode = DecodeParams { max_tokens: 96, sampler, grammar: Some(grammar), ..DecodeParams::default() };
    let params = GenerateParams { decode, ..Default::default() };
    let mut s = Session::new(model.config(), &SessionOptions::default()).expect("session");
    let prompt = tok.encode("And the LORD said unto Moses, write it as JSON:", false).expect("encode");
    let out = generate(model, &mut s, Some(tok), Input::Tokens(&prompt), &params, |_| true).expect("generate");
    (out.text, out.finish)
}

#[test]
fn every_finished_document_is_valid_over_many_seeds() {
    let (model, tok) = default_model();
    let cache = VocabCache::default();
    let vocab = cache.get(&tok).expect("vocabulary");
    assert!(Arc::ptr_eq(&vocab, &cache.get(&tok).unwrap()), "built once");
    let schema = person_schema();
    let formats =
        [(ResponseFormat::JsonSchema(schema.clone()), schema), (ResponseFormat::JsonObject, json!({"type": "object"}))];
    for (format, check) in &formats {
        let (mut finished, seeds) = (0, 24);
        for seed in 0..seeds {
            let (text, finish) = run(&model, &tok, format, &vocab, seed);
            if finish == Finish::Eos {
                let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {text:?}: {e}"));
                assert!(valid(check, &v), "seed {seed}: {text} does not validate");
                finished += 1;
            } else {
                assert_eq!(finish, Finish::Length, "seed {seed}");
            }
        }
        eprintln!("{:?}: {finished}/{seeds} seeds ended on end-of-sequence with a valid document", check);
        assert!(finished * 2 >= seeds, "most seeds should finish a document within 96 tokens");
    }
}

#[test]
fn a_complete_document_allows_only_end_of_sequence() {
    let (_model, tok) = default_model();
    let vocab = Arc::new(GrammarVocab::new(&tok).expect("vocabulary"));
    let format = ResponseFormat::JsonSchema(json!({"enum": ["yes"]}));
    let mut g = vocab.compile(&format).expect("compile");
    assert!(!g.is_complete());
    for id in tok.encode("\"yes\"", false).unwrap() {
        g.commit(id).expect("the document's own tokens are allowed");
    }
    assert!(g.is_complete());
    let allowed: Vec<u32> =
        (0..g.vocab_size() as u32).filter(|&i| g.allowed().unwrap()[i as usize / 32] >> (i % 32) & 1 == 1).collect();
    assert_eq!(allowed, tok.eos_ids().to_vec());
    let mut g = vocab.compile(&format).unwrap();
    let wrong = tok.encode("no", false).unwrap();
    assert!(matches!(g.commit(wrong[0]), Err(Error::InvalidArgument { .. })));
}

#[test]
fn bad_schemas_are_invalid_arguments() {
    let (_model, tok) = default_model();
    let vocab = Arc::new(GrammarVocab::new(&tok).unwrap());
    assert!(matches!(ResponseFormat::json_schema_text("{not json"), Err(Error::InvalidArgument { .. })));
    for bad in
        [json!(3), json!(false), json!({"type": "no-such-type"}), json!({"$ref": "https://example.invalid/s.json"})]
    {
        let e = vocab.compile(&ResponseFormat::JsonSchema(bad.clone())).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{bad}: {e}");
    }
}

/// A valid model config whose only relevant parts are the special-token ids.
fn config(eos: u32) -> Config {
    let json = json!({
        "family": "mixtral", "vocab_size": 400, "hidden_size": 16, "n_layers": 1, "n_heads": 2,
        "n_kv_heads": 1, "head_dim": 8, "rms_norm_eps": 1e-5, "rope": {"theta": 10000.0},
        "max_position_embeddings": 64, "attention_bias": false, "qk_norm": "none",
        "moe": {"n_experts": 2, "top_k": 1, "expert_ffn": 8, "norm_topk_prob": true},
        "dense_ffn": 0, "layers": [{"moe": true}], "tie_embeddings": false, "hidden_act": "silu",
        "bos_token_id": null, "eos_token_ids": [eos], "pad_token_id": null,
    });
    Config::from_json(json.to_string().as_bytes()).expect("test config")
}

#[test]
fn token_bytes_concatenate_to_the_encoded_text() {
    let text = "Hello, wörld! {\"a\": [1, 2.5e3]}\n\ttabs — “quotes” 🙂";
    let (_model, default) = default_model();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers");
    let sp = std::fs::read_to_string(dir.join("sp_bpe/tokenizer.json")).unwrap();
    let sp = Tokenizer::from_json(&sp, None, &config(2)).unwrap();
    // sentencepiece prepends its space marker to the text.
    for (tok, expected) in [(&default, text.to_string()), (&sp, format!(" {text}"))] {
        let bytes = token_bytes(tok).unwrap();
        let ids = tok.encode(text, false).unwrap();
        let joined: Vec<u8> = ids.iter().flat_map(|&i| bytes[i as usize].clone()).collect();
        assert_eq!(String::from_utf8_lossy(&joined), expected);
        for &s in &tok.eos_ids().to_vec() {
            assert_eq!(bytes[s as usize][0], 0xFF, "special tokens carry the marker");
        }
    }
}
