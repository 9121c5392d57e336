//! `colibri inspect`: header, config, tokenizer summary, parameters, KV-cache size, stored
//! weight size and bits per weight (per dtype), expert layout and the tensor table — as text,
//! or as one JSON object with `--json`.

use colibri::format::{TensorKind, TensorRecord};
use colibri::model::{Config, LayerKind, LayerSpec};
use colibri::{Error, LoadOptions, Model};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;

/// 1234567 → "1.23 M".
pub fn human_count(n: u64) -> String {
    let f = n as f64;
    if f >= 1e9 {
        format!("{:.2} B", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.2} M", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} K", f / 1e3)
    } else {
        n.to_string()
    }
}

fn tokenizer_summary(model: &Model) -> Value {
    let Some(text) = model.tokenizer_json() else { return Value::Null };
    let Ok(t) = serde_json::from_str::<Value>(text) else { return json!({"error": "unparseable"}) };
    let m = t.get("model");
    let kind = m.and_then(|m| m.get("type")).and_then(|x| x.as_str()).unwrap_or("?");
    let vocab = m.and_then(|m| m.get("vocab")).map(|v| match v {
        Value::Object(o) => o.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    });
    let added = t.get("added_tokens").and_then(|a| a.as_array()).map(|a| a.len()).unwrap_or(0);
    let pre = t.get("pre_tokenizer").and_then(|p| p.get("type")).and_then(|x| x.as_str());
    let byte_fallback = m.and_then(|m| m.get("byte_fallback")).and_then(|b| b.as_bool()).unwrap_or(false);
    json!({
        "model": kind,
        "vocab": vocab,
        "added_tokens": added,
        "pre_tokenizer": pre,
        "byte_fallback": byte_fallback,
        "bytes": text.len(),
    })
}

/// Stored bits per element of a tensor (its matrices' bytes, without gaps or padding).
fn bits_per_weight(t: &TensorRecord) -> f64 {
    (t.unit_bytes() * t.units()) as f64 * 8.0 / t.elements().max(1) as f64
}

/// Weight bytes, element count and tensor count per dtype, and over the whole file.
fn weights_summary(tensors: &[TensorRecord]) -> Value {
    let mut by_dtype: Vec<(&str, u64, u64, u64)> = Vec::new();
    for t in tensors {
        let bytes = t.unit_bytes() * t.units();
        match by_dtype.iter_mut().find(|d| d.0 == t.dtype.name()) {
            Some(d) => {
                d.1 += bytes;
                d.2 += t.elements();
                d.3 += 1;
            }
            None => by_dtype.push((t.dtype.name(), bytes, t.elements(), 1)),
        }
    }
    let bpw = |bytes: u64, elements: u64| bytes as f64 * 8.0 / elements.max(1) as f64;
    let (bytes, elements) = by_dtype.iter().fold((0, 0), |a, d| (a.0 + d.1, a.1 + d.2));
    json!({
        "bytes": bytes,
        "bits_per_weight": bpw(bytes, elements),
        "by_dtype": by_dtype.iter().map(|d| json!({
            "dtype": d.0, "tensors": d.3, "elements": d.2, "bytes": d.1, "bits_per_weight": bpw(d.1, d.2),
        })).collect::<Vec<_>>(),
    })
}

/// The indices of the layers `f` picks.
fn layers_where(c: &Config, f: impl Fn(&LayerSpec) -> bool) -> Vec<usize> {
    c.layers.iter().enumerate().filter(|(_, l)| f(l)).map(|(i, _)| i).collect()
}

