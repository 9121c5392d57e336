//! The grammar engine behind [`super`]: llguidance's token trie and parser factory over one
//! tokenizer's vocabulary (built once per model), and its matcher per generation (one token mask
//! per step). Its errors and panics become [`Error`]s here.

use super::vocab::token_bytes;
use super::ResponseFormat;
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::earley::SlicedBiasComputer;
use llguidance::toktrie::{ApproximateTokEnv, InferenceCapabilities, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Run an engine call, its error or panic (a hostile schema) becoming an Error made by `wrap`.
fn guarded<T, E: std::fmt::Display>(
    wrap: impl Fn(String) -> Error,
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        // The first line: the engine appends its state dump to some messages.
        Ok(Err(e)) => Err(wrap(e.to_string().lines().next().unwrap_or("").chars().take(500).collect())),
        Err(_) => Err(wrap("the grammar engine panicked".into())),
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument { reason }
}

/// A tokenizer's vocabulary as the grammar engine sees it: the token trie (ids → bytes, the
/// end-of-sequence ids) and the parser factory with its JSON slices. Built once per model.
pub struct Engine {
    factory: ParserFactory,
    vocab_size: usize,
    /// The end-of-sequence ids that end a document.
    eos: Vec<u32>,
}

impl Engine {
    /// The engine for `tokenizer`'s vocabulary; its end-of-sequence ids and `also` end a
    /// grammar. Unsupported when the tokenizer has no end-of-sequence id or a decoder kind that
    /// is not byte-level or sentencepiece.
    pub fn new(tokenizer: &Tokenizer, also: &[u32]) -> Result<Engine> {
        let mut eos = tokenizer.eos_ids().to_vec();
        eos.extend(also.iter().filter(|id| !tokenizer.eos_ids().contains(id)));
        Engine::from_token_bytes(token_bytes(tokenizer)?, &eos)
    }

    /// The engine over `words` [vocab] (each id's bytes; special tokens behind the 0xFF
    /// marker, empty for ids never allowed) whose `eos` ids end a document.
    pub fn from_token_bytes(words: Vec<Vec<u8>>, eos: &[u32]) -> Result<Engine> {
        let n = words.len();
        let eos: Vec<u32> = eos.iter().copied().filter(|&e| (e as usize) < n).collect();
        let Some(&first) = eos.first() else {
            return Err(Error::Unsupported { what: "grammars need a model with an end-of-sequence token".into() });
        };
        let unsupported = |what: String| Error::Unsupported { what: format!("grammar vocabulary: {what}") };
        let vocab_size = u32::try_from(n).map_err(|_| unsupported(format!("{n} ids do not fit in u32")))?;
        let factory = guarded(unsupported, || {
            let trie = TokTrie::from(&TokRxInfo::new(vocab_size, first), &words).with_eos_tokens(&eos);
            let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
            let mut f = ParserFactory::new(&env, InferenceCapabilities::default(), &SlicedBiasComputer::json_slices())
                .map_err(|e| e.to_string())?;
            f.quiet();
            Ok::<_, String>(f)
        })?;
        Ok(Engine { factory, vocab_size: n, eos })
    }

    /// Ids the engine knows (the tokenizer's vocabulary size).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The end-of-sequence ids that end a document.
    pub fn eos(&self) -> &[u32] {
        &self.eos
    }

    /// A matcher at the start of `format`'s language; InvalidArgument for a schema the engine
    /// refuses (the reason names what is wrong).
    pub fn matcher(&self, format: &ResponseFormat) -> Result<Matcher> {
        let grammar = match format {
            ResponseFormat::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            _ => TopLevelGrammar::from_json_schema(format.engine_schema()?),
        };
        guarded(invalid, || {
            let parser = self.factory.create_parser(grammar).map_err(|e| e.to_string())?;
            let m = Matcher::new(Ok(parser));
            match m.get_error() {
                Some(e) => Err(e),
                None => Ok(m),
            }
        })
        .map_err(|e| match e {
            Error::InvalidArgument { reason } => invalid(format!("response format: {reason}")),
            other => other,
        })
    }
}

/// The allowed ids of the matcher's next step ([vocab_size] bits, 32 per word); only the
/// end-of-sequence ids once the grammar is complete.
pub fn next_mask(m: &mut Matcher) -> Result<SimpleVob> {
    guarded(|e| invalid(format!("grammar: {e}")), || m.compute_mask_or_eos())
}

/// Advance the matcher by the sampled `token`. Once the document is complete (the matcher
/// stopped), only an end-of-sequence id is accepted, and it changes nothing.
pub fn commit(m: &mut Matcher, token: u32) -> Result<()> {
    let refuse = |e: String| invalid(format!("grammar: token {token} is not allowed: {e}"));
    if m.is_stopped() && !m.is_error() {
        let eos = m.tok_env().is_ok_and(|env| env.tok_trie().eos_tokens().contains(&token));
        return if eos { Ok(()) } else { Err(refuse("the document is complete".into())) };
    }
    guarded(refuse, || m.consume_token(token))
}

/// Whether the text so far is a complete sentence of the grammar.
pub fn accepting(m: &mut Matcher) -> bool {
    m.is_accepting().unwrap_or(false)
}
