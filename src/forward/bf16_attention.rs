//! Blocked attention's products on the path's bf16 tiles (`Table::attend`: AMX) for a KV cache
//! held in bf16, in `Reduced` mode: the cached keys and values meet the queries and the softmax
//! weights as stored — bf16, moved into tile order (`kernels::attend_tiles`), never widened —
//! while the queries and the weights are rounded to bf16 as every activation meeting bf16 weights
//! is (scores and the weights' sums stay f32: `blocked_attention::weigh`). A query's result does
//! not depend on which queries share its tiles; prefill and decode (MLA's) take the same
//! products.

use super::block_products::{round_up, Cached, Products, Queries};
use super::buffers::Buffers as Pool;
use crate::kernels::attend_tiles::{pack_keys, round_rows, scratch, Aligned, ROWS, STEP};
use crate::kernels::{AttendTiles, CachedRows, Kernels, QuantActivations, TransposeFn, NR};
use crate::session::KvCache;
use std::ops::Range;

/// Cached positions per block.
const KC: usize = 128;
const _: () = assert!(KC.is_multiple_of(STEP) && NR == ROWS);

/// A partial's products on tiles: the rounded queries, a block's keys and values in tile order,
/// its scores and rounded weights, the accumulators — all on cache lines (`Aligned`). Widths:
/// kw (kwp: padded to STEP), vw (vwp: to ROWS); mp queries padded to ROWS.
pub(super) struct BfTiles<'a> {
    tiles: AttendTiles,
    transpose: TransposeFn,
    /// Key rows from position 0 (at the KV head's offset) and the distance between two; the
    /// same for values (MLA: the key rows, whose leading vw values are the values).
    keys: (&'a [u16], usize),
    values: (&'a [u16], usize),
    kw: usize,
    kwp: usize,
    vw: usize,
    vwp: usize,
    mp: usize,
    /// [mp, kwp] bf16.
    q: Aligned,
    /// [ks / 16][kwp / 2][16] and [ksp / 2][vwp] u32: the block's keys and values in tile order.
    kt: Aligned,
    vt: Aligned,
    /// [mp, ks] f32 scores, then weights; [mp, ksp] the weights rounded.
    s: Aligned,
    p: Aligned,
    /// [mp, vwp] f32.
    acc: Aligned,
}

impl<'a> BfTiles<'a> {
    /// The tiled products for `qs` over `layer` of `kv`, when the path has them, the activations
    /// are rounded and the cache holds bf16; None otherwise.
    pub(super) fn of(kern: &Kernels, kv: &'a KvCache, layer: usize, qs: &Queries<'_>) -> Option<Self> {
        let tiles = kern.table().attend.filter(|_| kern.act() == QuantActivations::Reduced)?;
        let from = |(bits, stride): (&'a [u16], usize), offset: usize| (bits.get(offset..).unwrap_or(&[]), stride);
        let k = kv.bf16_rows(layer, false)?;
        let (keys, values) = match qs.from {
            Cached::Latent => (k, k),
            Cached::Head { kv_head } => (from(k, kv_head * qs.kw), from(kv.bf16_rows(layer, true)?, kv_head * qs.vw)),
        };
        let (m, kw, vw) = (qs.live.len() * qs.heads, qs.kw, qs.vw);
        let (mp, kwp, vwp) = (round_up(m, ROWS), round_up(kw, STEP), round_up(vw, ROWS));
        let (mut q, mut acc) = (scratch::take(), scratch::take());
        round_rows(&qs.q[..m * kw], kw, kwp, q.slice_mut(mp * kwp));
        acc.slice_mut::<f32>(mp * vwp).fill(0.0);
        let (kt, vt, s, p) = (scratch::take(), scratch::take(), scratch::take(), scratch::take());
        Some(BfTiles {
            tiles,
            transpose: kern.table().transpose,
            keys,
            values,
            kw,
            kwp,
            vw,
            vwp,
            mp,
            q,
            kt,
            vt,
            s,
            p,
            acc,
        })
    }
}

/// The rows of the block at j0 of a cache's (bits from position 0, stride apart), `live` of them
/// read.
fn block<'c>((bits, stride): (&'c [u16], usize), j0: usize, live: &Range<usize>) -> CachedRows<'c> {
    CachedRows { bits: &bits[j0 * stride..], stride, live: live.clone() }
}

impl Products for BfTiles<'_> {
    const KC: usize = KC;

    fn load(&mut self, j0: usize, js: Range<usize>, ks: usize) {
        let live = js.start - j0..js.end - j0;
        let kt = self.kt.slice_mut(ks * self.kwp / 2);
        pack_keys(self.transpose, block(self.keys, j0, &live), self.kw, self.kwp, ks, kt);
        let ksp = round_up(ks, STEP);
        let vt = self.vt.slice_mut(ksp / 2 * self.vwp);
        (self.tiles.pack_values)(block(self.values, j0, &live), self.vw, self.vwp, ksp, vt);
    }

    fn scores(&mut self, ks: usize) -> (&mut [f32], &mut [f32]) {
        let s = self.s.slice_mut(self.mp * ks);
        let (q, kt) = (self.q.slice(self.mp * self.kwp), self.kt.slice(ks * self.kwp / 2));
        (self.tiles.scores)(q, self.kwp, kt, ks, s);
        (s, self.acc.slice_mut(self.mp * self.vwp))
    }

    fn values(&mut self, ks: usize) {
        let ksp = round_up(ks, STEP);
        let p = self.p.slice_mut(self.mp * ksp);
        round_rows(self.s.slice(self.mp * ks), ks, ksp, p);
        let vt = self.vt.slice(ksp / 2 * self.vwp);
        (self.tiles.values)(p, ksp, vt, self.vwp, self.acc.slice_mut(self.mp * self.vwp));
    }

    fn finish(self, pool: &Pool) -> Vec<f32> {
        let mut acc = pool.take(self.mp * self.vwp);
        acc.copy_from_slice(self.acc.slice(self.mp * self.vwp));
        scratch::give([self.q, self.kt, self.vt, self.s, self.p, self.acc]);
        acc
    }
}
