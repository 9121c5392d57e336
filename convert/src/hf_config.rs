//! HuggingFace config.json (transformers 4 and 5 key spellings) → colibri `Config`, plus the
//! special-token ids gathered from config.json, generation_config.json and tokenizer_config.json.
//! Family rules mirror transformers' configuration_<family>.py and modeling_<family>.py.

use crate::error::{fail, Result};
use colibri::model::{
    Config, DeltaNetConfig, ExpertGroups, Family, LayerKind, LayerSpec, MoeConfig, QkNorm, Rope, RopeScaling, Scales,
    Scoring,
};
use serde_json::Value;

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn usize_key(v: &Value, key: &str) -> Result<usize> {
    opt_usize(v, key)?.ok_or_else(|| fail(format!("config.json lacks '{key}'")))
}

fn opt_usize(v: &Value, key: &str) -> Result<Option<usize>> {
    match get(v, key) {
        None => Ok(None),
        Some(x) => x
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| fail(format!("config.json '{key}' must be a non-negative integer, got {x}"))),
    }
}

fn opt_f64(v: &Value, key: &str) -> Result<Option<f64>> {
    match get(v, key) {
        None => Ok(None),
        Some(x) => x.as_f64().map(Some).ok_or_else(|| fail(format!("config.json '{key}' must be a number, got {x}"))),
    }
}

fn opt_bool(v: &Value, key: &str) -> Result<Option<bool>> {
    match get(v, key) {
        None => Ok(None),
        Some(x) => {
            x.as_bool().map(Some).ok_or_else(|| fail(format!("config.json '{key}' must be true/false, got {x}")))
        }
    }
}

/// Token ids given as an int or a list of ints.
pub fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32).collect(),
        _ => Vec::new(),
    }
}

/// Which family a config.json describes.
pub fn family(hf: &Value) -> Result<Family> {
    let arch = hf.get("architectures").and_then(|a| a.get(0)).and_then(|a| a.as_str());
    let model_type = hf.get("model_type").and_then(|m| m.as_str());
    let fam = match (arch, model_type) {
        (Some("MixtralForCausalLM"), _) | (None, Some("mixtral")) => Family::Mixtral,
        (Some("Qwen2MoeForCausalLM"), _) | (None, Some("qwen2_moe")) => Family::Qwen2Moe,
        (Some("Qwen3MoeForCausalLM"), _) | (None, Some("qwen3_moe")) => Family::Qwen3Moe,
        (Some("OlmoeForCausalLM"), _) | (None, Some("olmoe")) => Family::Olmoe,
        (Some("GraniteMoeForCausalLM"), _) | (None, Some("granitemoe")) => Family::GraniteMoe,
        (Some("Glm4MoeForCausalLM"), _) | (None, Some("glm4_moe")) => Family::Glm4Moe,
        (Some("Qwen3NextForCausalLM"), _) | (None, Some("qwen3_next")) => Family::Qwen3Next,
        (a, m) => {
            return Err(fail(format!(
                "unsupported model family (architectures {:?}, model_type {:?}); supported: \
                 MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM, \
                 GraniteMoeForCausalLM, Glm4MoeForCausalLM, Qwen3NextForCausalLM",
                a.unwrap_or("?"),
                m.unwrap_or("?")
            )))
        }
    };
    Ok(fam)
}

