//! `POST /v1/chat/completions`: messages (and tools) rendered by the model's chat template
//! (serve/chat_input.rs), answered whole in `n` choices or streamed as SSE (each choice's first
//! delta carries the role, its last the finish_reason), each choice's text split into content,
//! reasoning and tool calls (serve/chat_reply.rs).

use super::common::{collect_all, engine, envelope, submit_choices, whole_response, with_routing};
use super::completions::include_usage;
use super::tally::Tally;
use crate::serve::chat_input;
use crate::serve::chat_reply::Reply;
use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::job::Event;
use crate::serve::known;
use crate::serve::openai::{chat_logprobs, new_id, now};
use crate::serve::params::{
    check_prompt, choices, job_params, read_object, request_cap, Defaults, Fields, MAX_TOP_LOGPROBS,
};
use crate::serve::reqlog::{Deferred, Record};
use crate::serve::sse::{self, Merged};
use crate::serve::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

pub async fn chat(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let mut record = Record::new(new_id("chatcmpl"), "/v1/chat/completions", state.config.request_log);
    let obj = read_object(body, &state.config).await?;
    known::check(&obj, known::CHAT)?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine, &state.config.aliases)?;
    let input = chat_input::read(&f, &engine)?;
    let total: usize = input.messages.iter().map(|m| m.text_len()).sum();
    if total > crate::serve::params::prompt_byte_cap(&engine) {
        return Err(ApiError::invalid("messages", "the conversation is too long for the context"));
    }
    let n = choices(&f, &state.config)?;
    let ids = engine
        .encode_chat_with(&input.messages, Some(&input.extra), state.config.message_specials)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let cap = request_cap(&state.config, &engine);
    let prompt = check_prompt(&engine, "messages", ids, cap)?;
    let defaults = Defaults::openai(Some(state.config.default_max_tokens));
    let mut params = job_params(&f, &defaults, &engine, prompt.len(), cap)?;
    crate::serve::format::apply(&f, &engine, &mut params)?;
    crate::serve::format::apply_tools(&engine, &input, &prompt, &mut params)?;
    params.decode.end_ids = engine.end_ids.clone();
    let top = f.uint("top_logprobs", MAX_TOP_LOGPROBS)?;
    if f.bool("logprobs")? {
        params.logprobs = Some(top.unwrap_or(0) as usize);
    } else if top.is_some() {
        return Err(ApiError::invalid("top_logprobs", "top_logprobs needs logprobs: true"));
    }
    let stream = f.bool("stream")?;
    let with_usage = include_usage(&f)?;
    let (id, created) = (record.id.clone(), now());
    let mut replies: Vec<Reply> =
        (0..n).map(|_| Reply::new(&engine, &input, &prompt, params.decode.stop.clone(), &id)).collect();
    let rxs = submit_choices(&state, engine.clone(), prompt, params, n)?;
    if stream {
        return Ok(stream_response(sse::merge(rxs), engine, replies, id, created, with_usage, Tally::new(n, record)));
    }
    let all = collect_all(rxs).await?;
    let mut list = Vec::with_capacity(n);
    for ((i, c), reply) in all.iter().enumerate().zip(&mut replies) {
        record.add(&c.done);
        let whole = reply.whole(&c.text, &c.tokens);
        let mut choice = json!({
            "index": i,
            "message": reply.message(whole),
            "logprobs": null,
            "finish_reason": reply.finish_reason(c.done.finish),
        });
        if f.bool("logprobs")? {
            choice["logprobs"] = chat_logprobs(&engine, &c.tokens);
        }
        with_routing(&mut choice, &c.tokens);
        list.push(choice);
    }
    Ok(whole_response("chat.completion", &engine, created, list, record))
}

fn stream_response(
    rx: Merged,
    engine: Arc<Engine>,
    mut replies: Vec<Reply>,
    id: String,
    created: u64,
    with_usage: bool,
    mut tally: Tally,
) -> Response {
    let eng = engine.clone();
    let chunk = move |choices: Value, usage: Option<Value>| {
        envelope("chat.completion.chunk", &id, created, &engine.id, choices, usage, with_usage)
    };
    let first = (0..rx.len())
        .map(|i| {
            let role = json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
            chunk(json!([role]), None)
        })
        .collect();
    let mut resp = sse::response(rx, first, move |i, ev| {
        let Some(reply) = replies.get_mut(i) else { return (Vec::new(), true) };
        match ev {
            Event::Token(t) => {
                let parts = reply.token(&t);
                let delta = reply.delta(&parts);
                if delta.is_none() && t.logprob.is_none() && t.routing.is_none() {
                    return (Vec::new(), false);
                }
                let delta = delta.unwrap_or_else(|| json!({"content": ""}));
                let mut choice = json!({"index": i, "delta": delta, "logprobs": null, "finish_reason": null});
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
                    let rest = json!([{"index": i, "delta": delta, "logprobs": null, "finish_reason": null}]);
                    frames.push(chunk(rest, None));
                }
                let why = reply.finish_reason(d.finish);
                frames.push(chunk(json!([{"index": i, "delta": {}, "logprobs": null, "finish_reason": why}]), None));
                let all = tally.done(&d);
                if all && with_usage {
                    frames.push(chunk(json!([]), Some(tally.usage())));
                }
                (frames, all)
            }
            Event::Failed(_) => (Vec::new(), true),
        }
    });
    resp.extensions_mut().insert(Deferred);
    resp
}
