//! The tokenizer against Python `tokenizers` 0.23 (tests/fixtures/tokenizers/*/expected.json):
//! encode with and without special tokens, decode skipping and keeping special tokens, round
//! trips, the streaming decoder (chunks concatenate to the full decode, never a partial character),
//! special-token queries and unknown ids.
#![cfg(feature = "tokenizer")]

use colibri::tokenizer::Tokenizer;
use colibri::Config;
use serde::Deserialize;
use std::path::PathBuf;

const FIXTURES: [&str; 3] = ["sp_bpe", "bytelevel_bpe", "bytelevel_bpe_gpt2"];

#[derive(Deserialize)]
struct Expected {
    texts: Vec<String>,
    ids: Vec<Vec<u32>>,
    ids_with_special: Vec<Vec<u32>>,
    decoded: Vec<String>,
    decoded_keep_special: Vec<String>,
    vocab_size_with_added: usize,
}

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers").join(name)
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A valid model config whose only relevant parts are the special-token ids.
fn config(bos: Option<u32>, eos: &[u32]) -> Config {
    let json = serde_json::json!({
        "family": "mixtral", "vocab_size": 400, "hidden_size": 16, "n_layers": 1, "n_heads": 2,
        "n_kv_heads": 1, "head_dim": 8, "rms_norm_eps": 1e-5, "rope": {"theta": 10000.0},
        "max_position_embeddings": 64, "attention_bias": false, "qk_norm": "none",
        "moe": {"n_experts": 2, "top_k": 1, "expert_ffn": 8, "norm_topk_prob": true},
        "dense_ffn": 0, "layers": [{"moe": true}], "tie_embeddings": false, "hidden_act": "silu",
        "bos_token_id": bos, "eos_token_ids": eos, "pad_token_id": null,
    });
    Config::from_json(json.to_string().as_bytes()).expect("test config")
}

/// The fixture's tokenizer (with sp_bpe's `<s>`/`</s>` or the byte-level `<|endoftext|>` as bos/eos).
fn load(name: &str) -> (Tokenizer, Expected) {
    let dir = fixture_dir(name);
    let cfg = if name == "sp_bpe" { config(Some(1), &[2]) } else { config(None, &[395]) };
    let tok = Tokenizer::from_json(&read(dir.join("tokenizer.json")), None, &cfg).expect("load tokenizer");
    let expected: Expected = serde_json::from_str(&read(dir.join("expected.json"))).expect("expected.json");
    (tok, expected)
}

/// Feed `ids` one at a time; return the chunks (the last one from `finish`).
fn stream_chunks(tok: &Tokenizer, ids: &[u32], skip_special_tokens: bool) -> Vec<String> {
    let mut stream = tok.stream(skip_special_tokens);
    let mut chunks: Vec<String> = ids.iter().map(|&id| stream.push(id).expect("push")).collect();
    chunks.push(stream.finish());
    chunks
}

#[test]
fn encode_matches_python_tokenizers() {
    for name in FIXTURES {
        let (tok, exp) = load(name);
        for (i, text) in exp.texts.iter().enumerate() {
            assert_eq!(tok.encode(text, false).unwrap(), exp.ids[i], "{name}: {text:?} without special tokens");
            assert_eq!(
                tok.encode(text, true).unwrap(),
                exp.ids_with_special[i],
                "{name}: {text:?} with special tokens"
            );
        }
    }
}

#[test]
fn decode_matches_python_tokenizers() {
    for name in FIXTURES {
        let (tok, exp) = load(name);
        for (i, ids) in exp.ids.iter().enumerate() {
            assert_eq!(tok.decode(ids, true).unwrap(), exp.decoded[i], "{name}: {ids:?} skipping special");
            assert_eq!(tok.decode(ids, false).unwrap(), exp.decoded_keep_special[i], "{name}: {ids:?} keeping special");
        }
    }
}

#[test]
fn round_trip_reproduces_the_text() {
    for name in FIXTURES {
        let (tok, exp) = load(name);
        // Texts Python round-trips exactly (not the ones NFC changes or <unk> swallows).
        let exact: Vec<&String> =
            exp.texts.iter().zip(&exp.decoded_keep_special).filter(|(t, d)| t == d).map(|p| p.0).collect();
        assert!(
            exact.len() >= exp.texts.len() - 3,
            "{name}: only {} of {} texts round-trip in Python",
            exact.len(),
            exp.texts.len()
        );
        for text in exact {
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(&tok.decode(&ids, false).unwrap(), text, "{name}: round trip of {text:?}");
        }
    }
}

