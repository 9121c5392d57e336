//! A chat generation's text as the reply's parts: `content`, `reasoning_content` and
//! `tool_calls` (colibri::chat_output, in the syntax of the model's template), for the whole
//! message and for stream deltas.
//!
//! The parser reads the text with special tokens when the syntax's markers are special tokens
//! (harmony's `<|channel|>`, Mistral's `[TOOL_CALLS]`): the ids are decoded again here, with
//! the request's stop strings applied to that text; otherwise it reads the events' text.

use super::chat_input::ChatInput;
use super::engine::Engine;
use super::job::{Ending, Token};
use colibri::chat_output::{Delta, OutputParser, ParseOptions, ToolCall};
use colibri::decoder::Finish;
use colibri::stop::StopMatcher;
use colibri::tokenizer::DecodeState;
use serde_json::{json, Value};
use std::sync::Arc;

/// Decoding with special tokens kept, for syntaxes marked by them.
struct Raw {
    engine: Arc<Engine>,
    text: DecodeState,
    stop: StopMatcher,
    stopped: bool,
}

pub struct Reply {
    parser: OutputParser,
    raw: Option<Raw>,
    parallel: bool,
    /// Tool calls given so far (their index in the message).
    calls: usize,
    /// Tool calls parsed so far (for `parallel_tool_calls: false`).
    parsed: usize,
    /// Prefix of the call ids: the completion's id.
    id: String,
}

/// Whether the prompt leaves the model inside a reasoning block (its generation prompt opened
/// `<think>`).
pub fn starts_in_reasoning(engine: &Engine, prompt: &[u32]) -> bool {
    let tail_ids = &prompt[prompt.len().saturating_sub(8)..];
    let tail = engine.tokenizer.decode(tail_ids, false).unwrap_or_default();
    engine.chat.syntax.starts_in_reasoning(&tail)
}

impl Reply {
    /// The reply reader of a request whose prompt is `prompt` and stop strings `stop`.
    pub fn new(engine: &Arc<Engine>, input: &ChatInput, prompt: &[u32], stop: Vec<String>, id: &str) -> Reply {
        let caps = engine.chat;
        let options = ParseOptions { tools: input.read_tools, in_reasoning: starts_in_reasoning(engine, prompt) };
        let raw = caps.raw_text.then(|| Raw {
            engine: engine.clone(),
            text: DecodeState::new(false),
            stop: StopMatcher::new(stop),
            stopped: false,
        });
        Reply::with(OutputParser::new(caps.syntax, options), raw, input.parallel, id)
    }

    fn with(parser: OutputParser, raw: Option<Raw>, parallel: bool, id: &str) -> Reply {
        Reply { parser, raw, parallel, calls: 0, parsed: 0, id: id.into() }
    }

    /// The parts one generated token (or the final flush) completes.
    pub fn token(&mut self, t: &Token) -> Delta {
        let text = match (&mut self.raw, t.id) {
            (None, _) => t.text.clone(),
            (Some(r), Some(id)) if !r.stopped => {
                let piece = r.text.push(&r.engine.tokenizer, id).unwrap_or_default();
                let (safe, hit) = r.stop.push(&piece);
                r.stopped = hit;
                safe
            }
            (Some(_), _) => String::new(),
        };
        self.limit_push(&text)
    }

    /// The parts still held when the generation ended.
    pub fn done(&mut self) -> Delta {
        let mut d = Delta::default();
        if let Some(r) = self.raw.as_mut().filter(|r| !r.stopped) {
            let (safe, hit) = r.stop.push(&r.text.finish(&r.engine.tokenizer));
            let tail = if hit { safe } else { safe + &r.stop.flush() };
            d = self.parser.push(&tail);
        }
        d.append(self.parser.finish());
        self.limit(d)
    }

    /// The parts of a whole generation: its text (`text`, stop strings applied) or, when the
    /// syntax needs special tokens, its ids.
    pub fn whole(&mut self, text: &str, tokens: &[Token]) -> Delta {
        let mut all = Delta::default();
        if self.raw.is_some() {
            for t in tokens {
                all.append(self.token(t));
            }
        } else {
            all.append(self.limit_push(text));
        }
        all.append(self.done());
        all
    }

    fn limit_push(&mut self, text: &str) -> Delta {
        let d = self.parser.push(text);
        self.limit(d)
    }

    /// Without parallel tool calls, only the first call is kept.
    fn limit(&mut self, mut d: Delta) -> Delta {
        if !self.parallel {
            d.tool_calls.truncate(usize::from(self.parsed == 0));
        }
        self.parsed += d.tool_calls.len();
        d
    }

