//! Per-session state: the KV cache sized once from the config and the context length, the
//! position, the routing RNG, the optional routing trace, the last logits and the activation
//! mode its steps compute with. One session is used by one thread at a time; many sessions
//! share one `Model`. (A step's activation buffers belong to the step: `forward::step`.)

use crate::error::{Error, Result};
use crate::kernels::QuantActivations;
use crate::model::Config;
use crate::rng::Rng;

mod copy;
mod kv_cache;
mod recurrent;
mod state_file;
pub use kv_cache::KvCache;
use kv_cache::Store;
pub use recurrent::{LayerState, LayerWrite, RecurrentState, Snapshot};
pub use state_file::{model_fingerprint, stored_tokens};

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    F16,
    BF16,
}

impl KvDtype {
    /// Bytes per cached element.
    pub fn size(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 | KvDtype::BF16 => 2,
        }
    }

    /// Parse "f32" / "f16" / "bf16".
    pub fn from_name(s: &str) -> Option<KvDtype> {
        match s {
            "f32" => Some(KvDtype::F32),
            "f16" => Some(KvDtype::F16),
            "bf16" => Some(KvDtype::BF16),
            _ => None,
        }
    }
}

/// Options of a new session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// Context length in tokens (at most 2^24); 0 = the model's trained context capped at
    /// `DEFAULT_CTX_CAP`. A limit, not an allocation: the KV cache grows as tokens arrive
    /// (`Session::reserve` allocates ahead).
    pub n_ctx: usize,
    pub kv_dtype: KvDtype,
    /// Seed of the routing RNG (Gumbel routing); `rng::SEED_RANDOM` (the default) draws a fresh
    /// one per session.
    pub routing_seed: u64,
    /// How reduced-precision weights meet their activations (default: `COLIBRI_QUANT_ACT`, else
    /// reduced).
    pub quant_act: QuantActivations,
}

/// Default context cap when the caller does not choose one (keeps the KV cache predictable).
pub const DEFAULT_CTX_CAP: usize = 4096;

/// Bytes of KV cache one token takes in a session of a model with config `c` (K and V of every
/// layer; under MLA the latent and the rope key — attention layers only): what a host
/// multiplies by the tokens a sequence may reach to bound its memory. A model with DeltaNet
/// layers adds a fixed `session_state_bytes` per session.
pub fn kv_bytes_per_token(c: &Config, dtype: KvDtype) -> usize {
    let (k, v) = c.kv_row_widths();
    [k.saturating_add(v), c.n_attention_layers(), dtype.size()].into_iter().fold(1, usize::saturating_mul)
}

/// Bytes of recurrent state a session of a model with config `c` holds whatever its length: the
/// DeltaNet layers' state and the state of the last call's start beside it (0 for attention-only
/// models).
pub fn session_state_bytes(c: &Config) -> usize {
    c.recurrent_state_bytes().saturating_mul(2)
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 0,
            kv_dtype: KvDtype::F32,
            routing_seed: crate::rng::SEED_RANDOM,
            quant_act: QuantActivations::from_env(),
        }
    }
}

/// One routing decision: token position, layer, chosen experts and their combination weights.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteRecord {
    pub position: usize,
    pub layer: usize,
    pub experts: Vec<u32>,
    pub weights: Vec<f32>,
}

/// What a forward call changes that a reader of a session can see — the cached tokens, the
/// routing RNG and the routing trace — saved before a call so that `Session::rollback` can undo
/// it (a call failing after some of its steps ran; a host whose own part of the call failed
/// after the forward pass, e.g. a callback that asked to abort).
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pos: usize,
    rng: Rng,
    traced: usize,
    /// Forward calls the session had begun when this was taken.
    calls: u64,
    /// Copies into the session before this was taken.
    copies: u64,
    /// A copy of the recurrent state (`Session::checkpoint_with_state`), for undoing several calls.
    state: Option<Snapshot>,
}

