//! OpenAI wire shapes: ids, usage, logprobs in the completions and chat layouts, routing
//! extension fields. Built as JSON values; the handlers assemble responses and chunks from them.

use super::engine::Engine;
use super::job::Token;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// `cmpl-…` / `chatcmpl-…` ids: unique per process and start time.
pub fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}{:06x}", now(), n)
}

/// Unix seconds.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `usage` of a request: its prompt once, the completion tokens of all its choices, and the
/// prompt tokens reused from the prompt cache (`cached`, of the first choice).
pub fn usage(prompt_tokens: usize, completion_tokens: usize, cached: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

fn token_str(e: &Engine, id: u32) -> String {
    e.tokenizer.token_text(id)
}

/// Legacy completions `logprobs` object over `tokens` (text offsets from `offset0`).
pub fn completion_logprobs(e: &Engine, tokens: &[Token], offset0: usize) -> Value {
    let mut texts = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    let mut at = offset0;
    for t in tokens {
        let (Some(id), Some(lp)) = (t.id, &t.logprob) else { continue };
        texts.push(json!(token_str(e, id)));
        lps.push(json!(lp.logprob));
        let top: serde_json::Map<String, Value> = lp.top.iter().map(|&(i, l)| (token_str(e, i), json!(l))).collect();
        tops.push(Value::Object(top));
        offsets.push(json!(at));
        at += t.text.len();
    }
    json!({"tokens": texts, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// Chat `logprobs` object: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
pub fn chat_logprobs(e: &Engine, tokens: &[Token]) -> Value {
    let entry = |id: u32, lp: f32| {
        let s = token_str(e, id);
        json!({"token": s, "logprob": lp, "bytes": s.as_bytes()})
    };
    let content: Vec<Value> = tokens
        .iter()
        .filter_map(|t| {
            let (id, lp) = (t.id?, t.logprob.as_ref()?);
            let mut v = entry(id, lp.logprob);
            v["top_logprobs"] = lp.top.iter().map(|&(i, l)| entry(i, l)).collect();
            Some(v)
        })
        .collect();
    json!({ "content": content })
}

/// The MoE extension: per generated token, the experts of each layer.
pub fn routing(tokens: &[Token]) -> Option<Value> {
    let r: Vec<&Vec<Vec<u32>>> = tokens.iter().filter_map(|t| t.routing.as_ref()).collect();
    (!r.is_empty()).then(|| json!(r))
}
