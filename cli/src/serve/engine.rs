//! One loaded model generation: the mapped and fully verified model, its tokenizer and chat
//! template, the id clients name it by (the file stem) and the context every sequence gets.
//! Shared as `Arc<Engine>`: a request keeps the engine it started with, so a reload never
//! changes the model under a running sequence, and the mapping goes when the last user does.

use colibri::chat_output::{end_of_turn_ids, Syntax, ToolTags};
use colibri::grammar::VocabCache;
use colibri::session::{kv_bytes_per_token, SessionOptions, DEFAULT_CTX_CAP};
use colibri::tokenizer::{encode_chat_with, ChatMessage, ChatTemplate, MessageSpecials, Tokenizer};
use colibri::{Error, LoadOptions, Model};
use std::path::Path;

/// Syntax-level facts of a chat template, found once per loaded model.
#[derive(Clone, Copy, Debug)]
pub struct ChatCaps {
    pub syntax: Syntax,
    /// The template renders `tools` and its tool-call syntax is known.
    pub tools: bool,
    /// The template reads `reasoning_effort` (GPT-OSS).
    pub reasoning_effort: bool,
    /// The syntax's markers are special tokens: parse the text with them.
    pub raw_text: bool,
}

impl ChatCaps {
    pub fn of(template: &str, special_strings: &[String]) -> ChatCaps {
        let syntax = Syntax::detect(template);
        let known = !matches!(syntax, Syntax::Tagged { tools: ToolTags::None, .. });
        let raw_text = syntax.markers().iter().any(|m| special_strings.iter().any(|s| s == m));
        ChatCaps {
            syntax,
            tools: known && template.contains("tools"),
            reasoning_effort: template.contains("reasoning_effort"),
            raw_text,
        }
    }
}

pub struct Engine {
    pub model: Model,
    pub tokenizer: Tokenizer,
    /// None when the model has no chat template or it does not compile (chat requests get 400).
    pub template: Option<ChatTemplate>,
    /// What the template's syntax lets a chat reply read (tool calls, reasoning).
    pub chat: ChatCaps,
    /// The served model id: the file stem.
    pub id: String,
    /// 1 for the model loaded at start, +1 per successful reload.
    pub generation: u64,
    /// Context length of every sequence.
    pub n_ctx: usize,
    /// Unix seconds of the load (the `created` field of /v1/models).
    pub created: u64,
    /// KV-cache bytes per token of the scheduler's sessions (their default KV type).
    pub kv_bytes_per_token: usize,
    /// The vocabulary prepared for `response_format` and tool grammars, built on the first
    /// such request (its documents may end with `end_ids` too).
    pub grammar: VocabCache,
    /// The chat template's source ("" without one).
    pub template_source: String,
    /// The template's end-of-turn tokens: they end a chat reply as end-of-sequence does.
    pub end_ids: Vec<u32>,
}

impl Engine {
    /// Open `path`, verify every byte (checksums, NaN/Inf scan) and prove it serves (tokenizer,
    /// chat template, a canary forward pass: `colibri::usable::prove`), mapped and with a worker
    /// pool as `opts` say. `ctx` 0 = the model's context capped at 4096.
    pub fn load(path: &Path, ctx: usize, opts: LoadOptions, generation: u64) -> Result<Engine, Error> {
        // The SIGBUS guard: a file rewritten in place fails requests and triggers a reload
        // (reload::watch) instead of killing the server.
        let model = crate::model_path::open(path, &LoadOptions { sigbus_guard: true, ..opts })?;
        model.verify()?;
        let usable = colibri::usable::prove(&model)?;
        let tokenizer = usable.tokenizer.ok_or_else(|| Error::Unsupported {
            what: "this model file carries no tokenizer (tokenizer.json)".into(),
        })?;
        let template = usable.template;
        let template_source = model.chat_template().unwrap_or_default().to_string();
        let chat = ChatCaps::of(&template_source, &tokenizer.special_strings());
        let end_ids = end_of_turn_ids(&template_source, &tokenizer);
        let trained = model.config().max_position_embeddings;
        let n_ctx = if ctx == 0 { trained.min(DEFAULT_CTX_CAP) } else { ctx };
        if n_ctx < 2 {
            return Err(Error::InvalidArgument { reason: format!("context {n_ctx} is too small") });
        }
        let id = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let kv_bytes_per_token = kv_bytes_per_token(model.config(), SessionOptions::default().kv_dtype);
        let grammar = VocabCache::default();
        Ok(Engine {
            model,
            tokenizer,
            template,
            chat,
            id,
            generation,
            n_ctx,
            created,
            kv_bytes_per_token,
            grammar,
            template_source,
            end_ids,
        })
    }

    /// Experts per layer (0 for a dense layer), for the metrics.
    pub fn experts_per_layer(&self) -> impl Iterator<Item = usize> + '_ {
        let c = self.model.config();
        c.layers.iter().map(move |l| if l.moe { c.moe.n_experts } else { 0 })
    }

    /// The conversation rendered by the model's chat template, opening the assistant turn, as
    /// prompt ids (message text tokenised as text unless `specials` says otherwise), with further
    /// template variables (`tools`, ...).
    pub fn encode_chat_with(
        &self,
        messages: &[ChatMessage],
        extra: Option<&serde_json::Map<String, serde_json::Value>>,
        specials: MessageSpecials,
    ) -> Result<Vec<u32>, Error> {
        let t = self
            .template
            .as_ref()
            .ok_or_else(|| Error::Unsupported { what: "this model has no usable chat template".into() })?;
        encode_chat_with(&self.tokenizer, t, messages, true, extra, specials)
    }

    /// This engine with `source` (when given) as its chat template instead of the model's
    /// (`--chat-template-file`).
    pub fn with_template_opt(mut self, source: Option<&str>) -> Result<Engine, Error> {
        if let Some(source) = source {
            self.template = Some(ChatTemplate::new(source)?);
            self.chat = ChatCaps::of(source, &self.tokenizer.special_strings());
            self.template_source = source.to_string();
            self.end_ids = end_of_turn_ids(source, &self.tokenizer);
        }
        Ok(self)
    }
}
