//! Weights: every tensor the config implies, bound once (when the model is opened) as a typed,
//! checked kernel operand borrowed from the mapping — one struct per block, shapes as in
//! `names`. The forward pass sees only bound matrices: a missing or malformed tensor is an error
//! at open, never a silent zero at run time.

use super::config::{Config, ExpertAct, LayerKind, Mla};
use super::names::{layer_name, suffix, EMBEDDING, FINAL_NORM, FINAL_NORM_BIAS, LM_HEAD, LM_HEAD_BIAS};
use crate::error::{Error, Result};
use crate::format::ParsedFile;
use crate::kernels::Mat;
use crate::tensor::TensorView;

/// A gated MLP: down(act(gate·x, up·x)) — SwiGLU, or GPT-OSS's clamped variant (`act`).
#[derive(Clone, Copy, Debug)]
pub struct MlpWeights<'a> {
    /// [ffn, hidden]
    pub gate: Mat<'a>,
    /// [ffn, hidden]
    pub up: Mat<'a>,
    /// [hidden, ffn]
    pub down: Mat<'a>,
    /// The gated activation (SwiGLU but for GPT-OSS's routed experts).
    pub act: ExpertAct,
    /// Biases of the three projections (GPT-OSS's routed experts).
    pub bias: Option<MlpBias<'a>>,
}

/// The biases of one routed expert: row `row` of the layer's [n_experts, width] bias tensors.
#[derive(Clone, Copy, Debug)]
pub struct MlpBias<'a> {
    /// [n_experts, ffn] ×2, [n_experts, hidden]
    pub gate: Mat<'a>,
    pub up: Mat<'a>,
    pub down: Mat<'a>,
    pub row: usize,
}

/// A norm's parameters: weight [hidden], and the bias [hidden] of a LayerNorm
/// (`NormKind::LayerNorm`; None for RMSNorm).
#[derive(Clone, Copy, Debug)]
pub struct NormWeights<'a> {
    pub weight: Mat<'a>,
    pub bias: Option<Mat<'a>>,
}

/// A MoE block.
#[derive(Clone, Debug)]
pub struct MoeWeights<'a> {
    /// [n_experts, hidden]
    pub router: Mat<'a>,
    /// [n_experts] routed experts, each [expert_ffn, hidden] ×2 and [hidden, expert_ffn].
    pub experts: Vec<MlpWeights<'a>>,
    /// Shared expert (Qwen2-MoE).
    pub shared: Option<MlpWeights<'a>>,
    /// [1, hidden]: the shared expert's sigmoid gate.
    pub shared_gate: Option<Mat<'a>>,
    /// [n_experts]: the bias added to the scores for choosing (`MoeConfig::choice_bias`).
    pub choice_bias: Option<Vec<f32>>,
    /// [n_experts]: the bias added to the router logits (`MoeConfig::router_bias`).
    pub router_bias: Option<Mat<'a>>,
}

/// The feed-forward part of a layer.
#[derive(Clone, Debug)]
pub enum FfnWeights<'a> {
    Moe(MoeWeights<'a>),
    Dense(MlpWeights<'a>),
}

/// Grouped-query attention's projections (every family but DeepSeek).
#[derive(Clone, Debug)]
pub struct GqaWeights<'a> {
    /// [n_heads·head_dim, hidden], [n_kv_heads·head_dim, hidden] ×2
    pub wq: Mat<'a>,
    pub wk: Mat<'a>,
    pub wv: Mat<'a>,
    /// q/k/v biases (Qwen2-MoE).
    pub bq: Option<Mat<'a>>,
    pub bk: Option<Mat<'a>>,
    pub bv: Option<Mat<'a>>,
    /// q/k RMSNorm weights: [head_dim] per head, or the full projection width.
    pub q_norm: Option<Mat<'a>>,
    pub k_norm: Option<Mat<'a>>,
    /// [n_heads·head_dim, hidden]: the output gate (`Config::attn_output_gate`, Qwen3-Next).
    pub gate: Option<Mat<'a>>,
}

/// A Gated DeltaNet input projection, in one matrix or two (`DeltaNetConfig::split_z`).
#[derive(Clone, Copy, Debug)]
pub enum DeltaInProj<'a> {
    /// [2·kd + 2·vd, hidden]: rows q, k, v, z.
    Fused(Mat<'a>),
    /// [2·kd + vd, hidden] rows q, k, v, and [vd, hidden] rows z.
    Split { qkv: Mat<'a>, z: Mat<'a> },
}