/// The RoPE parameters dictionary: transformers 5 `rope_parameters`, else transformers 4
/// `rope_scaling` merged with top-level `rope_theta`.
fn rope(hf: &Value, fam: Family, head_dim: usize, max_pos: usize) -> Result<Rope> {
    let params = get(hf, "rope_parameters").or_else(|| get(hf, "rope_scaling"));
    let p = |k: &str| params.and_then(|p| get(p, k));
    let pf = |k: &str| -> Result<Option<f64>> {
        match p(k) {
            None => Ok(None),
            Some(x) => x.as_f64().map(Some).ok_or_else(|| fail(format!("rope parameter '{k}' must be a number"))),
        }
    };
    let default_theta = match fam {
        Family::Mixtral => 1e6,
        _ => 10000.0,
    };
    let theta = pf("rope_theta")?.or(opt_f64(hf, "rope_theta")?).unwrap_or(default_theta);
    // GLM-4.5 rotates half of each head, Qwen3-Next a quarter, unless told otherwise (the
    // defaults of Glm4MoeConfig / Qwen3NextConfig).
    let default_partial = match fam {
        Family::Glm4Moe => 0.5,
        Family::Qwen3Next => 0.25,
        _ => 1.0,
    };
    let partial = pf("partial_rotary_factor")?.or(opt_f64(hf, "partial_rotary_factor")?).unwrap_or(default_partial);
    let kind = p("rope_type").or_else(|| p("type")).and_then(|t| t.as_str()).unwrap_or("default");
    let original =
        pf("original_max_position_embeddings")?.or(opt_f64(hf, "original_max_position_embeddings")?).map(|x| x as u64);
    let factor = pf("factor")?;
    let need_factor = || factor.ok_or_else(|| fail(format!("rope type '{kind}' needs 'factor'")));
    let scaling = match kind {
        "default" | "none" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: need_factor()? },
        "dynamic" => RopeScaling::Dynamic {
            factor: need_factor()?,
            original_max_position_embeddings: original.unwrap_or(max_pos as u64),
        },
        "yarn" => {
            let original = original.unwrap_or(max_pos as u64);
            let factor = factor.unwrap_or(max_pos as f64 / original as f64);
            let get_mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
            let attention_factor = match (pf("attention_factor")?, pf("mscale")?, pf("mscale_all_dim")?) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(md)) if m != 0.0 && md != 0.0 => get_mscale(factor, m) / get_mscale(factor, md),
                _ => get_mscale(factor, 1.0),
            };
            let beta_fast = pf("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0);
            let beta_slow = pf("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0);
            let truncate = p("truncate").and_then(|t| t.as_bool()).unwrap_or(true);
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings: original,
                beta_fast,
                beta_slow,
                attention_factor,
                truncate,
            }
        }
        "llama3" => RopeScaling::Llama3 {
            factor: need_factor()?,
            low_freq_factor: pf("low_freq_factor")?.unwrap_or(1.0),
            high_freq_factor: pf("high_freq_factor")?.unwrap_or(4.0),
            original_max_position_embeddings: original.unwrap_or(8192),
        },
        other => return Err(fail(format!("unsupported rope type '{other}'"))),
    };
    let _ = head_dim;
    Ok(Rope { theta, partial_rotary_factor: partial, scaling })
}

/// Sliding windows per layer: transformers 5 `layer_types`, else the family's rule.
fn sliding(hf: &Value, fam: Family, n_layers: usize) -> Result<Vec<Option<usize>>> {
    let window = opt_usize(hf, "sliding_window")?.filter(|&w| w > 0);
    let use_sw = opt_bool(hf, "use_sliding_window")?;
    if let Some(types) = get(hf, "layer_types").and_then(|t| t.as_array()) {
        if types.len() != n_layers {
            return Err(fail(format!("layer_types has {} entries for {n_layers} layers", types.len())));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => {
                    window.map(Some).ok_or_else(|| fail("a sliding_attention layer but no sliding_window"))
                }
                // Qwen3-Next's DeltaNet layers have no window (their kind: `layer_kinds`).
                Some("full_attention") => Ok(None),
                Some("linear_attention") if fam == Family::Qwen3Next => Ok(None),
                other => Err(fail(format!("unsupported layer type {other:?}"))),
            })
            .collect();
    }
    Ok(match fam {
        Family::Mixtral => vec![window; n_layers],
        Family::GraniteMoe | Family::Glm4Moe | Family::Qwen3Next => vec![None; n_layers],
        Family::Qwen3Moe => vec![if use_sw == Some(true) { window } else { None }; n_layers],
        Family::Qwen2Moe => {
            let max_window_layers = opt_usize(hf, "max_window_layers")?.unwrap_or(28);
            (0..n_layers)
                .map(|i| if use_sw == Some(true) && (i + 1) % 2 == 1 && i < max_window_layers { window } else { None })
                .collect()
        }
        Family::Olmoe => vec![None; n_layers],
    })
}

