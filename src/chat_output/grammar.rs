//! Grammars (llguidance Lark, see [`crate::grammar::ResponseFormat::Lark`]) that force a model's
//! tool-call syntax, each call's arguments held to its tool's `parameters` JSON Schema:
//! - [`ToolMode::Required`] (OpenAI `tool_choice: "required"`, or a named function with only that
//!   tool given): the output is one call (several when parallel), nothing else;
//! - [`ToolMode::Auto`]: free text, and once the family's call opener appears, calls to the end.
//!   llguidance has no trigger mechanism (llama.cpp's lazy grammars start matching only at a
//!   trigger word); the same language is written into the grammar instead: text that does not
//!   contain the opener, or text up to its first occurrence followed by calls. An opener that is a
//!   special token cannot occur in text at all.
//!
//! The forms are those [`super::OutputParser`] reads back: Hermes/Qwen `<tool_call>\n{"name": …,
//! "arguments": {…}}\n</tool_call>` (also for templates whose own examples use XML bodies),
//! Mistral `[TOOL_CALLS][{…}]` or (templates with `[ARGS]`) `[TOOL_CALLS]NAME[ARGS]{…}`,
//! DeepSeek V3/R1 (`function<｜tool▁sep｜>NAME\n```json…`) or V3.1 (`NAME<｜tool▁sep｜>{…}`),
//! harmony `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}` (one call:
//! `<|call|>` ends the turn), optionally after analysis messages. Markers that are special
//! tokens of the tokenizer are written by id (`<[id]>`), others as text.

use super::{Syntax, ToolTags};
use crate::error::{Error, Result};
use serde_json::{json, Value};

/// What the grammar asks of the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolMode {
    /// Text or calls, the model's choice; a call's arguments follow its schema.
    Auto,
    /// Only calls (at least one).
    Required,
}

/// How the reply is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallOptions {
    pub mode: ToolMode,
    /// More than one call allowed.
    pub parallel: bool,
    /// The prompt opened a reasoning block (`<think>`): the reply starts with reasoning text up
    /// to `</think>`, as [`super::Syntax::starts_in_reasoning`] tells.
    pub in_reasoning: bool,
}

/// One tool: its name and its arguments' JSON Schema.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub parameters: Value,
}

impl ToolSpec {
    /// The spec of an OpenAI tool `{type: "function", function: {name, parameters?}}`; None
    /// when it has no name. Missing parameters: any object.
    pub fn of(tool: &Value) -> Option<ToolSpec> {
        let f = tool.get("function")?;
        let name = f.get("name")?.as_str()?.to_string();
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(p) => p.clone(),
        };
        Some(ToolSpec { name, parameters })
    }
}

/// The options colibri's JSON output always uses (see [`crate::grammar`]).
fn guidance() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

/// `%json{…}` of `schema` with the output-form options.
fn json_of(schema: &Value) -> Result<String> {
    let mut s = match schema {
        Value::Object(_) => schema.clone(),
        Value::Bool(true) => json!({}),
        _ => return Err(Error::InvalidArgument { reason: "a tool's parameters must be a JSON Schema object".into() }),
    };
    s["x-guidance"] = guidance();
    Ok(format!("%json {s}"))
}

/// The schema of a whole `{"name": …, "arguments": {…}}` object calling one of `tools`.
fn call_object(tools: &[ToolSpec]) -> Result<String> {
    let one = |t: &ToolSpec| {
        json!({"type": "object", "properties": {"name": {"const": t.name}, "arguments": t.parameters},
               "required": ["name", "arguments"], "additionalProperties": false})
    };
    let schema = match tools {
        [t] => one(t),
        _ => json!({"anyOf": tools.iter().map(one).collect::<Vec<_>>()}),
    };
    json_of(&schema)
}

/// Writes markers as Lark atoms: special tokens by id, other text quoted.
struct Marks<'a> {
    special: &'a dyn Fn(&str) -> Option<u32>,
}

