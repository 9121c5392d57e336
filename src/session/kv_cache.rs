//! The KV cache: per layer the cached K and V rows of every position, in f32, f16 or bf16,
//! allocated as positions are used, and the readers attention takes them through.

use super::KvDtype;
use crate::error::{Error, Result};
use crate::kernels::Kernels;
use crate::model::{Config, LayerKind};

pub(super) enum Store {
    F32(Vec<f32>),
    Half { bits: Vec<u16>, bf16: bool },
}

impl Store {
    fn empty(dtype: KvDtype) -> Store {
        match dtype {
            KvDtype::F32 => Store::F32(Vec::new()),
            KvDtype::F16 => Store::Half { bits: Vec::new(), bf16: false },
            KvDtype::BF16 => Store::Half { bits: Vec::new(), bf16: true },
        }
    }

    /// Grow to `len` elements (zeros), or fail without aborting when the memory is not there.
    fn grow(&mut self, len: usize) -> std::result::Result<(), std::collections::TryReserveError> {
        match self {
            Store::F32(d) => {
                crate::fallible::reserve_exact(d, len.saturating_sub(d.len()))?;
                d.resize(len.max(d.len()), 0.0);
            }
            Store::Half { bits, .. } => {
                crate::fallible::reserve_exact(bits, len.saturating_sub(bits.len()))?;
                bits.resize(len.max(bits.len()), 0);
            }
        }
        Ok(())
    }

    /// Set element `i` (allocated) to `x`, rounded to the store's type.
    pub(super) fn set(&mut self, i: usize, x: f32) {
        match self {
            Store::F32(d) => d[i] = x,
            Store::Half { bits, bf16: true } => bits[i] = half::bf16::from_f32(x).to_bits(),
            Store::Half { bits, bf16: false } => bits[i] = half::f16::from_f32(x).to_bits(),
        }
    }

    pub(super) fn bytes_per_element(&self) -> usize {
        match self {
            Store::F32(_) => 4,
            Store::Half { .. } => 2,
        }
    }
}

/// K and V of every layer: per layer [positions][k_row] and [positions][v_row] (n_kv_heads ·
/// head_dim each; under MLA the K row is [latent (kv_lora_rank), rope key (qk_rope_head_dim)]
/// and there is no V row), allocated as positions are used (`reserve`, fallible) and never past
/// n_ctx: a session costs what it holds, and a large context is a limit, not an allocation.
pub struct KvCache {
    pub(super) k: Vec<Store>,
    pub(super) v: Vec<Store>,
    /// Per layer: whether it caches K/V (attention layers; DeltaNet layers keep none).
    pub(super) attends: Vec<bool>,
    pub(super) n_ctx: usize,
    /// Values per position in a layer's K store.
    pub(super) row: usize,
    /// Values per position in a layer's V store.
    pub(super) v_row: usize,
    /// Positions allocated in every layer's K and V.
    pub(super) held: usize,
}

impl KvCache {
    pub(super) fn new(c: &Config, n_ctx: usize, dtype: KvDtype) -> Result<KvCache> {
        let (row, v_row) = c.kv_row_widths();
        n_ctx
            .checked_mul(row.max(v_row))
            .and_then(|x| x.checked_mul(4))
            .ok_or_else(|| Error::InvalidArgument { reason: format!("context {n_ctx} is too large") })?;
        let stores = || (0..c.n_layers).map(|_| Store::empty(dtype)).collect();
        let attends = c.layers.iter().map(|l| l.kind == LayerKind::Attention).collect();
        Ok(KvCache { k: stores(), v: stores(), attends, n_ctx, row, v_row, held: 0 })
    }

    /// Make room for `positions` positions (≤ n_ctx) in every layer, growing geometrically.
    /// Fails with `Error::OutOfMemory` — and changes nothing a reader can see — when the memory
    /// cannot be had.
    pub(crate) fn reserve(&mut self, positions: usize) -> Result<()> {
        let positions = positions.min(self.n_ctx);
        if positions <= self.held {
            return Ok(());
        }
        let doubled = self.held.saturating_mul(2).clamp(positions, self.n_ctx);
        if self.grow_to(doubled).is_err() && self.grow_to(positions).is_err() {
            let element = self.k.first().map_or(4, Store::bytes_per_element) as u64;
            let bytes = [self.caching_layers() as u64, (self.row + self.v_row) as u64, element, positions as u64]
                .into_iter()
                .fold(1u64, u64::saturating_mul);
            return Err(Error::OutOfMemory { what: format!("a KV cache of {positions} positions"), bytes });
        }
        Ok(())
    }

    fn grow_to(&mut self, positions: usize) -> std::result::Result<(), std::collections::TryReserveError> {
        for ((k, v), _) in self.k.iter_mut().zip(self.v.iter_mut()).zip(&self.attends).filter(|(_, &a)| a) {
            k.grow(positions * self.row)?;
            v.grow(positions * self.v_row)?;
        }
        self.held = positions;
        Ok(())
    }

    /// Layers that cache K and V.
    pub(super) fn caching_layers(&self) -> usize {
        self.attends.iter().filter(|&&a| a).count()
    }