fn report(model: &Model, file: &Path) -> Value {
    let c = model.config();
    let p = model.parsed();
    let h = &p.header;
    let params = model.params();
    let tensors: Vec<Value> = p
        .tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "dtype": t.dtype.name(),
                "group_size": t.group_size,
                "bits_per_weight": bits_per_weight(t),
                "shape": t.shape,
                "bytes": t.byte_length,
                "offset": t.data_offset,
                "kind": match t.kind { TensorKind::Plain => "plain", TensorKind::Router => "router", TensorKind::Experts => "experts" },
                "expert_stride": t.expert_stride,
            })
        })
        .collect();
    let expert_layout: Vec<Value> = p
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Experts)
        .map(|t| {
            json!({
                "tensor": t.name,
                "experts": t.shape[0],
                "expert_shape": &t.shape[1..],
                "expert_bytes": t.unit_bytes(),
                "stride": t.expert_stride,
                "first_offset": t.data_offset,
            })
        })
        .collect();
    let provenance: Value = model.provenance().and_then(|s| serde_json::from_str(s).ok()).unwrap_or(Value::Null);
    let user = model.user_metadata().map(|u| {
        json!({
            "bytes": u.len(),
            "text": std::str::from_utf8(u).ok(),
        })
    });
    json!({
        "file": file.file_name().map(|n| n.to_string_lossy().into_owned()),
        "file_size": h.file_size,
        "header": {
            "version": h.version,
            "num_experts": h.num_experts,
            "num_layers": h.num_layers,
            "header_size": h.header_size,
            "tensor_count": h.tensor_count,
            "routing_offset": h.routing_offset,
            "data_offset": h.data_offset,
            "metadata_offset": h.metadata_offset,
            "metadata_size": h.metadata_size,
            "table_offset": h.table_offset,
            "strings_offset": h.strings_offset,
            "top_k": h.top_k,
            "num_moe_layers": h.num_moe_layers,
        },
        "config": c,
        "dense_layers": layers_where(c, |l| !l.moe),
        "recurrent_layers": layers_where(c, |l| l.kind == LayerKind::DeltaNet),
        "session_state_bytes": colibri::session::session_state_bytes(c),
        "params": params.total,
        "active_params_per_token": params.active,
        "weights": weights_summary(&p.tensors),
        "kv_cache_bytes_per_token": { "f32": c.kv_bytes_per_token(4), "f16": c.kv_bytes_per_token(2), "bf16": c.kv_bytes_per_token(2) },
        "tokenizer": tokenizer_summary(model),
        "chat_template_bytes": model.chat_template().map(|t| t.len()),
        "metadata_keys": p.metadata.iter().map(|e| e.key.clone()).collect::<Vec<_>>(),
        "provenance": provenance,
        "user_metadata": user,
        "expert_layout": expert_layout,
        "tensors": tensors,
    })
}

fn print_text(o: &mut impl Write, r: &Value, model: &Model) -> std::io::Result<()> {
    print_model(o, r, model)?;
    print_storage(o, r, model)?;
    print_tensors(o, r)
}

/// The model: file, family, shapes, experts, attention, RoPE, parameter counts.
fn print_model(o: &mut impl Write, r: &Value, model: &Model) -> std::io::Result<()> {
    let c = model.config();
    let h = &r["header"];
    writeln!(
        o,
        "file         {} ({} bytes, format v{})",
        r["file"].as_str().unwrap_or("?"),
        r["file_size"],
        h["version"]
    )?;
    writeln!(o, "family       {} ({})", c.family.name(), c.family.hf_architecture())?;
    writeln!(
        o,
        "shape        {} layers, hidden {}, {} heads ({} kv, head_dim {}), vocab {}, context {}",
        c.n_layers, c.hidden_size, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.max_position_embeddings
    )?;
    let shared = if c.moe.shared_expert_ffn > 0 {
        format!(", shared expert {}{}", c.moe.shared_expert_ffn, if c.moe.shared_expert_gate { " (gated)" } else { "" })
    } else {
        String::new()
    };
    // GPT-OSS: router bias, expert biases, clamped activation.
    let gpt_oss = match c.moe.expert_act {
        colibri::model::ExpertAct::ClampedSwiglu { alpha, limit } => format!(
            ", router bias {}, expert biases {}, clamped gate (alpha {alpha}, limit {limit})",
            c.moe.router_bias, c.moe.expert_bias
        ),
        colibri::model::ExpertAct::Silu => String::new(),
    };
    writeln!(
        o,
        "experts      {} per layer, top-{}, expert FFN {}, norm_topk_prob {}, scoring {}{}{}",
        c.moe.n_experts,
        c.moe.top_k,
        c.moe.expert_ffn,
        c.moe.norm_topk_prob,
        plain(&c.moe.scoring),
        shared,
        gpt_oss
    )?;
    writeln!(o, "dense layers {} (FFN {})", r["dense_layers"], c.dense_ffn)?;
    writeln!(o, "{}", attention_line(c))?;
    if let Some(m) = &c.mla {
        writeln!(
            o,
            "mla          latent {} + rope key {} cached per token and layer, q rank {}, qk {} + {}, v {}",
            m.kv_lora_rank, m.qk_rope_head_dim, m.q_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
        )?;
    }
    if let Some(d) = c.delta_net {
        writeln!(
            o,
            "deltanet     layers {} (Gated DeltaNet: {} k heads × {}, {} v heads × {}, conv {}), output-gated \
             attention {}",
            r["recurrent_layers"],
            d.n_k_heads,
            d.k_head_dim,
            d.n_v_heads,
            d.v_head_dim,
            d.conv_kernel,
            c.attn_output_gate
        )?;
    }
    writeln!(
        o,
        "rope         theta {}, partial {}, scaling {}{}",
        c.rope.theta,
        c.rope.partial_rotary_factor,
        plain(&c.rope.scaling),
        if c.rope.interleaved { ", interleaved pairs" } else { "" }
    )?;
    writeln!(
        o,
        "params       {} total, {} active per token",
        human_count(r["params"].as_u64().unwrap_or(0)),
        human_count(r["active_params_per_token"].as_u64().unwrap_or(0))
    )
}

