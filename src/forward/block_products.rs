//! What blocked attention's two ways of computing a block share (`blocked_attention`: f32
//! micro-tiles; `bf16_attention`: bf16 tiles): the queries of a block of rows, where its keys and
//! values come from, and the products' interface.

use super::buffers::Buffers as Pool;
use std::ops::Range;

/// Where a block's keys and values come from: MLA's latent rows (keys: the whole cached row;
/// values: its leading vw values), or one KV head of a GQA cache (K and V rows).
#[derive(Clone, Copy, Debug)]
pub(super) enum Cached {
    Latent,
    Head { kv_head: usize },
}

/// A block of query rows of one sequence: queries [rows, heads, kw], the cached positions each
/// row attends to, the key width `kw`, the value width `vw`, the score scale and where keys and
/// values come from.
pub(super) struct Queries<'a> {
    pub q: &'a [f32],
    pub live: &'a [Range<usize>],
    pub heads: usize,
    pub kw: usize,
    pub vw: usize,
    pub scale: f32,
    pub from: Cached,
}

/// How a block of cached positions meets the queries: f32 micro-tiles over rows widened from any
/// cache (`Floats`), or bf16 tiles over a bf16 cache's rows as stored (`BfTiles`).
pub(super) trait Products {
    /// Cached positions per block (blocks sit at its multiples).
    const KC: usize;
    /// Read block j0's rows `js` (the block's other rows count as zero); ks scores per query.
    fn load(&mut self, j0: usize, js: Range<usize>, ks: usize);
    /// The block's scores [mp, ks] = q·kᵀ (unscaled; mp: the queries padded to the products'
    /// row multiple), and the accumulators ([mp, vw padded to NR]).
    fn scores(&mut self, ks: usize) -> (&mut [f32], &mut [f32]);
    /// acc += weights·V, the weights being the scores as `weigh` left them.
    fn values(&mut self, ks: usize);
    /// The accumulators, in a buffer of `pool`'s; the others back to it.
    fn finish(self, pool: &Pool) -> Vec<f32>;
}

/// x rounded up to a multiple of m.
pub(super) fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}
