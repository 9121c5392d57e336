//! Text generation on one session: prefill the prompt, then sample → callback → decode until a
//! stop condition (max tokens, EOS unless ignored, a stop string, the callback, a full context).
//! Stop strings are matched on the detokenised text; text that might be the start of a stop
//! string is held back until it is known not to be, so callers never see a stop string.

use crate::error::{Error, Result};
use crate::forward::{forward, ForwardOptions, Input, LogitsMode, RoutingOptions};
use crate::model::Model;
use crate::sampler::{Sampler, SamplerParams};
use crate::session::Session;
use crate::stop::StopMatcher;
use crate::tokenizer::Tokenizer;
use std::time::Instant;

/// Generation knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampler: SamplerParams,
    /// Keep going past EOS tokens.
    pub ignore_eos: bool,
    /// Stop when the text contains one of these (the stop string itself is not returned).
    pub stop: Vec<String>,
    pub routing: RoutingOptions,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 128,
            sampler: SamplerParams::default(),
            ignore_eos: false,
            stop: Vec::new(),
            routing: RoutingOptions::default(),
        }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `max_tokens` reached.
    Length,
    /// An end-of-sequence token was sampled.
    Eos,
    /// A stop string appeared.
    StopString,
    /// The callback asked to stop.
    Callback,
    /// The context is full.
    ContextFull,
}

/// One step reported to the callback.
#[derive(Clone, Debug)]
pub struct Step<'a> {
    /// The sampled token; None for the final text-only step that flushes held-back text.
    pub token: Option<u32>,
    /// Newly completed text (may be empty: an incomplete UTF-8 character or held-back text).
    pub text: &'a str,
}

/// What a generation produced.
#[derive(Clone, Debug)]
pub struct GenerateOutput {
    /// Generated ids (EOS included when sampled).
    pub tokens: Vec<u32>,
    /// Generated text (without a matched stop string).
    pub text: String,
    pub stop: StopReason,
    pub prompt_tokens: usize,
    pub prompt_seconds: f64,
    pub gen_seconds: f64,
}

/// Generate from `prompt` (ids, fed as they are: no BOS or template added here).
/// `on_step` returns false to stop. Text and stop strings need a tokenizer; without one, the
/// steps carry empty text and `stop` must be empty.
pub fn generate(
    model: &Model,
    session: &mut Session,
    tokenizer: Option<&Tokenizer>,
    prompt: Input<'_>,
    params: &GenerateParams,
    mut on_step: impl FnMut(&Step<'_>) -> bool,
) -> Result<GenerateOutput> {
    if tokenizer.is_none() && !params.stop.is_empty() {
        return Err(Error::InvalidArgument { reason: "stop strings need the model's tokenizer".into() });
    }
    let mut sampler = Sampler::new(params.sampler.clone())?;
    let eos = model.config().eos_token_ids.clone();
    let mut history: Vec<u32> = match prompt {
        Input::Tokens(t) => t.to_vec(),
        Input::Embeddings(_) => Vec::new(),
    };
    let opts = ForwardOptions { logits: LogitsMode::Last, routing: params.routing };
    let t0 = Instant::now();
    forward(model, session, prompt, &opts)?;
    let prompt_tokens = session.position();
    let prompt_seconds = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut stream = tokenizer.map(|t| t.stream(true));
    let mut matcher = StopMatcher::new(params.stop.clone());
    let mut out_text = String::new();
    let mut tokens = Vec::new();
    let mut reason = StopReason::Length;
    let mut logits = Vec::new();
    // Ids the tokenizer cannot decode (a model vocabulary padded past the tokenizer's) are
    // never sampled.
    let decodable = tokenizer.map(|t| t.vocab_size()).unwrap_or(usize::MAX);
    while tokens.len() < params.max_tokens {
        logits.clear();
        logits.extend_from_slice(session.logits());
        if decodable < logits.len() {
            logits[decodable..].fill(f32::NEG_INFINITY);
        }
        let id = sampler.sample(&mut logits, &history)?;
        tokens.push(id);
        history.push(id);
        if !params.ignore_eos && eos.contains(&id) {
            reason = StopReason::Eos;
            break;
        }
        let piece = match stream.as_mut() {
            Some(s) => s.push(id)?,
            None => String::new(),
        };
        let (safe, hit) = matcher.push(&piece);
        out_text.push_str(&safe);
        let keep_going = on_step(&Step { token: Some(id), text: &safe });
        if hit {
            reason = StopReason::StopString;
            break;
        }
        if !keep_going {
            reason = StopReason::Callback;
            break;
        }
        if tokens.len() == params.max_tokens {
            break;
        }
        if session.position() >= session.n_ctx() {
            reason = StopReason::ContextFull;
            break;
        }
        forward(model, session, Input::Tokens(&[id]), &opts)?;
    }
    if reason != StopReason::StopString {
        let rest = stream.as_mut().map(|s| s.finish()).unwrap_or_default();
        let (mut tail, hit) = matcher.push(&rest);
        if hit {
            reason = StopReason::StopString;
        } else {
            tail.push_str(&matcher.flush());
        }
        if !tail.is_empty() {
            out_text.push_str(&tail);
            on_step(&Step { token: None, text: &tail });
        }
    }
    Ok(GenerateOutput {
        tokens,
        text: out_text,
        stop: reason,
        prompt_tokens,
        prompt_seconds,
        gen_seconds: t1.elapsed().as_secs_f64(),
    })
}
