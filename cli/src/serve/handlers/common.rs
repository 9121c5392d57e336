//! Steps every generating endpoint shares: the serving engine, admission (503 when full), the
//! KV-budget claim (503 when it has no room), handing the jobs of a request's choices to the
//! scheduler, and collecting whole generations for non-stream replies.

use crate::serve::budget::{KvClaim, Refused};
use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::job::{Done, Event, Job, JobParams, Token};
use crate::serve::reqlog::{Attached, Record};
use crate::serve::state::AppState;
use colibri::forward::RoutingMode;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The engine new requests use, or 503 while the first model loads.
pub fn engine(state: &AppState) -> Result<Arc<Engine>, ApiError> {
    let e = state.slot.get().ok_or_else(ApiError::loading)?;
    if e.model.check_unchanged().is_err() {
        return Err(ApiError::model_changed());
    }
    Ok(e)
}

/// Claim the KV cache `n` jobs may reach at worst, at once: each one's positions (prompt +
/// max_tokens, within the context; what the scheduler sizes its session to) × KV bytes per
/// token, plus the recurrent state its session holds whatever its length (Qwen3-Next; 0
/// otherwise).
fn claim_kv(
    state: &AppState,
    engine: &Engine,
    prompt: &[u32],
    params: &JobParams,
    n: usize,
) -> Result<KvClaim, ApiError> {
    let tokens = (prompt.len() + params.decode.max_tokens).min(engine.n_ctx).max(1);
    let state_bytes = colibri::session::session_state_bytes(engine.model.config()) as u64;
    let need = (tokens as u64).saturating_mul(engine.kv_bytes_per_token as u64).saturating_add(state_bytes);
    claim_bytes(state, need.saturating_mul(n as u64), "max_tokens")
}

/// Claim `need` bytes of the KV budget: 503 when they do not fit now, 400 naming `param` when
/// they never can.
pub fn claim_bytes(state: &AppState, need: u64, param: &str) -> Result<KvClaim, ApiError> {
    state.kv.claim(need).map_err(|r| match r {
        Refused::NotNow { need, free } => ApiError::kv_budget_full(need, free),
        Refused::Never { need, total } => ApiError::request_too_large(
            param,
            format!(
                "this request may need {need} bytes of KV cache, more than the server's whole --kv-budget ({total})"
            ),
        ),
    })
}

/// Admit and queue a job; its events arrive on the returned channel.
pub fn submit(
    state: &AppState,
    engine: Arc<Engine>,
    prompt: Vec<u32>,
    params: JobParams,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    let mut rxs = submit_choices(state, engine, prompt, params, 1)?;
    rxs.pop().ok_or_else(|| ApiError::internal("no choice was queued"))
}

/// Admit and queue `n` independent choices of one prompt, all or none: choice i samples (and
/// routes) with the request's seeds + i, so it repeats as choice 0 of a request with those
/// seeds. Under top-k routing (the prompt's result does not depend on the routing seed) the
/// prompt is computed once: choices 1.. ride with choice 0 and continue from a copy of its
/// session. Their events arrive on the returned channels, in choice order.
pub fn submit_choices(
    state: &AppState,
    engine: Arc<Engine>,
    prompt: Vec<u32>,
    params: JobParams,
    n: usize,
) -> Result<Vec<UnboundedReceiver<Event>>, ApiError> {
    let tickets = (0..n).map(|_| state.admission.try_enter()).collect::<Option<Vec<_>>>().ok_or_else(ApiError::busy)?;
    let claims = claim_kv(state, &engine, &prompt, &params, n)?.split(n);
    let now = Instant::now();
    let mut rxs = Vec::with_capacity(n);
    let mut jobs = Vec::with_capacity(n);
    for (i, (ticket, kv)) in tickets.into_iter().zip(claims).enumerate() {
        let mut params = params.clone();
        params.decode.sampler.seed = params.decode.sampler.seed.wrapping_add(i as u64);
        params.routing_seed = params.routing_seed.wrapping_add(i as u64);
        let (tx, rx) = unbounded_channel();
        let job = Job {
            engine: engine.clone(),
            prompt: prompt.clone(),
            params,
            events: tx,
            enqueued: now,
            deadline: state.config.timeout.map(|t| now + t),
            ticket,
            kv,
            followers: Vec::new(),
            prefilled: None,
        };
        jobs.push(job);
        rxs.push(rx);
    }
    let shared = params.routing.mode == RoutingMode::TopK;
    let mut queued = jobs.into_iter();
    while let Some(mut job) = queued.next() {
        if shared {
            job.followers = queued.by_ref().collect();
        }
        if !state.scheduler.submit(job) {
            return Err(ApiError::internal("the scheduler stopped"));
        }
    }
    Ok(rxs)
}

/// Wait for every choice's whole generation (in choice order).
pub async fn collect_all(rxs: Vec<UnboundedReceiver<Event>>) -> Result<Vec<Collected>, ApiError> {
    futures_util::future::join_all(rxs.into_iter().map(collect)).await.into_iter().collect()
}

/// A finished generation.
pub struct Collected {
    pub text: String,
    pub tokens: Vec<Token>,
    pub done: Done,
}

/// Wait for the whole generation.
pub async fn collect(mut rx: UnboundedReceiver<Event>) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(t) => {
                text.push_str(&t.text);
                if t.id.is_some() {
                    tokens.push(t);
                }
            }
            Event::Done(done) => return Ok(Collected { text, tokens, done }),
            Event::Failed(msg) => return Err(ApiError::internal(msg)),
        }
    }
    Err(ApiError::internal("the scheduler stopped"))
}

/// The OpenAI envelope around `choices`: {id, object, created, model, choices}, plus `usage`
/// when `with_usage` (always for whole responses; for stream chunks when
/// `stream_options.include_usage` asks, null until the last chunk).
pub fn envelope(
    object: &str,
    id: &str,
    created: u64,
    model: &str,
    choices: serde_json::Value,
    usage: Option<serde_json::Value>,
    with_usage: bool,
) -> serde_json::Value {
    let mut v = serde_json::json!({"id": id, "object": object, "created": created, "model": model, "choices": choices});
    if with_usage {
        v["usage"] = usage.unwrap_or(serde_json::Value::Null);
    }
    v
}

/// Add the MoE extension `routing` to a whole choice when its tokens carry it.
pub fn with_routing(choice: &mut serde_json::Value, tokens: &[Token]) {
    if let Some(r) = crate::serve::openai::routing(tokens) {
        choice["routing"] = r;
    }
}

/// A whole (non-stream) response: `choices` in the OpenAI envelope with the request's usage
/// (the prompt once, every choice's completion), its record attached for the request log.
pub fn whole_response(
    object: &str,
    engine: &Engine,
    created: u64,
    choices: Vec<serde_json::Value>,
    record: Record,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let usage = Some(crate::serve::openai::usage(record.prompt_tokens, record.completion_tokens, record.cached_tokens));
    let body = envelope(object, &record.id, created, &engine.id, serde_json::Value::Array(choices), usage, true);
    let mut resp = axum::Json(body).into_response();
    resp.extensions_mut().insert(Attached(record));
    resp
}
