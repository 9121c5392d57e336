//! `colibri perplexity`: llama-perplexity's measurement. The text is tokenised (with BOS when the
//! tokenizer adds one), split into non-overlapping chunks of CTX tokens (each starting with BOS
//! when the model uses one), and in every chunk the tokens from CTX/2 on are scored by the
//! logits of the position before them. With `--kl-base`, a base model runs on the same chunks
//! and the mean KL(base || model) and top-1 agreement are reported too. stdout carries the
//! result; the running estimate per chunk goes to stderr.

mod eval;
mod score;

use crate::{model_path, threads};
use colibri::session::{Session, SessionOptions};
use colibri::tokenizer::Tokenizer;
use colibri::{Error, LoadOptions, Model};
use score::Mean;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Options of `colibri perplexity`.
#[derive(clap::Args, Clone, Debug)]
pub struct PerplexityArgs {
    /// Model file (default: $COLIBRI_MODEL, then the shipped models/default.colibri).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Text file to score (UTF-8).
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Tokens per chunk (capped by the model's context).
    #[arg(short = 'c', long, default_value_t = 512)]
    pub ctx: usize,
    /// Tokens per forward call inside a chunk (default: the whole chunk).
    #[arg(short = 'b', long)]
    pub batch: Option<usize>,
    /// Base model to compare with: mean KL(base || model) and top-1 agreement.
    #[arg(long)]
    pub kl_base: Option<PathBuf>,
    /// Score at most this many chunks (default: all that fit in the text).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Output format.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument { reason }
}

/// The chunk size: -c capped by the model's context, at least 3 (so one token is scored).
fn chunk_size(a: &PerplexityArgs, model: &Model) -> Result<usize, Error> {
    let model_ctx = model.config().max_position_embeddings;
    if a.ctx < 3 {
        return Err(invalid(format!("-c {} is too small: a chunk needs at least 3 tokens", a.ctx)));
    }
    if a.ctx > model_ctx {
        eprintln!("perplexity: -c {} exceeds the model's context; using {model_ctx}", a.ctx);
    }
    Ok(a.ctx.min(model_ctx))
}

/// A model with a session of `ctx` tokens.
struct Runner {
    model: Model,
    session: Session,
}

impl Runner {
    fn new(model: Model, ctx: usize) -> Result<Runner, Error> {
        let session = Session::new(model.config(), &SessionOptions { n_ctx: ctx, ..Default::default() })?;
        Ok(Runner { model, session })
    }
}

/// The base model for --kl-base, refused unless it shares the vocabulary and tokenises the text
/// to the same ids.
fn open_base(path: &Path, ctx: usize, model: &Model, text: &str, ids: &[u32]) -> Result<Runner, Error> {
    let opts = LoadOptions { threads: model.pool().options(), ..LoadOptions::default() };
    let base = Runner::new(crate::model_path::open(path, &opts)?, ctx)?;
    let (vb, vm) = (base.model.config().vocab_size, model.config().vocab_size);
    if vb != vm {
        return Err(invalid(format!(
            "--kl-base {}: vocabulary of {vb} tokens differs from the model's {vm}; KL needs the same vocabulary",
            path.display()
        )));
    }
    let tok = Tokenizer::from_model(&base.model).map_err(|e| invalid(format!("--kl-base {}: {e}", path.display())))?;
    if tok.encode(text, true)? != ids {
        return Err(invalid(format!(
            "--kl-base {}: its tokenizer splits the text differently from the model's; KL needs the same tokenizer",
            path.display()
        )));
    }
    Ok(base)
}

/// Totals over every scored token.
#[derive(Default)]
struct Totals {
    nll: Mean,
    base_nll: Mean,
    kl: Mean,
    same_top1: Mean,
    /// Running perplexity after each chunk.
    running: Vec<f64>,
}

/// Score one chunk: NLL of every scored token, and against the base when given.
fn score_chunk(t: &mut Totals, logits: &[f32], base: Option<&[f32]>, next: &[u32], vocab: usize) {
    let (mut lq, mut lp) = (Vec::new(), Vec::new());
    for (r, &target) in next.iter().enumerate() {
        let row = &logits[r * vocab..(r + 1) * vocab];
        score::log_softmax(row, &mut lq);
        t.nll.add(-lq[target as usize]);
        if let Some(base) = base {
            let brow = &base[r * vocab..(r + 1) * vocab];
            score::log_softmax(brow, &mut lp);
            t.base_nll.add(-lp[target as usize]);
            t.kl.add(score::kl(&lp, &lq));
            t.same_top1.add(if score::argmax(row) == score::argmax(brow) { 1.0 } else { 0.0 });
        }
    }
}

/// `colibri perplexity`.
pub fn run(a: &PerplexityArgs) -> Result<(), Error> {
    if a.batch == Some(0) || a.chunks == Some(0) {
        return Err(invalid("-b and --chunks must be at least 1".into()));
    }
    let path = model_path::resolve(a.model.as_deref())?;
    let text = std::fs::read_to_string(&a.file).map_err(|e| invalid(format!("{}: {e}", a.file.display())))?;
    let opts = LoadOptions { threads: threads::options(a.threads), ..LoadOptions::default() };
    let model = crate::model_path::open(&path, &opts)?;
    let ctx = chunk_size(a, &model)?;
    let mut main = Runner::new(model, ctx)?;
    let tok = Tokenizer::from_model(&main.model)?;
    let mut ids = tok.encode(&text, true)?;
    let bos = tok.bos_id().filter(|&b| ids.first() == Some(&b));
    if ids.len() < 2 * ctx {
        return Err(invalid(format!(
            "{}: {} tokens, fewer than the 2 × {ctx} perplexity needs; pass a smaller -c",
            a.file.display(),
            ids.len()
        )));
    }
    let mut base = a.kl_base.as_deref().map(|p| open_base(p, ctx, &main.model, &text, &ids)).transpose()?;
    let n_chunks = (ids.len() / ctx).min(a.chunks.unwrap_or(usize::MAX));
    let batch = a.batch.unwrap_or(ctx).min(ctx);
    let first = ctx / 2;
    let vocab = main.model.config().vocab_size;
    eprintln!(
        "perplexity: {} tokens, {n_chunks} chunks of {ctx} (batch {batch}{}), scoring {} tokens per chunk",
        ids.len(),
        if bos.is_some() { ", BOS first" } else { "" },
        ctx - 1 - first
    );

    let mut t = Totals::default();
    for c in 0..n_chunks {
        let chunk = &mut ids[c * ctx..(c + 1) * ctx];
        let original = chunk[0];
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let scored = first..ctx - 1;
        let logits = eval::chunk_logits(&main.model, &mut main.session, chunk, scored.clone(), batch)?;
        let base_logits = match base.as_mut() {
            Some(b) => Some(eval::chunk_logits(&b.model, &mut b.session, chunk, scored.clone(), batch)?),
            None => None,
        };
        score_chunk(&mut t, &logits, base_logits.as_deref(), &chunk[first + 1..ctx], vocab);
        chunk[0] = original;
        let ppl = t.nll.perplexity().0;
        t.running.push(ppl);
        if base.is_some() {
            eprintln!(
                "[{}] ppl {ppl:.4}  base {:.4}  kl {}  top-1 {:.4}",
                c + 1,
                t.base_nll.perplexity().0,
                small(t.kl.mean()),
                t.same_top1.mean()
            );
        } else {
            eprintln!("[{}] ppl {ppl:.4}", c + 1);
        }
    }

    let report = if a.output == "json" {
        json_report(a, &path, &t, ids.len(), n_chunks, ctx, batch, bos.is_some())
    } else {
        text_report(a, &t)
    };
    std::io::stdout().lock().write_all(report.as_bytes()).map_err(|e| Error::io("write to stdout", e))
}

/// A small non-negative figure readably: fixed point from 1e-3 up, scientific below.
fn small(x: f64) -> String {
    if x != 0.0 && x.abs() < 1e-3 {
        format!("{x:.4e}")
    } else {
        format!("{x:.6}")
    }
}

fn text_report(a: &PerplexityArgs, t: &Totals) -> String {
    let (ppl, err) = t.nll.perplexity();
    let mut out = format!("PPL = {ppl:.4} ± {err:.5}\n");
    if a.kl_base.is_some() {
        let (bppl, berr) = t.base_nll.perplexity();
        out += &format!("base PPL = {bppl:.4} ± {berr:.5}\n");
        out += &format!("mean KL(base || model) = {} ± {}\n", small(t.kl.mean()), small(t.kl.stderr()));
        out +=
            &format!("top-1 agreement = {:.3} % ± {:.3} %\n", 100.0 * t.same_top1.mean(), 100.0 * t.same_top1.stderr());
    }
    out += &format!("scored tokens = {}\n", t.nll.count());
    out
}

#[allow(clippy::too_many_arguments)]
fn json_report(
    a: &PerplexityArgs,
    path: &Path,
    t: &Totals,
    n_tokens: usize,
    n_chunks: usize,
    ctx: usize,
    batch: usize,
    add_bos: bool,
) -> String {
    let (ppl, ppl_err) = t.nll.perplexity();
    let kl = a.kl_base.as_ref().map(|b| {
        let (bppl, berr) = t.base_nll.perplexity();
        json!({
            "base_model": b.display().to_string(),
            "base_ppl": bppl,
            "base_ppl_err": berr,
            "base_mean_nll": t.base_nll.mean(),
            "kl_mean": t.kl.mean(),
            "kl_err": t.kl.stderr(),
            "top1_agreement": t.same_top1.mean(),
            "top1_agreement_err": t.same_top1.stderr(),
        })
    });
    let v = json!({
        "model": path.display().to_string(),
        "file": a.file.display().to_string(),
        "n_tokens": n_tokens,
        "add_bos": add_bos,
        "n_ctx": ctx,
        "n_batch": batch,
        "n_chunks": n_chunks,
        "n_scored": t.nll.count(),
        "mean_nll": t.nll.mean(),
        "ppl": ppl,
        "ppl_err": ppl_err,
        "chunk_ppl": t.running,
        "kl": kl,
    });
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}
