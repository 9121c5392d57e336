//! `colibri_session` (alias `colibri_ctx`): one sequence's KV cache and state, holding a
//! shared reference to its model. One call at a time: every entry point taking a session takes
//! its in-use flag, and a call meanwhile gets COLIBRI_STATUS_BUSY. Many sessions share a model.
//! Also the one-call entry path colibri_init / colibri_infer / colibri_free (a model and one
//! session in one handle).

use super::exclusive::{take, Exclusive, Held};
use super::handle::*;
use super::model::colibri_model;
use super::panic::{guard, guard_or, set_last_error, Failure};
use super::status::*;
use crate::forward::{forward, ForwardOptions, Input, LogitsMode, RoutingMode, RoutingOptions};
use crate::kernels::QuantActivations;
use crate::model::Model;
use crate::session::{KvDtype, Session, SessionOptions};
use crate::tokenizer::Tokenizer;
use std::ffi::c_void;
use std::sync::Arc;

/// Routing-trace callback: called after a forward call for every (token position, MoE layer)
/// with the chosen expert ids and their weights (k of each; valid during the call only).
/// Return 0 to go on, a positive value to skip the remaining records of this call, or
/// COLIBRI_ROUTE_ABORT (any negative value) to fail it: the call returns
/// COLIBRI_STATUS_ABORTED and is undone (the session as before it, no logits written).
#[allow(non_camel_case_types)]
pub type colibri_route_callback = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        layer: i32,
        position: i32,
        experts: *const i32,
        weights: *const f32,
        k: usize,
    ) -> i32,
>;

/// What a route callback returns to fail the call it reports on (see colibri_route_callback).
pub const COLIBRI_ROUTE_ABORT: i32 = -1;

/// The failure of a call whose route callback returned COLIBRI_ROUTE_ABORT.
pub(crate) fn aborted() -> Failure {
    Failure::new(
        COLIBRI_STATUS_ABORTED,
        "the route callback aborted the call (COLIBRI_ROUTE_ABORT); the session is as it was before it",
    )
}

/// Element type of a session's KV cache (`kv_type`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_kv_type = i32;
pub const COLIBRI_KV_F32: colibri_kv_type = 0;
pub const COLIBRI_KV_F16: colibri_kv_type = 1;
pub const COLIBRI_KV_BF16: colibri_kv_type = 2;

/// How a session chooses experts (`routing_mode`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_routing_mode = i32;
/// The k largest router probabilities (ties to the lowest expert index). The reference.
pub const COLIBRI_ROUTING_TOPK: colibri_routing_mode = 0;
/// The k largest of logit + Gumbel noise from the session's seeded RNG; weights un-noised.
pub const COLIBRI_ROUTING_GUMBEL: colibri_routing_mode = 1;

/// How reduced-precision weights meet their activations (`quant_act`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_quant_act = i32;
/// The process default: `COLIBRI_QUANT_ACT=reduced|float` from the environment, else reduced.
pub const COLIBRI_QUANT_ACT_DEFAULT: colibri_quant_act = 0;
/// Activations rounded to each weight's own arithmetic per product: int8 blocks against
/// block-quantised weights (W8A8 / W4A8), bf16 against bf16 weights (llama.cpp's convention):
/// faster.
pub const COLIBRI_QUANT_ACT_REDUCED: colibri_quant_act = 1;
/// Activations stay f32 for every weight (W8A16 / W4A16 / BF16A32).
pub const COLIBRI_QUANT_ACT_FLOAT: colibri_quant_act = 2;

/// Options of a session. Fill with `colibri_session_params_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_session_params {
    /// sizeof(colibri_session_params).
    pub struct_size: u32,
    /// Context length in tokens (at most 16777216); 0 = the model's trained context capped at
    /// 4096. A limit, not an allocation: the KV cache grows as tokens arrive, and memory that
    /// cannot be had is COLIBRI_STATUS_OUT_OF_MEMORY from the call that needed it.
    pub n_ctx: u32,
    /// KV cache element type: a COLIBRI_KV_* value (default COLIBRI_KV_F32).
    pub kv_type: colibri_kv_type,
    /// 0: colibri_infer returns the last position's logits; 1: every new position's.
    pub all_logits: i32,
    /// A COLIBRI_ROUTING_* value (default COLIBRI_ROUTING_TOPK).
    pub routing_mode: colibri_routing_mode,
    /// Experts per token; 0 = the model's top_k.
    pub moe_top_k: i32,
    /// Seed of the routing RNG (Gumbel routing). Default COLIBRI_SEED_RANDOM: a fresh seed per
    /// session; any other value (0 included) repeats exactly.
    pub routing_seed: u64,
    /// A COLIBRI_QUANT_ACT_* value (default COLIBRI_QUANT_ACT_DEFAULT).
    pub quant_act: colibri_quant_act,
    /// 0 (the struct's tail, named so that a later field changes struct_size).
    pub reserved: i32,
}