/// A sequence being processed: KV cache, position, routing RNG and trace, last logits.
pub struct Session {
    pub(crate) kv: KvCache,
    /// Tokens already in the cache.
    pub(crate) pos: usize,
    pub(crate) rng: Rng,
    pub(crate) trace: Option<Vec<RouteRecord>>,
    /// Logits of the last call: [n_out, vocab].
    pub(crate) logits: Vec<f32>,
    /// Final-normed hidden states of the last `LogitsMode::Hidden` call: [n, hidden].
    pub(crate) hidden: Vec<f32>,
    kv_dtype: KvDtype,
    quant_act: QuantActivations,
    /// The DeltaNet layers' state after the `pos` cached tokens, and beside it the state at the
    /// start of the last forward call, at position `call_start_pos` (empty for attention-only
    /// models).
    pub(crate) rec: RecurrentState,
    call_start_pos: usize,
    /// Forward calls begun.
    calls: u64,
    /// Copies into this session (`copy_from`, `copy_prefix_from`).
    copies: u64,
    /// A rollback could not restore the recurrent state: forward calls fail until a reset.
    state_lost: bool,
}

impl Session {
    /// A fresh session for a model with config `c`.
    pub fn new(c: &Config, opts: &SessionOptions) -> Result<Session> {
        let n_ctx = if opts.n_ctx == 0 { c.max_position_embeddings.min(DEFAULT_CTX_CAP) } else { opts.n_ctx };
        if n_ctx == 0 || n_ctx > (1 << 24) {
            return Err(Error::InvalidArgument { reason: format!("context length {n_ctx} outside 1..=16777216") });
        }
        Ok(Session {
            kv: KvCache::new(c, n_ctx, opts.kv_dtype)?,
            pos: 0,
            rng: Rng::new(crate::rng::resolve_seed(opts.routing_seed)),
            trace: None,
            logits: Vec::new(),
            hidden: Vec::new(),
            kv_dtype: opts.kv_dtype,
            quant_act: opts.quant_act,
            rec: RecurrentState::new(c)?,
            call_start_pos: 0,
            calls: 0,
            copies: 0,
            state_lost: false,
        })
    }

    /// Tokens currently in the KV cache.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Context capacity in tokens.
    pub fn n_ctx(&self) -> usize {
        self.kv.n_ctx()
    }

    /// Element type of the KV cache.
    pub fn kv_dtype(&self) -> KvDtype {
        self.kv_dtype
    }

    /// How this session's quantised products meet their activations.
    pub fn quant_act(&self) -> QuantActivations {
        self.quant_act
    }

    /// Allocate KV-cache memory for `tokens` positions now (at most n_ctx) instead of as they
    /// are used: a host can learn at admission whether the memory is there. Fails with
    /// `Error::OutOfMemory`, changing nothing, when it is not.
    pub fn reserve(&mut self, tokens: usize) -> Result<()> {
        self.kv.reserve(tokens)
    }

    /// Positions whose KV memory is allocated (it grows with use, never past n_ctx).
    pub fn kv_reserved(&self) -> usize {
        self.kv.reserved()
    }

    /// Bytes of KV cache each position of this session takes (see [`kv_bytes_per_token`]).
    pub fn kv_bytes_per_token(&self) -> usize {
        let element = self.kv.k.first().map_or(self.kv_dtype.size(), Store::bytes_per_element);
        [self.kv.caching_layers(), self.kv.row + self.kv.v_row, element].into_iter().fold(1, usize::saturating_mul)
    }

    /// Bytes of recurrent state this session holds whatever its length (see
    /// [`session_state_bytes`]).
    pub fn state_bytes(&self) -> usize {
        self.rec.bytes().saturating_mul(2)
    }

    /// Forget every cached token (the buffers stay allocated; a recurrent state is zeroed).
    pub fn reset(&mut self) {
        self.pos = 0;
        self.rec.zero();
        self.state_lost = false;
    }