impl Marks<'_> {
    fn lit(&self, s: &str) -> String {
        match (self.special)(s) {
            Some(id) => format!("<[{id}]>"),
            None => Value::from(s).to_string(),
        }
    }

    /// Lark for "text, or text then the opener then `calls_after_opener`" (Auto): the
    /// alternatives and the lexeme rules they use.
    fn free_then(&self, opener: &str, calls_after_opener: &str) -> Result<(String, String)> {
        if (self.special)(opener).is_some() {
            // Special tokens never occur in text: the opener ends it.
            let alts = format!("TEXT | TEXT? {} {calls_after_opener}", self.lit(opener));
            return Ok((alts, "TEXT: /(?s:.+)/\n".into()));
        }
        let mut rules = String::new();
        let lead = upto("LEAD", opener, &mut rules)?;
        let o = escape(opener)?;
        rules.push_str(&format!("PLAIN: /(?s:.+)/ & ~/(?s:.*){o}(?s:.*)/\n"));
        Ok((format!("PLAIN | {lead} {calls_after_opener}"), rules))
    }
}

/// The lexeme `name`: any text up to and including the first `marker`; its rule goes into
/// `rules`, its name is returned.
fn upto(name: &str, marker: &str, rules: &mut String) -> Result<String> {
    let o = escape(marker)?;
    rules.push_str(&format!("{name}: /(?s:.*){o}/ & ~/(?s:.*){o}(?s:.+)/\n"));
    Ok(name.to_string())
}

/// `s` as a regex matching it literally inside a Lark `/…/` (a `/` as `\x2F`).
fn escape(s: &str) -> Result<String> {
    Ok(s.chars().fold(String::new(), |mut out, c| {
        if c == '/' {
            out.push_str("\\x2F");
            return out;
        }
        if "\\.+*?()|[]{}^$-&~#".contains(c) {
            out.push('\\');
        }
        out.push(c);
        out
    }))
}

/// One alternative per tool: `prefix(name) %json{parameters} suffix`, as a rule `call`.
fn per_tool(tools: &[ToolSpec], each: impl Fn(&ToolSpec, String) -> String) -> Result<String> {
    let alts = tools.iter().map(|t| Ok(each(t, json_of(&t.parameters)?))).collect::<Result<Vec<_>>>()?;
    Ok(format!("call: {}\n", alts.join("\n    | ")))
}

/// The Lark grammar of a reply to `tools` in `syntax` (the template source tells the variant):
/// None when the syntax has no tool calls. `special` gives the id of a marker that is a special
/// token of the tokenizer.
pub fn tool_grammar(
    syntax: Syntax,
    template: &str,
    tools: &[ToolSpec],
    options: &CallOptions,
    special: &dyn Fn(&str) -> Option<u32>,
) -> Result<Option<String>> {
    let CallOptions { mode, parallel, in_reasoning } = *options;
    if tools.is_empty() {
        return Err(Error::InvalidArgument { reason: "no tools to call".into() });
    }
    let m = Marks { special };
    let tags = match syntax {
        Syntax::Harmony => return harmony(&m, tools, mode).map(Some),
        Syntax::Tagged { tools: ToolTags::None, .. } => return Ok(None),
        Syntax::Tagged { tools, .. } => tools,
    };
    let Some((opener, rest, rules)) = tagged_calls(&m, tags, template, tools, parallel)? else { return Ok(None) };
    let mut rules = rules;
    // Reasoning first (the prompt opened it): text up to `</think>`.
    let thought = if in_reasoning { upto("THOUGHT", "</think>", &mut rules)? + " " } else { String::new() };
    let start = match mode {
        ToolMode::Required if in_reasoning => {
            rules.push_str("WS: /[ \\n]+/\n");
            format!("start: {thought}WS? {} {rest}\n", m.lit(opener))
        }
        ToolMode::Required => format!("start: {} {rest}\n", m.lit(opener)),
        ToolMode::Auto => {
            let (alts, lexemes) = m.free_then(opener, &rest)?;
            rules.push_str(&lexemes);
            match in_reasoning {
                true => format!("start: {thought}({alts})?\n"),
                false => format!("start: {alts}\n"),
            }
        }
    };
    Ok(Some(format!("{start}{rules}")))
}

