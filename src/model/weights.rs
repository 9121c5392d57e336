//! Weights: every tensor the config implies, bound once (when the model is opened) as a typed,
//! checked kernel operand borrowed from the mapping — one struct per block, shapes as in
//! `names`. The forward pass sees only bound matrices: a missing or malformed tensor is an error
//! at open, never a silent zero at run time.

use super::config::{Config, LayerKind};
use super::names::{layer_name, suffix, EMBEDDING, FINAL_NORM, LM_HEAD};
use crate::error::{Error, Result};
use crate::format::ParsedFile;
use crate::kernels::Mat;
use crate::tensor::TensorView;

/// A gated (SwiGLU) MLP: down(silu(gate·x) ⊙ up·x).
#[derive(Clone, Copy, Debug)]
pub struct MlpWeights<'a> {
    /// [ffn, hidden]
    pub gate: Mat<'a>,
    /// [ffn, hidden]
    pub up: Mat<'a>,
    /// [hidden, ffn]
    pub down: Mat<'a>,
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
}

/// The feed-forward part of a layer.
#[derive(Clone, Debug)]
pub enum FfnWeights<'a> {
    Moe(MoeWeights<'a>),
    Dense(MlpWeights<'a>),
}

/// One decoder layer.
#[derive(Clone, Debug)]
pub struct LayerWeights<'a> {
    /// [hidden]
    pub attn_norm: Mat<'a>,
    /// The token mixer.
    pub mixer: Mixer<'a>,
    /// [hidden]
    pub ffn_norm: Mat<'a>,
    pub ffn: FfnWeights<'a>,
}

/// The token-mixing part of a layer (`LayerKind`).
#[derive(Clone, Debug)]
pub enum Mixer<'a> {
    Attention(AttentionWeights<'a>),
    DeltaNet(DeltaNetWeights<'a>),
}

/// Gated DeltaNet linear attention (shapes from `DeltaNetConfig`: kd = key_dim, vd = value_dim,
/// nv = n_v_heads).
#[derive(Clone, Debug)]
pub struct DeltaNetWeights<'a> {
    /// [2·kd + 2·vd, hidden]: rows q, k, v, z
    pub in_qkvz: Mat<'a>,
    /// [2·nv, hidden]: rows b (β logits), a (decay input)
    pub in_ba: Mat<'a>,
    /// [conv_dim, kernel] depthwise causal conv over the q, k, v channels
    pub conv: Vec<f32>,
    /// [nv] each
    pub dt_bias: Vec<f32>,
    pub a_log: Vec<f32>,
    /// [v_head_dim] gain of the gated RMSNorm (plain, not zero-centred)
    pub norm: Vec<f32>,
    /// [hidden, vd]
    pub out: Mat<'a>,
}

/// Softmax self-attention.
#[derive(Clone, Debug)]
pub struct AttentionWeights<'a> {
    /// [n_heads·head_dim, hidden], [n_kv_heads·head_dim, hidden] ×2, [hidden, n_heads·head_dim]
    pub wq: Mat<'a>,
    pub wk: Mat<'a>,
    pub wv: Mat<'a>,
    pub wo: Mat<'a>,
    /// q/k/v biases (Qwen2-MoE).
    pub bq: Option<Mat<'a>>,
    pub bk: Option<Mat<'a>>,
    pub bv: Option<Mat<'a>>,
    /// q/k RMSNorm weights: [head_dim] per head, or the full projection width.
    pub q_norm: Option<Mat<'a>>,
    pub k_norm: Option<Mat<'a>>,
    /// [n_heads·head_dim, hidden]: the output gate (`Config::attn_output_gate`).
    pub gate: Option<Mat<'a>>,
}

/// All weights of a model.
#[derive(Clone, Debug)]
pub struct Weights<'a> {
    /// [vocab, hidden]
    pub embed: Mat<'a>,
    pub layers: Vec<LayerWeights<'a>>,
    /// [hidden]
    pub norm: Mat<'a>,
    /// [vocab, hidden]; the embedding when tied.
    pub lm_head: Mat<'a>,
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

    fn attention(&self, l: usize) -> Result<AttentionWeights<'a>> {
        use suffix::*;
        let n = |s: &str| layer_name(l, s);
        Ok(AttentionWeights {
            wq: self.get(&n(Q))?,
            wk: self.get(&n(K))?,
            wv: self.get(&n(V))?,
            wo: self.get(&n(O))?,
            bq: self.opt(&n(Q_BIAS))?,
            bk: self.opt(&n(K_BIAS))?,
            bv: self.opt(&n(V_BIAS))?,
            q_norm: self.opt(&n(Q_NORM))?,
            k_norm: self.opt(&n(K_NORM))?,
            gate: self.opt(&n(GATE))?,
        })
    }

    fn delta_net(&self, l: usize) -> Result<DeltaNetWeights<'a>> {
        use suffix::*;
        let n = |s: &str| layer_name(l, s);
        Ok(DeltaNetWeights {
            in_qkvz: self.get(&n(DN_QKVZ))?,
            in_ba: self.get(&n(DN_BA))?,
            conv: self.floats(&n(DN_CONV))?,
            dt_bias: self.floats(&n(DN_DT_BIAS))?,
            a_log: self.floats(&n(DN_A_LOG))?,
            norm: self.floats(&n(DN_NORM))?,
            out: self.get(&n(DN_OUT))?,
        })
    }

    fn mlp(&self, l: usize, g: &str, u: &str, d: &str) -> Result<MlpWeights<'a>> {
        Ok(MlpWeights {
            gate: self.get(&layer_name(l, g))?,
            up: self.get(&layer_name(l, u))?,
            down: self.get(&layer_name(l, d))?,
        })
    }

    /// The routed experts of layer `l`: expert e's gate, up and down from the three stacks.
    fn experts(&self, l: usize) -> Result<Vec<MlpWeights<'a>>> {
        use suffix::{EXPERTS_DOWN, EXPERTS_GATE, EXPERTS_UP};
        let stacks = [EXPERTS_GATE, EXPERTS_UP, EXPERTS_DOWN].map(|s| self.view(&layer_name(l, s)));
        let [gate, up, down] = stacks;
        let (gate, up, down) = (gate?.expert_mats()?, up?.expert_mats()?, down?.expert_mats()?);
        Ok(gate.into_iter().zip(up).zip(down).map(|((gate, up), down)| MlpWeights { gate, up, down }).collect())
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
                    experts: b.experts(l)?,
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
                })
            } else {
                FfnWeights::Dense(b.mlp(l, MLP_GATE, MLP_UP, MLP_DOWN)?)
            };
            let mixer = match spec.kind {
                LayerKind::Attention => Mixer::Attention(b.attention(l)?),
                LayerKind::DeltaNet => Mixer::DeltaNet(b.delta_net(l)?),
            };
            layers.push(LayerWeights { attn_norm: b.get(&n(ATTN_NORM))?, mixer, ffn_norm: b.get(&n(FFN_NORM))?, ffn });
        }
        let embed = b.get(EMBEDDING)?;
        let lm_head = if c.tie_embeddings { embed } else { b.get(LM_HEAD)? };
        Ok(Weights { embed, layers, norm: b.get(FINAL_NORM)?, lm_head })
    }
}
