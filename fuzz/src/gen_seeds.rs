//! Writes the seed corpus: small, valid .colibri files covering every family and layout feature
//! (dtypes incl. mixed and block-quantised q8/q4, tied embeddings, q/k/v biases, shared expert +
//! gate, per-head and full q/k norms, dense layers, sliding windows, every RoPE scaling, all
//! metadata kinds).
//! Each file is opened and fully verified before the generator reports success.
//!
//!     cargo run --release --bin gen_seeds -- seeds/

use colibri::format::{DType, FileWriter, MetaKind, PlannedTensor, TensorKind};
use colibri::model::{
    tensor_specs, Config, Family, LayerSpec, MoeConfig, QkNorm, QuantClass, Role, Rope, RopeScaling, TensorSpec,
};
use colibri::{LoadOptions, Model};
use std::path::Path;

struct Seed {
    name: &'static str,
    config: Config,
    /// dtype of each tensor.
    dtype: fn(&TensorSpec) -> DType,
    extra_meta: Vec<(String, MetaKind, Vec<u8>)>,
}

#[allow(clippy::too_many_arguments)]
fn base(
    family: Family,
    vocab: usize,
    hidden: usize,
    layers: Vec<LayerSpec>,
    heads: usize,
    kv: usize,
    hd: usize,
    e: usize,
    k: usize,
    f: usize,
) -> Config {
    Config {
        family,
        vocab_size: vocab,
        hidden_size: hidden,
        n_layers: layers.len(),
        n_heads: heads,
        n_kv_heads: kv,
        head_dim: hd,
        rms_norm_eps: 1e-5,
        rope: Rope { theta: 10000.0, partial_rotary_factor: 1.0, scaling: RopeScaling::None, interleaved: false },
        max_position_embeddings: 128,
        attention_bias: false,
        attention_out_bias: false,
        norm: Default::default(),
        lm_head_bias: false,
        qk_norm: QkNorm::None,
        qk_norm_after_rope: false,
        attn_temperature: None,
        clip_qkv: None,
        moe: MoeConfig {
            n_experts: e,
            top_k: k,
            expert_ffn: f,
            norm_topk_prob: true,
            shared_expert_ffn: 0,
            shared_expert_gate: false,
            scoring: Default::default(),
            choice_bias: false,
            groups: None,
            routed_scaling: 1.0,
            expert_act: Default::default(),
            weights_on_input: false,
            expert_bias: false,
            router_bias: false,
        },
        dense_ffn: 0,
        layers,
        tie_embeddings: false,
        hidden_act: "silu".into(),
        bos_token_id: Some(1),
        eos_token_ids: vec![2],
        pad_token_id: None,
        scales: Default::default(),
        mla: None,
        attention_sinks: false,
        delta_net: None,
        attn_output_gate: false,
        norm_offset: 0.0,
    }
}

fn moe(n: usize) -> Vec<LayerSpec> {
    (0..n).map(|_| LayerSpec::attention(true)).collect()
}

const TOKENIZER: &str = r#"{"version":"1.0","model":{"type":"BPE","vocab":{"<unk>":0,"<s>":1,"</s>":2,"a":3,"b":4},"merges":[]},"added_tokens":[{"id":1,"content":"<s>","special":true}]}"#;
const TEMPLATE: &str = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}</s>{% endfor %}";

