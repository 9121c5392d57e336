//! `colibri_infer_batch`: one forward step over several sessions of one model (continuous
//! batching). Each session gets what `colibri_infer` on it alone would give; the weights are
//! read once for all of them.

use super::handle::*;
use super::model::colibri_model;
use super::panic::{guard, Failure};
use super::session::{aborted, colibri_session};
use super::status::*;
use crate::forward::{forward_batch, ForwardOptions, Input, Sequence};
use std::sync::Arc;

fn invalid(msg: String) -> Failure {
    Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, msg)
}

/// Run one forward step over `n_sessions` sessions of `model` together: session i gets the
/// `n_tokens[i]` (≥ 1) new ids at `tokens[i]` — one for decoding, more for a prompt chunk —
/// appended to its KV cache. The logits go to `logits_out` (`logits_len` floats), session after
/// session in array order: each session's last-position logits (vocab_size floats), or with
/// its `all_logits` every new position's (n_tokens[i]·vocab_size). Each session keeps its own
/// options (routing mode, seed, moe_top_k, all_logits) and its route callback is called after
/// the step, session after session; one returning COLIBRI_ROUTE_ABORT fails the call
/// (COLIBRI_STATUS_ABORTED): the later sessions' callbacks are not called, every session is as
/// it was before the call and no logits are written.
///
/// Checks, in this order, before anything changes (a failed call leaves every session as it
/// was): `model` (NULL_ARGUMENT); `n_sessions` 0 (INVALID_ARGUMENT); `sessions`, `tokens`,
/// `n_tokens` (NULL_ARGUMENT); for each i: `sessions[i]` NULL (NULL_ARGUMENT), repeated in the
/// array (INVALID_ARGUMENT), in use by another call (BUSY), made on another model handle
/// (INVALID_ARGUMENT), `tokens[i]` NULL while
/// n_tokens[i] > 0 (NULL_ARGUMENT), a negative id or `n_tokens[i]` 0 (INVALID_ARGUMENT);
/// `logits_out` (NULL_ARGUMENT; BUFFER_TOO_SMALL when shorter than the sum above); then each
/// session's ids (INVALID_ARGUMENT for an id outside the vocabulary), context (CONTEXT_FULL)
/// and activation mode (INVALID_ARGUMENT unless every session has the same `quant_act`). The
/// last error message names the failing index. Every session is busy until the call returns
/// (COLIBRI_STATUS_BUSY for another call on it meanwhile, from a route callback or another
/// thread); the model may be used by other calls.
///
/// # Safety
/// `sessions`, `tokens` and `n_tokens` readable for n_sessions elements; `tokens[i]` readable
/// for n_tokens[i] ints; `logits_out` writable for logits_len floats.
#[no_mangle]
pub unsafe extern "C" fn colibri_infer_batch(
    model: *const colibri_model,
    sessions: *const *mut colibri_session,
    tokens: *const *const i32,
    n_tokens: *const usize,
    n_sessions: usize,
    logits_out: *mut f32,
    logits_len: usize,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        if n_sessions == 0 {
            return Err(invalid("n_sessions is 0: at least one session is needed".into()));
        }
        let handles = slice(sessions, n_sessions, "sessions")?;
        let token_ptrs = slice(tokens, n_sessions, "tokens")?;
        let counts = slice(n_tokens, n_sessions, "n_tokens")?;
        let vocab = m.model.config().vocab_size;
        let mut ids = Vec::with_capacity(n_sessions);
        let mut need = 0usize;
        let mut ss = Vec::with_capacity(n_sessions);
        for (i, &h) in handles.iter().enumerate() {
            borrow(h as *const colibri_session, &format!("sessions[{i}]"))?;
            if let Some(j) = handles[..i].iter().position(|&o| o == h) {
                return Err(invalid(format!("sessions[{j}] and sessions[{i}] are the same session")));
            }
            let s = colibri_session::take(h, &format!("sessions[{i}]"))?;
            if !Arc::ptr_eq(&s.model, &m.model) {
                return Err(invalid(format!("sessions[{i}] was made on another model handle")));
            }
            let t = token_ids(token_ptrs[i], counts[i], &format!("tokens[{i}]"))?;
            if t.is_empty() {
                return Err(invalid(format!("n_tokens[{i}] is 0")));
            }
            need = need.saturating_add(if s.all_logits { t.len() } else { 1 }.saturating_mul(vocab));
            ids.push(t);
            ss.push(s);
        }
        let logits = slice_mut(logits_out, logits_len, "logits_out")?;
        if logits.len() < need {
            return Err(Failure::new(
                COLIBRI_STATUS_BUFFER_TOO_SMALL,
                format!("logits_len is {} floats; this batch needs {need}", logits.len()),
            ));
        }
        for s in ss.iter_mut() {
            s.begin_trace();
        }
        let before: Vec<_> = ss.iter().map(|s| s.session.checkpoint()).collect();
        let mut batch: Vec<Sequence<'_>> = ss
            .iter_mut()
            .zip(&ids)
            .map(|(s, t)| {
                let opts = ForwardOptions { logits: s.logits_mode(), routing: s.routing };
                Sequence { session: &mut s.session, input: Input::Tokens(t), opts }
            })
            .collect();
        forward_batch(&m.model, &mut batch)?;
        drop(batch);
        // Session after session; the first abort ends the reports and undoes the whole step.
        if !ss.iter_mut().all(|s| s.report_routes()) {
            for (s, c) in ss.iter_mut().zip(before) {
                s.session.rollback(c);
            }
            return Err(aborted());
        }
        let mut at = 0;
        for s in ss.iter() {
            let out = s.session.logits();
            logits[at..at + out.len()].copy_from_slice(out);
            at += out.len();
        }
        Ok(())
    })
}
