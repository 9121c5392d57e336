//! MLA's attention over the latent cache (the inner step of `mla::attention`), blocked. For one
//! query row and a range of its cached positions, every head at once:
//!
//! ```text
//! for each block of KC cached rows C ([KC, rank + rope], widened to f32 once):
//!   S  = Q·Cᵀ · scale                     [heads, KC]    (Q: absorbed queries [heads, rank + rope])
//!   m' = max(m, rowmax S);  acc ×= e^(m − m');  sum ×= e^(m − m')
//!   P  = e^(S − m');  sum += rowsum P;  acc += P·C[:, ..rank]          [heads, rank]
//! ```
//!
//! Both products run on the path's GEMM micro-tile (`Table::tile`, MR heads × NR columns) over
//! panels packed from the block, so a cached row is read once per (query row, split) instead of
//! once per head, and each of its values meets MR heads from registers. A row's positions can be
//! split into several ranges (decode spreads one row's cache over the threads); the ranges'
//! partial results (`Partial`) are merged with their maxima, as in split-softmax attention.

use crate::kernels::{Kernels, MR, NR};
use crate::session::KvCache;
use std::ops::Range;

/// Cached rows per block (the k extent of the value product).
const KC: usize = 64;

/// What one query row's heads attend with: absorbed queries [heads, lat] (lat = rank + rope),
/// the latent width `rank` of a cached row's leading values, and the score scale.
pub(super) struct Query<'a> {
    pub q: &'a [f32],
    pub heads: usize,
    pub lat: usize,
    pub rank: usize,
    pub scale: f32,
}

