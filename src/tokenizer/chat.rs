//! Chat templates: renders a conversation into the prompt text the model was trained on, the way
//! transformers' `apply_chat_template(messages, add_generation_prompt, tokenize=False)` does
//! (Jinja with `trim_blocks`/`lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`,
//! Python's `tojson` and Python string methods), through `minijinja` (feature `chat-template`).
//!
//! Templates come from model files, so rendering is bounded: a fuel limit stops endless loops and
//! runaway allocation, and an output cap stops explosive output. Tokenising the text is the
//! caller's job ([`super::Tokenizer::encode`] with `add_special_tokens = false`: templates write
//! their own special tokens).

use crate::error::Result;
use serde::{Deserialize, Serialize};

/// Most template steps (minijinja fuel: instructions plus allocation) one render may take.
pub const MAX_RENDER_FUEL: u64 = 1_000_000;
/// Most bytes one render may produce.
pub const MAX_RENDER_OUTPUT: usize = 1 << 20;

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// "system", "user", "assistant", ... (whatever the template knows).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

/// Everything a render sees: HF's named arguments plus its `**kwargs`.
#[derive(Clone, Copy, Debug)]
pub struct RenderArgs<'a> {
    pub messages: &'a [ChatMessage],
    /// End with the opening of an assistant turn.
    pub add_generation_prompt: bool,
    pub bos_token: &'a str,
    pub eos_token: &'a str,
    /// Further template variables (HF `apply_chat_template(**kwargs)`: `enable_thinking`,
    /// `tools`, ...). They cannot override the four above.
    pub extra: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// A compiled chat template. Immutable; `Send + Sync`.
pub struct ChatTemplate {
    engine: engine::Engine,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compile `source` once; a syntax error is an [`crate::Error::Metadata`] naming the line.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        engine::Engine::compile(source).map(|engine| ChatTemplate { engine })
    }

    /// Render like HF `apply_chat_template(messages, add_generation_prompt, tokenize=False)` with
    /// `bos_token` and `eos_token` as variables. `raise_exception(msg)` in the template gives
    /// [`crate::Error::InvalidArgument`] carrying `msg`; exhausting the fuel gives
    /// [`crate::Error::Metadata`], output beyond [`MAX_RENDER_OUTPUT`] [`crate::Error::TooLarge`].
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String> {
        self.render_with(&RenderArgs { messages, add_generation_prompt, bos_token, eos_token, extra: None })
    }

    /// [`render`](Self::render) with extra template variables.
    pub fn render_with(&self, args: &RenderArgs<'_>) -> Result<String> {
        self.engine.render(args)
    }
}

#[cfg(feature = "chat-template")]
mod engine {
    //! The minijinja environment configured like transformers' `_compile_jinja_template`.

    use super::{RenderArgs, MAX_RENDER_FUEL, MAX_RENDER_OUTPUT};
    use crate::error::{Error, Result};
    use minijinja::syntax::SyntaxConfig;
    use minijinja::value::Value;
    use minijinja::{Environment, ErrorKind};

    const NAME: &str = "chat_template";
    const KEY: &str = "chat_template";

    pub(super) struct Engine {
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

    impl Engine {
        pub(super) fn compile(source: &str) -> Result<Engine> {
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
            env.add_filter("tojson", pyjson::tojson_filter);
            env.add_template_owned(NAME, source.to_string()).map_err(|e| {
                let line = e.line().map(|l| format!(" at line {l}")).unwrap_or_default();
                let detail = e.detail().unwrap_or("invalid template");
                template_error(format!("{}{line}: {detail}", e.kind()))
            })?;
            Ok(Engine { env })
        }

