//! What a chat request asks the template for: the messages as transformers' templates see them
//! (assistant `tool_calls` with their JSON-string arguments turned into objects, tool results
//! with `tool_call_id`, `reasoning_content`), and the template variables: `tools` (by
//! `tool_choice`), `reasoning_effort`, `chat_template_kwargs`.
//!
//! `tool_choice`: absent or "auto" renders the tools and reads calls back; "none" renders no
//! tools and reads none; "required" and a named function (`{type: "function", function:
//! {name}}`, one of `tools`) render all tools and ask for calls only (to that function only),
//! which serve/format.rs keeps by a grammar of the template's call syntax.

use super::engine::Engine;
use super::error::ApiError;
use super::params::Fields;
use colibri::chat_output::{ToolMode, ToolSpec};
use colibri::tokenizer::ChatMessage;
use serde_json::{Map, Value};

/// Most messages in one conversation.
const MAX_MESSAGES: usize = 1024;
/// Most tools in one request.
const MAX_TOOLS: usize = 128;
/// Message keys passed to the template besides role and content.
const MESSAGE_KEYS: &[&str] = &["name", "tool_calls", "tool_call_id", "reasoning_content"];

/// The template variables and output reading of one chat request.
pub struct ChatInput {
    pub messages: Vec<ChatMessage>,
    /// `tools`, `reasoning_effort`, `chat_template_kwargs` entries.
    pub extra: Map<String, Value>,
    /// Read tool calls back from the output.
    pub read_tools: bool,
    /// `parallel_tool_calls` (default true): false keeps only the first call.
    pub parallel: bool,
    /// With `read_tools`: what the reply may hold, and the tools it may call (all for "auto"
    /// and "required", the named one for a named function).
    pub mode: ToolMode,
    pub callable: Vec<ToolSpec>,
}

/// `tool_choice` as asked.
enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

fn bad(param: &str, m: impl Into<String>) -> ApiError {
    ApiError::invalid(param, m)
}

/// Text of a `content`: a string, text parts, or absent / null (None).
fn content(m: &Value) -> Result<Option<String>, ApiError> {
    match m.get("content") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                (Some("text"), Some(t)) => Ok(t),
                _ => Err(bad("messages", "only text content parts are supported")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|t| Some(t.concat())),
        Some(_) => Err(bad("messages", "message content must be a string or a list of text parts")),
    }
}

/// An assistant turn's `tool_calls` with each `function.arguments` JSON string as the object it
/// holds (what templates expect; transformers' and llama.cpp's convention).
fn tool_calls(v: &Value) -> Result<Value, ApiError> {
    let list = v.as_array().ok_or_else(|| bad("messages", "tool_calls must be a list"))?;
    let calls = list.iter().map(|call| {
        let mut call = call.as_object().cloned().ok_or_else(|| bad("messages", "a tool call must be an object"))?;
        let f = call.get_mut("function").and_then(Value::as_object_mut);
        let f = f.ok_or_else(|| bad("messages", "a tool call needs a function object"))?;
        if !f.get("name").is_some_and(Value::is_string) {
            return Err(bad("messages", "a tool call's function needs a string name"));
        }
        match f.get("arguments") {
            None => {}
            Some(Value::String(text)) => {
                let args: Value = serde_json::from_str(text)
                    .map_err(|e| bad("messages", format!("tool call arguments are not valid JSON: {e}")))?;
                f.insert("arguments".into(), args);
            }
            Some(_) => return Err(bad("messages", "tool call arguments must be a JSON string")),
        }
        let id_ok = call.get("id").is_none_or(Value::is_string);
        if !id_ok || call.get("type").is_some_and(|t| t != "function") {
            return Err(bad("messages", "a tool call's id must be a string and its type \"function\""));
        }
        Ok(Value::Object(call))
    });
    calls.collect::<Result<Vec<_>, _>>().map(Value::Array)
}

fn message(m: &Value) -> Result<ChatMessage, ApiError> {
    let obj = m.as_object().ok_or_else(|| bad("messages", "each message must be an object"))?;
    let role =
        obj.get("role").and_then(Value::as_str).ok_or_else(|| bad("messages", "each message needs a string role"))?;
    if role.is_empty() || role.len() > 64 {
        return Err(bad("messages", "a message role is empty or too long"));
    }
    if obj.get("function_call").is_some_and(|v| !v.is_null()) {
        return Err(bad("messages", "function_call (the deprecated form of tool_calls) is not supported"));
    }
    let mut msg = ChatMessage { role: role.to_string(), content: content(m)?, fields: Map::new() };
    for (k, v) in obj.iter().filter(|(k, v)| MESSAGE_KEYS.contains(&k.as_str()) && !v.is_null()) {
        let v = match v {
            _ if k == "tool_calls" => tool_calls(v)?,
            Value::String(_) => v.clone(),
            _ => return Err(bad("messages", format!("a message's {k} must be a string"))),
        };
        msg.fields.insert(k.clone(), v);
    }
    // An assistant turn that only calls tools: "" rather than no content, which several
    // templates (Qwen3, Phi-3.5, granite) cannot render.
    if msg.content.is_none() && msg.fields.contains_key("tool_calls") {
        msg.content = Some(String::new());
    }
    Ok(msg)
}