#[test]
fn stream_concatenates_to_the_full_decode() {
    for name in FIXTURES {
        let (tok, exp) = load(name);
        for ids in exp.ids.iter().chain(&exp.ids_with_special) {
            for skip in [true, false] {
                let full = tok.decode(ids, skip).unwrap();
                assert!(!full.contains(char::REPLACEMENT_CHARACTER), "{name}: fixture text holds U+FFFD");
                let chunks = stream_chunks(&tok, ids, skip);
                assert_eq!(chunks.concat(), full, "{name}: stream of {ids:?} (skip special {skip}): {chunks:?}");
                assert_eq!(chunks.last().map(String::as_str), Some(""), "{name}: nothing may be held back at the end");
                for chunk in &chunks {
                    assert!(!chunk.ends_with(char::REPLACEMENT_CHARACTER), "{name}: partial character in {chunks:?}");
                }
            }
        }
    }
}

/// Pushes of a character's bytes return "" until the last byte, which returns the character.
fn assert_held_until_complete(tok: &Tokenizer, prefix: &str, ch: char) {
    let ids = tok.encode(&format!("{prefix}{ch}"), false).unwrap();
    let prefix_len = tok.encode(prefix, false).unwrap().len();
    assert_eq!(&ids[..prefix_len], &tok.encode(prefix, false).unwrap()[..], "{ch:?} must start a new token");
    let char_ids = &ids[prefix_len..];
    assert!(char_ids.len() >= 2, "{ch:?} should be split over several tokens, got {char_ids:?}");
    let mut stream = tok.stream(true);
    let head: String = ids[..prefix_len].iter().map(|&id| stream.push(id).unwrap()).collect();
    let (last, partial) = char_ids.split_last().unwrap();
    for &id in partial {
        assert_eq!(stream.push(id).unwrap(), "", "{ch:?}: a partial character must be held back");
    }
    let tail = stream.push(*last).unwrap();
    assert!(tail.ends_with(ch), "{ch:?}: completed chunk {tail:?}");
    assert_eq!(head + &tail + &stream.finish(), tok.decode(&ids, true).unwrap());
}

#[test]
fn stream_holds_back_byte_fallback_characters() {
    let (tok, _) = load("sp_bpe");
    // '你' (3 bytes) and '🚀' (4 bytes) are not in the 400-piece vocab: <0xE4><0xBD><0xA0>, ...
    for ch in ['你', '🚀'] {
        let ids = tok.encode(&ch.to_string(), false).unwrap();
        let byte_tokens = ids.iter().filter(|&&id| tok.token_piece(id).is_some_and(|p| p.starts_with("<0x"))).count();
        assert_eq!(byte_tokens, ch.len_utf8(), "{ch:?} should be byte-fallback tokens: {ids:?}");
        assert_held_until_complete(&tok, "a", ch);
    }
}

#[test]
fn stream_holds_back_byte_level_characters() {
    for name in ["bytelevel_bpe", "bytelevel_bpe_gpt2"] {
        let (tok, _) = load(name);
        for ch in ['🙂', '👍', '界'] {
            assert_held_until_complete(&tok, "a", ch);
        }
    }
}

#[test]
fn stream_finish_flushes_an_incomplete_character() {
    let (tok, _) = load("sp_bpe");
    let ids = tok.encode("🚀", false).unwrap();
    let mut stream = tok.stream(true);
    let pushed: String = ids[..ids.len() - 1].iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(pushed.trim_end_matches(' '), "");
    let rest = stream.finish();
    assert!(rest.ends_with(char::REPLACEMENT_CHARACTER), "lossy remainder: {rest:?}");
    assert_eq!(stream.finish(), "", "finish empties the decoder");
}

#[test]
fn unknown_ids_are_errors() {
    for name in FIXTURES {
        let (tok, _) = load(name);
        let n = tok.vocab_size() as u32;
        for bad in [n, n + 1, u32::MAX] {
            assert_eq!(tok.decode(&[5, bad], false).unwrap_err().code(), "invalid_argument");
            assert_eq!(tok.token_piece(bad), None);
            assert_eq!(tok.token_text(bad), "");
            assert!(!tok.is_special(bad));
            let mut stream = tok.stream(false);
            assert_eq!(stream.push(bad).unwrap_err().code(), "invalid_argument");
            let ok = tok.encode("Hello", false).unwrap();
            let text: String = ok.iter().map(|&id| stream.push(id).unwrap()).collect();
            assert_eq!(text + &stream.finish(), "Hello", "{name}: a rejected id leaves the stream usable");
        }
    }
}

