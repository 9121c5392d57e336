//! The tensors a config implies: canonical names, shapes, kinds and file order. The converter
//! plans files from this list and the loader checks files against it, so the two cannot drift.

use super::config::{Config, LayerKind, Mla, NormKind, QkNorm};
use crate::format::TensorKind;

/// What a tensor is for (used for parameter accounting and open-time checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Token embedding table [vocab, hidden].
    Embedding,
    /// RMSNorm weight (checked finite at open).
    Norm,
    /// Attention projection or bias.
    Attention,
    /// MoE router [n_experts, hidden].
    Router,
    /// A routed expert stack [n_experts, rows, cols].
    Experts,
    /// Shared expert, its gate, or a dense-layer MLP matrix.
    Mlp,
    /// Output projection [vocab, hidden].
    LmHead,
}

/// The classes of matrices that may be stored block-quantised (q8/q4). Routers, the shared
/// expert's sigmoid gate, norms, biases and the embedding table never are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantClass {
    /// Routed expert stacks.
    Experts,
    /// The shared expert's gate/up/down (Qwen2-MoE).
    Shared,
    /// Attention q/k/v/o projections.
    Attn,
    /// Dense-layer MLP gate/up/down.
    Mlp,
    /// The output projection (when not tied to the embedding).
    LmHead,
}

impl QuantClass {
    /// Every class, in the order the CLI lists them.
    pub const ALL: [QuantClass; 5] =
        [QuantClass::Experts, QuantClass::Shared, QuantClass::Attn, QuantClass::Mlp, QuantClass::LmHead];

    /// The name used by `convert --quantize-only` and in provenance.
    pub fn name(self) -> &'static str {
        match self {
            QuantClass::Experts => "experts",
            QuantClass::Shared => "shared",
            QuantClass::Attn => "attn",
            QuantClass::Mlp => "mlp",
            QuantClass::LmHead => "lm_head",
        }
    }

    /// Parse a class name.
    pub fn from_name(name: &str) -> Option<QuantClass> {
        QuantClass::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// One expected tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<u64>,
    pub kind: TensorKind,
    pub role: Role,
    /// The quantisable class of this matrix; `None` for tensors that must stay float.
    pub quant: Option<QuantClass>,
}

/// Name of a per-layer tensor: `layers.{l}.{suffix}`.
pub fn layer_name(l: usize, suffix: &str) -> String {
    format!("layers.{l}.{suffix}")
}

/// Canonical tensor names not tied to a layer.
pub const EMBEDDING: &str = "tok_embeddings";
pub const FINAL_NORM: &str = "norm";
pub const LM_HEAD: &str = "lm_head";
/// LayerNorm bias of the final norm (`NormKind::LayerNorm`).
pub const FINAL_NORM_BIAS: &str = "norm_bias";
/// [vocab] (`Config::lm_head_bias`).
pub const LM_HEAD_BIAS: &str = "lm_head_bias";