impl Versioned for colibri_session_params {
    const SIZES: &'static [usize] = &[std::mem::size_of::<colibri_session_params>()];
}

impl Default for colibri_session_params {
    fn default() -> Self {
        colibri_session_params {
            struct_size: std::mem::size_of::<Self>() as u32,
            n_ctx: 0,
            kv_type: COLIBRI_KV_F32,
            all_logits: 0,
            routing_mode: COLIBRI_ROUTING_TOPK,
            moe_top_k: 0,
            routing_seed: super::COLIBRI_SEED_RANDOM,
            quant_act: COLIBRI_QUANT_ACT_DEFAULT,
            reserved: 0,
        }
    }
}

/// A session (opaque to C): its state behind the in-use flag every entry point takes.
pub struct colibri_session {
    state: Exclusive<SessionState>,
}

impl colibri_session {
    /// The session at `p` for one call: NULL_ARGUMENT for NULL, BUSY while another call (another
    /// thread, or a callback of the running call) uses it.
    pub(crate) fn take<'a>(p: *const colibri_session, arg: &str) -> Result<Held<'a, SessionState>, Failure> {
        take(&borrow(p, arg)?.state, arg)
    }
}

/// What a session holds.
pub(crate) struct SessionState {
    pub(crate) model: Arc<Model>,
    pub(crate) tokenizer: Option<Arc<Tokenizer>>,
    pub(crate) session: Session,
    pub(crate) routing: RoutingOptions,
    pub(crate) all_logits: bool,
    route_cb: colibri_route_callback,
    route_userdata: *mut c_void,
}

/// A session made by `colibri_init` (the one-call entry path).
#[allow(non_camel_case_types)]
pub type colibri_ctx = colibri_session;

fn routing_of(mode: colibri_routing_mode, top_k: i32) -> Result<RoutingOptions, Failure> {
    let mode = match mode {
        COLIBRI_ROUTING_TOPK => RoutingMode::TopK,
        COLIBRI_ROUTING_GUMBEL => RoutingMode::Gumbel,
        m => {
            return Err(Failure::new(
                COLIBRI_STATUS_INVALID_ARGUMENT,
                format!("routing mode {m} (use COLIBRI_ROUTING_TOPK or COLIBRI_ROUTING_GUMBEL)"),
            ))
        }
    };
    let top_k = match top_k {
        0 => None,
        k if k > 0 => Some(k as usize),
        k => return Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("moe_top_k {k} is negative"))),
    };
    Ok(RoutingOptions { mode, top_k })
}

/// The activation mode a COLIBRI_QUANT_ACT_* value asks for.
pub(crate) fn quant_act_of(q: colibri_quant_act) -> Result<QuantActivations, Failure> {
    match q {
        COLIBRI_QUANT_ACT_DEFAULT => Ok(QuantActivations::from_env()),
        COLIBRI_QUANT_ACT_REDUCED => Ok(QuantActivations::Reduced),
        COLIBRI_QUANT_ACT_FLOAT => Ok(QuantActivations::Float),
        _ => Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("quant_act {q} (use COLIBRI_QUANT_ACT_*)"))),
    }
}

impl colibri_session {
    pub(crate) fn new(m: &colibri_model, p: &colibri_session_params) -> Result<colibri_session, Failure> {
        let kv_dtype = match p.kv_type {
            COLIBRI_KV_F32 => KvDtype::F32,
            COLIBRI_KV_F16 => KvDtype::F16,
            COLIBRI_KV_BF16 => KvDtype::BF16,
            t => {
                return Err(Failure::new(
                    COLIBRI_STATUS_INVALID_ARGUMENT,
                    format!("kv_type {t} (use COLIBRI_KV_F32, COLIBRI_KV_F16 or COLIBRI_KV_BF16)"),
                ))
            }
        };
        let quant_act = quant_act_of(p.quant_act)?;
        let routing = routing_of(p.routing_mode, p.moe_top_k)?;
        let c = m.model.config();
        crate::forward::check_routing(c, &routing)?;
        let opts = SessionOptions { n_ctx: p.n_ctx as usize, kv_dtype, routing_seed: p.routing_seed, quant_act };
        let session = Session::new(c, &opts)?;
        let state = SessionState {
            model: m.model.clone(),
            tokenizer: m.tokenizer.clone(),
            session,
            routing,
            all_logits: p.all_logits != 0,
            route_cb: None,
            route_userdata: std::ptr::null_mut(),
        };
        Ok(colibri_session { state: Exclusive::new(state) })
    }
}

