//! `colibri logits`: teacher-forced logits at every position of the given ids, written as a
//! float32 .npy [n_tokens, vocab_size]. Nothing is added to the ids (no BOS, no template).

use crate::{model_path, npy, threads};
use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::{Session, SessionOptions};
use colibri::{Error, LoadOptions};
use std::path::Path;

/// Parse "1,2,3" into ids.
pub fn parse_ids(s: &str) -> Result<Vec<u32>, Error> {
    s.split(',')
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>().map_err(|_| Error::InvalidArgument { reason: format!("'{t}' is not a token id") }))
        .collect()
}

pub fn run(model: Option<&Path>, tokens: &str, out: &Path, threads: Option<usize>) -> Result<(), Error> {
    let ids = parse_ids(tokens)?;
    if ids.is_empty() {
        return Err(Error::InvalidArgument { reason: "--tokens holds no ids".into() });
    }
    let path = model_path::resolve(model)?;
    let model =
        crate::model_path::open(&path, &LoadOptions { threads: threads::options(threads), ..LoadOptions::default() })?;
    let c = model.config();
    let n_ctx = ids.len().max(1);
    let mut s = Session::new(c, &SessionOptions { n_ctx, ..Default::default() })?;
    forward(&model, &mut s, Input::Tokens(&ids), &ForwardOptions { logits: LogitsMode::All, ..Default::default() })?;
    npy::write_f32_2d(out, [ids.len(), c.vocab_size], s.logits())?;
    eprintln!("wrote {} × {} logits to {}", ids.len(), c.vocab_size, out.display());
    Ok(())
}
