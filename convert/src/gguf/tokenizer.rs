//! GGUF tokenizer metadata (`GgufVocab`) → the HuggingFace `tokenizer.json` and
//! `tokenizer_config.json` texts a .colibri file stores, so that everything downstream (the
//! tokenizer, chat templates, special tokens) is the same as for a converted checkpoint.

use super::vocab::GgufVocab;
use crate::error::{fail, Result};

/// The two HuggingFace tokenizer files, as JSON text.
#[derive(Clone, Debug, PartialEq)]
pub struct HfTokenizerFiles {
    pub tokenizer_json: String,
    /// bos/eos/pad/unk tokens, add_bos_token/add_eos_token and chat_template.
    pub tokenizer_config_json: String,
}

/// Build the HuggingFace files for a GGUF vocabulary.
pub fn hf_files(v: &GgufVocab) -> Result<HfTokenizerFiles> {
    Err(fail(format!("GGUF tokenizer model {:?} is not supported yet", v.model)))
}
