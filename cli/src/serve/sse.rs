//! Server-sent events: the scheduler event channels of a request's choices, merged and tagged
//! with the choice index, turned into a `text/event-stream` body of `data: {json}\n\n` frames
//! ending with `data: [DONE]\n\n`. The body owns the receivers, so a client that disconnects
//! drops them and the scheduler cancels the sequences at their next step.
//! While a sequence waits (queue, long prompt) a `: keep-alive` comment goes out every
//! `KEEP_ALIVE`, so proxies with read timeouts (nginx: 60 s) keep the stream open.

use super::error::ApiError;
use super::job::Event;
use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::Response;
use futures_util::stream::{BoxStream, SelectAll};
use futures_util::StreamExt;
use serde_json::Value;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// Longest silence on a stream before a comment frame is sent.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
const KEEP_ALIVE_FRAME: &[u8] = b": keep-alive\n\n";

/// What a stream emits for one event: JSON frames, and whether the stream is complete.
pub type Frames = (Vec<Value>, bool);

/// The events of every choice of a request, each tagged with its choice index, as they come.
pub type Merged = SelectAll<BoxStream<'static, (usize, Event)>>;

/// Merge the channels of choices 0, 1, ... (in that order) into one tagged stream.
pub fn merge(rxs: Vec<UnboundedReceiver<Event>>) -> Merged {
    futures_util::stream::select_all(rxs.into_iter().enumerate().map(|(i, rx)| {
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
            .map(move |e| (i, e))
            .boxed()
    }))
}

fn encode(values: &[Value], done: bool) -> Bytes {
    let mut out = Vec::new();
    for v in values {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(v.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    if done {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
    Bytes::from(out)
}

/// A streaming response: `first` frames at once, then `on_event`'s frames per (choice, event).
/// A failed sequence sends an error frame and `[DONE]`.
pub fn response<F>(rx: Merged, first: Vec<Value>, on_event: F) -> Response
where
    F: FnMut(usize, Event) -> Frames + Send + 'static,
{
    struct State<F> {
        rx: Merged,
        on_event: F,
        first: Option<Vec<Value>>,
        done: bool,
    }
    let state = State { rx, on_event, first: Some(first), done: false };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        if let Some(first) = st.first.take() {
            return Some((Ok::<_, Infallible>(encode(&first, false)), st));
        }
        if st.done {
            return None;
        }
        let event = match tokio::time::timeout(KEEP_ALIVE, st.rx.next()).await {
            Ok(event) => event,
            Err(_) => return Some((Ok(Bytes::from_static(KEEP_ALIVE_FRAME)), st)),
        };
        let (values, done) = match event {
            Some((_, Event::Failed(msg))) => (vec![ApiError::internal(msg).body()], true),
            Some((i, ev)) => (st.on_event)(i, ev),
            None => (vec![ApiError::internal("the scheduler stopped").body()], true),
        };
        st.done = done;
        Some((Ok(encode(&values, done)), st))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

#[cfg(test)]
mod tests {
    use super::{encode, merge, response, KEEP_ALIVE};
    use crate::serve::job::{Done, Ending, Event, Timing};
    use colibri::decoder::Finish;
    use futures_util::StreamExt;
    use serde_json::json;

    /// A silent stream sends a comment frame each KEEP_ALIVE, and events still come through.
    #[tokio::test(start_paused = true)]
    async fn silence_sends_keep_alive_comments() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let resp = response(merge(vec![rx]), vec![json!({"first": true})], |_, ev| match ev {
            Event::Done(d) => (vec![json!({"n": d.completion_tokens})], true),
            _ => (vec![], false),
        });
        let mut body = resp.into_body().into_data_stream();
        let mut next = async || String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
        assert_eq!(next().await, "data: {\"first\":true}\n\n");
        let t0 = tokio::time::Instant::now();
        assert_eq!(next().await, ": keep-alive\n\n");
        assert_eq!(next().await, ": keep-alive\n\n");
        assert_eq!(t0.elapsed(), 2 * KEEP_ALIVE);
        let finish = Ending::Finished(Finish::Length);
        tx.send(Event::Done(Done {
            finish,
            prompt_tokens: 1,
            completion_tokens: 3,
            cached_tokens: 0,
            timing: Timing::default(),
        }))
        .unwrap();
        assert_eq!(next().await, "data: {\"n\":3}\n\ndata: [DONE]\n\n");
        assert!(body.next().await.is_none());
    }

    #[test]
    fn frames_are_data_lines_with_a_blank_line() {
        let b = encode(&[json!({"a": 1}), json!({"b": "x\ny"})], true);
        assert_eq!(&b[..], b"data: {\"a\":1}\n\ndata: {\"b\":\"x\\ny\"}\n\ndata: [DONE]\n\n");
    }
}
