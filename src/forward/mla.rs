//! Multi-head latent attention (DeepSeek-V2/V3, `model::Mla`) of one layer over a batch of new
//! rows, in the absorbed form. Mirrors `DeepseekV2Attention` / `DeepseekV3Attention`, which
//! expand the cached latents into per-head keys and values; here the expansion is folded into
//! the query and the output instead, so the cache holds one latent row per token:
//!
//! ```text
//! q_h = [q_nope_h, q_pe_h]       = (q_b·rmsnorm(q_a·x) | q·x), head h       [qk_nope + qk_rope]
//! [c, k_pe]                      = kv_a·x;  c = rmsnorm(c)                  [kv_lora_rank + qk_rope]
//! rope(q_pe_h), rope(k_pe)       (cache ← [c, k_pe] of every token)
//! score_h(j) = (q_nope_h·W_UK,h c_j + q_pe_h·k_pe_j) · scale
//!            = [W_UK,hᵀ q_nope_h, q_pe_h] · [c_j, k_pe_j] · scale           (absorbed query)
//! out_h      = Σ_j softmax(score_h)_j W_UV,h c_j = W_UV,h (Σ_j p_j c_j)      (absorbed value)
//! ```
//!
//! `k_b` holds W_UK,hᵀ per head ([kv_lora_rank, qk_nope]) and `v_b` W_UV,h ([v_head_dim,
//! kv_lora_rank]), both as llama.cpp's GGUF stores them. Their products take f32 activations
//! whatever the session's mode: they stand for transformers' f32 expansion of the cache, and
//! rounding q_nope or the attention output to bf16 there would make a token's result depend on
//! its batch (GEMM and GEMV sum in different orders, and a rounding boundary amplifies that).
//! The tests check this against the expanded form.

use super::blocked_attention::{merge, partial, Cached, Partial, Queries};
use super::lanes::{Lane, Scratch};
use super::rope::Rope;
use crate::kernels::{self, Kernels, Mat};
use crate::model::{AttnWeights, Config, LayerWeights, Mla, MlaWeights};
use rayon::prelude::*;
use std::ops::Range;

