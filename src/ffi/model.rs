//! `colibri_model`: an opened, validated model file shared by any number of sessions and
//! threads (immutable; an Arc inside). Also its tokenizer, when the file has one.

use super::handle::*;
use super::panic::{guard, guard_or, Failure};
use super::status::*;
use crate::model::Model;
use crate::threads::ThreadOptions;
use crate::tokenizer::Tokenizer;
use crate::LoadOptions;
use std::ffi::c_char;
use std::sync::Arc;

/// Options of `colibri_model_open`. Fill with `colibri_model_params_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_model_params {
    /// sizeof(colibri_model_params), set by colibri_model_params_init.
    pub struct_size: u32,
    /// 1 (default): map the file; 0: read it into memory.
    pub use_mmap: i32,
    /// 1: lock the model's pages in RAM.
    pub use_mlock: i32,
    /// 1: survive the model file being truncated or rewritten in place while it is mapped
    /// (0, the default, leaves SIGBUS alone). Installs a process-wide SIGBUS handler once (it
    /// chains to the handler installed before it for faults outside model mappings, and runs on
    /// the alternate signal stack, as Go's runtime requires); calls on a model whose file changed
    /// then return COLIBRI_STATUS_MODEL_CHANGED and never output computed from the changed
    /// bytes. Replace model files by writing a new file and renaming it over the old one.
    pub sigbus_guard: i32,
    /// Worker threads of the model's forward passes, at most 1024; 0 (default) = one per
    /// physical core the process may run on. The model owns its pool (shared by all its
    /// sessions and threads), started by the first call that needs it and again in a forked
    /// child. Results do not depend on the count.
    pub n_threads: u32,
    /// 1: pin worker i to the i-th CPU the process may run on (Linux). Default 0.
    pub pin_threads: i32,
    /// 1 (default): advise transparent huge pages on the mapping (MADV_HUGEPAGE), so that the
    /// weights are read and mapped in 2 MiB pages where the kernel allows; 0: leave the
    /// system's default (e.g. where huge-page compaction stalls matter more than decode speed).
    pub use_hugepages: i32,
}

impl Versioned for colibri_model_params {
    /// ABI 1 as released: up to use_mlock (12 bytes); then sigbus_guard, n_threads and
    /// pin_threads (24), added together; then use_hugepages (28).
    const SIZES: &'static [usize] = &[12, 24, std::mem::size_of::<colibri_model_params>()];
}

impl Default for colibri_model_params {
    fn default() -> Self {
        colibri_model_params {
            struct_size: std::mem::size_of::<Self>() as u32,
            use_mmap: 1,
            use_mlock: 0,
            sigbus_guard: 0,
            n_threads: 0,
            pin_threads: 0,
            use_hugepages: 1,
        }
    }
}

/// A model family (`colibri_model_info.family`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_family = i32;
pub const COLIBRI_FAMILY_MIXTRAL: colibri_family = 0;
pub const COLIBRI_FAMILY_QWEN2_MOE: colibri_family = 1;
pub const COLIBRI_FAMILY_QWEN3_MOE: colibri_family = 2;
pub const COLIBRI_FAMILY_OLMOE: colibri_family = 3;
pub const COLIBRI_FAMILY_GRANITEMOE: colibri_family = 4;
pub const COLIBRI_FAMILY_GLM4_MOE: colibri_family = 5;
pub const COLIBRI_FAMILY_DEEPSEEK_V2: colibri_family = 6;
pub const COLIBRI_FAMILY_DEEPSEEK_V3: colibri_family = 7;
pub const COLIBRI_FAMILY_GPT_OSS: colibri_family = 8;
/// Phi-3.5-MoE (PhimoeForCausalLM).
pub const COLIBRI_FAMILY_PHIMOE: colibri_family = 9;
pub const COLIBRI_FAMILY_QWEN3_NEXT: colibri_family = 10;
/// dots.llm1 (Dots1ForCausalLM).
pub const COLIBRI_FAMILY_DOTS1: colibri_family = 11;
/// ERNIE-4.5-MoE (Ernie4_5_MoeForCausalLM).
pub const COLIBRI_FAMILY_ERNIE4_5_MOE: colibri_family = 12;
/// Hunyuan-MoE (HunYuanMoEV1ForCausalLM).
pub const COLIBRI_FAMILY_HUNYUAN_V1_MOE: colibri_family = 13;
/// Llama-4 Scout / Maverick text model (Llama4ForCausalLM, Llama4ForConditionalGeneration).
pub const COLIBRI_FAMILY_LLAMA4: colibri_family = 14;

