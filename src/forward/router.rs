//! The MoE router: gate logits → scores (softmax over all experts, or a sigmoid per expert) →
//! top-k (deterministic, or Gumbel-perturbed selection; optionally with a per-expert choice bias
//! and limited to the best expert groups) → combination weights by the family's rule
//! (renormalised over the chosen experts when `norm_topk_prob`, else the scores themselves; then
//! × routed_scaling). Mirrors `MixtralTopKRouter` / `Qwen2MoeTopKRouter` / `Glm4MoeTopkRouter`
//! (= DeepSeek-V3's) / `DeepseekV2TopkRouter` / `Llama4Router` (the k largest logits, each
//! weighted by its sigmoid); Phi-MoE's sparsemixer lives in `sparsemixer`.

use crate::error::{Error, Result};
use crate::kernels::{self, Kernels, Mat};
use crate::model::{ExpertGroups, GroupScore, Scoring};
use crate::rng::Rng;

/// How experts are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RoutingMode {
    /// The k largest router probabilities (ties to the lowest expert index). The reference.
    #[default]
    TopK,
    /// The k largest of logit + Gumbel noise −log(−log u), u from the session's seeded RNG
    /// (one draw per expert and token, in expert order). Only the choice is perturbed; the
    /// weights come from the un-noised logits by the family's rule. Routers that take the
    /// softmax over the chosen logits (Mixtral, Granite, GPT-OSS — whose logits include its
    /// router bias): weights = softmax over the k chosen un-noised logits. With sigmoid scoring
    /// the noise is added to the logit before the sigmoid, and the choice bias and the group
    /// scores are computed from those perturbed scores. With softmax scoring and a choice bias
    /// (ERNIE-4.5, whose bias is added to the probabilities) the keys are the softmax of the
    /// perturbed logits plus the bias. Llama-4's sigmoid-of-top-k router chooses the k largest
    /// perturbed logits and weighs them by the sigmoid of their un-noised logits.
    /// With sparsemixer routing (Phi-MoE) each of its steps picks the largest jitter-masked
    /// logit + noise, as transformers' training mode samples, and weighs it by the un-noised
    /// masked softmax.
    Gumbel,
}

/// Per-call routing options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoutingOptions {
    pub mode: RoutingMode,
    /// Experts per token for this call (1..=n_experts); None = the model's top_k. The family's
    /// rule applies to the k chosen: routers with the softmax over the chosen logits weigh
    /// them by the softmax over those k (k = 1 gives weight 1).
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

/// The model's routing rule (from `MoeConfig` and the layer's choice bias).
#[derive(Clone, Copy, Debug)]
pub struct Rule<'b> {
    /// Renormalise the weights over the chosen experts (else the scores themselves).
    pub renormalise: bool,
    pub scoring: Scoring,
    /// [n_experts] added to the scores for choosing only.
    pub bias: Option<&'b [f32]>,
    pub groups: Option<ExpertGroups>,
    /// Weights × this.
    pub scale: f32,
}

/// How one sequence chooses its experts.
pub struct Choice<'r> {
    pub k: usize,
    pub mode: RoutingMode,
    /// The sequence's RNG (Gumbel noise).
    pub rng: &'r mut Rng,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Keep only the experts of the `topk_group` best groups (others get −∞): groups scored by
/// the sum of their two best `keys` (`Glm4MoeTopkRouter`, `DeepseekV3TopkRouter`) or by their
/// best key (`DeepseekV2TopkRouter`'s group_limited_greedy).
fn limit_to_groups(keys: &mut [f32], g: ExpertGroups) {
    let per = keys.len() / g.n_group;
    let mut group_score: Vec<(f32, usize)> = keys
        .chunks_exact(per)
        .enumerate()
        .map(|(i, ks)| {
            let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for &x in ks {
                if x > a {
                    (a, b) = (x, a);
                } else if x > b {
                    b = x;
                }
            }
            match g.score {
                GroupScore::Top2Sum => (a + b, i),
                GroupScore::Max => (a, i),
            }
        })
        .collect();
    group_score.sort_by(|x, y| y.0.partial_cmp(&x.0).unwrap_or(std::cmp::Ordering::Equal));
    for &(_, i) in &group_score[g.topk_group..] {
        keys[i * per..(i + 1) * per].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
    }
}