/// Gated DeltaNet linear attention before its output projection (shapes from
/// `DeltaNetConfig`: kd = key_dim, vd = value_dim, nv = n_v_heads; the output projection
/// [hidden, vd] is the layer's `wo`).
#[derive(Clone, Debug)]
pub struct DeltaNetWeights<'a> {
    /// The input projection: rows q, k, v, z.
    pub in_proj: DeltaInProj<'a>,
    /// [2·nv, hidden]: rows b (β logits), a (decay input)
    pub in_ba: Mat<'a>,
    /// [conv_dim, kernel] depthwise causal conv over the q, k, v channels
    pub conv: Vec<f32>,
    /// [nv] each
    pub dt_bias: Vec<f32>,
    pub a_log: Vec<f32>,
    /// [v_head_dim] gain of the gated RMSNorm (plain, not zero-centred)
    pub norm: Vec<f32>,
}

/// Multi-head latent attention's projections (`Mla`).
#[derive(Clone, Debug)]
pub struct MlaWeights<'a> {
    /// The query: q_proj [n_heads·head_dim, hidden], or q_b [n_heads·head_dim, q_lora_rank]
    /// after `q_a`.
    pub q: Mat<'a>,
    /// q_a [q_lora_rank, hidden] and its RMSNorm weight [q_lora_rank] (low-rank queries).
    pub q_a: Option<(Mat<'a>, Mat<'a>)>,
    /// [kv_lora_rank + qk_rope, hidden]
    pub kv_a: Mat<'a>,
    /// [kv_lora_rank]
    pub kv_a_norm: Mat<'a>,
    /// [n_heads] of W_UK,h [kv_lora_rank, qk_nope] (query absorption: q_lat = W·q_nope).
    pub k_b: Vec<Mat<'a>>,
    /// [n_heads] of W_UV,h [v_head_dim, kv_lora_rank].
    pub v_b: Vec<Mat<'a>>,
}

/// A layer's attention projections before the output projection.
#[derive(Clone, Debug)]
pub enum AttnWeights<'a> {
    Gqa(GqaWeights<'a>),
    Mla(MlaWeights<'a>),
    DeltaNet(DeltaNetWeights<'a>),
}

/// One decoder layer.
#[derive(Clone, Debug)]
pub struct LayerWeights<'a> {
    pub attn_norm: NormWeights<'a>,
    pub attn: AttnWeights<'a>,
    /// [hidden, n_heads·head_dim] (MLA: [hidden, n_heads·v_head_dim]; DeltaNet: [hidden, vd])
    pub wo: Mat<'a>,
    /// [hidden]: the output projection's bias (GPT-OSS, Phi-MoE).
    pub bo: Option<Mat<'a>>,
    /// [n_heads]: each head's sink logit (GPT-OSS).
    pub sinks: Option<Vec<f32>>,
    pub ffn_norm: NormWeights<'a>,
    pub ffn: FfnWeights<'a>,
}

/// All weights of a model.
#[derive(Clone, Debug)]
pub struct Weights<'a> {
    /// [vocab, hidden]
    pub embed: Mat<'a>,
    pub layers: Vec<LayerWeights<'a>>,
    /// The final norm.
    pub norm: NormWeights<'a>,
    /// [vocab, hidden]; the embedding when tied.
    pub lm_head: Mat<'a>,
    /// [vocab] (Phi-MoE `lm_head_bias`).
    pub lm_head_bias: Option<Mat<'a>>,
}

struct Binder<'a> {
    parsed: &'a ParsedFile,
    file: &'a [u8],
}

