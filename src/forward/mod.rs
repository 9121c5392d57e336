//! The forward pass of every supported family: the layer loop and nothing else. Family
//! differences are Config fields read by the helpers (attention, router, experts, ffn).
//!
//! x = embed(tokens)
//! for each layer:  x += attention(rmsnorm(x));  x += ffn_or_moe(rmsnorm(x))
//! logits = lm_head(rmsnorm(x))

mod attention;
mod experts;
mod ffn;
mod rope;
mod router;

pub use router::{Routes, RoutingMode, RoutingOptions};

use crate::error::{Error, Result};
use crate::kernels;
use crate::model::{FfnWeights, Model};
use crate::state::{RouteRecord, Session};
use attention::{attention, AttnBuffers};
use ffn::Mlp;

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

/// Check routing options against a model (top-k override within 1..=n_experts).
pub fn check_routing(c: &crate::model::Config, r: &RoutingOptions) -> Result<()> {
    router::effective_top_k(r, c.moe.n_experts, c.moe.top_k).map(|_| ())
}

/// Check the input before any state changes, so a failed call leaves the session as it was.
fn check_input(model: &Model, s: &Session, input: &Input<'_>, opts: &ForwardOptions) -> Result<usize> {
    let c = model.config();
    let n = input.len(c.hidden_size);
    match input {
        Input::Tokens(t) => {
            if let Some((i, &id)) = t.iter().enumerate().find(|(_, &id)| id as usize >= c.vocab_size) {
                return Err(Error::InvalidArgument {
                    reason: format!("token id {id} at index {i} is outside the vocabulary (size {})", c.vocab_size),
                });
            }
        }
        Input::Embeddings(e) => {
            if e.len() % c.hidden_size != 0 {
                return Err(Error::InvalidArgument {
                    reason: format!("embeddings length {} is not a multiple of hidden_size {}", e.len(), c.hidden_size),
                });
            }
            if e.iter().any(|v| !v.is_finite()) {
                return Err(Error::InvalidArgument { reason: "embeddings hold NaN or Inf".into() });
            }
        }
    }
    if n == 0 {
        return Err(Error::InvalidArgument { reason: "empty input: at least one token is needed".into() });
    }
    if s.pos + n > s.n_ctx() {
        return Err(Error::InvalidArgument {
            reason: format!(
                "context full: {} cached + {n} new tokens exceed the context of {} tokens",
                s.pos,
                s.n_ctx()
            ),
        });
    }
    router::effective_top_k(&opts.routing, c.moe.n_experts, c.moe.top_k)?;
    Ok(n)
}

/// Run the model over new tokens (or embeddings), appending them to the session's KV cache, and
/// leave the requested logits in `Session::logits()` ([n_out, vocab]).
pub fn forward(model: &Model, s: &mut Session, input: Input<'_>, opts: &ForwardOptions) -> Result<()> {
    let n = check_input(model, s, &input, opts)?;
    let c = model.config();
    let w = model.weights();
    let (h, eps) = (c.hidden_size, c.rms_norm_eps as f32);
    let k = router::effective_top_k(&opts.routing, c.moe.n_experts, c.moe.top_k)?;
    let pos0 = s.pos;
    s.scratch.ensure(c, n);

    // x = embed(tokens)
    match input {
        Input::Tokens(ids) => {
            for (t, &id) in ids.iter().enumerate() {
                kernels::row_to_f32(w.embed.mat(), id as usize, h, &mut s.scratch.x[t * h..(t + 1) * h]);
            }
        }
        Input::Embeddings(e) => s.scratch.x[..n * h].copy_from_slice(e),
    }
    let rope = rope::Rope::new(c);
    let (cos, sin) = rope.table(pos0, n);

    for (l, lw) in w.layers.iter().enumerate() {
        let sc = &mut s.scratch;
        // x += attention(rmsnorm(x))
        kernels::rmsnorm(&sc.x[..n * h], lw.attn_norm.mat(), eps, &mut sc.xn[..n * h]);
        let bufs = AttnBuffers {
            xn: &sc.xn[..n * h],
            q: &mut sc.q,
            k: &mut sc.k,
            v: &mut sc.v,
            att: &mut sc.att,
            out: &mut sc.out,
        };
        attention(c, lw, l, &rope, &cos, &sin, &mut s.kv, pos0, n, bufs);
        add_into(&mut sc.x[..n * h], &sc.out[..n * h]);

        // x += moe_or_mlp(rmsnorm(x))
        kernels::rmsnorm(&sc.x[..n * h], lw.ffn_norm.mat(), eps, &mut sc.xn[..n * h]);
        match &lw.ffn {
            FfnWeights::Moe(mw) => {
                let routes = router::route(
                    mw.router.mat(),
                    c.moe.n_experts,
                    h,
                    &sc.xn[..n * h],
                    n,
                    k,
                    c.moe.norm_topk_prob,
                    opts.routing.mode,
                    &mut s.rng,
                );
                if let Some(trace) = s.trace.as_mut() {
                    record(trace, &routes, l, pos0, n);
                }
                experts::moe(c, mw, &sc.xn[..n * h], n, &routes, &mut sc.out[..n * h]);
            }
            FfnWeights::Dense(d) => {
                let mlp = Mlp { gate: d.gate.mat(), up: d.up.mat(), down: d.down.mat(), ffn: c.dense_ffn, hidden: h };
                mlp.forward(&sc.xn[..n * h], n, &mut sc.out[..n * h]);
            }
        }
        add_into(&mut sc.x[..n * h], &sc.out[..n * h]);
    }

    // logits = lm_head(rmsnorm(x)) for the requested rows
    let rows: std::ops::Range<usize> = match opts.logits {
        LogitsMode::Last => n - 1..n,
        LogitsMode::All => 0..n,
        LogitsMode::None => 0..0,
    };
    let m = rows.len();
    let sc = &mut s.scratch;
    kernels::rmsnorm(&sc.x[rows.start * h..rows.end * h], w.norm.mat(), eps, &mut sc.xn[..m * h]);
    s.logits.resize(m * c.vocab_size, 0.0);
    if m > 0 {
        kernels::matmul(w.lm_head.mat(), c.vocab_size, h, &sc.xn[..m * h], m, &mut s.logits);
    }
    s.pos += n;
    Ok(())
}

fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

fn record(trace: &mut Vec<RouteRecord>, routes: &Routes, layer: usize, pos0: usize, n: usize) {
    let k = routes.k;
    for t in 0..n {
        trace.push(RouteRecord {
            position: pos0 + t,
            layer,
            experts: routes.experts[t * k..(t + 1) * k].to_vec(),
            weights: routes.weights[t * k..(t + 1) * k].to_vec(),
        });
    }
}
