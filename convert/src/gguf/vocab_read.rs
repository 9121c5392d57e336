//! `GgufFile::vocab`: the `tokenizer.*` metadata keys decoded into a `GgufVocab`, each key checked
//! for its type and its arrays for one entry per token.

use super::file::GgufFile;
use super::value::{Metadata, Value};
use super::vocab::GgufVocab;
use crate::error::{fail, Result};

fn list<T>(m: &Metadata, key: &str, what: &str, f: impl Fn(&Value) -> Option<T>) -> Result<Option<Vec<T>>> {
    let Some(a) = m.array(key)? else { return Ok(None) };
    a.iter()
        .map(|v| f(v).ok_or_else(|| fail(format!("GGUF key {key} must hold {what}, found {v:?}"))))
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

fn id(m: &Metadata, key: &str) -> Result<Option<u32>> {
    match m.u64(key)? {
        None => Ok(None),
        Some(x) => u32::try_from(x).map(Some).map_err(|_| fail(format!("GGUF key {key} = {x} is not a token id"))),
    }
}

impl GgufFile {
    /// The tokenizer the file carries.
    pub fn vocab(&self) -> Result<GgufVocab> {
        let m = self.metadata();
        let model =
            m.str("tokenizer.ggml.model")?.ok_or_else(|| fail("GGUF file has no tokenizer (tokenizer.ggml.model)"))?;
        let tokens = list(m, "tokenizer.ggml.tokens", "strings", |v| v.as_str().map(String::from))?
            .ok_or_else(|| fail("GGUF file has no tokenizer.ggml.tokens"))?;
        let scores = list(m, "tokenizer.ggml.scores", "numbers", |v| v.as_f64().map(|x| x as f32))?;
        let token_types = list(m, "tokenizer.ggml.token_type", "integers", |v| match *v {
            Value::I32(x) => Some(x),
            ref v => v.as_u64().and_then(|x| i32::try_from(x).ok()),
        })?;
        for (key, n) in [("scores", scores.as_ref().map(Vec::len)), ("token_type", token_types.as_ref().map(Vec::len))]
        {
            if n.is_some_and(|n| n != tokens.len()) {
                return Err(fail(format!("GGUF tokenizer.ggml.{key} has {n:?} entries for {} tokens", tokens.len())));
            }
        }
        let eot_ids = ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"]
            .iter()
            .filter_map(|k| id(m, k).transpose())
            .collect::<Result<Vec<_>>>()?;
        Ok(GgufVocab {
            model: model.to_string(),
            pre: m.str("tokenizer.ggml.pre")?.map(String::from),
            tokens,
            scores,
            token_types,
            merges: list(m, "tokenizer.ggml.merges", "strings", |v| v.as_str().map(String::from))?.unwrap_or_default(),
            bos_id: id(m, "tokenizer.ggml.bos_token_id")?,
            eos_id: id(m, "tokenizer.ggml.eos_token_id")?,
            eot_ids,
            unk_id: id(m, "tokenizer.ggml.unknown_token_id")?,
            pad_id: id(m, "tokenizer.ggml.padding_token_id")?,
            add_bos: m.bool("tokenizer.ggml.add_bos_token")?,
            add_eos: m.bool("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: m.bool("tokenizer.ggml.add_space_prefix")?,
            chat_template: m.str("tokenizer.chat_template")?.map(String::from),
        })
    }
}
