//! Scoring of logit rows, all in f64: log-softmax, the negative log-likelihood of the next token,
//! KL(base || model) of two rows, argmax, and running means with llama-perplexity's standard
//! error.

/// Log-softmax of one logit row ([vocab]) into `out` ([vocab]).
pub fn log_softmax(row: &[f32], out: &mut Vec<f64>) {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    let lse = max + sum.ln();
    out.clear();
    out.extend(row.iter().map(|&x| x as f64 - lse));
}

/// KL(p || q) = Σ p·(log p − log q) of two log-probability rows (p: the base model).
pub fn kl(log_p: &[f64], log_q: &[f64]) -> f64 {
    log_p.iter().zip(log_q).map(|(&lp, &lq)| if lp == f64::NEG_INFINITY { 0.0 } else { lp.exp() * (lp - lq) }).sum()
}

/// Index of the largest value (the first of equal maxima).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

/// Running mean of a per-token quantity with llama-perplexity's standard error of the mean:
/// sqrt((E[x²] − E[x]²) / (n − 1)).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mean {
    n: u64,
    sum: f64,
    sum2: f64,
}

impl Mean {
    pub fn add(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.sum2 += x * x;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }

    /// Standard error of the mean (0 for fewer than two values or a negative rounding residue).
    pub fn stderr(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let m = self.mean();
        let var = self.sum2 / self.n as f64 - m * m;
        if var > 0.0 {
            (var / (self.n - 1) as f64).sqrt()
        } else {
            0.0
        }
    }

    /// exp(mean) and its error exp(mean)·stderr, for a mean negative log-likelihood.
    pub fn perplexity(&self) -> (f64, f64) {
        let ppl = self.mean().exp();
        (ppl, ppl * self.stderr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_of_a_uniform_row_is_minus_log_n_and_kl_of_equal_rows_is_zero() {
        let mut lp = Vec::new();
        log_softmax(&[3.0; 8], &mut lp);
        assert!(lp.iter().all(|&x| (x + (8f64).ln()).abs() < 1e-12));
        assert_eq!(kl(&lp, &lp), 0.0);
        let mut lq = Vec::new();
        log_softmax(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &mut lq);
        assert!(kl(&lp, &lq) > 0.0);
    }

    #[test]
    fn mean_and_stderr_match_hand_values() {
        let mut m = Mean::default();
        [1.0, 2.0, 3.0, 4.0].iter().for_each(|&x| m.add(x));
        assert_eq!(m.mean(), 2.5);
        // population variance 1.25, / (n − 1) = 5/12
        assert!((m.stderr() - (1.25f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(argmax(&[0.5, 2.0, 2.0, -1.0]), 1);
    }
}
