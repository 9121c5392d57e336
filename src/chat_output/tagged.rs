//! Text with `<think>…</think>` reasoning blocks and tool calls between marker strings: a
//! three-state machine (content, reasoning, inside a call) over a buffer that keeps only what
//! may still be (the start of) a marker or an unfinished call.

use super::calls::{self, ToolCall};
use super::{find_first, held_back, Delta, ParseOptions, ToolTags};

pub(super) const THINK_OPEN: &str = "<think>";
pub(super) const THINK_CLOSE: &str = "</think>";

/// (opening marker, closing marker; None: the call runs to the end of the text).
fn tool_tags(tools: ToolTags) -> Option<(&'static str, Option<&'static str>)> {
    match tools {
        ToolTags::None => None,
        ToolTags::Hermes => Some(("<tool_call>", Some("</tool_call>"))),
        ToolTags::Mistral => Some(("[TOOL_CALLS]", None)),
        ToolTags::DeepSeek => Some(("<｜tool▁calls▁begin｜>", Some("<｜tool▁calls▁end｜>"))),
    }
}

pub(super) fn tool_markers(tools: ToolTags) -> Vec<&'static str> {
    tool_tags(tools).map(|(open, close)| [Some(open), close].into_iter().flatten().collect()).unwrap_or_default()
}

fn parse_calls(tools: ToolTags, body: &str) -> Option<Vec<ToolCall>> {
    match tools {
        ToolTags::None => None,
        ToolTags::Hermes => calls::hermes(body),
        ToolTags::Mistral => calls::mistral(body),
        ToolTags::DeepSeek => calls::deepseek(body),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Content,
    Reasoning,
    Call,
}

pub(super) struct Parser {
    think: bool,
    tools: ToolTags,
    read_tools: bool,
    state: State,
    /// Text not yet emitted: a possible marker start, held-back whitespace, or a call's body.
    buf: String,
    /// Drop leading whitespace of the next emitted text (after a block or call ends).
    skip_ws: bool,
}

impl Parser {
    pub(super) fn new(think: bool, tools: ToolTags, options: ParseOptions) -> Parser {
        let state = if think && options.in_reasoning { State::Reasoning } else { State::Content };
        Parser {
            think,
            tools,
            read_tools: options.tools,
            state,
            buf: String::new(),
            skip_ws: state == State::Reasoning,
        }
    }

    /// The markers that end the current state.
    fn markers(&self) -> Vec<&'static str> {
        match self.state {
            State::Content => {
                let mut m = Vec::new();
                if self.think {
                    m.push(THINK_OPEN);
                }
                if let (true, Some((open, _))) = (self.read_tools, tool_tags(self.tools)) {
                    m.push(open);
                }
                m
            }
            State::Reasoning => vec![THINK_CLOSE],
            State::Call => tool_tags(self.tools).and_then(|(_, close)| close).into_iter().collect(),
        }
    }

    /// Emit `text` in the current state's field.
    fn emit(&mut self, out: &mut Delta, text: &str) {
        let text = if self.skip_ws { text.trim_start() } else { text };
        if text.is_empty() {
            return;
        }
        self.skip_ws = false;
        match self.state {
            State::Reasoning => out.reasoning.push_str(text),
            _ => out.content.push_str(text),
        }
    }

    pub(super) fn push(&mut self, text: &str) -> Delta {
        self.buf.push_str(text);
        let mut out = Delta::default();
        loop {
            let markers = self.markers();
            let Some((at, k)) = find_first(&self.buf, &markers) else { break };
            let rest = self.buf.split_off(at + markers[k].len());
            let mut before = std::mem::replace(&mut self.buf, rest);
            before.truncate(at);
            self.transition(&mut out, &before, markers[k]);
        }
        if self.state != State::Call {
            let mut keep = held_back(&self.buf, &self.markers());
            if self.state == State::Reasoning {
                // Whitespace before `</think>` is dropped: hold it until more reasoning follows.
                let body = &self.buf[..self.buf.len() - keep];
                keep += body.len() - body.trim_end().len();
            }
            let rest = self.buf.split_off(self.buf.len() - keep);
            let ready = std::mem::replace(&mut self.buf, rest);
            self.emit(&mut out, &ready);
        }
        out
    }

    /// `before` then `marker` ended the current state.
    fn transition(&mut self, out: &mut Delta, before: &str, marker: &str) {
        match self.state {
            State::Content if marker == THINK_OPEN => {
                self.emit(out, before);
                self.state = State::Reasoning;
                self.skip_ws = true;
            }
            State::Content => {
                self.emit(out, before);
                self.state = State::Call;
            }
            State::Reasoning => {
                self.emit(out, before.trim_end());
                self.state = State::Content;
                self.skip_ws = true;
            }
            State::Call => {
                self.end_call(out, before, Some(marker));
                self.skip_ws = true;
            }
        }
    }

    /// A call's body is complete (`close` seen, or the text ended): its calls, or its text as
    /// content when it does not parse.
    fn end_call(&mut self, out: &mut Delta, body: &str, close: Option<&str>) {
        self.state = State::Content;
        match parse_calls(self.tools, body) {
            Some(calls) => out.tool_calls.extend(calls),
            None => {
                let open = tool_tags(self.tools).map_or("", |(open, _)| open);
                out.content.push_str(&format!("{open}{body}{}", close.unwrap_or_default()));
            }
        }
    }

    pub(super) fn finish(&mut self) -> Delta {
        let mut out = Delta::default();
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Call => self.end_call(&mut out, &rest, None),
            State::Reasoning => self.emit(&mut out, rest.trim_end()),
            State::Content => self.emit(&mut out, &rest),
        }
        out
    }
}
