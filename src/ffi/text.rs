//! Text entry points: tokenize, detokenize, chat-template rendering. They need the model's
//! tokenizer (and the chat-template feature): otherwise COLIBRI_STATUS_UNSUPPORTED.

use super::handle::*;
use super::model::colibri_model;
use super::panic::{guard, Failure};
use super::status::*;
use crate::tokenizer::{encode_chat, ChatMessage, ChatTemplate, MessageSpecials};
use std::ffi::c_char;

/// One chat message for colibri_chat_render.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_chat_message {
    /// "system", "user", "assistant", … (NUL-terminated UTF-8)
    pub role: *const c_char,
    /// NUL-terminated UTF-8.
    pub content: *const c_char,
}

/// Tokenize `text_len` bytes of UTF-8 `text` (add_special: add BOS etc. as the tokenizer's
/// post-processor says). Writes up to `tokens_cap` ids and the count needed to `*n_tokens_out`;
/// COLIBRI_STATUS_BUFFER_TOO_SMALL when they do not fit (call again with a larger buffer).
/// Size query: `tokens_out` NULL and `tokens_cap` 0 write only the count (BUFFER_TOO_SMALL,
/// or OK when there are no ids), then allocate that many and call again. Safe to call
/// concurrently.
///
/// # Safety
/// `text` readable for text_len bytes; `tokens_out` writable for tokens_cap ints.
#[no_mangle]
pub unsafe extern "C" fn colibri_tokenize(
    model: *const colibri_model,
    text: *const c_char,
    text_len: usize,
    add_special: i32,
    tokens_out: *mut i32,
    tokens_cap: usize,
    n_tokens_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        check_ids_out(tokens_out, tokens_cap, n_tokens_out)?;
        let bytes = slice(text as *const u8, text_len, "text")?;
        let text = std::str::from_utf8(bytes)
            .map_err(|_| Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, "text is not valid UTF-8"))?;
        let ids = m.tokenizer()?.encode(text, add_special != 0)?;
        write_ids(&ids, tokens_out, tokens_cap, n_tokens_out)
    })
}

/// Decode `n_tokens` ids to UTF-8 text in `buf` (capacity `buf_cap` bytes, NUL-terminated);
/// `*len_out` gets the text length without the NUL (also on BUFFER_TOO_SMALL). Size query:
/// `buf` NULL and `buf_cap` 0 write only `*len_out` and return BUFFER_TOO_SMALL; allocate
/// `*len_out + 1` bytes and call again. Safe to call concurrently.
///
/// # Safety
/// `tokens` readable for n_tokens ints; `buf` writable for buf_cap bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_detokenize(
    model: *const colibri_model,
    tokens: *const i32,
    n_tokens: usize,
    skip_special: i32,
    buf: *mut c_char,
    buf_cap: usize,
    len_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        if len_out.is_null() {
            return Err(Failure::null("len_out"));
        }
        let ids = token_ids(tokens, n_tokens, "tokens")?;
        let text = m.tokenizer()?.decode(&ids, skip_special != 0)?;
        write_text(&text, buf, buf_cap, len_out)
    })
}

/// Render `n_messages` messages with the model's chat template (add_generation_prompt: end with
/// the assistant header) into `buf` like colibri_detokenize (the same size query: NULL, 0).
/// UNSUPPORTED when the model has no template or the build has no chat-template support. Safe to
/// call concurrently. To feed a conversation, colibri_chat_tokenize is the safe way.
///
/// # Safety
/// `messages` readable for n_messages entries with valid strings; `buf` writable for buf_cap.
#[no_mangle]
pub unsafe extern "C" fn colibri_chat_render(
    model: *const colibri_model,
    messages: *const colibri_chat_message,
    n_messages: usize,
    add_generation_prompt: i32,
    buf: *mut c_char,
    buf_cap: usize,
    len_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        if len_out.is_null() {
            return Err(Failure::null("len_out"));
        }
        let msgs = chat_messages(messages, n_messages)?;
        let src = m
            .model
            .chat_template()
            .ok_or_else(|| Failure::new(COLIBRI_STATUS_UNSUPPORTED, "this model has no chat template"))?;
        let tok = m.tokenizer()?;
        let piece = |id: Option<u32>| id.and_then(|i| tok.token_piece(i)).unwrap_or_default();
        let text = ChatTemplate::new(src)?.render(
            &msgs,
            add_generation_prompt != 0,
            &piece(tok.bos_id()),
            &piece(tok.eos_ids().first().copied()),
        )?;
        // The template was read from the mapping: a file changed under it gives no text.
        m.model.check_unchanged()?;
        write_text(&text, buf, buf_cap, len_out)
    })
}

