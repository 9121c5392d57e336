//! The two llama-bench tests, timed on the engine's public API:
//! - pp: `n_prompt` random tokens in one forward call (logits of the last one), tokens/s =
//!   n_prompt / time;
//! - tg: `n_gen` single-token forward calls, each producing logits, tokens/s = n_gen / time.
//!
//! Either can run at depth: the session is first filled with `n_depth` tokens, untimed. Every
//! test runs one untimed warm-up repetition, then `reps` timed ones from an empty cache.

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::rng::Rng;
use colibri::session::{KvDtype, Session, SessionOptions};
use colibri::{Error, Model};
use std::time::Instant;

/// Seed of the benchmark's token stream (fixed, so every run feeds the same ids).
const TOKEN_SEED: u64 = 1234;

/// One test: exactly one of n_prompt / n_gen is non-zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub n_depth: usize,
    pub n_threads: usize,
}

impl Test {
    /// llama-bench's name: "pp512", "tg64", "tg64 @ d512".
    pub fn name(&self) -> String {
        let base = if self.n_prompt > 0 { format!("pp{}", self.n_prompt) } else { format!("tg{}", self.n_gen) };
        if self.n_depth > 0 {
            format!("{base} @ d{}", self.n_depth)
        } else {
            base
        }
    }

    /// Tokens each timed repetition processes.
    pub fn n_tokens(&self) -> usize {
        self.n_prompt + self.n_gen
    }
}

/// Deterministic token ids below the vocabulary; the first id of a sequence is BOS when the
/// model has one (as llama-bench does).
struct Tokens {
    rng: Rng,
    vocab: u64,
    bos: Option<u32>,
}

impl Tokens {
    fn next(&mut self) -> u32 {
        (self.rng.next_u64() % self.vocab) as u32
    }

    fn sequence(&mut self, n: usize, first_of_context: bool) -> Vec<u32> {
        (0..n).map(|i| if let (0, true, Some(b)) = (i, first_of_context, self.bos) { b } else { self.next() }).collect()
    }
}

fn run(model: &Model, s: &mut Session, ids: &[u32], logits: LogitsMode) -> Result<(), Error> {
    forward(model, s, Input::Tokens(ids), &ForwardOptions { logits, ..Default::default() })
}

/// CPU time of the whole process (every thread, user + system) in nanoseconds.
fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One timed repetition: wall-clock and process CPU time (all threads) of its timed part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub wall_ns: u64,
    pub cpu_ns: u64,
}

/// One repetition from an empty cache; returns the timed part's wall and CPU time.
fn repetition(model: &Model, s: &mut Session, t: &Test, tok: &mut Tokens) -> Result<Sample, Error> {
    s.reset();
    if t.n_depth > 0 {
        let fill = tok.sequence(t.n_depth, true);
        run(model, s, &fill, LogitsMode::None)?;
    }
    let prompt = tok.sequence(t.n_prompt, t.n_depth == 0);
    let gen = tok.sequence(t.n_gen, t.n_depth == 0);
    let (t0, c0) = (Instant::now(), process_cpu_ns());
    if !prompt.is_empty() {
        run(model, s, &prompt, LogitsMode::Last)?;
    }
    for id in &gen {
        run(model, s, std::slice::from_ref(id), LogitsMode::Last)?;
    }
    let wall_ns = t0.elapsed().as_nanos() as u64;
    Ok(Sample { wall_ns, cpu_ns: process_cpu_ns().saturating_sub(c0) })
}

/// Run test `t` (on the model's pool, KV cache of `kv` elements): one warm-up, then `reps`
/// timed repetitions. Returns each repetition's times.
pub fn measure(model: &Model, t: &Test, kv: KvDtype, reps: usize) -> Result<Vec<Sample>, Error> {
    let c = model.config();
    let n_ctx = t.n_depth + t.n_tokens();
    let mut s = Session::new(c, &SessionOptions { n_ctx, kv_dtype: kv, ..Default::default() })?;
    let mut tok = Tokens { rng: Rng::new(TOKEN_SEED), vocab: c.vocab_size.max(1) as u64, bos: c.bos_token_id };
    repetition(model, &mut s, t, &mut tok)?;
    (0..reps).map(|_| repetition(model, &mut s, t, &mut tok)).collect()
}

/// Mean and sample standard deviation (n − 1; 0 for fewer than two values), as llama-bench
/// reports avg_ts / stddev_ts.
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// CPU milliseconds per token of each repetition (all threads: a figure that a busy machine
/// disturbs far less than tokens/s, since time spent waiting for a core is not counted).
pub fn samples_cpu_ms(t: &Test, samples: &[Sample]) -> Vec<f64> {
    samples.iter().map(|s| s.cpu_ns as f64 / 1e6 / t.n_tokens().max(1) as f64).collect()
}

/// Tokens per second of each repetition.
pub fn samples_ts(t: &Test, samples_ns: &[u64]) -> Vec<f64> {
    samples_ns.iter().map(|&ns| 1e9 * t.n_tokens() as f64 / (ns.max(1) as f64)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd_match_hand_values() {
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((sd - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
    }

    #[test]
    fn test_names_follow_llama_bench() {
        let t = Test { n_prompt: 512, n_gen: 0, n_depth: 0, n_threads: 2 };
        assert_eq!(t.name(), "pp512");
        let t = Test { n_prompt: 0, n_gen: 64, n_depth: 512, n_threads: 2 };
        assert_eq!(t.name(), "tg64 @ d512");
    }

    /// The process clock counts the work of every thread: two threads that each burn 30 ms of
    /// their own CPU time add at least 60 ms (more if other tests run meanwhile), and CPU ms per
    /// token divides by the test's tokens.
    #[test]
    fn process_cpu_time_counts_every_thread() {
        let thread_ns = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a valid timespec; a constant clock id.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        let burn = || {
            let t0 = thread_ns();
            while thread_ns() - t0 < 30_000_000 {
                std::hint::black_box(0u64);
            }
        };
        let c0 = process_cpu_ns();
        std::thread::scope(|s| {
            s.spawn(burn);
            s.spawn(burn);
        });
        let used = process_cpu_ns() - c0;
        assert!(used >= 60_000_000, "{used} ns");
        let t = Test { n_prompt: 0, n_gen: 4, n_depth: 0, n_threads: 2 };
        let s = [Sample { wall_ns: 1, cpu_ns: 8_000_000 }];
        assert_eq!(samples_cpu_ms(&t, &s), vec![2.0]);
    }
}
