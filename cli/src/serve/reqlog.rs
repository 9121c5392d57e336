//! One structured line per request on stderr (`--request-log json|logfmt|off`): its id, endpoint,
//! HTTP status, prompt and completion tokens, time queued, to the first token and in total, and
//! the finish reasons. The middleware `layer` writes it when the response leaves, from the
//! `Record` a generating handler attached to it (or a bare one: errors, the info endpoints). A
//! streamed response's line is written by its stream when it ends (the record travels with the
//! stream and writes itself when dropped, so a client that disconnects still gets its line,
//! with finish reason "disconnected"). GET /health is not logged: probes would drown the rest.

pub use super::args::LogFormat;
use super::guard::endpoint_name;
use super::job::Done;
use super::openai::new_id;
use super::state::Shared;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// What one request's line says.
#[derive(Clone, Debug)]
pub struct Record {
    pub id: String,
    pub endpoint: &'static str,
    pub status: u16,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens reused from the prompt cache (the most any choice reused).
    pub cached_tokens: usize,
    /// Longest wait of its choices for the scheduler.
    pub queue: Option<Duration>,
    /// Until its first token (the earliest of its choices).
    pub ttft: Option<Duration>,
    pub start: Instant,
    /// One reason per choice, comma-separated.
    pub finish: Vec<&'static str>,
    pub format: LogFormat,
}

/// A finished response's record, attached to it so `layer` writes it with the status.
#[derive(Clone, Debug)]
pub struct Attached(pub Record);

/// Attached to a streamed response: its stream writes the line.
#[derive(Clone, Copy, Debug)]
pub struct Deferred;

fn ms(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!((d.as_secs_f64() * 1e4).round() / 10.0))
}

impl Record {
    pub fn new(id: String, endpoint: &'static str, format: LogFormat) -> Record {
        let start = Instant::now();
        Record {
            id,
            endpoint,
            status: 200,
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_tokens: 0,
            queue: None,
            ttft: None,
            start,
            finish: Vec::new(),
            format,
        }
    }

    /// Count one choice's end.
    pub fn add(&mut self, d: &Done) {
        self.prompt_tokens = d.prompt_tokens;
        self.completion_tokens += d.completion_tokens;
        self.cached_tokens = self.cached_tokens.max(d.cached_tokens);
        self.queue = self.queue.max(d.timing.queued);
        self.ttft = match (self.ttft, d.timing.first_token) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.finish.push(d.finish.openai());
    }

    /// The line's fields in order.
    fn fields(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("event", json!("request")),
            ("id", json!(self.id)),
            ("endpoint", json!(self.endpoint)),
            ("status", json!(self.status)),
            ("prompt_tokens", json!(self.prompt_tokens)),
            ("completion_tokens", json!(self.completion_tokens)),
            ("cached_tokens", json!(self.cached_tokens)),
            ("queue_ms", ms(self.queue)),
            ("ttft_ms", ms(self.ttft)),
            ("total_ms", ms(Some(self.start.elapsed()))),
            ("finish_reason", if self.finish.is_empty() { Value::Null } else { json!(self.finish.join(",")) }),
        ]
    }

    /// The line as written (None when off).
    pub fn line(&self) -> Option<String> {
        let fields = self.fields();
        match self.format {
            LogFormat::Off => None,
            LogFormat::Json => {
                Some(Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect()).to_string())
            }
            LogFormat::Logfmt => Some(
                fields
                    .into_iter()
                    .map(|(k, v)| match v {
                        Value::String(s) if s.is_empty() || s.contains([' ', '"', '=', '\\']) => {
                            format!("{k}={}", Value::String(s))
                        }
                        Value::String(s) => format!("{k}={s}"),
                        Value::Null => format!("{k}="),
                        v => format!("{k}={v}"),
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        }
    }

    pub fn emit(&self) {
        if let Some(l) = self.line() {
            eprintln!("{l}");
        }
    }
}

/// A streamed response's record: written once, when the stream ends or is dropped.
pub struct StreamRecord(pub Option<Record>);

impl StreamRecord {
    /// Write the line now (the stream completed).
    pub fn finish(&mut self) {
        if let Some(r) = self.0.take() {
            r.emit();
        }
    }
}

impl Drop for StreamRecord {
    fn drop(&mut self) {
        if let Some(mut r) = self.0.take() {
            r.finish.push("disconnected");
            r.emit();
        }
    }
}

/// The middleware: write the line of every response that does not defer it.
pub async fn layer(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let format = state.config.request_log;
    let endpoint = endpoint_name(req.uri().path());
    if format == LogFormat::Off || endpoint == "/health" {
        return next.run(req).await;
    }
    let start = Instant::now();
    let resp = next.run(req).await;
    if resp.extensions().get::<Deferred>().is_some() {
        return resp;
    }
    let mut record = match resp.extensions().get::<Attached>() {
        Some(Attached(r)) => r.clone(),
        None => Record { start, ..Record::new(new_id("req"), endpoint, format) },
    };
    record.status = resp.status().as_u16();
    record.emit();
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::job::{Ending, Timing};
    use colibri::decoder::Finish;

    #[test]
    fn lines_in_both_formats() {
        let mut r = Record::new("cmpl-1".into(), "/v1/completions", LogFormat::Json);
        let t = |q, f| Timing { queued: Some(Duration::from_millis(q)), first_token: Some(Duration::from_millis(f)) };
        let finish = Ending::Finished(Finish::Length);
        r.add(&Done { finish, prompt_tokens: 5, completion_tokens: 3, cached_tokens: 2, timing: t(2, 40) });
        r.add(&Done {
            finish: Ending::Finished(Finish::Eos),
            prompt_tokens: 5,
            completion_tokens: 1,
            cached_tokens: 0,
            timing: t(7, 30),
        });
        let v: Value = serde_json::from_str(&r.line().unwrap()).unwrap();
        assert_eq!((v["prompt_tokens"].as_u64(), v["completion_tokens"].as_u64()), (Some(5), Some(4)));
        assert_eq!((v["queue_ms"].as_f64(), v["ttft_ms"].as_f64()), (Some(7.0), Some(30.0)));
        assert_eq!(v["finish_reason"], "length,stop");
        assert_eq!(v["cached_tokens"], 2);
        assert_eq!(v["status"], 200);
        r.format = LogFormat::Logfmt;
        r.endpoint = "a b";
        let l = r.line().unwrap();
        assert!(l.starts_with("event=request id=cmpl-1 endpoint=\"a b\" status=200 prompt_tokens=5"), "{l}");
        assert!(l.contains(" queue_ms=7.0 ttft_ms=30.0 ") && l.ends_with(" finish_reason=length,stop"), "{l}");
        r.format = LogFormat::Off;
        assert!(r.line().is_none());
    }
}
