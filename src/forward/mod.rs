//! The forward pass of every supported family: the layer loop and nothing else. Family
//! differences are Config fields read by the helpers (attention, router, experts, ffn).
//!
//! One step runs any number of sequences together: their new rows are stacked into one
//! activation matrix x [Σ n_i, hidden], so every weight (projections, router, each chosen
//! expert, dense MLPs, lm_head) is read once per step for all of them. Only the attention core
//! (RoPE at each sequence's positions, KV append, attention over its own cache) and the expert
//! choice (each sequence's top-k, mode and RNG) run per sequence. A single-sequence call is a
//! batch of one.
//!
//! x = embed(tokens)
//! for each layer:  x += attention(norm(x));  x += ffn_or_moe(norm(x))
//! logits = lm_head(norm(x))      (norm: RMSNorm, or LayerNorm with bias for Phi-MoE)
//!
//! `LogitsMode::Hidden` stops before the lm_head: the call leaves norm(x) of every new row
//! (`Session::hidden_states`), what embeddings pool (`crate::embed`).

mod attention;
mod bf16_attention;
mod block_products;
mod blocked_attention;
pub(crate) mod buffers;
mod check;
mod chunked;
mod delta_net;
mod delta_rule;
mod experts;
mod f32_attention;
mod ffn;
mod gqa_attend;
mod lanes;
mod mla;
mod rope;
mod router;
mod rows;
mod sparsemixer;
mod step;

pub use check::check_routing;
pub use router::{Routes, RoutingMode, RoutingOptions};

use crate::error::{Error, Result};
use crate::kernels::{self, Kernels};
use crate::model::{FfnWeights, Model};
use crate::session::Session;
use check::check_batch;
use std::ops::Range;
use step::Step;

/// What the forward pass consumes.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// Token ids (each < vocab_size).
    Tokens(&'a [u32]),
    /// Hidden states [n, hidden_size] fed instead of token embeddings.
    Embeddings(&'a [f32]),
}

impl<'a> Input<'a> {
    fn len(&self, hidden: usize) -> usize {
        match self {
            Input::Tokens(t) => t.len(),
            Input::Embeddings(e) => e.len() / hidden.max(1),
        }
    }

    /// Rows `rows` of the input.
    fn rows(&self, rows: Range<usize>, hidden: usize) -> Input<'a> {
        match *self {
            Input::Tokens(t) => Input::Tokens(&t[rows]),
            Input::Embeddings(e) => Input::Embeddings(&e[rows.start * hidden..rows.end * hidden]),
        }
    }
}

/// Which positions get logits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogitsMode {
    /// Only the last new position (generation).
    #[default]
    Last,
    /// Every new position (teacher forcing, perplexity).
    All,
    /// None (prefill of a prompt prefix).
    None,
    /// No logits: the final-normed hidden state of every new position, [n, hidden] in
    /// `Session::hidden_states()` (embeddings; the lm_head is not run for this sequence).
    Hidden,
}

/// Per-call options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardOptions {
    pub logits: LogitsMode,
    pub routing: RoutingOptions,
}

/// One sequence's part of a batched step: its session, its new tokens (at least one) and its
/// own options (which logits, routing mode and top-k).
pub struct Sequence<'a> {
    pub session: &'a mut Session,
    pub input: Input<'a>,
    pub opts: ForwardOptions,
}

/// Run the model over new tokens (or embeddings), appending them to the session's KV cache, and
/// leave the requested logits in `Session::logits()` ([n_out, vocab]).
pub fn forward(model: &Model, s: &mut Session, input: Input<'_>, opts: &ForwardOptions) -> Result<()> {
    forward_batch(model, &mut [Sequence { session: s, input, opts: *opts }])
}

