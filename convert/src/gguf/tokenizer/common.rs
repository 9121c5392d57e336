//! What both tokenizer models share: the checked token types, the added tokens (control,
//! user-defined and unknown tokens), the bos/eos post-processor and tokenizer_config.json.

use crate::error::{fail, Result};
use crate::gguf::vocab::GgufVocab;
use serde_json::{json, Map, Value};

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub(super) const NORMAL: i32 = 1;
pub(super) const UNKNOWN: i32 = 2;
pub(super) const CONTROL: i32 = 3;
pub(super) const USER_DEFINED: i32 = 4;
pub(super) const UNUSED: i32 = 5;

/// The model-specific parts of tokenizer.json, and how special tokens are added.
pub(super) struct Pipeline {
    pub normalizer: Value,
    pub pre_tokenizer: Value,
    pub model: Value,
    pub decoder: Value,
    /// A ByteLevel post-processor goes before the bos/eos template (byte-level BPE).
    pub byte_level: bool,
    /// The bos id, if the vocabulary has one llama.cpp uses.
    pub bos: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
}

/// Token types, one per token (all normal when the key is absent).
pub(super) fn token_types(v: &GgufVocab) -> Result<Vec<i32>> {
    let n = v.tokens.len();
    if n == 0 {
        return Err(fail("the GGUF has no tokenizer.ggml.tokens"));
    }
    if v.scores.as_ref().is_some_and(|s| s.len() != n) {
        return Err(fail(format!("tokenizer.ggml.scores has not one score per token ({n} tokens)")));
    }
    match &v.token_types {
        None => Ok(vec![NORMAL; n]),
        Some(t) if t.len() == n => Ok(t.clone()),
        Some(t) => Err(fail(format!("tokenizer.ggml.token_type has {} entries for {n} tokens", t.len()))),
    }
}

/// Every special id must name a token.
pub(super) fn check_ids(v: &GgufVocab) -> Result<()> {
    let named = [("bos", v.bos_id), ("eos", v.eos_id), ("unknown", v.unk_id), ("padding", v.pad_id)];
    let eot = v.eot_ids.iter().map(|&id| ("eot", Some(id)));
    for (what, id) in named.into_iter().chain(eot) {
        if let Some(id) = id.filter(|&id| id as usize >= v.tokens.len()) {
            return Err(fail(format!("tokenizer.ggml {what} token id {id} is past the {} tokens", v.tokens.len())));
        }
    }
    Ok(())
}

/// Control and unknown tokens as special added tokens, user-defined ones as plain added tokens,
/// all matched on the raw text (llama.cpp keeps them pre-normalised).
pub(super) fn added_tokens(v: &GgufVocab, types: &[i32]) -> Vec<Value> {
    let kinds = types.iter().zip(&v.tokens).enumerate();
    kinds
        .filter(|(_, (&t, text))| matches!(t, UNKNOWN | CONTROL | USER_DEFINED) && !text.is_empty())
        .map(|(id, (&t, text))| {
            json!({"id": id, "content": text, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": t != USER_DEFINED})
        })
        .collect()
}

/// ByteLevel (offsets only) and/or a template adding bos / eos.
pub(super) fn post_processor(v: &GgufVocab, p: &Pipeline) -> Result<Value> {
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true});
    let need = |add: bool, id: Option<u32>, what: &str| match (add, id) {
        (false, _) => Ok(None),
        (true, Some(id)) => Ok(Some((v.tokens[id as usize].clone(), id))),
        (true, None) => Err(fail(format!("the GGUF asks to add a {what} token but names none"))),
    };
    let bos = need(p.add_bos, p.bos, "bos")?;
    let eos = need(p.add_eos, v.eos_id, "eos")?;
    if bos.is_none() && eos.is_none() {
        return Ok(if p.byte_level { byte_level } else { Value::Null });
    }
    let items = |part: &str, type_id: u32| {
        let special = |tok: &(String, u32)| json!({"SpecialToken": {"id": tok.0, "type_id": type_id}});
        let mut items: Vec<Value> = bos.iter().map(special).collect();
        items.push(json!({"Sequence": {"id": part, "type_id": type_id}}));
        items.extend(eos.iter().map(special));
        items
    };
    let single = items("A", 0);
    let pair: Vec<Value> = items("A", 0).into_iter().chain(items("B", 1)).collect();
    let mut specials = Map::new();
    for (text, id) in bos.iter().chain(eos.iter()) {
        specials.insert(text.clone(), json!({"id": text, "ids": [id], "tokens": [text]}));
    }
    let template = json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials});
    Ok(match p.byte_level {
        true => json!({"type": "Sequence", "processors": [byte_level, template]}),
        false => template,
    })
}

/// tokenizer_config.json: special token strings, add_bos/add_eos and the chat template.
pub(super) fn tokenizer_config(v: &GgufVocab, p: &Pipeline) -> Value {
    let text = |id: Option<u32>| id.map_or(Value::Null, |id| Value::String(v.tokens[id as usize].clone()));
    let mut tc = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": p.add_bos,
        "add_eos_token": p.add_eos,
        "bos_token": text(p.bos),
        "eos_token": text(v.eos_id),
        "unk_token": text(v.unk_id),
        "pad_token": text(v.pad_id),
        "clean_up_tokenization_spaces": false,
    });
    if let (Some(t), Some(o)) = (&v.chat_template, tc.as_object_mut()) {
        o.insert("chat_template".into(), Value::String(t.clone()));
    }
    tc
}

/// `text → id` of the vocabulary entries `keep` selects; a repeated text keeps its first id.
pub(super) fn vocab_map(v: &GgufVocab, keep: impl Fn(usize) -> bool) -> Map<String, Value> {
    let mut map = Map::new();
    for (id, text) in v.tokens.iter().enumerate().filter(|&(id, _)| keep(id)) {
        if !map.contains_key(text) {
            map.insert(text.clone(), json!(id));
        }
    }
    map
}
