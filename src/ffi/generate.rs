//! `colibri_generate`: generate on a session with generation parameters (sampling, token limit,
//! end-of-sequence handling, stop strings) and a per-token callback, and say why it ended.
//! Text pieces never split a UTF-8 character and never contain any part of a stop string.

use super::grammar::{colibri_grammar, for_generation};
use super::handle::*;
use super::panic::{guard, guard_or, Failure};
use super::session::{aborted, colibri_session};
use super::status::*;
use crate::decoder::{DecodeParams, Finish};
use crate::forward::Input;
use crate::generate::{generate, GenerateParams};
use crate::sampler::SamplerParams;
use std::ffi::{c_char, c_void};

/// Per-token callback: the sampled id and the text it completes (`text_len` bytes, not
/// NUL-terminated, valid during the call only; may be 0). A last call with token -1 may flush
/// held-back text at the end (its return value is ignored). Return 0 to continue, non-zero to
/// stop generating (finish reason COLIBRI_FINISH_CALLBACK): the same convention as the Python
/// binding (a truthy return stops) and the Go binding (`true` stops).
#[allow(non_camel_case_types)]
pub type colibri_token_callback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, token: i32, text: *const c_char, text_len: usize) -> i32>;

/// Why `colibri_generate` ended (`colibri_generate_result.finish_reason`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_finish_reason = i32;
/// `max_tokens` (or `tokens_cap`) tokens were generated.
pub const COLIBRI_FINISH_LENGTH: colibri_finish_reason = 0;
/// A stop string appeared (it is not delivered).
pub const COLIBRI_FINISH_STOP: colibri_finish_reason = 1;
/// An end-of-sequence token was sampled (it is not delivered).
pub const COLIBRI_FINISH_EOS: colibri_finish_reason = 2;
/// The session's context is full.
pub const COLIBRI_FINISH_CONTEXT_FULL: colibri_finish_reason = 3;
/// The callback returned non-zero.
pub const COLIBRI_FINISH_CALLBACK: colibri_finish_reason = 4;

/// Sampling, limits and stop strings of one generation. Fill with `colibri_generate_params_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_generate_params {
    /// sizeof(colibri_generate_params).
    pub struct_size: u32,
    /// Softmax temperature, finite and >= 0; 0 = greedy (default 0.8).
    pub temperature: f32,
    /// Keep the top_k most likely tokens; 0 = off (default 40).
    pub top_k: i32,
    /// Nucleus mass in (0, 1]; 1 = off (default 0.95).
    pub top_p: f32,
    /// Drop tokens below min_p · p_max, in [0, 1]; 0 = off (default 0.05).
    pub min_p: f32,
    /// Repetition penalty (llama.cpp's repeat_penalty): the logit of every distinct recent id
    /// is divided by it when positive, multiplied by it otherwise. Finite and > 0; 1 = off
    /// (default 1); 1.1–1.3 are usual values, < 1 favours repeats.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every id that occurs among the recent ids (OpenAI's
    /// presence_penalty). Any finite value, negative favours repeats; 0 = off (default 0);
    /// OpenAI accepts -2..2.
    pub presence_penalty: f32,
    /// Subtracted from the logit of an id once per occurrence among the recent ids (OpenAI's
    /// frequency_penalty). Any finite value; 0 = off (default 0); OpenAI accepts -2..2.
    pub frequency_penalty: f32,
    /// The recent ids the three penalties look at: the last penalty_last_n ids of this call's
    /// prompt followed by the ids generated so far (ids cached by earlier calls are not seen).
    /// At least 0; 0 turns every penalty off (default 64; llama.cpp's -1 = the whole context
    /// is not accepted: give the context size).
    pub penalty_last_n: i32,
    /// Most tokens to generate (default 128).
    pub max_tokens: i32,
    /// 1: keep going past end-of-sequence tokens (default 0).
    pub ignore_eos: i32,
    /// 0 (named so that the struct has no hidden padding).
    pub reserved: i32,
    /// Seed of the sampler's random numbers. Default COLIBRI_SEED_RANDOM: a fresh seed per call,
    /// so two calls sample different text; any other value (0 included) repeats exactly.
    pub seed: u64,
    /// `n_stop` NUL-terminated UTF-8 stop strings, read during the call only (NULL when
    /// n_stop is 0). Generation ends when the text contains one; it is not delivered. They need
    /// the model's tokenizer (COLIBRI_STATUS_UNSUPPORTED without one).
    pub stop: *const *const c_char,
    pub n_stop: usize,
    /// Constrain the output to this grammar (colibri_grammar_new, made for the session's
    /// model; read during the call only), NULL for none (default). It cannot be combined with
    /// ignore_eos (COLIBRI_STATUS_INVALID_ARGUMENT). The generation then ends on
    /// end-of-sequence (COLIBRI_FINISH_EOS) only with a complete, valid document; a stop string
    /// still ends it (COLIBRI_FINISH_STOP), the document then incomplete.
    pub grammar: *const colibri_grammar,
}

