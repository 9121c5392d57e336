//! `POST /v1/completions`: a text (or token-id) prompt continued, whole or streamed as SSE.

use super::common::{collect, engine, envelope, submit};
use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::job::Event;
use crate::serve::known;
use crate::serve::openai::{completion_logprobs, new_id, now, routing, usage};
use crate::serve::params::{
    check_prompt, job_params, read_object, request_cap, tokenize, Defaults, Fields, MAX_TOP_LOGPROBS,
};
use crate::serve::sse;
use crate::serve::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;

/// OpenAI's default for completions.
const DEFAULT_MAX_TOKENS: usize = 16;

/// `prompt`: a string, a list of one string, a list of token ids, or a list of one such list.
fn prompt_ids(f: &Fields<'_>, e: &Engine, cap: usize) -> Result<Vec<u32>, ApiError> {
    let bad = || ApiError::invalid("prompt", "prompt must be a string, a token-id list, or a list of one of these");
    let mut v = f.get("prompt").ok_or_else(|| ApiError::invalid("prompt", "prompt is required"))?;
    if let Value::Array(a) = v {
        if a.len() == 1 && (a[0].is_string() || a[0].is_array()) {
            v = &a[0];
        } else if a.iter().any(|x| !x.is_number()) {
            return Err(ApiError::invalid("prompt", "only one prompt per request is supported"));
        }
    }
    match v {
        Value::String(s) => tokenize(e, "prompt", s, true, cap),
        Value::Array(a) => {
            let vocab = e.tokenizer.vocab_size().min(e.model.config().vocab_size) as u64;
            let ids = a
                .iter()
                .map(|x| x.as_u64().filter(|&i| i < vocab).map(|i| i as u32).ok_or_else(bad))
                .collect::<Result<Vec<u32>, _>>()?;
            check_prompt(e, "prompt", ids, cap)
        }
        _ => Err(bad()),
    }
}

/// `stream_options.include_usage`.
pub fn include_usage(f: &Fields<'_>) -> Result<bool, ApiError> {
    match f.get("stream_options") {
        None => Ok(false),
        Some(Value::Object(o)) => Fields(o).bool("include_usage"),
        Some(_) => Err(ApiError::invalid("stream_options", "stream_options must be an object")),
    }
}

pub async fn completions(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let obj = read_object(body, &state.config).await?;
    known::check(&obj, known::COMPLETIONS)?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine)?;
    if f.bool("echo")? {
        return Err(ApiError::invalid("echo", "echo is not supported"));
    }
    if f.uint("best_of", 1 << 20)?.is_some_and(|n| n > 1) {
        return Err(ApiError::invalid("best_of", "only best_of = 1 is supported"));
    }
    let cap = request_cap(&state.config, &engine);
    let prompt = prompt_ids(&f, &engine, cap)?;
    let mut params = job_params(&f, &Defaults::openai(Some(DEFAULT_MAX_TOKENS)), &engine, prompt.len(), cap)?;
    crate::serve::format::apply(&f, &engine, &mut params)?;
    params.logprobs = f.uint("logprobs", MAX_TOP_LOGPROBS)?.map(|n| n as usize);
    let stream = f.bool("stream")?;
    let with_usage = include_usage(&f)?;
    let rx = submit(&state, engine.clone(), prompt, params)?;
    let (id, created) = (new_id("cmpl"), now());
    if stream {
        return Ok(stream_response(rx, engine, id, created, with_usage));
    }
    let c = collect(rx).await?;
    let mut choice = json!({"index": 0, "text": c.text, "logprobs": null, "finish_reason": c.done.finish.openai()});
    if f.get("logprobs").is_some() {
        choice["logprobs"] = completion_logprobs(&engine, &c.tokens, 0);
    }
    if let Some(r) = routing(&c.tokens) {
        choice["routing"] = r;
    }
    let body = envelope("text_completion", &id, created, &engine.id, json!([choice]), Some(usage(&c.done)), true);
    Ok(axum::Json(body).into_response())
}

fn stream_response(
    rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    engine: Arc<Engine>,
    id: String,
    created: u64,
    with_usage: bool,
) -> Response {
    let eng = engine.clone();
    let chunk = move |choices: Value, usage: Option<Value>| {
        envelope("text_completion", &id, created, &engine.id, choices, usage, with_usage)
    };
    let mut offset = 0;
    sse::response(rx, Vec::new(), move |ev| match ev {
        Event::Token(t) => {
            if t.text.is_empty() && t.logprob.is_none() && t.routing.is_none() {
                return (Vec::new(), false);
            }
            let mut choice = json!({"index": 0, "text": t.text, "logprobs": null, "finish_reason": null});
            if t.logprob.is_some() {
                choice["logprobs"] = completion_logprobs(&eng, std::slice::from_ref(&t), offset);
            }
            if let Some(r) = &t.routing {
                choice["routing"] = json!([r]);
            }
            offset += t.text.len();
            (vec![chunk(json!([choice]), None)], false)
        }
        Event::Done(d) => {
            let last = json!([{"index": 0, "text": "", "logprobs": null, "finish_reason": d.finish.openai()}]);
            let mut frames = vec![chunk(last, None)];
            if with_usage {
                frames.push(chunk(json!([]), Some(usage(&d))));
            }
            (frames, true)
        }
        Event::Failed(_) => (Vec::new(), true),
    })
}