/// Per-layer suffixes.
pub mod suffix {
    pub const ATTN_NORM: &str = "attn_norm";
    pub const ATTN_NORM_BIAS: &str = "attn_norm_bias";
    pub const Q: &str = "attn.q";
    pub const K: &str = "attn.k";
    pub const V: &str = "attn.v";
    pub const O: &str = "attn.o";
    pub const Q_BIAS: &str = "attn.q_bias";
    pub const K_BIAS: &str = "attn.k_bias";
    pub const V_BIAS: &str = "attn.v_bias";
    pub const O_BIAS: &str = "attn.o_bias";
    pub const SINKS: &str = "attn.sinks";
    pub const Q_NORM: &str = "attn.q_norm";
    pub const K_NORM: &str = "attn.k_norm";
    /// MLA: the query's low-rank pair and its norm (q_a_proj, q_a_layernorm, q_b_proj).
    pub const Q_A: &str = "attn.q_a";
    pub const Q_A_NORM: &str = "attn.q_a_norm";
    pub const Q_B: &str = "attn.q_b";
    /// MLA: kv_a_proj_with_mqa [kv_lora_rank + qk_rope, hidden] and kv_a_layernorm [kv_lora_rank].
    pub const KV_A: &str = "attn.kv_a";
    pub const KV_A_NORM: &str = "attn.kv_a_norm";
    /// MLA: W_UK per head, [n_heads · kv_lora_rank, qk_nope] (head h's rows are kv_b_proj's K
    /// rows of head h transposed; llama.cpp's `attn_k_b`).
    pub const K_B: &str = "attn.k_b";
    /// MLA: W_UV per head, [n_heads · v_head_dim, kv_lora_rank] (kv_b_proj's V rows; `attn_v_b`).
    pub const V_B: &str = "attn.v_b";
    pub const FFN_NORM: &str = "ffn_norm";
    pub const FFN_NORM_BIAS: &str = "ffn_norm_bias";
    pub const ROUTER: &str = "moe.router";
    pub const ROUTER_BIAS: &str = "moe.router_bias";
    pub const ROUTER_LOGIT_BIAS: &str = "moe.router_logit_bias";
    pub const EXPERTS_GATE_BIAS: &str = "moe.experts.gate_bias";
    pub const EXPERTS_UP_BIAS: &str = "moe.experts.up_bias";
    pub const EXPERTS_DOWN_BIAS: &str = "moe.experts.down_bias";
    pub const EXPERTS_GATE: &str = "moe.experts.gate";
    pub const EXPERTS_UP: &str = "moe.experts.up";
    pub const EXPERTS_DOWN: &str = "moe.experts.down";
    pub const SHARED_GATE_PROJ: &str = "moe.shared.gate";
    pub const SHARED_UP: &str = "moe.shared.up";
    pub const SHARED_DOWN: &str = "moe.shared.down";
    pub const SHARED_EXPERT_GATE: &str = "moe.shared_expert_gate";
    pub const MLP_GATE: &str = "mlp.gate";
    pub const MLP_UP: &str = "mlp.up";
    pub const MLP_DOWN: &str = "mlp.down";
    /// The attention output gate (q_proj's second half per head, Qwen3-Next).
    pub const GATE: &str = "attn.gate";
    /// Gated DeltaNet: in_proj_qkvz de-grouped to rows [q; k; v; z].
    pub const DN_QKVZ: &str = "delta.in_qkvz";
    /// The same projection in two (`DeltaNetConfig::split_z`): rows [q; k; v], and rows z.
    pub const DN_QKV: &str = "delta.in_qkv";
    pub const DN_Z: &str = "delta.in_z";
    /// in_proj_ba de-grouped to rows [b; a] (one of each per v head).
    pub const DN_BA: &str = "delta.in_ba";
    /// The depthwise conv [conv_dim, kernel].
    pub const DN_CONV: &str = "delta.conv";
    pub const DN_DT_BIAS: &str = "delta.dt_bias";
    pub const DN_A_LOG: &str = "delta.a_log";
    /// The gated RMSNorm over each v head (a plain gain, not zero-centred).
    pub const DN_NORM: &str = "delta.norm";
    pub const DN_OUT: &str = "delta.out";
}

/// Whether `s` is MLA's W_UK or W_UV, bound per head: besides floats it may be stored in any
/// block dtype whose rows are self-contained (a GGUF's block-typed `attn_k_b` / `attn_v_b` as
/// they are), though `--quantize` leaves it float.
pub fn is_per_head(s: &TensorSpec) -> bool {
    s.name.ends_with(suffix::K_B) || s.name.ends_with(suffix::V_B)
}

fn spec(name: String, shape: &[usize], kind: TensorKind, role: Role) -> TensorSpec {
    TensorSpec { name, shape: shape.iter().map(|&d| d as u64).collect(), kind, role, quant: None }
}

/// A matrix that may be stored block-quantised as class `class`.
fn quantisable(mut s: TensorSpec, class: QuantClass) -> TensorSpec {
    s.quant = Some(class);
    s
}

/// A norm's weight [hidden], and its bias when it is a LayerNorm.
fn push_norm(v: &mut Vec<TensorSpec>, c: &Config, weight: String, bias: String) {
    v.push(spec(weight, &[c.hidden_size], TensorKind::Plain, Role::Norm));
    if c.norm == NormKind::LayerNorm {
        v.push(spec(bias, &[c.hidden_size], TensorKind::Plain, Role::Norm));
    }
}

