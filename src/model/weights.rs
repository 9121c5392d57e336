//! Weights: zero-copy views bound by name, one struct per block, shapes as in `names`.

use super::config::Config;
use super::names::{layer_name, suffix, EMBEDDING, FINAL_NORM, LM_HEAD};
use crate::error::{Error, Result};
use crate::format::ParsedFile;
use crate::tensor::TensorView;

/// A gated (SwiGLU) MLP: down(silu(gate·x) ⊙ up·x).
#[derive(Clone, Debug)]
pub struct MlpWeights<'a> {
    /// [ffn, hidden]
    pub gate: TensorView<'a>,
    /// [ffn, hidden]
    pub up: TensorView<'a>,
    /// [hidden, ffn]
    pub down: TensorView<'a>,
}

/// A MoE block.
#[derive(Clone, Debug)]
pub struct MoeWeights<'a> {
    /// [n_experts, hidden]
    pub router: TensorView<'a>,
    /// Stacks [n_experts, expert_ffn, hidden], [n_experts, expert_ffn, hidden], [n_experts, hidden, expert_ffn].
    pub gate: TensorView<'a>,
    pub up: TensorView<'a>,
    pub down: TensorView<'a>,
    /// Shared expert (Qwen2-MoE).
    pub shared: Option<MlpWeights<'a>>,
    /// [1, hidden]: the shared expert's sigmoid gate.
    pub shared_gate: Option<TensorView<'a>>,
}

/// The feed-forward part of a layer.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // built once per model; no hot-path copies
pub enum FfnWeights<'a> {
    Moe(MoeWeights<'a>),
    Dense(MlpWeights<'a>),
}

/// One decoder layer.
#[derive(Clone, Debug)]
pub struct LayerWeights<'a> {
    /// [hidden]
    pub attn_norm: TensorView<'a>,
    /// [n_heads·head_dim, hidden], [n_kv_heads·head_dim, hidden] ×2, [hidden, n_heads·head_dim]
    pub wq: TensorView<'a>,
    pub wk: TensorView<'a>,
    pub wv: TensorView<'a>,
    pub wo: TensorView<'a>,
    /// q/k/v biases (Qwen2-MoE).
    pub bq: Option<TensorView<'a>>,
    pub bk: Option<TensorView<'a>>,
    pub bv: Option<TensorView<'a>>,
    /// q/k RMSNorm weights: [head_dim] per head, or the full projection width.
    pub q_norm: Option<TensorView<'a>>,
    pub k_norm: Option<TensorView<'a>>,
    /// [hidden]
    pub ffn_norm: TensorView<'a>,
    pub ffn: FfnWeights<'a>,
}

/// All weights of a model.
#[derive(Clone, Debug)]
pub struct Weights<'a> {
    /// [vocab, hidden]
    pub embed: TensorView<'a>,
    pub layers: Vec<LayerWeights<'a>>,
    /// [hidden]
    pub norm: TensorView<'a>,
    /// [vocab, hidden]; the embedding when tied.
    pub lm_head: TensorView<'a>,
}

struct Binder<'a> {
    parsed: &'a ParsedFile,
    file: &'a [u8],
}

impl<'a> Binder<'a> {
    fn get(&self, name: &str) -> Result<TensorView<'a>> {
        let rec = self.parsed.tensor(name).ok_or_else(|| Error::MissingTensor { name: name.to_string() })?;
        Ok(TensorView::new(rec, self.file))
    }

    fn opt(&self, name: &str) -> Option<TensorView<'a>> {
        self.parsed.tensor(name).map(|rec| TensorView::new(rec, self.file))
    }

    fn mlp(&self, l: usize, g: &str, u: &str, d: &str) -> Result<MlpWeights<'a>> {
        Ok(MlpWeights {
            gate: self.get(&layer_name(l, g))?,
            up: self.get(&layer_name(l, u))?,
            down: self.get(&layer_name(l, d))?,
        })
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
                    gate: b.get(&n(EXPERTS_GATE))?,
                    up: b.get(&n(EXPERTS_UP))?,
                    down: b.get(&n(EXPERTS_DOWN))?,
                    shared: if c.moe.shared_expert_ffn > 0 {
                        Some(b.mlp(l, SHARED_GATE_PROJ, SHARED_UP, SHARED_DOWN)?)
                    } else {
                        None
                    },
                    shared_gate: b.opt(&n(SHARED_EXPERT_GATE)),
                })
            } else {
                FfnWeights::Dense(b.mlp(l, MLP_GATE, MLP_UP, MLP_DOWN)?)
            };
            layers.push(LayerWeights {
                attn_norm: b.get(&n(ATTN_NORM))?,
                wq: b.get(&n(Q))?,
                wk: b.get(&n(K))?,
                wv: b.get(&n(V))?,
                wo: b.get(&n(O))?,
                bq: b.opt(&n(Q_BIAS)),
                bk: b.opt(&n(K_BIAS)),
                bv: b.opt(&n(V_BIAS)),
                q_norm: b.opt(&n(Q_NORM)),
                k_norm: b.opt(&n(K_NORM)),
                ffn_norm: b.get(&n(FFN_NORM))?,
                ffn,
            });
        }
        let embed = b.get(EMBEDDING)?;
        let lm_head = if c.tie_embeddings { embed } else { b.get(LM_HEAD)? };
        Ok(Weights { embed, layers, norm: b.get(FINAL_NORM)?, lm_head })
    }
}