/// The C number of a family.
fn family_of(f: crate::Family) -> colibri_family {
    match f {
        crate::Family::Mixtral => COLIBRI_FAMILY_MIXTRAL,
        crate::Family::Qwen2Moe => COLIBRI_FAMILY_QWEN2_MOE,
        crate::Family::Qwen3Moe => COLIBRI_FAMILY_QWEN3_MOE,
        crate::Family::Olmoe => COLIBRI_FAMILY_OLMOE,
        crate::Family::GraniteMoe => COLIBRI_FAMILY_GRANITEMOE,
        crate::Family::Glm4Moe => COLIBRI_FAMILY_GLM4_MOE,
        crate::Family::DeepseekV2 => COLIBRI_FAMILY_DEEPSEEK_V2,
        crate::Family::DeepseekV3 => COLIBRI_FAMILY_DEEPSEEK_V3,
        crate::Family::GptOss => COLIBRI_FAMILY_GPT_OSS,
        crate::Family::Phimoe => COLIBRI_FAMILY_PHIMOE,
        crate::Family::Qwen3Next => COLIBRI_FAMILY_QWEN3_NEXT,
        crate::Family::Dots1 => COLIBRI_FAMILY_DOTS1,
        crate::Family::Ernie45Moe => COLIBRI_FAMILY_ERNIE4_5_MOE,
        crate::Family::HunyuanV1Moe => COLIBRI_FAMILY_HUNYUAN_V1_MOE,
        crate::Family::Llama4 => COLIBRI_FAMILY_LLAMA4,
    }
}

/// Facts about a model, filled by `colibri_model_get_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_model_info {
    /// sizeof(colibri_model_info): set it before the call (colibri_model_info_init does).
    pub struct_size: u32,
    /// A COLIBRI_FAMILY_* value.
    pub family: colibri_family,
    pub vocab_size: u32,
    /// Trained context length (max_position_embeddings).
    pub n_ctx_train: u32,
    pub hidden_size: u32,
    pub n_layers: u32,
    pub n_experts: u32,
    pub top_k: u32,
    pub n_params: u64,
    /// Parameters read per token.
    pub n_active_params: u64,
    /// -1 when the model has none.
    pub bos_token: i32,
    /// First end-of-sequence id, -1 when none.
    pub eos_token: i32,
    /// Layers with a recurrent state instead of a KV cache (Qwen3-Next's Gated DeltaNet); 0 for
    /// the other families. (Fields from here on: struct_size 72.)
    pub n_recurrent_layers: u32,
    /// Layers with softmax attention (and a KV cache).
    pub n_attention_layers: u32,
    /// Bytes of recurrent state each session holds whatever its length (the state, and the state
    /// at the start of the last call kept beside it for undoing that call), on top of the KV
    /// cache's bytes per token; 0 when none.
    pub session_state_bytes: u64,
}

/// colibri_model_info's size before the recurrent-layer fields.
const MODEL_INFO_V1: usize = std::mem::offset_of!(colibri_model_info, n_recurrent_layers);

impl Versioned for colibri_model_info {
    const SIZES: &'static [usize] = &[MODEL_INFO_V1, std::mem::size_of::<colibri_model_info>()];
}

impl Default for colibri_model_info {
    fn default() -> Self {
        colibri_model_info {
            struct_size: std::mem::size_of::<Self>() as u32,
            family: -1,
            vocab_size: 0,
            n_ctx_train: 0,
            hidden_size: 0,
            n_layers: 0,
            n_experts: 0,
            top_k: 0,
            n_params: 0,
            n_active_params: 0,
            bos_token: -1,
            eos_token: -1,
            n_recurrent_layers: 0,
            n_attention_layers: 0,
            session_state_bytes: 0,
        }
    }
}

/// An opened model (opaque to C).
pub struct colibri_model {
    pub(crate) model: Arc<Model>,
    pub(crate) tokenizer: Option<Arc<Tokenizer>>,
    /// Why the tokenizer is unavailable (for UNSUPPORTED messages).
    pub(crate) tokenizer_error: String,
    /// The vocabulary prepared for grammars (colibri_grammar_new), built on first use.
    pub(crate) grammar_vocab: crate::grammar::VocabCache,
}

impl colibri_model {
    pub(crate) fn open(path: &str, p: &colibri_model_params) -> Result<colibri_model, Failure> {
        let threads = ThreadOptions { n_threads: p.n_threads as usize, pin: p.pin_threads != 0 };
        let opts = LoadOptions {
            mmap: p.use_mmap != 0,
            mlock: p.use_mlock != 0,
            hugepages: p.use_hugepages != 0,
            sigbus_guard: p.sigbus_guard != 0,
            threads,
            ..LoadOptions::default()
        };
        let model = Model::open(std::path::Path::new(path), &opts)?;
        let (tokenizer, tokenizer_error) = match Tokenizer::from_model(&model) {
            Ok(t) => (Some(Arc::new(t)), String::new()),
            Err(e) => (None, e.to_string()),
        };
        let grammar_vocab = crate::grammar::VocabCache::default();
        Ok(colibri_model { model: Arc::new(model), tokenizer, tokenizer_error, grammar_vocab })
    }

