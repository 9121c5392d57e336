//! Text generation on one session: prefill the prompt, then decide (`Decoder`) → callback →
//! decode until the generation finishes (token limit, end of sequence unless ignored, a stop
//! string, the callback, a full context). Callers never see any part of a stop string.
//!
//! LongRoPE models (Phi-MoE): the decode step that first takes the sequence past
//! `original_max_position_embeddings` re-encodes the whole sequence in one call (so every cached
//! key gets the long factors), as transformers' `PhimoeForCausalLM.prepare_inputs_for_generation`
//! does — when this generation knows the whole sequence (token prompt, empty session);
//! otherwise the cached keys keep the factors they were computed with.

use crate::decoder::{DecodeParams, Decoder, Finish};
use crate::error::Result;
use crate::forward::{forward, ForwardOptions, Input, LogitsMode, RoutingOptions};
use crate::model::Model;
use crate::session::Session;
use crate::tokenizer::Tokenizer;
use std::time::Instant;

/// Generation knobs: the decoding decisions and the routing of every step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerateParams {
    pub decode: DecodeParams,
    pub routing: RoutingOptions,
}

/// One piece reported to the callback.
#[derive(Clone, Debug)]
pub struct Piece<'a> {
    /// The sampled token; None for the final text-only piece that flushes held-back text.
    pub token: Option<u32>,
    /// Newly completed text (may be empty: an incomplete UTF-8 character or held-back text).
    pub text: &'a str,
}

/// What a generation produced.
#[derive(Clone, Debug)]
pub struct GenerateOutput {
    /// Generated ids (an end-of-sequence token that ended the generation included).
    pub tokens: Vec<u32>,
    /// Generated text (without a matched stop string).
    pub text: String,
    pub finish: Finish,
    pub prompt_tokens: usize,
    pub prompt_seconds: f64,
    pub gen_seconds: f64,
}

/// Generate from `prompt` (ids, fed as they are: no BOS or template added here).
/// `on_piece` returns false to stop. Text and stop strings need a tokenizer; without one, the
/// pieces carry empty text and `stop` must be empty.
pub fn generate(
    model: &Model,
    session: &mut Session,
    tokenizer: Option<&Tokenizer>,
    prompt: Input<'_>,
    params: &GenerateParams,
    mut on_piece: impl FnMut(&Piece<'_>) -> bool,
) -> Result<GenerateOutput> {
    let ids = match prompt {
        Input::Tokens(t) => t,
        Input::Embeddings(_) => &[],
    };
    let mut decoder = Decoder::new(&params.decode, &model.config().eos_token_ids, ids, tokenizer)?;
    // The position at which the whole sequence is re-encoded (LongRoPE), when it is known.
    let whole = matches!(prompt, Input::Tokens(_)) && session.position() == 0;
    let reencode_at = model.config().longrope_original().filter(|_| whole);
    let opts = ForwardOptions { logits: LogitsMode::Last, routing: params.routing };
    let t0 = Instant::now();
    forward(model, session, prompt, &opts)?;
    let prompt_tokens = session.position();
    let prompt_seconds = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let (mut tokens, mut text) = (Vec::new(), String::new());
    let mut finish = Finish::Length;
    while tokens.len() < params.decode.max_tokens {
        let step = decoder.next(tokenizer, session.logits())?;
        tokens.push(step.token);
        if step.finish == Some(Finish::Eos) {
            finish = Finish::Eos;
            break;
        }
        text.push_str(&step.text);
        let keep_going = on_piece(&Piece { token: Some(step.token), text: &step.text });
        // A stop string ends it before the callback's wish; the callback's before the limit.
        let why = match (step.finish, keep_going) {
            (Some(Finish::StopString), _) => Some(Finish::StopString),
            (_, false) => Some(Finish::Callback),
            (f, true) => f,
        };
        if let Some(why) = why {
            finish = why;
            break;
        }
        if session.position() >= session.n_ctx() {
            finish = Finish::ContextFull;
            break;
        }
        if reencode_at == Some(session.position()) {
            let all = [ids, &tokens[..]].concat();
            session.reset();
            forward(model, session, Input::Tokens(&all), &opts)?;
        } else {
            forward(model, session, Input::Tokens(&[step.token]), &opts)?;
        }
    }
    let (tail, finish) = decoder.finish(tokenizer, finish);
    if !tail.is_empty() {
        text.push_str(&tail);
        on_piece(&Piece { token: None, text: &tail });
    }
    Ok(GenerateOutput { tokens, text, finish, prompt_tokens, prompt_seconds, gen_seconds: t1.elapsed().as_secs_f64() })
}
