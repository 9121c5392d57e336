//! The gated delta rule's decode step on one value head (Qwen3-Next's DeltaNet), as the scalar
//! reference every path's `Table::delta_step` is tested against. Columns of the state are
//! independent: column j of S' needs only column j of S, k, q and v_j, which is what the SIMD
//! paths block on.

use super::table::DeltaToken;

/// S' = decay·S + k ⊗ δ with δ = β(v − decay·Sᵀk), out = S'ᵀq, for S [k.len(), v.len()] read
/// from `from` when given (`s` is then only written), else from `s` (see `table::DeltaStepFn`).
/// Panics when the lengths disagree (on every path).
pub fn reference_step(from: Option<&[f32]>, s: &mut [f32], t: &DeltaToken<'_>, out: &mut [f32]) {
    let (dk, dv) = check(from, s, t, out);
    if let Some(f) = from {
        s.copy_from_slice(f);
    }
    let mut mem = vec![0f32; dv];
    for (ki, row) in t.k.iter().zip(s.chunks_exact(dv)) {
        mem.iter_mut().zip(row).for_each(|(m, r)| *m += ki * r);
    }
    let delta: Vec<f32> = mem.iter().zip(t.v).map(|(m, v)| t.beta * (v - t.decay * m)).collect();
    out.fill(0.0);
    for ((ki, qi), row) in t.k.iter().zip(t.q).zip(s.chunks_exact_mut(dv)).take(dk) {
        for ((r, d), o) in row.iter_mut().zip(&delta).zip(out.iter_mut()) {
            *r = t.decay * *r + ki * d;
            *o += qi * *r;
        }
    }
}

/// (k_dim, v_dim) after checking every length against them.
pub(crate) fn check(from: Option<&[f32]>, s: &[f32], t: &DeltaToken<'_>, out: &[f32]) -> (usize, usize) {
    let (dk, dv) = (t.k.len(), t.v.len());
    assert!(
        t.q.len() == dk && s.len() == dk * dv && out.len() == dv && from.is_none_or(|f| f.len() == s.len()),
        "delta step: q {}, k {dk}, v {dv}, state {}, out {}",
        t.q.len(),
        s.len(),
        out.len()
    );
    (dk, dv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{available_paths, Kernels, QuantActivations};
    use crate::rng::Rng;

    fn rand(rng: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.next_f64() as f32 - 0.5).collect()
    }

    /// Every path's step equals the reference within 1e-5 (relative to the largest value;
    /// summation order differs) at several head shapes — SIMD widths, blocks and tails — both
    /// in place and reading a separate `from` (which it must not change).
    #[test]
    fn paths_match_reference() {
        let mut rng = Rng::new(11);
        for (dk, dv) in [(128, 128), (16, 24), (32, 200), (8, 5), (64, 256)] {
            let (q, k, v, s0) = (rand(&mut rng, dk), rand(&mut rng, dk), rand(&mut rng, dv), rand(&mut rng, dk * dv));
            let t = DeltaToken { q: &q, k: &k, v: &v, decay: 0.9, beta: 0.7 };
            let (mut want_s, mut want_o) = (s0.clone(), vec![0f32; dv]);
            reference_step(None, &mut want_s, &t, &mut want_o);
            let scale = want_s.iter().chain(&want_o).fold(0f32, |m, x| m.max(x.abs()));
            assert!(scale > 0.1, "a test that computes nothing");
            for path in available_paths() {
                let kern = Kernels::on(path, QuantActivations::default()).unwrap();
                let (mut s1, mut o1) = (s0.clone(), vec![7f32; dv]);
                kern.delta_step(None, &mut s1, &t, &mut o1);
                let (mut s2, mut o2) = (vec![f32::NAN; dk * dv], vec![7f32; dv]);
                let from = s0.clone();
                kern.delta_step(Some(&from), &mut s2, &t, &mut o2);
                assert_eq!(from, s0, "{path:?} changed `from`");
                for (got, want, what) in
                    [(&s1, &want_s, "state"), (&o1, &want_o, "out"), (&s2, &want_s, "state (from)")]
                {
                    let err = got.iter().zip(want.iter()).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                    assert!(err <= 1e-5 * scale, "{path:?} {dk}x{dv} {what}: error {err}");
                }
                assert_eq!(o1, o2, "{path:?}: in place and from `from` differ");
            }
        }
    }
}
