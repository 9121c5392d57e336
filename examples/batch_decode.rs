//! Decode throughput of `forward_batch` against separate `forward` calls.
//!
//! ```text
//! cargo run --release --example batch_decode -- [MODEL.colibri] [--threads T] [--steps N] [--repeat R]
//! ```
//!
//! For B = 1, 2, 4, 8 sequences (prompts of different lengths, prefilled separately), it
//! decodes N greedy steps from the same state in two ways: B `forward` calls per step, and one
//! `forward_batch` call per step; it prints the aggregate tokens/s of both (the best of R
//! alternating runs each, against noise from other processes) and their ratio. Both ways must
//! produce the same tokens. Defaults: models/default.colibri, 2 threads, 32 steps, 3 runs.

use colibri::forward::{forward, forward_batch, ForwardOptions, Input, Sequence};
use colibri::session::{Session, SessionOptions};
use colibri::{LoadOptions, Model};
use std::path::PathBuf;
use std::time::Instant;

fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b }) as u32
}

/// B sessions, sequence i prefilled with 8 + 3i prompt ids.
fn prefilled(model: &Model, b: usize, n_ctx: usize) -> Result<Vec<Session>, colibri::Error> {
    let vocab = model.config().vocab_size as u32;
    let opts = ForwardOptions::default();
    (0..b)
        .map(|i| {
            let mut s = Session::new(model.config(), &SessionOptions { n_ctx, ..Default::default() })?;
            let prompt: Vec<u32> = (0..8 + 3 * i as u32).map(|t| (t * 31 + 7 * i as u32 + 5) % vocab).collect();
            forward(model, &mut s, Input::Tokens(&prompt), &opts)?;
            Ok(s)
        })
        .collect()
}

/// Decode `steps` greedy tokens on every session; returns (seconds, tokens per session).
fn decode(
    model: &Model,
    sessions: &mut [Session],
    steps: usize,
    batched: bool,
) -> colibri::Result<(f64, Vec<Vec<u32>>)> {
    let opts = ForwardOptions::default();
    let mut out = vec![Vec::new(); sessions.len()];
    let t0 = Instant::now();
    for _ in 0..steps {
        let next: Vec<[u32; 1]> = sessions.iter().map(|s| [argmax(s.logits())]).collect();
        for (o, t) in out.iter_mut().zip(&next) {
            o.push(t[0]);
        }
        if batched {
            let mut batch: Vec<Sequence<'_>> = sessions
                .iter_mut()
                .zip(&next)
                .map(|(s, t)| Sequence { session: s, input: Input::Tokens(t), opts })
                .collect();
            forward_batch(model, &mut batch)?;
        } else {
            for (s, t) in sessions.iter_mut().zip(&next) {
                forward(model, s, Input::Tokens(t), &opts)?;
            }
        }
    }
    Ok((t0.elapsed().as_secs_f64(), out))
}

fn main() {
    let mut path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models/default.colibri"));
    let (mut threads, mut steps, mut repeat) = (2usize, 32usize, 3usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |what: &str| {
            args.next().and_then(|n| n.parse().ok()).filter(|&n: &usize| n > 0).unwrap_or_else(|| {
                eprintln!("{what} needs a positive number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--threads" => threads = number("--threads"),
            "--steps" => steps = number("--steps"),
            "--repeat" => repeat = number("--repeat"),
            "-h" | "--help" => {
                println!("usage: batch_decode [MODEL.colibri] [--threads T] [--steps N] [--repeat R]");
                return;
            }
            _ => path = PathBuf::from(a),
        }
    }
    if let Err(e) = rayon::ThreadPoolBuilder::new().num_threads(threads).build_global() {
        eprintln!("error: thread pool: {e}");
        std::process::exit(1);
    }
    if let Err(e) = run(&path, threads, steps, repeat) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(path: &std::path::Path, threads: usize, steps: usize, repeat: usize) -> colibri::Result<()> {
    let model = Model::open(path, &LoadOptions::default())?;
    println!("{} | {threads} threads | {steps} decode steps per sequence | best of {repeat}", path.display());
    println!("{:>3} {:>16} {:>16} {:>7}", "B", "separate tok/s", "batched tok/s", "ratio");
    let n_ctx = 64 + steps;
    for b in [1, 2, 4, 8, 16] {
        // Warm up the page cache and the thread pool once per B.
        decode(&model, &mut prefilled(&model, b, n_ctx)?, 2, true)?;
        let (mut t_sep, mut t_bat) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..repeat {
            let (t, tok_sep) = decode(&model, &mut prefilled(&model, b, n_ctx)?, steps, false)?;
            t_sep = t_sep.min(t);
            let (t, tok_bat) = decode(&model, &mut prefilled(&model, b, n_ctx)?, steps, true)?;
            t_bat = t_bat.min(t);
            if tok_sep != tok_bat {
                return Err(colibri::Error::InvalidArgument {
                    reason: format!("B={b}: batched tokens differ from separate ones"),
                });
            }
        }
        let n = (b * steps) as f64;
        println!("{b:>3} {:>16.1} {:>16.1} {:>6.2}x", n / t_sep, n / t_bat, t_sep / t_bat);
    }
    Ok(())
}
