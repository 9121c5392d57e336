//! `colibri_embed`: a token sequence → one pooled vector of the model's final-normed hidden
//! states (`crate::embed`). It takes the model, not a session: each call runs in a session of
//! its own that lives only for the call, so it is safe to call concurrently and never touches a
//! caller's session.

use super::handle::*;
use super::model::colibri_model;
use super::panic::{guard, guard_or, Failure};
use super::session::{colibri_quant_act, quant_act_of, COLIBRI_QUANT_ACT_DEFAULT};
use super::status::*;
use crate::embed::{EmbedOptions, Pooling};

/// How `colibri_embed` pools the per-token states (`colibri_embed_params.pooling`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_pooling = i32;
/// The mean over every token (the default).
pub const COLIBRI_POOLING_MEAN: colibri_pooling = 0;
/// The last token's state (the one position that has seen the whole sequence).
pub const COLIBRI_POOLING_LAST: colibri_pooling = 1;
/// The first token's state (BERT's [CLS] convention).
pub const COLIBRI_POOLING_CLS: colibri_pooling = 2;

/// Options of `colibri_embed`. Fill with `colibri_embed_params_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_embed_params {
    /// sizeof(colibri_embed_params).
    pub struct_size: u32,
    /// A COLIBRI_POOLING_* value (default COLIBRI_POOLING_MEAN).
    pub pooling: colibri_pooling,
    /// 1 (default): scale the vector to unit L2 norm; 0: leave it as pooled.
    pub normalize: i32,
    /// A COLIBRI_QUANT_ACT_* value (default COLIBRI_QUANT_ACT_DEFAULT).
    pub quant_act: colibri_quant_act,
}

impl Versioned for colibri_embed_params {
    const SIZES: &'static [usize] = &[std::mem::size_of::<colibri_embed_params>()];
}

impl Default for colibri_embed_params {
    fn default() -> Self {
        colibri_embed_params {
            struct_size: std::mem::size_of::<Self>() as u32,
            pooling: COLIBRI_POOLING_MEAN,
            normalize: 1,
            quant_act: COLIBRI_QUANT_ACT_DEFAULT,
        }
    }
}

fn options_of(p: &colibri_embed_params) -> Result<EmbedOptions, Failure> {
    let pooling = match p.pooling {
        COLIBRI_POOLING_MEAN => Pooling::Mean,
        COLIBRI_POOLING_LAST => Pooling::Last,
        COLIBRI_POOLING_CLS => Pooling::Cls,
        x => {
            return Err(Failure::new(
                COLIBRI_STATUS_INVALID_ARGUMENT,
                format!("pooling {x} (use COLIBRI_POOLING_MEAN, COLIBRI_POOLING_LAST or COLIBRI_POOLING_CLS)"),
            ))
        }
    };
    Ok(EmbedOptions { pooling, normalize: p.normalize != 0, quant_act: quant_act_of(p.quant_act)? })
}

/// Fill `params` with the defaults (mean pooling, L2-normalised). Thread-safe.
///
/// # Safety
/// `params` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_embed_params_init(params: *mut colibri_embed_params) {
    guard_or((), || {
        if !params.is_null() {
            put(params, colibri_embed_params::default());
        }
    })
}

/// `colibri_embed_params_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_embed_params)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_embed_params_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_embed_params_init_sized(p: *mut colibri_embed_params, size: usize) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_embed_params"))
}

/// The embedding of `n_tokens` tokens (n_tokens ≥ 1; add BOS yourself if the model wants one):
/// the model's final-normed hidden states (what the lm_head would read) pooled as `params` says
/// (NULL: mean over the tokens, L2-normalised), written as hidden_size floats to `out`
/// (`out_len` floats). `*n_out` always gets the vector length (hidden_size). A size query —
/// `out` NULL and `out_len` 0 — or any `out_len` below it returns COLIBRI_STATUS_BUFFER_TOO_SMALL
/// before anything is computed (the tokens are not read). The tokens must fit the model's
/// vocabulary; memory for their KV cache that cannot be had is COLIBRI_STATUS_OUT_OF_MEMORY.
/// Runs on the model's worker pool in a session of its own (no session is touched): safe to call
/// concurrently.
///
/// # Safety
/// `model` a live model; `tokens` readable for n_tokens ints; `out` writable for out_len floats;
/// `n_out` writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_embed(
    model: *const colibri_model,
    tokens: *const i32,
    n_tokens: usize,
    params: *const colibri_embed_params,
    out: *mut f32,
    out_len: usize,
    n_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        if n_out.is_null() {
            return Err(Failure::null("n_out"));
        }
        if out.is_null() && out_len > 0 {
            return Err(Failure::null("out"));
        }
        let opts = options_of(&super::handle::params(params, colibri_embed_params::default(), "params")?)?;
        let h = m.model.config().hidden_size;
        put(n_out, h);
        if out_len < h {
            return Err(Failure::new(
                COLIBRI_STATUS_BUFFER_TOO_SMALL,
                format!("the embedding has {h} floats; out_len is {out_len}"),
            ));
        }
        let ids = token_ids(tokens, n_tokens, "tokens")?;
        if ids.is_empty() {
            return Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, "n_tokens is 0"));
        }
        let v = crate::embed::embed(&m.model, &[&ids], &opts)?;
        let dst = slice_mut(out, out_len, "out")?;
        for (d, s) in dst.iter_mut().zip(v.iter().flatten()) {
            *d = *s;
        }
        Ok(())
    })
}