    /// `tool_calls` entries for `calls`, numbered on from the calls already given (`index` is
    /// the stream's field; the whole message leaves it out).
    pub fn calls_json(&mut self, calls: &[ToolCall], with_index: bool) -> Vec<Value> {
        calls
            .iter()
            .map(|c| {
                let index = self.calls;
                self.calls += 1;
                let id = c.id.clone().unwrap_or_else(|| format!("call_{}_{index}", self.id));
                let mut v =
                    json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}});
                if with_index {
                    v["index"] = json!(index);
                }
                v
            })
            .collect()
    }

    /// OpenAI's finish_reason: "tool_calls" when the model called a tool and was not cut off.
    pub fn finish_reason(&self, end: Ending) -> &'static str {
        let cut = matches!(end, Ending::Timeout | Ending::Finished(Finish::Length | Finish::ContextFull));
        if self.calls > 0 && !cut {
            "tool_calls"
        } else {
            end.openai()
        }
    }

    /// The whole assistant message from all of the generation's parts.
    pub fn message(&mut self, all: Delta) -> Value {
        let mut msg = json!({"role": "assistant", "content": all.content});
        if !all.reasoning.is_empty() {
            msg["reasoning_content"] = json!(all.reasoning);
        }
        if !all.tool_calls.is_empty() {
            msg["tool_calls"] = json!(self.calls_json(&all.tool_calls, false));
            if all.content.trim().is_empty() {
                msg["content"] = Value::Null;
            }
        }
        msg
    }

    /// A stream delta of `d` (None when it carries nothing).
    pub fn delta(&mut self, d: &Delta) -> Option<Value> {
        if d.is_empty() {
            return None;
        }
        let mut v = json!({});
        if !d.content.is_empty() {
            v["content"] = json!(d.content);
        }
        if !d.reasoning.is_empty() {
            v["reasoning_content"] = json!(d.reasoning);
        }
        if !d.tool_calls.is_empty() {
            v["tool_calls"] = json!(self.calls_json(&d.tool_calls, true));
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colibri::chat_output::{Syntax, ToolTags};

    fn reply(parallel: bool) -> Reply {
        let syntax = Syntax::Tagged { think: true, tools: ToolTags::Hermes };
        Reply::with(
            OutputParser::new(syntax, ParseOptions { tools: true, in_reasoning: true }),
            None,
            parallel,
            "chatcmpl-1",
        )
    }

    fn token(text: &str) -> Token {
        Token { id: Some(0), text: text.into(), logprob: None, routing: None }
    }

    const TEXT: &str = "Weather.</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

    #[test]
    fn whole_message_with_reasoning_and_tool_calls() {
        let mut r = reply(true);
        let all = r.whole(TEXT, &[]);
        let msg = r.message(all);
        let call = |i: usize, name: &str, args: &str| json!({"id": format!("call_chatcmpl-1_{i}"), "type": "function", "function": {"name": name, "arguments": args}});
        let want = json!({
            "role": "assistant", "content": null, "reasoning_content": "Weather.",
            "tool_calls": [call(0, "get_weather", r#"{"city":"Paris"}"#), call(1, "now", "{}")],
        });
        assert_eq!(msg, want);
        assert_eq!(r.finish_reason(Ending::Finished(Finish::Eos)), "tool_calls");
        assert_eq!(r.finish_reason(Ending::Finished(Finish::Length)), "length");
    }

    #[test]
    fn stream_deltas_carry_indexed_calls_and_parallel_false_keeps_one() {
        let mut r = reply(false);
        let mut deltas = Vec::new();
        for piece in TEXT.split_inclusive('>') {
            let d = r.token(&token(piece));
            deltas.extend(r.delta(&d));
        }
        let d = r.done();
        deltas.extend(r.delta(&d));
        let reasoning: String = deltas.iter().filter_map(|d| d["reasoning_content"].as_str()).collect();
        assert_eq!(reasoning, "Weather.");
        let calls: Vec<&Value> = deltas.iter().filter_map(|d| d["tool_calls"].as_array()).flatten().collect();
        assert_eq!(calls.len(), 1, "parallel_tool_calls false: {deltas:?}");
        assert_eq!(calls[0]["index"], 0);
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert!(deltas.iter().all(|d| d.get("content").is_none()), "{deltas:?}");
    }

    /// With the syntax's markers special tokens, the reply decodes the ids again keeping them
    /// (the events' text skips them), and applies the stop strings to that text.
    #[test]
    fn raw_mode_reads_special_tokens_from_the_ids() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri");
        let engine = Arc::new(Engine::load(&path, 64, Default::default(), 1).unwrap());
        let text = "Hi<|im_start|><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> STOP tail";
        let ids = engine.tokenizer.encode(text, false).unwrap();
        assert!(ids.iter().any(|&i| engine.tokenizer.is_special(i)), "<|im_start|> is one special token");
        let syntax = Syntax::Tagged { think: false, tools: ToolTags::Hermes };
        let raw = |stop: &str| Raw {
            engine: engine.clone(),
            text: DecodeState::new(false),
            stop: StopMatcher::new(vec![stop.to_string()]),
            stopped: false,
        };
        let options = ParseOptions { tools: true, in_reasoning: false };
        let tokens: Vec<Token> = ids.iter().map(|&i| Token { id: Some(i), ..token("") }).collect();
        let mut r = Reply::with(OutputParser::new(syntax, options), Some(raw(" STOP")), true, "x");
        let all = r.whole("ignored in raw mode", &tokens);
        assert_eq!(all.content, "Hi<|im_start|>");
        assert_eq!(all.tool_calls.len(), 1);
        assert_eq!((all.tool_calls[0].name.as_str(), all.tool_calls[0].arguments.as_str()), ("f", "{}"));
        // Streamed, with a stop string inside the call: the call is cut, and stays content.
        let mut r = Reply::with(OutputParser::new(syntax, options), Some(raw("arguments")), true, "x");
        let mut streamed = Delta::default();
        for t in &tokens {
            streamed.append(r.token(t));
        }
        streamed.append(r.done());
        assert_eq!(streamed.content, "Hi<|im_start|><tool_call>{\"name\": \"f\", \"");
        assert!(streamed.tool_calls.is_empty());
    }
}