/// Every tensor of a model with config `c`, in file order: all routers first (layer order),
/// then the embedding, then each layer, then the final norm and (unless tied) the lm_head.
pub fn tensor_specs(c: &Config) -> Vec<TensorSpec> {
    use suffix::*;
    use Role::*;
    use TensorKind::{Plain, Router as RouterKind};
    let (h, hd, e) = (c.hidden_size, c.head_dim, c.moe.n_experts);
    let (q_out, kv_out) = (c.n_heads * hd, c.n_kv_heads * hd);
    let mut v = Vec::new();
    for (l, spec_l) in c.layers.iter().enumerate() {
        if spec_l.moe {
            v.push(spec(layer_name(l, ROUTER), &[e, h], RouterKind, Router));
        }
    }
    v.push(spec(EMBEDDING.into(), &[c.vocab_size, h], Plain, Embedding));
    for (l, spec_l) in c.layers.iter().enumerate() {
        let n = |s: &str| layer_name(l, s);
        push_norm(&mut v, c, n(ATTN_NORM), n(ATTN_NORM_BIAS));
        if spec_l.kind == LayerKind::DeltaNet {
            delta_net_specs(c, l, &mut v);
            push_norm(&mut v, c, n(FFN_NORM), n(FFN_NORM_BIAS));
            ffn_specs(c, l, spec_l.moe, &mut v);
            continue;
        }
        if let Some(m) = &c.mla {
            mla_specs(c, m, l, &mut v);
        } else {
            v.push(quantisable(spec(n(Q), &[q_out, h], Plain, Attention), QuantClass::Attn));
            if c.attn_output_gate {
                v.push(quantisable(spec(n(GATE), &[q_out, h], Plain, Attention), QuantClass::Attn));
            }
            v.push(quantisable(spec(n(K), &[kv_out, h], Plain, Attention), QuantClass::Attn));
            v.push(quantisable(spec(n(V), &[kv_out, h], Plain, Attention), QuantClass::Attn));
        }
        if c.attention_bias {
            v.push(spec(n(Q_BIAS), &[q_out], Plain, Attention));
            v.push(spec(n(K_BIAS), &[kv_out], Plain, Attention));
            v.push(spec(n(V_BIAS), &[kv_out], Plain, Attention));
        }
        match c.qk_norm {
            QkNorm::None | QkNorm::Weightless => {}
            QkNorm::PerHead => {
                v.push(spec(n(Q_NORM), &[hd], Plain, Norm));
                v.push(spec(n(K_NORM), &[hd], Plain, Norm));
            }
            QkNorm::Full => {
                v.push(spec(n(Q_NORM), &[q_out], Plain, Norm));
                v.push(spec(n(K_NORM), &[kv_out], Plain, Norm));
            }
        }
        let o_in = c.mla.as_ref().map_or(q_out, |m| c.n_heads * m.v_head_dim);
        v.push(quantisable(spec(n(O), &[h, o_in], Plain, Attention), QuantClass::Attn));
        if c.attention_out_bias {
            v.push(spec(n(O_BIAS), &[h], Plain, Attention));
        }
        if c.attention_sinks {
            v.push(spec(n(SINKS), &[c.n_heads], Plain, Attention));
        }
        push_norm(&mut v, c, n(FFN_NORM), n(FFN_NORM_BIAS));
        ffn_specs(c, l, spec_l.moe, &mut v);
    }
    push_norm(&mut v, c, FINAL_NORM.into(), FINAL_NORM_BIAS.into());
    if !c.tie_embeddings {
        v.push(quantisable(spec(LM_HEAD.into(), &[c.vocab_size, h], Plain, LmHead), QuantClass::LmHead));
    }
    if c.lm_head_bias {
        v.push(spec(LM_HEAD_BIAS.into(), &[c.vocab_size], Plain, LmHead));
    }
    v
}

/// The attention matrices of an MLA layer `l` (before its output projection). W_UK and W_UV
/// stay float: a head's rows of them must be a contiguous byte range.
fn mla_specs(c: &Config, m: &Mla, l: usize, v: &mut Vec<TensorSpec>) {
    use suffix::*;
    use Role::{Attention, Norm};
    use TensorKind::Plain;
    let n = |s: &str| layer_name(l, s);
    let (h, heads) = (c.hidden_size, c.n_heads);
    let q_out = heads * c.head_dim;
    if m.q_lora_rank > 0 {
        v.push(quantisable(spec(n(Q_A), &[m.q_lora_rank, h], Plain, Attention), QuantClass::Attn));
        v.push(spec(n(Q_A_NORM), &[m.q_lora_rank], Plain, Norm));
        v.push(quantisable(spec(n(Q_B), &[q_out, m.q_lora_rank], Plain, Attention), QuantClass::Attn));
    } else {
        v.push(quantisable(spec(n(Q), &[q_out, h], Plain, Attention), QuantClass::Attn));
    }
    let kv_a = m.kv_lora_rank + m.qk_rope_head_dim;
    v.push(quantisable(spec(n(KV_A), &[kv_a, h], Plain, Attention), QuantClass::Attn));
    v.push(spec(n(KV_A_NORM), &[m.kv_lora_rank], Plain, Norm));
    v.push(spec(n(K_B), &[heads * m.kv_lora_rank, m.qk_nope_head_dim], Plain, Attention));
    v.push(spec(n(V_B), &[heads * m.v_head_dim, m.kv_lora_rank], Plain, Attention));
}

