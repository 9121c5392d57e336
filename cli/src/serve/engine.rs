//! One loaded model generation: the mapped and fully verified model, its tokenizer and chat
//! template, the id clients name it by (the file stem) and the context every sequence gets.
//! Shared as `Arc<Engine>`: a request keeps the engine it started with, so a reload never
//! changes the model under a running sequence, and the mapping goes when the last user does.

use colibri::session::{kv_bytes_per_token, SessionOptions, DEFAULT_CTX_CAP};
use colibri::tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use colibri::{Error, LoadOptions, Model};
use std::path::Path;

pub struct Engine {
    pub model: Model,
    pub tokenizer: Tokenizer,
    /// None when the model has no chat template or it does not compile (chat requests get 400).
    pub template: Option<ChatTemplate>,
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
}

impl Engine {
    /// Open `path`, verify every byte (checksums, NaN/Inf scan), load the tokenizer and the chat
    /// template. `ctx` 0 = the model's context capped at 4096.
    pub fn load(path: &Path, ctx: usize, generation: u64) -> Result<Engine, Error> {
        let model = Model::open(path, &LoadOptions::default())?;
        model.verify()?;
        let tokenizer = Tokenizer::from_model(&model)?;
        let template = match model.chat_template().map(ChatTemplate::new) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                eprintln!("the model's chat template does not compile ({e}): chat requests get 400");
                None
            }
            None => None,
        };
        let trained = model.config().max_position_embeddings;
        let n_ctx = if ctx == 0 { trained.min(DEFAULT_CTX_CAP) } else { ctx };
        if n_ctx < 2 {
            return Err(Error::InvalidArgument { reason: format!("context {n_ctx} is too small") });
        }
        let id = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let kv_bytes_per_token = kv_bytes_per_token(model.config(), SessionOptions::default().kv_dtype);
        Ok(Engine { model, tokenizer, template, id, generation, n_ctx, created, kv_bytes_per_token })
    }

    /// Experts per layer (0 for a dense layer), for the metrics.
    pub fn experts_per_layer(&self) -> impl Iterator<Item = usize> + '_ {
        let c = self.model.config();
        c.layers.iter().map(move |l| if l.moe { c.moe.n_experts } else { 0 })
    }

    /// The conversation rendered by the model's chat template, opening the assistant turn.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, Error> {
        let t = self
            .template
            .as_ref()
            .ok_or_else(|| Error::Unsupported { what: "this model has no usable chat template".into() })?;
        let piece = |id: Option<u32>| id.and_then(|i| self.tokenizer.token_piece(i)).unwrap_or_default();
        t.render(messages, true, &piece(self.tokenizer.bos_id()), &piece(self.tokenizer.eos_ids().first().copied()))
    }
}
