//! `POST /v1/embeddings`: each input (a string, or token ids) → one vector, the model's
//! final-normed hidden states pooled as `--pooling` says and L2-normalised (`colibri::embed`),
//! as floats or base64 (little-endian f32). The work runs off the async threads on the model's
//! worker pool, in sessions of its own, never in the scheduler's: generation sessions are not
//! touched. Inputs are embedded in groups of at most one request's tokens (--max-request-tokens,
//! the context), one batched forward per group; the request holds an admission place and the KV
//! budget of its largest group while it runs, and stops between groups when its client is gone
//! or its --timeout has passed.

use super::common::{claim_bytes, engine};
use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::known;
use crate::serve::params::{check_prompt, read_object, request_cap, tokenize, Fields};
use crate::serve::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use colibri::embed::{self, EmbedOptions};
use colibri::Error;
use serde_json::{json, Value};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Most inputs in one request (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// `input`: a string, a list of strings, a list of token ids, or a list of token-id lists.
fn inputs(f: &Fields<'_>, e: &Engine, cap: usize) -> Result<Vec<Vec<u32>>, ApiError> {
    let bad =
        || ApiError::invalid("input", "input must be a string, a list of strings, a token-id list or a list of them");
    let ids = |a: &[Value]| {
        let vocab = e.tokenizer.vocab_size().min(e.model.config().vocab_size) as u64;
        let ids = a.iter().map(|x| x.as_u64().filter(|&i| i < vocab).map(|i| i as u32).ok_or_else(bad));
        check_prompt(e, "input", ids.collect::<Result<Vec<u32>, _>>()?, cap)
    };
    let one = |v: &Value| match v {
        Value::String(s) => tokenize(e, "input", s, true, cap),
        Value::Array(a) if a.iter().all(Value::is_number) => ids(a),
        _ => Err(bad()),
    };
    match f.get("input") {
        None => Err(ApiError::invalid("input", "input is required")),
        Some(Value::String(_)) => Ok(vec![one(&f.0["input"])?]),
        Some(Value::Array(a)) if a.is_empty() => Err(ApiError::invalid("input", "input must not be empty")),
        Some(Value::Array(a)) if a.len() > MAX_INPUTS => {
            Err(ApiError::invalid("input", format!("at most {MAX_INPUTS} inputs per request")))
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => Ok(vec![ids(a)?]),
        Some(Value::Array(a)) => a.iter().map(one).collect(),
        Some(_) => Err(bad()),
    }
}

/// Consecutive inputs packed into groups of at most `cap` tokens (each input alone fits).
fn groups(inputs: &[Vec<u32>], cap: usize) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut tokens = 0;
    for (i, x) in inputs.iter().enumerate() {
        match out.last_mut() {
            Some(g) if tokens + x.len() <= cap => {
                g.end = i + 1;
                tokens += x.len();
            }
            _ => {
                out.push(i..i + 1);
                tokens = x.len();
            }
        }
    }
    out
}

/// KV-cache bytes a group's sessions reach: its tokens, plus each session's recurrent state.
fn group_bytes(e: &Engine, inputs: &[Vec<u32>]) -> u64 {
    let tokens: usize = inputs.iter().map(Vec::len).sum();
    let state = colibri::session::session_state_bytes(e.model.config()) as u64;
    (tokens as u64)
        .saturating_mul(e.kv_bytes_per_token as u64)
        .saturating_add(state.saturating_mul(inputs.len() as u64))
}

/// The checked request: its inputs, their groups, the encoding.
struct Request {
    inputs: Vec<Vec<u32>>,
    groups: Vec<Range<usize>>,
    base64: bool,
}

fn request(f: &Fields<'_>, e: &Engine, cap: usize) -> Result<Request, ApiError> {
    let base64 = match f.str("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(_) => return Err(ApiError::invalid("encoding_format", "encoding_format must be \"float\" or \"base64\"")),
    };
    let h = e.model.config().hidden_size;
    if let Some(d) = f.uint("dimensions", u64::MAX)? {
        if d != h as u64 {
            let msg = format!("dimensions = {d}: this model's embeddings have {h} (they cannot be shortened)");
            return Err(ApiError::invalid("dimensions", msg));
        }
    }
    let inputs = inputs(f, e, cap)?;
    let groups = groups(&inputs, cap);
    Ok(Request { inputs, groups, base64 })
}

/// Sets the flag when the handler's future is dropped (the client went away).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn engine_error(e: Error) -> ApiError {
    match e {
        Error::ModelChanged { .. } => ApiError::model_changed(),
        other => ApiError::internal(other.to_string()),
    }
}

/// Embed every group in turn (on the calling, blocking thread); stop between groups when
/// `cancel` is set or `deadline` has passed.
fn run(
    e: &Engine,
    r: &Request,
    opts: &EmbedOptions,
    deadline: Option<Instant>,
    cancel: &AtomicBool,
) -> Result<Vec<Vec<f32>>, ApiError> {
    let mut out = Vec::with_capacity(r.inputs.len());
    for g in &r.groups {
        if cancel.load(Ordering::Relaxed) {
            return Err(ApiError::internal("the client went away"));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let msg = "the request took longer than the server's --timeout";
            return Err(ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: Some("timeout"),
                ..ApiError::internal(msg)
            });
        }
        let refs: Vec<&[u32]> = r.inputs[g.clone()].iter().map(Vec::as_slice).collect();
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| embed::embed(&e.model, &refs, opts)))
            .unwrap_or_else(|_| Err(Error::InvalidArgument { reason: "the engine panicked".into() }));
        out.extend(step.map_err(engine_error)?);
    }
    Ok(out)
}

/// One `data` entry: the vector as a JSON list of numbers, or base64 of its little-endian f32s.
fn entry(index: usize, v: &[f32], base64: bool) -> Value {
    let embedding = if base64 {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        json!(base64::encode(bytes))
    } else {
        json!(v)
    };
    json!({"object": "embedding", "index": index, "embedding": embedding})
}

pub async fn embeddings(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let obj = read_object(body, &state.config).await?;
    known::check_own(&obj, known::EMBEDDINGS)?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine, &state.config.aliases)?;
    let cap = request_cap(&state.config, &engine);
    let r = request(&f, &engine, cap)?;
    let mut ticket = state.admission.try_enter().ok_or_else(ApiError::busy)?;
    let need = r.groups.iter().map(|g| group_bytes(&engine, &r.inputs[g.clone()])).max().unwrap_or(0);
    let mut claim = claim_bytes(&state, need, "input")?;
    let opts = EmbedOptions { pooling: state.config.pooling, ..EmbedOptions::default() };
    let deadline = state.config.timeout.map(|t| Instant::now() + t);
    let cancel = Arc::new(AtomicBool::new(false));
    let _on_drop = CancelOnDrop(cancel.clone());
    let (e, flag) = (engine.clone(), cancel.clone());
    let work = tokio::task::spawn_blocking(move || {
        let out = run(&e, &r, &opts, deadline, &flag);
        // The place and the memory go back when the work ends, not when the client leaves.
        claim.release();
        ticket.release();
        out.map(|v| (v, r))
    });
    let (vectors, r) = work.await.map_err(|_| ApiError::internal("the embedding task failed"))??;
    let data: Vec<Value> = vectors.iter().enumerate().map(|(i, v)| entry(i, v, r.base64)).collect();
    let tokens: usize = r.inputs.iter().map(Vec::len).sum();
    let usage = json!({"prompt_tokens": tokens, "total_tokens": tokens});
    let body = json!({"object": "list", "data": data, "model": engine.id, "usage": usage});
    Ok(axum::Json(body).into_response())
}
