//! `colibri bench`: llama-bench's prompt-processing (pp) and token-generation (tg) tests on one
//! model, with a memory-bandwidth probe and the share of it that decoding reaches. stdout
//! carries only the report (markdown table or JSON); progress goes to stderr.

mod footprint;
mod probe;
mod report;
mod resident;
mod timing;

use crate::{model_path, threads};
use colibri::{Error, LoadOptions};
use report::{Context, Probe, Row};
use std::io::Write;
use std::path::PathBuf;
use timing::Test;

/// Options of `colibri bench` (comma lists run every combination, as in llama-bench).
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Model file (default: $COLIBRI_MODEL, then the shipped models/default.colibri).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Prompt lengths of the pp tests (0 = no pp test).
    #[arg(short = 'p', long = "n-prompt", value_delimiter = ',', default_value = "512")]
    pub n_prompt: Vec<usize>,
    /// Generated tokens of the tg tests (0 = no tg test).
    #[arg(short = 'n', long = "n-gen", value_delimiter = ',', default_value = "64")]
    pub n_gen: Vec<usize>,
    /// Tokens already in the cache (filled untimed) before each test.
    #[arg(short = 'd', long = "n-depth", value_delimiter = ',', default_value = "0")]
    pub n_depth: Vec<usize>,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Timed repetitions of each test (after one untimed warm-up).
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,
    /// Output format.
    #[arg(short = 'o', long, default_value = "md", value_parser = ["md", "json"])]
    pub output: String,
    /// Skip the memory-bandwidth probe (and the bandwidth efficiency column).
    #[arg(long)]
    pub no_probe: bool,
    /// KV cache element type: f32, f16 or bf16 (llama-bench's -ctk/-ctv; its default is f16).
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    pub kv_type: String,
}

/// Largest repetition count accepted.
const MAX_REPS: usize = 10_000;

/// Every test of the run, in llama-bench's order: per thread count and depth, pp then tg.
fn plan(a: &BenchArgs, thread_counts: &[usize]) -> Vec<Test> {
    let mut tests = Vec::new();
    for &n_threads in thread_counts {
        for &n_depth in &a.n_depth {
            let pp = a.n_prompt.iter().filter(|&&p| p > 0).map(|&p| (p, 0));
            let tg = a.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n));
            for (n_prompt, n_gen) in pp.chain(tg) {
                tests.push(Test { n_prompt, n_gen, n_depth, n_threads });
            }
        }
    }
    tests
}

fn file_stem(path: &std::path::Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// `colibri bench`.
pub fn run(a: &BenchArgs) -> Result<(), Error> {
    if a.repetitions == 0 || a.repetitions > MAX_REPS {
        return Err(Error::InvalidArgument { reason: format!("-r {} outside 1..={MAX_REPS}", a.repetitions) });
    }
    let thread_counts = if a.threads.is_empty() { vec![threads::default_threads()] } else { a.threads.clone() };
    let pools = thread_counts.iter().map(|&t| threads::pool(t).map(|p| (t, p))).collect::<Result<Vec<_>, _>>()?;
    let tests = plan(a, &thread_counts);
    if tests.is_empty() {
        return Err(Error::InvalidArgument { reason: "no test to run: -p and -n are both 0".into() });
    }

    let path = model_path::resolve(a.model.as_deref())?;
    let mut model = crate::model_path::open(&path, &LoadOptions::default())?;
    if model.mapping().is_mapped() {
        let bytes = model.bytes();
        let secs = resident::read_in(bytes);
        eprintln!("bench: model pages read in ({:.2} GB in {secs:.2} s)", bytes.len() as f64 / 1e9);
    }
    let cx = Context {
        model_filename: path.display().to_string(),
        model: file_stem(&path),
        footprint: footprint::footprint(&model),
        cpu_path: colibri::kernels::active_path().name().to_string(),
    };
    // A COLIBRI_CPU request this CPU cannot honour ran on another path: say which and why.
    if let Some(note) = colibri::kernels::path_note() {
        eprintln!("bench: {note}");
    }

    let model_ctx = model.config().max_position_embeddings;
    if let Some(t) = tests.iter().find(|t| t.n_depth + t.n_tokens() > model_ctx) {
        eprintln!(
            "bench: warning: {} needs {} positions, beyond the model's context of {model_ctx}",
            t.name(),
            t.n_depth + t.n_tokens()
        );
    }

    let mut probes = Vec::new();
    if !a.no_probe {
        let bytes = probe::probe_bytes();
        eprintln!("bench: probing memory bandwidth ({} MiB buffer)", bytes >> 20);
        let buf = probe::allocate(bytes, probe::Pages::Small)?;
        let small: Vec<f64> = pools.iter().map(|(_, pool)| probe::bandwidth(pool, &buf)).collect();
        drop(buf);
        let buf = probe::allocate(bytes, probe::Pages::Huge)?;
        for ((t, pool), gbs) in pools.iter().zip(small) {
            probes.push(Probe { threads: *t, gbs, gbs_huge: probe::bandwidth(pool, &buf), bytes });
        }
    }

    let mut rows = Vec::with_capacity(tests.len());
    for test in tests {
        if model.pool().options().n_threads != test.n_threads {
            // The engine runs on the model's own pool: resize it for this thread count.
            model.set_threads(threads::options(Some(test.n_threads)))?;
        }
        eprintln!("bench: {} with {} threads: warm-up + {} runs", test.name(), test.n_threads, a.repetitions);
        let kv = colibri::session::KvDtype::from_name(&a.kv_type).unwrap_or(colibri::session::KvDtype::F32);
        let samples = timing::measure(&model, &test, kv, a.repetitions)?;
        rows.push(Row { test, samples, bandwidth_gbs: None, bandwidth_huge_gbs: None });
    }
    // Decode is measured against the probes mixed as the weights are mapped (read after the
    // runs: the mapping's pages exist once touched).
    let huge_share = probe::huge_share(&path);
    for r in &mut rows {
        let p = probes.iter().find(|p| p.threads == r.test.n_threads);
        r.bandwidth_gbs = p.map(|p| probe::mixed(p.gbs, p.gbs_huge, huge_share.unwrap_or(0.0)));
        r.bandwidth_huge_gbs = p.map(|p| p.gbs_huge);
    }

    let text = if a.output == "json" {
        serde_json::to_string_pretty(&report::json(&cx, &rows)).unwrap_or_default() + "\n"
    } else {
        report::markdown(&cx, &probes, huge_share, &rows)
    };
    std::io::stdout().lock().write_all(text.as_bytes()).map_err(|e| Error::io("write to stdout", e))
}
