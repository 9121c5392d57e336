//! Chat templates: renders a conversation into the prompt text the model was trained on, the way
//! transformers' `apply_chat_template(messages, add_generation_prompt, tokenize=False)` does
//! (Jinja with `trim_blocks`/`lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`,
//! Python's `tojson` and Python string methods), through `minijinja` (feature `chat-template`).
//!
//! Templates come from model files, so rendering is bounded: a fuel limit stops endless loops and
//! runaway allocation, and an output cap stops explosive output. Tokenising the text is the
//! caller's job ([`super::Tokenizer::encode`] with `add_special_tokens = false`: templates write
//! their own special tokens).

use crate::error::Result;
use serde::{Deserialize, Serialize};

/// Most template steps (minijinja fuel: instructions plus allocation) one render may take.
pub const MAX_RENDER_FUEL: u64 = 1_000_000;
/// Most bytes one render may produce.
pub const MAX_RENDER_OUTPUT: usize = 1 << 20;

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// "system", "user", "assistant", ... (whatever the template knows).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

/// Everything a render sees: HF's named arguments plus its `**kwargs`.
#[derive(Clone, Copy, Debug)]
pub struct RenderArgs<'a> {
    pub messages: &'a [ChatMessage],
    /// End with the opening of an assistant turn.
    pub add_generation_prompt: bool,
    pub bos_token: &'a str,
    pub eos_token: &'a str,
    /// Further template variables (HF `apply_chat_template(**kwargs)`: `enable_thinking`,
    /// `tools`, ...). They cannot override the four above.
    pub extra: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// A compiled chat template. Immutable; `Send + Sync`.
pub struct ChatTemplate {
    engine: engine::Renderer,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compile `source` once; a syntax error is an [`crate::Error::Metadata`] naming the line.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        engine::Renderer::compile(source).map(|engine| ChatTemplate { engine })
    }

    /// Render like HF `apply_chat_template(messages, add_generation_prompt, tokenize=False)` with
    /// `bos_token` and `eos_token` as variables. `raise_exception(msg)` in the template gives
    /// [`crate::Error::InvalidArgument`] carrying `msg`; exhausting the fuel gives
    /// [`crate::Error::Metadata`], output beyond [`MAX_RENDER_OUTPUT`] [`crate::Error::TooLarge`].
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String> {
        self.render_with(&RenderArgs { messages, add_generation_prompt, bos_token, eos_token, extra: None })
    }

    /// [`render`](Self::render) with extra template variables.
    pub fn render_with(&self, args: &RenderArgs<'_>) -> Result<String> {
        self.engine.render(args)
    }
}

#[cfg(feature = "chat-template")]
mod engine;
#[cfg(not(feature = "chat-template"))]
#[path = "chat/disabled.rs"]
mod engine;
