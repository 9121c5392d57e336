//! Llama-4 (`Llama4TextConfig`, modeling_llama4; the text model of
//! `Llama4ForConditionalGeneration`, whose config nests it under `text_config` and whose
//! checkpoint holds it under `language_model.`) config and checkpoint rules, with
//! Llama4TextConfig's defaults: `num_local_experts` experts of `intermediate_size`, the
//! `num_experts_per_tok` largest router logits chosen and weighted by their sigmoid, the weight
//! multiplying the expert's input; an ungated shared expert of `intermediate_size` in every MoE
//! layer; MoE layers from `moe_layers`, else every `interleave_moe_layer_step`-th, the others dense
//! of `intermediate_size_mlp`; NoPE layers from `no_rope_layers` (1 = RoPE), else every
//! `no_rope_layer_interval`-th; chunked attention (`attention_chunk_size`, null: none) on the
//! RoPE layers, or as `layer_types` says; the NoPE layers' query temperature
//! (`attn_temperature_tuning`, `floor_scale`, `attn_scale`); the weightless q/k norm after RoPE
//! on RoPE layers (`use_qk_norm`); RoPE on interleaved (complex) pairs. The hub's fused experts
//! are transposed: `feed_forward.experts.gate_up_proj` [E, hidden, 2F], `down_proj` [E, F, hidden].

use crate::error::{fail, Result};
use crate::gpt_oss::Proj;
use crate::json_keys::{get, opt_bool, opt_f64, opt_usize, usize_key};
use crate::piece::{Piece, PieceLayout};
use crate::safetensors::{Checkpoint, SrcDType};
use colibri::model::{AttnTemperature, Config, MoeConfig, QkNorm, Scoring, TensorSpec};
use serde_json::Value;

/// The text model's config of a Llama4ForConditionalGeneration config.json (`text_config`,
/// named Llama4ForCausalLM); None for any other config.
pub fn text_config(hf: &Value) -> Option<Value> {
    let text = get(hf, "text_config")?.as_object()?;
    let model_type = get(hf, "model_type").and_then(Value::as_str);
    let arch = get(hf, "architectures").and_then(|a| a.get(0)).and_then(Value::as_str);
    if model_type != Some("llama4") && arch != Some("Llama4ForConditionalGeneration") {
        return None;
    }
    let mut text = text.clone();
    text.insert("architectures".into(), serde_json::json!(["Llama4ForCausalLM"]));
    Some(Value::Object(text))
}

/// The routed experts, the shared expert and the dense layers' FFN width.
pub fn moe(hf: &Value, n_experts: usize, top_k: usize) -> Result<(MoeConfig, usize)> {
    let f = usize_key(hf, "intermediate_size")?;
    let moe = MoeConfig {
        shared_expert_ffn: f,
        scoring: Scoring::SigmoidOfTopK,
        weights_on_input: true,
        ..MoeConfig::plain(n_experts, top_k, f)
    };
    Ok((moe, opt_usize(hf, "intermediate_size_mlp")?.unwrap_or(16384)))
}

/// The integers of the list `key`, if config.json has a non-empty one.
fn list(hf: &Value, key: &str) -> Result<Option<Vec<u64>>> {
    let Some(v) = get(hf, key) else { return Ok(None) };
    let a = v.as_array().ok_or_else(|| fail(format!("config.json '{key}' must be a list of integers")))?;
    let ints: Option<Vec<u64>> = a.iter().map(Value::as_u64).collect();
    let ints = ints.ok_or_else(|| fail(format!("config.json '{key}' must be a list of integers")))?;
    Ok((!ints.is_empty()).then_some(ints))
}

/// Layer `i` is a MoE layer: listed in `moe_layers`, else (i + 1) a multiple of
/// `interleave_moe_layer_step` (Llama4TextConfig: range(step − 1, n, step)).
pub fn moe_layer(hf: &Value, i: usize) -> Result<bool> {
    if let Some(layers) = list(hf, "moe_layers")? {
        return Ok(layers.contains(&(i as u64)));
    }
    match opt_usize(hf, "interleave_moe_layer_step")?.unwrap_or(1) {
        0 => Err(fail("config.json 'interleave_moe_layer_step' must be at least 1")),
        step => Ok((i + 1).is_multiple_of(step)),
    }
}