/// The attention of one query row's heads over one range of cached positions, unnormalised:
/// per head the largest score `max`, `sum` = Σ_j e^(s_j − max) and `acc` = Σ_j e^(s_j − max)·c_j
/// ([heads padded to MR, rank padded to NR]).
pub(super) struct Partial {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// Scratch of one `partial` call, sized for its query.
struct Buffers {
    /// The absorbed queries, heads padded with zero rows to a multiple of MR: [hp, lat].
    q: Vec<f32>,
    /// A block of cached rows widened to f32: [KC, lat] (rows past the range stay zero).
    rows: Vec<f32>,
    /// A packed panel: [lat, NR] (scores) or [KC, NR] (values).
    panel: Vec<f32>,
    /// Scores, then weights, of the block: [hp, KC].
    s: Vec<f32>,
}

/// The partial attention of `query` over cached positions `pos` of `layer`.
pub(super) fn partial(kern: &Kernels, kv: &KvCache, layer: usize, query: &Query<'_>, pos: Range<usize>) -> Partial {
    let Query { heads, lat, rank, .. } = *query;
    let hp = round_up(heads, MR);
    let rp = round_up(rank, NR);
    let mut b = Buffers {
        q: vec![0f32; hp * lat],
        rows: vec![0f32; KC * lat],
        panel: vec![0f32; lat.max(KC) * NR],
        s: vec![0f32; hp * KC],
    };
    b.q[..heads * lat].copy_from_slice(&query.q[..heads * lat]);
    let mut out = Partial { max: vec![f32::NEG_INFINITY; heads], sum: vec![0f32; heads], acc: vec![0f32; hp * rp] };
    let mut j0 = pos.start;
    while j0 < pos.end {
        let len = KC.min(pos.end - j0);
        widen_rows(kern, kv, layer, j0..j0 + len, lat, &mut b.rows);
        scores(kern, &mut b, hp, lat);
        weigh(&mut b.s, &mut out, query, len, rp);
        values(kern, &mut b, hp, lat, rank, &mut out.acc, rp);
        j0 += len;
    }
    out
}

/// rows[i, ..] = the cached row j0 + i of `layer` as f32 (the path's widening axpy onto zeros);
/// rows past the range are zero.
fn widen_rows(kern: &Kernels, kv: &KvCache, layer: usize, js: Range<usize>, lat: usize, rows: &mut [f32]) {
    rows.fill(0.0);
    for (row, j) in rows.chunks_exact_mut(lat).zip(js) {
        kv.latent_axpy(kern, layer, j, 1.0, row);
    }
}

/// b.s = b.q·b.rowsᵀ ([hp, KC]): per panel of NR cached rows, the rows transposed into
/// panel[d·NR + jj], then the tile for every MR heads.
fn scores(kern: &Kernels, b: &mut Buffers, hp: usize, lat: usize) {
    let tile = kern.table().tile;
    b.s.fill(0.0);
    for p0 in (0..KC).step_by(NR) {
        for (jj, row) in b.rows[p0 * lat..(p0 + NR) * lat].chunks_exact(lat).enumerate() {
            for (d, &x) in row.iter().enumerate() {
                b.panel[d * NR + jj] = x;
            }
        }
        for i0 in (0..hp).step_by(MR) {
            tile(&b.q[i0 * lat..(i0 + MR) * lat], &b.panel[..lat * NR], lat, &mut b.s[i0 * KC + p0..], KC, NR);
        }
    }
}

/// Scale the block's scores, fold the block into the running maxima (rescaling `sum` and
/// `acc`), and turn the scores of the first `len` columns into weights e^(s − max); the other
/// columns (and padded heads) get weight 0.
fn weigh(s: &mut [f32], out: &mut Partial, query: &Query<'_>, len: usize, rp: usize) {
    for (h, row) in s.chunks_exact_mut(KC).enumerate() {
        if h >= query.heads {
            row.fill(0.0);
            continue;
        }
        let live = &mut row[..len];
        live.iter_mut().for_each(|x| *x *= query.scale);
        let m = live.iter().fold(out.max[h], |a, &x| a.max(x));
        if m > out.max[h] {
            let r = if out.max[h] == f32::NEG_INFINITY { 0.0 } else { (out.max[h] - m).exp() };
            out.sum[h] *= r;
            out.acc[h * rp..(h + 1) * rp].iter_mut().for_each(|a| *a *= r);
            out.max[h] = m;
        }
        let mut sum = 0.0;
        for x in live.iter_mut() {
            *x = (*x - m).exp();
            sum += *x;
        }
        out.sum[h] += sum;
        row[len..].fill(0.0);
    }
}

/// acc += b.s·b.rows[:, ..rank] ([hp, rp]): per panel of NR latent columns, the block's
/// columns packed into panel[k·NR + jj] (zero past rank), then the tile for every MR heads.
fn values(kern: &Kernels, b: &mut Buffers, hp: usize, lat: usize, rank: usize, acc: &mut [f32], rp: usize) {
    let tile = kern.table().tile;
    for d0 in (0..rank).step_by(NR) {
        let w = NR.min(rank - d0);
        for (k, row) in b.rows.chunks_exact(lat).enumerate() {
            let dst = &mut b.panel[k * NR..(k + 1) * NR];
            dst[..w].copy_from_slice(&row[d0..d0 + w]);
            dst[w..].fill(0.0);
        }
        for i0 in (0..hp).step_by(MR) {
            tile(&b.s[i0 * KC..(i0 + MR) * KC], &b.panel[..KC * NR], KC, &mut acc[i0 * rp + d0..], rp, NR);
        }
    }
}

/// out ([heads, rank]) = the attention of one query row: its partials (one per range of its
/// positions, together covering them) merged by their maxima and normalised.
pub(super) fn merge(parts: &[Partial], heads: usize, rank: usize, out: &mut [f32]) {
    let rp = round_up(rank, NR);
    for (h, o) in out.chunks_exact_mut(rank).take(heads).enumerate() {
        let m = parts.iter().fold(f32::NEG_INFINITY, |a, p| a.max(p.max[h]));
        o.fill(0.0);
        let mut sum = 0.0;
        for p in parts.iter().filter(|p| p.max[h] > f32::NEG_INFINITY) {
            let r = (p.max[h] - m).exp();
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

    #[test]
    fn blocked_split_attention_equals_the_plain_form() {
        let c: Config = serde_json::from_str(CONFIG).unwrap();
        c.validate().unwrap();
        let kern = Kernels::new(crate::kernels::QuantActivations::Float);
        for dtype in [KvDtype::F32, KvDtype::BF16, KvDtype::F16] {
            let n = 300;
            let mut s = Session::new(&c, &SessionOptions { n_ctx: n, kv_dtype: dtype, ..Default::default() }).unwrap();
            s.kv.reserve(n).unwrap();
            for (j, row) in values(n * LAT, 1).chunks_exact(LAT).enumerate() {
                s.kv.write(0, j, row, &[]);
            }
            let q = values(HEADS * LAT, 2);
            let query = Query { q: &q, heads: HEADS, lat: LAT, rank: RANK, scale: 0.3 };
            // Range bounds: one range (several blocks, a short last one), a split in three, one position.
            let cases: [&[usize]; 3] = [&[5, 300], &[0, 7, 150, 299], &[42, 43]];
            for bounds in cases {
                let ranges: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
                let parts: Vec<Partial> = ranges.iter().map(|r| partial(&kern, &s.kv, 0, &query, r.clone())).collect();
                let mut got = vec![0f32; HEADS * RANK];
                merge(&parts, HEADS, RANK, &mut got);
                let want = plain(&kern, &s.kv, &q, ranges[0].start..ranges[ranges.len() - 1].end);
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{dtype:?} {ranges:?}: {got:?} vs {want:?}");
                }
            }
        }
    }
}
