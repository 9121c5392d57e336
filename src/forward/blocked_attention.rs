//! Attention over a KV cache in blocks, on the path's GEMM micro-tile: MLA's attention over
//! its latent cache (`mla::attention`) and GQA's over one KV head (`gqa_attend`). For a block of
//! query rows of one sequence and a range of its cached positions, M = rows·heads queries at
//! once (MLA: every head of a row, absorbed; GQA: the query heads of one KV head):
//!
//! ```text
//! for each block of KC cached positions (at multiples of KC):
//!   K  = their keys, widened to f32      [KC, kw]   (MLA: latent + rope key; GQA: K of the head)
//!   V  = their values                    [KC, vw]   (MLA: each key row's leading rank values)
//!   S  = Q·Kᵀ · scale                    [M, KC]
//!   live columns: per query row, its own positions (causal limit, sliding window) in the range
//!   m' = max(m, rowmax S_live);  acc ×= e^(m − m');  sum ×= e^(m − m')
//!   P  = e^(S − m') where live, else 0;  sum += rowsum P;  acc += P·V           [M, vw]
//! ```
//!
//! Both products run on the path's GEMM micro-tile (`Table::tile`, MR queries × NR columns) over
//! panels packed from the block, so a cached block is widened and packed once per block of query
//! rows and each of its values meets MR queries from registers (`Floats`) — or, for a bf16 cache
//! in `Reduced` mode on a path with bf16 tiles (AMX), on those tiles over the stored bits, the
//! queries and the weights P rounded to bf16 (`bf16_attention`). Several ranges of one row's
//! positions (spread over threads) give partial results (`Partial`) merged with their maxima, as
//! in split-softmax attention; a sink logit (GPT-OSS) joins the merged denominator. Blocks sit at
//! multiples of KC whatever the range and every output is its own sum, so a row's result does
//! not depend on which rows share its block.

use super::bf16_attention::BfTiles;
use super::block_products::{round_up, Products};
pub(super) use super::block_products::{Cached, Queries};
use super::buffers::Buffers as Pool;
use crate::kernels::{Kernels, MR, NR};
use crate::session::KvCache;
use std::ops::Range;

/// The attention of a block's queries (M = rows·heads, row-major) over one range of cached
/// positions, unnormalised: per query the largest score `max`, `sum` = Σ_j e^(s_j − max) and
/// `acc` = Σ_j e^(s_j − max)·v_j ([M padded to MR, vw padded to NR]).
pub(super) struct Partial {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

/// Scratch of one `partial` call, sized for its queries.
struct Buffers {
    /// Queries padded to a multiple of MR, the key width, the value width and it padded to NR.
    mp: usize,
    kw: usize,
    vw: usize,
    vp: usize,
    /// The queries, padded with zero rows to a multiple of MR: [mp, kw].
    q: Vec<f32>,
    /// A block of cached keys widened to f32: [KC, kw] (rows no query attends to stay zero).
    rows: Vec<f32>,
    /// Its values [KC, vstride] (GQA; MLA's values are the key rows' leading vw values).
    vrows: Vec<f32>,
    /// Two packed panels: [2][kw, NR] (scores) or [2][KC, NR] (values).
    panel: Vec<f32>,
    /// Scores, then weights, of the block's first ks columns: [mp, ks] (ks ≤ KC).
    s: Vec<f32>,
}

impl Partial {
    /// Its buffers back to `pool`.
    pub(super) fn give_back(self, pool: &Pool) {
        [self.max, self.sum, self.acc].into_iter().for_each(|v| pool.give(v));
    }
}

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

/// The partial attention of `qs` over cached positions `pos` of `layer` (each row over its live
/// positions within `pos`), its buffers and scratch taken from `pool`: on the path's bf16 tiles
/// where it has them, the cache holds bf16 and activations are rounded (`Reduced`); otherwise on
/// its f32 micro-tile.
pub(super) fn partial(
    kern: &Kernels,
    pool: &Pool,
    kv: &KvCache,
    layer: usize,
    qs: &Queries<'_>,
    pos: Range<usize>,
) -> Partial {
    match BfTiles::of(kern, kv, layer, qs) {
        Some(tiles) => blocks(tiles, kern, pool, qs, pos),
        None => blocks(Floats::new(kern, pool, kv, layer, qs), kern, pool, qs, pos),
    }
}

/// The blocks of `pos` some query attends to, in order: load, scores, weights, values.
fn blocks<P: Products>(mut p: P, kern: &Kernels, pool: &Pool, qs: &Queries<'_>, pos: Range<usize>) -> Partial {
    let m = qs.live.len() * qs.heads;
    let (mut max, mut sum) = (pool.take(m), pool.take(m));
    max.fill(f32::NEG_INFINITY);
    sum.fill(0.0);
    // The positions of `pos` some row attends to.
    let lo = qs.live.iter().map(|r| r.start).min().unwrap_or(0).max(pos.start);
    let hi = qs.live.iter().map(|r| r.end).max().unwrap_or(0).min(pos.end);
    let mut j0 = lo / P::KC * P::KC;
    while j0 < hi {
        // Columns up to the block's last attended position, in whole panels: the ones past it
        // would only add zero weights.
        let ks = round_up(hi.min(j0 + P::KC) - j0, NR);
        p.load(j0, lo.max(j0)..hi.min(j0 + P::KC), ks);
        let (s, acc) = p.scores(ks);
        weigh(kern, s, ks, [&mut max, &mut sum, acc], qs, j0, &pos);
        p.values(ks);
        j0 += P::KC;
    }
    Partial { max, sum, acc: p.finish(pool) }
}

/// The f32 products: a block's rows widened to f32, the keys transposed into panels, each
/// product on the path's micro-tile (`Table::tile`, MR queries × NR columns).
struct Floats<'a> {
    kern: &'a Kernels,
    kv: &'a KvCache,
    layer: usize,
    from: Cached,
    b: Buffers,
    /// [mp, vp].
    acc: Vec<f32>,
}

