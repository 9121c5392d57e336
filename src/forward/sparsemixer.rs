//! Phi-MoE's sparsemixer routing as transformers evaluates it (`sparsemixer` in
//! modeling_phimoe.py, eval mode): experts are chosen one after another; for the i-th, the
//! i − 1 already chosen are masked, m is the largest logit left, and every logit s with
//! (m − s) / max(|s|, m) > 2·jitter_eps is masked too. The expert is the one at m (TopK mode)
//! or the largest of the masked logits plus Gumbel noise (Gumbel mode: transformers' training
//! selection); its weight is the softmax of the masked logits at that expert (transformers'
//! `multiplier_o`, without the training-only Heun mask). transformers runs two such steps (its
//! top-2); colibri runs k of them, k the model's or the call's top-k.

use super::router::{Choice, Routes, RoutingMode};
use crate::kernels;

/// Choose experts for each row of `logits` ([rows, n_experts]) and append the rows to `routes`.
pub fn select(logits: &[f32], n_experts: usize, jitter_eps: f64, choice: &mut Choice<'_>, routes: &mut Routes) {
    for l in logits.chunks_exact(n_experts) {
        route(l, jitter_eps, choice, routes);
    }
}

/// Route one token: `l` ([n_experts] router logits) → k experts and weights appended to
/// `routes`, listed by decreasing weight (equal weights in the order chosen).
fn route(l: &[f32], jitter_eps: f64, choice: &mut Choice<'_>, routes: &mut Routes) {
    let threshold = (2.0 * jitter_eps) as f32;
    let at = routes.experts.len();
    // [n_experts] the logits left for this choice, then their softmax
    let mut gates = vec![0f32; l.len()];
    for _ in 0..choice.k {
        let taken = &routes.experts[at..];
        let left = |e: usize| !taken.contains(&(e as u32));
        // m: the largest logit not chosen yet (the first of equals, as torch.max).
        let Some(first) = (0..l.len()).filter(|&e| left(e)).reduce(|a, b| if l[b] > l[a] { b } else { a }) else {
            break;
        };
        let m = l[first];
        for (e, (g, &s)) in gates.iter_mut().zip(l).enumerate() {
            let far = (m - s) / s.abs().max(m) > threshold;
            *g = if !left(e) || far { f32::NEG_INFINITY } else { s };
        }
        let pick = match choice.mode {
            RoutingMode::TopK => first,
            RoutingMode::Gumbel => {
                let mut best = (f32::NEG_INFINITY, first);
                for (e, &g) in gates.iter().enumerate() {
                    let u = choice.rng.next_open01();
                    let key = g + (-(-u.ln()).ln()) as f32;
                    if key > best.0 {
                        best = (key, e);
                    }
                }
                best.1
            }
        };
        kernels::softmax(&mut gates);
        routes.experts.push(pick as u32);
        routes.weights.push(gates[pick]);
    }
    // By decreasing weight, stable.
    let mut order: Vec<(u32, f32)> =
        routes.experts[at..].iter().copied().zip(routes.weights[at..].iter().copied()).collect();
    order.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    for (i, (e, w)) in order.into_iter().enumerate() {
        routes.experts[at + i] = e;
        routes.weights[at + i] = w;
    }
    routes.start.push(routes.experts.len());
}