/// One step over several sequences: each session gets exactly what `forward` on it alone
/// would give (its KV cache, position, logits, routing RNG and trace), but the weights are read
/// once for all rows. Every input is checked before anything changes: a failed batch leaves
/// every session as it was. The sessions must have been made for `model` (the KV shape is
/// checked; the caller guarantees it is the same model, not merely a same-shaped one) and share
/// one activation mode (`SessionOptions::quant_act`). The step runs on the model's worker pool
/// (`Model::pool`; for fewer than `HOLD_MAX_ROWS` rows its other workers are held awake through
/// the step, `Pool::step`); the caller's thread waits.
pub fn forward_batch(model: &Model, batch: &mut [Sequence<'_>]) -> Result<()> {
    let h = model.config().hidden_size;
    let rows = batch.iter().map(|q| q.input.len(h)).sum::<usize>();
    let run = || {
        check_batch(model, batch)?;
        // Each session keeps its recurrent state of the call's start, to undo the call.
        batch.iter_mut().for_each(|q| q.session.begin_call());
        let result =
            if rows > MAX_STEP_ROWS { chunked::forward_in_steps(model, batch) } else { one_step(model, batch, None) };
        if result.is_err() {
            batch.iter_mut().for_each(|q| q.session.abandon_call());
        }
        result
    };
    if rows < HOLD_MAX_ROWS {
        model.pool().step(run)?
    } else {
        model.pool().install(run)?
    }
}

/// Steps of fewer rows than this (decode, batched decode; where most products are
/// matrix-vector ones, `kernels::GEMM_MIN_ROWS`) hold the pool's workers awake between their
/// parallel regions. Such a step forks and joins a few dozen times in 10–40 ms, and a sleeping worker's
/// wake-up at each region cost olmoe-4l's 8- and 4-bit decode 2–11 % at two threads on an
/// Emerald Rapids VM (bf16: 1–7 %; DeepSeek-V2-Lite bf16's longer steps: none); a prefill
/// step's regions are long enough for the wake-ups not to show, and there holding measured from
/// −14 % to +18 % round to round (docs/performance.md, "Holding the workers").
const HOLD_MAX_ROWS: usize = kernels::GEMM_MIN_ROWS;

/// Most rows one step computes: a longer call runs as consecutive steps (`chunked`), so what a
/// step allocates (activations, expert groups, kernel scratch) is bounded whatever a caller
/// passes. A sequence fed in one call gets exactly what feeding it in pieces of this many rows
/// would give.
pub const MAX_STEP_ROWS: usize = 1024;

/// One step over the whole batch (at most `MAX_STEP_ROWS` rows), on the pool running the caller.
/// `call_end`: for a one-sequence step that is a piece of a longer call, the position after
/// that call's last token (LongRoPE chooses its factors by it); None: each sequence's own.
fn one_step(model: &Model, batch: &mut [Sequence<'_>], call_end: Option<usize>) -> Result<()> {
    model.check_unchanged()?;
    let (n, k) = check_batch(model, batch)?;
    // The memory the input asks for, allocated fallibly: a failure changes nothing a caller
    // can see (reserved KV positions and logits capacity are not state).
    reserve(model, batch)?;
    let x = {
        // x = embed(tokens)
        let mut step = Step::new(model, batch, n, k, call_end)?;
        // Nothing fails from here on.
        for (l, lw) in model.weights().layers.iter().enumerate() {
            // x += attention(norm(x))
            step.norm(&lw.attn_norm);
            step.attention(l, lw);
            step.residual();
            // x += moe_or_mlp(norm(x))
            step.norm(&lw.ffn_norm);
            match &lw.ffn {
                FfnWeights::Moe(mw) => step.moe(l, mw),
                FfnWeights::Dense(mlp) => step.mlp(mlp),
            }
            step.residual();
        }
        step.into_residual()
    };
    // logits = lm_head(norm(x))
    lm_head(model, &k, batch, &x);
    // hidden = norm(x), for the sequences that ask for it instead of logits
    final_hidden(model, batch, &x);
    model.buffers().give(x);
    model.buffers().settle();
    // A file rewritten under the mapping during the step: its results are discarded (positions
    // do not advance; the logits buffers hold nothing a caller may use).
    model.check_unchanged()?;
    for q in batch.iter_mut() {
        q.session.pos += q.input.len(model.config().hidden_size);
    }
    Ok(())
}

/// Logits of the rows each sequence asks for, in one matmul over all of them: the wanted rows
/// of `x` ([n, hidden]) are normed one after another ([m, hidden]); the first session's logits
/// buffer receives all m rows, hands the others theirs in order and keeps its own leading rows.
/// Grow every session's KV cache to hold its new tokens and the logits buffers to hold the
/// step's output rows, or fail with `Error::OutOfMemory` before anything changes.
fn reserve(model: &Model, batch: &mut [Sequence<'_>]) -> Result<()> {
    let (h, vocab) = (model.config().hidden_size, model.config().vocab_size);
    let rows = |q: &Sequence<'_>| wanted(q.opts.logits, 0..q.input.len(h)).len();
    let all: usize = batch.iter().map(rows).sum();
    for (i, q) in batch.iter_mut().enumerate() {
        // The first sequence's buffer holds every row's logits during the step (`lm_head`).
        let want = if i == 0 { all } else { rows(q) }.saturating_mul(vocab);
        let new = q.input.len(h);
        let s = &mut *q.session;
        s.kv.reserve(s.pos + new)?;
        let more = want.saturating_sub(s.logits.len());
        crate::fallible::reserve(&mut s.logits, more).map_err(|_| Error::OutOfMemory {
            what: format!("logits of {} rows", want / vocab.max(1)),
            bytes: (want as u64).saturating_mul(4),
        })?;
        if q.opts.logits == LogitsMode::Hidden {
            let want = new.saturating_mul(h);
            let more = want.saturating_sub(s.hidden.len());
            crate::fallible::reserve(&mut s.hidden, more).map_err(|_| Error::OutOfMemory {
                what: format!("hidden states of {new} rows"),
                bytes: (want as u64).saturating_mul(4),
            })?;
        }
    }
    Ok(())
}

/// Each `LogitsMode::Hidden` sequence's rows of `x` ([n, hidden]), normed by the final norm
/// into its session's hidden-state buffer ([its rows, hidden], capacity reserved).
fn final_hidden(model: &Model, batch: &mut [Sequence<'_>], x: &[f32]) {
    let c = model.config();
    let h = c.hidden_size;
    let mut row = 0;
    for q in batch.iter_mut() {
        let rows = row..row + q.input.len(h);
        row = rows.end;
        if q.opts.logits != LogitsMode::Hidden {
            continue;
        }
        let out = &mut q.session.hidden;
        out.resize(rows.len() * h, 0.0);
        step::norm_rows(c, &model.weights().norm, &x[rows.start * h..rows.end * h], out);
    }
}

fn lm_head(model: &Model, k: &Kernels, batch: &mut [Sequence<'_>], x: &[f32]) {
    let c = model.config();
    let w = model.weights();
    let (h, vocab) = (c.hidden_size, c.vocab_size);
    let out_rows = |q: &Sequence<'_>| wanted(q.opts.logits, 0..q.input.len(h)).len();
    let m: usize = batch.iter().map(out_rows).sum();
    let mut xn = vec![0f32; m * h];
    let (mut at, mut row) = (0, 0);
    for q in batch.iter() {
        let rows = row..row + q.input.len(h);
        row = rows.end;
        let want = wanted(q.opts.logits, rows);
        let dst = &mut xn[at * h..(at + want.len()) * h];
        step::norm_rows(c, &w.norm, &x[want.start * h..want.end * h], dst);
        at += want.len();
    }
    let Some((first, rest)) = batch.split_first_mut() else { return };
    let own = out_rows(first) * vocab;
    let all = &mut first.session.logits;
    all.resize(m * vocab, 0.0);
    if m > 0 {
        k.matmul(w.lm_head, &xn, m, all);
        if let Some(b) = w.lm_head_bias {
            kernels::add_bias(all, b);
        }
        if c.scales.logits_divisor != 1.0 {
            let d = c.scales.logits_divisor as f32;
            all.iter_mut().for_each(|v| *v /= d);
        }
    }
    let mut at = own;
    for q in rest.iter_mut() {
        let len = out_rows(q) * vocab;
        q.session.logits.clear();
        q.session.logits.extend_from_slice(&all[at..at + len]);
        at += len;
    }
    all.truncate(own);
}

/// The rows of `rows` whose logits `mode` asks for.
fn wanted(mode: LogitsMode, rows: Range<usize>) -> Range<usize> {
    match mode {
        LogitsMode::Last => rows.end - 1..rows.end,
        LogitsMode::All => rows,
        LogitsMode::None | LogitsMode::Hidden => rows.start..rows.start,
    }
}
