//! One chunk through one model: feed the chunk's tokens from an empty cache in sub-batches and
//! keep the logits of the rows that are scored.

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::Session;
use colibri::{Error, Model};
use std::ops::Range;

/// Logits of rows `scored` of `tokens` ([scored.len(), vocab], row r = the prediction made after
/// tokens[..=scored.start + r]), running the forward in batches of at most `batch` tokens.
pub fn chunk_logits(
    model: &Model,
    s: &mut Session,
    tokens: &[u32],
    scored: Range<usize>,
    batch: usize,
) -> Result<Vec<f32>, Error> {
    let vocab = model.config().vocab_size;
    let mut out = Vec::with_capacity(scored.len() * vocab);
    s.reset();
    let mut start = 0;
    while start < tokens.len() {
        let end = (start + batch).min(tokens.len());
        let wanted = start.max(scored.start)..end.min(scored.end);
        let logits = if wanted.is_empty() { LogitsMode::None } else { LogitsMode::All };
        forward(model, s, Input::Tokens(&tokens[start..end]), &ForwardOptions { logits, ..Default::default() })?;
        if !wanted.is_empty() {
            let rows = (wanted.start - start) * vocab..(wanted.end - start) * vocab;
            out.extend_from_slice(&s.logits()[rows]);
        }
        start = end;
    }
    Ok(out)
}
