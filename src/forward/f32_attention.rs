//! Blocked attention's products on the path's f32 micro-tile (`Table::tile`, MR rows × NR
//! columns) for any KV cache: the cached rows as they lie — an f32 cache's in place, a half
//! one's widened once per block — as the tile's A operand against the queries (transposed into
//! panels once per call) for the scores, and as its B operand for the values; nothing of a block
//! is transposed or packed. A query's result does not depend on which queries share its block.

use super::block_products::{round_up, Cached, Products, Queries};
use super::buffers::Buffers as Pool;
use crate::kernels::{Kernels, Operand, MR, NR};
use crate::session::KvCache;
use std::ops::Range;

impl Cached {
    /// keys[j − j0, ..kw] (and, for a GQA head, values[j − j0, ..vw]) = position j of `layer`
    /// as f32 for j in `js` (`KvCache::head_rows`: f32 caches copied, halves widened); the block's
    /// other rows are zero.
    #[allow(clippy::too_many_arguments)]
    fn widen(
        self,
        kern: &Kernels,
        kv: &KvCache,
        layer: usize,
        j0: usize,
        js: Range<usize>,
        keys: &mut [f32],
        kw: usize,
        values: &mut [f32],
        vw: usize,
    ) {
        let (a, b) = (js.start - j0, js.end - j0);
        keys[..a * kw].fill(0.0);
        keys[b * kw..].fill(0.0);
        match self {
            Cached::Latent => kv.head_rows(kern, layer, false, js, 0, &mut keys[a * kw..b * kw]),
            Cached::Head { kv_head } => {
                values[..a * vw].fill(0.0);
                values[b * vw..].fill(0.0);
                kv.head_rows(kern, layer, false, js.clone(), kv_head, &mut keys[a * kw..b * kw]);
                kv.head_rows(kern, layer, true, js, kv_head, &mut values[a * vw..b * vw]);
            }
        }
    }
}

/// The f32 products on the path's micro-tile (`Table::tile`, MR rows × NR columns), keys as the
/// tile's rows: S^T = K·Q^T with the queries transposed into panels once per call, so that a
/// block's cached rows are read where they lie — in place in an f32 cache, or widened from a
/// half one — and never transposed; then S = (S^T)^T, and acc += P·V with V's rows, again in
/// place, as the tile's B operand.
pub(super) struct Floats<'a> {
    kern: &'a Kernels,
    kv: &'a KvCache,
    layer: usize,
    from: Cached,
    /// The f32 cache's key and value rows from position 0 (at the KV head's offset; MLA: values
    /// are the key rows' leading vw values), or None: blocks are widened into `rows` / `vrows`.
    in_place: Option<[Operand<'a>; 2]>,
    /// The loaded block: its first position and its rows' span within it.
    j0: usize,
    span: Range<usize>,
    b: Buffers,
    /// [mp, vp].
    acc: Vec<f32>,
}

/// Scratch of one `Floats`, sized for its queries.
struct Buffers {
    /// Queries: m, padded to a multiple of MR (rows of the scores and accumulators) and of NR
    /// (columns of the transposed scores); the key width, the value width and it padded to NR.
    m: usize,
    mp: usize,
    mq: usize,
    kw: usize,
    vw: usize,
    vp: usize,
    /// The queries transposed into panels, zero past m: [mq / NR][kw, NR].
    qt: Vec<f32>,
    /// A block widened to f32 from a half cache: keys [KC, kw] (rows no query attends to stay
    /// zero) and, for a GQA head, values [KC, vw]; empty for an f32 cache.
    rows: Vec<f32>,
    vrows: Vec<f32>,
    /// Up to MR key rows of a block too short for a whole group, padded with zero rows [MR, kw].
    edge: Vec<f32>,
    /// Transposed scores of a block's positions: [KC + MR, mq].
    st: Vec<f32>,
    /// A last value panel narrower than NR, packed: [KC, NR].
    panel: Vec<f32>,
    /// Scores, then weights, of the block's first ks positions: [mp, ks] (ks ≤ KC).
    s: Vec<f32>,
}

