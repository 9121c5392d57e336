//! The GGUF sources of the tensors only some architectures have, undoing what llama.cpp's
//! converter did to each: MLA's projections (`attn_k_b` [heads, rank, nope] and `attn_v_b`
//! [heads, v, rank] as colibri's W_UK / W_UV stacks, unchanged), Qwen3-Next's Gated DeltaNet
//! (`attn_qkv` + `attn_gate` are in_proj_qkvz already de-grouped — or its two parts where their
//! types differ, `DeltaNetConfig::split_z` —, older files' `ssm_in` is it
//! still grouped per key head; `ssm_ba` keeps its per-key-head groups [b_g, a_g]; `ssm_a` is
//! −exp(A_log); `ssm_conv1d` squeezed) and its gated attention (`attn_q` rows per head: [query,
//! gate]), and the biases, sinks and LayerNorm biases of GPT-OSS and Phi-MoE. Every piece is
//! shape-checked.

use super::file::GgufFile;
use super::piece::{required, Piece, ValueMap};
use crate::error::{fail, Result};
use colibri::model::{suffix, Config, TensorSpec};

/// The tensor `name` seen as the row-major matrix `want` (same innermost size and element
/// count: GGUF's 3-D per-head stacks are colibri's 2-D ones).
fn flat(f: &GgufFile, name: &str, want: &[u64]) -> Result<Option<Piece>> {
    let Some(t) = f.tensor(name) else { return Ok(None) };
    let (ne, n): (&[u64], u64) = (&t.info.ne, want.iter().product());
    if ne.first() != want.last() || ne.iter().product::<u64>() != n {
        return Err(fail(format!("GGUF tensor {name} has ne {ne:?}, the config implies shape {want:?}")));
    }
    Ok(Some(Piece::whole(t)))
}

/// Row runs (first row, rows) of the matrix `name`, whose shape must be [rows, cols].
fn row_runs(f: &GgufFile, name: &str, shape: [u64; 2], runs: &[(u64, u64)]) -> Result<Vec<Piece>> {
    let p = required(f, &[name.to_string()], &shape, name)?;
    Ok(runs
        .iter()
        .map(|&(first, rows)| Piece { byte_offset: first * p.row_bytes, bytes: rows * p.row_bytes, ..p.clone() })
        .collect())
}

/// The pieces of `sfx` of layer `l` when it is one of the tensors above; None otherwise.
pub fn layer(f: &GgufFile, c: &Config, l: usize, sfx: &str, spec: &TensorSpec) -> Result<Option<Vec<Piece>>> {
    use suffix::*;
    let b = |leaf: &str| format!("blk.{l}.{leaf}");
    let one = |names: &[&str]| -> Result<Option<Vec<Piece>>> {
        let names: Vec<String> = names.iter().map(|n| b(n)).collect();
        Ok(Some(vec![required(f, &names, &spec.shape, &spec.name)?]))
    };
    match sfx {
        Q | GATE if c.attn_output_gate => gated_q(f, c, l, sfx == GATE).map(Some),
        Q_A => one(&["attn_q_a.weight"]),
        Q_A_NORM => one(&["attn_q_a_norm.weight"]),
        Q_B => one(&["attn_q_b.weight"]),
        KV_A => one(&["attn_kv_a_mqa.weight"]),
        KV_A_NORM => one(&["attn_kv_a_norm.weight"]),
        K_B | V_B => mla_up(f, l, sfx == V_B, spec).map(Some),
        DN_QKVZ | DN_BA | DN_A_LOG => delta_net(f, c, l, sfx, spec).map(Some),
        DN_QKV => one(&["attn_qkv.weight"]),
        DN_Z => one(&["attn_gate.weight"]),
        DN_CONV => one(&["ssm_conv1d.weight"]),
        DN_DT_BIAS => one(&["ssm_dt.bias"]),
        DN_NORM => one(&["ssm_norm.weight"]),
        DN_OUT => one(&["ssm_out.weight"]),
        O_BIAS => one(&["attn_output.bias"]),
        SINKS => one(&["attn_sinks.weight", "attn_sinks"]),
        ROUTER_LOGIT_BIAS => one(&["ffn_gate_inp.bias"]),
        EXPERTS_GATE_BIAS => one(&["ffn_gate_exps.bias"]),
        EXPERTS_UP_BIAS => one(&["ffn_up_exps.bias"]),
        EXPERTS_DOWN_BIAS => one(&["ffn_down_exps.bias"]),
        ATTN_NORM_BIAS => one(&["attn_norm.bias"]),
        FFN_NORM_BIAS => one(&["ffn_norm.bias", "post_attention_norm.bias"]),
        _ => Ok(None),
    }
}

