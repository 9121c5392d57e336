//! MLA's attention over the latent cache (the inner step of `mla::attention`), blocked. For a
//! block of query rows of one sequence and a range of its cached positions, every head of every
//! row at once (M = rows·heads absorbed queries):
//!
//! ```text
//! for each block of KC cached rows C ([KC, rank + rope], widened to f32 once), at multiples of KC:
//!   S  = Q·Cᵀ · scale                     [M, KC]    (Q: absorbed queries [M, rank + rope])
//!   live columns: per query row, its own positions (causal limit, sliding window) in the range
//!   m' = max(m, rowmax S_live);  acc ×= e^(m − m');  sum ×= e^(m − m')
//!   P  = e^(S − m') where live, else 0;  sum += rowsum P;  acc += P·C[:, ..rank]      [M, rank]
//! ```
//!
//! Both products run on the path's GEMM micro-tile (`Table::tile`, MR queries × NR columns) over
//! panels packed from the block, so a cached block is widened and packed once per block of query
//! rows and each of its values meets MR queries from registers. Prefill takes several rows per
//! block; decode takes one, and can split its positions into several ranges (spread over the
//! threads) whose partial results (`Partial`) are merged with their maxima, as in split-softmax
//! attention. Blocks sit at multiples of KC whatever the range and every output is its own sum,
//! so a row's result does not depend on which rows share its block.

use super::buffers::Buffers as Pool;
use crate::kernels::{Kernels, MR, NR};
use crate::session::KvCache;
use std::ops::Range;

/// Cached rows per block (the k extent of the value product).
const KC: usize = 64;

/// A block of query rows of one sequence: absorbed queries [rows, heads, lat] (lat = rank +
/// rope), the cached positions each row attends to, the latent width `rank` of a cached row's
/// leading values, and the score scale.
pub(super) struct Queries<'a> {
    pub q: &'a [f32],
    pub live: &'a [Range<usize>],
    pub heads: usize,
    pub lat: usize,
    pub rank: usize,
    pub scale: f32,
}

