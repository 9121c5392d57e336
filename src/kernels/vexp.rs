//! Branch-free `e^x` for x ≤ 0, the exp-and-sum pass of a softmax row and the MLPs' gated
//! activations (SwiGLU and GPT-OSS's clamped form, through a sigmoid built on the same
//! exponential), written as plain lane loops: the compiler vectorises them for whichever
//! instruction set a path compiles them with, and since it may not reorder or fuse float
//! operations, every path computes the same bits (`table::ExpSumFn`, `table::GatedFn`; the
//! sampler's vocabulary weights use `exp_nonpositive` directly).

use super::table::Gate;

/// Lanes of the sums: independent accumulators that vectorise, combined in a fixed order.
pub const LANES: usize = 8;

/// Cephes `expf` on x clamped to [−87, 0]: range reduction by ln 2 in two parts, degree-6
/// polynomial; relative error below 3e-7, exactly 1 at 0. NaN stays NaN.
#[inline(always)]
fn exp_clamped(x: f32) -> f32 {
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
    y * f32::from_bits((k.wrapping_add(127) as u32) << 23)
}

/// `e^x` for `x <= 0` (or −∞): [`exp_clamped`], and 0 below −87 (where `f32` results would be
/// subnormal) and for NaN — what softmax weights need.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    // Written so that NaN also gives 0.
    if x >= -87.0 {
        exp_clamped(x)
    } else {
        0.0
    }
}

/// xs[i] = e^(xs[i] − m) for every i (m ≥ every xs[i], so the exponents are ≤ 0; below −87 the
/// weight is 0; NaN stays NaN), returning Σ xs: LANES running sums over the whole chunks, added in
/// lane order, then the tail in order (see `table::ExpSumFn`).
#[inline(always)]
pub fn exp_sum_body(xs: &mut [f32], m: f32) -> f32 {
    // Two simple loops (weights, then sums) that the loop vectoriser takes; the select below is
    // computed on both sides, without a branch.
    for x in xs.iter_mut() {
        let d = *x - m;
        let y = exp_clamped(d);
        *x = if d < -87.0 { 0.0 } else { y };
    }
    let mut lanes = [0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (s, &x) in lanes.iter_mut().zip(chunk) {
            *s += x;
        }
    }
    tail.iter().fold(lanes.iter().fold(0.0, |a, &s| a + s), |a, &x| a + x)
}

/// [`exp_sum_body`] compiled for the baseline target (the portable path).
pub fn exp_sum(xs: &mut [f32], m: f32) -> f32 {
    exp_sum_body(xs, m)
}

/// xs[i] ×= scale for every i, returning the largest of m and the scaled values (NaN ignored):
/// LANES running maxima over the whole chunks, then the tail (see `table::ScaleMaxFn`; a maximum
/// is the same whatever the order).
#[inline(always)]
pub fn scale_max_body(xs: &mut [f32], scale: f32, m: f32) -> f32 {
    for x in xs.iter_mut() {
        *x *= scale;
    }
    let mut lanes = [m; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    // `if x > s` (a NaN x keeps s): one max instruction per lane group, where `f32::max`'s
    // NaN rule would not vectorise.
    let max = |s: f32, x: f32| if x > s { x } else { s };
    for chunk in chunks {
        for (s, &x) in lanes.iter_mut().zip(chunk) {
            *s = max(*s, x);
        }
    }
    tail.iter().fold(lanes.iter().fold(m, |a, &s| max(a, s)), |a, &x| max(a, x))
}

/// [`scale_max_body`] compiled for the baseline target (the portable path).
pub fn scale_max(xs: &mut [f32], scale: f32, m: f32) -> f32 {
    scale_max_body(xs, scale, m)
}

/// σ(z) = 1 / (1 + e^−z) from one exponential of a non-positive argument: e = e^−|z| (0 below
/// −87), then 1 / (1 + e) for z ≥ 0 and e / (1 + e) below (no overflow either side; NaN stays
/// NaN). Relative error within a few 1e-7 of the exact value where it is a normal f32.
#[inline(always)]
fn sigmoid(z: f32) -> f32 {
    let a = -z.abs();
    let y = exp_clamped(a);
    let e = if a < -87.0 { 0.0 } else { y };
    let num = if z >= 0.0 { 1.0 } else { e };
    num / (1.0 + e)
}

/// g[i] = act(g[i], u[i]) (`table::GatedFn`): SwiGLU as g · σ(g) · u, GPT-OSS's clamped form as
/// (clamp(u, ±limit) + 1) · g' · σ(alpha · g') with g' = min(g, limit); one lane loop per form,
/// which the loop vectoriser takes (the selects are computed on both sides).
#[inline(always)]
pub fn gated_body(g: &mut [f32], u: &[f32], act: Gate) {
    match act {
        Gate::Silu => {
            for (gi, &ui) in g.iter_mut().zip(u) {
                let x = *gi;
                *gi = x * sigmoid(x) * ui;
            }
        }
        Gate::Clamped { alpha, limit } => {
            for (gi, &ui) in g.iter_mut().zip(u) {
                let gc = gi.min(limit);
                let uc = ui.clamp(-limit, limit);
                *gi = (uc + 1.0) * (gc * sigmoid(gc * alpha));
            }
        }
    }
}

/// [`gated_body`] compiled for the baseline target (the portable path).
pub fn gated(g: &mut [f32], u: &[f32], act: Gate) {
    gated_body(g, u, act)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(exp_nonpositive(f32::NAN), 0.0);
    }

    #[test]
    fn exp_sum_weighs_against_the_maximum_and_keeps_nan() {
        for n in [0, 1, 7, 8, 9, 31, 100] {
            let mut xs: Vec<f32> = (0..n).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.7).collect();
            let m = xs.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
            // Of the exponent as f32 computes it (its rounding is the caller's, not the exp's).
            let want: Vec<f64> = xs.iter().map(|&x| f64::from(x - m).exp()).collect();
            let sum = exp_sum(&mut xs, m);
            for (i, (&got, &w)) in xs.iter().zip(&want).enumerate() {
                assert!((f64::from(got) - w).abs() <= 3e-7 * w, "n {n} element {i}: {got} vs {w}");
            }
            let total: f64 = want.iter().sum();
            assert!((f64::from(sum) - total).abs() <= 1e-6 * total.max(1.0), "n {n}: sum {sum} vs {total}");
        }
        let mut xs = [0.0, f32::NAN, -100.0, f32::NEG_INFINITY];
        let sum = exp_sum(&mut xs, 0.0);
        assert!(xs[1].is_nan() && sum.is_nan(), "NaN scores stay visible");
        assert_eq!((xs[0], xs[2], xs[3]), (1.0, 0.0, 0.0));
    }
}
