//! The minijinja environment configured like transformers' `_compile_jinja_template`.

use super::{ChatMessage, RenderArgs, MAX_RENDER_FUEL, MAX_RENDER_OUTPUT};
use crate::error::{Error, Result};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, ErrorKind};

const NAME: &str = "chat_template";
const KEY: &str = "chat_template";

pub(super) struct Renderer {
    env: Environment<'static>,
}

/// The error `raise_exception(msg)` raises, found again in the error chain after rendering.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn template_error(reason: String) -> Error {
    Error::Metadata { key: KEY.into(), reason }
}

impl Renderer {
    pub(super) fn compile(source: &str) -> Result<Renderer> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(format!("cannot configure the template syntax: {e}")))?;
        env.set_syntax(syntax);
        env.set_fuel(Some(MAX_RENDER_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg.clone()).with_source(Raised(msg)))
        });
        env.add_function("strftime_now", |fmt: &str| strftime::now(fmt));
        env.add_function("dict", dict);
        // Python's iter() fails on None and numbers (minijinja iterates none as empty); Jinja2's
        // Undefined iterates as empty.
        env.add_test("iterable", |v: &Value| {
            matches!(
                v.kind(),
                ValueKind::Seq | ValueKind::Map | ValueKind::Iterable | ValueKind::String | ValueKind::Undefined
            )
        });
        env.add_filter("tojson", pyjson::tojson_filter);
        env.add_template_owned(NAME, generation::as_if_blocks(source)).map_err(|e| {
            let line = e.line().map(|l| format!(" at line {l}")).unwrap_or_default();
            let detail = e.detail().unwrap_or("invalid template");
            template_error(format!("{}{line}: {detail}", e.kind()))
        })?;
        Ok(Renderer { env })
    }

    /// `strftime_now` reads `secs` instead of the clock.
    pub(super) fn at_time(mut self, secs: i64) -> Renderer {
        self.env.add_function("strftime_now", move |fmt: &str| strftime::format_utc(fmt, secs));
        self
    }

    pub(super) fn render(&self, args: &RenderArgs<'_>) -> Result<String> {
        let template = self.env.get_template(NAME).map_err(|e| template_error(e.to_string()))?;
        let mut out = CappedWriter { buf: Vec::new(), overflow: None };
        match (template.render_captured_to(context(args), &mut out), out.overflow) {
            (Ok(_), _) => String::from_utf8(out.buf).map_err(|_| template_error("rendered text is not UTF-8".into())),
            (Err(_), Some(bytes)) => Err(Error::TooLarge {
                what: "chat template output (bytes)",
                value: bytes as u64,
                cap: MAX_RENDER_OUTPUT as u64,
            }),
            (Err(e), None) => Err(render_error(&e)),
        }
    }
}

fn render_error(e: &minijinja::Error) -> Error {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(Raised(msg)) = s.downcast_ref::<Raised>() {
            return Error::InvalidArgument { reason: format!("the chat template rejects the messages: {msg}") };
        }
        source = s.source();
    }
    match e.kind() {
        ErrorKind::OutOfFuel => template_error(format!(
            "rendering exceeded the limit of {MAX_RENDER_FUEL} steps (endless loop or runaway allocation?)"
        )),
        _ => template_error(format!("render failed: {e}")),
    }
}

/// The template's variables: `extra` first, then what HF always passes (`tools` and `documents`
/// only when `extra` lacks them).
fn context(args: &RenderArgs<'_>) -> Value {
    let messages: Value = args.messages.iter().map(message).collect();
    let fixed = [
        ("messages", messages),
        ("add_generation_prompt", Value::from(args.add_generation_prompt)),
        ("bos_token", Value::from(args.bos_token)),
        ("eos_token", Value::from(args.eos_token)),
    ];
    let extra = args.extra.into_iter().flatten().filter(|(k, _)| !fixed.iter().any(|(f, _)| f == k));
    let mut vars: Vec<(String, Value)> = extra.map(|(k, v)| (k.clone(), from_json(v))).collect();
    for key in ["tools", "documents"] {
        if !vars.iter().any(|(k, _)| k == key) {
            vars.push((key.to_string(), Value::from(())));
        }
    }
    Value::from_pairs(vars.into_iter().chain(fixed.map(|(k, v)| (k.to_string(), v))))
}

/// Names a message's reasoning may come under; transformers passes it as the first and as
/// `thinking` (what GPT-OSS's template reads).
const REASONING: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// A message as transformers' `_alias_reasoning_fields(_normalize_chat_messages(..))` leaves it:
/// null keys dropped; reasoning, if any, first as `thinking` and again as `reasoning_content`.
fn message(m: &ChatMessage) -> Value {
    let fields = m.fields.iter().filter(|(k, v)| !v.is_null() && k.as_str() != "role" && k.as_str() != "content");
    let reasoning = REASONING.iter().find_map(|k| m.fields.get(*k).filter(|v| !v.is_null()));
    let mut pairs: Vec<(&str, Value)> = Vec::new();
    if let Some(r) = reasoning {
        // Python's {"thinking": r, **message, ...}: the key first, the message's own value wins.
        pairs.push(("thinking", from_json(m.fields.get("thinking").filter(|v| !v.is_null()).unwrap_or(r))));
    }
    pairs.push(("role", Value::from(m.role.as_str())));
    if let Some(c) = &m.content {
        pairs.push(("content", Value::from(c.as_str())));
    }
    for (k, v) in fields.filter(|(k, _)| reasoning.is_none() || k.as_str() != "thinking") {
        let v = if k == "reasoning_content" { reasoning.unwrap_or(v) } else { v };
        pairs.push((k.as_str(), from_json(v)));
    }
    if let Some(r) = reasoning.filter(|_| !m.fields.contains_key("reasoning_content")) {
        pairs.push(("reasoning_content", from_json(r)));
    }
    Value::from_pairs(pairs)
}

/// Python's `dict(**kwargs)` / `dict(mapping)` (transformers' `TemplateDict`).
fn dict(
    args: minijinja::value::Rest<Value>,
    kw: minijinja::value::Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let mut pairs: Vec<(Value, Value)> = Vec::new();
    for a in args.iter() {
        for k in a.try_iter()? {
            let v = a.get_item(&k)?;
            pairs.push((k, v));
        }
    }
    for k in kw.args() {
        pairs.push((Value::from(k), kw.get::<Value>(k)?));
    }
    Ok(Value::from_pairs(pairs))
}

fn from_json(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (_, Some(u), _) => Value::from(u),
            (_, _, f) => Value::from(f.unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => items.iter().map(from_json).collect(),
        J::Object(map) => Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), from_json(v)))),
    }
}

/// Collects the output and fails the render once it passes [`MAX_RENDER_OUTPUT`].
struct CappedWriter {
    buf: Vec<u8>,
    /// The output size that passed the cap, once it did.
    overflow: Option<usize>,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let total = self.buf.len().saturating_add(data.len());
        if total > MAX_RENDER_OUTPUT {
            self.overflow = Some(total);
            return Err(std::io::Error::other("chat template output too large"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

mod generation;
mod pyjson;
mod strftime;

#[cfg(test)]
mod tests {
    use super::pyjson::py_float_repr;

    #[test]
    fn python_float_repr() {
        for (x, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (0.0, "0.0"),
            (1.2345e300, "1.2345e+300"),
        ] {
            assert_eq!(py_float_repr(x), want);
        }
    }
}