impl<'a> Floats<'a> {
    pub(super) fn new(kern: &'a Kernels, pool: &Pool, kv: &'a KvCache, layer: usize, qs: &Queries<'_>) -> Floats<'a> {
        let Queries { heads, kw, vw, .. } = *qs;
        let m = qs.live.len() * heads;
        let (mp, mq, vp) = (round_up(m, MR), round_up(m, NR), round_up(vw, NR));
        let in_place = kv.f32_rows(layer, false).and_then(|(k, kld)| {
            let keys = Operand::new(k, kld);
            match qs.from {
                Cached::Latent => Some([keys, keys]),
                Cached::Head { kv_head } => {
                    let (v, vld) = kv.f32_rows(layer, true)?;
                    Some([keys.at(0, kv_head * kw), Operand::new(v, vld).at(0, kv_head * vw)])
                }
            }
        });
        let widen = |len: usize| pool.take(if in_place.is_some() { 0 } else { len });
        let gqa = matches!(qs.from, Cached::Head { .. });
        // rows, vrows, edge, st, panel and s are written before they are read (`load`, `scores`,
        // `values`).
        let mut b = Buffers {
            m,
            mp,
            mq,
            kw,
            vw,
            vp,
            qt: pool.take(mq * kw),
            rows: widen(KC * kw),
            vrows: widen(if gqa { KC * vw } else { 0 }),
            edge: pool.take(MR * kw),
            st: pool.take((KC + MR) * mq),
            panel: pool.take(KC * NR),
            s: pool.take(mp * KC),
        };
        // Whole panels straight from the queries; a last one with fewer than NR through a copy
        // padded with zero rows.
        for (p, panel) in b.qt.chunks_exact_mut(kw * NR).enumerate() {
            let rows = &qs.q[p * NR * kw..m.min((p + 1) * NR) * kw];
            if rows.len() == NR * kw {
                (kern.table().transpose)(rows, kw, NR, kw, panel);
            } else {
                let mut q = pool.take(NR * kw);
                q[..rows.len()].copy_from_slice(rows);
                q[rows.len()..].fill(0.0);
                (kern.table().transpose)(&q, kw, NR, kw, panel);
                pool.give(q);
            }
        }
        let mut acc = pool.take(mp * vp);
        acc.fill(0.0);
        Floats { kern, kv, layer, from: qs.from, in_place, j0: 0, span: 0..0, b, acc }
    }

    /// The block's key rows (values: `value`) from its row r on, column `col` on: in place, or
    /// the widened block's.
    fn rows(&self, value: bool, r: usize, col: usize) -> Operand<'_> {
        let b = &self.b;
        match self.in_place {
            Some(kv) => kv[usize::from(value)].at(self.j0 + r, col),
            None if value && matches!(self.from, Cached::Head { .. }) => Operand::new(&b.vrows, b.vw).at(r, col),
            None => Operand::new(&b.rows, b.kw).at(r, col),
        }
    }
}

/// Cached rows per block of the f32 products (the k extent of the value product).
const KC: usize = 64;

impl Products for Floats<'_> {
    const KC: usize = KC;

    fn load(&mut self, j0: usize, js: Range<usize>, ks: usize) {
        (self.j0, self.span) = (j0, js.start - j0..js.end - j0);
        if self.in_place.is_some() {
            return;
        }
        let (b, gqa) = (&mut self.b, matches!(self.from, Cached::Head { .. }));
        let vlen = if gqa { ks * b.vw } else { 0 };
        self.from.widen(
            self.kern,
            self.kv,
            self.layer,
            j0,
            js,
            &mut b.rows[..ks * b.kw],
            b.kw,
            &mut b.vrows[..vlen],
            b.vw,
        );
    }

    fn scores(&mut self, ks: usize) -> (&mut [f32], &mut [f32]) {
        let (mut st, mut edge) = (std::mem::take(&mut self.b.st), std::mem::take(&mut self.b.edge));
        scores(self, &mut st, &mut edge);
        let b = &mut self.b;
        // S = (S^T)^T: rows outside the span carry what the buffer held; `weigh` zeroes them.
        (self.kern.table().transpose)(&st, b.mq, ks, b.m, &mut b.s[..b.m * ks]);
        (b.st, b.edge) = (st, edge);
        (&mut b.s[..b.mp * ks], &mut self.acc)
    }

    fn values(&mut self, ks: usize) {
        let (mut acc, mut panel) = (std::mem::take(&mut self.acc), std::mem::take(&mut self.b.panel));
        values(self, ks, &mut acc, &mut panel);
        (self.acc, self.b.panel) = (acc, panel);
    }

    fn finish(self, pool: &Pool) -> Vec<f32> {
        let b = self.b;
        [b.qt, b.rows, b.vrows, b.edge, b.st, b.panel, b.s].into_iter().for_each(|v| pool.give(v));
        self.acc
    }
}