/// Whether each layer rotates q and k (`no_rope_layers`: 1 = RoPE, at least one entry per layer;
/// else all but every `no_rope_layer_interval`-th).
fn rope_layers(hf: &Value, n: usize) -> Result<Vec<bool>> {
    if let Some(flags) = list(hf, "no_rope_layers")? {
        if flags.len() < n {
            return Err(fail(format!("config.json 'no_rope_layers' has {} entries for {n} layers", flags.len())));
        }
        return Ok(flags[..n].iter().map(|&f| f != 0).collect());
    }
    match opt_usize(hf, "no_rope_layer_interval")?.unwrap_or(4) {
        0 => Err(fail("config.json 'no_rope_layer_interval' must be at least 1")),
        every => Ok((0..n).map(|i| !(i + 1).is_multiple_of(every)).collect()),
    }
}

/// Each layer's attention chunk: `layer_types` ("chunked_attention" / "full_attention"), else
/// `attention_chunk_size` (default 8192, null: none) on the RoPE layers.
fn chunks(hf: &Value, rope: &[bool]) -> Result<Vec<Option<usize>>> {
    let size = match hf.get("attention_chunk_size") {
        None => Some(8192),
        Some(Value::Null) => None,
        Some(_) => opt_usize(hf, "attention_chunk_size")?,
    };
    if size == Some(0) {
        return Err(fail("config.json 'attention_chunk_size' must be at least 1"));
    }
    let Some(types) = get(hf, "layer_types").and_then(Value::as_array) else {
        return Ok(rope.iter().map(|&r| if r { size } else { None }).collect());
    };
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("chunked_attention") => {
                size.map(Some).ok_or_else(|| fail("a chunked_attention layer but no attention_chunk_size"))
            }
            _ => Ok(None),
        })
        .collect()
}

/// Set what only Llama-4 has on a config built by the common rules: NoPE layers and their
/// temperature, attention chunks, the weightless q/k norm after RoPE.
pub fn finish(hf: &Value, c: &mut Config) -> Result<()> {
    let rope = rope_layers(hf, c.n_layers)?;
    let chunk = chunks(hf, &rope)?;
    for ((l, &r), &ch) in c.layers.iter_mut().zip(&rope).zip(&chunk) {
        (l.no_rope, l.attention_chunk) = (!r, ch);
    }
    if opt_bool(hf, "attn_temperature_tuning")?.unwrap_or(true) {
        c.attn_temperature = Some(AttnTemperature {
            floor_scale: opt_f64(hf, "floor_scale")?.unwrap_or(8192.0),
            attn_scale: opt_f64(hf, "attn_scale")?.unwrap_or(0.1),
        });
    }
    if opt_bool(hf, "use_qk_norm")?.unwrap_or(true) {
        (c.qk_norm, c.qk_norm_after_rope) = (QkNorm::Weightless, true);
    }
    Ok(())
}

/// A Llama4ForConditionalGeneration checkpoint: its text model's tensors (`language_model.*`)
/// under the names Llama4ForCausalLM gives them; the vision tower (`vision_model.*`,
/// `multi_modal_projector.*`) is left out, named in a warning.
pub fn text_only(ck: &mut Checkpoint, warnings: &mut Vec<String>) {
    if !ck.tensors.keys().any(|k| k.starts_with("language_model.")) {
        return;
    }
    let mut vision = 0;
    for (k, t) in std::mem::take(&mut ck.tensors) {
        match k.strip_prefix("language_model.") {
            Some(text) => {
                ck.tensors.insert(text.to_string(), t);
            }
            None => vision += 1,
        }
    }
    if vision > 0 {
        warnings.push(format!("{vision} tensors of the vision tower skipped: colibri runs the text model"));
    }
}

