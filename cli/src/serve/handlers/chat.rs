//! `POST /v1/chat/completions`: messages (and tools) rendered by the model's chat template
//! (serve/chat_input.rs), answered whole or streamed as SSE (the first delta carries the role,
//! the last the finish_reason), the text split into content, reasoning and tool calls
//! (serve/chat_reply.rs).

use super::common::{collect, engine, envelope, submit};
use super::completions::include_usage;
use crate::serve::chat_input;
use crate::serve::chat_reply::Reply;
use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::job::Event;
use crate::serve::known;
use crate::serve::openai::{chat_logprobs, new_id, now, routing, usage};
use crate::serve::params::{check_prompt, job_params, read_object, request_cap, Defaults, Fields, MAX_TOP_LOGPROBS};
use crate::serve::sse;
use crate::serve::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;

pub async fn chat(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let obj = read_object(body, &state.config).await?;
    known::check(&obj, known::CHAT)?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine)?;
    let input = chat_input::read(&f, &engine)?;
    let total: usize = input.messages.iter().map(|m| m.text_len()).sum();
    if total > crate::serve::params::prompt_byte_cap(&engine) {
        return Err(ApiError::invalid("messages", "the conversation is too long for the context"));
    }
    let ids = engine
        .encode_chat_with(&input.messages, Some(&input.extra), state.config.message_specials)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let cap = request_cap(&state.config, &engine);
    let prompt = check_prompt(&engine, "messages", ids, cap)?;
    let defaults = Defaults::openai(Some(state.config.default_max_tokens));
    let mut params = job_params(&f, &defaults, &engine, prompt.len(), cap)?;
    let top = f.uint("top_logprobs", MAX_TOP_LOGPROBS)?;
    if f.bool("logprobs")? {
        params.logprobs = Some(top.unwrap_or(0) as usize);
    } else if top.is_some() {
        return Err(ApiError::invalid("top_logprobs", "top_logprobs needs logprobs: true"));
    }
    let stream = f.bool("stream")?;
    let with_usage = include_usage(&f)?;
    let (id, created) = (new_id("chatcmpl"), now());
    let mut reply = Reply::new(&engine, &input, &prompt, params.decode.stop.clone(), &id);
    let rx = submit(&state, engine.clone(), prompt, params)?;
    if stream {
        return Ok(stream_response(rx, engine, reply, id, created, with_usage));
    }
    let c = collect(rx).await?;
    let all = reply.whole(&c.text, &c.tokens);
    let mut choice = json!({
        "index": 0,
        "message": reply.message(all),
        "logprobs": null,
        "finish_reason": reply.finish_reason(c.done.finish),
    });
    if f.bool("logprobs")? {
        choice["logprobs"] = chat_logprobs(&engine, &c.tokens);
    }
    if let Some(r) = routing(&c.tokens) {
        choice["routing"] = r;
    }
    let body = envelope("chat.completion", &id, created, &engine.id, json!([choice]), Some(usage(&c.done)), true);
    Ok(axum::Json(body).into_response())
}

fn stream_response(
    rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    engine: Arc<Engine>,
    mut reply: Reply,
    id: String,
    created: u64,
    with_usage: bool,
) -> Response {
    let eng = engine.clone();
    let chunk = move |choices: Value, usage: Option<Value>| {
        envelope("chat.completion.chunk", &id, created, &engine.id, choices, usage, with_usage)
    };
    let first = chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]),
        None,
    );
    sse::response(rx, vec![first], move |ev| match ev {
        Event::Token(t) => {
            let parts = reply.token(&t);
            let delta = reply.delta(&parts);
            if delta.is_none() && t.logprob.is_none() && t.routing.is_none() {
                return (Vec::new(), false);
            }
            let delta = delta.unwrap_or_else(|| json!({"content": ""}));
            let mut choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": null});
            if t.logprob.is_some() {
                choice["logprobs"] = chat_logprobs(&eng, std::slice::from_ref(&t));
            }
            if let Some(r) = &t.routing {
                choice["routing"] = json!([r]);
            }
            (vec![chunk(json!([choice]), None)], false)
        }
        Event::Done(d) => {
            let mut frames = Vec::new();
            let parts = reply.done();
            if let Some(delta) = reply.delta(&parts) {
                let rest = json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]);
                frames.push(chunk(rest, None));
            }
            let why = reply.finish_reason(d.finish);
            frames.push(chunk(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": why}]), None));
            if with_usage {
                frames.push(chunk(json!([]), Some(usage(&d))));
            }
            (frames, true)
        }
        Event::Failed(_) => (Vec::new(), true),
    })
}