fn seeds() -> Vec<Seed> {
    let mut out = Vec::new();

    // Mixtral, f32, GQA, one sliding-window layer, tokenizer + template + provenance.
    let mut c = base(Family::Mixtral, 32, 16, moe(2), 2, 1, 8, 2, 2, 8);
    c.layers[1].sliding_window = Some(16);
    out.push(Seed {
        name: "mixtral_f32",
        config: c,
        dtype: |_| DType::F32,
        extra_meta: vec![
            ("tokenizer".into(), MetaKind::Json, TOKENIZER.into()),
            ("chat_template".into(), MetaKind::Text, TEMPLATE.into()),
            ("provenance".into(), MetaKind::Json, br#"{"source":"gen_seeds","dtype":"f32"}"#.to_vec()),
        ],
    });

    // Qwen2-MoE, bf16: q/k/v biases, shared expert with its gate, a dense middle layer,
    // linear RoPE scaling, user bytes.
    let mut c = base(Family::Qwen2Moe, 24, 8, moe(3), 2, 2, 4, 2, 1, 4);
    c.layers[1].moe = false;
    c.dense_ffn = 12;
    c.attention_bias = true;
    c.moe.shared_expert_ffn = 6;
    c.moe.shared_expert_gate = true;
    c.moe.norm_topk_prob = false;
    c.rope.scaling = RopeScaling::Linear { factor: 2.0 };
    out.push(Seed {
        name: "qwen2_moe_bf16",
        config: c,
        dtype: |_| DType::BF16,
        extra_meta: vec![("user".into(), MetaKind::Bytes, vec![0, 1, 2, 0xff, 0xfe])],
    });

    // Qwen3-MoE, f16, per-head q/k norm, tied embeddings, YaRN.
    let mut c = base(Family::Qwen3Moe, 16, 8, moe(1), 2, 1, 4, 2, 1, 4);
    c.qk_norm = QkNorm::PerHead;
    c.tie_embeddings = true;
    c.rope.scaling = RopeScaling::Yarn {
        factor: 4.0,
        original_max_position_embeddings: 32,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attention_factor: 1.1,
        truncate: true,
    };
    out.push(Seed { name: "qwen3_moe_f16_tied", config: c, dtype: |_| DType::F16, extra_meta: vec![] });

    // OLMoE, mixed dtypes (norms f32, routers f16, the rest bf16), full q/k norm, clip_qkv,
    // Llama-3 RoPE scaling, a key the reader does not know.
    let mut c = base(Family::Olmoe, 16, 8, moe(1), 2, 2, 4, 4, 2, 4);
    c.qk_norm = QkNorm::Full;
    c.clip_qkv = Some(8.0);
    c.pad_token_id = Some(0);
    c.rope.scaling = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64,
    };
    out.push(Seed {
        name: "olmoe_mixed",
        config: c,
        dtype: |t| match t.role {
            Role::Norm => DType::F32,
            Role::Router => DType::F16,
            _ => DType::BF16,
        },
        extra_meta: vec![("x-unknown".into(), MetaKind::Text, b"kept and ignored".to_vec())],
    });

    // The smallest legal model: one layer, one expert, dynamic RoPE, no special tokens.
    let mut c = base(Family::Mixtral, 2, 2, moe(1), 1, 1, 2, 1, 1, 1);
    c.bos_token_id = None;
    c.eos_token_ids = vec![];
    c.rope.scaling = RopeScaling::Dynamic { factor: 2.0, original_max_position_embeddings: 16 };
    out.push(Seed { name: "minimal_bf16", config: c, dtype: |_| DType::BF16, extra_meta: vec![] });

    // Block-quantised: rows of 32 everywhere; expert stacks q4, the other quantisable matrices
    // (attention, shared expert, dense MLP, lm_head) q8, the rest f16.
    let mut c = base(Family::Qwen2Moe, 32, 32, moe(2), 4, 1, 8, 2, 1, 32);
    c.layers[1].moe = false;
    c.dense_ffn = 32;
    c.moe.shared_expert_ffn = 32;
    c.moe.shared_expert_gate = true;
    out.push(Seed {
        name: "qwen2_moe_q8_q4",
        config: c,
        dtype: |t| match t.quant {
            Some(QuantClass::Experts) => DType::Q4,
            Some(_) => DType::Q8,
            None => DType::F16,
        },
        extra_meta: vec![],
    });

    out
}

/// Deterministic small values; norms near 1. Each expert of a stack is its own matrix.
fn payload(p: &PlannedTensor, role: Role, seed: &mut u64) -> Vec<u8> {
    let elements: u64 = p.shape.iter().product();
    let values: Vec<f32> = (0..elements)
        .map(|_| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = ((*seed >> 40) as f32) / (1u64 << 24) as f32 - 0.5;
            if role == Role::Norm {
                1.0 + u * 0.1
            } else {
                u * 0.2
            }
        })
        .collect();
    let units = if p.kind == TensorKind::Experts { p.shape[0] as usize } else { 1 };
    let cols = *p.shape.last().unwrap_or(&1) as usize;
    // Each unit (a tensor, or one expert) stored by the dtype table's reference encoder.
    values.chunks(values.len() / units).flat_map(|u| p.dtype.encode(u, cols)).collect()
}

fn write(dir: &Path, s: &Seed) -> colibri::Result<u64> {
    s.config.validate()?;
    let path = dir.join(format!("{}.colibri", s.name));
    let specs = tensor_specs(&s.config);
    let plan: Vec<PlannedTensor> = specs
        .iter()
        .map(|t| PlannedTensor { name: t.name.clone(), dtype: (s.dtype)(t), shape: t.shape.clone(), kind: t.kind })
        .collect();
    let mut meta = vec![("config".to_string(), MetaKind::Json, serde_json::to_vec(&s.config).expect("config JSON"))];
    meta.extend(s.extra_meta.iter().cloned());
    let c = &s.config;
    let mut w =
        FileWriter::create(&path, c.n_layers as u32, c.moe.n_experts as u32, c.moe.top_k as u32, &meta, plan.clone())?;
    let mut rng = 0x5eed_u64;
    for (spec, p) in specs.iter().zip(&plan) {
        w.tensor(&p.name, &payload(p, spec.role, &mut rng))?;
    }
    let summary = w.finish()?;
    for mmap in [true, false] {
        let m = Model::open(&path, &LoadOptions { mmap, ..LoadOptions::default() })?;
        m.verify()?;
    }
    Ok(summary.file_size)
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "seeds".into());
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).expect("create seed directory");
    for s in seeds() {
        match write(dir, &s) {
            Ok(size) => println!("{:>8} bytes  {}.colibri", size, s.name),
            Err(e) => {
                eprintln!("{}: {e}", s.name);
                std::process::exit(1);
            }
        }
    }
}