/// `messages`: [{role, content: string | [{type: "text", text}] | null, name?, tool_calls?,
/// tool_call_id?, reasoning_content?}].
fn messages(f: &Fields<'_>) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match f.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) | None => return Err(bad("messages", "messages must be a non-empty list")),
        Some(_) => return Err(bad("messages", "messages must be a list")),
    };
    if list.len() > MAX_MESSAGES {
        return Err(bad("messages", "too many messages"));
    }
    list.iter().map(message).collect()
}

/// `tools`: [{type: "function", function: {name, description?, parameters?, strict?}}].
fn tools<'a>(f: &Fields<'a>) -> Result<Option<&'a Vec<Value>>, ApiError> {
    let list = match f.get("tools") {
        None => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("tools", "tools must be a list")),
    };
    if list.len() > MAX_TOOLS {
        return Err(bad("tools", format!("at most {MAX_TOOLS} tools")));
    }
    for t in list {
        let func = (t.get("type").and_then(Value::as_str) == Some("function")).then(|| t.get("function")).flatten();
        let ok = func.is_some_and(|f| {
            f.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty())
                && f.get("parameters").is_none_or(|p| p.is_object() || p.is_null())
        });
        if !ok {
            return Err(bad("tools", "each tool must be {type: \"function\", function: {name, parameters?: object}}"));
        }
    }
    Ok(Some(list))
}

/// `tool_choice` (see the module doc).
fn tool_choice(f: &Fields<'_>) -> Result<Choice, ApiError> {
    let shape = "tool_choice must be \"none\", \"auto\", \"required\" or {type: \"function\", function: {name}}";
    match f.get("tool_choice") {
        None => Ok(Choice::Auto),
        Some(Value::String(s)) if s == "auto" => Ok(Choice::Auto),
        Some(Value::String(s)) if s == "none" => Ok(Choice::None),
        Some(Value::String(s)) if s == "required" => Ok(Choice::Required),
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(name) => Ok(Choice::Named(name.to_string())),
                None => Err(bad("tool_choice", shape)),
            }
        }
        Some(_) => Err(bad("tool_choice", shape)),
    }
}

/// The mode and callable tools of `choice` over `tools`; 400 naming `tool_choice` for a
/// function that is not among them.
fn callable(choice: &Choice, tools: &[Value]) -> Result<(ToolMode, Vec<ToolSpec>), ApiError> {
    let all: Vec<ToolSpec> = tools.iter().filter_map(ToolSpec::of).collect();
    match choice {
        Choice::Named(name) => match all.into_iter().find(|t| &t.name == name) {
            Some(t) => Ok((ToolMode::Required, vec![t])),
            None => {
                let shown: String = name.chars().take(64).collect();
                Err(bad("tool_choice", format!("tool_choice names {shown:?}, which is not one of the tools")))
            }
        },
        Choice::Required => Ok((ToolMode::Required, all)),
        Choice::Auto | Choice::None => Ok((ToolMode::Auto, all)),
    }
}

/// Read and check a chat request's conversation and template variables for `engine`.
pub fn read(f: &Fields<'_>, engine: &Engine) -> Result<ChatInput, ApiError> {
    let messages = messages(f)?;
    let mut extra = Map::new();
    let mut read_tools = false;
    if let Some(Value::Object(kw)) = f.get("chat_template_kwargs") {
        extra.extend(
            kw.iter().filter(|(k, _)| !matches!(k.as_str(), "messages" | "tools")).map(|(k, v)| (k.clone(), v.clone())),
        );
    } else if f.get("chat_template_kwargs").is_some() {
        return Err(bad("chat_template_kwargs", "chat_template_kwargs must be an object"));
    }
    let tools = tools(f)?;
    let choice = tool_choice(f)?;
    let (mut mode, mut callable_tools) = (ToolMode::Auto, Vec::new());
    match tools {
        Some(list) if !matches!(choice, Choice::None) => {
            if !engine.chat.tools {
                return Err(bad("tools", "this model's chat template does not support tools"));
            }
            (mode, callable_tools) = callable(&choice, list)?;
            extra.insert("tools".into(), Value::Array(list.clone()));
            read_tools = true;
        }
        None if matches!(choice, Choice::Required | Choice::Named(_)) => {
            return Err(bad("tool_choice", "tool_choice asks for a tool call, but no tools are given"));
        }
        // tool_choice "none" (or "auto" without tools) asks for nothing.
        _ => {}
    }
    if let Some(effort) = f.str("reasoning_effort")? {
        if !matches!(effort, "low" | "medium" | "high") {
            return Err(bad("reasoning_effort", "reasoning_effort must be \"low\", \"medium\" or \"high\""));
        }
        if !engine.chat.reasoning_effort {
            return Err(bad("reasoning_effort", "this model's chat template has no reasoning effort"));
        }
        extra.insert("reasoning_effort".into(), Value::from(effort));
    }
    let parallel = f.get("parallel_tool_calls").is_none() || f.bool("parallel_tool_calls")?;
    Ok(ChatInput { messages, extra, read_tools, parallel, mode, callable: callable_tools })
}
