//! The recurrent state of a session's Gated DeltaNet layers (Qwen3-Next): per layer the conv's
//! last kernel-1 inputs and the delta-rule matrix of every value head, f32, allocated once with
//! the session. It stands for every token seen so far, so unlike a KV cache it cannot be cut
//! back to an arbitrary length: `Session` keeps a copy taken at the start of each forward call
//! to undo that call (rollback, truncation to the call's start). Empty for attention-only models.

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

/// The state of every DeltaNet layer of one sequence.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RecurrentState {
    /// Per model layer: its index in `layers`, for DeltaNet layers.
    slot: Vec<Option<usize>>,
    layers: Vec<LayerState>,
}

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
        let mut layers = Vec::new();
        for l in &c.layers {
            match (l.kind, c.delta_net) {
                (LayerKind::DeltaNet, Some(d)) => {
                    slot.push(Some(layers.len()));
                    let conv = zeros((d.conv_kernel - 1) * d.conv_dim())?;
                    let delta = zeros(d.n_v_heads * d.k_head_dim * d.v_head_dim)?;
                    layers.push(LayerState { conv, delta });
                }
                _ => slot.push(None),
            }
        }
        Ok(RecurrentState { slot, layers })
    }

    /// Whether there is any recurrent layer.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The state of model layer `layer`, if it is a DeltaNet layer.
    pub fn layer_mut(&mut self, layer: usize) -> Option<&mut LayerState> {
        let i = (*self.slot.get(layer)?)?;
        self.layers.get_mut(i)
    }

    /// The DeltaNet layers' states in layer order.
    pub(crate) fn all(&self) -> &[LayerState] {
        &self.layers
    }

    pub(crate) fn all_mut(&mut self) -> &mut [LayerState] {
        &mut self.layers
    }

    /// Back to the state before any token.
    pub fn zero(&mut self) {
        for l in &mut self.layers {
            l.conv.fill(0.0);
            l.delta.fill(0.0);
        }
    }

    /// Become a copy of `other` (same shape: same model), without allocating.
    pub fn copy_from(&mut self, other: &RecurrentState) {
        for (a, b) in self.layers.iter_mut().zip(&other.layers) {
            a.conv.copy_from_slice(&b.conv);
            a.delta.copy_from_slice(&b.delta);
        }
    }

    /// Bytes held (f32 values of every layer).
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| (l.conv.len() + l.delta.len()) * 4).sum()
    }

    /// Whether this state has the shape config `c` needs.
    pub fn fits(&self, c: &Config) -> bool {
        match RecurrentState::shape_of(c) {
            Some(shape) => shape == self.layers.iter().map(|l| (l.conv.len(), l.delta.len())).collect::<Vec<_>>(),
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
