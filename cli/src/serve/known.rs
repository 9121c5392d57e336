//! The fields the OpenAI endpoints read. Anything else is a 400 naming the field (OpenAI's own
//! answer to an unrecognised argument) instead of being silently ignored: a client that asks for
//! tools on completions learns that it does not get them (`response_format` is read by
//! format.rs). An OpenAI field whose value asks for nothing passes (an empty `tools` list,
//! `tool_choice: "none"`, `response_format: {"type": "text"}`, an empty `logit_bias`, ...).
//! `/generate` keeps its documented rule (docs/api.md: unknown fields are ignored).

use super::error::ApiError;
use serde_json::{Map, Value};

/// Read by every OpenAI endpoint (params.rs and the stream options).
const SHARED: &[&str] = &[
    "model",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "n",
    "logit_bias",
    "max_tokens",
    "max_completion_tokens",
    "moe_top_k",
    "routing",
    "routing_seed",
    "return_routing",
    "stop",
    "ignore_eos",
    "stream",
    "stream_options",
    // An end-user id for the provider's abuse monitoring: nothing to do with the generation.
    "user",
];

/// Fields of `/v1/completions` besides the shared ones.
pub const COMPLETIONS: &[&str] = &["prompt", "echo", "best_of", "logprobs", "response_format"];
/// Fields of `/v1/chat/completions` besides the shared ones.
pub const CHAT: &[&str] = &[
    "messages",
    "logprobs",
    "top_logprobs",
    // serve/chat_input.rs: rendered through the template (400 where the template cannot).
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "chat_template_kwargs",
    "response_format",
];
/// Every field `/v1/embeddings` reads (none of the generation ones: see `check_own`).
pub const EMBEDDINGS: &[&str] = &["model", "input", "encoding_format", "dimensions", "user"];

/// OpenAI request fields this server does not implement.
const NOT_IMPLEMENTED: &[&str] = &[
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "parallel_tool_calls",
    "suffix",
    "audio",
    "modalities",
    "prediction",
    "web_search_options",
    "reasoning_effort",
    "store",
    "metadata",
    "service_tier",
];

/// Whether an unimplemented field's value asks for nothing (what leaving it out gives).
fn asks_nothing(key: &str, v: &Value) -> bool {
    match (key, v) {
        (_, Value::Null) => true,
        ("tools" | "functions", Value::Array(a)) => a.is_empty(),
        ("metadata", Value::Object(o)) => o.is_empty(),
        ("tool_choice" | "function_call", Value::String(s)) => s == "none" || s == "auto",
        ("parallel_tool_calls", Value::Bool(_)) => true,
        ("store", Value::Bool(b)) => !b,
        ("suffix", Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// 400 for the first field of `obj` that is neither shared, nor in `own`, nor asking for nothing.
pub fn check(obj: &Map<String, Value>, own: &[&str]) -> Result<(), ApiError> {
    check_among(obj, SHARED, own)
}

/// `check` for an endpoint that generates nothing: the shared (generation) fields are refused too.
pub fn check_own(obj: &Map<String, Value>, own: &[&str]) -> Result<(), ApiError> {
    check_among(obj, &[], own)
}

fn check_among(obj: &Map<String, Value>, shared: &[&str], own: &[&str]) -> Result<(), ApiError> {
    for (key, value) in obj {
        let k = key.as_str();
        if shared.contains(&k) || own.contains(&k) || asks_nothing(k, value) {
            continue;
        }
        let shown: String = k.chars().take(64).collect();
        let message = if NOT_IMPLEMENTED.contains(&k) {
            format!("{shown} is not supported by this server")
        } else {
            format!("unknown field '{shown}'")
        };
        return Err(ApiError { code: Some("unsupported_parameter"), ..ApiError::invalid(&shown, message) });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(v: Value) -> bool {
        check(v.as_object().unwrap(), CHAT).is_ok()
    }

    #[test]
    fn unimplemented_fields_are_refused_unless_they_ask_for_nothing() {
        assert!(ok(json!({"messages": [], "max_tokens": 3, "user": "u", "stream_options": null})));
        assert!(ok(json!({"tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "logit_bias": {}})));
        assert!(ok(json!({"logit_bias": {"50256": -100}, "n": 3, "logprobs": true, "top_logprobs": 2})));
        for bad in [json!({"functions": [{}]}), json!({"store": true}), json!({"max_token": 5})] {
            let e = check(bad.as_object().unwrap(), CHAT).unwrap_err();
            assert_eq!(e.param.as_deref(), bad.as_object().unwrap().keys().next().map(String::as_str), "{bad}");
        }
        assert!(check(json!({"prompt": "a", "echo": false}).as_object().unwrap(), COMPLETIONS).is_ok());
        assert!(check(json!({"prompt": "a", "messages": []}).as_object().unwrap(), COMPLETIONS).is_err());
        // Tools are the chat endpoint's (checked there against the template); completions refuse them.
        assert!(ok(json!({"tools": [{"type": "function"}], "tool_choice": "required"})));
        for bad in [json!({"tools": [{"type": "function"}]}), json!({"tool_choice": "required"})] {
            assert!(check(bad.as_object().unwrap(), COMPLETIONS).is_err(), "{bad}");
        }
    }
}
