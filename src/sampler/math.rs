//! Vector math of the sampler on plain `f32` slices: the branch-free `exp` behind the softmax
//! weights, the whole-vocabulary weight pass, NaN-ignoring max / argmax and the `f64` sum. Knows
//! nothing of candidates or parameters.

/// Lanes of the reductions below (and of the chunked scans elsewhere in the sampler): independent
/// accumulators let them vectorise, and their fixed combination order keeps results deterministic.
pub(super) const LANES: usize = 8;

/// `e^x` for `x <= 0` (or −∞), as weights need it: Cephes `expf` (range reduction by ln 2 in two
/// parts, degree-6 polynomial), relative error below 3e-7 on [−87, 0], exactly 1 at 0, and 0 below
/// −87 (where `f32` results would be subnormal), 0 for NaN. Branch-free, so the weight loop over a
/// whole vocabulary vectorises (`f32::exp` is a libm call per element).
pub(super) fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5 · 2^23 rounds to an integer, readable in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.0, 0.0);
    // k = round(x / ln 2) in [-126, 0].
    let z = xc * std::f32::consts::LOG2_E + ROUND;
    let k = (z.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let kf = z - ROUND;
    let r = xc - kf * LN2_HI - kf * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    let scale = f32::from_bits((k.wrapping_add(127) as u32) << 23);
    // Written so that NaN also gives 0.
    if x >= -87.0 {
        y * scale
    } else {
        0.0
    }
}

/// Softmax weight of `logit` given the step's maximum and 1/T: `exp((logit − max) / T)`, so the
/// maximum weighs exactly 1; NaN and −∞ weigh 0. When `max` is +∞ the +∞ logits weigh 1 and all
/// others 0 (they share all the mass).
pub(super) fn weight(logit: f32, max: f32, inv_t: f32) -> f32 {
    if max == f32::INFINITY {
        return if logit == f32::INFINITY { 1.0 } else { 0.0 };
    }
    exp_nonpositive((logit - max) * inv_t)
}

/// Steps 5–6 over the whole vocabulary: `weights` [vocab] ← [`weight`] of every logit against the
/// NaN-ignoring maximum of `logits` [vocab], with `inv_t` = 1/T.
pub(super) fn weigh_vocabulary(logits: &[f32], inv_t: f32, weights: &mut Vec<f32>) {
    let max = max_ignoring_nan(logits);
    weights.resize(logits.len(), 0.0);
    if max == f32::INFINITY {
        weights.iter_mut().zip(logits.iter()).for_each(|(w, &l)| *w = weight(l, max, inv_t));
    } else {
        // The common case, kept free of branches so that it vectorises.
        weights.iter_mut().zip(logits.iter()).for_each(|(w, &l)| *w = exp_nonpositive((l - max) * inv_t));
    }
}

/// The largest value that is not NaN (−∞ if there is none).
fn max_ignoring_nan(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    tail.iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Sum in `f64`.
pub(super) fn sum_f64(x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (s, &v) in lanes.iter_mut().zip(chunk) {
            *s += f64::from(v);
        }
    }
    lanes.iter().sum::<f64>() + tail.iter().map(|&v| f64::from(v)).sum::<f64>()
}

/// Index of the largest value, ties to the lowest index; NaN never wins (−∞ can, if nothing larger
/// is present). Returns 0 for an empty or all-NaN slice: callers check the value there.
pub fn argmax(x: &[f32]) -> usize {
    // Two passes that vectorise beat one index-tracking pass.
    let max = max_ignoring_nan(x);
    first_equal(x, max).unwrap_or(0)
}

/// Index of the first element `== value` (so −0.0 matches 0.0; NaN matches nothing).
fn first_equal(x: &[f32], value: f32) -> Option<usize> {
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for (c, chunk) in chunks.enumerate() {
        // One branch per chunk; the chunk with a match is then scanned.
        if chunk.iter().fold(false, |any, &v| any | (v == value)) {
            return chunk.iter().position(|&v| v == value).map(|j| c * LANES + j);
        }
    }
    tail.iter().position(|&v| v == value).map(|j| x.len() - tail.len() + j)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn argmax_ties_nan_and_empty() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN, 0.7]), 3);
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY]), 1);
        assert_eq!(argmax(&[-0.0, 0.0]), 0);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[]), 0);
        // Against the one-line definition, on lengths around the lane width, with ties, NaN and ±inf.
        let naive = |x: &[f32]| {
            let mut best: Option<usize> = None;
            for (i, &v) in x.iter().enumerate() {
                if !v.is_nan() && !best.is_some_and(|b| v <= x[b]) {
                    best = Some(i);
                }
            }
            best.unwrap_or(0)
        };
        let mut rng = Rng::new(2);
        let palette = [f32::NAN, f32::NEG_INFINITY, -1.0, -0.0, 0.0, 2.0, 3.0, f32::INFINITY];
        for len in 0..40 {
            for trial in 0..200 {
                // Fewer distinct values in some trials: more ties, or nothing but NaN and -inf.
                let distinct = [2, 3, 6, 8][trial % 4];
                let x: Vec<f32> = (0..len).map(|_| palette[(rng.next_u64() % distinct) as usize]).collect();
                assert_eq!(argmax(&x), naive(&x), "{x:?}");
            }
        }
    }

    #[test]
    fn fast_exp_matches_exp() {
        let mut worst = 0.0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let got = f64::from(exp_nonpositive(x));
            let want = f64::from(x).exp();
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 3e-7, "max relative error {worst}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-0.0), 1.0);
        assert_eq!(exp_nonpositive(-87.5), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-f32::MAX), 0.0);
    }
}