        pub(super) fn render(&self, args: &RenderArgs<'_>) -> Result<String> {
            let template = self.env.get_template(NAME).map_err(|e| template_error(e.to_string()))?;
            let mut out = CappedWriter { buf: Vec::new(), overflow: None };
            match (template.render_captured_to(context(args), &mut out), out.overflow) {
                (Ok(_), _) => {
                    String::from_utf8(out.buf).map_err(|_| template_error("rendered text is not UTF-8".into()))
                }
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

    /// The template's variables: `extra` first, then the four HF always passes.
    fn context(args: &RenderArgs<'_>) -> Value {
        let messages: Value = args
            .messages
            .iter()
            .map(|m| Value::from_pairs([("role", m.role.as_str()), ("content", m.content.as_str())]))
            .collect();
        let fixed = [
            ("messages", messages),
            ("add_generation_prompt", Value::from(args.add_generation_prompt)),
            ("bos_token", Value::from(args.bos_token)),
            ("eos_token", Value::from(args.eos_token)),
        ];
        let extra = args.extra.into_iter().flatten().filter(|(k, _)| !fixed.iter().any(|(f, _)| f == k));
        let extra: Vec<(String, Value)> = extra.map(|(k, v)| (k.clone(), from_json(v))).collect();
        Value::from_pairs(extra.into_iter().chain(fixed.map(|(k, v)| (k.to_string(), v))))
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

    mod pyjson {
        //! `tojson` as transformers defines it: Python's `json.dumps(x, ensure_ascii=False,
        //! indent=None, separators=None, sort_keys=False)`: no HTML escaping and Python's float
        //! repr, where minijinja's built-in escapes `<>&'` and writes floats like serde_json.

        use super::super::MAX_RENDER_OUTPUT;
        use minijinja::value::{Kwargs, Value, ValueKind};
        use minijinja::{Error, ErrorKind};
        use std::fmt::Write;

        /// Nesting beyond this is an error (also stops self-referencing namespaces).
        const MAX_DEPTH: usize = 128;
        /// Longest indentation unit accepted.
        const MAX_INDENT: usize = 256;

        struct Style {
            ensure_ascii: bool,
            /// Indentation unit; `None` writes everything on one line.
            indent: Option<String>,
            item_sep: String,
            key_sep: String,
            sort_keys: bool,
        }

        fn invalid(msg: impl Into<String>) -> Error {
            Error::new(ErrorKind::InvalidOperation, msg.into())
        }

        /// `x | tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
        pub(super) fn tojson_filter(
            value: &Value,
            args: minijinja::value::Rest<Value>,
            kw: Kwargs,
        ) -> Result<Value, Error> {
            let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
                match (args.get(i), kw.get::<Option<Value>>(name)?) {
                    (Some(_), Some(_)) => Err(invalid(format!("tojson got '{name}' twice"))),
                    (Some(v), None) => Ok(Some(v.clone())),
                    (None, v) => Ok(v),
                }
            };
            if args.len() > 4 {
                return Err(invalid("tojson takes at most 4 positional arguments"));
            }
            let truthy = |v: Option<Value>| v.is_some_and(|v| v.is_true());
            let ensure_ascii = truthy(arg(0, "ensure_ascii")?);
            let indent = match arg(1, "indent")?.filter(|v| !v.is_none() && !v.is_undefined()) {
                None => None,
                Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
                Some(v) => {
                    let width = usize::try_from(v).map_err(|_| invalid("tojson indent must be >= 0"))?;
                    Some(" ".repeat(width.min(MAX_INDENT + 1)))
                }
            };
            if indent.as_ref().is_some_and(|unit| unit.len() > MAX_INDENT) {
                return Err(invalid(format!("tojson indent longer than {MAX_INDENT}")));
            }
            let (item_sep, key_sep) = match arg(2, "separators")?.filter(|v| !v.is_none() && !v.is_undefined()) {
                Some(v) => {
                    let parts: Vec<Value> = v.try_iter()?.collect();
                    match parts.as_slice() {
                        [a, b] => (a.to_string(), b.to_string()),
                        _ => return Err(invalid("tojson separators must be an (item, key) pair")),
                    }
                }
                None if indent.is_some() => (",".to_string(), ": ".to_string()),
                None => (", ".to_string(), ": ".to_string()),
            };
            let sort_keys = truthy(arg(3, "sort_keys")?);
            kw.assert_all_used()?;
            let style = Style { ensure_ascii, indent, item_sep, key_sep, sort_keys };
            let mut out = String::new();
            write_value(&mut out, value, &style, 0)?;
            Ok(Value::from_safe_string(out))
        }

        fn newline(out: &mut String, style: &Style, depth: usize) {
            if let Some(unit) = &style.indent {
                out.push('\n');
                for _ in 0..depth {
                    out.push_str(unit);
                }
            }
        }

        fn write_value(out: &mut String, v: &Value, style: &Style, depth: usize) -> Result<(), Error> {
            if depth > MAX_DEPTH {
                return Err(invalid("tojson: value nested too deeply (circular reference?)"));
            }
            match v.kind() {
                ValueKind::Undefined | ValueKind::None => out.push_str("null"),
                ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
                ValueKind::Number => write_number(out, v)?,
                ValueKind::String | ValueKind::Plain => write_str(out, &v.to_string(), style.ensure_ascii),
                ValueKind::Map => {
                    let mut keys: Vec<Value> = v.try_iter()?.collect();
                    if style.sort_keys {
                        keys.sort();
                    }
                    let items = keys.into_iter().map(|k| v.get_item(&k).map(|val| (Some(k), val)));
                    write_container(out, ('{', '}'), items, style, depth)?;
                }
                ValueKind::Seq | ValueKind::Iterable | ValueKind::Bytes => {
                    let items = v.try_iter()?.map(|item| Ok((None, item)));
                    write_container(out, ('[', ']'), items, style, depth)?;
                }
                _ => return Err(invalid(format!("tojson: cannot serialise {v}"))),
            }
            Ok(())
        }

        /// A list (keys `None`) or an object (keys `Some`).
        fn write_container(
            out: &mut String,
            (open, close): (char, char),
            items: impl Iterator<Item = Result<(Option<Value>, Value), Error>>,
            style: &Style,
            depth: usize,
        ) -> Result<(), Error> {
            out.push(open);
            let mut empty = true;
            for item in items {
                let (key, value) = item?;
                if !empty {
                    out.push_str(&style.item_sep);
                }
                empty = false;
                newline(out, style, depth + 1);
                if let Some(key) = key {
                    write_key(out, &key, style)?;
                    out.push_str(&style.key_sep);
                }
                write_value(out, &value, style, depth + 1)?;
                if out.len() > MAX_RENDER_OUTPUT {
                    return Err(invalid("tojson output too large"));
                }
            }
            if !empty {
                newline(out, style, depth);
            }
            out.push(close);
            Ok(())
        }

        /// Python converts str, int, float, bool and None keys to strings.
        fn write_key(out: &mut String, key: &Value, style: &Style) -> Result<(), Error> {
            match key.kind() {
                ValueKind::String => write_str(out, key.as_str().unwrap_or_default(), style.ensure_ascii),
                ValueKind::Number | ValueKind::Bool | ValueKind::None => {
                    let mut text = String::new();
                    write_value(&mut text, key, style, 0)?;
                    write_str(out, &text, style.ensure_ascii);
                }
                _ => return Err(invalid(format!("tojson: keys must be str, int, float, bool or None, not {key}"))),
            }
            Ok(())
        }

        fn write_number(out: &mut String, v: &Value) -> Result<(), Error> {
            if v.is_integer() {
                let i = i128::try_from(v.clone())?;
                let _ = write!(out, "{i}");
            } else {
                out.push_str(&py_float_repr(f64::try_from(v.clone())?));
            }
            Ok(())
        }

        /// Python's `repr(float)` as `json.dumps` writes it: shortest round-trip digits, exponent
        /// form outside 1e-4 <= |x| < 1e16, `NaN` / `Infinity`.
        pub(super) fn py_float_repr(x: f64) -> String {
            if x.is_nan() {
                return "NaN".into();
            }
            if x.is_infinite() {
                return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
            }
            let sci = format!("{x:e}");
            let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
            let exp: i32 = exp.parse().unwrap_or(0);
            if x == 0.0 || (-4..16).contains(&exp) {
                let plain = format!("{x}");
                if plain.contains('.') {
                    plain
                } else {
                    plain + ".0"
                }
            } else {
                let sign = if exp < 0 { '-' } else { '+' };
                format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
            }
        }

        fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{08}' => out.push_str("\\b"),
                    '\u{0c}' => out.push_str("\\f"),
                    c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                        let mut units = [0u16; 2];
                        for unit in c.encode_utf16(&mut units) {
                            let _ = write!(out, "\\u{unit:04x}");
                        }
                    }
                    c => out.push(c),
                }
            }
            out.push('"');
        }
    }

