//! `POST /v1/completions`: a text (or token-id) prompt continued in `n` choices, whole or
//! streamed as SSE.

use super::common::{collect_all, engine, envelope, submit_choices, whole_response, with_routing};
use super::tally::Tally;
use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::job::Event;
use crate::serve::known;
use crate::serve::openai::{completion_logprobs, new_id, now};
use crate::serve::params::{
    check_prompt, choices, job_params, read_object, request_cap, tokenize, Defaults, Fields, MAX_TOP_LOGPROBS,
};
use crate::serve::reqlog::{Deferred, Record};
use crate::serve::sse::{self, Merged};
use crate::serve::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
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
    let mut record = Record::new(new_id("cmpl"), "/v1/completions", state.config.request_log);
    let obj = read_object(body, &state.config).await?;
    known::check(&obj, known::COMPLETIONS)?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine, &state.config.aliases)?;
    if f.bool("echo")? {
        return Err(ApiError::invalid("echo", "echo is not supported"));
    }
    if f.uint("best_of", 1 << 20)?.is_some_and(|n| n > 1) {
        return Err(ApiError::invalid("best_of", "only best_of = 1 is supported"));
    }
    let n = choices(&f, &state.config)?;
    let cap = request_cap(&state.config, &engine);
    let prompt = prompt_ids(&f, &engine, cap)?;
    let mut params = job_params(&f, &Defaults::openai(Some(DEFAULT_MAX_TOKENS)), &engine, prompt.len(), cap)?;
    crate::serve::format::apply(&f, &engine, &mut params)?;
    params.logprobs = f.uint("logprobs", MAX_TOP_LOGPROBS)?.map(|n| n as usize);
    let stream = f.bool("stream")?;
    let with_usage = include_usage(&f)?;
    let rxs = submit_choices(&state, engine.clone(), prompt, params, n)?;
    let (id, created) = (record.id.clone(), now());
    if stream {
        return Ok(stream_response(sse::merge(rxs), engine, id, created, with_usage, Tally::new(n, record)));
    }
    let all = collect_all(rxs).await?;
    let mut list = Vec::with_capacity(n);
    for (i, c) in all.iter().enumerate() {
        record.add(&c.done);
        let mut choice = json!({"index": i, "text": c.text, "logprobs": null, "finish_reason": c.done.finish.openai()});
        if f.get("logprobs").is_some() {
            choice["logprobs"] = completion_logprobs(&engine, &c.tokens, 0);
        }
        with_routing(&mut choice, &c.tokens);
        list.push(choice);
    }
    Ok(whole_response("text_completion", &engine, created, list, record))
}

fn stream_response(
    rx: Merged,
    engine: Arc<Engine>,
    id: String,
    created: u64,
    with_usage: bool,
    mut tally: Tally,
) -> Response {
    let eng = engine.clone();
    let chunk = move |choices: Value, usage: Option<Value>| {
        envelope("text_completion", &id, created, &engine.id, choices, usage, with_usage)
    };
    let mut offsets: Vec<usize> = Vec::new();
    let mut resp = sse::response(rx, Vec::new(), move |i, ev| match ev {
        Event::Token(t) => {
            if t.text.is_empty() && t.logprob.is_none() && t.routing.is_none() {
                return (Vec::new(), false);
            }
            if offsets.len() <= i {
                offsets.resize(i + 1, 0);
            }
            let mut choice = json!({"index": i, "text": t.text, "logprobs": null, "finish_reason": null});
            if t.logprob.is_some() {
                choice["logprobs"] = completion_logprobs(&eng, std::slice::from_ref(&t), offsets[i]);
            }
            if let Some(r) = &t.routing {
                choice["routing"] = json!([r]);
            }
            offsets[i] += t.text.len();
            (vec![chunk(json!([choice]), None)], false)
        }
        Event::Done(d) => {
            let last = json!([{"index": i, "text": "", "logprobs": null, "finish_reason": d.finish.openai()}]);
            let mut frames = vec![chunk(last, None)];
            let all = tally.done(&d);
            if all && with_usage {
                frames.push(chunk(json!([]), Some(tally.usage())));
            }
            (frames, all)
        }
        Event::Failed(_) => (Vec::new(), true),
    });
    resp.extensions_mut().insert(Deferred);
    resp
}
