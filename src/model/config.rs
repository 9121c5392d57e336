//! The model configuration: plain numbers describing one model of any supported family. Family
//! differences are fields here, never separate model code. Stored as JSON in the file's
//! "config" metadata entry; `validate` rejects nonsense before anything is sized from it.

pub use super::delta_config::DeltaNetConfig;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The HuggingFace architecture a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// MixtralForCausalLM
    Mixtral,
    /// Qwen2MoeForCausalLM
    Qwen2Moe,
    /// Qwen3MoeForCausalLM
    Qwen3Moe,
    /// OlmoeForCausalLM
    Olmoe,
    /// GraniteMoeForCausalLM (Mixtral's blocks with four scalar multipliers: `Scales`)
    GraniteMoe,
    /// Glm4MoeForCausalLM (GLM-4.5 / 4.6: sigmoid routing with a choice bias and expert groups,
    /// an ungated shared expert, leading dense layers, partial RoPE)
    Glm4Moe,
    /// DeepseekV2ForCausalLM (multi-head latent attention `Mla`, softmax routing, greedy or
    /// group-limited top-k by group maximum, shared experts, leading dense layers)
    DeepseekV2,
    /// DeepseekV3ForCausalLM (MLA; GLM-4.5's sigmoid routing with a choice bias and top-2-sum
    /// expert groups). Kimi-K2 and Moonlight load through it.
    DeepseekV3,
    /// GptOssForCausalLM (attention sinks, q/k/v/o biases, alternating sliding/full layers,
    /// a router with a bias, experts with biases and the clamped gated activation)
    GptOss,
    /// PhimoeForCausalLM (Phi-3.5-MoE: LayerNorm with bias, biased attention and lm_head,
    /// sparsemixer top-2 routing, LongRoPE)
    Phimoe,
    /// Qwen3NextForCausalLM (Gated DeltaNet linear attention in most layers, gated full attention
    /// in the rest, zero-centred RMSNorm, Qwen2-MoE's gated shared expert)
    Qwen3Next,
    /// Dots1ForCausalLM (dots.llm1: Qwen3's attention with per-head q/k norm, DeepSeek-V3's
    /// sigmoid routing with a choice bias and top-2-sum groups, ungated shared experts, leading
    /// dense layers)
    Dots1,
    /// Ernie4_5_MoeForCausalLM (ERNIE-4.5-MoE: RoPE on interleaved pairs, softmax routing with a
    /// choice bias added to the probabilities, renormalised top-k, ungated shared experts, MoE
    /// layers by start/end/interval)
    #[serde(rename = "ernie4_5_moe")]
    Ernie45Moe,
    /// HunYuanMoEV1ForCausalLM (Hunyuan-MoE as transformers ports it: per-head q/k norm after
    /// RoPE, softmax top-k renormalised, an ungated shared MLP in every layer, NTK-alpha RoPE)
    HunyuanV1Moe,
    /// Llama4ForCausalLM / Llama4ForConditionalGeneration's text model (Scout, Maverick: NoPE layers,
    /// chunked attention, weightless q/k norm, sigmoid-of-top-k routing onto the experts' inputs)
    Llama4,
}

impl Family {
    /// The HuggingFace class name.
    pub fn hf_architecture(self) -> &'static str {
        match self {
            Family::Mixtral => "MixtralForCausalLM",
            Family::Qwen2Moe => "Qwen2MoeForCausalLM",
            Family::Qwen3Moe => "Qwen3MoeForCausalLM",
            Family::Olmoe => "OlmoeForCausalLM",
            Family::GraniteMoe => "GraniteMoeForCausalLM",
            Family::Glm4Moe => "Glm4MoeForCausalLM",
            Family::DeepseekV2 => "DeepseekV2ForCausalLM",
            Family::DeepseekV3 => "DeepseekV3ForCausalLM",
            Family::GptOss => "GptOssForCausalLM",
            Family::Phimoe => "PhimoeForCausalLM",
            Family::Qwen3Next => "Qwen3NextForCausalLM",
            Family::Dots1 => "Dots1ForCausalLM",
            Family::Ernie45Moe => "Ernie4_5_MoeForCausalLM",
            Family::HunyuanV1Moe => "HunYuanMoEV1ForCausalLM",
            Family::Llama4 => "Llama4ForCausalLM",
        }
    }

    /// Short name ("mixtral", "qwen2_moe", ...).
    pub fn name(self) -> &'static str {
        match self {
            Family::Mixtral => "mixtral",
            Family::Qwen2Moe => "qwen2_moe",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Olmoe => "olmoe",
            Family::GraniteMoe => "granitemoe",
            Family::Glm4Moe => "glm4_moe",
            Family::DeepseekV2 => "deepseek_v2",
            Family::DeepseekV3 => "deepseek_v3",
            Family::GptOss => "gpt_oss",
            Family::Phimoe => "phimoe",
            Family::Qwen3Next => "qwen3_next",
            Family::Dots1 => "dots1",
            Family::Ernie45Moe => "ernie4_5_moe",
            Family::HunyuanV1Moe => "hunyuan_v1_moe",
            Family::Llama4 => "llama4",
        }
    }
}

