//! Tool-call bodies to calls: the JSON of Hermes/Qwen and Mistral, the XML-style parameters of
//! Qwen3-Coder and GLM-4.5, DeepSeek's separator tokens. A body that does not parse gives None
//! (the caller keeps its text as content).

use serde_json::{Map, Value};

/// One call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The id the model wrote (Mistral's `"id"`), else None: the caller names the call.
    pub id: Option<String>,
    pub name: String,
    /// The arguments as JSON text (OpenAI's `function.arguments`).
    pub arguments: String,
}

/// Arguments as JSON text: an object compactly, a string when it holds JSON.
fn arguments_text(v: Option<&Value>) -> Option<String> {
    match v {
        None | Some(Value::Null) => Some("{}".into()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok().map(|_| s.trim().to_string()),
        Some(v @ Value::Object(_)) => serde_json::to_string(v).ok(),
        Some(_) => None,
    }
}

/// `{"name": …, "arguments" | "parameters": …, "id"?: …}`.
fn from_object(v: &Value) -> Option<ToolCall> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let arguments = arguments_text(o.get("arguments").or_else(|| o.get("parameters")))?;
    let id = o.get("id").and_then(Value::as_str).map(str::to_string);
    Some(ToolCall { id, name: name.to_string(), arguments })
}

/// A parameter value written as text: JSON when it reads as a non-string JSON value, else the
/// text itself.
fn typed(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v) if !v.is_string() => v,
        _ => Value::String(text.to_string()),
    }
}

/// The text between `open` and `close` at the start of `s` (after whitespace), and the rest.
fn between<'a>(s: &'a str, open: &str, close: &str) -> Option<(&'a str, &'a str)> {
    let s = s.trim_start().strip_prefix(open)?;
    let end = s.find(close)?;
    Some((&s[..end], &s[end + close.len()..]))
}

/// A parameter value without the newline the XML style puts around it.
fn value_text(v: &str) -> &str {
    let v = v.strip_prefix('\n').unwrap_or(v);
    v.strip_suffix('\n').unwrap_or(v)
}

/// Qwen3-Coder: `<function=NAME>\n<parameter=P>\nV\n</parameter>\n</function>`.
fn qwen_xml(body: &str) -> Option<ToolCall> {
    let rest = body.trim().strip_prefix("<function=")?;
    let (name, mut rest) = rest.split_once('>')?;
    let mut args = Map::new();
    while let Some(r) = rest.trim_start().strip_prefix("<parameter=") {
        let (key, r) = r.split_once('>')?;
        let end = r.find("</parameter>")?;
        args.insert(key.trim().to_string(), typed(value_text(&r[..end])));
        rest = &r[end + "</parameter>".len()..];
    }
    if rest.trim() != "</function>" {
        return None;
    }
    Some(ToolCall { id: None, name: name.trim().to_string(), arguments: Value::Object(args).to_string() })
}

/// GLM-4.5: `NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>…`.
fn glm(body: &str) -> Option<ToolCall> {
    let body = body.trim();
    let split = body.find("<arg_key>").unwrap_or(body.len());
    let name = body[..split].trim();
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains(['{', '<']) {
        return None;
    }
    let mut rest = &body[split..];
    let mut args = Map::new();
    while !rest.trim().is_empty() {
        let (key, r) = between(rest, "<arg_key>", "</arg_key>")?;
        let (value, r) = between(r, "<arg_value>", "</arg_value>")?;
        args.insert(key.trim().to_string(), typed(value));
        rest = r;
    }
    Some(ToolCall { id: None, name: name.to_string(), arguments: Value::Object(args).to_string() })
}

/// The body of one `<tool_call>…</tool_call>`.
pub(super) fn hermes(body: &str) -> Option<Vec<ToolCall>> {
    let t = body.trim();
    let call = if t.starts_with('{') {
        from_object(&serde_json::from_str(t).ok()?)
    } else if t.starts_with("<function=") {
        qwen_xml(t)
    } else {
        glm(t)
    };
    call.map(|c| vec![c])
}

/// Everything after the first `[TOOL_CALLS]`: a JSON list of calls, or `NAME[ARGS]{…}` (with
/// an optional `[CALL_ID]ID`) per call, calls separated by further `[TOOL_CALLS]`.
pub(super) fn mistral(body: &str) -> Option<Vec<ToolCall>> {
    let t = body.trim();
    if t.starts_with('[') {
        let list: Vec<Value> = serde_json::from_str(t).ok()?;
        return list.iter().map(from_object).collect::<Option<Vec<_>>>().filter(|c| !c.is_empty());
    }
    t.split("[TOOL_CALLS]")
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (head, args) = part.split_once("[ARGS]")?;
            let (name, id) = match head.split_once("[CALL_ID]") {
                Some((n, id)) => (n, Some(id.trim().to_string())),
                None => (head, None),
            };
            let arguments = arguments_text(Some(&Value::String(args.to_string())))?;
            let name = name.trim();
            (!name.is_empty()).then(|| ToolCall { id, name: name.to_string(), arguments })
        })
        .collect::<Option<Vec<_>>>()
        .filter(|c| !c.is_empty())
}

pub(super) const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";

/// Between DeepSeek's calls-begin and calls-end tokens: `<｜tool▁call▁begin｜>A<｜tool▁sep｜>B<｜tool▁call▁end｜>`
/// per call, where (V3, R1) A is `function` and B is `NAME\n```json\n{…}\n````, or (V3.1) A is
/// the name and B the arguments.
pub(super) fn deepseek(body: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = body;
    while let Some((inner, r)) = between(rest, DS_CALL_BEGIN, DS_CALL_END) {
        let (a, b) = inner.split_once(DS_SEP)?;
        let (name, args) = if a.trim() == "function" {
            let (name, fenced) = b.split_once('\n')?;
            let json = fenced.trim().strip_prefix("```json")?.strip_suffix("```")?;
            (name, json)
        } else {
            (a, b)
        };
        let arguments = arguments_text(Some(&Value::String(args.to_string())))?;
        calls.push(ToolCall { id: None, name: name.trim().to_string(), arguments });
        rest = r;
    }
    (rest.trim().is_empty() && !calls.is_empty()).then_some(calls)
}
