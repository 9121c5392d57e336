//! Where each colibri tensor comes from in a GGUF model, undoing llama.cpp's converter: its
//! tensor names (`blk.{l}.attn_q.weight`, …), stacked expert tensors (`ffn_gate_exps`, ne =
//! [cols, rows, experts], experts one after another) or the older per-expert ones
//! (`ffn_gate.{e}.weight`), merged `attn_qkv` (row ranges), and the q/k row permutation of its
//! interleaved RoPE (`Permute`). Every piece is shape-checked here; each keeps its GGUF type.

use super::file::GgufFile;
use super::piece::{required, row_bytes, squeezed, whole};
pub use super::piece::{Permute, Piece, ValueMap};
use crate::error::{fail, Result};
use colibri::model::{suffix, Config, TensorSpec, EMBEDDING, FINAL_NORM, FINAL_NORM_BIAS, LM_HEAD, LM_HEAD_BIAS};

/// The pieces that, concatenated, give one colibri tensor's payload.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub spec: TensorSpec,
    pub pieces: Vec<Piece>,
}

/// Rows [start, start + rows) of `attn_qkv.{leaf}` ([q + 2kv, cols]), or None without one.
fn qkv_rows(f: &GgufFile, c: &Config, l: usize, leaf: &str, which: usize, want: &[u64]) -> Result<Option<Piece>> {
    let name = format!("blk.{l}.attn_qkv.{leaf}");
    let Some(t) = f.tensor(&name) else { return Ok(None) };
    let (q, kv) = ((c.n_heads * c.head_dim) as u64, (c.n_kv_heads * c.head_dim) as u64);
    let cols = if want.len() == 2 { want[1] } else { 1 };
    let expect: Vec<u64> = if want.len() == 2 { vec![q + 2 * kv, cols] } else { vec![q + 2 * kv] };
    if squeezed(t.info.ne.iter().rev().copied()) != squeezed(expect.iter().copied()) {
        return Err(fail(format!("GGUF tensor {name} has ne {:?}, the config implies {expect:?}", t.info.ne)));
    }
    let rb = if want.len() == 2 { row_bytes(t) } else { t.info.ggml.bytes(&[1]).unwrap_or(0) };
    let (start, rows) = [(0, q), (q, kv), (q + kv, kv)][which];
    Ok(Some(Piece {
        tensor: t.clone(),
        byte_offset: start * rb,
        bytes: rows * rb,
        row_bytes: rb,
        permute: None,
        map: None,
    }))
}

/// One expert stack [E, rows, cols]: a stacked `{base}_exps` tensor split per expert, gate or
/// up as the first or second half of each expert of a fused `ffn_gate_up_exps` (ne [cols,
/// 2·rows, E]: llama.cpp's `--fuse-gate-up-exps`), or the per-expert `{base}.{e}.weight` tensors.
fn experts(f: &GgufFile, l: usize, base: &str, spec: &TensorSpec) -> Result<Vec<Piece>> {
    let (e, rows, cols) = (spec.shape[0], spec.shape[1], spec.shape[2]);
    let stacked = format!("blk.{l}.{base}_exps.weight");
    let fused = format!("blk.{l}.ffn_gate_up_exps.weight");
    let (name, halves, half) = match base {
        _ if f.tensor(&stacked).is_some() => (stacked, 1, 0),
        "ffn_gate" | "ffn_up" if f.tensor(&fused).is_some() => (fused, 2, u64::from(base == "ffn_up")),
        _ => (stacked, 1, 0),
    };
    if let Some(t) = f.tensor(&name) {
        let want = [cols, halves * rows, e];
        if t.info.ne != want {
            return Err(fail(format!("GGUF tensor {name} has ne {:?}, the config implies {want:?}", t.info.ne)));
        }
        let per = t.info.bytes / e;
        let bytes = per / halves;
        let rb = row_bytes(t);
        return Ok((0..e)
            .map(|x| Piece {
                tensor: t.clone(),
                byte_offset: x * per + half * bytes,
                bytes,
                row_bytes: rb,
                permute: None,
                map: None,
            })
            .collect());
    }
    (0..e).map(|x| required(f, &[format!("blk.{l}.{base}.{x}.weight")], &[rows, cols], &spec.name)).collect()
}