/// The tagged syntaxes' calls: (opener, what follows it, the rules that uses).
fn tagged_calls(
    m: &Marks<'_>,
    tags: ToolTags,
    template: &str,
    tools: &[ToolSpec],
    parallel: bool,
) -> Result<Option<(&'static str, String, String)>> {
    Ok(Some(match tags {
        ToolTags::Hermes => {
            let (open, close) = (m.lit("<tool_call>"), m.lit("</tool_call>"));
            let body = format!("body: \"\\n\" {} \"\\n\" {close}\n", call_object(tools)?);
            let rest = if parallel { format!("body (\"\\n\" {open} body)*") } else { "body".into() };
            ("<tool_call>", rest, body)
        }
        ToolTags::Mistral if template.contains("[ARGS]") => {
            let (open, args) = (m.lit("[TOOL_CALLS]"), m.lit("[ARGS]"));
            let call = per_tool(tools, |t, j| format!("{} {args} {j}", Value::from(t.name.as_str())))?;
            let rest = if parallel { format!("call ({open} call)*") } else { "call".into() };
            ("[TOOL_CALLS]", rest, call)
        }
        ToolTags::Mistral => {
            let obj = call_object(tools)?;
            let more = if parallel { format!("(\", \" {obj})*") } else { String::new() };
            let rest = format!("\"[\" {obj} {more} \"]\"");
            ("[TOOL_CALLS]", rest, String::new())
        }
        ToolTags::DeepSeek => {
            let (begin, sep, end) =
                (m.lit("<｜tool▁call▁begin｜>"), m.lit("<｜tool▁sep｜>"), m.lit("<｜tool▁call▁end｜>"));
            let v3 = template.contains("```json");
            let call = per_tool(tools, |t, j| {
                if v3 {
                    let head = Value::from(format!("{}\n```json\n", t.name));
                    format!("{begin} \"function\" {sep} {head} {j} \"\\n```\" {end}")
                } else {
                    format!("{begin} {} {sep} {j} {end}", Value::from(t.name.as_str()))
                }
            })?;
            let rest = format!("call{} {}", if parallel { "+" } else { "" }, m.lit("<｜tool▁calls▁end｜>"));
            ("<｜tool▁calls▁begin｜>", rest, call)
        }
        ToolTags::None => return Ok(None),
    }))
}

/// Harmony: analysis messages, then (Auto) a final message or a call, or (Required) a call.
fn harmony(m: &Marks<'_>, tools: &[ToolSpec], mode: ToolMode) -> Result<String> {
    let (channel, message, end, start) =
        (m.lit("<|channel|>"), m.lit("<|message|>"), m.lit("<|end|>"), m.lit("<|start|>"));
    let constrain = m.lit("<|constrain|>");
    let call = per_tool(tools, |t, j| {
        let head = Value::from(format!("commentary to=functions.{} ", t.name));
        format!("{channel} {head} {constrain} \"json\" {message} {j}")
    })?;
    // Analysis text runs to <|end|>: a special token ends it; as text, the lexeme stops there.
    let body = if (m.special)("<|end|>").is_some() {
        format!("analysis: {channel} \"analysis\" {message} BODY? {end} {start} \"assistant\"\nBODY: /(?s:.+)/\n")
    } else {
        let mut rules = format!("analysis: {channel} \"analysis\" {message} UPTO_END {start} \"assistant\"\n");
        upto("UPTO_END", "<|end|>", &mut rules)?;
        rules + "BODY: /(?s:.+)/\n"
    };
    let last = match mode {
        ToolMode::Required => "call".to_string(),
        ToolMode::Auto => format!("call | {channel} \"final\" {message} BODY?"),
    };
    Ok(format!("start: analysis* ({last})\n{call}{body}"))
}
