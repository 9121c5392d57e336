//! Incremental decoding of generated ids into text chunks that concatenate to the full decode.
//!
//! Each id can't be decoded alone: sentencepiece decoders strip the first token's leading space,
//! and a character may be split over several byte-fallback (`<0xE2>`) or byte-level tokens. So,
//! as text-generation-inference and HF's `DecodeStream` do, the decoder keeps a window: a few
//! already-emitted ids as context (`..read`) and the pending ids (`read..`). It decodes the
//! context and the whole window and emits the difference once that no longer ends in U+FFFD (an
//! incomplete character decodes as U+FFFD).

use super::Tokenizer;
use crate::error::Result;

/// State of one generation's text; see [`Tokenizer::stream`].
pub struct StreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    state: DecodeState,
}

impl<'t> StreamDecoder<'t> {
    pub(super) fn new(tokenizer: &'t Tokenizer, skip_special_tokens: bool) -> Self {
        StreamDecoder { tokenizer, state: DecodeState::new(skip_special_tokens) }
    }

    /// Feed one generated id; returns the newly completed text (may be empty) — never a partial
    /// character, and with the spaces the full decode has. An id outside the vocabulary is an
    /// error and leaves the state unchanged.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.state.push(self.tokenizer, id)
    }

    /// Whatever is still held back (e.g. an incomplete character at the end) as lossy text;
    /// the decoder is empty afterwards.
    pub fn finish(&mut self) -> String {
        self.state.finish(self.tokenizer)
    }
}

/// The decoder's state without the tokenizer: for a generation that outlives any borrow of its
/// tokenizer (a server keeps it next to a shared model); every call is given the tokenizer,
/// which must be the same one each time.
#[derive(Clone, Debug, Default)]
pub struct DecodeState {
    skip_special_tokens: bool,
    /// Context ids (`..read`, already emitted) followed by pending ids (`read..`).
    window: Vec<u32>,
    /// Index in `window` of the first id not yet emitted.
    read: usize,
    /// Decode of `window[..read]`.
    context_text: String,
}

impl DecodeState {
    /// An empty state; special tokens are left out of the text when `skip_special_tokens`.
    pub fn new(skip_special_tokens: bool) -> Self {
        DecodeState { skip_special_tokens, ..Default::default() }
    }

    /// See [`StreamDecoder::push`].
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String> {
        if id as usize >= tokenizer.vocab_size() {
            return Err(tokenizer.unknown_id(id));
        }
        self.window.push(id);
        let chunk = self.completed_text(tokenizer);
        if chunk.is_err() {
            self.window.pop();
        }
        chunk
    }

    /// The text the pending ids complete ("" while it ends in an incomplete character), moving
    /// them to the context when there is some. Changes nothing on error.
    fn completed_text(&mut self, tokenizer: &Tokenizer) -> Result<String> {
        let text = tokenizer.decode(&self.window, self.skip_special_tokens)?;
        if text.ends_with(char::REPLACEMENT_CHARACTER) || text.len() <= self.context_text.len() {
            return Ok(String::new());
        }
        let next_context = tokenizer.decode(&self.window[self.read..], self.skip_special_tokens)?;
        let new = match text.strip_prefix(self.context_text.as_str()) {
            Some(new) => new.to_string(),
            // The decoder rewrote text already emitted (a byte-fallback byte that was valid alone
            // became part of an invalid sequence and turned into U+FFFD). Emitted text cannot be
            // taken back: emit the pending ids decoded on their own, lossily.
            None => next_context.clone(),
        };
        // The ids just emitted become the context of the next chunk.
        self.window.drain(..self.read);
        self.read = self.window.len();
        self.context_text = next_context;
        Ok(new)
    }

    /// See [`StreamDecoder::finish`].
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> String {
        let text = tokenizer.decode(&self.window, self.skip_special_tokens).unwrap_or_default();
        let rest = text.strip_prefix(self.context_text.as_str()).map(String::from).unwrap_or_default();
        self.window.clear();
        self.read = 0;
        self.context_text.clear();
        rest
    }
}
