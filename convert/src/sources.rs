//! Where each colibri tensor comes from in a HuggingFace checkpoint: one source tensor, one per
//! expert (hub layout `experts.{e}.w1` / `experts.{e}.gate_proj`), or slices of the fused 3-D
//! expert tensors of transformers 5 (`experts.gate_up_proj` [E, 2F, H], `experts.down_proj`
//! [E, H, F]); GPT-OSS's experts in `gpt_oss`. Every piece is shape-checked here.

use super::cast;
use super::fp8::BlockScale;
use super::gpt_oss;
pub use super::piece::{Piece, PieceLayout};
use super::safetensors::{Checkpoint, SrcDType, SrcTensor};
use crate::error::{fail, Result};
use colibri::model::{
    suffix, Config, Family, TensorSpec, EMBEDDING, FINAL_NORM, FINAL_NORM_BIAS, LM_HEAD, LM_HEAD_BIAS,
};
use std::sync::Arc;

/// The pieces that, concatenated, give one colibri tensor's payload.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub spec: TensorSpec,
    pub pieces: Vec<Piece>,
}

fn whole(ck: &Checkpoint, name: &str, want: &[u64]) -> Result<Option<Piece>> {
    let Some(t) = ck.tensors.get(name) else { return Ok(None) };
    if t.shape != want {
        return Err(fail(format!("tensor {name} has shape {:?}, the config implies {:?}", t.shape, want)));
    }
    let elements = want.iter().product();
    Ok(Some(Piece {
        source: name.to_string(),
        tensor: t.clone(),
        byte_offset: 0,
        elements,
        layout: PieceLayout::Contiguous,
        scale: fp8_scale(ck, name, t)?,
    }))
}

/// The scales of fp8 tensor `name` (`{name}_scale_inv`, tiles of the config's block size);
/// None for a float tensor.
fn fp8_scale(ck: &Checkpoint, name: &str, t: &SrcTensor) -> Result<Option<Arc<BlockScale>>> {
    if t.dtype != SrcDType::F8E4M3 {
        return Ok(None);
    }
    let block = ck.fp8_block.ok_or_else(|| {
        fail(format!("tensor {name} is float8_e4m3fn but config.json has no fp8 quantization_config"))
    })?;
    let scale_name = format!("{name}_scale_inv");
    let s = ck.tensors.get(&scale_name).ok_or_else(|| fail(format!("fp8 tensor {name} has no {scale_name}")))?;
    if s.dtype == SrcDType::F8E4M3 {
        return Err(fail(format!("{scale_name} must be a float tensor")));
    }
    let mut bytes = vec![0u8; s.len as usize];
    ck.read(s, 0, &mut bytes)?;
    let mut scales = Vec::new();
    cast::widen(s.dtype, &bytes, &mut scales);
    Ok(Some(Arc::new(BlockScale::new(name, scales, &s.shape, &t.shape, block)?)))
}

