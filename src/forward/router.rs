//! The MoE router: gate logits → softmax → top-k (deterministic, or Gumbel-perturbed selection)
//! → combination weights by the family's rule (renormalised over the chosen experts when
//! `norm_topk_prob`, else the full-softmax probabilities). Mirrors `MixtralTopKRouter` /
//! `Qwen2MoeTopKRouter`.

use crate::error::{Error, Result};
use crate::kernels::{self, Mat};
use crate::rng::Rng;

/// How experts are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RoutingMode {
    /// The k largest router probabilities (ties to the lowest expert index). The reference.
    #[default]
    TopK,
    /// The k largest of logit + Gumbel noise −log(−log u), u from the session's seeded RNG.
    /// Only the choice is perturbed; the weights come from the un-noised logits.
    Gumbel,
}

/// Per-call routing options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoutingOptions {
    pub mode: RoutingMode,
    /// Experts per token for this call (1..=n_experts); None = the model's top_k.
    pub top_k: Option<usize>,
}

/// Routing of n tokens: k experts each, ordered by decreasing weight.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Routes {
    pub k: usize,
    /// [n, k] expert ids
    pub experts: Vec<u32>,
    /// [n, k] combination weights
    pub weights: Vec<f32>,
}

/// The k to use, validated against the model.
pub fn effective_top_k(opts: &RoutingOptions, n_experts: usize, model_top_k: usize) -> Result<usize> {
    match opts.top_k {
        None => Ok(model_top_k),
        Some(k) if (1..=n_experts).contains(&k) => Ok(k),
        Some(k) => Err(Error::InvalidArgument { reason: format!("top-k override {k} outside 1..={n_experts}") }),
    }
}

/// Choose experts for the n rows of `xn` ([n, hidden]) with router `w` ([n_experts, hidden]).
#[allow(clippy::too_many_arguments)]
pub fn route(
    w: Mat<'_>,
    n_experts: usize,
    hidden: usize,
    xn: &[f32],
    n: usize,
    k: usize,
    renormalise: bool,
    mode: RoutingMode,
    rng: &mut Rng,
) -> Routes {
    let mut logits = vec![0f32; n * n_experts];
    kernels::matmul(w, n_experts, hidden, xn, n, &mut logits);
    let mut routes = Routes { k, experts: Vec::with_capacity(n * k), weights: Vec::with_capacity(n * k) };
    let mut order: Vec<usize> = Vec::with_capacity(n_experts);
    let mut keys = vec![0f32; n_experts];
    for t in 0..n {
        let l = &logits[t * n_experts..(t + 1) * n_experts];
        let mut probs = l.to_vec();
        kernels::softmax(&mut probs);
        match mode {
            RoutingMode::TopK => keys.copy_from_slice(&probs),
            RoutingMode::Gumbel => {
                for (key, &li) in keys.iter_mut().zip(l) {
                    let u = rng.next_open01();
                    *key = li + (-(-u.ln()).ln()) as f32;
                }
            }
        }
        order.clear();
        order.extend(0..n_experts);
        // Largest key first; equal keys keep the lower index first (stable sort).
        order.sort_by(|&a, &b| keys[b].partial_cmp(&keys[a]).unwrap_or(std::cmp::Ordering::Equal));
        let chosen = &order[..k];
        if renormalise {
            // Softmax over the chosen logits, max taken over the chosen ones.
            let m = chosen.iter().map(|&e| l[e]).fold(f32::NEG_INFINITY, f32::max);
            let ex: Vec<f32> = chosen.iter().map(|&e| (l[e] - m).exp()).collect();
            let s: f32 = ex.iter().sum();
            routes.weights.extend(ex.iter().map(|v| v / s));
        } else {
            routes.weights.extend(chosen.iter().map(|&e| probs[e]));
        }
        routes.experts.extend(chosen.iter().map(|&e| e as u32));
    }
    routes
}