    /// Store K and V rows ([k_row] and [v_row]; under MLA v is empty) of `layer` at `pos`
    /// (< the reserved positions).
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        for (store, src, row) in [(&mut self.k[layer], k, self.row), (&mut self.v[layer], v, self.v_row)] {
            let at = pos * row;
            match store {
                Store::F32(d) => d[at..at + row].copy_from_slice(src),
                // bf16: `round_bf16`, vectorised where the CPU allows (half's rounding, bit for bit:
                // bf16act's tests).
                Store::Half { bits, bf16: true } => crate::kernels::bf16act::round_slice(src, &mut bits[at..at + row]),
                Store::Half { bits, bf16: false } => {
                    for (b, &x) in bits[at..at + row].iter_mut().zip(src) {
                        *b = half::f16::from_f32(x).to_bits();
                    }
                }
            }
        }
    }

    /// Dot product of `q` (length head_dim) with cached K of (layer, pos, kv_head).
    #[inline]
    pub fn k_dot(&self, k: &Kernels, layer: usize, pos: usize, kv_head: usize, q: &[f32]) -> f32 {
        let at = pos * self.row + kv_head * q.len();
        match &self.k[layer] {
            Store::F32(d) => k.dot_f32(&d[at..at + q.len()], q),
            Store::Half { bits, bf16: true } => k.dot_bf16(&bits[at..at + q.len()], q),
            Store::Half { bits, bf16: false } => k.dot_f16(&bits[at..at + q.len()], q),
        }
    }

    /// out += p · K(layer, pos, kv_head).
    #[inline]
    pub fn k_axpy(&self, k: &Kernels, layer: usize, pos: usize, kv_head: usize, p: f32, out: &mut [f32]) {
        Self::axpy(k, &self.k[layer], pos * self.row + kv_head * out.len(), p, out);
    }

    /// out += p · V(layer, pos, kv_head).
    #[inline]
    pub fn v_axpy(&self, k: &Kernels, layer: usize, pos: usize, kv_head: usize, p: f32, out: &mut [f32]) {
        Self::axpy(k, &self.v[layer], pos * self.v_row + kv_head * out.len(), p, out);
    }

    /// out += p · the leading out.len() values of the K row of (layer, pos): the MLA latent.
    #[inline]
    pub fn latent_axpy(&self, k: &Kernels, layer: usize, pos: usize, p: f32, out: &mut [f32]) {
        Self::axpy(k, &self.k[layer], pos * self.row, p, out);
    }

    /// out[r·w..(r + 1)·w] = K (`value` false) or V of (layer, js.start + r, kv_head) as f32,
    /// w = out.len() / js.len() (MLA's latent: kv_head 0 and w the K row): a block of one head's
    /// cached rows for the blocked attention, f32 stores copied and halves widened.
    pub(crate) fn head_rows(
        &self,
        k: &Kernels,
        layer: usize,
        value: bool,
        js: std::ops::Range<usize>,
        kv_head: usize,
        out: &mut [f32],
    ) {
        let (store, row) = self.store(layer, value);
        let w = out.len() / js.len().max(1);
        for (o, pos) in out.chunks_exact_mut(w.max(1)).zip(js) {
            let at = pos * row + kv_head * w;
            match store {
                Store::F32(d) => o.copy_from_slice(&d[at..at + w]),
                Store::Half { .. } => {
                    o.fill(0.0);
                    Self::axpy(k, store, at, 1.0, o);
                }
            }
        }
    }

    /// Layer `layer`'s K rows (V rows when `value`) as stored, with the distance between two
    /// positions' rows, when the cache holds bf16 (every position up to `reserved()` allocated).
    pub(crate) fn bf16_rows(&self, layer: usize, value: bool) -> Option<(&[u16], usize)> {
        match self.store(layer, value) {
            (Store::Half { bits, bf16: true }, row) => Some((bits, row)),
            _ => None,
        }
    }

    /// The same for an f32 cache.
    pub(crate) fn f32_rows(&self, layer: usize, value: bool) -> Option<(&[f32], usize)> {
        match self.store(layer, value) {
            (Store::F32(d), row) => Some((d, row)),
            _ => None,
        }
    }

    /// Layer `layer`'s K store (V when `value`) and its values per position.
    fn store(&self, layer: usize, value: bool) -> (&Store, usize) {
        if value {
            (&self.v[layer], self.v_row)
        } else {
            (&self.k[layer], self.row)
        }
    }

    #[inline]
    fn axpy(k: &Kernels, store: &Store, at: usize, p: f32, out: &mut [f32]) {
        match store {
            Store::F32(d) => k.axpy_f32(p, &d[at..at + out.len()], out),
            Store::Half { bits, bf16: true } => k.axpy_bf16(p, &bits[at..at + out.len()], out),
            Store::Half { bits, bf16: false } => k.axpy_f16(p, &bits[at..at + out.len()], out),
        }
    }

    /// Capacity in tokens.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Positions whose memory is allocated (grows with use up to n_ctx).
    pub fn reserved(&self) -> usize {
        self.held
    }

    /// Whether this cache has the shape config `c` needs (layers, which of them attend, and K/V
    /// row widths).
    pub fn fits(&self, c: &Config) -> bool {
        (self.row, self.v_row) == c.kv_row_widths()
            && self.k.len() == c.n_layers
            && self.attends.iter().zip(&c.layers).all(|(&a, l)| a == (l.kind == LayerKind::Attention))
    }
}