/// What is stored: weights by dtype, KV cache size, tokens, tokenizer, metadata, header.
fn print_storage(o: &mut impl Write, r: &Value, model: &Model) -> std::io::Result<()> {
    let (c, h) = (model.config(), &r["header"]);
    let w = &r["weights"];
    let dtypes: Vec<String> = w["by_dtype"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            format!(
                "{} {} tensors {} bytes {:.2} bpw",
                d["dtype"].as_str().unwrap_or("?"),
                d["tensors"],
                d["bytes"],
                d["bits_per_weight"].as_f64().unwrap_or(0.0)
            )
        })
        .collect();
    writeln!(
        o,
        "weights      {} bytes, {:.2} bits per weight ({})",
        w["bytes"],
        w["bits_per_weight"].as_f64().unwrap_or(0.0),
        dtypes.join("; ")
    )?;
    writeln!(
        o,
        "kv cache     {} bytes per token (f32), {} (f16/bf16)",
        r["kv_cache_bytes_per_token"]["f32"], r["kv_cache_bytes_per_token"]["f16"]
    )?;
    if c.delta_net.is_some() {
        writeln!(
            o,
            "recurrent    {} bytes per session, whatever its length (DeltaNet state + its copy at each call's start)",
            r["session_state_bytes"]
        )?;
    }
    let id = |t: Option<u32>| t.map_or("none".to_string(), |t| t.to_string());
    let eos: Vec<String> = c.eos_token_ids.iter().map(u32::to_string).collect();
    writeln!(o, "tokens       bos {}, eos {}, pad {}", id(c.bos_token_id), eos.join(","), id(c.pad_token_id))?;
    writeln!(o, "tokenizer    {}", r["tokenizer"])?;
    writeln!(
        o,
        "chat tmpl    {}",
        r["chat_template_bytes"].as_u64().map(|b| format!("{b} bytes")).unwrap_or("none".into())
    )?;
    writeln!(o, "provenance   {}", r["provenance"])?;
    gguf_source(o, &r["provenance"])?;
    match &r["user_metadata"] {
        Value::Null => writeln!(o, "user meta    none")?,
        u => writeln!(
            o,
            "user meta    {} bytes{}",
            u["bytes"],
            u["text"].as_str().map(|t| format!(": {t:?}")).unwrap_or_default()
        )?,
    }
    writeln!(
        o,
        "header       {} tensors, routing_offset {}, data_offset {}, metadata {} bytes",
        h["tensor_count"], h["routing_offset"], h["data_offset"], h["metadata_size"]
    )
}

