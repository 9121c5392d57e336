//! The one-call entry path: `colibri_init` opens the model and one session on it from one
//! params struct (`colibri_params`: the model's options and the session's), `colibri_free`
//! releases both. The context it returns is a session: every session function takes it.

use super::handle::*;
use super::model::{colibri_model, colibri_model_params};
use super::panic::{guard, guard_or, Failure};
use super::session::{
    colibri_ctx, colibri_kv_type, colibri_quant_act, colibri_routing_mode, colibri_session, colibri_session_free,
    colibri_session_params,
};
use super::status::*;
use std::ffi::c_char;

/// Options of `colibri_init`: the model's and the session's. Fill with `colibri_params_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_params {
    /// sizeof(colibri_params).
    pub struct_size: u32,
    /// 1 (default): map the file; 0: read it into memory.
    pub use_mmap: i32,
    /// 1: lock the model's pages in RAM.
    pub use_mlock: i32,
    /// As in colibri_session_params.
    pub n_ctx: u32,
    pub kv_type: colibri_kv_type,
    pub all_logits: i32,
    pub routing_mode: colibri_routing_mode,
    pub moe_top_k: i32,
    pub routing_seed: u64,
    pub quant_act: colibri_quant_act,
    /// 0 (named so that the struct has no hidden padding).
    pub reserved: i32,
    /// As in colibri_model_params.
    pub n_threads: u32,
    pub pin_threads: i32,
    /// As in colibri_model_params (1, the default: advise huge pages on the mapping).
    pub use_hugepages: i32,
    /// 0 (named so that the struct has no hidden padding).
    pub reserved2: i32,
}

impl Versioned for colibri_params {
    /// 48: ABI 1 before n_threads and pin_threads; 56: before use_hugepages.
    const SIZES: &'static [usize] = &[48, 56, std::mem::size_of::<colibri_params>()];
}

impl Default for colibri_params {
    fn default() -> Self {
        let s = colibri_session_params::default();
        colibri_params {
            struct_size: std::mem::size_of::<Self>() as u32,
            use_mmap: 1,
            use_mlock: 0,
            n_ctx: s.n_ctx,
            kv_type: s.kv_type,
            all_logits: s.all_logits,
            routing_mode: s.routing_mode,
            moe_top_k: s.moe_top_k,
            routing_seed: s.routing_seed,
            quant_act: s.quant_act,
            reserved: 0,
            n_threads: 0,
            pin_threads: 0,
            use_hugepages: 1,
            reserved2: 0,
        }
    }
}

/// Fill `params` with the defaults. Thread-safe.
///
/// # Safety
/// `params` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_params_init(params: *mut colibri_params) {
    guard_or((), || {
        if !params.is_null() {
            put(params, colibri_params::default());
        }
    })
}

/// `colibri_params_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_params)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_params_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_params_init_sized(p: *mut colibri_params, size: usize) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_params"))
}

/// Open the model at `model_path` and one session on it (`params` may be NULL): the one-call path (see the top).
///
/// # Safety
/// `model_path` NUL-terminated; `ctx_out` writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_init(
    model_path: *const c_char,
    params: *const colibri_params,
    ctx_out: *mut *mut colibri_ctx,
) -> colibri_status {
    guard(|| {
        if ctx_out.is_null() {
            return Err(Failure::null("ctx_out"));
        }
        let path = c_str(model_path, "model_path")?;
        let p = super::handle::params(params, colibri_params::default(), "params")?;
        let mp = colibri_model_params {
            use_mmap: p.use_mmap,
            use_mlock: p.use_mlock,
            n_threads: p.n_threads,
            pin_threads: p.pin_threads,
            use_hugepages: p.use_hugepages,
            ..Default::default()
        };
        let sp = colibri_session_params {
            n_ctx: p.n_ctx,
            kv_type: p.kv_type,
            all_logits: p.all_logits,
            routing_mode: p.routing_mode,
            moe_top_k: p.moe_top_k,
            routing_seed: p.routing_seed,
            quant_act: p.quant_act,
            ..Default::default()
        };
        let model = colibri_model::open(path, &mp)?;
        put(ctx_out, Box::into_raw(Box::new(colibri_session::new(&model, &sp)?)));
        Ok(())
    })
}

/// Release a context from colibri_init (its model goes with it). NULL is a no-op.
///
/// # Safety
/// `ctx` must be NULL or from colibri_init / colibri_session_new, freed once.
#[no_mangle]
pub unsafe extern "C" fn colibri_free(ctx: *mut colibri_ctx) {
    // SAFETY: same contract as colibri_session_free.
    unsafe { colibri_session_free(ctx) }
}