    pub(crate) fn tokenizer(&self) -> Result<&Tokenizer, Failure> {
        self.tokenizer.as_deref().ok_or_else(|| Failure::new(COLIBRI_STATUS_UNSUPPORTED, self.tokenizer_error.clone()))
    }
}

/// Fill `params` with the defaults (mmap on, mlock off, one thread per physical core).
/// Thread-safe.
///
/// # Safety
/// `params` must be NULL or point to a writable colibri_model_params.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_params_init(params: *mut colibri_model_params) {
    guard_or((), || {
        if !params.is_null() {
            put(params, colibri_model_params::default());
        }
    })
}

/// `colibri_model_params_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_model_params)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_model_params_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_params_init_sized(p: *mut colibri_model_params, size: usize) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_model_params"))
}

/// Fill `info` with struct_size set (call before colibri_model_get_info). Thread-safe.
///
/// # Safety
/// `info` must be NULL or point to a writable colibri_model_info.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_info_init(info: *mut colibri_model_info) {
    guard_or((), || {
        if !info.is_null() {
            put(info, colibri_model_info::default());
        }
    })
}

/// `colibri_model_info_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_model_info)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_model_info_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_info_init_sized(p: *mut colibri_model_info, size: usize) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_model_info"))
}

/// Map and validate the .colibri file at `path` (UTF-8). `params` may be NULL for defaults.
/// On success `*model_out` owns the model; free it with colibri_model_free. Thread-safe.
///
/// # Safety
/// `path` must be a NUL-terminated string; `model_out` a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_open(
    path: *const c_char,
    params: *const colibri_model_params,
    model_out: *mut *mut colibri_model,
) -> colibri_status {
    guard(|| {
        if model_out.is_null() {
            return Err(Failure::null("model_out"));
        }
        let path = c_str(path, "path")?;
        let p = super::handle::params(params, colibri_model_params::default(), "params")?;
        let m = colibri_model::open(path, &p)?;
        put(model_out, Box::into_raw(Box::new(m)));
        Ok(())
    })
}

/// Release a model. Sessions made from it keep their own reference and stay valid. NULL is a
/// no-op.
///
/// # Safety
/// `model` must be NULL or a pointer from colibri_model_open, freed once.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_free(model: *mut colibri_model) {
    guard_or((), || {
        if !model.is_null() {
            // SAFETY: the pointer came from Box::into_raw in colibri_model_open.
            drop(unsafe { Box::from_raw(model) });
        }
    })
}

/// Fill `info` (whose struct_size the caller set, e.g. with colibri_model_info_init).
/// Safe to call concurrently.
///
/// # Safety
/// `model` must be a live model; `info` a writable colibri_model_info.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_get_info(
    model: *const colibri_model,
    info: *mut colibri_model_info,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        let size = versioned_size(info, "info")?.ok_or_else(|| Failure::null("info"))?;
        let c = m.model.config();
        let pc = m.model.params();
        let full = colibri_model_info {
            struct_size: size as u32,
            family: family_of(c.family),
            vocab_size: c.vocab_size as u32,
            n_ctx_train: c.max_position_embeddings as u32,
            hidden_size: c.hidden_size as u32,
            n_layers: c.n_layers as u32,
            n_experts: c.moe.n_experts as u32,
            top_k: c.moe.top_k as u32,
            n_params: pc.total,
            n_active_params: pc.active,
            bos_token: c.bos_token_id.map(|b| b as i32).unwrap_or(-1),
            eos_token: c.eos_token_ids.first().map(|&e| e as i32).unwrap_or(-1),
            n_recurrent_layers: c.n_delta_net_layers() as u32,
            n_attention_layers: c.n_attention_layers() as u32,
            session_state_bytes: crate::session::session_state_bytes(c) as u64,
        };
        put_versioned(info, full, size);
        Ok(())
    })
}

/// The user metadata blob attached at conversion (`convert --user-metadata`): `*data_out`
/// points into the model (valid while the model lives), `*len_out` is its length; both are
/// NULL/0 when the file has none. Safe to call concurrently.
///
/// # Safety
/// `model` must be a live model; `data_out` and `len_out` writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_model_user_metadata(
    model: *const colibri_model,
    data_out: *mut *const u8,
    len_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let m = borrow(model, "model")?;
        if data_out.is_null() {
            return Err(Failure::null("data_out"));
        }
        if len_out.is_null() {
            return Err(Failure::null("len_out"));
        }
        m.model.check_unchanged()?;
        let blob = m.model.user_metadata();
        put(data_out, blob.map(|b| b.as_ptr()).unwrap_or(std::ptr::null()));
        put(len_out, blob.map(|b| b.len()).unwrap_or(0));
        Ok(())
    })
}
