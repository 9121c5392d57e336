//! Weights: every tensor the config implies, bound once (when the model is opened) as a typed,
//! checked kernel operand borrowed from the mapping — one struct per block, shapes as in
//! `names`. The forward pass sees only bound matrices: a missing or malformed tensor is an error
//! at open, never a silent zero at run time.

use super::config::Config;
use super::names::{layer_name, suffix, EMBEDDING, FINAL_NORM, FINAL_NORM_BIAS, LM_HEAD, LM_HEAD_BIAS};
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
    pub attn_norm: NormWeights<'a>,
    /// [n_heads·head_dim, hidden], [n_kv_heads·head_dim, hidden] ×2, [hidden, n_heads·head_dim]
    pub wq: Mat<'a>,
    pub wk: Mat<'a>,
    pub wv: Mat<'a>,
    pub wo: Mat<'a>,
    /// q/k/v biases (Qwen2-MoE).
    pub bq: Option<Mat<'a>>,
    pub bk: Option<Mat<'a>>,
    pub bv: Option<Mat<'a>>,
    /// [hidden] output projection bias (Phi-MoE).
    pub bo: Option<Mat<'a>>,
    /// q/k RMSNorm weights: [head_dim] per head, or the full projection width.
    pub q_norm: Option<Mat<'a>>,
    pub k_norm: Option<Mat<'a>>,
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

    fn norm(&self, weight: &str, bias: &str) -> Result<NormWeights<'a>> {
        Ok(NormWeights { weight: self.get(weight)?, bias: self.opt(bias)? })
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
            layers.push(LayerWeights {
                attn_norm: b.norm(&n(ATTN_NORM), &n(ATTN_NORM_BIAS))?,
                wq: b.get(&n(Q))?,
                wk: b.get(&n(K))?,
                wv: b.get(&n(V))?,
                wo: b.get(&n(O))?,
                bq: b.opt(&n(Q_BIAS))?,
                bk: b.opt(&n(K_BIAS))?,
                bv: b.opt(&n(V_BIAS))?,
                bo: b.opt(&n(O_BIAS))?,
                q_norm: b.opt(&n(Q_NORM))?,
                k_norm: b.opt(&n(K_NORM))?,
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