/// Where the experts and every tensor sit.
fn print_tensors(o: &mut impl Write, r: &Value) -> std::io::Result<()> {
    writeln!(o, "expert layout")?;
    for e in r["expert_layout"].as_array().into_iter().flatten() {
        writeln!(
            o,
            "  {:<28} {} experts × {} ({} bytes each, stride {}) from offset {}",
            e["tensor"].as_str().unwrap_or(""),
            e["experts"],
            e["expert_shape"],
            e["expert_bytes"],
            e["stride"],
            e["first_offset"]
        )?;
    }
    writeln!(o, "tensors")?;
    writeln!(o, "  {:<32} {:<5} {:>5} {:<18} {:>12} {:>12}", "name", "dtype", "bpw", "shape", "bytes", "offset")?;
    for t in r["tensors"].as_array().into_iter().flatten() {
        writeln!(
            o,
            "  {:<32} {:<5} {:>5.2} {:<18} {:>12} {:>12}",
            t["name"].as_str().unwrap_or(""),
            t["dtype"].as_str().unwrap_or(""),
            t["bits_per_weight"].as_f64().unwrap_or(0.0),
            t["shape"].to_string(),
            t["bytes"].as_u64().unwrap_or(0),
            t["offset"].as_u64().unwrap_or(0)
        )?;
    }
    Ok(())
}

pub fn run(file: &Path, as_json: bool) -> Result<(), Error> {
    let model = crate::model_path::open(file, &LoadOptions::default())?;
    let r = report(&model, file);
    let mut out = std::io::stdout().lock();
    let written = if as_json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r).unwrap_or_default())
    } else {
        print_text(&mut out, &r, &model)
    };
    written.map_err(|e| Error::io("write to stdout", e))
}

/// For a file converted from GGUF: its GGUF version, architecture, llama.cpp file type and the
/// stored dtypes of each tensor class, on one line.
fn gguf_source(o: &mut impl Write, p: &Value) -> std::io::Result<()> {
    if p["format"] != "gguf" {
        return Ok(());
    }
    let g = &p["gguf"];
    let list = |v: &Value| v.as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join("/"));
    let classes: Vec<String> = g["tensor_types"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k} {}", list(v).unwrap_or_default())).collect())
        .unwrap_or_default();
    writeln!(
        o,
        "gguf source  v{} {}, file type {} ({}); stored as: {}",
        g["version"],
        g["architecture"].as_str().unwrap_or("?"),
        g["file_type"],
        g["file_type_name"].as_str().unwrap_or("?"),
        classes.join(", ")
    )
}

/// A configuration value for people: an enum's variant in lower case ("softmax", "rms", "none"),
/// a structured one with its fields.
fn plain(v: &impl std::fmt::Debug) -> String {
    let s = format!("{v:?}");
    if s.chars().all(char::is_alphanumeric) {
        s.to_lowercase()
    } else {
        s
    }
}

/// The `attention` line of the text report.
fn attention_line(c: &Config) -> String {
    format!(
        "attention    bias {}{}{}, qk_norm {}{}, norm {}, lm_head bias {}, sliding windows {}{}",
        c.attention_bias,
        if c.attention_out_bias { " (o too)" } else { "" },
        if c.attention_sinks { ", sinks" } else { "" },
        plain(&c.qk_norm),
        if c.qk_norm_after_rope { " after rope" } else { "" },
        plain(&c.norm),
        c.lm_head_bias,
        windows(c.layers.iter().map(|l| l.sliding_window)),
        chunks_and_nope(c)
    )
}

/// Llama-4's attention chunks per layer, NoPE layers and their query temperature ("" without).
fn chunks_and_nope(c: &Config) -> String {
    let mut s = String::new();
    if c.layers.iter().any(|l| l.attention_chunk.is_some()) {
        s += &format!(", attention chunks {}", windows(c.layers.iter().map(|l| l.attention_chunk)));
    }
    let nope: Vec<String> = (0..c.n_layers).filter(|&i| c.layers[i].no_rope).map(|i| i.to_string()).collect();
    if !nope.is_empty() {
        s += &format!(", NoPE layers {}", nope.join(","));
    }
    if let Some(t) = c.attn_temperature {
        s += &format!(" (query temperature: floor {}, scale {})", t.floor_scale, t.attn_scale);
    }
    s
}

/// Per-layer sliding windows: "none", or each layer's window ("full" where it has none).
fn windows(w: impl Iterator<Item = Option<usize>>) -> String {
    let w: Vec<Option<usize>> = w.collect();
    if w.iter().all(Option::is_none) {
        return "none".into();
    }
    w.iter().map(|x| x.map_or("full".to_string(), |n| n.to_string())).collect::<Vec<_>>().join(",")
}
