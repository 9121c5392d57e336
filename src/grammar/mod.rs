//! Structured output: a response format (any JSON object, or JSON matching a JSON Schema)
//! compiled against a tokenizer's vocabulary into a [`Grammar`] whose token mask, applied to
//! each step's logits before sampling, lets only tokens that keep the text a prefix of a valid
//! document through — and, once the document is complete, only the end-of-sequence ids. So a
//! generation that ends on end-of-sequence is always a complete, valid document.
//!
//! The engine is llguidance (feature `grammar`, on by default): [`GrammarVocab`] holds its token
//! trie, built once per model ([`VocabCache`]), and each [`Grammar`] a matcher. Without the
//! feature the types still exist and [`GrammarVocab::new`] returns [`Error::Unsupported`].
//!
//! Output form: JSON with `", "` between items, `": "` between key and value and no other
//! whitespace outside strings (llguidance's `x-guidance` options are set by this module).
//!
//! Layout: `vocab.rs` — the bytes of every token id; `engine.rs` — the llguidance calls.

// Without the engine, the stand-in methods cannot be reached (no GrammarVocab exists).
#![cfg_attr(not(feature = "grammar"), allow(unused_variables, unreachable_code, dead_code))]

#[cfg(feature = "grammar")]
mod engine;
pub mod vocab;

use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// JSON valid against this JSON Schema (OpenAI's `json_schema`; `$ref`s must be local,
    /// `#/...`).
    JsonSchema(Value),
    /// A grammar in llguidance's Lark syntax (JSON Schemas inside it with `%json {…}`, special
    /// tokens by id as `<[id]>`): how [`crate::chat_output::tool_grammar`] forces a model's
    /// tool-call syntax.
    Lark(String),
}

/// Most bytes of a JSON Schema's text.
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;

impl ResponseFormat {
    /// A JSON Schema from its text: InvalidArgument when it is not JSON, not an object or a
    /// boolean, or longer than [`MAX_SCHEMA_BYTES`].
    pub fn json_schema_text(text: &str) -> Result<ResponseFormat> {
        if text.len() > MAX_SCHEMA_BYTES {
            return Err(Error::InvalidArgument {
                reason: format!("the JSON Schema is longer than {MAX_SCHEMA_BYTES} bytes"),
            });
        }
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::InvalidArgument { reason: format!("the JSON Schema is not valid JSON: {e}") })?;
        Ok(ResponseFormat::JsonSchema(v))
    }

    /// The schema handed to the engine: `{"type": "object"}` for any object, the output-form
    /// options in `x-guidance`. InvalidArgument for a schema that is neither an object nor a
    /// boolean, or a Lark grammar.
    pub fn engine_schema(&self) -> Result<Value> {
        let mut schema = match self {
            ResponseFormat::Lark(_) => {
                return Err(Error::InvalidArgument { reason: "a Lark grammar is not a JSON Schema".into() })
            }
            ResponseFormat::JsonObject => json!({"type": "object"}),
            ResponseFormat::JsonSchema(Value::Bool(true)) => json!({}),
            ResponseFormat::JsonSchema(Value::Bool(false)) => {
                return Err(Error::InvalidArgument { reason: "the JSON Schema `false` accepts no document".into() })
            }
            ResponseFormat::JsonSchema(v @ Value::Object(_)) => v.clone(),
            ResponseFormat::JsonSchema(_) => {
                return Err(Error::InvalidArgument { reason: "a JSON Schema must be an object or a boolean".into() })
            }
        };
        if let Value::Object(o) = &mut schema {
            o.insert(
                "x-guidance".into(),
                json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
            );
        }
        Ok(schema)
    }
}

#[cfg(feature = "grammar")]
type EngineImpl = engine::Engine;
#[cfg(feature = "grammar")]
type MatcherImpl = llguidance::Matcher;
#[cfg(not(feature = "grammar"))]
type EngineImpl = std::convert::Infallible;
#[cfg(not(feature = "grammar"))]
type MatcherImpl = std::convert::Infallible;

/// A tokenizer's vocabulary prepared for grammars (the token trie). Costly to build (a few
/// hundred milliseconds for 150k tokens): build it once per model, see [`VocabCache`].
pub struct GrammarVocab {
    engine: EngineImpl,
}

impl GrammarVocab {
    /// Prepare `tokenizer`'s vocabulary. Unsupported without the `grammar` feature, for a
    /// tokenizer without end-of-sequence id, or with a decoder that is neither byte-level nor
    /// sentencepiece.
    #[cfg(feature = "grammar")]
    pub fn new(tokenizer: &crate::tokenizer::Tokenizer) -> Result<GrammarVocab> {
        GrammarVocab::ending_with(tokenizer, &[])
    }

    /// [`GrammarVocab::new`] whose documents may also end with the ids `also` (a chat
    /// template's end-of-turn token).
    #[cfg(feature = "grammar")]
    pub fn ending_with(tokenizer: &crate::tokenizer::Tokenizer, also: &[u32]) -> Result<GrammarVocab> {
        Ok(GrammarVocab { engine: engine::Engine::new(tokenizer, also)? })
    }

    /// A vocabulary from each id's bytes (`words` [vocab]: special tokens behind
    /// [`vocab::SPECIAL_MARKER`], empty for ids never allowed) whose `eos` ids end a document.
    #[cfg(feature = "grammar")]
    pub fn from_token_bytes(words: Vec<Vec<u8>>, eos: &[u32]) -> Result<GrammarVocab> {
        Ok(GrammarVocab { engine: engine::Engine::from_token_bytes(words, eos)? })
    }