/// Choose experts for each row of `logits` ([rows, n_experts]) and append the rows to `routes`.
pub fn select(logits: &[f32], n_experts: usize, rule: &Rule<'_>, choice: &mut Choice<'_>, routes: &mut Routes) {
    let k = choice.k;
    let mut order: Vec<usize> = Vec::with_capacity(n_experts);
    let mut keys = vec![0f32; n_experts];
    let mut scores = vec![0f32; n_experts];
    for l in logits.chunks_exact(n_experts) {
        scores.copy_from_slice(l);
        match rule.scoring {
            Scoring::Softmax => kernels::softmax(&mut scores),
            Scoring::Sigmoid => scores.iter_mut().for_each(|x| *x = sigmoid(*x)),
            // Llama-4 chooses by the logits themselves (the sigmoid of the chosen is their weight).
            // Not routed here: `Step::moe` sends sparsemixer layers to `sparsemixer::select`.
            Scoring::SigmoidOfTopK | Scoring::SparseMixer { .. } => {}
        }
        match choice.mode {
            RoutingMode::TopK => keys.copy_from_slice(&scores),
            RoutingMode::Gumbel => {
                for (key, &li) in keys.iter_mut().zip(l) {
                    let u = choice.rng.next_open01();
                    let noisy = li + (-(-u.ln()).ln()) as f32;
                    *key = if rule.scoring == Scoring::Sigmoid { sigmoid(noisy) } else { noisy };
                }
                if rule.scoring == Scoring::Softmax && rule.bias.is_some() {
                    kernels::softmax(&mut keys);
                }
            }
        }
        if let Some(b) = rule.bias {
            keys.iter_mut().zip(b).for_each(|(key, b)| *key += b);
        }
        if let Some(g) = rule.groups {
            limit_to_groups(&mut keys, g);
        }
        order.clear();
        order.extend(0..n_experts);
        // Largest key first; equal keys keep the lower index first (stable sort).
        order.sort_by(|&a, &b| keys[b].partial_cmp(&keys[a]).unwrap_or(std::cmp::Ordering::Equal));
        let chosen = &mut order[..k];
        let at = routes.weights.len();
        if rule.scoring == Scoring::Softmax && rule.renormalise {
            if choice.mode == RoutingMode::Gumbel || rule.bias.is_some() {
                // Chosen by noisy or biased keys: list them by their weights (the plain logits).
                chosen.sort_by(|&a, &b| l[b].partial_cmp(&l[a]).unwrap_or(std::cmp::Ordering::Equal));
            }
            // Softmax over the chosen logits, max taken over the chosen ones.
            let m = chosen.iter().map(|&e| l[e]).fold(f32::NEG_INFINITY, f32::max);
            routes.weights.extend(chosen.iter().map(|&e| (l[e] - m).exp()));
            let s: f32 = routes.weights[at..].iter().sum();
            routes.weights[at..].iter_mut().for_each(|v| *v /= s);
        } else {
            let of_top_k = rule.scoring == Scoring::SigmoidOfTopK;
            if rule.bias.is_some() || (of_top_k && choice.mode == RoutingMode::Gumbel) {
                // Chosen by biased or noisy keys: list them by their weights (the plain scores).
                chosen.sort_by(|&a, &b| scores[b].partial_cmp(&scores[a]).unwrap_or(std::cmp::Ordering::Equal));
            }
            routes.weights.extend(chosen.iter().map(|&e| if of_top_k { sigmoid(scores[e]) } else { scores[e] }));
            if rule.renormalise {
                let s: f32 = routes.weights[at..].iter().sum::<f32>() + 1e-20;
                routes.weights[at..].iter_mut().for_each(|v| *v /= s);
            }
        }
        if rule.scale != 1.0 {
            routes.weights[at..].iter_mut().for_each(|v| *v *= rule.scale);
        }
        routes.experts.extend(chosen.iter().map(|&e| e as u32));
        routes.start.push(routes.experts.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Route one row of sigmoid-free keys (softmax over these logits) with groups scored `score`.
    fn chosen(logits: &[f32], score: GroupScore) -> Vec<u32> {
        let rule = Rule {
            renormalise: false,
            scoring: Scoring::Softmax,
            bias: None,
            groups: Some(ExpertGroups { n_group: 2, topk_group: 1, score }),
            scale: 1.0,
        };
        let mut rng = Rng::new(0);
        let mut choice = Choice { k: 2, mode: RoutingMode::TopK, rng: &mut rng };
        let mut routes = Routes::default();
        select(logits, logits.len(), &rule, &mut choice, &mut routes);
        routes.row(0).0.to_vec()
    }

    #[test]
    fn groups_are_scored_by_their_best_or_by_their_two_best() {
        // Group 0 holds the single best expert (3.0) but little else; group 1 two good ones.
        let logits = [3.0, -2.0, -2.0, 2.6, 2.6, -2.0];
        // DeepSeek-V2 group_limited_greedy: the group with the best expert wins.
        assert_eq!(chosen(&logits, GroupScore::Max), [0, 1]);
        // DeepSeek-V3 / GLM-4.5: the group whose two best sum highest wins.
        assert_eq!(chosen(&logits, GroupScore::Top2Sum), [3, 4]);
    }

    fn route(logits: &[f32], k: usize, mode: RoutingMode, seed: u64) -> Routes {
        let rule = Rule { renormalise: true, scoring: Scoring::Softmax, bias: None, groups: None, scale: 1.0 };
        let mut rng = Rng::new(seed);
        let mut routes = Routes::default();
        select(logits, logits.len(), &rule, &mut Choice { k, mode, rng: &mut rng }, &mut routes);
        routes
    }

    /// True when `w` is the softmax over the chosen logits (to f32 rounding).
    fn is_softmax_of(w: &[f32], chosen: &[u32], logits: &[f32]) -> bool {
        let m = chosen.iter().map(|&e| f64::from(logits[e as usize])).fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = chosen.iter().map(|&e| (f64::from(logits[e as usize]) - m).exp()).sum();
        let want = chosen.iter().map(|&e| (f64::from(logits[e as usize]) - m).exp() / z);
        w.len() == chosen.len() && w.iter().zip(want).all(|(&a, b)| (f64::from(a) - b).abs() < 1e-6)
    }

    /// Routers with the softmax over the chosen logits (GPT-OSS, Granite, Mixtral): any per-call
    /// k chooses the k largest logits and weighs them by the softmax over those k; Gumbel chooses
    /// by logit + noise (the RNG's draws in expert order) with the same weights.
    #[test]
    fn softmax_over_chosen_routers_define_per_call_k_and_gumbel() {
        let logits = [0.3f32, 2.0, -1.0, 1.2, 0.9, -0.4];
        for k in 1..=logits.len() {
            let r = route(&logits, k, RoutingMode::TopK, 0);
            let mut order: Vec<u32> = (0..logits.len() as u32).collect();
            order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
            assert_eq!(r.experts, order[..k], "k {k}");
            assert!(is_softmax_of(&r.weights, &r.experts, &logits), "k {k}: {:?}", r.weights);
        }
        let top2 = route(&logits, 2, RoutingMode::TopK, 0).experts;
        let mut differs = 0;
        for seed in 1..20 {
            let r = route(&logits, 2, RoutingMode::Gumbel, seed);
            differs += usize::from(r.experts != top2);
            let mut rng = Rng::new(seed);
            let keys: Vec<f64> = logits.iter().map(|&l| f64::from(l) - (-rng.next_open01().ln()).ln()).collect();
            let mut order: Vec<u32> = (0..logits.len() as u32).collect();
            order.sort_by(|&a, &b| keys[b as usize].total_cmp(&keys[a as usize]));
            let mut chosen = r.experts.clone();
            chosen.sort_by(|&a, &b| keys[b as usize].total_cmp(&keys[a as usize]));
            assert_eq!(chosen, order[..2], "seed {seed}");
            assert!(is_softmax_of(&r.weights, &r.experts, &logits), "seed {seed}: {:?}", r.weights);
            assert!(r.weights[0] >= r.weights[1], "seed {seed}: listed by decreasing weight");
        }
        assert!(differs > 0, "the noise never changed the choice");
    }

    /// ERNIE-4.5's router: the choice bias is added to the softmax probabilities for choosing
    /// only; the chosen are weighed by their renormalised probabilities and listed by weight.
    #[test]
    fn a_choice_bias_on_softmax_probabilities_changes_the_choice_not_the_weights() {
        let logits = [2.0f32, 1.0, 0.6, -1.0];
        // p ≈ [0.61, 0.22, 0.15, 0.03]: the bias lifts expert 2 over expert 1 and expert 3
        // over both, while expert 0 stays first by weight.
        let bias = [0.0f32, 0.0, 0.1, 0.3];
        let rule = Rule { renormalise: true, scoring: Scoring::Softmax, bias: Some(&bias), groups: None, scale: 1.0 };
        let mut rng = Rng::new(0);
        let mut routes = Routes::default();
        select(&logits, 4, &rule, &mut Choice { k: 2, mode: RoutingMode::TopK, rng: &mut rng }, &mut routes);
        assert_eq!(routes.experts, [0, 3]);
        assert!(is_softmax_of(&routes.weights, &routes.experts, &logits), "{:?}", routes.weights);
        // Chosen by biased key (3 first) yet listed by weight.
        let bias = [0.0f32, 0.0, 0.0, 0.9];
        let rule = Rule { bias: Some(&bias), ..rule };
        let mut routes = Routes::default();
        select(&logits, 4, &rule, &mut Choice { k: 2, mode: RoutingMode::TopK, rng: &mut rng }, &mut routes);
        assert_eq!(routes.experts, [0, 3]);
        assert!(routes.weights[0] > routes.weights[1]);
    }

    /// Llama-4's router: any per-call k chooses the k largest logits, each weighted by the sigmoid
    /// of its own logit (not renormalised) and listed by weight; Gumbel chooses by logit + noise
    /// (the RNG's draws in expert order) and keeps those weights.
    #[test]
    fn sigmoid_of_top_k_weighs_the_chosen_logits_by_their_own_sigmoid() {
        let logits = [0.3f32, 2.0, -1.0, 1.2, 0.9, -0.4];
        let rule = Rule { renormalise: false, scoring: Scoring::SigmoidOfTopK, bias: None, groups: None, scale: 1.0 };
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let own_sigmoid =
            |r: &Routes| r.experts.iter().zip(&r.weights).all(|(&e, &w)| w == sigmoid(logits[e as usize]));
        for k in 1..=logits.len() {
            let mut rng = Rng::new(0);
            let mut r = Routes::default();
            select(&logits, logits.len(), &rule, &mut Choice { k, mode: RoutingMode::TopK, rng: &mut rng }, &mut r);
            assert_eq!(r.experts, order[..k], "k {k}");
            assert!(own_sigmoid(&r), "k {k}: {:?}", r.weights);
        }
        let mut differs = 0;
        for seed in 1..20 {
            let mut rng = Rng::new(seed);
            let mut r = Routes::default();
            select(
                &logits,
                logits.len(),
                &rule,
                &mut Choice { k: 2, mode: RoutingMode::Gumbel, rng: &mut rng },
                &mut r,
            );
            let mut rng = Rng::new(seed);
            let keys: Vec<f64> = logits.iter().map(|&l| f64::from(l) - (-rng.next_open01().ln()).ln()).collect();
            let mut by_key: Vec<u32> = (0..logits.len() as u32).collect();
            by_key.sort_by(|&a, &b| keys[b as usize].total_cmp(&keys[a as usize]));
            let mut chosen = r.experts.clone();
            chosen.sort_by(|&a, &b| keys[b as usize].total_cmp(&keys[a as usize]));
            assert_eq!(chosen, by_key[..2], "seed {seed}");
            assert!(own_sigmoid(&r) && r.weights[0] >= r.weights[1], "seed {seed}: {:?}", r.weights);
            differs += usize::from(r.experts != order[..2]);
        }
        assert!(differs > 0, "the noise never changed the choice");
    }
}
