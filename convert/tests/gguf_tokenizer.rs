//! The GGUF tokenizer builder against HuggingFace: for every kind under
//! tests/fixtures/gguf_tokenizers/ (made by tools/make_gguf_tokenizer_fixtures.py: a small HF
//! tokenizer, the vocab-only GGUF llama.cpp's converter makes of it, and that GGUF's tokenizer
//! keys as JSON), the built tokenizer.json / tokenizer_config.json load in colibri's tokenizer
//! and give the HF tokenizer's ids and decodings on every text. Also the refusals.

use colibri::model::Config;
use colibri::tokenizer::Tokenizer;
use colibri_convert::gguf::tokenizer::{hf_files, HfTokenizerFiles};
use colibri_convert::gguf::vocab::GgufVocab;
use serde_json::Value;
use std::path::{Path, PathBuf};

const KINDS: [&str; 17] = [
    "gpt-2",
    "default",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "deepseek-llm",
    "deepseek-coder",
    "deepseek-v3",
    "olmo",
    "gpt-4o",
    "glm4",
    "tekken",
    "command-r",
    "falcon",
    "smollm",
    "spm",
    "spm-noprefix",
];

fn fixture_dir(kind: &str) -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", "tests", "fixtures", "gguf_tokenizers", kind].iter().collect()
}

fn read_json(dir: &Path, file: &str) -> Value {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id list").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn opt_id(v: &Value) -> Option<u32> {
    v.as_u64().map(|x| x as u32)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|x| x.as_str().expect("string").to_string()).collect()).unwrap_or_default()
}

fn vocab(kind: &str) -> GgufVocab {
    vocab_in(&fixture_dir(kind))
}

/// The sidecar vocab.json (gguf-py's reading of vocab.gguf) as a GgufVocab.
fn vocab_in(dir: &Path) -> GgufVocab {
    let j = read_json(dir, "vocab.json");
    GgufVocab {
        model: j["model"].as_str().expect("model").to_string(),
        pre: j["pre"].as_str().map(String::from),
        tokens: strings(&j["tokens"]),
        scores: j["scores"].as_array().map(|a| a.iter().map(|x| x.as_f64().expect("score") as f32).collect()),
        token_types: j["token_types"].as_array().map(|a| a.iter().map(|x| x.as_i64().expect("type") as i32).collect()),
        merges: strings(&j["merges"]),
        bos_id: opt_id(&j["bos_id"]),
        eos_id: opt_id(&j["eos_id"]),
        eot_ids: ids(&j["eot_ids"]),
        unk_id: opt_id(&j["unk_id"]),
        pad_id: opt_id(&j["pad_id"]),
        add_bos: j["add_bos"].as_bool(),
        add_eos: j["add_eos"].as_bool(),
        add_space_prefix: j["add_space_prefix"].as_bool(),
        chat_template: j["chat_template"].as_str().map(String::from),
    }
}

/// A model config fitting `v`, with the bos / eos ids a GGUF-built config takes.
fn config(v: &GgufVocab) -> Config {
    let eos: Vec<u32> = v.eos_id.iter().chain(&v.eot_ids).copied().collect();
    let json = serde_json::json!({
        "family": "mixtral", "vocab_size": v.tokens.len(), "hidden_size": 16, "n_layers": 1, "n_heads": 2,
        "n_kv_heads": 1, "head_dim": 8, "rms_norm_eps": 1e-5, "rope": {"theta": 10000.0},
        "max_position_embeddings": 64, "attention_bias": false, "qk_norm": "none",
        "moe": {"n_experts": 2, "top_k": 1, "expert_ffn": 8, "norm_topk_prob": true},
        "dense_ffn": 0, "layers": [{"moe": true}], "tie_embeddings": false, "hidden_act": "silu",
        "bos_token_id": v.bos(), "eos_token_ids": eos, "pad_token_id": null,
    });
    Config::from_json(json.to_string().as_bytes()).expect("test config")
}

fn build(kind: &str) -> (GgufVocab, HfTokenizerFiles, Tokenizer) {
    build_in(&fixture_dir(kind))
}

fn build_in(dir: &Path) -> (GgufVocab, HfTokenizerFiles, Tokenizer) {
    let v = vocab_in(dir);
    let files = hf_files(&v).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let tok = Tokenizer::from_json(&files.tokenizer_json, Some(&files.tokenizer_config_json), &config(&v))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    (v, files, tok)
}

