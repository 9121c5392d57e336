//! GPT-OSS harmony output: a sequence of messages, each a header (`<|channel|>analysis`,
//! `<|channel|>commentary to=functions.NAME <|constrain|>json`, after `<|start|>assistant` from
//! the second message on) up to `<|message|>`, then a body up to `<|end|>`, `<|call|>`,
//! `<|return|>` or the end of the text. The analysis channel is reasoning; a message to
//! `functions.NAME` is a call with the body as its arguments; any other message is content.

use super::calls::ToolCall;
use super::{find_first, held_back, Delta, ParseOptions};

const MESSAGE: &str = "<|message|>";
const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];
pub(super) const MARKERS: [&str; 6] = ["<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<|return|>"];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    Reasoning,
    Content,
    Call(String),
}

enum State {
    Header,
    Body(Route),
}

pub(super) struct Parser {
    read_tools: bool,
    state: State,
    buf: String,
}

/// Where a message with this header goes.
fn route(header: &str, read_tools: bool) -> Route {
    let channel = header
        .split("<|channel|>")
        .nth(1)
        .and_then(|c| c.split(|ch: char| ch.is_whitespace() || ch == '<').next())
        .unwrap_or_default();
    let recipient =
        header.split_whitespace().find_map(|w| w.strip_prefix("to=")).map(|r| r.split('<').next().unwrap_or(r));
    match recipient.and_then(|r| r.strip_prefix("functions.")) {
        Some(name) if read_tools && !name.is_empty() => Route::Call(name.to_string()),
        _ if channel == "analysis" => Route::Reasoning,
        _ => Route::Content,
    }
}

impl Parser {
    pub(super) fn new(options: ParseOptions) -> Parser {
        Parser { read_tools: options.tools, state: State::Header, buf: String::new() }
    }

    pub(super) fn push(&mut self, text: &str) -> Delta {
        self.buf.push_str(text);
        let mut out = Delta::default();
        loop {
            match &self.state {
                State::Header => {
                    let Some(at) = self.buf.find(MESSAGE) else { break };
                    let route = route(&self.buf[..at], self.read_tools);
                    self.buf.drain(..at + MESSAGE.len());
                    self.state = State::Body(route);
                }
                State::Body(route) => {
                    let Some((at, k)) = find_first(&self.buf, &ENDS) else {
                        if *route != Route::Content && *route != Route::Reasoning {
                            break;
                        }
                        let keep = held_back(&self.buf, &ENDS);
                        let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                        emit(&mut out, route, &ready);
                        break;
                    };
                    let body: String = self.buf.drain(..at + ENDS[k].len()).collect();
                    let route = route.clone();
                    self.end_body(&mut out, &route, &body[..at]);
                }
            }
        }
        out
    }

    /// A body is complete: a call is given whole.
    fn end_body(&mut self, out: &mut Delta, route: &Route, body: &str) {
        match route {
            Route::Call(name) => {
                out.tool_calls.push(ToolCall { id: None, name: name.clone(), arguments: body.trim().to_string() })
            }
            other => emit(out, other, body),
        }
        self.state = State::Header;
    }

    pub(super) fn finish(&mut self) -> Delta {
        let mut out = Delta::default();
        let rest = std::mem::take(&mut self.buf);
        match std::mem::replace(&mut self.state, State::Header) {
            State::Body(route) => self.end_body(&mut out, &route, &rest),
            // Text that never opened a message (no harmony header): content, markers removed.
            State::Header => {
                let plain = MARKERS.iter().fold(rest, |t, m| t.replace(m, ""));
                out.content.push_str(&plain);
            }
        }
        out
    }
}

fn emit(out: &mut Delta, route: &Route, text: &str) {
    match route {
        Route::Reasoning => out.reasoning.push_str(text),
        _ => out.content.push_str(text),
    }
}