/// The routed experts (count, top-k, widths, renormalisation, shared expert) and the dense
/// layers' FFN width.
fn moe_config(hf: &Value, fam: Family) -> Result<(MoeConfig, usize)> {
    // transformers 5 writes `num_local_experts` for most families; transformers 4 `num_experts`
    // for all but Mixtral; GLM-4.5 (and DeepSeek) `n_routed_experts`.
    let n_experts = match (opt_usize(hf, "num_local_experts")?, opt_usize(hf, "n_routed_experts")?) {
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => usize_key(hf, "num_experts")?,
    };
    let top_k = usize_key(hf, "num_experts_per_tok")?;
    // Granite takes the softmax over the top-k logits: the renormalised top-k probabilities.
    // Qwen3NextConfig's norm_topk_prob defaults to true.
    let norm_topk_prob = matches!(fam, Family::Mixtral | Family::GraniteMoe)
        || opt_bool(hf, "norm_topk_prob")?.unwrap_or(fam == Family::Qwen3Next);
    let (expert_ffn, dense_ffn, shared) = match fam {
        Family::Mixtral | Family::Olmoe | Family::GraniteMoe => (usize_key(hf, "intermediate_size")?, 0, 0),
        Family::Qwen2Moe | Family::Qwen3Next => (
            usize_key(hf, "moe_intermediate_size")?,
            opt_usize(hf, "intermediate_size")?.unwrap_or(0),
            opt_usize(hf, "shared_expert_intermediate_size")?.unwrap_or(0),
        ),
        Family::Qwen3Moe => {
            (usize_key(hf, "moe_intermediate_size")?, opt_usize(hf, "intermediate_size")?.unwrap_or(0), 0)
        }
        Family::Glm4Moe => {
            let f = usize_key(hf, "moe_intermediate_size")?;
            let n_shared = opt_usize(hf, "n_shared_experts")?.unwrap_or(1);
            (f, opt_usize(hf, "intermediate_size")?.unwrap_or(0), f * n_shared)
        }
    };
    let glm = fam == Family::Glm4Moe;
    let groups = match (opt_usize(hf, "n_group")?, opt_usize(hf, "topk_group")?) {
        (Some(n_group), topk_group) if glm && n_group > 1 => {
            Some(ExpertGroups { n_group, topk_group: topk_group.unwrap_or(1) })
        }
        _ => None,
    };
    let moe = MoeConfig {
        n_experts,
        top_k,
        expert_ffn,
        norm_topk_prob,
        shared_expert_ffn: shared,
        // Qwen2-MoE gates its shared expert; GLM-4.5 adds it as it is.
        shared_expert_gate: shared > 0 && matches!(fam, Family::Qwen2Moe | Family::Qwen3Next),
        scoring: if glm { Scoring::Sigmoid } else { Scoring::Softmax },
        choice_bias: glm,
        groups,
        routed_scaling: if glm { opt_f64(hf, "routed_scaling_factor")?.unwrap_or(1.0) } else { 1.0 },
    };
    Ok((moe, dense_ffn))
}