fn first_of(ck: &Checkpoint, names: &[String], want: &[u64]) -> Result<Option<Piece>> {
    for n in names {
        if let Some(p) = whole(ck, n, want)? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

fn required(ck: &Checkpoint, names: &[String], want: &[u64], what: &str) -> Result<Piece> {
    first_of(ck, names, want)?
        .ok_or_else(|| fail(format!("missing tensor for {what}: looked for {}", names.join(" or "))))
}

/// Rows of the 2-D source tensor `name` (whose shape must be `want`), as pieces in the order of
/// `runs` (start row, row count): how grouped projections are de-grouped.
fn row_pieces(ck: &Checkpoint, name: &str, want: [u64; 2], runs: &[(u64, u64)]) -> Result<Vec<Piece>> {
    let t = ck.tensors.get(name).ok_or_else(|| fail(format!("missing tensor {name}")))?;
    if t.shape != want {
        return Err(fail(format!("tensor {name} has shape {:?}, the config implies {:?}", t.shape, want)));
    }
    let row_bytes = want[1] * t.dtype.size() as u64;
    Ok(runs
        .iter()
        .map(|&(start, rows)| Piece {
            source: name.to_string(),
            tensor: t.clone(),
            byte_offset: start * row_bytes,
            elements: rows * want[1],
            layout: PieceLayout::Contiguous,
            scale: None,
        })
        .collect())
}

/// A tensor stored with extra unit dimensions (conv1d.weight [C, 1, K] for [C, K]).
fn squeezed(ck: &Checkpoint, name: &str, want: &[u64]) -> Result<Vec<Piece>> {
    let t = ck.tensors.get(name).ok_or_else(|| fail(format!("missing tensor {name}")))?;
    let real: Vec<u64> = t.shape.iter().copied().filter(|&d| d != 1).collect();
    if real != want.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>() {
        return Err(fail(format!("tensor {name} has shape {:?}, the config implies {:?}", t.shape, want)));
    }
    Ok(vec![Piece {
        source: name.to_string(),
        tensor: t.clone(),
        byte_offset: 0,
        elements: want.iter().product(),
        layout: PieceLayout::Contiguous,
        scale: None,
    }])
}

/// Qwen3-Next's grouped projections, de-grouped (`Qwen3NextGatedDeltaNet.fix_query_key_value_ordering`):
/// in_proj_qkvz rows are, per key head g, [q_g (dk), k_g (dk), v_g (r·dv), z_g (r·dv)] with r =
/// n_v_heads / n_k_heads; colibri's rows are all q, all k, all v, all z. in_proj_ba rows are, per
/// key head, [b_g (r), a_g (r)]; colibri's are all b, all a. The attention q_proj rows are, per
/// head, [query (head_dim), gate (head_dim)].
fn degrouped(ck: &Checkpoint, c: &Config, l: usize, sfx: &str, spec: &TensorSpec) -> Result<Vec<Piece>> {
    use suffix::*;
    let h = c.hidden_size as u64;
    let lin = |leaf: &str| format!("model.layers.{l}.linear_attn.{leaf}");
    let d = c.delta_net.ok_or_else(|| fail("internal: DeltaNet tensors without a delta_net config"))?;
    let (ng, dk, dv) = (d.n_k_heads as u64, d.k_head_dim as u64, d.v_head_dim as u64);
    let r = (d.n_v_heads / d.n_k_heads) as u64;
    let per_group = |parts: &[u64], pick: usize| -> Vec<(u64, u64)> {
        let width: u64 = parts.iter().sum();
        let at: u64 = parts[..pick].iter().sum();
        (0..ng).map(|g| (g * width + at, parts[pick])).collect()
    };
    match sfx {
        DN_QKVZ => {
            let parts = [dk, dk, r * dv, r * dv];
            let runs: Vec<_> = (0..4).flat_map(|i| per_group(&parts, i)).collect();
            row_pieces(ck, &lin("in_proj_qkvz.weight"), [ng * parts.iter().sum::<u64>(), h], &runs)
        }
        DN_BA => {
            let runs: Vec<_> = (0..2).flat_map(|i| per_group(&[r, r], i)).collect();
            row_pieces(ck, &lin("in_proj_ba.weight"), [ng * 2 * r, h], &runs)
        }
        DN_CONV => squeezed(ck, &lin("conv1d.weight"), &spec.shape),
        _ => {
            // q or gate of a gated attention q_proj.
            let (nh, hd) = (c.n_heads as u64, c.head_dim as u64);
            let skip = if sfx == GATE { hd } else { 0 };
            let runs: Vec<_> = (0..nh).map(|i| (i * 2 * hd + skip, hd)).collect();
            row_pieces(ck, &format!("model.layers.{l}.self_attn.q_proj.weight"), [2 * nh * hd, h], &runs)
        }
    }
}

/// ERNIE-4.5-MoE's choice bias, [1, n_experts] in the checkpoint: `mlp.moe_statics.*` as the
/// hub (and save_pretrained) writes it, `mlp.gate.moe_statics.*` as transformers names it.
fn ernie_choice_bias(ck: &Checkpoint, l: usize, want: &[u64]) -> Result<Vec<Piece>> {
    let names =
        ["mlp.moe_statics", "mlp.gate.moe_statics"].map(|p| format!("model.layers.{l}.{p}.e_score_correction_bias"));
    let name = names.iter().find(|n| ck.tensors.contains_key(*n)).unwrap_or(&names[0]);
    squeezed(ck, name, want)
}

/// The MoE sub-module prefixes a family's checkpoints use for layer `l`.
fn moe_prefixes(fam: Family, l: usize) -> Vec<String> {
    let base = format!("model.layers.{l}");
    match fam {
        Family::Mixtral | Family::GraniteMoe | Family::Phimoe => {
            vec![format!("{base}.block_sparse_moe"), format!("{base}.mlp")]
        }
        Family::Llama4 => vec![format!("{base}.feed_forward")],
        _ => vec![format!("{base}.mlp")],
    }
}

/// Which projection of an expert stack.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Proj {
    Gate,
    Up,
    Down,
}

fn gpt_oss_proj(p: Proj) -> gpt_oss::Proj {
    match p {
        Proj::Gate => gpt_oss::Proj::Gate,
        Proj::Up => gpt_oss::Proj::Up,
        Proj::Down => gpt_oss::Proj::Down,
    }
}

fn expert_stack(ck: &Checkpoint, fam: Family, l: usize, proj: Proj, spec: &TensorSpec) -> Result<Vec<Piece>> {
    if fam == Family::GptOss {
        return gpt_oss::expert_stack(ck, l, gpt_oss_proj(proj), spec);
    }
    if fam == Family::Llama4 {
        return super::llama4::expert_stack(ck, l, gpt_oss_proj(proj), spec);
    }
    let (e_count, rows, cols) = (spec.shape[0], spec.shape[1], spec.shape[2]);
    let per_expert_names: &[&str] = match proj {
        Proj::Gate => &["w1", "gate_proj"],
        Proj::Up => &["w3", "up_proj"],
        Proj::Down => &["w2", "down_proj"],
    };
    for prefix in moe_prefixes(fam, l) {
        // Hub layout: one tensor per expert.
        for leaf in per_expert_names {
            let name = |e: u64| format!("{prefix}.experts.{e}.{leaf}.weight");
            if ck.tensors.contains_key(&name(0)) {
                return (0..e_count).map(|e| required(ck, &[name(e)], &[rows, cols], &spec.name)).collect();
            }
        }
        // transformers-5 fused layout, or Granite's hub layout (the same [E, 2F, H] / [E, H, F]
        // stacks named input_linear / output_linear).
        let fused_names = match proj {
            Proj::Gate | Proj::Up => {
                [format!("{prefix}.experts.gate_up_proj"), format!("{prefix}.input_linear.weight")]
            }
            Proj::Down => [format!("{prefix}.experts.down_proj"), format!("{prefix}.output_linear.weight")],
        };
        let Some((fused, t)) = fused_names.iter().find_map(|n| ck.tensors.get(n).map(|t| (n.clone(), t))) else {
            continue;
        };
        if t.dtype == SrcDType::F8E4M3 {
            return Err(fail(format!("{fused}: fp8 expert stacks are read only one tensor per expert")));
        }
        {
            let fused_rows = if proj == Proj::Down { rows } else { 2 * rows };
            let want = [e_count, fused_rows, cols];
            if t.shape != want {
                return Err(fail(format!("tensor {fused} has shape {:?}, the config implies {:?}", t.shape, want)));
            }
            let row_bytes = cols * t.dtype.size() as u64;
            let skip = if proj == Proj::Up { rows } else { 0 };
            return Ok((0..e_count)
                .map(|e| Piece {
                    source: fused.clone(),
                    tensor: t.clone(),
                    byte_offset: (e * fused_rows + skip) * row_bytes,
                    elements: rows * cols,
                    layout: PieceLayout::Contiguous,
                    scale: None,
                })
                .collect());
        }
    }
    Err(fail(format!(
        "missing expert weights for {} (neither experts.{{e}}.{} nor fused experts tensors found in layer {l})",
        spec.name, per_expert_names[0]
    )))
}

/// MLA's W_UK (`k_b`: per head the K rows of kv_b_proj, transposed) or W_UV (`v_b`: per head
/// its V rows) as one piece per head of `kv_b_proj` [n_heads·(qk_nope + v_head_dim), kv_lora_rank].
fn kv_b_heads(ck: &Checkpoint, c: &Config, l: usize, values: bool) -> Result<Vec<Piece>> {
    let Some(m) = &c.mla else { return Err(fail("internal: k_b/v_b without MLA")) };
    let (nope, v, rank) = (m.qk_nope_head_dim as u64, m.v_head_dim as u64, m.kv_lora_rank as u64);
    let name = format!("model.layers.{l}.self_attn.kv_b_proj.weight");
    let want = [c.n_heads as u64 * (nope + v), rank];
    let whole = required(ck, &[name], &want, &format!("layers.{l} kv_b_proj"))?;
    let row_bytes = rank * whole.tensor.dtype.size() as u64;
    Ok((0..c.n_heads as u64)
        .map(|h| {
            let (first, rows) = if values { (h * (nope + v) + nope, v) } else { (h * (nope + v), nope) };
            // W_UK is written transposed: the head's [nope, rank] rows become [rank, nope].
            let layout = if values { PieceLayout::Contiguous } else { PieceLayout::Transposed { rows, cols: rank } };
            Piece { byte_offset: first * row_bytes, elements: rows * rank, layout, ..whole.clone() }
        })
        .collect())
}

/// The tensors outside the layers: colibri name → checkpoint name.
const GLOBAL_SOURCES: [(&str, &str); 5] = [
    (EMBEDDING, "model.embed_tokens.weight"),
    (FINAL_NORM, "model.norm.weight"),
    (FINAL_NORM_BIAS, "model.norm.bias"),
    (LM_HEAD, "lm_head.weight"),
    (LM_HEAD_BIAS, "lm_head.bias"),
];

/// Resolve every tensor the config implies; errors name the missing or mis-shaped tensor.
pub fn resolve(ck: &Checkpoint, c: &Config, specs: &[TensorSpec]) -> Result<Vec<Resolved>> {
    use suffix::*;
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        let shape = spec.shape.clone();
        let one = |names: Vec<String>| -> Result<Vec<Piece>> { Ok(vec![required(ck, &names, &shape, &spec.name)?]) };
        let pieces = if let Some(&(_, source)) = GLOBAL_SOURCES.iter().find(|(name, _)| spec.name == *name) {
            one(vec![source.into()])?
        } else {
            let rest = spec.name.strip_prefix("layers.").ok_or_else(|| fail(format!("internal: {}", spec.name)))?;
            let (l, sfx) = rest.split_once('.').ok_or_else(|| fail(format!("internal: {}", spec.name)))?;
            let l: usize = l.parse().map_err(|_| fail(format!("internal: {}", spec.name)))?;
            let base = format!("model.layers.{l}");
            let attn = |leaf: &str| vec![format!("{base}.self_attn.{leaf}")];
            let dense = |proj: &str| ["mlp", "feed_forward"].map(|m| format!("{base}.{m}.{proj}.weight")).to_vec();
            let moe = |leaf: &str| moe_prefixes(c.family, l).into_iter().map(|p| format!("{p}.{leaf}")).collect();
            // Qwen2-MoE's `shared_expert`, GLM-4.5's `shared_experts`, Hunyuan-MoE's `shared_mlp`.
            let shared = |proj: &str| -> Vec<String> {
                ["shared_expert", "shared_experts", "shared_mlp"]
                    .iter()
                    .flat_map(|m| moe(&format!("{m}.{proj}.weight")))
                    .collect()
            };
            match sfx {
                ATTN_NORM => one(vec![format!("{base}.input_layernorm.weight")])?,
                FFN_NORM => one(vec![format!("{base}.post_attention_layernorm.weight")])?,
                ATTN_NORM_BIAS => one(vec![format!("{base}.input_layernorm.bias")])?,
                FFN_NORM_BIAS => one(vec![format!("{base}.post_attention_layernorm.bias")])?,
                Q if c.attn_output_gate => degrouped(ck, c, l, sfx, spec)?,
                GATE | DN_QKVZ | DN_BA | DN_CONV => degrouped(ck, c, l, sfx, spec)?,
                DN_DT_BIAS => one(vec![format!("{base}.linear_attn.dt_bias")])?,
                DN_A_LOG => one(vec![format!("{base}.linear_attn.A_log")])?,
                DN_NORM => one(vec![format!("{base}.linear_attn.norm.weight")])?,
                DN_OUT => one(vec![format!("{base}.linear_attn.out_proj.weight")])?,
                Q => one(attn("q_proj.weight"))?,
                K => one(attn("k_proj.weight"))?,
                V => one(attn("v_proj.weight"))?,
                O => one(attn("o_proj.weight"))?,
                Q_BIAS => one(attn("q_proj.bias"))?,
                K_BIAS => one(attn("k_proj.bias"))?,
                V_BIAS => one(attn("v_proj.bias"))?,
                O_BIAS => one(attn("o_proj.bias"))?,
                SINKS => one(attn("sinks"))?,
                ROUTER_LOGIT_BIAS => one(moe("router.bias"))?,
                EXPERTS_GATE_BIAS => gpt_oss::expert_bias(ck, l, gpt_oss::Proj::Gate, spec)?,
                EXPERTS_UP_BIAS => gpt_oss::expert_bias(ck, l, gpt_oss::Proj::Up, spec)?,
                EXPERTS_DOWN_BIAS => gpt_oss::expert_bias(ck, l, gpt_oss::Proj::Down, spec)?,
                Q_NORM => one([attn("q_norm.weight"), attn("query_layernorm.weight")].concat())?,
                K_NORM => one([attn("k_norm.weight"), attn("key_layernorm.weight")].concat())?,
                Q_A => one(attn("q_a_proj.weight"))?,
                Q_A_NORM => one(attn("q_a_layernorm.weight"))?,
                Q_B => one(attn("q_b_proj.weight"))?,
                KV_A => one(attn("kv_a_proj_with_mqa.weight"))?,
                KV_A_NORM => one(attn("kv_a_layernorm.weight"))?,
                K_B => kv_b_heads(ck, c, l, false)?,
                V_B => kv_b_heads(ck, c, l, true)?,
                ROUTER => one(["gate", "router", "router.layer", "gate.wg"]
                    .iter()
                    .flat_map(|r| moe(&format!("{r}.weight")))
                    .collect())?,
                ROUTER_BIAS if c.family == Family::Ernie45Moe => ernie_choice_bias(ck, l, &shape)?,
                ROUTER_BIAS => one(moe("gate.e_score_correction_bias"))?,
                EXPERTS_GATE => expert_stack(ck, c.family, l, Proj::Gate, spec)?,
                EXPERTS_UP => expert_stack(ck, c.family, l, Proj::Up, spec)?,
                EXPERTS_DOWN => expert_stack(ck, c.family, l, Proj::Down, spec)?,
                SHARED_GATE_PROJ => one(shared("gate_proj"))?,
                SHARED_UP => one(shared("up_proj"))?,
                SHARED_DOWN => one(shared("down_proj"))?,
                SHARED_EXPERT_GATE => one(moe("shared_expert_gate.weight"))?,
                // Llama-4's dense layers: feed_forward.*.
                MLP_GATE => one(dense("gate_proj"))?,
                MLP_UP => one(dense("up_proj"))?,
                MLP_DOWN => one(dense("down_proj"))?,
                other => return Err(fail(format!("internal: no source rule for '{other}'"))),
            }
        };
        out.push(Resolved { spec: spec.clone(), pieces });
    }
    Ok(out)
}