impl SessionState {
    /// Run the forward pass and copy logits out; nothing changes when a check fails.
    fn infer(&mut self, input: Input<'_>, n: usize, logits: &mut [f32]) -> Result<(), Failure> {
        let vocab = self.model.config().vocab_size;
        let need = if self.all_logits { n * vocab } else { vocab };
        if logits.len() < need {
            return Err(Failure::new(
                COLIBRI_STATUS_BUFFER_TOO_SMALL,
                format!("logits_len is {} floats; this call needs {need}", logits.len()),
            ));
        }
        self.begin_trace();
        let before = self.session.checkpoint();
        let opts = ForwardOptions { logits: self.logits_mode(), routing: self.routing };
        forward(&self.model, &mut self.session, input, &opts)?;
        if !self.report_routes() {
            self.session.rollback(before);
            return Err(aborted());
        }
        logits[..need].copy_from_slice(&self.session.logits()[..need]);
        Ok(())
    }

    /// The logits a forward call of this session returns.
    pub(crate) fn logits_mode(&self) -> LogitsMode {
        if self.all_logits {
            LogitsMode::All
        } else {
            LogitsMode::Last
        }
    }

    /// Record routing only while a callback is registered, starting from an empty trace.
    pub(crate) fn begin_trace(&mut self) {
        self.session.set_trace(self.route_cb.is_some());
        self.session.take_trace();
    }

    /// Hand the call's routing records to the callback; false when it aborted the call (the
    /// caller then rolls the session back).
    pub(crate) fn report_routes(&mut self) -> bool {
        let Some(cb) = self.route_cb else { return true };
        let mut records = self.session.take_trace();
        records.sort_by_key(|r| (r.position, r.layer));
        for r in records {
            let ids: Vec<i32> = r.experts.iter().map(|&e| e as i32).collect();
            // SAFETY: the caller registered this callback and vouches for userdata.
            let answer = unsafe {
                cb(self.route_userdata, r.layer as i32, r.position as i32, ids.as_ptr(), r.weights.as_ptr(), ids.len())
            };
            if answer < 0 {
                return false;
            }
            if answer > 0 {
                break;
            }
        }
        true
    }
}

fn tokens_of(tokens: *const i32, n: usize) -> Result<Vec<u32>, Failure> {
    let ids = token_ids(tokens, n, "tokens")?;
    if ids.is_empty() {
        return Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, "n_tokens is 0"));
    }
    Ok(ids)
}

/// Fill `params` with the defaults. Thread-safe.
///
/// # Safety
/// `params` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_params_init(params: *mut colibri_session_params) {
    guard_or((), || {
        if !params.is_null() {
            put(params, colibri_session_params::default());
        }
    })
}

/// `colibri_session_params_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_session_params)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_session_params_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_params_init_sized(
    p: *mut colibri_session_params,
    size: usize,
) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_session_params"))
}

/// A new session on `model` (which may be freed afterwards: the session keeps it alive).
/// `params` may be NULL. Safe to call concurrently on one model.
///
/// # Safety
/// `model` must be a live model; `session_out` writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_new(
    model: *const colibri_model,
    params: *const colibri_session_params,
    session_out: *mut *mut colibri_session,
) -> colibri_status {
    guard(|| {
        if session_out.is_null() {
            return Err(Failure::null("session_out"));
        }
        let m = borrow(model, "model")?;
        let p = super::handle::params(params, colibri_session_params::default(), "params")?;
        put(session_out, Box::into_raw(Box::new(colibri_session::new(m, &p)?)));
        Ok(())
    })
}

/// Release a session. NULL is a no-op. A session in use by a call (freed from inside one of its
/// callbacks, or while another thread's call runs) is not freed: it stays valid, and
/// colibri_last_error_message says so.
///
/// # Safety
/// `session` must be NULL or from colibri_session_new / colibri_init, freed once.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_free(session: *mut colibri_session) {
    guard_or((), || {
        if session.is_null() {
            return;
        }
        match colibri_session::take(session, "session") {
            Err(busy) => set_last_error(&format!("colibri_session_free: not freed: {}", busy.message)),
            Ok(held) => {
                drop(held);
                // SAFETY: from Box::into_raw; no call holds it (checked just now).
                drop(unsafe { Box::from_raw(session) });
            }
        }
    })
}

/// Run the forward pass over `n_tokens` (>= 1) new tokens, appending them to the KV cache, and
/// write the last position's logits (every new position's with all_logits) to `logits_out`:
/// `logits_len` floats, at least vocab_size (n_tokens · vocab_size), else BUFFER_TOO_SMALL.
/// Nothing is added to the tokens (no BOS). A failed call leaves the KV cache as it was. The
/// session is busy until the call returns (COLIBRI_STATUS_BUSY for any other call meanwhile).
///
/// # Safety
/// `tokens` readable for n_tokens ints; `logits_out` writable for logits_len floats.
#[no_mangle]
pub unsafe extern "C" fn colibri_infer(
    ctx: *mut colibri_ctx,
    tokens: *const i32,
    n_tokens: usize,
    logits_out: *mut f32,
    logits_len: usize,
) -> colibri_status {
    guard(|| {
        let mut s = colibri_session::take(ctx, "ctx")?;
        let ids = tokens_of(tokens, n_tokens)?;
        let logits = slice_mut(logits_out, logits_len, "logits_out")?;
        s.infer(Input::Tokens(&ids), ids.len(), logits)
    })
}

