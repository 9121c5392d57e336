//! Rotary position embeddings: inverse frequencies for each scaling scheme (mirroring
//! transformers `modeling_rope_utils.py`: default, linear, dynamic, yarn, llama3, longrope) and their
//! application to one head: rotate-half (`apply_rotary_pos_emb`) or interleaved pairs
//! (DeepSeek's `apply_rotary_emb` / `apply_rotary_pos_emb_interleave`).

use crate::model::{Config, RopeScaling};

/// Inverse frequencies and the cos/sin scale of one model.
pub struct Rope {
    /// [rot_dim / 2]
    inv_freq: Vec<f32>,
    /// Multiplies cos and sin (YaRN's attention factor; 1 otherwise).
    attention_factor: f32,
    /// Leading dimensions of a head that rotate.
    rot_dim: usize,
    /// Dynamic NTK: (factor, original context) to recompute for long sequences.
    dynamic: Option<(f64, u64)>,
    /// LongRoPE: the set used by calls that reach past the original context.
    long: Option<LongSet>,
    theta: f64,
    /// Pairs (2i, 2i+1) rotate together instead of (i, i + rot_dim/2).
    interleaved: bool,
}

/// LongRoPE's long-context factors (`inv_freq` and the attention factor hold the short ones).
struct LongSet {
    /// [rot_dim / 2] inverse frequencies divided by `long_factor`
    inv_freq: Vec<f32>,
    attention_factor: f32,
    /// A call whose highest position + 1 exceeds this uses the long set.
    original: u64,
}

impl LongSet {
    /// The long set of a LongRoPE `scaling` (None for other schemes), from the `base` inverse
    /// frequencies.
    fn new(scaling: &RopeScaling, base: &[f64]) -> Option<LongSet> {
        match scaling {
            RopeScaling::LongRope { long_factor, original_max_position_embeddings, long_mscale, .. } => Some(LongSet {
                inv_freq: scaled(base, long_factor).iter().map(|&f| f as f32).collect(),
                attention_factor: *long_mscale as f32,
                original: *original_max_position_embeddings,
            }),
            _ => None,
        }
    }
}

/// base inverse frequencies divided per dimension by `factor` (`_compute_longrope_parameters`).
fn scaled(base: &[f64], factor: &[f64]) -> Vec<f64> {
    base.iter().zip(factor).map(|(f, s)| f / s).collect()
}

fn base_inv_freq(theta: f64, dim: usize) -> Vec<f64> {
    (0..dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f64 / dim as f64)).collect()
}

impl Rope {
    /// Frequencies for config `c`.
    pub fn new(c: &Config) -> Rope {
        let rot_dim = c.rope_dim();
        let theta = c.rope.theta;
        let base = base_inv_freq(theta, rot_dim);
        let mut attention_factor = 1.0f64;
        let mut dynamic = None;
        let mut long = None;
        let inv: Vec<f64> = match &c.rope.scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Dynamic { factor, original_max_position_embeddings } => {
                dynamic = Some((*factor, *original_max_position_embeddings));
                base
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor: af,
                truncate,
            } => {
                attention_factor = *af;
                let d = rot_dim as f64;
                let orig = *original_max_position_embeddings as f64;
                let corr = |rot: f64| d * (orig / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
                let (mut low, mut high) = (corr(*beta_fast), corr(*beta_slow));
                if *truncate {
                    low = low.floor();
                    high = high.ceil();
                }
                let (low, high) = (low.max(0.0), high.min(d - 1.0));
                let high = if low == high { high + 0.001 } else { high };
                base.iter()
                    .enumerate()
                    .map(|(i, &extra)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        let inter = extra / factor;
                        inter * (1.0 - extrapolation) + extra * extrapolation
                    })
                    .collect()
            }
            RopeScaling::LongRope { short_factor, short_mscale, .. } => {
                attention_factor = *short_mscale;
                long = LongSet::new(&c.rope.scaling, &base);
                scaled(&base, short_factor)
            }
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let orig = *original_max_position_embeddings as f64;
                let low_wl = orig / low_freq_factor;
                let high_wl = orig / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wl = 2.0 * std::f64::consts::PI / f;
                        if wl < high_wl {
                            f
                        } else if wl > low_wl || high_freq_factor <= low_freq_factor {
                            // Equal factors (Llama-4 Scout): no band between the two.
                            f / factor
                        } else {
                            let smooth = (orig / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        };
        Rope {
            inv_freq: inv.iter().map(|&f| f as f32).collect(),
            attention_factor: attention_factor as f32,
            rot_dim,
            dynamic,
            long,
            theta,
            interleaved: c.rope.interleaved,
        }
    }

    /// Append the cos and sin rows of positions `pos0 .. pos0 + n` to `cos` and `sin` ([rot_dim/2]
    /// per position), already scaled by the attention factor. Angles are computed as f32
    /// products like transformers does. Dynamic NTK scales by this sequence's length `pos0 + n`;
    /// LongRoPE takes the long set for every row when `call_end` (the position after the last
    /// token of the whole forward call, which may run as several steps) exceeds the original
    /// context, as transformers' `longrope_frequency_update` does with `max(position_ids) + 1`.
    pub fn extend_table(&self, pos0: usize, n: usize, call_end: usize, cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
        if let Some(l) = self.long.as_ref().filter(|l| call_end as u64 > l.original) {
            return push_rows(pos0..pos0 + n, &l.inv_freq, l.attention_factor, cos, sin);
        }
        let inv: std::borrow::Cow<'_, [f32]> = match self.dynamic {
            Some((factor, orig)) if (pos0 + n) as u64 > orig => {
                let seq = (pos0 + n) as f64;
                let d = self.rot_dim as f64;
                let base = self.theta * ((factor * seq / orig as f64) - (factor - 1.0)).powf(d / (d - 2.0));
                base_inv_freq(base, self.rot_dim).iter().map(|&f| f as f32).collect::<Vec<_>>().into()
            }
            _ => (&self.inv_freq[..]).into(),
        };
        push_rows(pos0..pos0 + n, &inv, self.attention_factor, cos, sin);
    }

    /// Rotate the leading rot_dim values of `x` in place with one row of the tables
    /// (rotate-half convention: pairs (i, i + rot_dim/2); interleaved: pairs (2i, 2i+1)).
    pub fn apply(&self, x: &mut [f32], cos: &[f32], sin: &[f32]) {
        let half = self.rot_dim / 2;
        if self.interleaved {
            for (i, p) in x[..self.rot_dim].chunks_exact_mut(2).enumerate() {
                let (a, b) = (p[0], p[1]);
                p[0] = a * cos[i] - b * sin[i];
                p[1] = b * cos[i] + a * sin[i];
            }
            return;
        }
        for i in 0..half {
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * cos[i] - b * sin[i];
            x[i + half] = b * cos[i] + a * sin[i];
        }
    }

    /// Half of the rotated dimensions (the width of one table row).
    pub fn half(&self) -> usize {
        self.rot_dim / 2
    }
}

/// cos and sin of position × inverse frequency (an f32 product), × `scale`, for each position.
fn push_rows(positions: std::ops::Range<usize>, inv: &[f32], scale: f32, cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
    for p in positions {
        for &f in inv {
            let angle = (p as f32) * f;
            cos.push((f64::from(angle).cos() as f32) * scale);
            sin.push((f64::from(angle).sin() as f32) * scale);
        }
    }
}