/// st[r·mq + i] = the block's key row r · query i for the rows r of its span, MR rows at a time
/// (a last group ends at the span's end, overlapping the one before it: the same sums again),
/// against two query panels at a time (`Table::tile2`), the last alone when their count is odd.
/// A group reaching past an in-place cache's allocated rows (a span shorter than MR) is copied
/// into `edge`, zero past the span, first.
fn scores(f: &Floats<'_>, st: &mut [f32], edge: &mut [f32]) {
    let (t, b, span) = (f.kern.table(), &f.b, f.span.clone());
    let (kw, mq) = (b.kw, b.mq);
    let whole = span.len() / MR;
    let last = (span.len() % MR != 0).then(|| span.end.saturating_sub(MR));
    for r0 in (0..whole).map(|g| span.start + g * MR).chain(last) {
        let mut keys = f.rows(false, r0, 0);
        if !keys.holds(MR, kw) {
            edge.fill(0.0);
            for r in span.start.max(r0)..span.end {
                edge[(r - r0) * kw..(r - r0 + 1) * kw].copy_from_slice(&keys.v[(r - r0) * keys.ld..][..kw]);
            }
            keys = Operand::new(edge, kw);
        }
        // The tile adds to its outputs: the group's rows start from zero (again, for an
        // overlapping last group).
        st[r0 * mq..(r0 + MR) * mq].fill(0.0);
        let panel = |p: usize| Operand::new(&b.qt[p * kw * NR..(p + 1) * kw * NR], NR);
        let panels = mq / NR;
        for p in (0..panels).step_by(2) {
            let c = &mut st[r0 * mq + p * NR..];
            match p + 1 < panels {
                true => t.tile2(keys, [panel(p), panel(p + 1)], kw, c, mq),
                false => (t.tile)(keys, panel(p), kw, c, mq, NR),
            }
        }
    }
}

/// acc += S·V over the block's span ([mp, vp]; S: the weights `weigh` left, V: the GQA value
/// rows, or MLA's key rows' leading vw values): whole panels of NR value columns read in place
/// as the tile's B operand, two at a time (`Table::tile2`); a last narrower panel packed into
/// `panel` [span, NR], zero past vw.
fn values(f: &Floats<'_>, ks: usize, acc: &mut [f32], panel: &mut [f32]) {
    let (t, b, span) = (f.kern.table(), &f.b, f.span.clone());
    let (mp, vw, vp, kc) = (b.mp, b.vw, b.vp, span.len());
    if kc == 0 {
        return;
    }
    let weights = |i0: usize| Operand::new(&b.s[i0 * ks + span.start..mp * ks], ks);
    let mut d0 = 0;
    while d0 < vw {
        let count = match vw - d0 {
            w if w >= 2 * NR => 2,
            w if w >= NR => 1,
            _ => 0,
        };
        let vs = [f.rows(true, span.start, d0), f.rows(true, span.start, d0 + NR)];
        if count == 0 {
            let w = vw - d0;
            for (r, dst) in panel.chunks_exact_mut(NR).take(kc).enumerate() {
                dst[..w].copy_from_slice(&vs[0].v[r * vs[0].ld..][..w]);
                dst[w..].fill(0.0);
            }
        }
        for i0 in (0..mp).step_by(MR) {
            let a = &mut acc[i0 * vp + d0..];
            match count {
                2 => t.tile2(weights(i0), vs, kc, a, vp),
                1 => (t.tile)(weights(i0), vs[0], kc, a, vp, NR),
                _ => (t.tile)(weights(i0), Operand::new(panel, NR), kc, a, vp, NR),
            }
        }
        d0 += NR * count.max(1);
    }
}
