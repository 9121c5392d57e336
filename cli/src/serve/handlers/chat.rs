//! `POST /v1/chat/completions`: messages rendered by the model's chat template, answered whole
//! or streamed as SSE (the first delta carries the role, the last the finish_reason).

use super::common::{collect, engine, envelope, submit};
use super::completions::include_usage;
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
use colibri::tokenizer::ChatMessage;
use serde_json::{json, Value};
use std::sync::Arc;

/// Most messages in one conversation.
const MAX_MESSAGES: usize = 1024;

/// `messages`: [{role, content: string | [{type: "text", text}] | null}].
fn messages(f: &Fields<'_>) -> Result<Vec<ChatMessage>, ApiError> {
    let bad = |m: &str| ApiError::invalid("messages", m.to_string());
    let list = match f.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) | None => return Err(bad("messages must be a non-empty list")),
        Some(_) => return Err(bad("messages must be a list")),
    };
    if list.len() > MAX_MESSAGES {
        return Err(bad("too many messages"));
    }
    list.iter()
        .map(|m| {
            let role = m.get("role").and_then(Value::as_str).ok_or_else(|| bad("each message needs a string role"))?;
            if ["tool_calls", "function_call"].iter().any(|k| m.get(k).is_some_and(|v| !v.is_null())) {
                return Err(bad("tool and function calls are not supported by this server"));
            }
            if role.is_empty() || role.len() > 64 {
                return Err(bad("a message role is empty or too long"));
            }
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => Ok(t),
                        _ => Err(bad("only text content parts are supported")),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .concat(),
                Some(_) => return Err(bad("message content must be a string or a list of text parts")),
            };
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

pub async fn chat(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let obj = read_object(body, &state.config).await?;
    known::check(&obj, known::CHAT)?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine)?;
    let msgs = messages(&f)?;
    let total: usize = msgs.iter().map(|m| m.content.len()).sum();
    if total > crate::serve::params::prompt_byte_cap(&engine) {
        return Err(ApiError::invalid("messages", "the conversation is too long for the context"));
    }
    let ids = engine
        .encode_chat(&msgs, state.config.message_specials)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let cap = request_cap(&state.config, &engine);
    let prompt = check_prompt(&engine, "messages", ids, cap)?;
    let defaults = Defaults::openai(Some(state.config.default_max_tokens));
    let mut params = job_params(&f, &defaults, &engine, prompt.len(), cap)?;
    crate::serve::format::apply(&f, &engine, &mut params)?;
    let top = f.uint("top_logprobs", MAX_TOP_LOGPROBS)?;
    if f.bool("logprobs")? {
        params.logprobs = Some(top.unwrap_or(0) as usize);
    } else if top.is_some() {
        return Err(ApiError::invalid("top_logprobs", "top_logprobs needs logprobs: true"));
    }
    let stream = f.bool("stream")?;
    let with_usage = include_usage(&f)?;
    let rx = submit(&state, engine.clone(), prompt, params)?;
    let (id, created) = (new_id("chatcmpl"), now());
    if stream {
        return Ok(stream_response(rx, engine, id, created, with_usage));
    }
    let c = collect(rx).await?;
    let mut choice = json!({
        "index": 0,
        "message": {"role": "assistant", "content": c.text},
        "logprobs": null,
        "finish_reason": c.done.finish.openai(),
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
            if t.text.is_empty() && t.logprob.is_none() && t.routing.is_none() {
                return (Vec::new(), false);
            }
            let mut choice = json!({"index": 0, "delta": {"content": t.text}, "logprobs": null, "finish_reason": null});
            if t.logprob.is_some() {
                choice["logprobs"] = chat_logprobs(&eng, std::slice::from_ref(&t));
            }
            if let Some(r) = &t.routing {
                choice["routing"] = json!([r]);
            }
            (vec![chunk(json!([choice]), None)], false)
        }
        Event::Done(d) => {
            let last = json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": d.finish.openai()}]);
            let mut frames = vec![chunk(last, None)];
            if with_usage {
                frames.push(chunk(json!([]), Some(usage(&d))));
            }
            (frames, true)
        }
        Event::Failed(_) => (Vec::new(), true),
    })
}
