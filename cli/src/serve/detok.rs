//! Incremental detokenisation for a sequence that outlives any borrow of its tokenizer: the
//! algorithm of `colibri::tokenizer::StreamDecoder` (a window of already-emitted context ids and
//! pending ids; emit the difference once the decode no longer ends in U+FFFD), with the
//! tokenizer passed to each call instead of held, so the scheduler can keep it next to the
//! `Arc<Engine>` that owns the tokenizer.

use colibri::tokenizer::Tokenizer;
use colibri::Error;

#[derive(Default)]
pub struct Detok {
    window: Vec<u32>,
    read: usize,
    context_text: String,
}

impl Detok {
    /// Feed one generated id; the newly completed text (may be empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, Error> {
        self.window.push(id);
        let text = match tok.decode(&self.window, true) {
            Ok(t) => t,
            Err(e) => {
                self.window.pop();
                return Err(e);
            }
        };
        if text.ends_with(char::REPLACEMENT_CHARACTER) || text.len() <= self.context_text.len() {
            return Ok(String::new());
        }
        let next_context = tok.decode(&self.window[self.read..], true)?;
        let new = match text.strip_prefix(self.context_text.as_str()) {
            Some(new) => new.to_string(),
            None => next_context.clone(),
        };
        self.window.drain(..self.read);
        self.read = self.window.len();
        self.context_text = next_context;
        Ok(new)
    }

    /// Whatever is still held back, lossily; empty afterwards.
    pub fn finish(&mut self, tok: &Tokenizer) -> String {
        let text = tok.decode(&self.window, true).unwrap_or_default();
        let rest = text.strip_prefix(self.context_text.as_str()).map(String::from).unwrap_or_default();
        *self = Detok::default();
        rest
    }
}