/// Where RMSNorm is applied to queries and keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    /// No q/k normalisation (Mixtral, Qwen2-MoE).
    None,
    /// RMSNorm over each head's head_dim values, weight [head_dim] (Qwen3-MoE).
    PerHead,
    /// RMSNorm over the whole projection, weights [n_heads·head_dim] and [n_kv_heads·head_dim] (OLMoE).
    Full,
    /// RMSNorm over each head without a weight, after RoPE, on the RoPE layers only (Llama-4's
    /// `use_qk_norm`, `Llama4TextWeightlessRMSNorm` with `rms_norm_eps`); no tensors.
    Weightless,
}

/// The normalisation of the layers' inputs and of the final hidden state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// RMSNorm, weight only (every family but Phi-MoE).
    #[default]
    Rms,
    /// LayerNorm: mean removed, biased variance, weight and bias (`nn.LayerNorm`, Phi-MoE).
    LayerNorm,
}

/// Rotary position embedding: base frequency and optional scaling, with every default resolved
/// by the converter (the engine applies exactly these numbers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rope {
    /// Base θ.
    pub theta: f64,
    /// Fraction of head_dim that is rotated (1.0 for all supported families).
    #[serde(default = "one")]
    pub partial_rotary_factor: f64,
    /// Context-extension scheme.
    #[serde(default)]
    pub scaling: RopeScaling,
    /// Rotate interleaved pairs (2i, 2i+1) instead of the halves (i, i + rot/2) (DeepSeek-V2
    /// always; V3 with `rope_interleave`). Same frequencies per pair.
    #[serde(default)]
    pub interleaved: bool,
}

fn one() -> f64 {
    1.0
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// RoPE scaling schemes used by these families' configs (transformers `rope_type`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Plain RoPE.
    #[default]
    None,
    /// Positions divided by `factor`.
    Linear { factor: f64 },
    /// NTK-aware dynamic scaling beyond `original_max_position_embeddings`.
    Dynamic { factor: f64, original_max_position_embeddings: u64 },
    /// YaRN, with attention_factor resolved (transformers `_compute_yarn_parameters`).
    Yarn {
        factor: f64,
        original_max_position_embeddings: u64,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: f64,
        truncate: bool,
    },
    /// Llama-3 frequency-band scaling.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: u64 },
    /// LongRoPE (Phi-3 / Phi-MoE): inverse frequencies divided per dimension by `short_factor`,
    /// or by `long_factor` when the highest position of a forward call is past
    /// `original_max_position_embeddings`; cos and sin × `short_mscale` / `long_mscale` by the
    /// same rule. Chosen per call: cached keys keep the factors they were computed with.
    LongRope {
        /// [rot_dim / 2]
        short_factor: Vec<f64>,
        /// [rot_dim / 2]
        long_factor: Vec<f64>,
        original_max_position_embeddings: u64,
        short_mscale: f64,
        long_mscale: f64,
    },
}

/// How router logits become expert scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scoring {
    /// softmax over all experts (Mixtral, Qwen, OLMoE, Granite).
    #[default]
    Softmax,
    /// sigmoid of each logit (DeepSeek-V3, GLM-4.5).
    Sigmoid,
    /// Phi-MoE's sparsemixer (eval mode): expert i is the largest logit left after the i − 1
    /// chosen before it are masked; its weight is the softmax, at that expert, of the remaining
    /// logits with those more than 2·jitter_eps (relative to max(|logit|, that largest)) below
    /// the largest masked as well (`router_jitter_noise`).
    SparseMixer { jitter_eps: f64 },
    /// Llama-4: the k largest logits are chosen, each weighted by the sigmoid of its logit (no
    /// renormalisation).
    SigmoidOfTopK,
}

/// The gated activation of the routed experts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExpertAct {
    /// silu(gate) · up (SwiGLU).
    #[default]
    Silu,
    /// GPT-OSS: g = min(gate, limit), u = clamp(up, −limit, limit), (u + 1) · g · sigmoid(alpha · g)
    /// (`GptOssExperts._apply_gate`).
    ClampedSwiglu { alpha: f64, limit: f64 },
}

