//! The MoE router: gate logits → softmax → top-k (deterministic, or Gumbel-perturbed selection)
//! → combination weights by the family's rule (renormalised over the chosen experts when
//! `norm_topk_prob`, else the full-softmax probabilities). Mirrors `MixtralTopKRouter` /
//! `Qwen2MoeTopKRouter`.

use crate::error::{Error, Result};
use crate::kernels::{self, Kernels, Mat};
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

/// Routing of n tokens, ordered by decreasing weight within a token. Rows may choose different
/// numbers of experts (the sequences of one batch can each ask for their own top-k).
#[derive(Clone, Debug, PartialEq)]
pub struct Routes {
    /// [n + 1] row t's choices are `experts[start[t]..start[t + 1]]` (and the same weights).
    pub start: Vec<usize>,
    /// [Σ k_t] expert ids
    pub experts: Vec<u32>,
    /// [Σ k_t] combination weights
    pub weights: Vec<f32>,
}

impl Default for Routes {
    fn default() -> Routes {
        Routes { start: vec![0], experts: Vec::new(), weights: Vec::new() }
    }
}

impl Routes {
    /// Forget every row (the buffers stay allocated).
    pub fn clear(&mut self) {
        self.start.truncate(1);
        self.experts.clear();
        self.weights.clear();
    }

    /// Number of routed rows.
    pub fn rows(&self) -> usize {
        self.start.len() - 1
    }

    /// The experts and weights of row `t`.
    pub fn row(&self, t: usize) -> (&[u32], &[f32]) {
        let r = self.start[t]..self.start[t + 1];
        (&self.experts[r.clone()], &self.weights[r])
    }
}

/// The k to use, validated against the model.
pub fn effective_top_k(opts: &RoutingOptions, n_experts: usize, model_top_k: usize) -> Result<usize> {
    match opts.top_k {
        None => Ok(model_top_k),
        Some(k) if (1..=n_experts).contains(&k) => Ok(k),
        Some(k) => Err(Error::InvalidArgument { reason: format!("top-k override {k} outside 1..={n_experts}") }),
    }
}

/// Router logits `out` ([n, n_experts]) of the n rows of `xn` ([n, hidden]) with router `w`
/// ([n_experts, hidden]).
pub fn logits(k: &Kernels, w: Mat<'_>, xn: &[f32], n: usize, out: &mut Vec<f32>) {
    out.resize(n * w.rows(), 0.0);
    k.matmul(w, xn, n, out);
}

/// How one sequence chooses its experts.
pub struct Choice<'r> {
    pub k: usize,
    /// Renormalise the weights over the chosen experts (else the full-softmax probabilities).
    pub renormalise: bool,
    pub mode: RoutingMode,
    /// The sequence's RNG (Gumbel noise).
    pub rng: &'r mut Rng,
}

/// Choose experts for each row of `logits` ([rows, n_experts]) and append the rows to `routes`.
pub fn select(logits: &[f32], n_experts: usize, choice: &mut Choice<'_>, routes: &mut Routes) {
    let k = choice.k;
    let mut order: Vec<usize> = Vec::with_capacity(n_experts);
    let mut keys = vec![0f32; n_experts];
    let mut probs = vec![0f32; n_experts];
    for l in logits.chunks_exact(n_experts) {
        probs.copy_from_slice(l);
        kernels::softmax(&mut probs);
        match choice.mode {
            RoutingMode::TopK => keys.copy_from_slice(&probs),
            RoutingMode::Gumbel => {
                for (key, &li) in keys.iter_mut().zip(l) {
                    let u = choice.rng.next_open01();
                    *key = li + (-(-u.ln()).ln()) as f32;
                }
            }
        }
        order.clear();
        order.extend(0..n_experts);
        // Largest key first; equal keys keep the lower index first (stable sort).
        order.sort_by(|&a, &b| keys[b].partial_cmp(&keys[a]).unwrap_or(std::cmp::Ordering::Equal));
        let chosen = &order[..k];
        if choice.renormalise {
            // Softmax over the chosen logits, max taken over the chosen ones.
            let m = chosen.iter().map(|&e| l[e]).fold(f32::NEG_INFINITY, f32::max);
            let at = routes.weights.len();
            routes.weights.extend(chosen.iter().map(|&e| (l[e] - m).exp()));
            let s: f32 = routes.weights[at..].iter().sum();
            routes.weights[at..].iter_mut().for_each(|v| *v /= s);
        } else {
            routes.weights.extend(chosen.iter().map(|&e| probs[e]));
        }
        routes.experts.extend(chosen.iter().map(|&e| e as u32));
        routes.start.push(routes.experts.len());
    }
}