/// Each layer: MoE or dense, and its sliding window.
fn layer_specs(hf: &Value, fam: Family, n_layers: usize, n_experts: usize) -> Result<Vec<LayerSpec>> {
    let windows = sliding(hf, fam, n_layers)?;
    // modeling_qwen2_moe / qwen3_moe: sparse iff not in mlp_only_layers and (i+1) % step == 0.
    let moe_layer = |i: usize| -> Result<bool> {
        match fam {
            // modeling_glm4_moe: the first `first_k_dense_replace` layers are dense.
            Family::Glm4Moe => Ok(i >= opt_usize(hf, "first_k_dense_replace")?.unwrap_or(1)),
            Family::Qwen2Moe | Family::Qwen3Moe | Family::Qwen3Next => {
                let step = opt_usize(hf, "decoder_sparse_step")?.unwrap_or(1).max(1);
                let mlp_only: Vec<u64> = get(hf, "mlp_only_layers")
                    .and_then(|m| m.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
                    .unwrap_or_default();
                Ok(!mlp_only.contains(&(i as u64)) && n_experts > 0 && (i + 1).is_multiple_of(step))
            }
            _ => Ok(true),
        }
    };
    let kinds = layer_kinds(hf, fam, n_layers)?;
    (0..n_layers).map(|i| Ok(LayerSpec { moe: moe_layer(i)?, sliding_window: windows[i], kind: kinds[i] })).collect()
}

/// Each layer's token mixer: Qwen3-Next's `layer_types` ("linear_attention" = Gated DeltaNet),
/// else its `full_attention_interval` rule (every interval-th layer attends; default 4, as
/// Qwen3NextConfig); attention everywhere for the other families.
fn layer_kinds(hf: &Value, fam: Family, n_layers: usize) -> Result<Vec<LayerKind>> {
    if fam != Family::Qwen3Next {
        return Ok(vec![LayerKind::Attention; n_layers]);
    }
    if let Some(types) = get(hf, "layer_types").and_then(|t| t.as_array()) {
        let kind = |t: &Value| match t.as_str() {
            Some("linear_attention") => LayerKind::DeltaNet,
            _ => LayerKind::Attention,
        };
        return Ok(types.iter().map(kind).collect());
    }
    let interval = opt_usize(hf, "full_attention_interval")?.unwrap_or(4).max(1);
    Ok((0..n_layers)
        .map(|i| if (i + 1).is_multiple_of(interval) { LayerKind::Attention } else { LayerKind::DeltaNet })
        .collect())
}

/// Qwen3-Next's Gated DeltaNet shape (`linear_*` keys, Qwen3NextConfig's defaults).
fn delta_net(hf: &Value, fam: Family) -> Result<Option<DeltaNetConfig>> {
    if fam != Family::Qwen3Next {
        return Ok(None);
    }
    Ok(Some(DeltaNetConfig {
        n_k_heads: opt_usize(hf, "linear_num_key_heads")?.unwrap_or(16),
        n_v_heads: opt_usize(hf, "linear_num_value_heads")?.unwrap_or(32),
        k_head_dim: opt_usize(hf, "linear_key_head_dim")?.unwrap_or(128),
        v_head_dim: opt_usize(hf, "linear_value_head_dim")?.unwrap_or(128),
        conv_kernel: opt_usize(hf, "linear_conv_kernel_dim")?.unwrap_or(4),
    }))
}

/// q/k/v biases and q/k normalisation.
fn attention_config(hf: &Value, fam: Family) -> Result<(bool, QkNorm)> {
    let attention_bias = match fam {
        Family::Qwen2Moe => opt_bool(hf, "qkv_bias")?.or(opt_bool(hf, "attention_bias")?).unwrap_or(true),
        _ => opt_bool(hf, "attention_bias")?.unwrap_or(false),
    };
    // GLM-4.5's attention_bias is on q/k/v only, as Qwen2-MoE's.
    if attention_bias && !matches!(fam, Family::Qwen2Moe | Family::Glm4Moe) {
        return Err(fail("attention_bias=true is not supported for this family (o_proj bias)"));
    }
    let qk_norm = match fam {
        Family::Qwen3Moe | Family::Qwen3Next => QkNorm::PerHead,
        Family::Glm4Moe if opt_bool(hf, "use_qk_norm")?.unwrap_or(false) => QkNorm::PerHead,
        Family::Olmoe => QkNorm::Full,
        _ => QkNorm::None,
    };
    Ok((attention_bias, qk_norm))
}

/// The residual-stream multipliers (GraniteMoeConfig: embedding_multiplier,
/// attention_multiplier, residual_multiplier, logits_scaling; defaults as transformers').
fn scales(hf: &Value, fam: Family) -> Result<Scales> {
    if fam != Family::GraniteMoe {
        return Ok(Scales::default());
    }
    Ok(Scales {
        embedding: opt_f64(hf, "embedding_multiplier")?.unwrap_or(1.0),
        attention: Some(opt_f64(hf, "attention_multiplier")?.unwrap_or(1.0)),
        residual: opt_f64(hf, "residual_multiplier")?.unwrap_or(1.0),
        logits_divisor: opt_f64(hf, "logits_scaling")?.unwrap_or(1.0),
    })
}

/// Build the colibri config from a parsed config.json.
pub fn config_from_hf(hf: &Value) -> Result<Config> {
    if get(hf, "quantization_config").is_some() {
        return Err(fail(
            "config.json has a quantization_config: the checkpoint is already quantised; \
             convert from the f32/f16/bf16 original (colibri quantises itself)",
        ));
    }
    let fam = family(hf)?;
    let hidden_size = usize_key(hf, "hidden_size")?;
    let n_layers = usize_key(hf, "num_hidden_layers")?;
    let n_heads = usize_key(hf, "num_attention_heads")?;
    let n_kv_heads = opt_usize(hf, "num_key_value_heads")?.unwrap_or(n_heads);
    if n_heads == 0 {
        return Err(fail("num_attention_heads is 0"));
    }
    let head_dim = opt_usize(hf, "head_dim")?.unwrap_or(hidden_size / n_heads);
    let max_pos = opt_usize(hf, "max_position_embeddings")?.unwrap_or(4096);
    let (moe, dense_ffn) = moe_config(hf, fam)?;
    let layers = layer_specs(hf, fam, n_layers, moe.n_experts)?;
    let (attention_bias, qk_norm) = attention_config(hf, fam)?;
    let config = Config {
        family: fam,
        vocab_size: usize_key(hf, "vocab_size")?,
        hidden_size,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        rms_norm_eps: opt_f64(hf, "rms_norm_eps")?.unwrap_or(1e-6),
        rope: rope(hf, fam, head_dim, max_pos)?,
        max_position_embeddings: max_pos,
        attention_bias,
        qk_norm,
        clip_qkv: if fam == Family::Olmoe { opt_f64(hf, "clip_qkv")? } else { None },
        moe,
        dense_ffn,
        layers,
        tie_embeddings: opt_bool(hf, "tie_word_embeddings")?.unwrap_or(false),
        hidden_act: get(hf, "hidden_act").and_then(|a| a.as_str()).unwrap_or("silu").to_string(),
        bos_token_id: ids(get(hf, "bos_token_id")).first().copied(),
        eos_token_ids: ids(get(hf, "eos_token_id")),
        pad_token_id: ids(get(hf, "pad_token_id")).first().copied(),
        scales: scales(hf, fam)?,
        delta_net: delta_net(hf, fam)?,
        // Qwen3-Next: q_proj yields the output gate; every RMSNorm but the DeltaNet's gated one
        // is zero-centred (gain 1 + weight).
        attn_output_gate: fam == Family::Qwen3Next,
        norm_offset: if fam == Family::Qwen3Next { 1.0 } else { 0.0 },
    };
    Ok(config)
}