/// The tensors of a Gated DeltaNet token mixer of layer `l`.
fn delta_net_specs(c: &Config, l: usize, v: &mut Vec<TensorSpec>) {
    use suffix::*;
    use Role::{Attention, Norm};
    use TensorKind::Plain;
    let Some(d) = c.delta_net else { return };
    let n = |s: &str| layer_name(l, s);
    let h = c.hidden_size;
    if d.split_z {
        v.push(quantisable(spec(n(DN_QKV), &[d.conv_dim(), h], Plain, Attention), QuantClass::Attn));
        v.push(quantisable(spec(n(DN_Z), &[d.value_dim(), h], Plain, Attention), QuantClass::Attn));
    } else {
        let qkvz = 2 * d.key_dim() + 2 * d.value_dim();
        v.push(quantisable(spec(n(DN_QKVZ), &[qkvz, h], Plain, Attention), QuantClass::Attn));
    }
    v.push(spec(n(DN_BA), &[2 * d.n_v_heads, h], Plain, Attention));
    v.push(spec(n(DN_CONV), &[d.conv_dim(), d.conv_kernel], Plain, Attention));
    v.push(spec(n(DN_DT_BIAS), &[d.n_v_heads], Plain, Attention));
    v.push(spec(n(DN_A_LOG), &[d.n_v_heads], Plain, Attention));
    v.push(spec(n(DN_NORM), &[d.v_head_dim], Plain, Norm));
    v.push(quantisable(spec(n(DN_OUT), &[h, d.value_dim()], Plain, Attention), QuantClass::Attn));
}

/// The feed-forward tensors of layer `l`: a MoE block or a dense MLP.
fn ffn_specs(c: &Config, l: usize, moe: bool, v: &mut Vec<TensorSpec>) {
    use suffix::*;
    use Role::Mlp;
    use TensorKind::Plain;
    if moe {
        return moe_specs(c, l, v);
    }
    let n = |s: &str| layer_name(l, s);
    let (h, f) = (c.hidden_size, c.dense_ffn);
    v.push(quantisable(spec(n(MLP_GATE), &[f, h], Plain, Mlp), QuantClass::Mlp));
    v.push(quantisable(spec(n(MLP_UP), &[f, h], Plain, Mlp), QuantClass::Mlp));
    v.push(quantisable(spec(n(MLP_DOWN), &[h, f], Plain, Mlp), QuantClass::Mlp));
}

/// The MoE block's tensors of layer `l`: choice bias, router bias, the three expert stacks and
/// their biases, the shared expert.
fn moe_specs(c: &Config, l: usize, v: &mut Vec<TensorSpec>) {
    use suffix::*;
    use Role::*;
    use TensorKind::{Experts as Stack, Plain};
    let (h, e) = (c.hidden_size, c.moe.n_experts);
    let n = |s: &str| layer_name(l, s);
    if c.moe.choice_bias {
        v.push(spec(n(ROUTER_BIAS), &[e], Plain, Router));
    }
    if c.moe.router_bias {
        v.push(spec(n(ROUTER_LOGIT_BIAS), &[e], Plain, Router));
    }
    let f = c.moe.expert_ffn;
    v.push(quantisable(spec(n(EXPERTS_GATE), &[e, f, h], Stack, Experts), QuantClass::Experts));
    v.push(quantisable(spec(n(EXPERTS_UP), &[e, f, h], Stack, Experts), QuantClass::Experts));
    v.push(quantisable(spec(n(EXPERTS_DOWN), &[e, h, f], Stack, Experts), QuantClass::Experts));
    if c.moe.expert_bias {
        // [n_experts, width]: row e is expert e's bias.
        v.push(spec(n(EXPERTS_GATE_BIAS), &[e, f], Plain, Experts));
        v.push(spec(n(EXPERTS_UP_BIAS), &[e, f], Plain, Experts));
        v.push(spec(n(EXPERTS_DOWN_BIAS), &[e, h], Plain, Experts));
    }
    let fs = c.moe.shared_expert_ffn;
    if fs > 0 {
        v.push(quantisable(spec(n(SHARED_GATE_PROJ), &[fs, h], Plain, Mlp), QuantClass::Shared));
        v.push(quantisable(spec(n(SHARED_UP), &[fs, h], Plain, Mlp), QuantClass::Shared));
        v.push(quantisable(spec(n(SHARED_DOWN), &[h, fs], Plain, Mlp), QuantClass::Shared));
        if c.moe.shared_expert_gate {
            v.push(spec(n(SHARED_EXPERT_GATE), &[1, h], Plain, Mlp));
        }
    }
}

/// Parameter counts of a config.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamCount {
    /// Every weight stored (a tied embedding counted once).
    pub total: u64,
    /// Weights read to produce one token: attention, routers, top_k of the routed experts,
    /// shared experts, dense MLPs, norms and the lm_head — not the embedding table, of which one
    /// row is read (unless it is tied, when it is the lm_head).
    pub active: u64,
}

/// Count total and active parameters.
pub fn param_count(c: &Config) -> ParamCount {
    let mut p = ParamCount::default();
    for s in tensor_specs(c) {
        let n: u64 = s.shape.iter().product();
        p.total += n;
        p.active += match s.role {
            Role::Experts => n / c.moe.n_experts as u64 * c.moe.top_k as u64,
            Role::Embedding if !c.tie_embeddings => 0,
            _ => n,
        };
    }
    p
}
