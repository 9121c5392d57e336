//! Text ⇄ token ids for a model. Owns the HuggingFace `tokenizer.json` pipeline (through the
//! `tokenizers` crate, feature `tokenizer`), the model's special tokens, incremental decoding of
//! generated ids ([`StreamDecoder`]) and chat templates ([`ChatTemplate`], feature
//! `chat-template`). It converts; choosing tokens is the engine's job.
//!
//! Without the feature the types still exist and every constructor returns
//! [`Error::Unsupported`], so the rest of the crate compiles either way.

mod chat;
mod prompt;
mod stream;

pub use chat::{ChatMessage, ChatTemplate, RenderArgs, MAX_RENDER_FUEL, MAX_RENDER_OUTPUT};
pub use prompt::{encode_chat, encode_chat_with, MessageSpecials};
pub use stream::{DecodeState, StreamDecoder};

use crate::error::{Error, Result};
use crate::model::{Config, Model};
use serde_json::Value;

/// A tokenizer.json of one token ("a"), BPE: what `prepare_thread` runs once per thread.
const ONE_TOKEN_BPE: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,
"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,
"ignore_merges":false,"vocab":{"a":0},"merges":[]}}"#;

/// Create this thread's thread-locals of the tokenizer and template libraries now, at thread
/// start (why: `threads::prepare_thread`): a one-token BPE encodes (the `tokenizers` crate's
/// per-thread BPE cache) and a one-character template compiles (minijinja's compile state).
/// Without the features this does nothing.
pub fn prepare_thread() {
    if let Ok(b) = backend::Backend::load(ONE_TOKEN_BPE) {
        let _ = b.encode("a", false);
    }
    let _ = ChatTemplate::new("a");
}

/// Metadata key under which the converter stores tokenizer_config.json.
const TOKENIZER_CONFIG_KEY: &str = "tokenizer_config";

/// A loaded tokenizer with the model's special tokens. Immutable; `Send + Sync`.
pub struct Tokenizer {
    backend: backend::Backend,
    /// One past the largest id of the vocabulary including added tokens.
    vocab_size: usize,
    /// Ids of added tokens flagged `special`, sorted.
    special: Vec<u32>,
    bos: Option<u32>,
    eos: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

impl Tokenizer {
    /// From the file's tokenizer.json text, optional tokenizer_config.json text, and the model
    /// config. bos/eos ids come from the config, else from tokenizer_config's `bos_token` /
    /// `eos_token`. What `encode(.., add_special_tokens = true)` adds is tokenizer.json's
    /// post-processor alone: transformers 5 ignores tokenizer_config's `add_bos_token` /
    /// `add_eos_token` whenever a tokenizer.json exists.
    pub fn from_json(tokenizer_json: &str, tokenizer_config: Option<&str>, config: &Config) -> Result<Tokenizer> {
        let tc: Option<Value> = tokenizer_config
            .map(|text| {
                serde_json::from_str(text).map_err(|e| Error::Metadata {
                    key: TOKENIZER_CONFIG_KEY.into(),
                    reason: format!("not valid JSON: {e}"),
                })
            })
            .transpose()?;
        let backend = backend::Backend::load(tokenizer_json)?;
        let lookup = |key: &str| tc.as_ref().and_then(|tc| special_token(tc, key)).and_then(|t| backend.token_id(&t));
        let bos = config.bos_token_id.or_else(|| lookup("bos_token"));
        let mut eos = config.eos_token_ids.clone();
        if eos.is_empty() {
            eos.extend(lookup("eos_token"));
        }
        let vocab_size = backend.vocab_size();
        check_fits(&backend, vocab_size, bos, &eos, config)?;
        let special = backend.special_ids();
        Ok(Tokenizer { backend, vocab_size, special, bos, eos })
    }

    /// The tokenizer stored in an opened model file ([`Error::Unsupported`] when it has none).
    pub fn from_model(model: &Model) -> Result<Tokenizer> {
        let json = model.tokenizer_json().ok_or_else(|| Error::Unsupported {
            what: "this model file carries no tokenizer (tokenizer.json)".into(),
        })?;
        let tc = model
            .meta(TOKENIZER_CONFIG_KEY)
            .map(|b| {
                std::str::from_utf8(b)
                    .map_err(|_| Error::Metadata { key: TOKENIZER_CONFIG_KEY.into(), reason: "not UTF-8".into() })
            })
            .transpose()?;
        Self::from_json(json, tc, model.config())
    }

