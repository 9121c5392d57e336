//! Session state files in the C ABI: save a session's cached tokens (KV cache, recurrent
//! state, routing RNG, last logits) with their token ids to a file, and load them into a session
//! of the same model file later — a long system prompt or a conversation kept on disk
//! (`session::state_file` has the format).

use super::handle::*;
use super::panic::{guard, Failure};
use super::session::colibri_session;
use super::status::*;
use std::ffi::c_char;
use std::path::Path;

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