/// Whether `name` belongs to a layer past the config's layers: DeepSeek-V3's multi-token
/// prediction modules (`model.layers.{num_hidden_layers..}`), which transformers does not load.
pub fn beyond_layers(name: &str, c: &Config) -> bool {
    let layer = name.strip_prefix("model.layers.").and_then(|r| r.split('.').next()?.parse::<usize>().ok());
    layer.is_some_and(|l| l >= c.n_layers)
}

/// The `*_scales` tensor an MXFP4 piece reads besides its source.
fn scales_of(p: &Piece) -> Option<&str> {
    match &p.layout {
        PieceLayout::Mxfp4 { scales_source, .. } => Some(scales_source.as_str()),
        _ => None,
    }
}

/// Source tensors that no colibri tensor uses (reported as a warning), leaving out the layers
/// past the config's (`beyond_layers`).
pub fn unused(ck: &Checkpoint, resolved: &[Resolved], c: &Config) -> Vec<String> {
    let used: std::collections::HashSet<&str> = resolved
        .iter()
        .flat_map(|r| r.pieces.iter().flat_map(|p| std::iter::once(p.source.as_str()).chain(scales_of(p))))
        .collect();
    ck.tensors
        .keys()
        .filter(|k| !used.contains(k.as_str()) && !beyond_layers(k, c))
        .filter(|k| !k.strip_suffix("_scale_inv").is_some_and(|w| used.contains(w)))
        .filter(|k| !(c.tie_embeddings && k.as_str() == "lm_head.weight"))
        .filter(|k| !k.ends_with("rotary_emb.inv_freq"))
        .cloned()
        .collect()
}