/// W_UK (`attn_k_b`, ne [nope, rank, heads]) or W_UV (`attn_v_b`, ne [rank, v, heads]): colibri's
/// [heads·rank, nope] and [heads·v, rank] as they are. Files from before llama.cpp split
/// `kv_b_proj` are refused.
fn mla_up(f: &GgufFile, l: usize, values: bool, spec: &TensorSpec) -> Result<Vec<Piece>> {
    let name = format!("blk.{l}.attn_{}_b.weight", if values { "v" } else { "k" });
    if let Some(p) = flat(f, &name, &spec.shape)? {
        return Ok(vec![p]);
    }
    if f.tensor(&format!("blk.{l}.attn_kv_b.weight")).is_some() {
        return Err(fail(format!(
            "GGUF layer {l} holds the unsplit attn_kv_b of llama.cpp's older converter: convert the model again with a current llama.cpp (it writes attn_k_b / attn_v_b)"
        )));
    }
    Err(fail(format!("GGUF file lacks {name}")))
}

/// The query (or the gate) rows of a gated attention's `attn_q` ([query_h, gate_h] per head).
fn gated_q(f: &GgufFile, c: &Config, l: usize, gate: bool) -> Result<Vec<Piece>> {
    let (nh, hd) = (c.n_heads as u64, c.head_dim as u64);
    let skip = if gate { hd } else { 0 };
    let runs: Vec<(u64, u64)> = (0..nh).map(|i| (i * 2 * hd + skip, hd)).collect();
    row_runs(f, &format!("blk.{l}.attn_q.weight"), [2 * nh * hd, c.hidden_size as u64], &runs)
}

/// in_proj_qkvz (`attn_qkv` rows then `attn_gate` rows), in_proj_ba de-grouped from `ssm_ba`,
/// and A_log from `ssm_a`.
fn delta_net(f: &GgufFile, c: &Config, l: usize, sfx: &str, spec: &TensorSpec) -> Result<Vec<Piece>> {
    use suffix::*;
    let d = c.delta_net.ok_or_else(|| fail("internal: DeltaNet tensors without a delta_net config"))?;
    let h = c.hidden_size as u64;
    let b = |leaf: &str| format!("blk.{l}.{leaf}");
    match sfx {
        DN_QKVZ if f.tensor(&b("ssm_in.weight")).is_some() => {
            // Older converters: in_proj_qkvz as the checkpoint has it, [q_g, k_g, v_g, z_g] per
            // key head g (r = n_v / n_k v heads each).
            let (ng, dk, r) = (d.n_k_heads as u64, d.k_head_dim as u64, (d.n_v_heads / d.n_k_heads.max(1)) as u64);
            let parts = [dk, dk, r * d.v_head_dim as u64, r * d.v_head_dim as u64];
            let width: u64 = parts.iter().sum();
            let runs: Vec<(u64, u64)> = (0..4)
                .flat_map(|i| (0..ng).map(move |g| (g * width + parts[..i].iter().sum::<u64>(), parts[i])))
                .collect();
            row_runs(f, &b("ssm_in.weight"), [ng * width, h], &runs)
        }
        DN_QKVZ => {
            let (conv, v) = (d.conv_dim() as u64, d.value_dim() as u64);
            let qkv = required(f, &[b("attn_qkv.weight")], &[conv, h], &spec.name)?;
            let z = required(f, &[b("attn_gate.weight")], &[v, h], &spec.name)?;
            Ok(vec![qkv, z])
        }
        DN_BA => {
            let (ng, r) = (d.n_k_heads as u64, (d.n_v_heads / d.n_k_heads.max(1)) as u64);
            let runs: Vec<(u64, u64)> = (0..2).flat_map(|i| (0..ng).map(move |g| (g * 2 * r + i * r, r))).collect();
            row_runs(f, &b("ssm_ba.weight"), [2 * ng * r, h], &runs)
        }
        _ => {
            let mut p = required(f, &[b("ssm_a")], &spec.shape, &spec.name)?;
            if p.tensor.info.ggml.id != 0 {
                return Err(fail(format!(
                    "GGUF tensor {} is {}, expected F32",
                    p.tensor.info.name, p.tensor.info.ggml.name
                )));
            }
            p.map = Some(ValueMap::LnNeg);
            Ok(vec![p])
        }
    }
}