/// Attention over the n rows of `b.xn` into `b.out`, appending each row's latent and rope key to
/// its sequence's cache.
pub fn attention(
    c: &Config,
    kern: &Kernels,
    lw: &LayerWeights<'_>,
    layer: usize,
    rope: &Rope,
    seqs: &mut [Lane<'_>],
    b: &mut Scratch,
) {
    let (Some(m), AttnWeights::Mla(w)) = (c.mla.as_ref(), &lw.attn) else {
        unreachable!("Step::attention sends only MLA layers here, and the loader builds them only with `c.mla`")
    };
    let n = seqs.last().map_or(0, |s| s.rows.end);
    // q ([n, heads·(nope + rope)]) and the normed latents with their rope keys ([n, rank + rope]).
    project(c, m, kern, w, n, b);
    // RoPE on every head's q_pe and on each row's k_pe; the latent rows into the caches.
    rope_and_cache(c, m, layer, rope, seqs, b);
    // q_abs[t, h] = [k_b,h·q_nope[t, h], q_pe[t, h]].
    absorb_queries(c, m, kern, w, n, b);
    // att_lat[t, h] = Σ_j softmax_j(q_abs[t, h]·cache_j · scale) c_j.
    attend(c, m, kern, layer, seqs, b, n);
    // att[t, h] = v_b,h·att_lat[t, h]; out = att·Woᵀ.
    let (rank, v) = (m.kv_lora_rank, m.v_head_dim);
    kern.matmul_heads(&w.v_b, (&b.att_lat[..n * c.n_heads * rank], rank), n, (&mut b.att, v));
    kern.matmul(lw.wo, &b.att[..n * c.n_heads * m.v_head_dim], n, &mut b.out);
}

/// RMSNorm of each row's leading w.len() values (the q_a / kv_a norms).
fn norm_leading(x: &mut [f32], width: usize, w: Mat<'_>, eps: f32) {
    let mut wf = vec![0f32; w.len()];
    w.dequantize(0, &mut wf);
    let mut tmp = vec![0f32; w.len()];
    for row in x.chunks_exact_mut(width) {
        kernels::reference::rmsnorm_row(&row[..wf.len()], &wf, eps, &mut tmp);
        row[..wf.len()].copy_from_slice(&tmp);
    }
}

/// b.q and b.latent of the n rows of b.xn.
fn project(c: &Config, m: &Mla, kern: &Kernels, w: &MlaWeights<'_>, n: usize, b: &mut Scratch) {
    let xn = &b.xn[..n * c.hidden_size];
    let eps = m.latent_norm_eps as f32;
    // The products over xn (q's, or q_a's, and kv_a's) round it to int8 once.
    match w.q_a {
        Some((q_a, q_a_norm)) => {
            kern.matmuls(xn, n, &mut [(q_a, &mut b.q_low[..]), (w.kv_a, &mut b.latent[..])]);
            let r = m.q_lora_rank;
            norm_leading(&mut b.q_low[..n * r], r, q_a_norm, eps);
            kern.matmul(w.q, &b.q_low[..n * r], n, &mut b.q);
        }
        None => kern.matmuls(xn, n, &mut [(w.q, &mut b.q[..]), (w.kv_a, &mut b.latent[..])]),
    }
    let lat = m.kv_lora_rank + m.qk_rope_head_dim;
    norm_leading(&mut b.latent[..n * lat], lat, w.kv_a_norm, eps);
}

/// RoPE on the trailing qk_rope values of every query head and of each latent row, at each
/// row's position; then each latent row into its sequence's cache.
fn rope_and_cache(c: &Config, m: &Mla, layer: usize, rope: &Rope, seqs: &mut [Lane<'_>], b: &mut Scratch) {
    let (hd, half) = (c.head_dim, rope.half());
    let lat = m.kv_lora_rank + m.qk_rope_head_dim;
    for s in seqs.iter_mut() {
        for t in s.rows.clone() {
            let (ct, st) = (&b.cos[t * half..(t + 1) * half], &b.sin[t * half..(t + 1) * half]);
            for head in b.q[t * c.n_heads * hd..(t + 1) * c.n_heads * hd].chunks_exact_mut(hd) {
                rope.apply(&mut head[m.qk_nope_head_dim..], ct, st);
            }
            let row = &mut b.latent[t * lat..(t + 1) * lat];
            rope.apply(&mut row[m.kv_lora_rank..], ct, st);
            let p = s.pos0 + (t - s.rows.start);
            s.kv.write(layer, p, row, &[]);
        }
    }
}

/// b.q_abs: each head's q_nope through W_UK,hᵀ, then its roped q_pe.
fn absorb_queries(c: &Config, m: &Mla, kern: &Kernels, w: &MlaWeights<'_>, n: usize, b: &mut Scratch) {
    let (hd, nope, rank) = (c.head_dim, m.qk_nope_head_dim, m.kv_lora_rank);
    let lat = rank + m.qk_rope_head_dim;
    let rows = n * c.n_heads;
    // Each head's nope part leads its hd values of q; its absorbed query leads its lat values.
    kern.matmul_heads(&w.k_b, (&b.q[..rows * hd], hd), n, (&mut b.q_abs[..rows * lat], lat));
    for (dst, q) in b.q_abs[..rows * lat].chunks_exact_mut(lat).zip(b.q[..rows * hd].chunks_exact(hd)) {
        dst[rank..].copy_from_slice(&q[nope..]);
    }
}

/// b.att_lat: each row's heads attend over its own sequence's cached latents up to its own
/// position (from the layer's `first_key` on: its sliding window, if any), all heads at once
/// (`blocked_attention`). Each sequence's rows go in blocks of consecutive rows (BLOCK_QUERIES
/// queries each), a block per task; when there are fewer rows than threads (decode) a block is
/// one row. A block's positions are cut at multiples of SPLIT, one partial per piece (in
/// parallel when a block is one row) merged in position order: where the cuts fall depends on
/// the positions only, so a row's result depends neither on the thread count nor on its block.
fn attend(c: &Config, m: &Mla, kern: &Kernels, layer: usize, seqs: &[Lane<'_>], b: &mut Scratch, n: usize) {
    /// Cached positions per partial (a multiple of the blocks' KC).
    const SPLIT: usize = 256;
    /// Queries (rows × heads) per block of prefill rows: enough that packing a cached block is
    /// small beside the products it feeds, few enough that a block's accumulators stay in L2.
    const BLOCK_QUERIES: usize = 96;
    let (rank, heads) = (m.kv_lora_rank, c.n_heads);
    let lat = rank + m.qk_rope_head_dim;
    let spec = &c.layers[layer];
    let scale = c.scales.attention.map_or(1.0 / (c.head_dim as f32).sqrt(), |a| a as f32);
    let threads = crate::threads::current().max(1);
    let per_block = if n >= threads { (BLOCK_QUERIES / heads).max(1) } else { 1 };
    // Each row's attended positions; the blocks as (sequence, rows, position ranges).
    let mut live = vec![0..0; n];
    let mut blocks: Vec<(usize, Range<usize>, Vec<Range<usize>>)> = Vec::new();
    for (si, s) in seqs.iter().enumerate() {
        for t in s.rows.clone() {
            let p = s.pos0 + (t - s.rows.start);
            live[t] = spec.first_key(p)..p + 1;
        }
        for r0 in s.rows.clone().step_by(per_block) {
            let rows = r0..(r0 + per_block).min(s.rows.end);
            let lo = live[rows.clone()].iter().map(|r| r.start).min().unwrap_or(0);
            let hi = live[rows.clone()].iter().map(|r| r.end).max().unwrap_or(0);
            let cuts = (lo / SPLIT * SPLIT..hi).step_by(SPLIT).map(|j| j.max(lo)..(j / SPLIT * SPLIT + SPLIT).min(hi));
            blocks.push((si, rows, cuts.collect()));
        }
    }
    // Each block's slice of b.att_lat ([rows, heads, rank]).
    let mut outs: Vec<&mut [f32]> = Vec::with_capacity(blocks.len());
    let mut rest = &mut b.att_lat[..n * heads * rank];
    for (_, rows, _) in &blocks {
        let (out, tail) = std::mem::take(&mut rest).split_at_mut(rows.len() * heads * rank);
        outs.push(out);
        rest = tail;
    }
    let (q, live, bufs): (&[f32], &[Range<usize>], _) = (&b.q_abs, &live, b.pool);
    let run = |(si, rows, ranges): &(usize, Range<usize>, Vec<Range<usize>>), out: &mut &mut [f32]| {
        let qs = Queries {
            q: &q[rows.start * heads * lat..rows.end * heads * lat],
            live: &live[rows.clone()],
            heads,
            kw: lat,
            vw: rank,
            scale,
            from: Cached::Latent,
        };
        let one = |pos: &Range<usize>| partial(kern, bufs, seqs[*si].kv, layer, &qs, pos.clone());
        let parts: Vec<Partial> = if threads > 1 && ranges.len() > 1 {
            ranges.par_iter().map(one).collect()
        } else {
            ranges.iter().map(one).collect()
        };
        merge(&parts, rows.len() * heads, rank, out, |_| f32::NEG_INFINITY);
        parts.into_iter().for_each(|p| p.give_back(bufs));
    };
    if threads > 1 {
        blocks.par_iter().zip(outs.par_iter_mut()).for_each(|(blk, out)| run(blk, out));
    } else {
        blocks.iter().zip(outs.iter_mut()).for_each(|(blk, out)| run(blk, out));
    }
}

#[cfg(test)]
mod tests {
    //! The absorbed form against the expanded one (`DeepseekV2Attention.expand_kv`): keys
    //! [W_UK,h·c_j, k_pe_j] and values W_UV,h·c_j per head, attention in full.

    use super::*;
    use crate::forward::router::RoutingMode;
    use crate::kernels::QuantActivations;
    use crate::model::{ExpertAct, FfnWeights, MlpWeights, NormWeights};
    use crate::session::{Session, SessionOptions};

    const CONFIG: &str = r#"{"family":"deepseek_v2","vocab_size":4,"hidden_size":8,"n_layers":1,"n_heads":2,
        "n_kv_heads":2,"head_dim":6,"rms_norm_eps":1e-5,"rope":{"theta":100.0,"interleaved":true},
        "max_position_embeddings":64,"attention_bias":false,"qk_norm":"none",
        "moe":{"n_experts":2,"top_k":1,"expert_ffn":4,"norm_topk_prob":false},"dense_ffn":0,
        "layers":[{"moe":true}],"tie_embeddings":true,"hidden_act":"silu","bos_token_id":null,
        "eos_token_ids":[],"pad_token_id":null,"scales":{"attention":0.3},
        "mla":{"q_lora_rank":0,"kv_lora_rank":6,"qk_nope_head_dim":4,"qk_rope_head_dim":2,"v_head_dim":3,
        "latent_norm_eps":1e-6}}"#;

    /// n pseudo-random values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Consecutive [rows, cols] matrices of `x`, one per head.
    fn heads_of(x: &[f32], rows: usize, cols: usize) -> Vec<Mat<'_>> {
        x.chunks_exact(rows * cols).map(|m| Mat::f32s(m, rows, cols)).collect()
    }

    /// y = W·x for a row-major [rows, cols] W.
    fn mv(w: &[f32], cols: usize, x: &[f32]) -> Vec<f32> {
        w.chunks_exact(cols).map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum()).collect()
    }

    /// One head's query, key and value of one token.
    type Head = (Vec<f32>, Vec<f32>, Vec<f32>);

    /// The test layer's weights (hidden 8, 2 heads of nope 4 + rope 2, v 3, latent 6, scale 0.3).
    struct Expanded<'w> {
        wq: &'w [f32],
        wkv_a: &'w [f32],
        norm: &'w [f32],
        k_b: &'w [f32],
        v_b: &'w [f32],
        wo: &'w [f32],
    }

    impl Expanded<'_> {
        /// out [n, 8] of the rows of xn, attending causally with per-head keys and values.
        fn run(&self, rope: &Rope, xn: &[f32], cos: &[f32], sin: &[f32]) -> Vec<f32> {
            let (h, heads, nope, v, rank, half) = (8, 2, 4, 3, 6, rope.half());
            // Per token: [head] of (query, key, value).
            let mut qkv: Vec<Vec<Head>> = Vec::new();
            for (t, x) in xn.chunks_exact(h).enumerate() {
                let (ct, st) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
                let mut kv = mv(self.wkv_a, h, x);
                let ss: f32 = kv[..rank].iter().map(|a| a * a).sum::<f32>() / rank as f32;
                let inv = 1.0 / (ss + 1e-6).sqrt();
                let lat: Vec<f32> = kv[..rank].iter().zip(self.norm).map(|(a, g)| a * inv * g).collect();
                rope.apply(&mut kv[rank..], ct, st);
                let q = mv(self.wq, h, x);
                let per_head = (0..heads).map(|hh| {
                    let kb = &self.k_b[hh * rank * nope..(hh + 1) * rank * nope];
                    // W_UK,h = k_b,hᵀ: key_nope[i] = Σ_r k_b,h[r][i] · c[r].
                    let mut key: Vec<f32> =
                        (0..nope).map(|i| (0..rank).map(|r| kb[r * nope + i] * lat[r]).sum()).collect();
                    key.extend_from_slice(&kv[rank..]);
                    let value = mv(&self.v_b[hh * v * rank..(hh + 1) * v * rank], rank, &lat);
                    let mut qh = q[hh * 6..(hh + 1) * 6].to_vec();
                    rope.apply(&mut qh[nope..], ct, st);
                    (qh, key, value)
                });
                qkv.push(per_head.collect());
            }
            let mut out = Vec::new();
            for (t, now) in qkv.iter().enumerate() {
                let mut att = Vec::new();
                for (hh, (q, _, _)) in now.iter().enumerate() {
                    let past = &qkv[..=t];
                    let mut p: Vec<f32> =
                        past.iter().map(|j| q.iter().zip(&j[hh].1).map(|(a, b)| a * b).sum::<f32>() * 0.3).collect();
                    kernels::softmax(&mut p);
                    att.extend((0..v).map(|i| past.iter().zip(&p).map(|(j, pj)| pj * j[hh].2[i]).sum::<f32>()));
                }
                out.extend(mv(self.wo, heads * v, &att));
            }
            out
        }
    }

    #[test]
    fn absorbed_attention_equals_the_expanded_form() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        c.validate().unwrap();
        let (h, heads, nope, rope_d, v, rank, n) = (8, 2, 4, 2, 3, 6, 5);
        let (wq, wkv_a, norm) = (values(heads * 6 * h, 1), values((rank + rope_d) * h, 2), values(rank, 3));
        let (k_b, v_b, wo, xn) =
            (values(heads * rank * nope, 4), values(heads * v * rank, 5), values(h * heads * v, 6), values(n * h, 7));
        let (ones, dummy) = (vec![1.0f32; h], vec![0.0f32; 4 * h]);
        let per = |x, rows, cols| heads_of(x, rows, cols);
        let lw = LayerWeights {
            attn_norm: NormWeights { weight: Mat::f32s(&ones, 1, h), bias: None },
            attn: AttnWeights::Mla(MlaWeights {
                q: Mat::f32s(&wq, heads * 6, h),
                q_a: None,
                kv_a: Mat::f32s(&wkv_a, rank + rope_d, h),
                kv_a_norm: Mat::f32s(&norm, 1, rank),
                k_b: per(&k_b, rank, nope),
                v_b: per(&v_b, v, rank),
            }),
            wo: Mat::f32s(&wo, h, heads * v),
            bo: None,
            sinks: None,
            ffn_norm: NormWeights { weight: Mat::f32s(&ones, 1, h), bias: None },
            ffn: FfnWeights::Dense(MlpWeights {
                gate: Mat::f32s(&dummy, 4, h),
                up: Mat::f32s(&dummy, 4, h),
                down: Mat::f32s(&dummy, h, 4),
                act: ExpertAct::Silu,
                bias: None,
            }),
        };
        let kern = Kernels::new(QuantActivations::Float);
        let rope = Rope::new(&c);
        let mut s = Session::new(&c, &SessionOptions { n_ctx: 16, ..Default::default() }).unwrap();
        s.kv.reserve(n).unwrap();
        let pool = crate::forward::buffers::Buffers::default();
        let mut b = Scratch::new(&c, n, &pool).unwrap();
        b.xn.copy_from_slice(&xn);
        rope.extend_table(0, n, n, &mut b.cos, &mut b.sin);
        let (cos, sin) = (b.cos.clone(), b.sin.clone());
        let lane = Lane {
            kv: &mut s.kv,
            rec: &mut s.rec,
            pos0: 0,
            rows: 0..n,
            top_k: 1,
            mode: RoutingMode::TopK,
            rng: &mut s.rng,
            trace: None,
        };
        attention(&c, &kern, &lw, 0, &rope, &mut [lane], &mut b);

        let want =
            Expanded { wq: &wq, wkv_a: &wkv_a, norm: &norm, k_b: &k_b, v_b: &v_b, wo: &wo }.run(&rope, &xn, &cos, &sin);
        for (t, (got, want)) in b.out.chunks_exact(h).zip(want.chunks_exact(h)).take(n).enumerate() {
            for (a, w) in got.iter().zip(want) {
                assert!((a - w).abs() <= 1e-5 * (1.0 + w.abs()), "token {t}: absorbed {got:?} vs expanded {want:?}");
            }
        }
    }
}