impl Versioned for colibri_generate_params {
    /// ABI 1 before `grammar` (72 bytes on 64-bit targets), then with it.
    const SIZES: &'static [usize] =
        &[std::mem::offset_of!(colibri_generate_params, grammar), std::mem::size_of::<colibri_generate_params>()];
}

impl Default for colibri_generate_params {
    fn default() -> Self {
        let d = DecodeParams::default();
        let s = d.sampler;
        colibri_generate_params {
            struct_size: std::mem::size_of::<Self>() as u32,
            temperature: s.temperature,
            top_k: s.top_k as i32,
            top_p: s.top_p,
            min_p: s.min_p,
            repetition_penalty: s.repetition_penalty,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            penalty_last_n: s.penalty_last_n as i32,
            max_tokens: d.max_tokens as i32,
            ignore_eos: i32::from(d.ignore_eos),
            reserved: 0,
            seed: s.seed,
            stop: std::ptr::null(),
            n_stop: 0,
            grammar: std::ptr::null(),
        }
    }
}

/// What `colibri_generate` did. Set `struct_size` before the call
/// (`colibri_generate_result_init` does); the library fills the fields the caller's size has.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_generate_result {
    /// sizeof(colibri_generate_result).
    pub struct_size: u32,
    /// Why generation ended: a COLIBRI_FINISH_* value.
    pub finish_reason: colibri_finish_reason,
    /// Tokens delivered (to the callback, and to tokens_out when given). An end-of-sequence
    /// token that ended the generation is not delivered.
    pub n_tokens: usize,
    /// Tokens in the session's KV cache when generation ended. After COLIBRI_FINISH_EOS every
    /// delivered token is in it (the end-of-sequence token is not); after any other reason the
    /// last delivered token is not in it yet: feed it to continue.
    pub n_cached: usize,
}

impl Versioned for colibri_generate_result {
    const SIZES: &'static [usize] = &[std::mem::size_of::<colibri_generate_result>()];
}

impl Default for colibri_generate_result {
    fn default() -> Self {
        colibri_generate_result {
            struct_size: std::mem::size_of::<Self>() as u32,
            finish_reason: COLIBRI_FINISH_LENGTH,
            n_tokens: 0,
            n_cached: 0,
        }
    }
}

fn nonneg(v: i32, what: &str) -> Result<usize, Failure> {
    usize::try_from(v).map_err(|_| Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("{what} {v} is negative")))
}

/// The finish reason's C number.
fn finish_reason(f: Finish) -> colibri_finish_reason {
    match f {
        Finish::Length => COLIBRI_FINISH_LENGTH,
        Finish::StopString => COLIBRI_FINISH_STOP,
        Finish::Eos => COLIBRI_FINISH_EOS,
        Finish::ContextFull => COLIBRI_FINISH_CONTEXT_FULL,
        Finish::Callback => COLIBRI_FINISH_CALLBACK,
    }
}

/// The library's parameters from the C struct (stop strings copied).
fn decode_params(p: &colibri_generate_params) -> Result<DecodeParams, Failure> {
    let stops = slice(p.stop, p.n_stop, "params.stop")?;
    let stop = stops
        .iter()
        .enumerate()
        .map(|(i, &s)| c_str(s, &format!("params.stop[{i}]")).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(DecodeParams {
        max_tokens: nonneg(p.max_tokens, "max_tokens")?,
        sampler: SamplerParams {
            temperature: p.temperature,
            top_k: nonneg(p.top_k, "top_k")?,
            top_p: p.top_p,
            min_p: p.min_p,
            repetition_penalty: p.repetition_penalty,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            penalty_last_n: nonneg(p.penalty_last_n, "penalty_last_n")?,
            seed: p.seed,
        },
        ignore_eos: p.ignore_eos != 0,
        stop,
        grammar: None,
        end_ids: Vec::new(),
    })
}

/// Fill `params` with the defaults. Thread-safe.
///
/// # Safety
/// `params` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_generate_params_init(params: *mut colibri_generate_params) {
    guard_or((), || {
        if !params.is_null() {
            put(params, colibri_generate_params::default());
        }
    })
}

/// `colibri_generate_params_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_generate_params)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_generate_params_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_generate_params_init_sized(
    p: *mut colibri_generate_params,
    size: usize,
) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_generate_params"))
}

/// Fill `result` with its struct_size set (call before colibri_generate). Thread-safe.
///
/// # Safety
/// `result` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_generate_result_init(result: *mut colibri_generate_result) {
    guard_or((), || {
        if !result.is_null() {
            put(result, colibri_generate_result::default());
        }
    })
}

