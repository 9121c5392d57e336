//! The recurrent state of a session's Gated DeltaNet layers (Qwen3-Next): per layer the conv's
//! last kernel-1 inputs and the delta-rule matrix of every value head, f32, allocated once with
//! the session. It stands for every token seen so far, so unlike a KV cache it cannot be cut
//! back to an arbitrary length: the state of the start of the last forward call is kept, in a
//! second buffer per layer, to undo that call (rollback, truncation to the call's start) — the
//! call writes its new state beside the old one instead of copying the old one first. Empty for
//! attention-only models.

use crate::error::{Error, Result};
use crate::model::{Config, LayerKind};

/// One DeltaNet layer's state.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerState {
    /// [kernel-1, conv_dim]: the conv inputs (q, k, v channels) of the last kernel-1 tokens,
    /// oldest first (zeros before the first token)
    pub conv: Vec<f32>,
    /// [n_v_heads, k_head_dim, v_head_dim]: S of the delta rule, out = Sᵀ·q
    pub delta: Vec<f32>,
}

/// The state of every DeltaNet layer of one sequence, double-buffered: per layer two
/// `LayerState`s, one holding the current state (`cur`) and one the state at the start of the
/// last forward call (`start`; the same buffer until the call first writes the layer). A call's
/// first write to a layer reads the start buffer and writes the other one (`layer_write`), later
/// writes update that one in place; nothing but `begin_call` ever makes a written buffer the
/// start. Undoing a call is then a flip of indices (`restore_start`), not a copy of the state.
#[derive(Clone, Debug, Default)]
pub struct RecurrentState {
    /// Per model layer: its index in `bufs`, for DeltaNet layers.
    slot: Vec<Option<usize>>,
    /// Per DeltaNet layer: its two buffers.
    bufs: Vec<[LayerState; 2]>,
    /// Per DeltaNet layer: the buffer (0 or 1) holding the current state.
    cur: Vec<usize>,
    /// Per DeltaNet layer: the buffer holding the state at the start of the last call.
    start: Vec<usize>,
}

/// Where a forward call writes one layer's new state.
pub struct LayerWrite<'a> {
    /// The state before the write when it is not in `to` (the call's first write to the layer:
    /// `to` holds stale values and must be overwritten whole); None: `to` holds it.
    pub from: Option<&'a LayerState>,
    pub to: &'a mut LayerState,
}

/// A copy of the current state of every DeltaNet layer (`RecurrentState::snapshot`).
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot(Vec<LayerState>);

fn zeros(len: usize) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    crate::fallible::reserve_exact(&mut v, len).map_err(|_| Error::OutOfMemory {
        what: "a DeltaNet recurrent state".into(),
        bytes: (len as u64).saturating_mul(4),
    })?;
    v.resize(len, 0.0);
    Ok(v)
}

impl RecurrentState {
    /// Zero state for config `c` (no layers for attention-only models), or `Error::OutOfMemory`.
    pub fn new(c: &Config) -> Result<RecurrentState> {
        let mut slot = Vec::with_capacity(c.n_layers);
        let mut bufs = Vec::new();
        for l in &c.layers {
            match (l.kind, c.delta_net) {
                (LayerKind::DeltaNet, Some(d)) => {
                    slot.push(Some(bufs.len()));
                    let one = || -> Result<LayerState> {
                        let conv = zeros((d.conv_kernel - 1) * d.conv_dim())?;
                        let delta = zeros(d.n_v_heads * d.k_head_dim * d.v_head_dim)?;
                        Ok(LayerState { conv, delta })
                    };
                    bufs.push([one()?, one()?]);
                }
                _ => slot.push(None),
            }
        }
        let n = bufs.len();
        Ok(RecurrentState { slot, bufs, cur: vec![0; n], start: vec![0; n] })
    }

