//! GGUF tokenizer metadata (`GgufVocab`) → the HuggingFace `tokenizer.json` and
//! `tokenizer_config.json` texts a .colibri file stores, so that everything downstream (the
//! tokenizer, chat templates, special tokens) is the same as for a converted checkpoint.
//!
//! The result is the tokenizer the GGUF was made from, as far as the GGUF tells it: "gpt2"
//! vocabularies (byte-level BPE, `bpe`) with the pre-tokenizer their `tokenizer.ggml.pre` name
//! stands for (`pre`), "llama" ones (SentencePiece BPE, `spm`) with merges from the scores.
//! Control / user-defined tokens become added tokens (`common`).

mod bpe;
mod common;
mod pre;
mod spm;

use super::vocab::GgufVocab;
use crate::error::{fail, Result};
use serde_json::json;

/// The two HuggingFace tokenizer files, as JSON text.
#[derive(Clone, Debug, PartialEq)]
pub struct HfTokenizerFiles {
    pub tokenizer_json: String,
    /// bos/eos/pad/unk tokens, add_bos_token/add_eos_token and chat_template.
    pub tokenizer_config_json: String,
}

/// Build the HuggingFace files for a GGUF vocabulary.
pub fn hf_files(v: &GgufVocab) -> Result<HfTokenizerFiles> {
    let types = common::token_types(v)?;
    common::check_ids(v)?;
    let p = match v.model.as_str() {
        "gpt2" => bpe::pipeline(v, &types)?,
        "llama" => spm::pipeline(v, &types)?,
        other => {
            return Err(fail(format!(
            "GGUF tokenizer model {other:?} is not supported (\"gpt2\" byte-level BPE and \"llama\" SentencePiece are)"
        )))
        }
    };
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": common::added_tokens(v, &types),
        "normalizer": p.normalizer,
        "pre_tokenizer": p.pre_tokenizer,
        "post_processor": common::post_processor(v, &p)?,
        "decoder": p.decoder,
        "model": p.model,
    });
    let text = |value: &serde_json::Value| {
        serde_json::to_string(value).map_err(|e| fail(format!("serialising the GGUF tokenizer: {e}")))
    };
    Ok(HfTokenizerFiles {
        tokenizer_json: text(&tokenizer)?,
        tokenizer_config_json: text(&common::tokenizer_config(v, &p))?,
    })
}
