//! GQA attention of a step's query rows over their own sequences' KV caches (the inner step of
//! `attention::attention`): for each (row, head), s_j = q·K_j·scale over the row's live
//! positions (causal, from the layer's first key: sliding window, chunk), p = softmax(s) with
//! the head's sink logit in the denominator, and att = Σ_j p_j·V_j.
//!
//! A sequence with at least MR/group rows in the step (prefill) goes in tasks of a block of
//! consecutive rows and one KV head: that head's query heads for all the block's rows go through
//! `blocked_attention` together (M = rows·group queries on the GEMM micro-tile), so each cached
//! block is widened and packed once per task and each of its values meets up to MR queries from
//! registers. A sequence with fewer (decode) takes the matrix-vector form, per row and run of KV
//! heads: a dot product per cached position and head, the softmax over the row's range, then the values
//! added in ascending position — no padding of a lone query to MR rows, no packing. A row's
//! result depends only on its own sequence's rows in the step: not on the thread count nor on
//! the other sequences of a batch (the two forms differ in the last bits — more where prefill
//! runs on bf16 tiles, which round the queries and the weights — so a prompt's rows computed in
//! prefill and the same rows fed one by one are close, not identical).

use super::blocked_attention::{merge, partial, Cached, Queries};
use super::buffers::Buffers as Pool;
use super::lanes::Lane;
use crate::kernels::{self, Kernels, MR};
use crate::session::KvCache;
use rayon::prelude::*;
use std::ops::Range;

/// Queries (rows × query heads of one KV head) per block of prefill rows: enough that packing a
/// cached block is small beside the products it feeds, few enough that a block's accumulators
/// stay in L2 (96 × 128 f32: 48 KiB). 48 → 96 with the tasks in KV-head order: olmoe-4l Q4_K_M
/// pp2048 at one thread on Zen 4, CPU s of load + two passes, 14.02 / 14.04 → 13.21 / 12.74.
const BLOCK_QUERIES: usize = 96;

/// The shape of one layer's attention: head width, query heads, query heads per KV head, the
/// score scale, the cached positions row p attends to (`LayerSpec::first_key(p)..=p`) and each
/// head's sink logit (GPT-OSS).
pub(super) struct Shape<'a> {
    pub head_dim: usize,
    pub n_heads: usize,
    pub group: usize,
    pub scale: f32,
    pub first_key: &'a (dyn Fn(usize) -> usize + Sync),
    pub sinks: Option<&'a [f32]>,
}

/// One task: rows `rows` of the step (all of sequence `seq`) and KV heads `kv_heads` (one when
/// tiled), with its output cells (per row: the values of those KV heads' query heads), in the
/// tiled or the matrix-vector form.
struct Task<'o> {
    seq: usize,
    rows: Range<usize>,
    kv_heads: Range<usize>,
    tiled: bool,
    out: Vec<&'o mut [f32]>,
}