/// Like colibri_infer with hidden states instead of tokens: `embeddings` holds n_tokens rows of
/// `hidden_size` floats (must equal the model's hidden size).
///
/// # Safety
/// `embeddings` readable for n_tokens·hidden_size floats; `logits_out` writable for logits_len.
#[no_mangle]
pub unsafe extern "C" fn colibri_infer_embeddings(
    ctx: *mut colibri_ctx,
    embeddings: *const f32,
    n_tokens: usize,
    hidden_size: usize,
    logits_out: *mut f32,
    logits_len: usize,
) -> colibri_status {
    guard(|| {
        let mut s = colibri_session::take(ctx, "ctx")?;
        let h = s.model.config().hidden_size;
        if hidden_size != h {
            return Err(Failure::new(
                COLIBRI_STATUS_INVALID_ARGUMENT,
                format!("hidden_size {hidden_size}, the model's is {h}"),
            ));
        }
        if n_tokens == 0 {
            return Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, "n_tokens is 0"));
        }
        let len = n_tokens
            .checked_mul(h)
            .ok_or_else(|| Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, "n_tokens is absurd"))?;
        let e = slice(embeddings, len, "embeddings")?;
        let logits = slice_mut(logits_out, logits_len, "logits_out")?;
        s.infer(Input::Embeddings(e), n_tokens, logits)
    })
}

/// Forget every cached token.
///
/// # Safety
/// `session` must be a live session.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_reset(session: *mut colibri_session) -> colibri_status {
    guard(|| {
        colibri_session::take(session, "session")?.session.reset();
        Ok(())
    })
}

/// Keep only the first `n_tokens` cached tokens (INVALID_ARGUMENT if fewer are cached). A model
/// with recurrent layers (colibri_model_info.n_recurrent_layers > 0, Qwen3-Next) keeps a state
/// standing for every token seen, which goes back exactly only to 0, to the current length and
/// to the start of the session's last forward call; any other `n_tokens` returns UNSUPPORTED and
/// changes nothing (reset and feed the prefix again).
///
/// # Safety
/// `session` must be a live session.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_truncate(session: *mut colibri_session, n_tokens: usize) -> colibri_status {
    guard(|| {
        colibri_session::take(session, "session")?.session.truncate(n_tokens)?;
        Ok(())
    })
}

/// Tokens in the KV cache, and the context capacity.
///
/// # Safety
/// `session` must be a live session; the out-pointers writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_position(
    session: *const colibri_session,
    position_out: *mut usize,
    n_ctx_out: *mut usize,
) -> colibri_status {
    guard(|| {
        let s = colibri_session::take(session, "session")?;
        if position_out.is_null() {
            return Err(Failure::null("position_out"));
        }
        if n_ctx_out.is_null() {
            return Err(Failure::null("n_ctx_out"));
        }
        put(position_out, s.session.position());
        put(n_ctx_out, s.session.n_ctx());
        Ok(())
    })
}

/// Routing of later calls: a COLIBRI_ROUTING_* mode, the seed of the Gumbel RNG
/// (COLIBRI_SEED_RANDOM: a fresh one), experts per token (0 = the model's top_k, else 1..n_experts).
///
/// # Safety
/// `session` must be a live session.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_set_routing(
    session: *mut colibri_session,
    mode: colibri_routing_mode,
    routing_seed: u64,
    moe_top_k: i32,
) -> colibri_status {
    guard(|| {
        let mut s = colibri_session::take(session, "session")?;
        let r = routing_of(mode, moe_top_k)?;
        crate::forward::check_routing(s.model.config(), &r)?;
        s.routing = r;
        s.session.set_routing_seed(routing_seed);
        Ok(())
    })
}

/// Register (or with NULL, remove) the routing-trace callback of this session.
///
/// # Safety
/// `session` must be a live session; `callback` valid with `userdata` while registered.
#[no_mangle]
pub unsafe extern "C" fn colibri_session_set_route_callback(
    session: *mut colibri_session,
    callback: colibri_route_callback,
    userdata: *mut c_void,
) -> colibri_status {
    guard(|| {
        let mut s = colibri_session::take(session, "session")?;
        s.route_cb = callback;
        s.route_userdata = userdata;
        Ok(())
    })
}
