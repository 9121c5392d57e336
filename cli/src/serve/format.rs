//! `response_format` of the OpenAI endpoints: `text` (nothing asked), `json_object` (any JSON
//! object) and `json_schema` (JSON valid against `json_schema.schema`, strict or not: the output
//! is always held to it) become a grammar compiled against the engine's vocabulary (built once
//! per loaded model). Every other type, a schema the grammar engine refuses, or `ignore_eos`
//! (once the document is complete only end-of-sequence ids are allowed) is a 400 naming the
//! field. `stop` strings still end the output (finish reason "stop"): the document may then be
//! incomplete, as with OpenAI and llama.cpp; only a reply that ended by itself is complete.
//!
//! Tools (`apply_tools`): "required" and a named function are kept by a grammar of the
//! template's tool-call syntax (colibri::chat_output::tool_grammar); with "auto", a call the
//! model starts is held to it too (free text before it), unless `response_format` (its grammar
//! wins) or `ignore_eos` (no grammar: nothing would end it) is given.

use super::chat_input::ChatInput;
use super::chat_reply::starts_in_reasoning;
use super::engine::Engine;
use super::error::ApiError;
use super::job::JobParams;
use super::params::Fields;
use colibri::chat_output::{tool_grammar, CallOptions, ToolMode};
use colibri::grammar::ResponseFormat;
use colibri::Error;
use serde_json::Value;

const FIELD: &str = "response_format";

/// The format asked for, None for `text` or no field.
fn parse(f: &Fields<'_>) -> Result<Option<ResponseFormat>, ApiError> {
    let bad = |m: &str| ApiError::invalid(FIELD, m.to_string());
    let Some(v) = f.get(FIELD) else { return Ok(None) };
    let Value::Object(o) = v else { return Err(bad("response_format must be an object")) };
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => {
            let js = o.get("json_schema").and_then(Value::as_object).ok_or_else(|| {
                bad("response_format.json_schema must be an object with the schema in response_format.json_schema.schema")
            })?;
            match js.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => Ok(Some(ResponseFormat::JsonSchema(s.clone()))),
                Some(_) => Err(bad("response_format.json_schema.schema must be a JSON Schema object")),
                None => Err(bad("response_format.json_schema.schema is required")),
            }
        }
        Some(t) => {
            let shown: String = t.chars().take(64).collect();
            Err(ApiError {
                code: Some("unsupported_parameter"),
                ..bad(&format!(
                    "response_format type {shown:?} is not supported (text, json_object and json_schema are)"
                ))
            })
        }
        None => Err(bad("response_format.type must be a string")),
    }
}

/// Read `response_format` and put its grammar into `params` (whose `ignore_eos` is already
/// read).
pub fn apply(f: &Fields<'_>, engine: &Engine, params: &mut JobParams) -> Result<(), ApiError> {
    let Some(format) = parse(f)? else { return Ok(()) };
    if params.decode.ignore_eos {
        return Err(ApiError::invalid(
            "ignore_eos",
            "ignore_eos cannot be combined with response_format (once the document is complete only \
             end-of-sequence tokens are allowed)",
        ));
    }
    params.decode.grammar = Some(compile(engine, &format, FIELD)?);
    Ok(())
}

/// `format` compiled against the engine's vocabulary; errors name `field`.
fn compile(engine: &Engine, format: &ResponseFormat, field: &str) -> Result<colibri::grammar::Grammar, ApiError> {
    // The first request builds the vocabulary (seconds for 150k tokens): off the async workers.
    let compiled = tokio::task::block_in_place(|| {
        engine.grammar.get_ending_with(&engine.tokenizer, &engine.end_ids)?.compile(format)
    });
    compiled.map_err(|e| match e {
        Error::InvalidArgument { reason } => ApiError::invalid(field, reason),
        other => ApiError::invalid(field, other.to_string()),
    })
}

/// Put the grammar of `input`'s tool calls into `params` (after `apply`; see the module doc).
pub fn apply_tools(engine: &Engine, input: &ChatInput, prompt: &[u32], params: &mut JobParams) -> Result<(), ApiError> {
    if !input.read_tools {
        return Ok(());
    }
    let required = input.mode == ToolMode::Required;
    if params.decode.grammar.is_some() || params.decode.ignore_eos {
        if !required {
            return Ok(());
        }
        let (field, what) = match params.decode.ignore_eos {
            true => ("ignore_eos", "ignore_eos: once the calls are complete only end-of-sequence tokens are allowed"),
            false => ("response_format", "response_format: the reply cannot be both a document and tool calls"),
        };
        return Err(ApiError::invalid(field, format!("a required tool call cannot be combined with {what}")));
    }
    let tok = &engine.tokenizer;
    let special = |s: &str| tok.token_id(s).filter(|&id| tok.is_special(id));
    let options =
        CallOptions { mode: input.mode, parallel: input.parallel, in_reasoning: starts_in_reasoning(engine, prompt) };
    let lark = tool_grammar(engine.chat.syntax, &engine.template_source, &input.callable, &options, &special)
        .map_err(|e| ApiError::invalid("tools", e.to_string()))?;
    if let Some(lark) = lark {
        params.decode.grammar = Some(compile(engine, &ResponseFormat::Lark(lark), "tools")?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(v: Value) -> Result<Option<ResponseFormat>, Option<String>> {
        let obj = json!({ FIELD: v });
        parse(&Fields(obj.as_object().unwrap())).map_err(|e| e.param)
    }

    #[test]
    fn formats_are_read_and_others_refused_naming_the_field() {
        assert_eq!(parsed(json!({"type": "text"})), Ok(None));
        assert_eq!(parsed(json!({"type": "json_object"})), Ok(Some(ResponseFormat::JsonObject)));
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let js = json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": schema}});
        assert_eq!(parsed(js), Ok(Some(ResponseFormat::JsonSchema(schema))));
        for bad in [
            json!("json_object"),
            json!({"type": "regex"}),
            json!({"type": "json_schema"}),
            json!({"type": "json_schema", "json_schema": {"name": "x"}}),
            json!({"type": "json_schema", "json_schema": {"schema": 3}}),
            json!({}),
        ] {
            assert_eq!(parsed(bad.clone()), Err(Some(FIELD.to_string())), "{bad}");
        }
    }
}