/// One expert stack [E, rows, cols] of layer `l` from the hub's transposed stacks: gate / up are
/// the first / last F columns of `gate_up_proj` [E, hidden, 2F], element (r, c) of expert e at
/// (e·hidden + c)·2F + r (+ F); down (`down_proj` [E, F, hidden]) has (r, c) at (e·F + c)·hidden + r.
pub fn expert_stack(ck: &Checkpoint, l: usize, proj: Proj, spec: &TensorSpec) -> Result<Vec<Piece>> {
    let (e_count, rows, cols) = (spec.shape[0], spec.shape[1], spec.shape[2]);
    let base = format!("model.layers.{l}.feed_forward.experts");
    let (name, width, first) = match proj {
        Proj::Down => (format!("{base}.down_proj"), rows, 0),
        Proj::Gate => (format!("{base}.gate_up_proj"), 2 * rows, 0),
        Proj::Up => (format!("{base}.gate_up_proj"), 2 * rows, rows),
    };
    let t = ck.tensors.get(&name).ok_or_else(|| fail(format!("missing expert weights {name} for {}", spec.name)))?;
    let want = [e_count, cols, width];
    if t.shape != want {
        return Err(fail(format!("tensor {name} has shape {:?}, the config implies {want:?}", t.shape)));
    }
    if matches!(t.dtype, SrcDType::U8 | SrcDType::F8E4M3) {
        return Err(fail(format!("{name}: Llama-4 expert stacks are read as floats only")));
    }
    let esize = t.dtype.size() as u64;
    Ok((0..e_count)
        .map(|e| Piece {
            source: name.clone(),
            tensor: t.clone(),
            byte_offset: (e * cols * width + first) * esize,
            elements: rows * cols,
            layout: PieceLayout::Strided { rows, cols, row_stride: 1, col_stride: width },
            scale: None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use crate::hf_config::config_from_hf;
    use colibri::model::{Family, QkNorm, Scoring};
    use serde_json::json;

    /// A Llama-4 Scout-like text config (its hub keys), shrunk.
    fn text() -> serde_json::Value {
        json!({
            "model_type": "llama4_text", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 16,
            "intermediate_size_mlp": 48, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
            "attention_chunk_size": 16, "floor_scale": 8, "rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192}
        })
    }

    #[test]
    fn llama4_defaults_follow_llama4textconfig() {
        let c = config_from_hf(&text()).unwrap();
        c.validate().unwrap();
        assert_eq!(c.family, Family::Llama4);
        // Every 4th layer NoPE (no_rope_layer_interval 4); chunks on the RoPE layers.
        let layers: Vec<_> = c.layers.iter().map(|l| (l.moe, l.no_rope, l.attention_chunk)).collect();
        assert_eq!(
            layers,
            [(false, false, Some(16)), (true, false, Some(16)), (false, false, Some(16)), (true, true, None)]
        );
        assert_eq!((c.dense_ffn, c.moe.shared_expert_ffn, c.moe.scoring), (48, 16, Scoring::SigmoidOfTopK));
        assert!(c.moe.weights_on_input && !c.moe.norm_topk_prob && c.rope.interleaved && !c.tie_embeddings);
        assert_eq!((c.qk_norm, c.qk_norm_after_rope, c.rms_norm_eps), (QkNorm::Weightless, true, 1e-5));
        let t = c.attn_temperature.unwrap();
        assert_eq!((t.floor_scale, t.attn_scale), (8.0, 0.1));
    }

    #[test]
    fn a_conditional_generation_config_is_read_through_its_text_config() {
        let mut text = text();
        text["attention_chunk_size"] = json!(null);
        text["no_rope_layers"] = json!([1, 0, 1, 1, 1]);
        text["moe_layers"] = json!([0, 3]);
        text["use_qk_norm"] = json!(false);
        text["attn_temperature_tuning"] = json!(false);
        let hf = json!({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
                        "text_config": text, "vision_config": {"hidden_size": 8}});
        let c = config_from_hf(&hf).unwrap();
        c.validate().unwrap();
        let layers: Vec<_> = c.layers.iter().map(|l| (l.moe, l.no_rope, l.attention_chunk)).collect();
        assert_eq!(layers, [(true, false, None), (false, true, None), (false, false, None), (true, false, None)]);
        assert_eq!((c.qk_norm, c.attn_temperature), (QkNorm::None, None));
    }

    #[test]
    fn llama4_configs_colibri_cannot_read_are_refused_naming_the_key() {
        for (key, value) in [
            ("no_rope_layers", json!([1, 0])),
            ("interleave_moe_layer_step", json!(0)),
            ("attention_chunk_size", json!(0)),
            ("moe_layers", json!([0.5])),
        ] {
            let mut hf = text();
            hf[key] = value;
            let e = config_from_hf(&hf).unwrap_err().to_string();
            assert!(e.contains(key) && !e.contains('\n'), "{key}: {e}");
        }
    }
}