    /// Whether there is any recurrent layer.
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// Where to write the new state of model layer `layer`, if it is a DeltaNet layer (see
    /// `LayerWrite`; from then on the written buffer is the current state).
    pub fn layer_write(&mut self, layer: usize) -> Option<LayerWrite<'_>> {
        let i = (*self.slot.get(layer)?)?;
        let (cur, start) = (self.cur[i], self.start[i]);
        let [b0, b1] = self.bufs.get_mut(i)?;
        if cur != start {
            return Some(LayerWrite { from: None, to: if cur == 0 { b0 } else { b1 } });
        }
        self.cur[i] = 1 - start;
        Some(if start == 0 { LayerWrite { from: Some(b0), to: b1 } } else { LayerWrite { from: Some(b1), to: b0 } })
    }

    /// The current state of the DeltaNet layers in layer order.
    pub(crate) fn current(&self) -> impl Iterator<Item = &LayerState> {
        self.bufs.iter().zip(&self.cur).map(|(b, &c)| &b[c])
    }

    /// Buffers to overwrite whole with a new current state, in layer order (the start
    /// buffers are kept).
    pub(crate) fn replace(&mut self) -> impl Iterator<Item = &mut LayerState> {
        for (c, &s) in self.cur.iter_mut().zip(&self.start) {
            *c = 1 - s;
        }
        self.bufs.iter_mut().zip(&self.cur).map(|(b, &c)| &mut b[c])
    }

    /// Back to the state before any token (the start of the last call is kept).
    pub fn zero(&mut self) {
        for l in self.replace() {
            l.conv.fill(0.0);
            l.delta.fill(0.0);
        }
    }

    /// A forward call starts: the current state becomes the one `restore_start` returns to.
    pub fn begin_call(&mut self) {
        self.start.copy_from_slice(&self.cur);
    }

    /// Back to the state at the start of the last call (no copy).
    pub fn restore_start(&mut self) {
        self.cur.copy_from_slice(&self.start);
    }

    /// A copy of the current state (for undoing several calls).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(self.current().cloned().collect())
    }

    /// Make `s` (a snapshot of this state's model) the current state, without allocating.
    pub fn restore(&mut self, s: &Snapshot) {
        for (a, b) in self.replace().zip(&s.0) {
            a.conv.copy_from_slice(&b.conv);
            a.delta.copy_from_slice(&b.delta);
        }
    }

    /// Make this state (of the same model: `same_shape`) hold what `src` holds — the current
    /// state and the state of the last call's start — copying each layer's one or two buffers in
    /// use, without allocating.
    pub fn copy_from(&mut self, src: &RecurrentState) {
        self.cur.copy_from_slice(&src.cur);
        self.start.copy_from_slice(&src.start);
        for ((to, from), (&c, &s)) in self.bufs.iter_mut().zip(&src.bufs).zip(src.cur.iter().zip(&src.start)) {
            for b in [c, s].into_iter().take(1 + usize::from(c != s)) {
                to[b].conv.copy_from_slice(&from[b].conv);
                to[b].delta.copy_from_slice(&from[b].delta);
            }
        }
    }

    /// Make the state of `src`'s last call start (of the same model) this state's current one
    /// and the start of its last call, without allocating.
    pub fn copy_start_from(&mut self, src: &RecurrentState) {
        let starts = src.bufs.iter().zip(&src.start).map(|(b, &s)| &b[s]);
        for (to, from) in self.replace().zip(starts) {
            to.conv.copy_from_slice(&from.conv);
            to.delta.copy_from_slice(&from.delta);
        }
        self.begin_call();
    }

    /// Whether `other` has this state's layers and sizes.
    pub fn same_shape(&self, other: &RecurrentState) -> bool {
        let shape = |r: &RecurrentState| r.current().map(|l| (l.conv.len(), l.delta.len())).collect::<Vec<_>>();
        self.slot == other.slot && shape(self) == shape(other)
    }

    /// Bytes of one state (f32 values of every layer; the session holds two buffers of it).
    pub fn bytes(&self) -> usize {
        self.current().map(|l| (l.conv.len() + l.delta.len()) * 4).sum()
    }

    /// Whether this state has the shape config `c` needs: a state of the right size for each
    /// DeltaNet layer, at the same layer indices.
    pub fn fits(&self, c: &Config) -> bool {
        let at_layers = self.slot.len() == c.layers.len()
            && self
                .slot
                .iter()
                .zip(&c.layers)
                .all(|(s, l)| s.is_some() == (l.kind == LayerKind::DeltaNet && c.delta_net.is_some()));
        match RecurrentState::shape_of(c) {
            Some(shape) => {
                at_layers && shape == self.current().map(|l| (l.conv.len(), l.delta.len())).collect::<Vec<_>>()
            }
            None => false,
        }
    }

    fn shape_of(c: &Config) -> Option<Vec<(usize, usize)>> {
        let per = c.delta_net.map(|d| ((d.conv_kernel - 1) * d.conv_dim(), d.n_v_heads * d.k_head_dim * d.v_head_dim));
        let n = c.n_delta_net_layers();
        match per {
            Some(p) => Some(vec![p; n]),
            None if n == 0 => Some(Vec::new()),
            None => None,
        }
    }
}
