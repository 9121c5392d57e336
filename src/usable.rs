//! Proof that an opened model works, beyond its bytes: `Model::verify` shows every byte is what
//! was written and finite; `prove` shows the file can serve — its tokenizer loads and stays
//! inside the model's vocabulary, its chat template compiles and renders, and a one-token
//! forward pass (the canary) gives finite logits. `colibri validate` and the server's reload run
//! it, so a file that would fail every request is refused before it is used.

use crate::error::{Error, Result};
use crate::forward::{forward, ForwardOptions, Input};
use crate::model::Model;
use crate::session::{Session, SessionOptions};
use crate::tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

/// What a proven model carries, loaded once (the caller keeps them).
pub struct Usable {
    /// None when the file carries no tokenizer.
    pub tokenizer: Option<Tokenizer>,
    /// None when the file carries no chat template.
    pub template: Option<ChatTemplate>,
}

fn unusable(what: impl Into<String>) -> Error {
    Error::Unusable { what: what.into() }
}

/// The template compiles and renders a short conversation that opens the assistant turn.
fn check_template(source: &str, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate> {
    let t = ChatTemplate::new(source).map_err(|e| unusable(format!("the chat template does not compile: {e}")))?;
    let piece = |id: Option<u32>| tokenizer.and_then(|k| id.and_then(|i| k.token_piece(i))).unwrap_or_default();
    let (bos, eos) =
        (piece(tokenizer.and_then(|k| k.bos_id())), piece(tokenizer.and_then(|k| k.eos_ids().first().copied())));
    let conversation =
        [ChatMessage::new("user", "Hello"), ChatMessage::new("assistant", "Hi"), ChatMessage::new("user", "Bye")];
    t.render(&conversation, true, &bos, &eos)
        .map_err(|e| unusable(format!("the chat template does not render a short conversation: {e}")))?;
    Ok(t)
}

/// One token (bos, else id 0) through every layer: the logits must be finite. Catches weights
/// that are finite but overflow in use (e.g. a router at the bf16 maximum).
pub fn canary(model: &Model, token: u32) -> Result<()> {
    let mut s = Session::new(model.config(), &SessionOptions { n_ctx: 2, ..SessionOptions::default() })?;
    forward(model, &mut s, Input::Tokens(&[token]), &ForwardOptions::default())?;
    if let Some(i) = s.logits().iter().position(|x| !x.is_finite()) {
        return Err(unusable(format!(
            "a one-token forward pass gives a non-finite logit ({} at index {i}): a weight overflows in use",
            s.logits()[i]
        )));
    }
    Ok(())
}

/// Load the tokenizer and template and run the canary (see the module doc). Builds without the
/// tokenizer or chat-template feature skip what they cannot load.
pub fn prove(model: &Model) -> Result<Usable> {
    let tokenizer = match (cfg!(feature = "tokenizer"), model.tokenizer_json()) {
        (true, Some(_)) => {
            // Loading checks that it fits the model (ids inside the vocabulary, bos / eos known).
            let t = Tokenizer::from_model(model).map_err(|e| unusable(format!("the tokenizer does not load: {e}")))?;
            Some(t)
        }
        _ => None,
    };
    let template = match (cfg!(feature = "chat-template"), model.chat_template()) {
        (true, Some(src)) => Some(check_template(src, tokenizer.as_ref())?),
        _ => None,
    };
    canary(model, tokenizer.as_ref().and_then(|t| t.bos_id()).unwrap_or(0))?;
    Ok(Usable { tokenizer, template })
}