/// Group-limited choice (DeepSeek-V2/V3 / GLM-4.5 `n_group`, `topk_group`): the experts form
/// `n_group` equal groups, each scored by `score`, and only the `topk_group` best groups
/// compete for the top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertGroups {
    pub n_group: usize,
    pub topk_group: usize,
    /// How a group is scored from its experts' choice scores.
    #[serde(default)]
    pub score: GroupScore,
}

/// A group's score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupScore {
    /// The sum of its two best choice scores (DeepSeek-V3 `noaux_tc`, GLM-4.5).
    #[default]
    Top2Sum,
    /// Its best score (DeepSeek-V2 `group_limited_greedy`).
    Max,
}

/// Multi-head latent attention (DeepSeek-V2/V3). Per head, q = [q_nope (qk_nope_head_dim), q_pe
/// (qk_rope_head_dim)]; keys and values come from one compressed latent per token, c =
/// rmsnorm(kv_a·x)[..kv_lora_rank], and one roped key k_pe shared by every head: k_h = [W_UK,h·c,
/// k_pe], v_h = W_UV,h·c. The cache holds c and k_pe only (`kv_lora_rank + qk_rope_head_dim`
/// values per token and layer). `Config::head_dim` is qk_nope + qk_rope; n_kv_heads = n_heads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mla {
    /// Rank of the query's low-rank path (q_a → rmsnorm → q_b); 0: one q projection.
    pub q_lora_rank: usize,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    /// eps of the q_a and kv_a RMSNorms (transformers builds them with its default 1e-6).
    pub latent_norm_eps: f64,
}

/// The routed-experts part of a MoE layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MoeConfig {
    /// Routed experts per MoE layer.
    pub n_experts: usize,
    /// Experts chosen per token.
    pub top_k: usize,
    /// Inner size of each routed expert (SwiGLU).
    pub expert_ffn: usize,
    /// Renormalise the chosen top-k probabilities to sum to 1 (Mixtral always; others per config).
    pub norm_topk_prob: bool,
    /// Inner size of the shared expert (Qwen2-MoE); 0 when there is none.
    #[serde(default)]
    pub shared_expert_ffn: usize,
    /// Shared expert output scaled by sigmoid(shared_expert_gate · x) (Qwen2-MoE).
    #[serde(default)]
    pub shared_expert_gate: bool,
    /// Expert scores from the router logits.
    #[serde(default)]
    pub scoring: Scoring,
    /// A per-expert bias (`moe.router_bias`, f32) added to the scores for choosing only; the
    /// weights come from the unbiased scores (`e_score_correction_bias`).
    #[serde(default)]
    pub choice_bias: bool,
    /// Group-limited choice, if any.
    #[serde(default)]
    pub groups: Option<ExpertGroups>,
    /// Combination weights × this (`routed_scaling_factor`), after any renormalisation.
    #[serde(default = "one")]
    pub routed_scaling: f64,
    /// The router adds a per-expert bias to its logits (`moe.router_logit_bias`, GPT-OSS);
    /// unlike `choice_bias` it changes the weights too.
    #[serde(default)]
    pub router_bias: bool,
    /// The routed experts' gate/up/down projections carry biases (`moe.experts.*_bias`, GPT-OSS).
    #[serde(default)]
    pub expert_bias: bool,
    /// The routed experts' gated activation.
    #[serde(default)]
    pub expert_act: ExpertAct,
    /// Each chosen expert runs on its input × the routing weight, its output added as it is (Llama-4).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub weights_on_input: bool,
}

/// Scalar multipliers some families put on the residual stream (Granite): all 1 / the usual
/// 1/sqrt(head_dim) elsewhere.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Scales {
    /// x = embed(tokens) · embedding.
    pub embedding: f64,
    /// Attention scores = q·k · attention (None: 1/sqrt(head_dim)).
    pub attention: Option<f64>,
    /// x += residual · branch(x), for the attention and the FFN branch.
    pub residual: f64,
    /// logits = lm_head(x) / logits_divisor.
    pub logits_divisor: f64,
}

impl Default for Scales {
    fn default() -> Self {
        Scales { embedding: 1.0, attention: None, residual: 1.0, logits_divisor: 1.0 }
    }
}