/// The attention of a block's queries (M = rows·heads, row-major) over one range of cached
/// positions, unnormalised: per query the largest score `max`, `sum` = Σ_j e^(s_j − max) and
/// `acc` = Σ_j e^(s_j − max)·c_j ([M padded to MR, rank padded to NR]).
pub(super) struct Partial {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// Scratch of one `partial` call, sized for its queries.
struct Buffers {
    /// Queries padded to a multiple of MR, the row width, the latent width and it padded to NR.
    mp: usize,
    lat: usize,
    rank: usize,
    rp: usize,
    /// The absorbed queries, padded with zero rows to a multiple of MR: [mp, lat].
    q: Vec<f32>,
    /// A block of cached rows widened to f32: [KC, lat] (rows no query attends to stay zero).
    rows: Vec<f32>,
    /// A packed panel: [lat, NR] (scores) or [KC, NR] (values).
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

/// The partial attention of `qs` over cached positions `pos` of `layer` (each row over its live
/// positions within `pos`), its buffers and scratch taken from `pool`.
pub(super) fn partial(
    kern: &Kernels,
    pool: &Pool,
    kv: &KvCache,
    layer: usize,
    qs: &Queries<'_>,
    pos: Range<usize>,
) -> Partial {
    let Queries { heads, lat, rank, .. } = *qs;
    let m = qs.live.len() * heads;
    let mp = round_up(m, MR);
    let rp = round_up(rank, NR);
    // rows, panel and s are written before they are read (`widen_rows`, `scores`, `values`).
    let mut b = Buffers {
        mp,
        lat,
        rank,
        rp,
        q: pool.take(mp * lat),
        rows: pool.take(KC * lat),
        panel: pool.take(lat.max(KC) * NR),
        s: pool.take(mp * KC),
    };
    b.q[..m * lat].copy_from_slice(&qs.q[..m * lat]);
    b.q[m * lat..].fill(0.0);
    let (mut max, mut sum, mut acc) = (pool.take(m), pool.take(m), pool.take(mp * rp));
    max.fill(f32::NEG_INFINITY);
    sum.fill(0.0);
    acc.fill(0.0);
    let mut out = Partial { max, sum, acc };
    // The positions of `pos` some row attends to.
    let lo = qs.live.iter().map(|r| r.start).min().unwrap_or(0).max(pos.start);
    let hi = qs.live.iter().map(|r| r.end).max().unwrap_or(0).min(pos.end);
    let mut j0 = lo / KC * KC;
    while j0 < hi {
        // Columns up to the block's last attended position, in whole panels: the ones past it
        // would only add zero weights.
        let ks = round_up(hi.min(j0 + KC) - j0, NR);
        widen_rows(kern, kv, layer, j0, lo.max(j0)..hi.min(j0 + KC), lat, &mut b.rows[..ks * lat]);
        scores(kern, &mut b, ks);
        weigh(&mut b.s[..mp * ks], ks, &mut out, qs, j0, &pos, rp);
        values(kern, &mut b, ks, &mut out.acc);
        j0 += KC;
    }
    [b.q, b.rows, b.panel, b.s].into_iter().for_each(|v| pool.give(v));
    out
}

/// rows[j − j0, ..] = the cached row j of `layer` as f32 for j in `js` (the path's widening axpy
/// onto zeros); the block's other rows are zero.
fn widen_rows(kern: &Kernels, kv: &KvCache, layer: usize, j0: usize, js: Range<usize>, lat: usize, rows: &mut [f32]) {
    rows.fill(0.0);
    for j in js {
        kv.latent_axpy(kern, layer, j, 1.0, &mut rows[(j - j0) * lat..(j - j0 + 1) * lat]);
    }
}

/// b.s = b.q·b.rows[..ks]ᵀ ([mp, ks]): per panel of NR cached rows, the rows transposed into
/// panel[d·NR + jj], then the tile for every MR queries.
fn scores(kern: &Kernels, b: &mut Buffers, ks: usize) {
    let (tile, mp, lat) = (kern.table().tile, b.mp, b.lat);
    b.s[..mp * ks].fill(0.0);
    for p0 in (0..ks).step_by(NR) {
        for (jj, row) in b.rows[p0 * lat..(p0 + NR) * lat].chunks_exact(lat).enumerate() {
            for (d, &x) in row.iter().enumerate() {
                b.panel[d * NR + jj] = x;
            }
        }
        for i0 in (0..mp).step_by(MR) {
            tile(&b.q[i0 * lat..(i0 + MR) * lat], &b.panel[..lat * NR], lat, &mut b.s[i0 * ks + p0..], ks, NR);
        }
    }
}

/// For each query, scale the block's live scores (its own positions within `pos`), fold them
/// into its running maximum (rescaling `sum` and `acc`) and turn them into weights e^(s − max);
/// the other columns (and padding queries) get weight 0.
fn weigh(s: &mut [f32], ks: usize, out: &mut Partial, qs: &Queries<'_>, j0: usize, pos: &Range<usize>, rp: usize) {
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
        cols.iter_mut().for_each(|x| *x *= qs.scale);
        let m = cols.iter().fold(out.max[i], |a, &x| a.max(x));
        if m > out.max[i] {
            let r = if out.max[i] == f32::NEG_INFINITY { 0.0 } else { (out.max[i] - m).exp() };
            out.sum[i] *= r;
            out.acc[i * rp..(i + 1) * rp].iter_mut().for_each(|a| *a *= r);
            out.max[i] = m;
        }
        let mut sum = 0.0;
        for x in cols.iter_mut() {
            *x = (*x - m).exp();
            sum += *x;
        }
        out.sum[i] += sum;
    }
}

/// acc += b.s·b.rows[..ks, ..rank] ([mp, rp]): per panel of NR latent columns, the block's
/// columns packed into panel[k·NR + jj] (zero past rank), then the tile for every MR queries.
fn values(kern: &Kernels, b: &mut Buffers, ks: usize, acc: &mut [f32]) {
    let (tile, mp, lat, rank, rp) = (kern.table().tile, b.mp, b.lat, b.rank, b.rp);
    for d0 in (0..rank).step_by(NR) {
        let w = NR.min(rank - d0);
        for (k, row) in b.rows[..ks * lat].chunks_exact(lat).enumerate() {
            let dst = &mut b.panel[k * NR..(k + 1) * NR];
            dst[..w].copy_from_slice(&row[d0..d0 + w]);
            dst[w..].fill(0.0);
        }
        for i0 in (0..mp).step_by(MR) {
            tile(&b.s[i0 * ks..(i0 + MR) * ks], &b.panel[..ks * NR], ks, &mut acc[i0 * rp + d0..], rp, NR);
        }
    }
}

/// out ([m, rank]) = the attention of a block's m queries: its partials (one per range of
/// positions, together covering the rows' live positions) merged by their maxima and normalised.
pub(super) fn merge(parts: &[Partial], m: usize, rank: usize, out: &mut [f32]) {
    let rp = round_up(rank, NR);
    for (h, o) in out.chunks_exact_mut(rank).take(m).enumerate() {
        let mx = parts.iter().fold(f32::NEG_INFINITY, |a, p| a.max(p.max[h]));
        o.fill(0.0);
        let mut sum = 0.0;
        for p in parts.iter().filter(|p| p.max[h] > f32::NEG_INFINITY) {
            let r = (p.max[h] - mx).exp();
            sum += r * p.sum[h];
            o.iter_mut().zip(&p.acc[h * rp..h * rp + rank]).for_each(|(a, &x)| *a += r * x);
        }
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        o.iter_mut().for_each(|a| *a *= inv);
    }
}

#[cfg(test)]
mod tests {
    //! The blocked, split form against the plain one (per head: every score, softmax, Σ p·c).

