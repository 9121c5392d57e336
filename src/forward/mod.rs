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
//! for each layer:  x += attention(rmsnorm(x));  x += ffn_or_moe(rmsnorm(x))
//! logits = lm_head(rmsnorm(x))

mod attention;
mod check;
mod experts;
mod ffn;
mod rope;
mod router;

pub use check::check_routing;
pub use router::{Routes, RoutingMode, RoutingOptions};

use crate::error::{Error, Result};
use crate::kernels;
use crate::model::{FfnWeights, Model};
use crate::rng::Rng;
use crate::state::{RouteRecord, Session};
use attention::{attention, AttnBuffers, SeqKv};
use check::{check_input, in_sequence};
use ffn::Mlp;
use std::ops::Range;

/// What the forward pass consumes.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// Token ids (each < vocab_size).
    Tokens(&'a [u32]),
    /// Hidden states [n, hidden_size] fed instead of token embeddings.
    Embeddings(&'a [f32]),
}

impl Input<'_> {
    fn len(&self, hidden: usize) -> usize {
        match self {
            Input::Tokens(t) => t.len(),
            Input::Embeddings(e) => e.len() / hidden.max(1),
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
/// checked; the caller guarantees it is the same model, not merely a same-shaped one).
/// Scratch buffers are borrowed from the first session for the step.
pub fn forward_batch(model: &Model, batch: &mut [Sequence<'_>]) -> Result<()> {
    let c = model.config();
    let w = model.weights();
    let (h, eps, n_experts) = (c.hidden_size, c.rms_norm_eps as f32, c.moe.n_experts);
    if batch.is_empty() {
        return Err(Error::InvalidArgument { reason: "empty batch: at least one sequence is needed".into() });
    }
    let mut n = 0;
    for (i, q) in batch.iter().enumerate() {
        n += check_input(model, q.session, &q.input, &q.opts).map_err(|e| in_sequence(e, i, batch.len()))?;
    }

    // Nothing fails from here on.
    let rope = rope::Rope::new(c);
    let mut sc = std::mem::take(&mut batch[0].session.scratch);
    sc.ensure(c, n);
    sc.cos.clear();
    sc.sin.clear();
    // Per sequence: its rows of the batch, its attention state, its routing state.
    let mut kvs = Vec::with_capacity(batch.len());
    let mut lanes = Vec::with_capacity(batch.len());
    let mut row = 0;
    for q in batch.iter_mut() {
        let rows = row..row + q.input.len(h);
        row = rows.end;
        let s: &mut Session = q.session;
        // x = embed(tokens)
        let x = &mut sc.x[rows.start * h..rows.end * h];
        match q.input {
            Input::Tokens(ids) => {
                for (xt, &id) in x.chunks_exact_mut(h).zip(ids) {
                    kernels::row_to_f32(w.embed.mat(), id as usize, h, xt);
                }
            }
            Input::Embeddings(e) => x.copy_from_slice(e),
        }
        rope.extend_table(s.pos, rows.len(), &mut sc.cos, &mut sc.sin);
        let k = q.opts.routing.top_k.unwrap_or(c.moe.top_k); // validated by check_input
        lanes.push(Lane {
            k,
            mode: q.opts.routing.mode,
            rng: &mut s.rng,
            trace: s.trace.as_mut(),
            pos0: s.pos,
            rows: rows.clone(),
        });
        kvs.push(SeqKv { kv: &mut s.kv, pos0: s.pos, rows });
    }

    let mut gate = Vec::new();
    let mut routes = Routes::default();
    for (l, lw) in w.layers.iter().enumerate() {
        let sc = &mut sc;
        // x += attention(rmsnorm(x))
        kernels::rmsnorm(&sc.x[..n * h], lw.attn_norm.mat(), eps, &mut sc.xn[..n * h]);
        let bufs = AttnBuffers {
            xn: &sc.xn[..n * h],
            cos: &sc.cos,
            sin: &sc.sin,
            q: &mut sc.q,
            k: &mut sc.k,
            v: &mut sc.v,
            att: &mut sc.att,
            out: &mut sc.out,
        };
        attention(c, lw, l, &rope, &mut kvs, bufs);
        add_into(&mut sc.x[..n * h], &sc.out[..n * h]);

        // x += moe_or_mlp(rmsnorm(x))
        kernels::rmsnorm(&sc.x[..n * h], lw.ffn_norm.mat(), eps, &mut sc.xn[..n * h]);
        let xn = &sc.xn[..n * h];
        match &lw.ffn {
            FfnWeights::Moe(mw) => {
                // Router logits for every row at once; each sequence then chooses its experts
                // with its own k, mode and RNG; the experts run once over all rows.
                router::logits(mw.router.mat(), n_experts, h, xn, n, &mut gate);
                routes.clear();
                for lane in lanes.iter_mut() {
                    let r = &lane.rows;
                    let mut choice = router::Choice {
                        k: lane.k,
                        renormalise: c.moe.norm_topk_prob,
                        mode: lane.mode,
                        rng: &mut *lane.rng,
                    };
                    router::select(&gate[r.start * n_experts..r.end * n_experts], n_experts, &mut choice, &mut routes);
                    if let Some(trace) = lane.trace.as_deref_mut() {
                        record(trace, &routes, r.clone(), l, lane.pos0);
                    }
                }
                experts::moe(c, mw, xn, n, &routes, &mut sc.out[..n * h]);
            }
            FfnWeights::Dense(d) => {
                let mlp = Mlp { gate: d.gate.mat(), up: d.up.mat(), down: d.down.mat(), ffn: c.dense_ffn, hidden: h };
                mlp.forward(xn, n, &mut sc.out[..n * h]);
            }
        }
        add_into(&mut sc.x[..n * h], &sc.out[..n * h]);
    }
    drop((kvs, lanes));

    // logits = lm_head(rmsnorm(x))
    lm_head(model, batch, &sc.x[..n * h], &mut sc.xn);

    let (first, rest) = batch.split_first_mut().expect("the batch is not empty");
    first.session.scratch = sc;
    for q in std::iter::once(first).chain(rest) {
        q.session.pos += q.input.len(h);
    }
    Ok(())
}

/// Logits of the rows each sequence asks for, in one matmul over all of them: the wanted rows
/// of `x` ([n, hidden]) are normed into `xn` one after another ([m, hidden]); the first
/// session's logits buffer receives all m rows, hands the others theirs in order and keeps its
/// own leading rows.
fn lm_head(model: &Model, batch: &mut [Sequence<'_>], x: &[f32], xn: &mut [f32]) {
    let c = model.config();
    let w = model.weights();
    let (h, vocab) = (c.hidden_size, c.vocab_size);
    let mut m = 0;
    let mut row = 0;
    for q in batch.iter() {
        let rows = row..row + q.input.len(h);
        row = rows.end;
        let want = wanted(q.opts.logits, rows);
        kernels::rmsnorm(
            &x[want.start * h..want.end * h],
            w.norm.mat(),
            c.rms_norm_eps as f32,
            &mut xn[m * h..(m + want.len()) * h],
        );
        m += want.len();
    }
    let out_rows = |q: &Sequence<'_>| wanted(q.opts.logits, 0..q.input.len(h)).len();
    let Some((first, rest)) = batch.split_first_mut() else { return };
    let own = out_rows(first) * vocab;
    let all = &mut first.session.logits;
    all.resize(m * vocab, 0.0);
    if m > 0 {
        kernels::matmul(w.lm_head.mat(), vocab, h, &xn[..m * h], m, all);
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

/// One sequence's routing state for a step (borrowed from its session).
struct Lane<'s> {
    k: usize,
    mode: RoutingMode,
    rng: &'s mut Rng,
    trace: Option<&'s mut Vec<RouteRecord>>,
    pos0: usize,
    rows: Range<usize>,
}

/// The rows of `rows` whose logits `mode` asks for.
fn wanted(mode: LogitsMode, rows: Range<usize>) -> Range<usize> {
    match mode {
        LogitsMode::Last => rows.end - 1..rows.end,
        LogitsMode::All => rows,
        LogitsMode::None => rows.start..rows.start,
    }
}

fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// Append the routing of one sequence's rows `rows` (batch rows; positions from `pos0`).
fn record(trace: &mut Vec<RouteRecord>, routes: &Routes, rows: Range<usize>, layer: usize, pos0: usize) {
    let first = rows.start;
    for t in rows {
        let (experts, weights) = routes.row(t);
        trace.push(RouteRecord {
            position: pos0 + t - first,
            layer,
            experts: experts.to_vec(),
            weights: weights.to_vec(),
        });
    }
}