    /// Token ids of `text`. `add_special_tokens` applies the post-processor (e.g. Llama's `<s>`);
    /// special-token strings inside `text` always map to their ids.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.backend.encode(text, add_special_tokens)
    }

    /// Text of `ids`; an id outside the vocabulary is an error.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(self.unknown_id(id));
        }
        self.backend.decode(ids, skip_special_tokens)
    }

    /// The raw vocabulary string of `id` ('▁Hello', 'Ġworld', '<0xE2>'), for traces.
    pub fn token_piece(&self, id: u32) -> Option<String> {
        self.backend.token_piece(id)
    }

    /// Human-readable text of one token as it reads inside a sequence (with its leading space,
    /// which a sentencepiece decoder strips from the first token; lossy for partial UTF-8). Empty
    /// for unknown ids. For --debug-routing and traces.
    pub fn token_text(&self, id: u32) -> String {
        // The second of two copies decodes as it would mid-sequence.
        let (Ok(one), Ok(two)) = (self.decode(&[id], false), self.decode(&[id, id], false)) else {
            return String::new();
        };
        match two.strip_prefix(one.as_str()) {
            Some(second) if !second.is_empty() => second.to_string(),
            _ => one,
        }
    }

    /// Size of the tokenizer's id space including added tokens (may be below the model's
    /// padded `vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Beginning-of-sequence id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// Ids that end generation.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    /// Whether `id` is an added token flagged special (skipped by `decode(.., true)`).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.binary_search(&id).is_ok()
    }

    /// Token ids of `text` with no special token recognised: a special token's string (e.g.
    /// `<|im_end|>`) becomes the ids of its characters, as any text would. For text that comes
    /// from a user (see [`encode_chat`]).
    pub fn encode_as_text(&self, text: &str) -> Result<Vec<u32>> {
        self.backend.encode_as_text(text)
    }

    /// The strings of the special tokens (`<|im_start|>`, `</s>`, ...), longest first.
    pub fn special_strings(&self) -> Vec<String> {
        let mut v: Vec<String> = self.special.iter().filter_map(|&id| self.token_piece(id)).collect();
        v.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        v.dedup();
        v
    }

    /// Id of a token string (added tokens first, then the vocabulary).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.backend.token_id(token)
    }

    /// The tokenizer.json `decoder` section (how pieces become text: ByteLevel, a sentencepiece
    /// Replace / ByteFallback sequence, ...), as JSON; None when it has none.
    pub fn decoder_json(&self) -> Option<Value> {
        self.backend.decoder_json()
    }

    /// Sorted ids of every added token (special or not), whose piece is its literal text.
    pub fn added_ids(&self) -> Vec<u32> {
        self.backend.added_ids()
    }

    /// An incremental decoder for generated ids.
    pub fn stream(&self, skip_special_tokens: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special_tokens)
    }

    fn unknown_id(&self, id: u32) -> Error {
        Error::InvalidArgument {
            reason: format!("token id {id} is outside the tokenizer's vocabulary of {} ids", self.vocab_size),
        }
    }
}

/// A tokenizer must fit the model it serves: every id it can produce (vocabulary and added
/// tokens) inside the model's vocabulary — an id past it would reach the forward pass from any
/// prompt holding that token's text — and the bos / eos ids known to it.
fn check_fits(backend: &backend::Backend, vocab_size: usize, bos: Option<u32>, eos: &[u32], c: &Config) -> Result<()> {
    let bad = |reason: String| Error::Metadata { key: "tokenizer".into(), reason };
    if vocab_size > c.vocab_size {
        let id = vocab_size - 1;
        let piece: String = backend.token_piece(id as u32).unwrap_or_default().chars().take(64).collect();
        return Err(bad(format!(
            "token {piece:?} has id {id}, outside the model's vocabulary of {} ids",
            c.vocab_size
        )));
    }
    match bos.iter().chain(eos).find(|&&id| backend.token_piece(id).is_none()) {
        Some(id) => Err(bad(format!("the model's special token id {id} (bos / eos) is not in the tokenizer"))),
        None => Ok(()),
    }
}

/// A special token entry of tokenizer_config.json: a string or `{"content": "..."}`.
fn special_token(tc: &Value, key: &str) -> Option<String> {
    match tc.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(String::from),
        _ => None,
    }
}

