//! GQA attention of a step's query rows over their own sequences' KV caches (the inner step of
//! `attention::attention`): for each (row, head), s_j = q·K_j·scale over the row's live
//! positions (causal, from the layer's first key: sliding window, chunk), p = softmax(s) with
//! the head's sink logit in the denominator, and att = Σ_j p_j·V_j.
//!
//! A task takes a block of up to QUERY_ROWS consecutive rows of one sequence and a run of
//! heads, and walks the cache position by position: each cached K or V row it reads serves
//! every row of its block while it sits in L1 (row by row, a long prompt's prefill re-read its
//! whole cache for every row, from L3 or memory). Each score, softmax and weighted sum is the
//! one a row alone gets — the same kernels on the same operands, values added in ascending
//! position — so a row's result does not depend on which rows share its block: the same bits
//! in prefill, in decode, and in any mix of sequences.

use super::lanes::Lane;
use crate::kernels::{self, Kernels};
use crate::session::KvCache;
use rayon::prelude::*;
use std::ops::Range;

/// Query rows of one sequence per task. Each cached row is read once per block instead of once
/// per row; the block's scores ([rows, heads of the task, positions]) stay per task.
const QUERY_ROWS: usize = 8;

/// The shape of one layer's attention: head width, query heads per KV head, the score scale,
/// and the cached positions row p attends to (`LayerSpec::first_key(p)..=p`).
pub(super) struct Shape<'a> {
    pub head_dim: usize,
    pub n_heads: usize,
    pub group: usize,
    pub scale: f32,
    pub first_key: &'a (dyn Fn(usize) -> usize + Sync),
    /// Each head's sink logit (GPT-OSS), else none.
    pub sinks: Option<&'a [f32]>,
}

/// One task: rows `rows` of the step (all of one sequence, whose first new row is at position
/// `pos0` of `kv`), heads `heads`, and its output cells (one per row: that row's heads' values).
struct Task<'a, 'o> {
    kv: &'a KvCache,
    rows: Range<usize>,
    pos: Range<usize>,
    heads: Range<usize>,
    out: Vec<&'o mut [f32]>,
}

/// att ([n, n_heads·head_dim]) = the attention of q ([n, n_heads·head_dim]) over each row's own
/// sequence in `seqs` (whose caches already hold the step's K and V) at `layer`.
pub(super) fn attend(kern: &Kernels, s: &Shape<'_>, layer: usize, seqs: &[Lane<'_>], q: &[f32], att: &mut [f32]) {
    let (hd, nq) = (s.head_dim, s.n_heads * s.head_dim);
    let threads = crate::threads::current();
    // Heads per task: a divisor of n_heads giving each thread at least one task of a row.
    let splits = (threads.clamp(1, s.n_heads.max(1))..=s.n_heads).find(|&k| s.n_heads.is_multiple_of(k)).unwrap_or(1);
    let per_task = s.n_heads / splits;
    let mut rows_out = att.chunks_exact_mut(nq);
    let mut tasks = Vec::new();
    for seq in seqs {
        for r0 in seq.rows.clone().step_by(QUERY_ROWS) {
            let rows = r0..(r0 + QUERY_ROWS).min(seq.rows.end);
            let mut cells: Vec<Vec<&mut [f32]>> = (0..splits).map(|_| Vec::with_capacity(rows.len())).collect();
            for row in rows_out.by_ref().take(rows.len()) {
                for (cell, part) in cells.iter_mut().zip(row.chunks_exact_mut(per_task * hd)) {
                    cell.push(part);
                }
            }
            let pos = seq.pos0 + (r0 - seq.rows.start)..seq.pos0 + (rows.end - seq.rows.start);
            for (k, out) in cells.into_iter().enumerate() {
                let heads = k * per_task..(k + 1) * per_task;
                tasks.push(Task { kv: &*seq.kv, rows: rows.clone(), pos: pos.clone(), heads, out });
            }
        }
    }
    let run = |t: Task<'_, '_>| block(kern, s, layer, q, t);
    if threads > 1 {
        tasks.into_par_iter().for_each(run);
    } else {
        tasks.into_iter().for_each(run);
    }
}