    /// Keep only the first `n` cached tokens. A model with DeltaNet layers (whose state stands
    /// for every token seen) can go back exactly to 0, to the current position, and to the
    /// position where the last forward call started (its state is kept); any other `n` is
    /// `Error::Unsupported` and changes nothing — reset and feed the prefix again instead.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        match self.cut(n)? {
            copy::Cut::Whole => {}
            copy::Cut::Zero => self.reset(),
            copy::Cut::Start => {
                self.rec.restore_start();
                self.pos = n;
            }
            copy::Cut::Rows => self.pos = n,
        }
        Ok(())
    }

    /// After the state was replaced wholesale (a state file): the restored state is the one a
    /// truncation to the current position or an undo goes back to.
    fn after_restore(&mut self) {
        self.calls += 1;
        self.rec.begin_call();
        self.call_start_pos = self.pos;
        self.state_lost = false;
        if let Some(t) = self.trace.as_mut() {
            t.clear();
        }
    }

    /// Raise (or lower, not below the cached tokens) the context limit. The KV cache grows as
    /// tokens arrive, so this allocates nothing.
    pub fn set_n_ctx(&mut self, n_ctx: usize) -> Result<()> {
        if n_ctx < self.pos.max(1) || n_ctx > (1 << 24) {
            return Err(Error::InvalidArgument {
                reason: format!("context length {n_ctx} outside {}..=16777216", self.pos.max(1)),
            });
        }
        self.kv.n_ctx = n_ctx;
        Ok(())
    }

    /// Mark the start of a forward call (its input already checked): the recurrent state is
    /// kept (the call writes beside it, nothing is copied) so that the call can be undone
    /// (`abandon_call`, `rollback`, `truncate`).
    pub(crate) fn begin_call(&mut self) {
        self.calls += 1;
        if !self.rec.is_empty() {
            self.rec.begin_call();
            self.call_start_pos = self.pos;
        }
    }

    /// Undo the call begun last (it failed): back to its start position and recurrent state.
    pub(crate) fn abandon_call(&mut self) {
        if !self.rec.is_empty() {
            self.rec.restore_start();
            self.pos = self.call_start_pos;
        }
    }

    /// Whether the session may run a forward call (not after a rollback that lost its
    /// recurrent state).
    pub(crate) fn check_usable(&self) -> Result<()> {
        match self.state_lost {
            false => Ok(()),
            true => Err(Error::InvalidArgument {
                reason: "the session's recurrent (DeltaNet) state was lost by a rollback over several calls; \
                         reset it (or truncate to 0)"
                    .into(),
            }),
        }
    }

    /// The state to go back to with `rollback`, undoing at most one forward call (the
    /// recurrent state of that call's start is kept by the session; nothing is copied).
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            pos: self.pos,
            rng: self.rng.clone(),
            traced: self.trace.as_ref().map_or(0, Vec::len),
            calls: self.calls,
            copies: self.copies,
            state: None,
        }
    }

    /// A checkpoint that can undo any number of forward calls: it carries a copy of the
    /// recurrent state (`state_bytes() / 2` bytes; nothing for attention-only models).
    pub fn checkpoint_with_state(&self) -> Checkpoint {
        let state = if self.rec.is_empty() { None } else { Some(self.rec.snapshot()) };
        Checkpoint { state, ..self.checkpoint() }
    }

    /// Undo the calls made since `c` was taken on this session: the tokens they cached are
    /// forgotten, the routing RNG is as it was and the routing records they added are dropped
    /// (the last logits are not restored). The recurrent state goes back too: from the
    /// checkpoint's copy, or from the session's copy of the last call's start when that call
    /// is the only one since `c`; past more calls than that without a copy, the state is lost
    /// and the session refuses forward calls until it is reset. A checkpoint taken before a copy
    /// into this session (`copy_from`, `copy_prefix_from`) does nothing: the copy replaced
    /// everything it would restore.
    pub fn rollback(&mut self, c: Checkpoint) {
        if c.copies != self.copies {
            return;
        }
        self.rng = c.rng;
        if let Some(t) = self.trace.as_mut() {
            t.truncate(c.traced);
        }
        if self.rec.is_empty() {
            self.pos = self.pos.min(c.pos);
            return;
        }
        if let Some(state) = c.state {
            self.rec.restore(&state);
            self.pos = c.pos;
            self.state_lost = false;
        } else if self.calls == c.calls {
            // Nothing ran since: the state still stands for `pos` tokens.
        } else if self.calls == c.calls + 1 && self.call_start_pos == c.pos {
            self.rec.restore_start();
            self.pos = c.pos;
        } else {
            self.pos = self.pos.min(c.pos);
            self.state_lost = true;
        }
    }

    /// Re-seed the routing RNG (`rng::SEED_RANDOM`: a fresh seed).
    pub fn set_routing_seed(&mut self, seed: u64) {
        self.rng = Rng::new(crate::rng::resolve_seed(seed));
    }

    /// Start (true) or stop (false) recording routing decisions.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = if on { Some(self.trace.take().unwrap_or_default()) } else { None };
    }

    /// Take the routing decisions recorded so far (tracing stays on).
    pub fn take_trace(&mut self) -> Vec<RouteRecord> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Logits of the last forward call ([n_out, vocab], row-major).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Final-normed hidden states of the last forward call with `LogitsMode::Hidden` ([n,
    /// hidden], row-major): what the lm_head would have read.
    pub fn hidden_states(&self) -> &[f32] {
        &self.hidden
    }
}