    mod strftime {
        //! `strftime_now(fmt)`: transformers' `datetime.now().strftime(fmt)`, in UTC (no time
        //! zone database here) and for the common C conversions; others pass through verbatim.

        use std::fmt::Write;

        const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
        const MONTHS: [&str; 12] = [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ];

        pub(super) fn now(fmt: &str) -> String {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            format_utc(fmt, secs)
        }

        /// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01 (Howard Hinnant's
        /// civil-from-days).
        fn civil(days: i64) -> (i64, usize, i64) {
            let z = days + 719_468;
            let era = z.div_euclid(146_097);
            let doe = z - era * 146_097;
            let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
            let mp = (5 * doy + 2) / 153;
            let day = doy - (153 * mp + 2) / 5 + 1;
            let month = if mp < 10 { mp + 3 } else { mp - 9 };
            (yoe + era * 400 + i64::from(month <= 2), month as usize, day)
        }

        /// Format `secs` since the epoch (UTC) with C `strftime` conversions, including glibc's
        /// `%-d` (no padding).
        pub(super) fn format_utc(fmt: &str, secs: i64) -> String {
            let days = secs.div_euclid(86_400);
            let tod = secs.rem_euclid(86_400);
            let (year, month, day) = civil(days);
            let (hour, minute, second) = (tod / 3600, tod / 60 % 60, tod % 60);
            let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
            let yday = days - civil_days_before_year(year) + 1;
            let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
            let mut out = String::new();
            let mut chars = fmt.chars();
            while let Some(c) = chars.next() {
                if c != '%' {
                    out.push(c);
                    continue;
                }
                let (pad, conv) = match chars.next() {
                    Some('-') => (false, chars.next()),
                    other => (true, other),
                };
                let num = |out: &mut String, v: i64, width: usize| {
                    let _ = if pad { write!(out, "{v:0width$}") } else { write!(out, "{v}") };
                };
                match conv {
                    Some('Y') => num(&mut out, year, 4),
                    Some('y') => num(&mut out, year.rem_euclid(100), 2),
                    Some('m') => num(&mut out, month as i64, 2),
                    Some('d') => num(&mut out, day, 2),
                    Some('e') => {
                        let _ = write!(out, "{day:>2}");
                    }
                    Some('j') => num(&mut out, yday, 3),
                    Some('H') => num(&mut out, hour, 2),
                    Some('I') => num(&mut out, hour12, 2),
                    Some('M') => num(&mut out, minute, 2),
                    Some('S') => num(&mut out, second, 2),
                    Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
                    Some('A') => out.push_str(DAYS[weekday]),
                    Some('a') => out.push_str(&DAYS[weekday][..3]),
                    Some('B') => out.push_str(MONTHS[month - 1]),
                    Some('b') | Some('h') => out.push_str(&MONTHS[month - 1][..3]),
                    Some('F') => {
                        let _ = write!(out, "{year:04}-{month:02}-{day:02}");
                    }
                    Some('T') => {
                        let _ = write!(out, "{hour:02}:{minute:02}:{second:02}");
                    }
                    Some('Z') => out.push_str("UTC"),
                    Some('z') => out.push_str("+0000"),
                    Some('%') => out.push('%'),
                    Some(other) => {
                        out.push('%');
                        if !pad {
                            out.push('-');
                        }
                        out.push(other);
                    }
                    None => out.push('%'),
                }
            }
            out
        }

