//! The checks in front of every endpoint, in order: the size of the request head (431), the
//! Host allowlist when bound to loopback (against DNS rebinding: one Host header, a localhost
//! name, the bound port), the Origin (cors.rs: cross-origin requests and preflights), the API
//! key (constant-time, never on /health; 401 with `WWW-Authenticate: Bearer`), the JSON content
//! type of JSON endpoints (415); then each response is counted by endpoint and status for
//! /metrics.

use super::cors::{self, Verdict};
use super::error::ApiError;
use super::state::Shared;
use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Paths counted under their own name in the metrics; the rest count as "other".
const KNOWN: [&str; 10] = [
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/models",
    "/generate",
    "/health",
    "/metrics",
    "/v1/models/{id}",
    "/tokenize",
    "/detokenize",
    "/v1/embeddings",
];
/// Endpoints whose POST body is JSON.
const JSON_ENDPOINTS: [&str; 6] =
    ["/v1/completions", "/v1/chat/completions", "/generate", "/tokenize", "/detokenize", "/v1/embeddings"];
/// Largest request head accepted: request line and headers (hyper's read buffer bounds what
/// it holds, but a head that arrives in one read can pass it).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Equality whose time depends only on `expected`'s length, not on where the inputs differ.
pub fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, &e) in expected.iter().enumerate() {
        diff |= e ^ given.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// Whether a loopback-bound server on `port` answers to `host`: a localhost name, and the bound
/// port or none (a proxy on this machine naming the host alone).
pub fn host_allowed(host: &str, port: u16) -> bool {
    let Some((name, given)) = cors::split_host(host) else { return false };
    let name = name.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1") && given.is_none_or(|p| p == port)
}

/// Bytes of the request line and headers as sent (within a few bytes).
fn head_bytes(req: &Request) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 11;
    req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum::<usize>() + line
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any case).
fn bearer(req: &Request) -> &str {
    let value = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
    match value.trim().split_once([' ', '\t']) {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => "",
    }
}

fn check_host(state: &Shared, req: &Request) -> Result<(), ApiError> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(ApiError::bad_request("more than one Host header"));
    }
    if state.config.host.is_loopback() {
        if let Some(h) = first {
            if !h.to_str().is_ok_and(|h| host_allowed(h, state.port)) {
                return Err(ApiError::bad_host());
            }
        }
    }
    Ok(())
}

/// What comes before the origin: the head's size, then Host.
fn check_head(state: &Shared, req: &Request) -> Result<(), ApiError> {
    if head_bytes(req) > MAX_HEAD_BYTES {
        return Err(ApiError::head_too_large(MAX_HEAD_BYTES));
    }
    check_host(state, req)
}

/// What comes after the origin: the API key, then the content type.
fn check(state: &Shared, req: &Request) -> Result<(), ApiError> {
    if let Some(key) = &state.config.api_key {
        if req.uri().path() != "/health" && !constant_time_eq(bearer(req).as_bytes(), key.as_bytes()) {
            return Err(ApiError::unauthorized());
        }
    }
    if req.method() == Method::POST && JSON_ENDPOINTS.contains(&req.uri().path()) {
        cors::json_content_type(req.headers())?;
    }
    Ok(())
}

/// The name a path is counted and logged under: a route, or "other".
pub fn endpoint_name(path: &str) -> &'static str {
    if path.starts_with("/v1/models/") {
        "/v1/models/{id}"
    } else {
        KNOWN.iter().copied().find(|k| *k == path).unwrap_or("other")
    }
}

pub async fn guard(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let endpoint = endpoint_name(req.uri().path());
    // A preflight carries no API key: the origin is judged before it.
    let verdict = match check_head(&state, &req) {
        Err(e) => Verdict::Answer(e.into_response()),
        Ok(()) => cors::judge(&state.config.allowed_origins, req.method(), req.headers()),
    };
    let resp = match verdict {
        Verdict::Answer(r) => r,
        Verdict::Plain => match check(&state, &req) {
            Ok(()) => next.run(req).await,
            Err(e) => e.into_response(),
        },
        Verdict::Cross(origin) => {
            let mut r = match check(&state, &req) {
                Ok(()) => next.run(req).await,
                Err(e) => e.into_response(),
            };
            cors::mark(&mut r, origin);
            r
        }
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
    fn loopback_host_names_and_port() {
        for ok in ["localhost", "localhost:8080", "127.0.0.1:8080", "[::1]:8080", "[::1]", "LOCALHOST"] {
            assert!(host_allowed(ok, 8080), "{ok}");
        }
        for bad in [
            "evil.com",
            "evil.com:8080",
            "127.0.0.1.evil.com",
            "localhost.evil",
            "[::2]:8080",
            "",
            "localhost:8081",
            "127.0.0.1:80",
            "[::1]:1",
            "localhost:x",
            "[::1]x",
        ] {
            assert!(!host_allowed(bad, 8080), "{bad}");
        }
    }
}
