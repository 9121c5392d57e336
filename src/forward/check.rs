//! What a forward step accepts, checked before any state changes so that a rejected call (or
//! batch) leaves every session as it was: token ids in the vocabulary, finite embeddings, at
//! least one token, room in the context, a valid top-k, a KV cache of this model's shape, one
//! activation mode for the whole batch.

use super::{router, ForwardOptions, Input, RoutingOptions, Sequence};
use crate::error::{Error, Result};
use crate::kernels::Kernels;
use crate::model::{Config, Model};
use crate::session::Session;

/// Check routing options against a model (top-k override within 1..=n_experts).
pub fn check_routing(c: &Config, r: &RoutingOptions) -> Result<()> {
    router::effective_top_k(r, c.moe.choosable(), c.moe.top_k).map(|_| ())
}

/// Check every sequence of a batch; returns the total number of new rows and the kernels the
/// step runs on (the sessions' shared activation mode).
pub fn check_batch(model: &Model, batch: &[Sequence<'_>]) -> Result<(usize, Kernels)> {
    let Some(first) = batch.first() else {
        return Err(Error::InvalidArgument { reason: "empty batch: at least one sequence is needed".into() });
    };
    let act = first.session.quant_act();
    let mut n = 0;
    for (i, q) in batch.iter().enumerate() {
        n += check_input(model, q.session, &q.input, &q.opts).map_err(|e| in_sequence(e, i, batch.len()))?;
        if q.session.quant_act() != act {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "sequence {i} computes with {} activations, sequence 0 with {}: one batch shares one mode",
                    q.session.quant_act().name(),
                    act.name()
                ),
            });
        }
    }
    Ok((n, Kernels::new(act)))
}

/// Check one sequence's input before any state changes, so a failed call leaves the session
/// as it was. Returns the number of new tokens.
pub fn check_input(model: &Model, s: &Session, input: &Input<'_>, opts: &ForwardOptions) -> Result<usize> {
    let c = model.config();
    s.check_usable()?;
    if !s.kv.fits(c) || !s.rec.fits(c) {
        return Err(Error::InvalidArgument {
            reason: "the session's KV cache does not have this model's shape (made for another model)".into(),
        });
    }
    let n = input.len(c.hidden_size);
    match input {
        Input::Tokens(t) => {
            if let Some((i, &id)) = t.iter().enumerate().find(|(_, &id)| id as usize >= c.vocab_size) {
                return Err(Error::InvalidArgument {
                    reason: format!("token id {id} at index {i} is outside the vocabulary (size {})", c.vocab_size),
                });
            }
        }
        Input::Embeddings(e) => {
            if e.len() % c.hidden_size != 0 {
                return Err(Error::InvalidArgument {
                    reason: format!("embeddings length {} is not a multiple of hidden_size {}", e.len(), c.hidden_size),
                });
            }
            if e.iter().any(|v| !v.is_finite()) {
                return Err(Error::InvalidArgument { reason: "embeddings hold NaN or Inf".into() });
            }
        }
    }
    if n == 0 {
        return Err(Error::InvalidArgument { reason: "empty input: at least one token is needed".into() });
    }
    if s.pos + n > s.n_ctx() {
        return Err(Error::ContextFull { cached: s.pos, new: n, n_ctx: s.n_ctx(), sequence: None });
    }
    router::effective_top_k(&opts.routing, c.moe.choosable(), c.moe.top_k)?;
    Ok(n)
}

/// Name the failing sequence in a batch's error.
pub fn in_sequence(e: Error, i: usize, len: usize) -> Error {
    match e {
        Error::InvalidArgument { reason } if len > 1 => {
            Error::InvalidArgument { reason: format!("{reason} (sequence {i} of the batch)") }
        }
        Error::ContextFull { cached, new, n_ctx, .. } if len > 1 => {
            Error::ContextFull { cached, new, n_ctx, sequence: Some(i) }
        }
        e => e,
    }
}