/// `colibri_generate_result_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_generate_result)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_generate_result_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_generate_result_init_sized(
    p: *mut colibri_generate_result,
    size: usize,
) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_generate_result"))
}

/// Feed `n_prompt` (>= 1) ids (as given: no BOS or template is added), appending them to the
/// session's KV cache after what it already holds, and generate. Each token goes to `callback`
/// (may be NULL) and, when `tokens_out` is not NULL, into `tokens_out` — generation then also
/// ends (COLIBRI_FINISH_LENGTH) when `tokens_cap` tokens are stored. `result` (may be NULL;
/// its struct_size set by the caller) says why generation ended and how many tokens were
/// delivered.
///
/// The cache. Generation appends too: every delivered token but the last is fed (a token is
/// fed when the next one is sampled), so after the call the cache holds what it held, the
/// prompt, and the delivered tokens except the last one — which is not in the cache yet
/// (`result.n_cached` counts what is; after COLIBRI_FINISH_EOS every delivered token is in it
/// and the end-of-sequence token is not). To continue the same sequence, call again with that
/// last token as the prompt (plus any new ids after it); to start a new one, call
/// colibri_session_reset first (or colibri_session_truncate to keep a shared prefix). The
/// sampler, its seed and the penalty window start afresh in every call.
///
/// A registered routing-trace callback is called after the generation; if it returns
/// COLIBRI_ROUTE_ABORT the call returns COLIBRI_STATUS_ABORTED and the session is as before the
/// call (the tokens already delivered to `callback` and `tokens_out` stand). `params` may be
/// NULL for the defaults. The session is busy until the call returns: a call on it from a
/// callback or another thread meanwhile gets COLIBRI_STATUS_BUSY.
///
/// # Safety
/// `prompt` readable for n_prompt ints; `tokens_out` NULL or writable for tokens_cap ints;
/// `params` NULL or a valid struct whose stop strings are readable; `result` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn colibri_generate(
    session: *mut colibri_session,
    prompt: *const i32,
    n_prompt: usize,
    params: *const colibri_generate_params,
    callback: colibri_token_callback,
    userdata: *mut c_void,
    tokens_out: *mut i32,
    tokens_cap: usize,
    result: *mut colibri_generate_result,
) -> colibri_status {
    guard(|| {
        let mut s = colibri_session::take(session, "session")?;
        let result_size = versioned_size(result, "result")?;
        let ids = token_ids(prompt, n_prompt, "prompt")?;
        let p = super::handle::params(params, colibri_generate_params::default(), "params")?;
        let mut decode = decode_params(&p)?;
        let mut out: Option<&mut [i32]> = None;
        if !tokens_out.is_null() {
            decode.max_tokens = decode.max_tokens.min(tokens_cap);
            out = Some(slice_mut(tokens_out, tokens_cap, "tokens_out")?);
        }
        if !decode.stop.is_empty() && s.tokenizer.is_none() {
            return Err(Failure::new(COLIBRI_STATUS_UNSUPPORTED, "stop strings need the model's tokenizer"));
        }
        decode.grammar = for_generation(p.grammar, &s.model)?;
        let gp = GenerateParams { decode, routing: s.routing };
        let (tokenizer, model) = (s.tokenizer.clone(), s.model.clone());
        s.begin_trace();
        // generate runs many forward calls: undoing them needs a copy of any recurrent state.
        let before = s.session.checkpoint_with_state();
        let mut delivered = 0usize;
        let outcome = generate(&model, &mut s.session, tokenizer.as_deref(), Input::Tokens(&ids), &gp, |piece| {
            let token = piece.token.map(|t| t as i32).unwrap_or(-1);
            if let (Some(o), Some(t)) = (out.as_deref_mut(), piece.token) {
                if let Some(slot) = o.get_mut(delivered) {
                    *slot = t as i32;
                }
            }
            delivered += usize::from(piece.token.is_some());
            match callback {
                Some(cb) => {
                    // An empty piece still gets a valid pointer (not Rust's dangling one).
                    let text = if piece.text.is_empty() { "\0" } else { piece.text };
                    // SAFETY: the caller vouches for the callback and its userdata; the text pointer
                    // is valid for text_len bytes.
                    unsafe { cb(userdata, token, text.as_ptr().cast(), piece.text.len()) == 0 }
                }
                None => true,
            }
        });
        let reported = s.report_routes();
        let outcome = outcome?;
        if !reported {
            s.session.rollback(before);
            return Err(aborted());
        }
        if let Some(size) = result_size {
            let full = colibri_generate_result {
                struct_size: size as u32,
                finish_reason: finish_reason(outcome.finish),
                n_tokens: delivered,
                n_cached: s.session.position(),
            };
            put_versioned(result, full, size);
        }
        Ok(())
    })
}
