//! Cross-origin requests. A browser lets any web page send "simple" requests (a POST with
//! `Content-Type: text/plain`, no preflight) to a server on localhost; the page cannot read the
//! answer, but the generation would run. So: a request with an `Origin` header is served only
//! when that origin is the server's own (same scheme-less host and port as `Host`) or listed in
//! `--allowed-origins`; others get 403. Preflights (`OPTIONS` with
//! `Access-Control-Request-Method`) from allowed origins get 204 with the Access-Control-*
//! headers, others 403; responses to allowed cross-origin requests carry
//! `Access-Control-Allow-Origin`. JSON endpoints take `Content-Type: application/json` only
//! (415 otherwise), which no page can send without a preflight.

use super::error::ApiError;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use colibri::Error;

/// The allowed origins, normalised (`scheme://host:port`, lower case).
#[derive(Clone, Debug, Default)]
pub struct Origins {
    any: bool,
    list: Vec<String>,
}

/// `scheme://host[:port]` → `scheme://host:port` in lower case, the port made explicit.
fn normalise(origin: &str) -> Option<String> {
    let lower = origin.trim().to_ascii_lowercase();
    let (scheme, authority) = lower.split_once("://")?;
    let default_port = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    Some(format!("{scheme}://{}", with_port(authority, default_port)?))
}

/// `host[:port]` with the port made explicit; None when the port is not a number.
fn with_port(authority: &str, default_port: u16) -> Option<String> {
    let (host, port) = split_host(authority)?;
    Some(format!("{host}:{}", port.unwrap_or(default_port)))
}

/// `host[:port]` or `[v6][:port]` → (host, port).
pub fn split_host(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = if after.is_empty() { None } else { Some(after.strip_prefix(':')?) };
        (&authority[..inside.len() + 2], port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    match port {
        None => Some((host, None)),
        Some(p) => p.parse().ok().map(|p| (host, Some(p))),
    }
}

impl Origins {
    /// From `--allowed-origins` entries: origins or `*`.
    pub fn parse(entries: &[String]) -> Result<Origins, Error> {
        let mut o = Origins::default();
        for e in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            if e == "*" {
                o.any = true;
            } else {
                let n = normalise(e.trim_end_matches('/')).ok_or_else(|| Error::InvalidArgument {
                    reason: format!("--allowed-origins: '{e}' is not an origin like http://localhost:3000"),
                })?;
                o.list.push(n);
            }
        }
        Ok(o)
    }

    fn allows(&self, origin: &str) -> bool {
        self.any || normalise(origin).is_some_and(|n| self.list.contains(&n))
    }
}

/// What to do with a request as far as its origin goes.
pub enum Verdict {
    /// No Origin header, or the server's own origin: serve as usual.
    Plain,
    /// An allowed foreign origin: serve, and mark the response for it.
    Cross(HeaderValue),
    /// Answer now (a preflight, or a refusal).
    Answer(Response),
}

/// Whether `origin` is the server's own: same host and port as the Host header.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let (Some(o), Some(host)) = (normalise(origin), host) else { return false };
    let default_port = if o.starts_with("https:") { 443 } else { 80 };
    with_port(&host.to_ascii_lowercase(), default_port).is_some_and(|h| o.ends_with(&format!("://{h}")))
}

/// Judge a request by its Origin header (at most one).
pub fn judge(origins: &Origins, method: &Method, headers: &HeaderMap) -> Verdict {
    let mut values = headers.get_all(header::ORIGIN).iter();
    let Some(value) = values.next() else { return Verdict::Plain };
    if values.next().is_some() {
        return Verdict::Answer(ApiError::bad_request("more than one Origin header").into_response());
    }
    let origin = value.to_str().unwrap_or("");
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let preflight = method == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if same_origin(origin, host) && !preflight {
        return Verdict::Plain;
    }
    if !(same_origin(origin, host) || origins.allows(origin)) {
        return Verdict::Answer(ApiError::bad_origin().into_response());
    }
    if preflight {
        return Verdict::Answer(preflight_response(value, headers));
    }
    Verdict::Cross(value.clone())
}

/// 204 for an allowed preflight: the methods, the asked-for headers, a 10-minute cache.
fn preflight_response(origin: &HeaderValue, headers: &HeaderMap) -> Response {
    let asked = headers
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .filter(|v| v.as_bytes().iter().all(|&b| b.is_ascii_alphanumeric() || b"-_, ".contains(&b)))
        .cloned()
        .unwrap_or(HeaderValue::from_static("authorization, content-type"));
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, OPTIONS"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    h.insert(
        header::VARY,
        HeaderValue::from_static("Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
    );
    r
}

/// Mark a response to an allowed cross-origin request.
pub fn mark(resp: &mut Response, origin: HeaderValue) {
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("Retry-After"));
    h.append(header::VARY, HeaderValue::from_static("Origin"));
}

/// A JSON body needs `Content-Type: application/json` (parameters such as charset allowed).
pub fn json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let ok = match (values.next(), values.next()) {
        (Some(v), None) => v
            .to_str()
            .ok()
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalise_and_match() {
        let o = Origins::parse(&["http://LocalHost:3000/".into(), "https://app.example".into()]).unwrap();
        assert!(o.allows("http://localhost:3000"));
        assert!(o.allows("https://app.example:443"));
        assert!(!o.allows("http://localhost:3001"));
        assert!(!o.allows("http://app.example"));
        assert!(!o.allows("null"));
        assert!(Origins::parse(&["*".into()]).unwrap().allows("http://anything:1"));
        for bad in ["localhost:3000", "ftp://x", "http://", "http://a/b", "http://a:port"] {
            assert!(Origins::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn same_origin_compares_host_and_port() {
        assert!(same_origin("http://localhost:8080", Some("localhost:8080")));
        assert!(same_origin("http://localhost", Some("localhost:80")));
        assert!(same_origin("https://api.example", Some("API.example")));
        assert!(same_origin("http://[::1]:8080", Some("[::1]:8080")));
        assert!(!same_origin("http://localhost:3000", Some("localhost:8080")));
        assert!(!same_origin("http://evil.example", Some("localhost")));
        assert!(!same_origin("http://localhost:8080", None));
        assert!(!same_origin("null", Some("localhost")));
    }

    #[test]
    fn content_types() {
        let h = |v: &[&str]| {
            let mut m = HeaderMap::new();
            for x in v {
                m.append(header::CONTENT_TYPE, HeaderValue::from_str(x).unwrap());
            }
            json_content_type(&m).is_ok()
        };
        assert!(h(&["application/json"]));
        assert!(h(&["Application/JSON; charset=utf-8"]));
        for bad in [&[][..], &["text/plain"], &["application/x-www-form-urlencoded"], &["application/jsonx"]] {
            assert!(!h(bad), "{bad:?}");
        }
        assert!(!h(&["application/json", "text/plain"]));
    }
}