impl MoeConfig {
    /// `n_experts` routed SwiGLU experts of `expert_ffn`, `top_k` per token by softmax scores,
    /// weights not renormalised, and nothing else: what a family adds goes on top
    /// (`MoeConfig { norm_topk_prob: true, ..MoeConfig::plain(n, k, f) }`).
    pub fn plain(n_experts: usize, top_k: usize, expert_ffn: usize) -> MoeConfig {
        MoeConfig {
            n_experts,
            top_k,
            expert_ffn,
            norm_topk_prob: false,
            shared_expert_ffn: 0,
            shared_expert_gate: false,
            scoring: Scoring::Softmax,
            choice_bias: false,
            groups: None,
            routed_scaling: 1.0,
            router_bias: false,
            expert_bias: false,
            expert_act: ExpertAct::Silu,
            weights_on_input: false,
        }
    }

    /// How many experts a token can choose among: all, or those of the `topk_group` groups.
    pub fn choosable(&self) -> usize {
        self.groups.map_or(self.n_experts, |g| g.topk_group * (self.n_experts / g.n_group.max(1)))
    }
}

/// What mixes the tokens of a layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// Softmax self-attention over the KV cache.
    #[default]
    Attention,
    /// Gated DeltaNet linear attention (`Config::delta_net`): a fixed-size recurrent state per
    /// session instead of a KV cache.
    DeltaNet,
}

impl LayerKind {
    /// Whether this is `Attention` (the default).
    pub fn is_attention(&self) -> bool {
        *self == LayerKind::Attention
    }
}

/// Per-layer choices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerSpec {
    /// MoE block (true) or dense SwiGLU MLP of size `dense_ffn` (false).
    pub moe: bool,
    /// Sliding attention window for this layer, if any.
    #[serde(default)]
    pub sliding_window: Option<usize>,
    /// The token mixer (attention unless said otherwise; written only when not).
    #[serde(default, skip_serializing_if = "LayerKind::is_attention")]
    pub kind: LayerKind,
    /// No RoPE on q and k (Llama-4's NoPE layers; `Config::attn_temperature` scales their queries).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_rope: bool,
    /// Chunked attention (Llama-4's `attention_chunk_size` on RoPE layers): a query attends to the
    /// positions of its own chunk of this many, counted from 0, up to itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_chunk: Option<usize>,
}

impl LayerSpec {
    /// A softmax-attention layer (MoE or dense) without window, chunk or NoPE.
    pub fn attention(moe: bool) -> LayerSpec {
        LayerSpec { moe, sliding_window: None, kind: LayerKind::Attention, no_rope: false, attention_chunk: None }
    }

    /// The first cached position a query at position `p` attends to (the window rule): the last
    /// `sliding_window` positions, or those of p's own attention chunk, or all.
    pub fn first_key(&self, p: usize) -> usize {
        let window = self.sliding_window.map_or(0, |w| (p + 1).saturating_sub(w));
        let chunk = match self.attention_chunk {
            Some(c) if c > 0 => p / c * c,
            _ => 0,
        };
        window.max(chunk)
    }
}

/// Llama-4's attention temperature tuning of its NoPE layers: the query at position p is scaled by
/// ln(1 + floor((p + 1) / floor_scale)) · attn_scale + 1 (computed in f32, as transformers does).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttnTemperature {
    pub floor_scale: f64,
    pub attn_scale: f64,
}