impl<'a> Binder<'a> {
    fn view(&self, name: &str) -> Result<TensorView<'a>> {
        let rec = self.parsed.tensor(name).ok_or_else(|| Error::MissingTensor { name: name.to_string() })?;
        Ok(TensorView::new(rec, self.file))
    }

    fn get(&self, name: &str) -> Result<Mat<'a>> {
        self.view(name)?.mat()
    }

    fn opt(&self, name: &str) -> Result<Option<Mat<'a>>> {
        self.parsed.tensor(name).map(|rec| TensorView::new(rec, self.file).mat()).transpose()
    }

    /// A small tensor as f32 values (all of it).
    fn floats(&self, name: &str) -> Result<Vec<f32>> {
        let m = self.get(name)?;
        let mut v = vec![0f32; m.len()];
        m.dequantize(0, &mut v);
        Ok(v)
    }

    /// DeltaNet layer l's weights; `split`: its input projection in two (`DeltaNetConfig::split_z`).
    fn delta_net(&self, l: usize, split: bool) -> Result<DeltaNetWeights<'a>> {
        use suffix::*;
        let n = |s: &str| layer_name(l, s);
        Ok(DeltaNetWeights {
            in_proj: match split {
                true => DeltaInProj::Split { qkv: self.get(&n(DN_QKV))?, z: self.get(&n(DN_Z))? },
                false => DeltaInProj::Fused(self.get(&n(DN_QKVZ))?),
            },
            in_ba: self.get(&n(DN_BA))?,
            conv: self.floats(&n(DN_CONV))?,
            dt_bias: self.floats(&n(DN_DT_BIAS))?,
            a_log: self.floats(&n(DN_A_LOG))?,
            norm: self.floats(&n(DN_NORM))?,
        })
    }

    fn norm(&self, weight: &str, bias: &str) -> Result<NormWeights<'a>> {
        Ok(NormWeights { weight: self.get(weight)?, bias: self.opt(bias)? })
    }

    fn mlp(&self, l: usize, g: &str, u: &str, d: &str) -> Result<MlpWeights<'a>> {
        Ok(MlpWeights {
            gate: self.get(&layer_name(l, g))?,
            up: self.get(&layer_name(l, u))?,
            down: self.get(&layer_name(l, d))?,
            act: ExpertAct::Silu,
            bias: None,
        })
    }

    /// A vector tensor (or None when absent) as f32 values.
    fn opt_vec(&self, name: &str) -> Result<Option<Vec<f32>>> {
        Ok(self.opt(name)?.map(|m| {
            let mut v = vec![0f32; m.len()];
            m.dequantize(0, &mut v);
            v
        }))
    }

    /// The MLA projections of layer `l`.
    fn mla(&self, l: usize, heads: usize, m: &Mla) -> Result<MlaWeights<'a>> {
        use suffix::*;
        let n = |s: &str| layer_name(l, s);
        let q_a = if m.q_lora_rank > 0 { Some((self.get(&n(Q_A))?, self.get(&n(Q_A_NORM))?)) } else { None };
        Ok(MlaWeights {
            q: self.get(&n(if q_a.is_some() { Q_B } else { Q }))?,
            q_a,
            kv_a: self.get(&n(KV_A))?,
            kv_a_norm: self.get(&n(KV_A_NORM))?,
            k_b: self.per_head(&n(K_B), heads)?,
            v_b: self.per_head(&n(V_B), heads)?,
        })
    }

    /// A float matrix of `heads` row blocks, one `Mat` per head.
    fn per_head(&self, name: &str, heads: usize) -> Result<Vec<Mat<'a>>> {
        let v = self.view(name)?;
        let (rows, cols, dtype) = (v.rows() / heads.max(1), v.cols(), v.dtype);
        let bad = |reason: String| Error::TensorMismatch { name: name.to_string(), reason };
        // Floats, or whole rows of self-contained blocks (a GGUF's block-typed attn_k_b / attn_v_b).
        let per = dtype
            .bytes_for((rows * cols) as u64)
            .filter(|_| dtype.rows_self_contained() && cols.is_multiple_of(dtype.block()))
            .ok_or_else(|| bad(format!("{dtype} cannot be split into per-head matrices of {rows} x {cols}")))?
            as usize;
        let bytes = v.bytes;
        if per * heads != bytes.len() {
            return Err(bad(format!("{} bytes do not split into {heads} heads", bytes.len())));
        }
        bytes.chunks_exact(per.max(1)).map(|h| Mat::new(dtype, rows, cols, h).map_err(&bad)).collect()
    }

    /// The routed experts of layer `l`: expert e's gate, up and down from the three stacks.
    fn experts(&self, c: &Config, l: usize) -> Result<Vec<MlpWeights<'a>>> {
        use suffix::{EXPERTS_DOWN, EXPERTS_DOWN_BIAS, EXPERTS_GATE, EXPERTS_GATE_BIAS, EXPERTS_UP, EXPERTS_UP_BIAS};
        let stacks = [EXPERTS_GATE, EXPERTS_UP, EXPERTS_DOWN].map(|s| self.view(&layer_name(l, s)));
        let [gate, up, down] = stacks;
        let (gate, up, down) = (gate?.expert_mats()?, up?.expert_mats()?, down?.expert_mats()?);
        let biases = if c.moe.expert_bias {
            let [g, u, d] =
                [EXPERTS_GATE_BIAS, EXPERTS_UP_BIAS, EXPERTS_DOWN_BIAS].map(|s| self.get(&layer_name(l, s)));
            Some((g?, u?, d?))
        } else {
            None
        };
        let act = c.moe.expert_act;
        Ok(gate
            .into_iter()
            .zip(up)
            .zip(down)
            .enumerate()
            .map(|(row, ((gate, up), down))| {
                let bias = biases.map(|(gate, up, down)| MlpBias { gate, up, down, row });
                MlpWeights { gate, up, down, act, bias }
            })
            .collect())
    }
}

