//! `colibri_generate`: sample tokens on a session with a sampler params struct and a per-token
//! callback (text pieces never split a UTF-8 character).

use super::handle::*;
use super::panic::{guard, guard_or, Failure};
use super::session::colibri_session;
use super::status::*;
use crate::forward::Input;
use crate::generate::{generate, GenerateParams};
use crate::sampler::SamplerParams;
use std::ffi::{c_char, c_void};

/// Per-token callback: the sampled id and the text it completes (`text_len` bytes, not
/// NUL-terminated; may be 0). A last call with token -1 may flush held-back text at the end.
/// Return non-zero to stop generating.
#[allow(non_camel_case_types)]
pub type colibri_token_callback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, token: i32, text: *const c_char, text_len: usize) -> i32>;

/// Sampling and stopping options. Fill with `colibri_sampler_params_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_sampler_params {
    /// sizeof(colibri_sampler_params).
    pub struct_size: u32,
    /// 0 = greedy (default 0.8).
    pub temperature: f32,
    /// 0 = off (default 40).
    pub top_k: i32,
    /// 1 = off (default 0.95).
    pub top_p: f32,
    /// 0 = off (default 0.05).
    pub min_p: f32,
    /// 1 = off (default).
    pub repetition_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Last tokens the penalties look at (default 64).
    pub penalty_last_n: i32,
    /// Most tokens to generate (default 128).
    pub max_tokens: i32,
    /// 1: keep going past end-of-sequence tokens.
    pub ignore_eos: i32,
    pub seed: u64,
}

impl Default for colibri_sampler_params {
    fn default() -> Self {
        let s = SamplerParams::default();
        colibri_sampler_params {
            struct_size: std::mem::size_of::<Self>() as u32,
            temperature: s.temperature,
            top_k: s.top_k as i32,
            top_p: s.top_p,
            min_p: s.min_p,
            repetition_penalty: s.repetition_penalty,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            penalty_last_n: s.penalty_last_n as i32,
            max_tokens: 128,
            ignore_eos: 0,
            seed: s.seed,
        }
    }
}

fn nonneg(v: i32, what: &str) -> Result<usize, Failure> {
    usize::try_from(v).map_err(|_| Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("{what} {v} is negative")))
}

/// Fill `params` with the defaults. Thread-safe.
///
/// # Safety
/// `params` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_sampler_params_init(params: *mut colibri_sampler_params) {
    guard_or((), || {
        if !params.is_null() {
            put(params, colibri_sampler_params::default());
        }
    })
}

/// Feed `n_prompt` ids (as given: no BOS or template is added) and generate. Each token goes to
/// `callback` (may be NULL) and, when `tokens_out` is not NULL, into `tokens_out` — generation
/// then also stops when `tokens_cap` tokens are stored. `*n_tokens_out` gets the number of
/// tokens delivered (an end-of-sequence token that stopped generation is not delivered). A
/// registered routing-trace callback is called after the generation. Not thread-safe per
/// session.
///
/// # Safety
/// `prompt` readable for n_prompt ints; `tokens_out` NULL or writable for tokens_cap ints.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn colibri_generate(
    session: *mut colibri_session,
    prompt: *const i32,
    n_prompt: usize,
    params: *const colibri_sampler_params,
    callback: colibri_token_callback,
    userdata: *mut c_void,
    tokens_out: *mut i32,
    tokens_cap: usize,
    n_tokens_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let s = borrow_mut(session, "session")?;
        if n_tokens_out.is_null() {
            return Err(Failure::null("n_tokens_out"));
        }
        let ids = token_ids(prompt, n_prompt, "prompt")?;
        let p = super::handle::params(params, colibri_sampler_params::default(), "params")?;
        let mut max_tokens = nonneg(p.max_tokens, "max_tokens")?;
        let mut out: Option<&mut [i32]> = None;
        if !tokens_out.is_null() {
            max_tokens = max_tokens.min(tokens_cap);
            out = Some(slice_mut(tokens_out, tokens_cap, "tokens_out")?);
        }
        let gp = GenerateParams {
            max_tokens,
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
            stop: Vec::new(),
            routing: s.routing,
        };
        let tokenizer = s.tokenizer.clone();
        let model = s.model.clone();
        s.begin_trace();
        let mut n = 0usize;
        let mut delivered = 0usize;
        let result = generate(&model, &mut s.session, tokenizer.as_deref(), Input::Tokens(&ids), &gp, |step| {
            let token = step.token.map(|t| t as i32).unwrap_or(-1);
            delivered += usize::from(step.token.is_some());
            if let (Some(o), Some(t)) = (out.as_deref_mut(), step.token) {
                if let Some(slot) = o.get_mut(n) {
                    *slot = t as i32;
                }
                n += 1;
            }
            match callback {
                // SAFETY: the caller vouches for the callback and userdata.
                Some(cb) => {
                    // An empty piece still gets a valid pointer (not Rust's dangling one).
                    let text = if step.text.is_empty() { "\0" } else { step.text };
                    unsafe { cb(userdata, token, text.as_ptr().cast(), step.text.len()) == 0 }
                }
                None => true,
            }
        });
        s.report_routes();
        result?;
        // An end-of-sequence token that stopped the generation is neither stored nor counted.
        put(n_tokens_out, delivered);
        Ok(())
    })
}