/// Compare the tokenizer built from dir/vocab.json with the HF results in dir/expected.json (the
/// fields it has); returns the number of texts checked.
fn check_dir(dir: &Path) -> usize {
    let (_, _, tok) = build_in(dir);
    let name = dir.display();
    let expected = read_json(dir, "expected.json");
    let cases = expected["cases"].as_array().expect("cases");
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want = ids(&case["ids"]);
        assert_eq!(tok.encode(text, false).expect("encode"), want, "{name}: ids of {text:?}");
        if !case["ids_with_special"].is_null() {
            let with = tok.encode(text, true).expect("encode");
            assert_eq!(with, ids(&case["ids_with_special"]), "{name}: ids with specials of {text:?}");
        }
        if !case["ids_as_text"].is_null() {
            let as_text = tok.encode_as_text(text).expect("encode");
            assert_eq!(as_text, ids(&case["ids_as_text"]), "{name}: ids as text of {text:?}");
        }
        if let Some(decoded) = case["decoded"].as_str() {
            assert_eq!(tok.decode(&want, false).expect("decode"), decoded, "{name}: {text:?}");
        }
        if let Some(skip) = case["decoded_skip_special"].as_str() {
            assert_eq!(tok.decode(&want, true).expect("decode"), skip, "{name}: skipping specials {text:?}");
        }
    }
    cases.len()
}

#[test]
fn every_kind_matches_huggingface() {
    for kind in KINDS {
        let n = check_dir(&fixture_dir(kind));
        assert!(n > 30, "{kind}: only {n} texts");
    }
}

#[test]
fn specials_and_config_follow_the_gguf() {
    for kind in KINDS {
        let (v, files, tok) = build(kind);
        let tc: Value = serde_json::from_str(&files.tokenizer_config_json).expect("tokenizer_config");
        assert_eq!(tc["chat_template"].as_str(), v.chat_template.as_deref(), "{kind}");
        for (id, &t) in v.token_types.as_ref().expect("types").iter().enumerate() {
            assert_eq!(tok.is_special(id as u32), t == 2 || t == 3, "{kind}: token {id} of type {t}");
        }
        let bos_added = tok.encode("x", true).expect("encode").first() == v.bos_id.as_ref();
        assert_eq!(tc["add_bos_token"].as_bool(), Some(bos_added), "{kind}");
        if let Some(eos) = v.eos_id {
            assert_eq!(tc["eos_token"].as_str(), Some(v.tokens[eos as usize].as_str()), "{kind}");
            assert_eq!(tok.eos_ids().first(), Some(&eos), "{kind}");
        }
    }
}

#[test]
fn spm_adds_bos_and_derives_merges_from_scores() {
    let (v, files, tok) = build("spm");
    assert_eq!(v.add_bos, Some(true));
    assert_eq!(tok.encode("Hello", true).expect("encode").first(), Some(&1));
    let tj: Value = serde_json::from_str(&files.tokenizer_json).expect("json");
    assert!(tj["model"]["merges"].as_array().expect("merges").len() > 1000);
    assert_eq!(tj["model"]["byte_fallback"], Value::Bool(true));
}

