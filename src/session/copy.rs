//! Copying one session's state into another of the same model, in memory (llama.cpp's
//! `llama_memory_seq_cp`): parallel sampling, beam search, a shared system prompt computed once.
//! Also the cut points a session's first `n` tokens can be taken at, which `truncate` shares:
//! any `n` for attention layers, only 0, the whole length and the last call's start for
//! DeltaNet layers (their state stands for every token seen).

use super::{KvCache, Session, Store};
use crate::error::{Error, Result};

/// How a session's first `n` cached tokens are had (`Session::cut`).
pub(super) enum Cut {
    /// All of them, nothing to undo.
    Whole,
    /// None: the recurrent state goes back to zeros.
    Zero,
    /// The start of the last forward call: its recurrent state is kept.
    Start,
    /// Fewer KV rows; there is no recurrent state.
    Rows,
}

impl Store {
    /// Element `i` (allocated) as f32.
    fn get(&self, i: usize) -> f32 {
        match self {
            Store::F32(d) => d[i],
            Store::Half { bits, bf16: true } => half::bf16::from_bits(bits[i]).to_f32(),
            Store::Half { bits, bf16: false } => half::f16::from_bits(bits[i]).to_f32(),
        }
    }

    /// Overwrite the first `values` elements (allocated in both) with `src`'s: a copy when the
    /// element types agree, else each value rounded to this store's type.
    fn copy_prefix(&mut self, src: &Store, values: usize) {
        match (&mut *self, src) {
            (Store::F32(to), Store::F32(from)) => return to[..values].copy_from_slice(&from[..values]),
            (Store::Half { bits: to, bf16: a }, Store::Half { bits: from, bf16: b }) if *a == *b => {
                return to[..values].copy_from_slice(&from[..values]);
            }
            _ => {}
        }
        (0..values).for_each(|i| self.set(i, src.get(i)));
    }
}

impl KvCache {
    /// Whether `other` caches the same layers with the same row widths.
    fn same_shape(&self, other: &KvCache) -> bool {
        (self.row, self.v_row, &self.attends) == (other.row, other.v_row, &other.attends)
    }

    /// Copy the first `positions` positions (reserved in both) of every caching layer from `src`.
    fn copy_prefix(&mut self, src: &KvCache, positions: usize) {
        let layers = self.k.iter_mut().zip(self.v.iter_mut()).zip(src.k.iter().zip(&src.v)).zip(&src.attends);
        for (((k, v), (sk, sv)), _) in layers.filter(|(_, &a)| a) {
            k.copy_prefix(sk, positions * self.row);
            v.copy_prefix(sv, positions * self.v_row);
        }
    }
}

/// A Vec of `len` values copied from `src`, or `Error::OutOfMemory` naming `what`.
fn copied(src: &[f32], what: &str) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    crate::fallible::reserve_exact(&mut v, src.len())
        .map_err(|_| Error::OutOfMemory { what: what.into(), bytes: (src.len() as u64).saturating_mul(4) })?;
    v.extend_from_slice(src);
    Ok(v)
}

impl Session {
    /// How this session's first `n` tokens can be had (see the module comment), or the error:
    /// `InvalidArgument` past the cached tokens, `Unsupported` at a point a recurrent state
    /// cannot go back to (or after a rollback lost it).
    pub(super) fn cut(&self, n: usize) -> Result<Cut> {
        if n > self.pos {
            return Err(Error::InvalidArgument { reason: format!("cannot keep {n} tokens: only {} cached", self.pos) });
        }
        if n == self.pos && !self.state_lost {
            return Ok(Cut::Whole);
        }
        if self.rec.is_empty() {
            return Ok(Cut::Rows);
        }
        if n == 0 {
            return Ok(Cut::Zero);
        }
        if n != self.call_start_pos || self.state_lost {
            return Err(Error::Unsupported {
                what: format!(
                    "cutting a session of a model with recurrent (DeltaNet) layers to {n} of {} tokens: only 0, the \
                     current length or the start of the last call ({}) can be restored",
                    self.pos, self.call_start_pos
                ),
            });
        }
        Ok(Cut::Start)
    }

    /// Make this session hold exactly what `src` — a session of the same model — holds: its
    /// cached tokens (KV rows of every attention layer, full or sliding-window; under MLA the
    /// latent and rope key), its DeltaNet state together with the state of its last call's start
    /// (so `truncate` goes back to the same points on both), its routing RNG state and its last
    /// logits and hidden states. Only the used positions are copied, never the capacity; KV
    /// rows are rounded to this session's KV type if `src`'s differs (bit-identical
    /// continuations need equal types). `src` is not changed, and the two are independent
    /// afterwards.
    ///
    /// This session keeps its own settings: context capacity, KV type, activation mode and
    /// whether it records routing (its recorded routing is cleared); a host's per-session
    /// options (routing mode, top-k override, route callback, all-logits) are not the
    /// session's and are not copied. A checkpoint taken on this session before the copy does
    /// nothing when rolled back to (`Session::rollback`).
    ///
    /// Errors, with this session unchanged: `ContextFull` when `src.position()` exceeds this
    /// session's capacity; `InvalidArgument` when `src` belongs to a model of another shape;
    /// `Unsupported` when `src` lost its recurrent state in a rollback; `OutOfMemory`.
    pub fn copy_from(&mut self, src: &Session) -> Result<()> {
        self.copy_prefix_from(src, src.pos)
    }

    /// Make this session hold `src`'s first `n` cached tokens: what `src` would hold after
    /// `truncate(n)` (the same points are allowed: any `n` ≤ `src.position()` for attention-only
    /// models; 0, the whole length or the last call's start with DeltaNet layers), without
    /// changing `src`. As `copy_from` otherwise; the last logits and hidden states are copied
    /// only for the whole length (they belong to its last call), else they are cleared.
    pub fn copy_prefix_from(&mut self, src: &Session, n: usize) -> Result<()> {
        if !self.kv.same_shape(&src.kv) || !self.rec.same_shape(&src.rec) {
            return Err(Error::InvalidArgument { reason: "the sessions belong to models of different shapes".into() });
        }
        let cut = src.cut(n)?;
        if n > self.n_ctx() {
            return Err(Error::ContextFull { cached: 0, new: n, n_ctx: self.n_ctx(), sequence: None });
        }
        let whole = matches!(cut, Cut::Whole);
        let none: &[f32] = &[];
        let logits = copied(if whole { &src.logits } else { none }, "copied logits")?;
        let hidden = copied(if whole { &src.hidden } else { none }, "copied hidden states")?;
        self.kv.reserve(n)?;
        // Nothing fails from here on.
        self.kv.copy_prefix(&src.kv, n);
        match cut {
            Cut::Whole => self.rec.copy_from(&src.rec),
            Cut::Start => self.rec.copy_start_from(&src.rec),
            Cut::Zero => {
                self.rec.zero();
                self.rec.begin_call();
            }
            Cut::Rows => {}
        }
        self.call_start_pos = if whole { src.call_start_pos } else { n };
        self.pos = n;
        self.rng = src.rng.clone();
        self.logits = logits;
        self.hidden = hidden;
        self.state_lost = false;
        // A checkpoint of this session taken before the copy no longer applies (`rollback`).
        self.copies += 1;
        if let Some(t) = self.trace.as_mut() {
            t.clear();
        }
        Ok(())
    }
}