/// Everything the forward pass needs to know about a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope: Rope,
    /// Trained context length.
    pub max_position_embeddings: usize,
    /// q/k/v projections carry a bias (Qwen2-MoE).
    pub attention_bias: bool,
    /// The output projection carries a bias (GPT-OSS, Phi-MoE).
    #[serde(default)]
    pub attention_out_bias: bool,
    /// The layer and final norms (RMSNorm; Phi-MoE: LayerNorm with bias). `rms_norm_eps` is
    /// its epsilon either way.
    #[serde(default)]
    pub norm: NormKind,
    /// lm_head carries a bias (Phi-MoE `lm_head_bias`).
    #[serde(default)]
    pub lm_head_bias: bool,
    pub qk_norm: QkNorm,
    /// Clamp q, k and v to [-clip, clip] after projection (OLMoE `clip_qkv`).
    #[serde(default)]
    pub clip_qkv: Option<f64>,
    pub moe: MoeConfig,
    /// Inner size of dense-layer MLPs (0 when no layer is dense).
    pub dense_ffn: usize,
    /// One entry per layer.
    pub layers: Vec<LayerSpec>,
    /// lm_head shares the embedding matrix.
    pub tie_embeddings: bool,
    /// Activation of the gated MLPs ("silu").
    pub hidden_act: String,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    /// Residual-stream multipliers (Granite); absent in files of other families.
    #[serde(default)]
    pub scales: Scales,
    /// Multi-head latent attention (DeepSeek); None: q/k/v projections and a per-head cache.
    #[serde(default)]
    pub mla: Option<Mla>,
    /// A learned logit per query head in every softmax's denominator (`attn.sinks`, GPT-OSS): it
    /// takes part of the probability mass and attends to nothing.
    #[serde(default)]
    pub attention_sinks: bool,
    /// The DeltaNet layers' shape (Qwen3-Next), when any layer is `LayerKind::DeltaNet`. (This
    /// and the next two are written only when set: other families' files are as before.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_net: Option<DeltaNetConfig>,
    /// q_proj also yields a per-head output gate: attention output × sigmoid(gate) (Qwen3-Next).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attn_output_gate: bool,
    /// RMSNorm gains are `norm_offset + weight` for the layer, q/k and final norms (Qwen3-Next's
    /// zero-centred norms: 1; 0 elsewhere).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub norm_offset: f64,
    /// The per-head q/k RMSNorm follows RoPE instead of preceding it (Hunyuan-MoE, Llama-4).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qk_norm_after_rope: bool,
    /// The queries of the NoPE layers (`LayerSpec::no_rope`) are scaled by their position's
    /// temperature (Llama-4's `attn_temperature_tuning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_temperature: Option<AttnTemperature>,
}

impl Config {
    /// Dimensions of a head that RoPE rotates (its trailing qk_rope_head_dim under MLA, else the
    /// leading head_dim · partial_rotary_factor).
    pub fn rope_dim(&self) -> usize {
        match &self.mla {
            Some(m) => m.qk_rope_head_dim,
            None => ((self.head_dim as f64 * self.rope.partial_rotary_factor) as usize) & !1,
        }
    }

    /// Values cached per token and layer: (K row, V row). n_kv_heads·head_dim each, or under
    /// MLA the latent and the rope key in the K row and nothing in the V row.
    pub fn kv_row_widths(&self) -> (usize, usize) {
        match &self.mla {
            Some(m) => (m.kv_lora_rank + m.qk_rope_head_dim, 0),
            None => (self.n_kv_heads * self.head_dim, self.n_kv_heads * self.head_dim),
        }
    }

    /// LongRoPE's original context, past which a forward call uses the long factors (None when
    /// both sets are one, as Llama-4 GGUFs' `rope_freqs`: nothing is chosen per call).
    pub fn longrope_original(&self) -> Option<usize> {
        match &self.rope.scaling {
            RopeScaling::LongRope {
                original_max_position_embeddings,
                short_factor,
                long_factor,
                short_mscale,
                long_mscale,
            } if short_factor != long_factor || short_mscale != long_mscale => {
                Some(usize::try_from(*original_max_position_embeddings).unwrap_or(usize::MAX))
            }
            _ => None,
        }
    }

    /// Number of layers with a MoE block.
    pub fn n_moe_layers(&self) -> usize {
        self.layers.iter().filter(|l| l.moe).count()
    }

    /// Number of layers whose token mixer is softmax attention (those with a KV cache).
    pub fn n_attention_layers(&self) -> usize {
        self.layers.iter().filter(|l| l.kind == LayerKind::Attention).count()
    }

    /// Number of Gated DeltaNet layers (those with a recurrent state).
    pub fn n_delta_net_layers(&self) -> usize {
        self.layers.iter().filter(|l| l.kind == LayerKind::DeltaNet).count()
    }

    /// Bytes of K and V cached per token (attention layers) for a cache element of `elem_bytes`.
    pub fn kv_bytes_per_token(&self, elem_bytes: usize) -> usize {
        let (k, v) = self.kv_row_widths();
        (k + v) * self.n_attention_layers() * elem_bytes
    }

    /// Bytes of recurrent state one session holds whatever its length (f32: every DeltaNet
    /// layer's conv inputs and delta-rule matrices); 0 for attention-only models.
    pub fn recurrent_state_bytes(&self) -> usize {
        let per_layer = self.delta_net.map_or(0, |d| d.state_floats());
        [self.n_delta_net_layers(), per_layer, 4].into_iter().fold(1, usize::saturating_mul)
    }

    /// Parse and validate the JSON stored in a file.
    pub fn from_json(bytes: &[u8]) -> Result<Config> {
        let c: Config = serde_json::from_slice(bytes)
            .map_err(|e| Error::Metadata { key: "config".into(), reason: format!("not a valid model config: {e}") })?;
        c.validate()?;
        Ok(c)
    }
}
