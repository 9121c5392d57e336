//! `POST /generate`: the simple JSON endpoint of docs/api.md (shared with the C and Python
//! example servers), plus the MoE extension fields.

use super::common::{collect, engine, submit};
use crate::serve::error::ApiError;
use crate::serve::openai::{new_id, routing};
use crate::serve::params::{choices, job_params, read_object, request_cap, tokenize, Defaults, Fields};
use crate::serve::reqlog::{Attached, Record};
use crate::serve::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

pub async fn generate(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let mut record = Record::new(new_id("gen"), "/generate", state.config.request_log);
    let obj = read_object(body, &state.config).await?;
    let f = Fields(&obj);
    let text = match f.get("prompt") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(ApiError::invalid("prompt", "prompt must be a string")),
        None => return Err(ApiError::invalid("prompt", "prompt is required")),
    };
    let engine = engine(&state)?;
    let cap = request_cap(&state.config, &engine);
    let prompt = tokenize(&engine, "prompt", text, true, cap)?;
    let params = job_params(&f, &Defaults::generate(), &engine, prompt.len(), cap)?;
    if choices(&f, &state.config)? > 1 {
        return Err(ApiError::invalid("n", "/generate answers one choice; /v1/completions takes n > 1"));
    }
    let c = collect(submit(&state, engine, prompt, params)?).await?;
    let finish = c.done.finish.simple();
    let tokens: Vec<u32> = c.tokens.iter().filter_map(|t| t.id).collect();
    let mut body = json!({
        "text": c.text,
        "tokens": tokens,
        "prompt_tokens": c.done.prompt_tokens,
        "completion_tokens": tokens.len(),
        "finish_reason": finish,
    });
    if let Some(r) = routing(&c.tokens) {
        body["routing"] = r;
    }
    record.add(&c.done);
    let mut resp = Json(body).into_response();
    resp.extensions_mut().insert(Attached(record));
    Ok(resp)
}