impl<'a> Floats<'a> {
    fn new(kern: &'a Kernels, pool: &Pool, kv: &'a KvCache, layer: usize, qs: &Queries<'_>) -> Floats<'a> {
        let Queries { heads, kw, vw, .. } = *qs;
        let m = qs.live.len() * heads;
        let (mp, vp) = (round_up(m, MR), round_up(vw, NR));
        let gqa = matches!(qs.from, Cached::Head { .. });
        // rows, vrows, panel and s are written before they are read (`widen`, `scores`, `values`).
        let mut b = Buffers {
            mp,
            kw,
            vw,
            vp,
            q: pool.take(mp * kw),
            rows: pool.take(KC * kw),
            vrows: pool.take(if gqa { KC * vw } else { 0 }),
            panel: pool.take(2 * kw.max(KC) * NR),
            s: pool.take(mp * KC),
        };
        b.q[..m * kw].copy_from_slice(&qs.q[..m * kw]);
        b.q[m * kw..].fill(0.0);
        let mut acc = pool.take(mp * vp);
        acc.fill(0.0);
        Floats { kern, kv, layer, from: qs.from, b, acc }
    }
}

/// Cached rows per block of the f32 products (the k extent of the value product).
const KC: usize = 64;

impl Products for Floats<'_> {
    const KC: usize = KC;

    fn load(&mut self, j0: usize, js: Range<usize>, ks: usize) {
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
        scores(self.kern, &mut self.b, ks);
        (&mut self.b.s[..self.b.mp * ks], &mut self.acc)
    }

    fn values(&mut self, ks: usize) {
        values(self.kern, &mut self.b, ks, &mut self.acc, matches!(self.from, Cached::Head { .. }));
    }

    fn finish(self, pool: &Pool) -> Vec<f32> {
        let b = self.b;
        [b.q, b.rows, b.vrows, b.panel, b.s].into_iter().for_each(|v| pool.give(v));
        self.acc
    }
}

/// b.s = b.q·b.rows[..ks]ᵀ ([mp, ks]): per panel of NR cached rows, the rows transposed into
/// panel[d·NR + jj], then the tile for every MR queries.
fn scores(kern: &Kernels, b: &mut Buffers, ks: usize) {
    let (t, mp, kw) = (kern.table(), b.mp, b.kw);
    b.s[..mp * ks].fill(0.0);
    // Two panels at a time (`Table::tile2`), the last alone when ks / NR is odd.
    for p0 in (0..ks).step_by(2 * NR) {
        let count = ((ks - p0) / NR).min(2);
        for j in 0..count {
            let at = p0 + j * NR;
            (t.transpose)(&b.rows[at * kw..(at + NR) * kw], kw, NR, kw, &mut b.panel[j * kw * NR..(j + 1) * kw * NR]);
        }
        let (first, second) = b.panel[..2 * kw * NR].split_at(kw * NR);
        for i0 in (0..mp).step_by(MR) {
            let (q, s) = (&b.q[i0 * kw..(i0 + MR) * kw], &mut b.s[i0 * ks + p0..]);
            match count {
                2 => t.tile2(q, [first, second], kw, s, ks),
                _ => (t.tile)(q, first, kw, s, ks, NR),
            }
        }
    }
}

