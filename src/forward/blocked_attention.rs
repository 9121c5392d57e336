//! Attention over a KV cache in blocks, on the path's GEMM micro-tile: MLA's attention over
//! its latent cache (`mla::attention`) and GQA's over one KV head (`gqa_attend`). For a block of
//! query rows of one sequence and a range of its cached positions, M = rows·heads queries at
//! once (MLA: every head of a row, absorbed; GQA: the query heads of one KV head):
//!
//! ```text
//! for each block of KC cached positions (at multiples of KC):
//!   K  = their keys as f32               [KC, kw]   (MLA: latent + rope key; GQA: K of the head)
//!   V  = their values                    [KC, vw]   (MLA: each key row's leading rank values)
//!   S  = Q·Kᵀ · scale                    [M, KC]
//!   live columns: per query row, its own positions (causal limit, sliding window) in the range
//!   m' = max(m, rowmax S_live);  acc ×= e^(m − m');  sum ×= e^(m − m')
//!   P  = e^(S − m') where live, else 0;  sum += rowsum P;  acc += P·V           [M, vw]
//! ```
//!
//! Both products run on the path's GEMM micro-tile (`Table::tile`, MR rows × NR columns) with
//! the cached rows as they lie: the scores as Sᵀ = K·Qᵀ (MR cached rows against the queries,
//! transposed into panels once per call), the values as acc += P·V (V's rows as the tile's B
//! operand) — an f32 cache read in place, a half one widened once per block; nothing of the
//! block is transposed or packed (`Floats`). Or, for a bf16 cache in `Reduced` mode on a path
//! with bf16 tiles (AMX), both run on those tiles over the stored bits, the
//! queries and the weights P rounded to bf16 (`bf16_attention`). Several ranges of one row's
//! positions (spread over threads) give partial results (`Partial`) merged with their maxima, as
//! in split-softmax attention; a sink logit (GPT-OSS) joins the merged denominator. Blocks sit at
//! multiples of KC whatever the range and every output is its own sum, so a row's result does
//! not depend on which rows share its block.

use super::bf16_attention::BfTiles;
use super::block_products::{round_up, Products};
pub(super) use super::block_products::{Cached, Queries};
use super::buffers::Buffers as Pool;
use super::f32_attention::Floats;
use crate::kernels::{Kernels, NR};
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

impl Partial {
    /// Its buffers back to `pool`.
    pub(super) fn give_back(self, pool: &Pool) {
        [self.max, self.sum, self.acc].into_iter().for_each(|v| pool.give(v));
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

    /// A cache holding fewer positions than the tile has rows: the f32 products read its rows in
    /// place only up to what is allocated (the rest through a padded copy).
    #[test]
    fn a_cache_shorter_than_a_tile_equals_the_plain_form() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        for (how, kern, dtypes, round, tol) in products() {
            for &dtype in dtypes {
                for n in 1..crate::kernels::MR {
                    let s = cached(&c, n, dtype);
                    assert_eq!(s.kv.reserved(), n, "the cache holds exactly its positions");
                    let q = values(HEADS * LAT, 4);
                    for from in [0, n - 1] {
                        let live = from..n;
                        let qs = Queries {
                            q: &q,
                            live: std::slice::from_ref(&live),
                            heads: HEADS,
                            kw: LAT,
                            vw: RANK,
                            scale: 0.3,
                            from: Cached::Latent,
                        };
                        let mut got = vec![0f32; HEADS * RANK];
                        merge(
                            &[partial(&kern, &Pool::default(), &s.kv, 0, &qs, from..n)],
                            HEADS,
                            RANK,
                            &mut got,
                            |_| f32::NEG_INFINITY,
                        );
                        let want = plain(&kern, &s.kv, &as_multiplied(&q, round), from..n);
                        assert_close(&got, &want, tol, &format!("{how} {dtype:?} {from}..{n}"));
                    }
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