#[cfg(feature = "tokenizer")]
mod backend {
    //! The `tokenizers` crate behind a small surface; its errors and panics become [`Error`]s.

    use crate::error::{Error, Result};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::str::FromStr;

    pub(super) struct Backend(tokenizers::Tokenizer, std::sync::OnceLock<tokenizers::Tokenizer>);

    /// Run a `tokenizers` call, turning its error or panic (hostile tokenizer.json) into an Error.
    fn guarded<T>(what: &str, f: impl FnOnce() -> tokenizers::Result<T>) -> Result<T> {
        let reason = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => format!("{what}: {e}"),
            Err(_) => format!("{what}: the tokenizers crate panicked"),
        };
        Err(Error::Metadata { key: "tokenizer".into(), reason })
    }

    impl Backend {
        pub(super) fn load(json: &str) -> Result<Backend> {
            guarded("cannot load tokenizer.json", || tokenizers::Tokenizer::from_str(json))
                .map(|t| Backend(t, std::sync::OnceLock::new()))
        }

        pub(super) fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
            guarded("encode", || self.0.encode_fast(text, add_special_tokens)).map(|e| e.get_ids().to_vec())
        }

        /// `encode(text, false)` with special-token strings read as ordinary text (a twin
        /// tokenizer, built on first use).
        pub(super) fn encode_as_text(&self, text: &str) -> Result<Vec<u32>> {
            let twin = self.1.get_or_init(|| {
                let mut t = self.0.clone();
                t.set_encode_special_tokens(true);
                t
            });
            guarded("encode", || twin.encode_fast(text, false)).map(|e| e.get_ids().to_vec())
        }

        pub(super) fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
            guarded("decode", || self.0.decode(ids, skip_special_tokens))
        }

        pub(super) fn token_piece(&self, id: u32) -> Option<String> {
            self.0.id_to_token(id)
        }

        pub(super) fn token_id(&self, token: &str) -> Option<u32> {
            self.0.token_to_id(token)
        }

        /// One past the largest id (vocabulary and added tokens).
        pub(super) fn vocab_size(&self) -> usize {
            let added = self.0.get_added_tokens_decoder().keys().copied().max();
            let vocab = self.0.get_vocab(false).values().copied().max();
            added.max(vocab).map_or(0, |m| m as usize + 1)
        }

        pub(super) fn decoder_json(&self) -> Option<serde_json::Value> {
            self.0.get_decoder().and_then(|d| serde_json::to_value(d).ok())
        }

        /// Sorted ids of every added token.
        pub(super) fn added_ids(&self) -> Vec<u32> {
            let mut ids: Vec<u32> = self.0.get_added_tokens_decoder().keys().copied().collect();
            ids.sort_unstable();
            ids
        }

        /// Sorted ids of the added tokens flagged special.
        pub(super) fn special_ids(&self) -> Vec<u32> {
            let mut ids: Vec<u32> =
                self.0.get_added_tokens_decoder().iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
            ids.sort_unstable();
            ids
        }
    }
}

#[cfg(not(feature = "tokenizer"))]
mod backend {
    //! Stand-in without the `tokenizer` feature: `load` fails, so no value ever exists.

    use crate::error::{Error, Result};

    pub(super) enum Backend {}

    impl Backend {
        pub(super) fn load(_json: &str) -> Result<Backend> {
            Err(Error::Unsupported { what: "tokenizers (this build lacks the `tokenizer` feature)".into() })
        }

        pub(super) fn encode(&self, _text: &str, _add_special_tokens: bool) -> Result<Vec<u32>> {
            match *self {}
        }

        pub(super) fn encode_as_text(&self, _text: &str) -> Result<Vec<u32>> {
            match *self {}
        }

        pub(super) fn decode(&self, _ids: &[u32], _skip_special_tokens: bool) -> Result<String> {
            match *self {}
        }

        pub(super) fn token_piece(&self, _id: u32) -> Option<String> {
            match *self {}
        }

        pub(super) fn token_id(&self, _token: &str) -> Option<u32> {
            match *self {}
        }

        pub(super) fn vocab_size(&self) -> usize {
            match *self {}
        }

        pub(super) fn special_ids(&self) -> Vec<u32> {
            match *self {}
        }

        pub(super) fn decoder_json(&self) -> Option<serde_json::Value> {
            match *self {}
        }

        pub(super) fn added_ids(&self) -> Vec<u32> {
            match *self {}
        }
    }
}