impl<'a> Weights<'a> {
    /// Bind every tensor of `c` in a parsed file (whose tensors were checked against the config).
    pub fn bind(c: &Config, parsed: &'a ParsedFile, file: &'a [u8]) -> Result<Weights<'a>> {
        use suffix::*;
        let b = Binder { parsed, file };
        let mut layers = Vec::with_capacity(c.n_layers);
        for (l, spec) in c.layers.iter().enumerate() {
            let n = |s: &str| layer_name(l, s);
            let ffn = if spec.moe {
                FfnWeights::Moe(MoeWeights {
                    router: b.get(&n(ROUTER))?,
                    experts: b.experts(c, l)?,
                    shared: if c.moe.shared_expert_ffn > 0 {
                        Some(b.mlp(l, SHARED_GATE_PROJ, SHARED_UP, SHARED_DOWN)?)
                    } else {
                        None
                    },
                    shared_gate: b.opt(&n(SHARED_EXPERT_GATE))?,
                    choice_bias: b.opt(&n(ROUTER_BIAS))?.map(|m| {
                        let mut v = vec![0f32; c.moe.n_experts];
                        m.row_to_f32(0, &mut v);
                        v
                    }),
                    router_bias: b.opt(&n(ROUTER_LOGIT_BIAS))?,
                })
            } else {
                FfnWeights::Dense(b.mlp(l, MLP_GATE, MLP_UP, MLP_DOWN)?)
            };
            let attn = match (spec.kind, &c.mla) {
                (LayerKind::DeltaNet, _) => {
                    AttnWeights::DeltaNet(b.delta_net(l, c.delta_net.is_some_and(|d| d.split_z))?)
                }
                (LayerKind::Attention, Some(m)) => AttnWeights::Mla(b.mla(l, c.n_heads, m)?),
                (LayerKind::Attention, None) => AttnWeights::Gqa(GqaWeights {
                    wq: b.get(&n(Q))?,
                    wk: b.get(&n(K))?,
                    wv: b.get(&n(V))?,
                    bq: b.opt(&n(Q_BIAS))?,
                    bk: b.opt(&n(K_BIAS))?,
                    bv: b.opt(&n(V_BIAS))?,
                    q_norm: b.opt(&n(Q_NORM))?,
                    k_norm: b.opt(&n(K_NORM))?,
                    gate: b.opt(&n(GATE))?,
                }),
            };
            let wo = b.get(&n(if spec.kind == LayerKind::DeltaNet { DN_OUT } else { O }))?;
            layers.push(LayerWeights {
                attn_norm: b.norm(&n(ATTN_NORM), &n(ATTN_NORM_BIAS))?,
                attn,
                wo,
                bo: b.opt(&n(O_BIAS))?,
                sinks: b.opt_vec(&n(SINKS))?,
                ffn_norm: b.norm(&n(FFN_NORM), &n(FFN_NORM_BIAS))?,
                ffn,
            });
        }
        let embed = b.get(EMBEDDING)?;
        let lm_head = if c.tie_embeddings { embed } else { b.get(LM_HEAD)? };
        let (norm, lm_head_bias) = (b.norm(FINAL_NORM, FINAL_NORM_BIAS)?, b.opt(LM_HEAD_BIAS)?);
        Ok(Weights { embed, layers, norm, lm_head, lm_head_bias })
    }
}