/// att ([n, n_heads·head_dim]) = the attention of q ([n, n_heads·head_dim]) over each row's own
/// sequence in `seqs` (whose caches already hold the step's K and V) at `layer`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    kern: &Kernels,
    s: &Shape<'_>,
    layer: usize,
    seqs: &[Lane<'_>],
    q: &[f32],
    att: &mut [f32],
    pool: &Pool,
) {
    let (hd, group) = (s.head_dim, s.group);
    let nq = s.n_heads * hd;
    let n = seqs.last().map_or(0, |l| l.rows.end);
    let mut live = vec![0..0; n];
    for l in seqs {
        for t in l.rows.clone() {
            let p = l.pos0 + (t - l.rows.start);
            live[t] = (s.first_key)(p)..p + 1;
        }
    }
    let threads = crate::threads::current();
    let tasks = tasks(s, seqs, threads, &mut att[..n * nq]);
    let live = &live;
    let run = |t: Task<'_>| {
        if !t.tiled {
            return rows_alone(kern, s, layer, seqs[t.seq].kv, q, live, t);
        }
        let kv_head = t.kv_heads.start;
        let m = t.rows.len() * group;
        // The task's queries [rows, group, hd]: its KV head's query heads of each row.
        let mut qb = pool.take(m * hd);
        for (dst, row) in qb.chunks_exact_mut(group * hd).zip(t.rows.clone()) {
            let at = row * nq + kv_head * group * hd;
            dst.copy_from_slice(&q[at..at + group * hd]);
        }
        let qs = Queries {
            q: &qb,
            live: &live[t.rows.clone()],
            heads: group,
            kw: hd,
            vw: hd,
            scale: s.scale,
            from: Cached::Head { kv_head },
        };
        let lo = qs.live.iter().map(|r| r.start).min().unwrap_or(0);
        let hi = qs.live.iter().map(|r| r.end).max().unwrap_or(0);
        let part = partial(kern, pool, seqs[t.seq].kv, layer, &qs, lo..hi);
        let mut ob = pool.take(m * hd);
        let sink = |i: usize| s.sinks.map_or(f32::NEG_INFINITY, |x| x[kv_head * group + i % group]);
        merge(std::slice::from_ref(&part), m, hd, &mut ob, sink);
        for (cell, src) in t.out.into_iter().zip(ob.chunks_exact(group * hd)) {
            cell.copy_from_slice(src);
        }
        part.give_back(pool);
        pool.give(qb);
        pool.give(ob);
    };
    if threads > 1 {
        tasks.into_par_iter().for_each(run);
    } else {
        tasks.into_iter().for_each(run);
    }
}

/// The tasks of a step, each with its cells of `att` ([n, n_heads·head_dim]): per tiled
/// sequence, blocks of rows × one KV head; per other sequence, each row × a run of KV heads (a
/// divisor of n_kv giving each thread a task of a row: such a task walks the cache position by
/// position, all its heads at each, as a cached row holds every head's K or V side by side).
fn tasks<'o>(s: &Shape<'_>, seqs: &[Lane<'_>], threads: usize, att: &'o mut [f32]) -> Vec<Task<'o>> {
    let (hd, group) = (s.head_dim, s.group);
    let (nq, n_kv) = (s.n_heads * hd, s.n_heads / group);
    let splits = (threads.clamp(1, n_kv.max(1))..=n_kv).find(|&k| n_kv.is_multiple_of(k)).unwrap_or(1);
    let mut rows_out = att.chunks_exact_mut(nq);
    let mut tasks = Vec::new();
    for (seq, l) in seqs.iter().enumerate() {
        let tiled = l.rows.len() * group >= MR;
        let (per_block, per_task) = if tiled { ((BLOCK_QUERIES / group).max(1), 1) } else { (1, n_kv / splits) };
        for r0 in l.rows.clone().step_by(per_block) {
            let rows = r0..(r0 + per_block).min(l.rows.end);
            let mut cells: Vec<Vec<&mut [f32]>> =
                (0..n_kv / per_task).map(|_| Vec::with_capacity(rows.len())).collect();
            for row in rows_out.by_ref().take(rows.len()) {
                for (cell, part) in cells.iter_mut().zip(row.chunks_exact_mut(per_task * group * hd)) {
                    cell.push(part);
                }
            }
            for (k, out) in cells.into_iter().enumerate() {
                let kv_heads = k * per_task..(k + 1) * per_task;
                tasks.push(Task { seq, rows: rows.clone(), kv_heads, tiled, out });
            }
        }
    }
    // A tiled sequence's tasks by KV head, then rows: consecutive tasks read the same head's
    // cached rows (a few MiB at long prompts, in the last-level cache) instead of every head's.
    tasks.sort_by_key(|t| (t.seq, if t.tiled { t.kv_heads.start } else { 0 }, t.rows.start));
    tasks
}

