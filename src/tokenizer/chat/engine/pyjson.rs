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
pub(super) fn tojson_filter(value: &Value, args: minijinja::value::Rest<Value>, kw: Kwargs) -> Result<Value, Error> {
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
        // json.dumps fails on Jinja2's Undefined, as here (a missing key is an error, not null).
        ValueKind::Undefined => return Err(invalid("tojson: Object of type Undefined is not JSON serializable")),
        ValueKind::None => out.push_str("null"),
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