#[test]
fn vocabulary_and_special_tokens() {
    let (sp, exp) = load("sp_bpe");
    assert_eq!(sp.vocab_size(), exp.vocab_size_with_added);
    assert_eq!((sp.bos_id(), sp.eos_ids()), (Some(1), &[2][..]));
    assert_eq!(sp.token_id("<s>"), Some(1));
    assert_eq!(sp.token_piece(3).as_deref(), Some("<0x00>"));
    assert!((0..3).all(|id| sp.is_special(id)) && !sp.is_special(3));

    let (bl, exp) = load("bytelevel_bpe");
    assert_eq!(bl.vocab_size(), exp.vocab_size_with_added);
    assert_eq!(bl.token_id("<|im_start|>"), Some(396));
    assert_eq!(bl.token_id("<think>"), Some(398));
    assert!([395, 396, 397].iter().all(|&id| bl.is_special(id)));
    assert!(!bl.is_special(398) && !bl.is_special(399) && !bl.is_special(100), "<think> is added, not special");
    assert_eq!(bl.decode(&[398, 396], true).unwrap(), "<think>", "non-special added tokens survive skipping");
}

#[test]
fn token_piece_and_text() {
    let (sp, _) = load("sp_bpe");
    let ids = sp.encode("Hello world", false).unwrap();
    let word = *ids.iter().find(|&&id| sp.token_piece(id).is_some_and(|p| p.starts_with('▁') && p.len() > 3)).unwrap();
    let piece = sp.token_piece(word).unwrap();
    assert_eq!(sp.token_text(word), piece.replace('▁', " "), "the sentencepiece space is kept");
    assert_eq!(sp.token_text(1), "<s>");

    let (bl, _) = load("bytelevel_bpe");
    let ids = bl.encode(" world", false).unwrap();
    assert!(bl.token_piece(ids[0]).unwrap().starts_with('Ġ'));
    assert!(bl.token_text(ids[0]).starts_with(' '));
    assert_eq!(bl.token_text(396), "<|im_start|>");
}

#[test]
fn bos_and_eos_fall_back_to_tokenizer_config() {
    let json = read(fixture_dir("sp_bpe").join("tokenizer.json"));
    let tc = r#"{"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": false}"#;
    let tok = Tokenizer::from_json(&json, Some(tc), &config(None, &[])).unwrap();
    assert_eq!((tok.bos_id(), tok.eos_ids()), (Some(1), &[2][..]));
    // transformers 5 ignores add_bos_token when a tokenizer.json exists: the post-processor rules.
    assert_eq!(tok.encode("Hello", true).unwrap()[0], 1);
    // The model config wins over tokenizer_config.
    let tok = Tokenizer::from_json(&json, Some(tc), &config(Some(2), &[1])).unwrap();
    assert_eq!((tok.bos_id(), tok.eos_ids()), (Some(2), &[1][..]));
}

/// A tokenizer that can produce an id past the model's vocabulary, or lacks the model's eos, is
/// refused at load (it would otherwise fail the forward pass of any prompt holding that token).
#[test]
fn a_tokenizer_that_does_not_fit_the_model_is_refused() {
    let text = read(fixture_dir("bytelevel_bpe").join("tokenizer.json"));
    let mut tj: serde_json::Value = serde_json::from_str(&text).unwrap();
    let evil = serde_json::json!({"id": 400, "content": "<|evil|>", "single_word": false, "lstrip": false,
                                  "rstrip": false, "normalized": false, "special": true});
    tj["added_tokens"].as_array_mut().unwrap().push(evil);
    let err = Tokenizer::from_json(&tj.to_string(), None, &config(None, &[395])).unwrap_err();
    assert_eq!(err.code(), "metadata", "{err}");
    assert!(err.to_string().contains("\"<|evil|>\" has id 400, outside the model's vocabulary of 400"), "{err}");
    // The same tokenizer fits a model with a larger (padded) vocabulary.
    let mut wide: serde_json::Value = serde_json::to_value(config(None, &[395])).unwrap();
    wide["vocab_size"] = 512.into();
    let wide = Config::from_json(wide.to_string().as_bytes()).unwrap();
    assert_eq!(Tokenizer::from_json(&tj.to_string(), None, &wide).unwrap().vocab_size(), 401);
    // An eos id the tokenizer does not know.
    let mut cfg = wide.clone();
    cfg.eos_token_ids = vec![450];
    let err = Tokenizer::from_json(&text, None, &cfg).unwrap_err();
    assert!(err.to_string().contains("special token id 450"), "{err}");
}

#[test]
fn malformed_inputs_are_errors() {
    let cfg = config(None, &[]);
    for bad in ["", "not json", "{}", r#"{"model": {"type": "BPE", "vocab": 3}}"#] {
        let err = Tokenizer::from_json(bad, None, &cfg).unwrap_err();
        assert_eq!(err.code(), "metadata", "{bad:?}: {err}");
    }
    let json = read(fixture_dir("sp_bpe").join("tokenizer.json"));
    assert_eq!(Tokenizer::from_json(&json, Some("{oops"), &cfg).unwrap_err().code(), "metadata");
}

#[test]
fn tokenizer_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
}
