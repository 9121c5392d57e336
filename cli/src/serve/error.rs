//! Every error a client sees, OpenAI-shaped: `{"error": {"message", "type", "param", "code"}}`
//! with the matching HTTP status (and `Retry-After` when the server is full or loading).
//! Messages never carry file paths.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), kind, param: None, code: None, retry_after: None }
    }

    /// 400 for a bad field (`param` names it).
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError { param: Some(param.to_string()), ..Self::bad_request(message) }
    }

    /// 400 not tied to one field (malformed JSON, not an object, ...).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn model_not_found(name: &str) -> ApiError {
        let shown: String = name.chars().take(64).collect();
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("The model '{shown}' does not exist"))
        }
    }

    pub fn not_found() -> ApiError {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", "no such endpoint")
    }

    pub fn method_not_allowed() -> ApiError {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method not allowed on this endpoint")
    }

    pub fn too_large(cap: usize) -> ApiError {
        ApiError {
            code: Some("request_too_large"),
            ..Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!("request body above {cap} bytes"),
            )
        }
    }

    pub fn body_timeout() -> ApiError {
        ApiError {
            code: Some("timeout"),
            ..Self::new(StatusCode::REQUEST_TIMEOUT, "invalid_request_error", "the request body came too slowly")
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", "missing or wrong API key")
        }
    }

    /// 400: the body ended before its Content-Length (or broke off).
    pub fn incomplete_body(detail: impl std::fmt::Display) -> ApiError {
        ApiError {
            code: Some("incomplete_body"),
            ..Self::bad_request(format!("the request body is incomplete: {detail}"))
        }
    }

    /// 400: the request claims more tokens than one request may (`param` names the field).
    pub fn request_too_large(param: &str, message: impl Into<String>) -> ApiError {
        ApiError { code: Some("request_too_large"), ..Self::invalid(param, message) }
    }

    /// 403: an Origin that is neither the server's own nor in --allowed-origins.
    pub fn bad_origin() -> ApiError {
        ApiError {
            code: Some("invalid_origin"),
            ..Self::new(
                StatusCode::FORBIDDEN,
                "invalid_request_error",
                "cross-origin request from an origin not allowed",
            )
        }
    }

    /// 415: a JSON endpoint got another content type.
    pub fn unsupported_media_type() -> ApiError {
        ApiError {
            code: Some("unsupported_media_type"),
            ..Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                "the body must be sent with Content-Type: application/json",
            )
        }
    }

    /// 431: the request line and headers together are above the cap.
    pub fn head_too_large(cap: usize) -> ApiError {
        ApiError {
            code: Some("request_header_fields_too_large"),
            ..Self::new(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "invalid_request_error",
                format!("request line and headers above {cap} bytes"),
            )
        }
    }

    /// 503: the KV budget has no room for this request now.
    pub fn kv_budget_full(need: u64, free: u64) -> ApiError {
        ApiError {
            code: Some("kv_budget_exhausted"),
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                format!(
                    "this request may need {need} bytes of KV cache; {free} are free now (--kv-budget); retry later"
                ),
            )
        }
    }

    pub fn bad_host() -> ApiError {
        ApiError {
            code: Some("invalid_host"),
            ..Self::new(StatusCode::FORBIDDEN, "invalid_request_error", "Host header not allowed")
        }
    }

    /// 503: every sequence slot and queue place is taken.
    pub fn busy() -> ApiError {
        ApiError {
            code: Some("server_busy"),
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "the server is at capacity; retry later")
        }
    }

    /// 503: no model loaded yet.
    pub fn loading() -> ApiError {
        ApiError {
            code: Some("model_loading"),
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "the model is loading")
        }
    }

    /// 503: the served file was rewritten in place; the server reloads whatever the path holds.
    pub fn model_changed() -> ApiError {
        ApiError {
            code: Some("model_changed"),
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the model file changed on disk; the server is reloading it",
            )
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON error object (also sent as an SSE event when a stream fails).
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}