    /// Unsupported: this build lacks the `grammar` feature.
    #[cfg(not(feature = "grammar"))]
    pub fn new(_tokenizer: &crate::tokenizer::Tokenizer) -> Result<GrammarVocab> {
        Err(Error::Unsupported { what: "grammars (this build lacks the `grammar` feature)".into() })
    }

    /// Unsupported: this build lacks the `grammar` feature.
    #[cfg(not(feature = "grammar"))]
    pub fn ending_with(_tokenizer: &crate::tokenizer::Tokenizer, _also: &[u32]) -> Result<GrammarVocab> {
        Err(Error::Unsupported { what: "grammars (this build lacks the `grammar` feature)".into() })
    }

    /// Unsupported: this build lacks the `grammar` feature.
    #[cfg(not(feature = "grammar"))]
    pub fn from_token_bytes(_words: Vec<Vec<u8>>, _eos: &[u32]) -> Result<GrammarVocab> {
        Err(Error::Unsupported { what: "grammars (this build lacks the `grammar` feature)".into() })
    }

    /// Compile `format` into a grammar at its start. InvalidArgument (naming what is wrong) for
    /// a schema the engine cannot use.
    pub fn compile(self: &Arc<Self>, format: &ResponseFormat) -> Result<Grammar> {
        #[cfg(feature = "grammar")]
        let matcher = self.engine.matcher(format)?;
        #[cfg(not(feature = "grammar"))]
        let matcher = match self.engine {};
        Ok(Grammar { vocab: self.clone(), format: Arc::new(format.clone()), matcher, mask: Vec::new() })
    }
}

/// A model's [`GrammarVocab`], built on first use and kept (or the reason it cannot be built).
#[derive(Default)]
pub struct VocabCache(OnceLock<std::result::Result<Arc<GrammarVocab>, String>>);

impl VocabCache {
    /// The vocabulary of `tokenizer` (the same tokenizer on every call), built on the first call;
    /// Unsupported (every time) when it cannot be built.
    pub fn get(&self, tokenizer: &crate::tokenizer::Tokenizer) -> Result<Arc<GrammarVocab>> {
        self.get_ending_with(tokenizer, &[])
    }

    /// [`VocabCache::get`] with [`GrammarVocab::ending_with`]`(tokenizer, also)` (the same
    /// `also` on every call).
    pub fn get_ending_with(&self, tokenizer: &crate::tokenizer::Tokenizer, also: &[u32]) -> Result<Arc<GrammarVocab>> {
        let built = self.0.get_or_init(|| {
            GrammarVocab::ending_with(tokenizer, also).map(Arc::new).map_err(|e| match e {
                Error::Unsupported { what } => what,
                other => other.to_string(),
            })
        });
        built.clone().map_err(|what| Error::Unsupported { what })
    }
}

/// One generation's grammar state: which tokens may come next. Cloning gives an independent
/// state at the same point (a compiled grammar is cloned once per generation).
#[derive(Clone)]
pub struct Grammar {
    vocab: Arc<GrammarVocab>,
    format: Arc<ResponseFormat>,
    matcher: MatcherImpl,
    /// [ceil(vocab / 32)] the last step's allowed ids, 32 per word (bit i of word w: id 32w + i).
    mask: Vec<u32>,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar").field("format", &self.format).finish_non_exhaustive()
    }
}

impl PartialEq for Grammar {
    /// The same format over the same vocabulary (not the same point in it).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.vocab, &other.vocab) && self.format == other.format
    }
}

impl Grammar {
    /// The format this grammar was compiled from.
    pub fn format(&self) -> &ResponseFormat {
        &self.format
    }

    /// The ids allowed next, as bits ([ceil(vocab / 32)] words; ids past the vocabulary are
    /// never allowed). Only end-of-sequence ids once the document is complete.
    pub fn allowed(&mut self) -> Result<&[u32]> {
        #[cfg(feature = "grammar")]
        {
            let vob = engine::next_mask(&mut self.matcher)?;
            self.mask.clear();
            self.mask.extend_from_slice(vob.as_slice());
        }
        Ok(&self.mask)
    }

    /// Advance past the sampled `token` (which [`Grammar::allowed`] allowed).
    pub fn commit(&mut self, token: u32) -> Result<()> {
        #[cfg(feature = "grammar")]
        return engine::commit(&mut self.matcher, token);
        #[cfg(not(feature = "grammar"))]
        match self.matcher {}
    }

    /// Whether the text so far is a complete document.
    pub fn is_complete(&mut self) -> bool {
        #[cfg(feature = "grammar")]
        return engine::accepting(&mut self.matcher);
        #[cfg(not(feature = "grammar"))]
        match self.matcher {}
    }

    /// Whether `token` is one of the end-of-sequence ids that end a complete document (the
    /// tokenizer's; the model's own list may be empty).
    pub fn is_end_of_sequence(&self, token: u32) -> bool {
        #[cfg(feature = "grammar")]
        return self.vocab.engine.eos().contains(&token);
        #[cfg(not(feature = "grammar"))]
        match self.vocab.engine {}
    }

    /// Ids the grammar's vocabulary has.
    pub fn vocab_size(&self) -> usize {
        #[cfg(feature = "grammar")]
        return self.vocab.engine.vocab_size();
        #[cfg(not(feature = "grammar"))]
        match self.vocab.engine {}
    }
}
