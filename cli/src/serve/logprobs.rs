//! Log-probabilities of a step under the model's distribution: log-softmax of the raw logits
//! (before penalties, filters and temperature, as OpenAI reports them) — under a grammar, of the
//! logits it allows (the renormalised distribution sampled from, as llama.cpp reports it).

use super::job::TokenLogprob;

/// The chosen id's log-probability and the `n` most likely (id, logprob), most likely first,
/// ties by id; ids of probability 0 (`logits` entries that are −∞ or NaN: banned, or not allowed
/// by a grammar) are never among them.
pub fn token_logprob(logits: &[f32], chosen: u32, n: usize) -> TokenLogprob {
    let max = logits.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().filter(|x| !x.is_nan()).map(|&x| f64::from(x - max).exp()).sum();
    let log_z = f64::from(max) + sum.ln();
    let lp = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { (f64::from(x) - log_z) as f32 };
    let mut top: Vec<(u32, f32)> = Vec::new();
    if n > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let key = |i: &u32| {
            let v = logits[*i as usize];
            (if v.is_nan() { f32::NEG_INFINITY } else { v }, std::cmp::Reverse(*i))
        };
        let n = n.min(idx.len());
        if n < idx.len() {
            idx.select_nth_unstable_by(n - 1, |a, b| key(b).partial_cmp(&key(a)).unwrap_or(std::cmp::Ordering::Equal));
            idx.truncate(n);
        }
        idx.sort_by(|a, b| key(b).partial_cmp(&key(a)).unwrap_or(std::cmp::Ordering::Equal));
        top = idx.into_iter().map(|i| (i, lp(logits[i as usize]))).filter(|p| p.1.is_finite()).collect();
    }
    TokenLogprob { logprob: logits.get(chosen as usize).map_or(f32::NEG_INFINITY, |&x| lp(x)), top }
}

#[cfg(test)]
mod tests {
    use super::token_logprob;

    #[test]
    fn log_softmax_and_top() {
        let l = [0.0f32, (2.0f32).ln(), f32::NEG_INFINITY, (2.0f32).ln()];
        let t = token_logprob(&l, 1, 3);
        assert!((t.logprob - (0.4f32).ln()).abs() < 1e-6);
        assert_eq!(t.top.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3, 0]);
        assert!((t.top[2].1 - (0.2f32).ln()).abs() < 1e-6);
        assert!(token_logprob(&l, 2, 0).logprob == f32::NEG_INFINITY);
        assert_eq!(token_logprob(&l, 1, 4).top.len(), 3, "the −∞ entry is left out");
    }
}
