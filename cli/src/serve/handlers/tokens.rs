//! `POST /tokenize` and `POST /detokenize` in llama.cpp's server shape: text → the served
//! model's token ids (optionally with each id's text piece), ids → text. Nothing is generated;
//! an unknown field is a 400 naming it.

use super::common::engine;
use crate::serve::error::ApiError;
use crate::serve::params::{read_object, Fields};
use crate::serve::state::Shared;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};

/// 400 for the first field of `obj` not in `own`.
fn only(obj: &Map<String, Value>, own: &[&str]) -> Result<(), ApiError> {
    match obj.keys().find(|k| !own.contains(&k.as_str())) {
        Some(k) => {
            let shown: String = k.chars().take(64).collect();
            Err(ApiError {
                code: Some("unsupported_parameter"),
                ..ApiError::invalid(&shown, format!("unknown field '{shown}'"))
            })
        }
        None => Ok(()),
    }
}

/// `{"content": "...", "add_special": false, "with_pieces": false}` → `{"tokens": [id, ...]}`, or
/// with pieces `{"tokens": [{"id": id, "piece": "text"}, ...]}`. `add_special` adds what the
/// tokenizer adds around a sequence (a BOS token); special-token text in `content` always maps
/// to its id.
pub async fn tokenize(State(state): State<Shared>, body: Body) -> Result<Json<Value>, ApiError> {
    let obj = read_object(body, &state.config).await?;
    only(&obj, &["content", "add_special", "with_pieces", "model"])?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine, &state.config.aliases)?;
    let text = f.str("content")?.ok_or_else(|| ApiError::invalid("content", "content is required"))?;
    let ids = engine
        .tokenizer
        .encode(text, f.bool("add_special")?)
        .map_err(|e| ApiError::invalid("content", e.to_string()))?;
    let tokens: Vec<Value> = if f.bool("with_pieces")? {
        ids.iter().map(|&id| json!({"id": id, "piece": engine.tokenizer.token_text(id)})).collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    };
    Ok(Json(json!({ "tokens": tokens })))
}

/// `{"tokens": [id, ...]}` → `{"content": "..."}` (special tokens rendered as their text).
pub async fn detokenize(State(state): State<Shared>, body: Body) -> Result<Json<Value>, ApiError> {
    let obj = read_object(body, &state.config).await?;
    only(&obj, &["tokens", "model"])?;
    let f = Fields(&obj);
    let engine = engine(&state)?;
    f.check_model(&engine, &state.config.aliases)?;
    let vocab = engine.tokenizer.vocab_size() as u64;
    let bad = || ApiError::invalid("tokens", format!("tokens must be a list of token ids below {vocab}"));
    let ids = match f.get("tokens") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_u64().filter(|&i| i < vocab).map(|i| i as u32).ok_or_else(bad))
            .collect::<Result<Vec<u32>, _>>()?,
        _ => return Err(bad()),
    };
    let content = engine.tokenizer.decode(&ids, false).map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
    Ok(Json(json!({ "content": content })))
}