/// The C messages as library messages.
fn chat_messages(messages: *const colibri_chat_message, n_messages: usize) -> Result<Vec<ChatMessage>, Failure> {
    slice(messages, n_messages, "messages")?
        .iter()
        .map(|msg| Ok(ChatMessage::new(c_str(msg.role, "messages[].role")?, c_str(msg.content, "messages[].content")?)))
        .collect()
}

/// The out-parameters of an id-returning call, checked before any work.
fn check_ids_out(tokens_out: *mut i32, tokens_cap: usize, n_tokens_out: *mut usize) -> Result<(), Failure> {
    if n_tokens_out.is_null() {
        return Err(Failure::null("n_tokens_out"));
    }
    if tokens_out.is_null() && tokens_cap > 0 {
        return Err(Failure::null("tokens_out"));
    }
    Ok(())
}

/// Write `ids` to the caller's buffer like colibri_tokenize (count always, BUFFER_TOO_SMALL when
/// they do not fit).
fn write_ids(ids: &[u32], tokens_out: *mut i32, tokens_cap: usize, n_tokens_out: *mut usize) -> Result<(), Failure> {
    put(n_tokens_out, ids.len());
    if ids.len() > tokens_cap {
        return Err(Failure::new(
            COLIBRI_STATUS_BUFFER_TOO_SMALL,
            format!("{} tokens do not fit tokens_cap {tokens_cap}", ids.len()),
        ));
    }
    let out = slice_mut(tokens_out, tokens_cap, "tokens_out")?;
    for (o, &id) in out.iter_mut().zip(ids) {
        *o = id as i32;
    }
    Ok(())
}

/// Render `n_messages` messages with the model's chat template and tokenise the prompt, the way
/// to feed a conversation: text that comes from a message (content and role) is tokenised as
/// text, so special-token strings typed by a user (`<|im_end|>`...) cannot forge turns; special
/// tokens are read only where the template writes them (colibri_chat_render followed by
/// colibri_tokenize would read them everywhere). Output like colibri_tokenize (the same size
/// query: NULL, 0). UNSUPPORTED when the model has no template or tokenizer. Safe to call
/// concurrently.
///
/// # Safety
/// `messages` readable for n_messages entries with valid strings; `tokens_out` writable for
/// tokens_cap ints.
#[no_mangle]
pub unsafe extern "C" fn colibri_chat_tokenize(
    model: *const colibri_model,
    messages: *const colibri_chat_message,
    n_messages: usize,
    add_generation_prompt: i32,
    tokens_out: *mut i32,
    tokens_cap: usize,
    n_tokens_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        check_ids_out(tokens_out, tokens_cap, n_tokens_out)?;
        let msgs = chat_messages(messages, n_messages)?;
        let src = m
            .model
            .chat_template()
            .ok_or_else(|| Failure::new(COLIBRI_STATUS_UNSUPPORTED, "this model has no chat template"))?;
        let template = ChatTemplate::new(src)?;
        let ids = encode_chat(m.tokenizer()?, &template, &msgs, add_generation_prompt != 0, MessageSpecials::AsText)?;
        m.model.check_unchanged()?;
        write_ids(&ids, tokens_out, tokens_cap, n_tokens_out)
    })
}