/// One task's attention: every score of every (row, head) position by position, then each
/// (row, head)'s softmax, then its values position by position.
fn block(kern: &Kernels, s: &Shape<'_>, layer: usize, q: &[f32], mut t: Task<'_, '_>) {
    let (hd, nq, nh) = (s.head_dim, s.n_heads * s.head_dim, t.heads.len());
    // Per row: its position p, first live position lo, and where its scores start
    // (scores[at + h·len + j − lo], len = p + 1 − lo).
    let mut at = 0;
    let live: Vec<(usize, usize, usize)> = t
        .pos
        .clone()
        .map(|p| {
            let lo = (s.first_key)(p);
            let row = (p, lo, at);
            at += nh * (p + 1 - lo);
            row
        })
        .collect();
    let mut scores = vec![0f32; at];
    let lo_all = live.iter().map(|r| r.1).min().unwrap_or(0);
    let query = |i: usize, head: usize| {
        let t0 = t.rows.start + i;
        &q[t0 * nq + head * hd..t0 * nq + (head + 1) * hd]
    };
    for j in lo_all..t.pos.end {
        for (i, &(p, lo, at)) in live.iter().enumerate().filter(|(_, r)| (r.1..=r.0).contains(&j)) {
            let len = p + 1 - lo;
            for (h, head) in t.heads.clone().enumerate() {
                scores[at + h * len + j - lo] = t.kv.k_dot(kern, layer, j, head / s.group, query(i, head)) * s.scale;
            }
        }
    }
    for &(p, lo, at) in &live {
        let len = p + 1 - lo;
        for (h, head) in t.heads.clone().enumerate() {
            let sink = s.sinks.map_or(f32::NEG_INFINITY, |v| v[head]);
            kernels::softmax_with_sink(&mut scores[at + h * len..at + (h + 1) * len], sink);
        }
    }
    t.out.iter_mut().for_each(|o| o.fill(0.0));
    for j in lo_all..t.pos.end {
        for (i, &(p, lo, at)) in live.iter().enumerate().filter(|(_, r)| (r.1..=r.0).contains(&j)) {
            let len = p + 1 - lo;
            for ((h, head), o) in t.heads.clone().enumerate().zip(t.out[i].chunks_exact_mut(hd)) {
                t.kv.v_axpy(kern, layer, j, head / s.group, scores[at + h * len + j - lo], o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Blocks of rows against each row alone (the same bits) and against the plain form in f64.

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

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

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
        Lane { kv: &mut s.kv, rec: &mut s.rec, pos0, rows, top_k: 1, mode: RoutingMode::TopK, rng: &mut s.rng, trace: None }
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
    fn a_block_gives_each_row_the_bits_it_gets_alone_and_the_plain_attention() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        let kern = Kernels::new(crate::kernels::QuantActivations::Float);
        let sinks = [0.5f32, -1.0, 2.0, 0.0];
        // Sequence A: 40 cached positions, the step's 21 rows at 19..40 (blocks of 8, 8 and 5);
        // sequence B: 3 rows at 0..3.
        let (ka, va, kb, vb) = (values(40 * ROW, 1), values(40 * ROW, 2), values(3 * ROW, 3), values(3 * ROW, 4));
        let q = values(24 * NQ, 5);
        for dtype in [KvDtype::F32, KvDtype::BF16, KvDtype::F16] {
            for (window, sinks) in [(None, None), (Some(5), Some(&sinks[..])), (Some(30), None)] {
                let first_key = move |p: usize| window.map_or(0, |w: usize| (p + 1).saturating_sub(w));
                let shape = Shape { head_dim: HD, n_heads: 4, group: 2, scale: 0.4, first_key: &first_key, sinks };
                let (mut sa, mut sb) = (cached(&c, &ka, &va, dtype), cached(&c, &kb, &vb, dtype));
                let mut att = vec![f32::NAN; 24 * NQ];
                attend(&kern, &shape, 0, &[lane(&mut sa, 19, 0..21), lane(&mut sb, 0, 21..24)], &q, &mut att);
                for t in 0..24 {
                    let (s, p, k, v) = if t < 21 { (&mut sa, 19 + t, &ka, &va) } else { (&mut sb, t - 21, &kb, &vb) };
                    let mut alone = vec![f32::NAN; NQ];
                    attend(&kern, &shape, 0, &[lane(s, p, 0..1)], &q[t * NQ..(t + 1) * NQ], &mut alone);
                    let got = &att[t * NQ..(t + 1) * NQ];
                    assert_eq!(got, &alone[..], "{dtype:?} window {window:?} row {t}: its block changed its bits");
                    if dtype == KvDtype::F32 {
                        let want = plain(&q[t * NQ..(t + 1) * NQ], k, v, p, first_key(p), &shape);
                        for (g, w) in got.iter().zip(&want) {
                            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "row {t}: {got:?} vs {want:?}");
                        }
                    }
                }
            }
        }
    }
}