/// For each query, scale the block's live scores (its own positions within `pos`) and fold them
/// into its running maximum (the path's `scale_max`), rescaling `sum` and `acc`, then turn them
/// into weights e^(s − max) (its `exp_sum`; both vectorised, the same bits on every path); the
/// other columns (and padding queries) get weight 0.
fn weigh(
    kern: &Kernels,
    s: &mut [f32],
    ks: usize,
    [max, sum, acc]: [&mut [f32]; 3],
    qs: &Queries<'_>,
    j0: usize,
    pos: &Range<usize>,
) {
    let t = kern.table();
    let vp = round_up(qs.vw, NR);
    for (i, row) in s.chunks_exact_mut(ks).enumerate() {
        let Some(live) = qs.live.get(i / qs.heads) else {
            row.fill(0.0);
            continue;
        };
        let from = live.start.max(pos.start).max(j0);
        let to = live.end.min(pos.end).min(j0 + ks);
        if from >= to {
            row.fill(0.0);
            continue;
        }
        let (from, to) = (from - j0, to - j0);
        row[..from].fill(0.0);
        row[to..].fill(0.0);
        let cols = &mut row[from..to];
        let m = (t.scale_max)(cols, qs.scale, max[i]);
        if m > max[i] {
            let r = if max[i] == f32::NEG_INFINITY { 0.0 } else { (max[i] - m).exp() };
            sum[i] *= r;
            acc[i * vp..(i + 1) * vp].iter_mut().for_each(|a| *a *= r);
            max[i] = m;
        }
        sum[i] += (t.exp_sum)(cols, m);
    }
}

/// acc += b.s·V[..ks] ([mp, vp]; V: the GQA value rows, or MLA's key rows' leading vw values):
/// per panel of NR value columns, the block's columns packed into panel[k·NR + jj] (zero past
/// vw), then the tile for every MR queries.
fn values(kern: &Kernels, b: &mut Buffers, ks: usize, acc: &mut [f32], gqa: bool) {
    let (t, mp, vw, rp) = (kern.table(), b.mp, b.vw, b.vp);
    let (src, stride) = if gqa { (&b.vrows, vw) } else { (&b.rows, b.kw) };
    // Two panels of value columns at a time (`Table::tile2`), a last odd one alone.
    for d0 in (0..vw).step_by(2 * NR) {
        let count = (vw - d0).div_ceil(NR).min(2);
        for j in 0..count {
            let (d, panel) = (d0 + j * NR, &mut b.panel[j * ks * NR..(j + 1) * ks * NR]);
            let w = NR.min(vw - d);
            for (row, dst) in src[..ks * stride].chunks_exact(stride).zip(panel.chunks_exact_mut(NR)) {
                if w == NR {
                    // A whole panel row: a copy of known length (no library call per row).
                    dst.copy_from_slice(&row[d..d + NR]);
                } else {
                    dst[..w].copy_from_slice(&row[d..d + w]);
                    dst[w..].fill(0.0);
                }
            }
        }
        let (first, second) = b.panel[..2 * ks * NR].split_at(ks * NR);
        for i0 in (0..mp).step_by(MR) {
            let (s, a) = (&b.s[i0 * ks..(i0 + MR) * ks], &mut acc[i0 * rp + d0..]);
            match count {
                2 => t.tile2(s, [first, second], ks, a, rp),
                _ => (t.tile)(s, first, ks, a, rp, NR),
            }
        }
    }
}

/// out ([m, vw]) = the attention of a block's m queries: its partials (one per range of
/// positions, together covering the rows' live positions) merged by their maxima and normalised,
/// query i's `sink(i)` logit in the denominator (−∞: none).
pub(super) fn merge(parts: &[Partial], m: usize, vw: usize, out: &mut [f32], sink: impl Fn(usize) -> f32) {
    let rp = round_up(vw, NR);
    for (h, o) in out.chunks_exact_mut(vw).take(m).enumerate() {
        let sk = sink(h);
        let mx = parts.iter().fold(sk, |a, p| a.max(p.max[h]));
        o.fill(0.0);
        let mut sum = if sk > f32::NEG_INFINITY { (sk - mx).exp() } else { 0.0 };
        for p in parts.iter().filter(|p| p.max[h] > f32::NEG_INFINITY) {
            let r = (p.max[h] - mx).exp();
            sum += r * p.sum[h];
            o.iter_mut().zip(&p.acc[h * rp..h * rp + vw]).for_each(|(a, &x)| *a += r * x);
        }
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        o.iter_mut().for_each(|a| *a *= inv);
    }
}

