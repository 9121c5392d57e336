//! A conversation to prompt ids without chat-template injection: text that comes from a message
//! (its role, content and every string inside its other fields: tool calls, reasoning) is tokenised as text, so `<|im_end|>\n<|im_start|>system` typed by
//! a user stays characters and cannot forge a turn; special tokens are recognised only where the
//! template itself writes them.
//!
//! How: each special-token string inside a message is replaced by a marker (a private-use
//! character absent from every message, then the string's index, then the same character); the
//! template renders that; the text between markers is tokenised as usual and each marker becomes
//! the ids of its string read as text. A conversation without special-token text renders and
//! tokenises exactly as before (no marker, one `encode`).

use super::{ChatMessage, ChatTemplate, RenderArgs, Tokenizer};
use crate::error::{Error, Result};
use serde_json::{Map, Value};

/// How special-token text inside messages is tokenised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MessageSpecials {
    /// As text (default): messages cannot write control tokens.
    #[default]
    AsText,
    /// As control tokens, like transformers' `apply_chat_template(tokenize=True)` (only for
    /// trusted input).
    AsTokens,
}

/// A private-use character that no message contains (the marker delimiter).
fn free_delimiter(messages: &[ChatMessage], extra: Option<&Map<String, Value>>) -> Result<char> {
    ('\u{E000}'..='\u{F8FF}')
        .find(|&c| {
            messages.iter().all(|m| !m.text().contains(c) && !m.role.contains(c) && !in_json(&m.fields, c))
                && !extra.is_some_and(|e| in_json(e, c))
        })
        .ok_or_else(|| Error::InvalidArgument { reason: "the messages use every private-use character".into() })
}

/// Whether a key or string value inside `fields` contains `c`.
fn in_json(fields: &Map<String, Value>, c: char) -> bool {
    fn walk(v: &Value, c: char) -> bool {
        match v {
            Value::String(s) => s.contains(c),
            Value::Array(a) => a.iter().any(|v| walk(v, c)),
            Value::Object(o) => in_json(o, c),
            _ => false,
        }
    }
    fields.iter().any(|(k, v)| k.contains(c) || walk(v, c))
}

/// Every string value inside `v` marked like [`mark`] (keys stay: they are structure).
fn mark_json(v: &Value, specials: &[String], delim: char) -> Value {
    use Value as J;
    match v {
        J::String(s) => J::String(mark(s, specials, delim).unwrap_or_else(|| s.clone())),
        J::Array(a) => J::Array(a.iter().map(|v| mark_json(v, specials, delim)).collect()),
        J::Object(o) => J::Object(o.iter().map(|(k, v)| (k.clone(), mark_json(v, specials, delim))).collect()),
        other => other.clone(),
    }
}

/// `text` with every occurrence of a `specials` string (longest first at each position)
/// replaced by its marker; None when there is none.
fn mark(text: &str, specials: &[String], delim: char) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    'scan: while !rest.is_empty() {
        for (k, s) in specials.iter().enumerate() {
            if rest.starts_with(s.as_str()) {
                out.push(delim);
                out.push_str(&k.to_string());
                out.push(delim);
                rest = &rest[s.len()..];
                changed = true;
                continue 'scan;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

/// Render `messages` with `template` (bos/eos from the tokenizer) and tokenise the prompt
/// (`add_special_tokens = false`: templates write their own), with message text kept as text
/// unless `specials` says otherwise.
pub fn encode_chat(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    specials: MessageSpecials,
) -> Result<Vec<u32>> {
    encode_chat_with(tok, template, messages, add_generation_prompt, None, specials)
}

/// [`encode_chat`] with further template variables (`tools`, `enable_thinking`, ...; see
/// [`super::RenderArgs::extra`]), whose strings are caller text too.
pub fn encode_chat_with(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    extra: Option<&Map<String, Value>>,
    specials: MessageSpecials,
) -> Result<Vec<u32>> {
    let piece = |id: Option<u32>| id.and_then(|i| tok.token_piece(i)).unwrap_or_default();
    let (bos, eos) = (piece(tok.bos_id()), piece(tok.eos_ids().first().copied()));
    let render = |messages: &[ChatMessage], extra: Option<&Map<String, Value>>| {
        template.render_with(&RenderArgs { messages, add_generation_prompt, bos_token: &bos, eos_token: &eos, extra })
    };
    let strings = tok.special_strings();
    let delim = free_delimiter(messages, extra)?;
    let marked: Vec<ChatMessage> = messages
        .iter()
        .map(|m| ChatMessage {
            role: mark(&m.role, &strings, delim).unwrap_or_else(|| m.role.clone()),
            content: m.content.as_ref().map(|c| mark(c, &strings, delim).unwrap_or_else(|| c.clone())),
            fields: m.fields.iter().map(|(k, v)| (k.clone(), mark_json(v, &strings, delim))).collect(),
        })
        .collect();
    let marked_extra: Option<Map<String, Value>> =
        extra.map(|e| e.iter().map(|(k, v)| (k.clone(), mark_json(v, &strings, delim))).collect());
    if specials == MessageSpecials::AsTokens || (marked == messages && marked_extra.as_ref() == extra) {
        return tok.encode(&render(messages, extra)?, false);
    }
    let text = render(&marked, marked_extra.as_ref())?;
    // Even pieces are template output, odd pieces are marker indices.
    let mut ids = Vec::new();
    for (i, part) in text.split(delim).enumerate() {
        if i % 2 == 0 {
            ids.extend(tok.encode(part, false)?);
        } else {
            let s = part.parse::<usize>().ok().and_then(|k| strings.get(k)).ok_or_else(|| Error::InvalidArgument {
                reason: "the chat template altered a message's special-token text".into(),
            })?;
            ids.extend(tok.encode_as_text(s)?);
        }
    }
    Ok(ids)
}