/// The pieces of one layer tensor (`sfx` of layer `l`).
fn layer_tensor(
    f: &GgufFile,
    c: &Config,
    permuted_qk: bool,
    l: usize,
    sfx: &str,
    spec: &TensorSpec,
) -> Result<Vec<Piece>> {
    use suffix::*;
    if let Some(p) = super::special::layer(f, c, l, sfx, spec)? {
        return Ok(p);
    }
    let b = |leaf: &str| format!("blk.{l}.{leaf}");
    let one = |names: &[&str]| -> Result<Vec<Piece>> {
        Ok(vec![required(f, &names.iter().map(|n| b(n)).collect::<Vec<_>>(), &spec.shape, &spec.name)?])
    };
    // q, k, v (weight or bias): separate tensors, else rows of attn_qkv; q/k un-permuted.
    let attn = |leaf: &str, which: usize| -> Result<Vec<Piece>> {
        let kind = if spec.shape.len() == 2 { "weight" } else { "bias" };
        let sep = whole(f, &b(&format!("attn_{leaf}.{kind}")), &spec.shape)?;
        let mut p = match sep {
            Some(p) => p,
            None => qkv_rows(f, c, l, kind, which, &spec.shape)?
                .ok_or_else(|| fail(format!("GGUF file lacks blk.{l}.attn_{leaf}.{kind} (and attn_qkv)")))?,
        };
        if permuted_qk && which < 2 {
            p.permute = Some(Permute { head_rows: c.head_dim as u64 });
        }
        Ok(vec![p])
    };
    match sfx {
        ATTN_NORM => one(&["attn_norm.weight"]),
        FFN_NORM => one(&["ffn_norm.weight", "post_attention_norm.weight"]),
        Q | Q_BIAS => attn("q", 0),
        K | K_BIAS => attn("k", 1),
        V | V_BIAS => attn("v", 2),
        O => one(&["attn_output.weight"]),
        Q_NORM => one(&["attn_q_norm.weight"]),
        K_NORM => one(&["attn_k_norm.weight"]),
        ROUTER => one(&["ffn_gate_inp.weight"]),
        ROUTER_BIAS => one(&["exp_probs_b.bias", "exp_probs_b.weight"]),
        EXPERTS_GATE => experts(f, l, "ffn_gate", spec),
        EXPERTS_UP => experts(f, l, "ffn_up", spec),
        EXPERTS_DOWN => experts(f, l, "ffn_down", spec),
        SHARED_GATE_PROJ => one(&["ffn_gate_shexp.weight"]),
        SHARED_UP => one(&["ffn_up_shexp.weight"]),
        SHARED_DOWN => one(&["ffn_down_shexp.weight"]),
        SHARED_EXPERT_GATE => one(&["ffn_gate_inp_shexp.weight"]),
        MLP_GATE => one(&["ffn_gate.weight"]),
        MLP_UP => one(&["ffn_up.weight"]),
        MLP_DOWN => one(&["ffn_down.weight"]),
        other => Err(fail(format!("internal: no GGUF source rule for '{other}'"))),
    }
}

/// Resolve every tensor the config implies; errors name the missing or mis-shaped tensor.
pub fn resolve(f: &GgufFile, c: &Config, permuted_qk: bool, specs: &[TensorSpec]) -> Result<Vec<Resolved>> {
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        let top =
            |name: &str| -> Result<Vec<Piece>> { Ok(vec![required(f, &[name.to_string()], &spec.shape, &spec.name)?]) };
        let pieces = if spec.name == EMBEDDING {
            top("token_embd.weight")?
        } else if spec.name == FINAL_NORM {
            top("output_norm.weight")?
        } else if spec.name == LM_HEAD {
            top("output.weight")?
        } else if spec.name == FINAL_NORM_BIAS {
            top("output_norm.bias")?
        } else if spec.name == LM_HEAD_BIAS {
            top("output.bias")?
        } else {
            let rest = spec.name.strip_prefix("layers.").ok_or_else(|| fail(format!("internal: {}", spec.name)))?;
            let (l, sfx) = rest.split_once('.').ok_or_else(|| fail(format!("internal: {}", spec.name)))?;
            let l: usize = l.parse().map_err(|_| fail(format!("internal: {}", spec.name)))?;
            layer_tensor(f, c, permuted_qk, l, sfx, spec)?
        };
        out.push(Resolved { spec: spec.clone(), pieces });
    }
    Ok(out)
}

/// The tensors a mapping reads into the config instead (LongRoPE's factors, Llama-4's llama3
/// divisors).
const READ_INTO_CONFIG: [&str; 3] = ["rope_factors_long.weight", "rope_factors_short.weight", "rope_freqs.weight"];

/// GGUF tensors neither a colibri tensor nor the config uses (reported as a warning).
pub fn unused(f: &GgufFile, c: &Config, resolved: &[Resolved]) -> Vec<String> {
    let mut used: std::collections::HashSet<&str> =
        resolved.iter().flat_map(|r| r.pieces.iter().map(|p| p.tensor.info.name.as_str())).collect();
    if matches!(c.rope.scaling, colibri::model::RopeScaling::LongRope { .. }) {
        used.extend(READ_INTO_CONFIG);
    }
    f.tensors.iter().map(|t| t.info.name.as_str()).filter(|n| !used.contains(n)).map(String::from).collect()
}
