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

/// One turn of a conversation, as transformers' templates see a message dict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// "system", "user", "assistant", "tool", ... (whatever the template knows).
    pub role: String,
    /// None: the message has no `content` key (transformers drops keys whose value is None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Every other key, passed to the template as given, in order: `tool_calls` (arguments as
    /// objects, the form templates expect), `tool_call_id`, `name`, `reasoning_content`, ...
    /// Null values are dropped, as transformers does.
    #[serde(flatten)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: Some(content.into()), fields: serde_json::Map::new() }
    }

    /// The content, "" when absent.
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or_default()
    }

    /// Bytes of text the message carries (content and every string inside `fields`).
    pub fn text_len(&self) -> usize {
        fn strings(v: &serde_json::Value) -> usize {
            match v {
                serde_json::Value::String(s) => s.len(),
                serde_json::Value::Array(a) => a.iter().map(strings).sum(),
                serde_json::Value::Object(o) => o.iter().map(|(k, v)| k.len() + strings(v)).sum(),
                _ => 8,
            }
        }
        self.role.len() + self.text().len() + self.fields.iter().map(|(k, v)| k.len() + strings(v)).sum::<usize>()
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
///
/// Templates see what transformers passes: `messages`, `tools` and `documents` (none unless
/// given in [`RenderArgs::extra`]), `add_generation_prompt`, `bos_token`, `eos_token`; a message
/// with reasoning (`reasoning_content`, `thinking` or `reasoning`) carries it as both
/// `reasoning_content` and `thinking`; `{% generation %}...{% endgeneration %}` (transformers'
/// assistant-mask tag) renders its body.
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

    /// The same template with `strftime_now` reading `unix_secs` (UTC) instead of the clock: for
    /// reproducible prompts and tests.
    pub fn at_time(self, unix_secs: i64) -> ChatTemplate {
        ChatTemplate { engine: self.engine.at_time(unix_secs) }
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