        /// Days from 1970-01-01 to January 1st of `year`.
        fn civil_days_before_year(year: i64) -> i64 {
            let y = year - 1;
            let leaps = |y: i64| y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400);
            365 * (year - 1970) + leaps(y) - leaps(1969)
        }

        #[cfg(test)]
        mod tests {
            use super::format_utc;

            #[test]
            fn formats_known_instants() {
                // 2024-02-29 13:05:09 UTC, a Thursday, day 60 of a leap year.
                let t = 1_709_211_909;
                assert_eq!(format_utc("%Y-%m-%d %H:%M:%S", t), "2024-02-29 13:05:09");
                assert_eq!(format_utc("%d %b %Y", t), "29 Feb 2024");
                assert_eq!(format_utc("%A %B %-d, %I %p, day %j", t), "Thursday February 29, 01 PM, day 060");
                assert_eq!(format_utc("%a %y %e %% %Q", 0), "Thu 70  1 % %Q");
            }
        }
    }

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
}

#[cfg(not(feature = "chat-template"))]
mod engine {
    //! Stand-in without the `chat-template` feature: `compile` fails, so no value ever exists.

    use super::RenderArgs;
    use crate::error::{Error, Result};

    pub(super) enum Engine {}

    impl Engine {
        pub(super) fn compile(_source: &str) -> Result<Engine> {
            Err(Error::Unsupported { what: "chat templates (this build lacks the `chat-template` feature)".into() })
        }

        pub(super) fn render(&self, _args: &RenderArgs<'_>) -> Result<String> {
            match *self {}
        }
    }
}
