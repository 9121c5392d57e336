//! Every bound matrix of a model, in a fixed order: the one walk over `Weights` that tools
//! needing all operands use (the fuzz harness reads every row; byte accounting can sum them),
//! so that a new weights field is added in one place and not in each of them.

use super::weights::{AttnWeights, DeltaInProj, FfnWeights, LayerWeights, MlpWeights, NormWeights, Weights};
use crate::kernels::Mat;

impl<'a> Weights<'a> {
    /// Calls `f` on every bound matrix: embedding, each layer's (norms, attention, output
    /// projection, feed-forward), the final norm, lm_head and its bias. A tied lm_head is
    /// visited again (it is bound twice).
    pub fn visit_mats(&self, f: &mut dyn FnMut(&Mat<'a>)) {
        f(&self.embed);
        for layer in &self.layers {
            layer.visit_mats(f);
        }
        visit_norm(&self.norm, f);
        f(&self.lm_head);
        if let Some(m) = &self.lm_head_bias {
            f(m);
        }
    }
}

impl<'a> LayerWeights<'a> {
    /// Calls `f` on every bound matrix of the layer.
    pub fn visit_mats(&self, f: &mut dyn FnMut(&Mat<'a>)) {
        visit_norm(&self.attn_norm, f);
        match &self.attn {
            AttnWeights::Gqa(a) => {
                for m in [&a.wq, &a.wk, &a.wv] {
                    f(m);
                }
                for m in [&a.bq, &a.bk, &a.bv, &a.q_norm, &a.k_norm, &a.gate].into_iter().flatten() {
                    f(m);
                }
            }
            AttnWeights::Mla(a) => {
                f(&a.q);
                if let Some((qa, qa_norm)) = &a.q_a {
                    f(qa);
                    f(qa_norm);
                }
                f(&a.kv_a);
                f(&a.kv_a_norm);
                for m in a.k_b.iter().chain(&a.v_b) {
                    f(m);
                }
            }
            AttnWeights::DeltaNet(a) => {
                match &a.in_proj {
                    DeltaInProj::Fused(m) => f(m),
                    DeltaInProj::Split { qkv, z } => {
                        f(qkv);
                        f(z);
                    }
                }
                f(&a.in_ba);
            }
        }
        f(&self.wo);
        if let Some(m) = &self.bo {
            f(m);
        }
        visit_norm(&self.ffn_norm, f);
        match &self.ffn {
            FfnWeights::Moe(moe) => {
                f(&moe.router);
                for m in [&moe.shared_gate, &moe.router_bias].into_iter().flatten() {
                    f(m);
                }
                moe.experts.iter().chain(&moe.shared).for_each(|mlp| visit_mlp(mlp, f));
            }
            FfnWeights::Dense(mlp) => visit_mlp(mlp, f),
        }
    }
}

fn visit_norm<'a>(n: &NormWeights<'a>, f: &mut dyn FnMut(&Mat<'a>)) {
    f(&n.weight);
    if let Some(m) = &n.bias {
        f(m);
    }
}

/// The three projections; the bias tensors of GPT-OSS's experts are shared by all experts of
/// the layer, so they are visited with each expert (row `bias.row` is that expert's).
fn visit_mlp<'a>(mlp: &MlpWeights<'a>, f: &mut dyn FnMut(&Mat<'a>)) {
    for m in [&mlp.gate, &mlp.up, &mlp.down] {
        f(m);
    }
    if let Some(b) = &mlp.bias {
        for m in [&b.gate, &b.up, &b.down] {
            f(m);
        }
    }
}