#[cfg(test)]
pub(super) mod tests {
    //! The blocked, split form against the plain one (per head: every score, softmax, Σ p·c).

    use super::*;
    use crate::kernels::QuantActivations;
    use crate::model::Config;
    use crate::session::{KvDtype, Session, SessionOptions};

    /// 3 heads, latent 20 + rope 4 (neither a multiple of NR; heads not a multiple of MR).
    const CONFIG: &str = r#"{"family":"deepseek_v2","vocab_size":4,"hidden_size":8,"n_layers":1,"n_heads":3,
        "n_kv_heads":3,"head_dim":8,"rms_norm_eps":1e-5,"rope":{"theta":100.0,"interleaved":true},
        "max_position_embeddings":512,"attention_bias":false,"qk_norm":"none",
        "moe":{"n_experts":2,"top_k":1,"expert_ffn":4,"norm_topk_prob":false},"dense_ffn":0,
        "layers":[{"moe":true}],"tie_embeddings":true,"hidden_act":"silu","bos_token_id":null,
        "eos_token_ids":[],"pad_token_id":null,"scales":{"attention":0.3},
        "mla":{"q_lora_rank":0,"kv_lora_rank":20,"qk_nope_head_dim":4,"qk_rope_head_dim":4,"v_head_dim":3,
        "latent_norm_eps":1e-6}}"#;
    const HEADS: usize = 3;
    const RANK: usize = 20;
    const LAT: usize = 24;

    /// n pseudo-random values in [-2, 2) (also the GQA attention's tests').
    pub(in crate::forward) fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    /// The plain form over positions `pos` of the cache as it holds them (rows read back through
    /// the same widening, so half caches compare like for like).
    fn plain(kern: &Kernels, kv: &KvCache, q: &[f32], pos: Range<usize>) -> Vec<f32> {
        let mut out = vec![0f32; HEADS * RANK];
        for (h, o) in out.chunks_exact_mut(RANK).enumerate() {
            let mut s: Vec<f32> =
                pos.clone().map(|j| kv.k_dot(kern, 0, j, 0, &q[h * LAT..(h + 1) * LAT]) * 0.3).collect();
            crate::kernels::softmax(&mut s);
            for (j, &p) in pos.clone().zip(&s) {
                kv.latent_axpy(kern, 0, j, p, o);
            }
        }
        out
    }

    /// A session whose one layer caches n pseudo-random latent rows, in `dtype`.
    fn cached(c: &Config, n: usize, dtype: KvDtype) -> Session {
        let mut s = Session::new(c, &SessionOptions { n_ctx: n, kv_dtype: dtype, ..Default::default() }).unwrap();
        s.kv.reserve(n).unwrap();
        for (j, row) in values(n * LAT, 1).chunks_exact(LAT).enumerate() {
            s.kv.write(0, j, row, &[]);
        }
        s
    }

    /// Within tol·(1 + |want|) of the plain form's values.
    fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        for (g, w) in got.iter().zip(&want[..got.len()]) {
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: {got:?} vs {want:?}");
        }
    }

    /// The ways a block's products run, each with the cache dtypes it takes and how close it
    /// stays to the plain form (in f32 from the queries as given, or rounded to bf16 for the
    /// tiles): the f32 micro-tile of the generic path, and the bf16 tiles on the tile model
    /// (`Reduced` mode, bf16 caches) — whose rounded weights move an output by up to 2⁻⁸ of
    /// the largest value (|v| < 2).
    pub(in crate::forward) fn products() -> [(&'static str, Kernels, &'static [KvDtype], bool, f32); 2] {
        [
            (
                "f32 tile",
                Kernels::new(QuantActivations::Float),
                &[KvDtype::F32, KvDtype::BF16, KvDtype::F16],
                false,
                1e-5,
            ),
            ("bf16 tiles", crate::kernels::attend_model_kernels(), &[KvDtype::BF16], true, 8e-3),
        ]
    }

    /// q rounded to bf16 (what the tiles multiply) when `round`.
    pub(in crate::forward) fn as_multiplied(q: &[f32], round: bool) -> Vec<f32> {
        let r =
            |v: f32| if round { f32::from_bits(u32::from(crate::kernels::bf16act::round_bf16(v)) << 16) } else { v };
        q.iter().map(|&v| r(v)).collect()
    }

    #[test]
    fn blocked_split_attention_equals_the_plain_form() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        c.validate().unwrap();
        for (how, kern, dtypes, round, tol) in products() {
            for &dtype in dtypes {
                let s = cached(&c, 300, dtype);
                let q = values(HEADS * LAT, 2);
                // Range bounds: one range (several blocks, a short last one), a split in three, one position.
                let cases: [&[usize]; 3] = [&[5, 300], &[0, 7, 150, 299], &[42, 43]];
                for bounds in cases {
                    let ranges: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
                    let all = ranges[0].start..ranges[ranges.len() - 1].end;
                    let live = [all.clone()];
                    let qs = Queries {
                        q: &q,
                        live: &live,
                        heads: HEADS,
                        kw: LAT,
                        vw: RANK,
                        scale: 0.3,
                        from: Cached::Latent,
                    };
                    let parts: Vec<Partial> =
                        ranges.iter().map(|r| partial(&kern, &Pool::default(), &s.kv, 0, &qs, r.clone())).collect();
                    let mut got = vec![0f32; HEADS * RANK];
                    merge(&parts, HEADS, RANK, &mut got, |_| f32::NEG_INFINITY);
                    let want = plain(&kern, &s.kv, &as_multiplied(&q, round), all);
                    assert_close(&got, &want, tol, &format!("{how} {dtype:?} {ranges:?}"));
                }
            }
        }
    }

    #[test]
    fn query_blocks_with_ragged_limits_equal_the_plain_form_row_by_row() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        let cases = products().into_iter().flat_map(|(how, kern, dtypes, round, tol)| {
            dtypes.iter().filter(|&&d| d != KvDtype::F16).map(move |&d| (how, kern, d, round, tol))
        });
        for (how, kern, dtype, round, tol) in cases {
            let s = cached(&c, 300, dtype);
            // Prefill rows at positions 100.., causal; then the same rows with a sliding window of
            // 70 (starts off the block grid); then a chunk boundary at 128 inside the block.
            let causal: Vec<Range<usize>> = (100..107).map(|p| 0..p + 1).collect();
            let window: Vec<Range<usize>> = (100..107).map(|p| p + 1 - 70..p + 1).collect();
            let chunked: Vec<Range<usize>> = (125..131).map(|p| p / 128 * 128..p + 1).collect();
            for live in [causal, window, chunked] {
                let rows = live.len();
                let q = values(rows * HEADS * LAT, 3);
                let qs =
                    Queries { q: &q, live: &live, heads: HEADS, kw: LAT, vw: RANK, scale: 0.3, from: Cached::Latent };
                let lo = live.iter().map(|r| r.start).min().unwrap();
                let hi = live.iter().map(|r| r.end).max().unwrap();
                // Whole, and split in two ranges at a position off the block grid.
                for cut in [lo, lo + 37] {
                    let ranges: Vec<Range<usize>> =
                        [lo, cut, hi].windows(2).filter(|w| w[0] < w[1]).map(|w| w[0]..w[1]).collect();
                    let parts: Vec<Partial> =
                        ranges.iter().map(|r| partial(&kern, &Pool::default(), &s.kv, 0, &qs, r.clone())).collect();
                    let mut got = vec![0f32; rows * HEADS * RANK];
                    merge(&parts, rows * HEADS, RANK, &mut got, |_| f32::NEG_INFINITY);
                    for (t, r) in live.iter().enumerate() {
                        let (qt, gt) = (
                            &q[t * HEADS * LAT..(t + 1) * HEADS * LAT],
                            &got[t * HEADS * RANK..(t + 1) * HEADS * RANK],
                        );
                        assert_close(
                            gt,
                            &plain(&kern, &s.kv, &as_multiplied(qt, round), r.clone()),
                            tol,
                            &format!("{how} {dtype:?} row {t} {r:?} {ranges:?}"),
                        );
                        // The row alone over the same ranges: the same bits.
                        let one = Queries { q: qt, live: &live[t..t + 1], ..qs };
                        let parts: Vec<Partial> = ranges
                            .iter()
                            .map(|p| partial(&kern, &Pool::default(), &s.kv, 0, &one, p.clone()))
                            .collect();
                        let mut alone = vec![0f32; HEADS * RANK];
                        merge(&parts, HEADS, RANK, &mut alone, |_| f32::NEG_INFINITY);
                        assert_eq!(gt, &alone[..], "{how} {dtype:?} row {t}: its block changed its result");
                    }
                }
            }
        }
    }
}
