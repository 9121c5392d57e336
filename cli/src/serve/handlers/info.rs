//! The read-only endpoints: `GET /v1/models` (and `/v1/models/{id}`), `GET /health` (never
//! behind the API key) and `GET /metrics` (Prometheus text).

use crate::serve::engine::Engine;
use crate::serve::error::ApiError;
use crate::serve::state::Shared;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

/// The served model under the name `id` (its own or an --alias).
fn model_entry(e: &Engine, id: &str) -> Value {
    let c = e.model.config();
    json!({
        "id": id,
        "object": "model",
        "created": e.created,
        "owned_by": "colibri",
        "colibri": {
            "generation": e.generation,
            "family": c.family.name(),
            "n_layers": c.n_layers,
            "n_experts": c.moe.n_experts,
            "experts_per_token": c.moe.top_k,
            "vocab_size": c.vocab_size,
            "n_ctx": e.n_ctx,
        },
    })
}

pub async fn models(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let e = state.slot.get().ok_or_else(ApiError::loading)?;
    let names = std::iter::once(&e.id).chain(state.config.aliases.iter().filter(|a| **a != e.id));
    let data: Vec<Value> = names.map(|id| model_entry(&e, id)).collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/models/{id}`. An id that does not percent-decode to UTF-8 is a JSON 400 like every
/// other refusal (axum's own rejection is plain text).
pub async fn model(
    State(state): State<Shared>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(id) =
        id.map_err(|_| ApiError::invalid("id", "the model id in the path is not UTF-8 once percent-decoded"))?;
    let e = state.slot.get().ok_or_else(ApiError::loading)?;
    if id != e.id && !state.config.aliases.contains(&id) {
        return Err(ApiError::model_not_found(&id));
    }
    Ok(Json(model_entry(&e, &id)))
}

pub async fn health(State(state): State<Shared>) -> Response {
    match state.slot.get() {
        Some(e) => Json(json!({"status": "ok", "model": e.id, "generation": e.generation})).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "loading"}))).into_response(),
    }
}

pub async fn metrics(State(state): State<Shared>) -> Response {
    let m = &state.metrics;
    if let Some(e) = state.slot.get() {
        m.generation.store(e.generation, Ordering::Relaxed);
    }
    let mut text = m.render();
    state.kv.render(&mut text);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