/// The matrix-vector form of a task, row by row: for each query head of the task's KV heads,
/// the scores of the row's live positions (walked position by position, all the task's heads at
/// each), their softmax (with the head's sink), and the values added in ascending position.
fn rows_alone(
    kern: &Kernels,
    s: &Shape<'_>,
    layer: usize,
    kv: &KvCache,
    q: &[f32],
    live: &[Range<usize>],
    t: Task<'_>,
) {
    let (hd, group, nq) = (s.head_dim, s.group, s.n_heads * s.head_dim);
    let heads = t.kv_heads.start * group..t.kv_heads.end * group;
    for (row, out) in t.rows.clone().zip(t.out) {
        let lv = live[row].clone();
        let len = lv.len();
        let q_row = &q[row * nq..(row + 1) * nq];
        // scores[h·len + j − lo] for the task's h-th head.
        let mut scores = vec![0f32; heads.len() * len];
        for j in lv.clone() {
            for (h, head) in heads.clone().enumerate() {
                let qh = &q_row[head * hd..(head + 1) * hd];
                scores[h * len + j - lv.start] = kv.k_dot(kern, layer, j, head / group, qh) * s.scale;
            }
        }
        for (sc, head) in scores.chunks_exact_mut(len).zip(heads.clone()) {
            let sink = s.sinks.map_or(f32::NEG_INFINITY, |x| x[head]);
            kernels::softmax_with_sink(sc, sink);
        }
        out.fill(0.0);
        for j in lv.clone() {
            for ((h, head), o) in heads.clone().enumerate().zip(out.chunks_exact_mut(hd)) {
                kv.v_axpy(kern, layer, j, head / group, scores[h * len + j - lv.start], o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! A row in different blocks and batches (the same bits), and against the plain form in f64.

    use super::super::blocked_attention::tests::{as_multiplied, products, values};
    use super::super::buffers::Buffers as Pool;

    use super::*;
    use crate::forward::RoutingMode;
    use crate::model::Config;
    use crate::session::{KvDtype, Session, SessionOptions};

    /// 4 query heads over 2 KV heads of width 12 (not a multiple of a vector).
    const CONFIG: &str = r#"{"family":"mixtral","vocab_size":4,"hidden_size":8,"n_layers":1,"n_heads":4,
        "n_kv_heads":2,"head_dim":12,"rms_norm_eps":1e-5,"rope":{"theta":100.0},
        "max_position_embeddings":64,"attention_bias":false,"qk_norm":"none",
        "moe":{"n_experts":2,"top_k":1,"expert_ffn":4,"norm_topk_prob":false},"dense_ffn":0,
        "layers":[{"moe":true}],"tie_embeddings":true,"hidden_act":"silu","bos_token_id":null,
        "eos_token_ids":[],"pad_token_id":null}"#;
    const HD: usize = 12;
    const NQ: usize = 4 * HD;
    const ROW: usize = 2 * HD;

    /// A session caching n K and V rows (k, v: [n, ROW]) in `dtype`.
    fn cached(c: &Config, k: &[f32], v: &[f32], dtype: KvDtype) -> Session {
        let n = k.len() / ROW;
        let mut s = Session::new(c, &SessionOptions { n_ctx: 64, kv_dtype: dtype, ..Default::default() }).unwrap();
        s.kv.reserve(n).unwrap();
        for j in 0..n {
            s.kv.write(0, j, &k[j * ROW..(j + 1) * ROW], &v[j * ROW..(j + 1) * ROW]);
        }
        s
    }

    fn lane(s: &mut Session, pos0: usize, rows: Range<usize>) -> Lane<'_> {
        Lane {
            kv: &mut s.kv,
            rec: &mut s.rec,
            pos0,
            rows,
            top_k: 1,
            mode: RoutingMode::TopK,
            rng: &mut s.rng,
            trace: None,
        }
    }

    /// One row's attention at position p over positions lo..=p, in f64 from the f32 K and V.
    fn plain(q: &[f32], k: &[f32], v: &[f32], p: usize, lo: usize, s: &Shape<'_>) -> Vec<f32> {
        let mut out = vec![0f32; NQ];
        for (h, o) in out.chunks_exact_mut(HD).enumerate() {
            let kvh = h / s.group;
            let dot = |j: usize| -> f64 {
                (0..HD).map(|d| f64::from(q[h * HD + d]) * f64::from(k[j * ROW + kvh * HD + d])).sum::<f64>()
                    * f64::from(s.scale)
            };
            let sink = s.sinks.map_or(f64::NEG_INFINITY, |x| f64::from(x[h]));
            let m = (lo..=p).map(dot).fold(sink, f64::max);
            let sum: f64 = (lo..=p).map(|j| (dot(j) - m).exp()).sum::<f64>() + (sink - m).exp();
            for (d, od) in o.iter_mut().enumerate() {
                let x: f64 = (lo..=p).map(|j| (dot(j) - m).exp() / sum * f64::from(v[j * ROW + kvh * HD + d])).sum();
                *od = x as f32;
            }
        }
        out
    }

    #[test]
    fn a_row_gets_the_same_bits_in_any_block_and_batch_and_the_plain_attention() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        let sinks = [0.5f32, -1.0, 2.0, 0.0];
        // Sequence A: 64 cached positions, the step's 45 rows at 19..64 (tiled: blocks of 24 and
        // 21 rows); sequence B: 2 rows at 0..2 (2 rows × 2 heads < MR: row by row).
        let (ka, va, kb, vb) = (values(64 * ROW, 1), values(64 * ROW, 2), values(2 * ROW, 3), values(2 * ROW, 4));
        let q = values(47 * NQ, 5);
        let tiled_rows = MR.div_ceil(2);
        let cases = products()
            .into_iter()
            .flat_map(|(how, kern, dtypes, round, tol)| dtypes.iter().map(move |&d| (how, kern, d, round, tol)));
        // K and V as a bf16 cache holds them (the plain form of the tiles).
        let bf16 = |x: &[f32]| as_multiplied(x, true);
        for (how, kern, dtype, round, tol) in cases {
            for (window, sinks) in [(None, None), (Some(5), Some(&sinks[..])), (Some(30), None)] {
                let first_key = move |p: usize| window.map_or(0, |w: usize| (p + 1).saturating_sub(w));
                let shape = Shape { head_dim: HD, n_heads: 4, group: 2, scale: 0.4, first_key: &first_key, sinks };
                let (mut sa, mut sb) = (cached(&c, &ka, &va, dtype), cached(&c, &kb, &vb, dtype));
                let mut att = vec![f32::NAN; 47 * NQ];
                let step = [lane(&mut sa, 19, 0..45), lane(&mut sb, 0, 45..47)];
                attend(&kern, &shape, 0, &step, &q, &mut att, &Pool::default());
                for t in 0..47 {
                    // Another step holding row t: A's rows in a smaller block of their own (still
                    // tiled), B's rows one at a time.
                    let (s, rows, pos0, k, v) = if t < 45 {
                        let r0 = t.min(45 - tiled_rows);
                        (&mut sa, r0..r0 + tiled_rows, 19 + r0, &ka, &va)
                    } else {
                        (&mut sb, t..t + 1, t - 45, &kb, &vb)
                    };
                    let mut other = vec![f32::NAN; rows.len() * NQ];
                    let lanes = [lane(s, pos0, 0..rows.len())];
                    attend(&kern, &shape, 0, &lanes, &q[rows.start * NQ..rows.end * NQ], &mut other, &Pool::default());
                    let i = t - rows.start;
                    let got = &att[t * NQ..(t + 1) * NQ];
                    assert_eq!(
                        got,
                        &other[i * NQ..(i + 1) * NQ],
                        "{how} {dtype:?} window {window:?} row {t}: other bits in another step"
                    );
                    // The tiles on A's tiled rows (B's rows go one by one in f32).
                    let tiles = round && t < 45;
                    if dtype == KvDtype::F32 || tiles {
                        let p = pos0 + i;
                        let qt = as_multiplied(&q[t * NQ..(t + 1) * NQ], tiles);
                        let (k, v) = if tiles { (bf16(k), bf16(v)) } else { (k.clone(), v.clone()) };
                        let want = plain(&qt, &k, &v, p, first_key(p), &shape);
                        for (g, w) in got.iter().zip(&want) {
                            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{how} row {t}: {got:?} vs {want:?}");
                        }
                    }
                }
            }
        }
    }
}
