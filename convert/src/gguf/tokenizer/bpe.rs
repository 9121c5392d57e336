//! `tokenizer.ggml.model` "gpt2": byte-level BPE. The vocabulary is every token but the unused
//! `[PADn]` fillers (the hub tokenizer has no such ids): control and user-defined tokens are in
//! it too, as `tokenizers` gives an added token the id of its vocabulary entry, else a new one past
//! the vocabulary. The merges are the GGUF's, the pre-tokenizer is `tokenizer.ggml.pre`'s.

use super::common::{vocab_map, Pipeline, UNUSED};
use super::pre::pre_tokenizer;
use crate::error::{fail, Result};
use crate::gguf::vocab::GgufVocab;
use serde_json::{json, Map, Value};

pub(super) fn pipeline(v: &GgufVocab, types: &[i32]) -> Result<Pipeline> {
    let pre = pre_tokenizer(v.pre.as_deref())?;
    let mut vocab = vocab_map(v, |id| types[id] != UNUSED);
    let merges = merges(v, &mut vocab)?;
    let model = json!({
        "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
        "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
        "ignore_merges": pre.ignore_merges, "vocab": vocab, "merges": merges,
    });
    Ok(Pipeline {
        normalizer: pre.normalizer,
        pre_tokenizer: pre.pre_tokenizer,
        model,
        decoder: json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
        byte_level: true,
        bos: v.bos(),
        add_bos: v.add_bos.unwrap_or(pre.add_bos_default) && !pre.no_bos,
        add_eos: v.add_eos.unwrap_or(false),
    })
}

/// The merges as `[left, right]` pairs (split at the first space after the first byte, as
/// llama.cpp reads them). Both halves and their concatenation must be tokens: one missing from
/// the normal vocabulary but present among the other tokens is added to it.
fn merges(v: &GgufVocab, vocab: &mut Map<String, Value>) -> Result<Vec<Value>> {
    let all = vocab_map(v, |_| true);
    let mut need = |piece: &str, i: usize| -> Result<()> {
        if vocab.contains_key(piece) {
            return Ok(());
        }
        match all.get(piece) {
            Some(id) => {
                vocab.insert(piece.to_string(), id.clone());
                Ok(())
            }
            None => Err(fail(format!("tokenizer.ggml.merges[{i}] needs {piece:?}, which is not a token"))),
        }
    };
    let mut out = Vec::with_capacity(v.merges.len());
    for (i, m) in v.merges.iter().enumerate() {
        let cut = m.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(at, _)| at);
        let Some(at) = cut else {
            return Err(fail(format!("tokenizer.ggml.merges[{i}] {m:?} is not two tokens")));
        };
        let (left, right) = (&m[..at], &m[at + 1..]);
        need(left, i)?;
        need(right, i)?;
        need(&format!("{left}{right}"), i)?;
        out.push(json!([left, right]));
    }
    Ok(out)
}