fn refusal(v: &GgufVocab) -> String {
    match hf_files(v) {
        Ok(_) => panic!("accepted {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn refusals_name_what_is_unsupported() {
    let base = vocab("qwen2");
    let mut v = base.clone();
    v.pre = Some("jais-2".into());
    assert!(refusal(&v).contains("\"jais-2\""), "{}", refusal(&v));
    let mut v = base.clone();
    v.model = "rwkv".into();
    assert!(refusal(&v).contains("\"rwkv\""));
    let mut v = base.clone();
    v.merges.push("Ġ zzzz".into());
    assert!(refusal(&v).contains("\"zzzz\""), "{}", refusal(&v));
    let mut v = base.clone();
    v.merges.push("nospace".into());
    assert!(refusal(&v).contains("not two tokens"));
    let mut v = base.clone();
    v.token_types.as_mut().expect("types").pop();
    assert!(refusal(&v).contains("token_type"));
    let mut v = base.clone();
    v.eos_id = Some(v.tokens.len() as u32);
    assert!(refusal(&v).contains("eos token id"));
    let mut v = base.clone();
    v.add_bos = Some(true);
    v.bos_id = None;
    assert!(refusal(&v).contains("bos"));
    let mut v = vocab("spm");
    v.scores.as_mut().expect("scores").pop();
    assert!(refusal(&v).contains("scores"));
    let v = GgufVocab { model: "gpt2".into(), ..GgufVocab::default() };
    assert!(refusal(&v).contains("no tokenizer.ggml.tokens"));
}

#[test]
fn a_missing_pre_name_is_llama_cpp_default() {
    let v = vocab("default");
    assert_eq!(v.pre, None);
    let mut named = v.clone();
    named.pre = Some("default".into());
    assert_eq!(hf_files(&v).expect("build"), hf_files(&named).expect("build"));
}

/// Without `add_bos_token` the GGUF gets llama.cpp's default: bos for Llama 3 and SentencePiece,
/// none for other byte-level vocabularies; GLM-4 never gets its bos (llama.cpp drops it).
#[test]
fn add_bos_defaults_follow_llama_cpp() {
    let first = |v: &GgufVocab| {
        let files = hf_files(v).expect("build");
        let tok =
            Tokenizer::from_json(&files.tokenizer_json, Some(&files.tokenizer_config_json), &config(v)).expect("load");
        tok.encode("Hello", true).expect("encode").first().copied()
    };
    for (kind, adds) in [("llama-bpe", true), ("spm", true), ("qwen2", false), ("gpt-2", false)] {
        let mut v = vocab(kind);
        v.add_bos = None;
        assert_eq!(first(&v) == v.bos_id, adds, "{kind}");
    }
    let mut v = vocab("glm4");
    v.bos_id = v.tokens.iter().position(|t| t == "<sop>").map(|i| i as u32);
    v.add_bos = Some(true);
    assert_ne!(first(&v), v.bos_id);
    let tc: Value = serde_json::from_str(&hf_files(&v).expect("build").tokenizer_config_json).expect("json");
    assert_eq!(tc["bos_token"], Value::Null);
}

/// A GLM-4 GGUF recording a bos (llama.cpp's converter writes `[gMASK]`) and add_bos: the model
/// has no bos (HF's GLM tokenizer and config have none) and every text's ids, with and without
/// special tokens, are still HF's.
#[test]
fn glm4_takes_no_bos_from_the_file() {
    let dir = fixture_dir("glm4");
    let mut v = vocab_in(&dir);
    v.bos_id = v.tokens.iter().position(|t| t == "[gMASK]").map(|i| i as u32);
    v.add_bos = Some(true);
    assert!(v.bos_id.is_some());
    assert_eq!(v.bos(), None);
    let files = hf_files(&v).expect("build");
    let tok =
        Tokenizer::from_json(&files.tokenizer_json, Some(&files.tokenizer_config_json), &config(&v)).expect("load");
    assert_eq!(tok.bos_id(), None);
    let expected = read_json(&dir, "expected.json");
    for case in expected["cases"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        assert_eq!(tok.encode(text, true).expect("encode"), ids(&case["ids_with_special"]), "{text:?}");
    }
    let mut other = vocab("qwen2");
    other.bos_id = Some(3);
    assert_eq!(other.bos(), Some(3), "only the GLM vocabularies drop it");
}

/// The texts of dir/expected.json that do not decode back to themselves.
fn not_decoding_back(dir: &Path) -> Vec<String> {
    let (_, _, tok) = build_in(dir);
    let cases = read_json(dir, "expected.json");
    let texts = cases["cases"].as_array().expect("cases").iter().map(|c| c["text"].as_str().expect("text"));
    let back = |t: &str| tok.decode(&tok.encode(t, false).expect("encode"), false).expect("decode");
    texts.filter(|t| back(t) != *t).map(String::from).collect()
}

/// llama.cpp's full-size test vocabularies (models/ggml-vocab-*.gguf) against the HF ids its
/// update script recorded (and decoding back to the text), prepared by tools/check_gguf_tokenizer_vocabs.py into
/// $GGUF_TOKENIZER_CHECK_DIR (not committed: llama.cpp's files, up to 16 MB each).
#[test]
#[ignore = "needs GGUF_TOKENIZER_CHECK_DIR from tools/check_gguf_tokenizer_vocabs.py"]
fn llama_cpp_test_vocabularies_match_huggingface() {
    let root = PathBuf::from(std::env::var("GGUF_TOKENIZER_CHECK_DIR").expect("GGUF_TOKENIZER_CHECK_DIR"));
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).expect("dir").map(|e| e.expect("entry").path()).collect();
    dirs.sort();
    let mut checked = 0;
    for dir in dirs {
        match hf_files(&vocab_in(&dir)) {
            Err(e) => eprintln!("{}: refused: {e}", dir.display()),
            Ok(_) => {
                let n = check_dir(&dir);
                let round = not_decoding_back(&dir);
                assert!(round.is_empty(), "{}: texts not decoding back: {round:?}", dir.display());
                eprintln!("{}: {n} texts match", dir.display());
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no vocabulary under {}", root.display());
}

/// The GGUF reader extracts from each committed vocab-only .gguf exactly the vocabulary its JSON
/// sidecar (gguf-py's reading of the same file) holds: the two halves of the GGUF tokenizer path
/// meet on real files.
#[test]
fn the_gguf_reader_reads_each_vocab_as_its_sidecar() {
    for kind in KINDS {
        let path = fixture_dir(kind).join("vocab.gguf");
        let file = colibri_convert::gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(file.vocab().unwrap_or_else(|e| panic!("{kind}: {e}")), vocab(kind), "{kind}");
    }
}
