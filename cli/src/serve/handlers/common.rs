//! Steps every generating endpoint shares: the serving engine, admission (503 when full),
//! handing the job to the scheduler, and collecting a whole generation for non-stream replies.

use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::job::{Done, Event, Job, JobParams, Token};
use crate::serve::state::AppState;
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

/// Admit and queue a job; its events arrive on the returned channel.
pub fn submit(
    state: &AppState,
    engine: Arc<Engine>,
    prompt: Vec<u32>,
    params: JobParams,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    let ticket = state.admission.try_enter().ok_or_else(ApiError::busy)?;
    let (tx, rx) = unbounded_channel();
    let now = Instant::now();
    let job = Job {
        engine,
        prompt,
        params,
        events: tx,
        enqueued: now,
        deadline: state.config.timeout.map(|t| now + t),
        ticket,
    };
    if !state.scheduler.submit(job) {
        return Err(ApiError::internal("the scheduler stopped"));
    }
    Ok(rx)
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
