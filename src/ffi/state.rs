//! A session's state in the C ABI: its cached tokens (KV cache, recurrent state, routing RNG,
//! last logits) copied into another session of the same model in memory (parallel sampling, a
//! shared system prompt), or saved with their token ids to a file and loaded into a session of
//! the same model file later — a long system prompt or a conversation kept on disk
//! (`session::state_file` has the format).

use super::handle::*;
use super::panic::{guard, Failure};
use super::session::colibri_session;
use super::status::*;
use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

/// Make `dst` hold exactly what `src` holds (llama.cpp's llama_memory_seq_cp): its cached
/// tokens — the KV rows of every attention layer (only the used positions are copied), the
/// recurrent state of DeltaNet layers with the state of its last call's start (so
/// colibri_session_truncate goes back to the same points on both) — its routing RNG state and
/// its last logits. `src` is unchanged and the two are independent afterwards. `dst` keeps its
/// own settings: context capacity, kv_type (KV values are converted if `src`'s differs; equal
/// types continue bit-identically), quant_act, all_logits, routing mode, moe_top_k and route
/// callback. Errors leave `dst` unchanged: NULL_ARGUMENT; INVALID_ARGUMENT for sessions of
/// different models; CONTEXT_FULL when `src`'s cached tokens exceed `dst`'s n_ctx;
/// OUT_OF_MEMORY; BUSY while either session is in use by another call. `dst == src` does
/// nothing.
///
/// # Safety
/// `dst` and `src` must be live sessions.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_copy(
    dst: *mut colibri_session,
    src: *const colibri_session,
) -> colibri_status {
    guard(|| {
        if std::ptr::eq(dst, src) {
            colibri_session::take(dst, "dst")?;
            return Ok(());
        }
        let from = colibri_session::take(src, "src")?;
        let mut to = colibri_session::take(dst, "dst")?;
        let same = Arc::ptr_eq(&from.model, &to.model)
            || crate::session::model_fingerprint(&from.model) == crate::session::model_fingerprint(&to.model);
        if !same {
            let msg = "dst and src are sessions of different models";
            return Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, msg));
        }
        to.session.copy_from(&from.session)?;
        Ok(())
    })
}

/// Write the session's state and the ids of its cached tokens (`n_tokens` of them: all cached
/// tokens, or 0 to store none) to the file `path`: a temporary file beside it is written, synced
/// and renamed into place, so a failure leaves any earlier file at `path` as it was. The file is
/// tied to the model file (its header, metadata and tensor table); the routing trace is not
/// saved. Works for sessions made by colibri_init too.
///
/// # Safety
/// `session` must be a live session; `path` a NUL-terminated string; `tokens` readable for
/// `n_tokens` ids (NULL allowed when 0).
#[no_mangle]
pub unsafe extern "C" fn colibri_session_save_state(
    session: *mut colibri_session,
    path: *const c_char,
    tokens: *const i32,
    n_tokens: usize,
) -> colibri_status {
    guard(|| {
        let s = colibri_session::take(session, "session")?;
        let path = c_str(path, "path")?;
        let ids = token_ids(tokens, n_tokens, "tokens")?;
        s.session.save_state(&s.model, &ids, Path::new(path))?;
        Ok(())
    })
}

/// Replace the session's state by the one saved in `path` (by colibri_session_save_state, for
/// this model file) and write its stored token ids to `tokens_out` (capacity `tokens_cap`;
/// `*n_tokens_out` gets their count). The whole file is checked first — magic, version, model,
/// shapes, length, checksum, that it fits the session's context (else CONTEXT_FULL) and that the
/// ids fit `tokens_cap` (else BUFFER_TOO_SMALL, `*n_tokens_out` set): on any failure the session
/// is unchanged. A file that is not a state of this model is INVALID_ARGUMENT. KV values are
/// converted to the session's kv_type. The restored length is the point colibri_session_truncate
/// can go back to on recurrent models.
///
/// # Safety
/// `session` must be a live session; `path` a NUL-terminated string; `tokens_out` writable for
/// `tokens_cap` ids (NULL allowed when 0); `n_tokens_out` writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_load_state(
    session: *mut colibri_session,
    path: *const c_char,
    tokens_out: *mut i32,
    tokens_cap: usize,
    n_tokens_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let mut s = colibri_session::take(session, "session")?;
        let path = Path::new(c_str(path, "path")?);
        if n_tokens_out.is_null() {
            return Err(Failure::null("n_tokens_out"));
        }
        let stored = crate::session::stored_tokens(path)?;
        put(n_tokens_out, stored);
        if stored > tokens_cap {
            let msg = format!("the state stores {stored} token ids; tokens_cap is {tokens_cap}");
            return Err(Failure::new(COLIBRI_STATUS_BUFFER_TOO_SMALL, msg));
        }
        let out = slice_mut(tokens_out, tokens_cap, "tokens_out")?;
        let st = &mut *s;
        let ids = st.session.load_state(&st.model, path)?;
        put(n_tokens_out, ids.len());
        for (o, &id) in out.iter_mut().zip(&ids) {
            *o = id as i32;
        }
        Ok(())
    })
}
