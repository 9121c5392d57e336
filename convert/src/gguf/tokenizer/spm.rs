//! `tokenizer.ggml.model` "llama": SentencePiece BPE with scores and `<0xNN>` byte fallback, in
//! the form transformers' Llama converter gives it: BPE with byte_fallback, merges derived from
//! the scores (every split of a piece into two pieces, ranked by the merged piece's score —
//! the pair llama.cpp's llm_tokenizer_spm merges first), the `▁` normaliser (with the prepended
//! `▁` when `add_space_prefix`) and the matching decoder.

use super::common::{vocab_map, Pipeline, UNKNOWN};
use crate::error::Result;
use crate::gguf::vocab::GgufVocab;
use serde_json::{json, Value};
use std::collections::HashMap;

pub(super) fn pipeline(v: &GgufVocab, types: &[i32]) -> Result<Pipeline> {
    let prefix = v.add_space_prefix.unwrap_or(true);
    let unk = v.unk_id.or_else(|| types.iter().position(|&t| t == UNKNOWN).map(|i| i as u32));
    let model = json!({
        "type": "BPE", "dropout": null, "unk_token": unk.map(|id| v.tokens[id as usize].clone()),
        "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
        "byte_fallback": true, "ignore_merges": false, "vocab": vocab_map(v, |_| true), "merges": merges(v),
    });
    let replace = json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"});
    let prepend = json!({"type": "Prepend", "prepend": "▁"});
    let normalizers: Vec<Value> = if prefix { vec![prepend, replace] } else { vec![replace] };
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": "▁"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    Ok(Pipeline {
        normalizer: json!({"type": "Sequence", "normalizers": normalizers}),
        pre_tokenizer: Value::Null,
        model,
        decoder: json!({"type": "Sequence", "decoders": decoders}),
        byte_level: false,
        bos: v.bos_id,
        add_bos: v.add_bos.unwrap_or(true),
        add_eos: v.add_eos.unwrap_or(false),
    })
}

/// Every `(left, right)` whose halves and concatenation are tokens, by the concatenation's score
/// (highest first), then its id, then the halves' ids (transformers' SentencePieceExtractor order).
fn merges(v: &GgufVocab) -> Vec<Value> {
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(v.tokens.len());
    for (id, t) in v.tokens.iter().enumerate() {
        ids.entry(t.as_str()).or_insert(id);
    }
    let score = |id: usize| v.scores.as_ref().map_or(-(id as f32), |s| s[id]);
    // (merged id, left id, right id, left, right)
    let mut found: Vec<(usize, usize, usize, &str, &str)> = Vec::new();
    for (id, piece) in v.tokens.iter().enumerate() {
        if ids.get(piece.as_str()) != Some(&id) {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (l, r) = piece.split_at(at);
            if let (Some(&li), Some(&ri)) = (ids.get(l), ids.get(r)) {
                found.push((id, li, ri, l, r));
            }
        }
    }
    found.sort_by(|a, b| score(b.0).total_cmp(&score(a.0)).then((a.0, a.1, a.2).cmp(&(b.0, b.1, b.2))));
    found.into_iter().map(|(_, _, _, l, r)| json!([l, r])).collect()
}
