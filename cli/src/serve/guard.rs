//! The checks in front of every endpoint: the Host allowlist when bound to loopback (against DNS
//! rebinding), the API key (constant-time, never on /health), and counting each response by
//! endpoint and status for /metrics.

use super::error::ApiError;
use super::state::Shared;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Paths counted under their own name in the metrics; the rest count as "other".
const KNOWN: [&str; 7] =
    ["/v1/completions", "/v1/chat/completions", "/v1/models", "/generate", "/health", "/metrics", "/v1/models/{id}"];

/// Equality whose time depends only on `expected`'s length, not on where the inputs differ.
pub fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, &e) in expected.iter().enumerate() {
        diff |= e ^ given.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// Host names a loopback-bound server answers to (any port).
pub fn host_allowed(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    matches!(name.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "::1")
}

fn check(state: &Shared, req: &Request) -> Result<(), ApiError> {
    if state.config.host.is_loopback() {
        if let Some(h) = req.headers().get(header::HOST) {
            if !h.to_str().is_ok_and(host_allowed) {
                return Err(ApiError::bad_host());
            }
        }
    }
    if let Some(key) = &state.config.api_key {
        if req.uri().path() != "/health" {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            if !constant_time_eq(given.trim().as_bytes(), key.as_bytes()) {
                return Err(ApiError::unauthorized());
            }
        }
    }
    Ok(())
}

pub async fn guard(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let endpoint = if path.starts_with("/v1/models/") {
        "/v1/models/{id}"
    } else {
        KNOWN.iter().copied().find(|k| *k == path).unwrap_or("other")
    };
    let resp = match check(&state, &req) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    };
    state.metrics.count_request(endpoint, resp.status().as_u16());
    resp
}

#[cfg(test)]
mod tests {
    use super::{constant_time_eq, host_allowed};

    #[test]
    fn keys_compare_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret0", b"secret"));
        assert!(!constant_time_eq(b"secre", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
        // Lengths that differ by a multiple of 256 still differ.
        assert!(!constant_time_eq(&[b'a'; 256], b""));
    }

    #[test]
    fn loopback_host_names() {
        for ok in ["localhost", "localhost:8080", "127.0.0.1:1", "[::1]:80", "[::1]", "LOCALHOST"] {
            assert!(host_allowed(ok), "{ok}");
        }
        for bad in ["evil.com", "evil.com:8080", "127.0.0.1.evil.com", "localhost.evil", "[::2]:80", ""] {
            assert!(!host_allowed(bad), "{bad}");
        }
    }
}