    use super::*;
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

    fn values(n: usize, seed: u64) -> Vec<f32> {
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

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}: {got:?} vs {want:?}");
        }
    }

    #[test]
    fn blocked_split_attention_equals_the_plain_form() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        c.validate().unwrap();
        let kern = Kernels::new(crate::kernels::QuantActivations::Float);
        for dtype in [KvDtype::F32, KvDtype::BF16, KvDtype::F16] {
            let s = cached(&c, 300, dtype);
            let q = values(HEADS * LAT, 2);
            // Range bounds: one range (several blocks, a short last one), a split in three, one position.
            let cases: [&[usize]; 3] = [&[5, 300], &[0, 7, 150, 299], &[42, 43]];
            for bounds in cases {
                let ranges: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
                let all = ranges[0].start..ranges[ranges.len() - 1].end;
                let live = [all.clone()];
                let qs = Queries { q: &q, live: &live, heads: HEADS, lat: LAT, rank: RANK, scale: 0.3 };
                let parts: Vec<Partial> =
                    ranges.iter().map(|r| partial(&kern, &Pool::default(), &s.kv, 0, &qs, r.clone())).collect();
                let mut got = vec![0f32; HEADS * RANK];
                merge(&parts, HEADS, RANK, &mut got);
                assert_close(&got, &plain(&kern, &s.kv, &q, all), &format!("{dtype:?} {ranges:?}"));
            }
        }
    }

    #[test]
    fn query_blocks_with_ragged_limits_equal_the_plain_form_row_by_row() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        let kern = Kernels::new(crate::kernels::QuantActivations::Float);
        for dtype in [KvDtype::F32, KvDtype::BF16] {
            let s = cached(&c, 300, dtype);
            // Prefill rows at positions 100.., causal; then the same rows with a sliding window of
            // 70 (starts off the block grid); then a chunk boundary at 128 inside the block.
            let causal: Vec<Range<usize>> = (100..107).map(|p| 0..p + 1).collect();
            let window: Vec<Range<usize>> = (100..107).map(|p| p + 1 - 70..p + 1).collect();
            let chunked: Vec<Range<usize>> = (125..131).map(|p| p / 128 * 128..p + 1).collect();
            for live in [causal, window, chunked] {
                let rows = live.len();
                let q = values(rows * HEADS * LAT, 3);
                let qs = Queries { q: &q, live: &live, heads: HEADS, lat: LAT, rank: RANK, scale: 0.3 };
                let lo = live.iter().map(|r| r.start).min().unwrap();
                let hi = live.iter().map(|r| r.end).max().unwrap();
                // Whole, and split in two ranges at a position off the block grid.
                for cut in [lo, lo + 37] {
                    let ranges: Vec<Range<usize>> =
                        [lo, cut, hi].windows(2).filter(|w| w[0] < w[1]).map(|w| w[0]..w[1]).collect();
                    let parts: Vec<Partial> =
                        ranges.iter().map(|r| partial(&kern, &Pool::default(), &s.kv, 0, &qs, r.clone())).collect();
                    let mut got = vec![0f32; rows * HEADS * RANK];
                    merge(&parts, rows * HEADS, RANK, &mut got);
                    for (t, r) in live.iter().enumerate() {
                        let (qt, gt) = (
                            &q[t * HEADS * LAT..(t + 1) * HEADS * LAT],
                            &got[t * HEADS * RANK..(t + 1) * HEADS * RANK],
                        );
                        assert_close(
                            gt,
                            &plain(&kern, &s.kv, qt, r.clone()),
                            &format!("{dtype:?} row {t} {r:?} {ranges:?}"),
                        );
                        // The row alone over the same ranges: the same bits.
                        let one = Queries { q: qt, live: &live[t..t + 1], ..qs };
                        let parts: Vec<Partial> = ranges
                            .iter()
                            .map(|p| partial(&kern, &Pool::default(), &s.kv, 0, &one, p.clone()))
                            .collect();
                        let mut alone = vec![0f32; HEADS * RANK];
                        merge(&parts, HEADS, RANK, &mut alone);
                        assert_eq!(gt, &alone[..], "{dtype:?} row {t}: its block changed its result");
                    }
                }
            }
        }
    }
}
