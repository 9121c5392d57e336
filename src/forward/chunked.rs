//! A call longer than `MAX_STEP_ROWS` rows, run as consecutive steps: each sequence in turn, in
//! pieces of at most `MAX_STEP_ROWS` rows (a sequence's result does not depend on its batch
//! companions). Everything is checked first, as for one step; a failure in a later step puts
//! every session back where it was (`Session::rollback`: positions, routing RNG and traces; the
//! logits buffers hold nothing a caller may use after an error).

use super::check::check_batch;
use super::{one_step, ForwardOptions, LogitsMode, Sequence, MAX_STEP_ROWS};
use crate::error::{Error, Result};
use crate::model::Model;

/// `forward_batch` for a batch of more than `MAX_STEP_ROWS` rows.
pub fn forward_in_steps(model: &Model, batch: &mut [Sequence<'_>]) -> Result<()> {
    check_batch(model, batch)?;
    let starts: Vec<_> = batch.iter().map(|q| q.session.checkpoint()).collect();
    let mut result = Ok(());
    for q in batch.iter_mut() {
        result = sequence_in_steps(model, q);
        if result.is_err() {
            break;
        }
    }
    if result.is_err() {
        for (q, start) in batch.iter_mut().zip(starts) {
            q.session.rollback(start);
        }
    }
    result
}

/// One sequence in pieces; its logits (or hidden states) are those one step would have left.
fn sequence_in_steps(model: &Model, q: &mut Sequence<'_>) -> Result<()> {
    let (h, vocab) = (model.config().hidden_size, model.config().vocab_size);
    let n = q.input.len(h);
    // Every row's output, gathered over the pieces: [n, vocab] logits or [n, hidden] states.
    let mut all_rows = Vec::new();
    let width = match q.opts.logits {
        LogitsMode::All => vocab,
        LogitsMode::Hidden => h,
        LogitsMode::Last | LogitsMode::None => 0,
    };
    let len = n.saturating_mul(width);
    crate::fallible::reserve_exact(&mut all_rows, len).map_err(|_| Error::OutOfMemory {
        what: format!("the outputs of {n} rows"),
        bytes: (len as u64).saturating_mul(4),
    })?;
    let (mut at, call_end) = (0, q.session.pos + n);
    while at < n {
        let end = (at + MAX_STEP_ROWS).min(n);
        let logits = match q.opts.logits {
            LogitsMode::Last if end < n => LogitsMode::None,
            mode => mode,
        };
        let opts = ForwardOptions { logits, ..q.opts };
        let piece = Sequence { session: &mut *q.session, input: q.input.rows(at..end, h), opts };
        one_step(model, &mut [piece], Some(call_end))?;
        match logits {
            LogitsMode::All => all_rows.extend_from_slice(&q.session.logits),
            LogitsMode::Hidden => all_rows.extend_from_slice(&q.session.hidden),
            LogitsMode::Last | LogitsMode::None => {}
        }
        at = end;
    }
    match q.opts.logits {
        LogitsMode::All => q.session.logits = all_rows,
        LogitsMode::Hidden => q.session.hidden = all_rows,
        LogitsMode::Last | LogitsMode::None => {}
    }
    Ok(())
}
