//! `response_format` of the OpenAI endpoints: `text` (nothing asked), `json_object` (any JSON
//! object) and `json_schema` (JSON valid against `json_schema.schema`, strict or not: the output
//! is always held to it) become a grammar compiled against the engine's vocabulary (built once
//! per loaded model). Every other type, a schema the grammar engine refuses, or a combination
//! that could cut the document (`stop`, `ignore_eos`) is a 400 naming the field.

use super::engine::Engine;
use super::error::ApiError;
use super::job::JobParams;
use super::params::Fields;
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

/// Read `response_format` and put its grammar into `params` (whose stop strings and
/// `ignore_eos` are already read).
pub fn apply(f: &Fields<'_>, engine: &Engine, params: &mut JobParams) -> Result<(), ApiError> {
    let Some(format) = parse(f)? else { return Ok(()) };
    if !params.decode.stop.is_empty() {
        return Err(ApiError::invalid(
            "stop",
            "stop cannot be combined with response_format: it could cut the document",
        ));
    }
    if params.decode.ignore_eos {
        return Err(ApiError::invalid("ignore_eos", "ignore_eos cannot be combined with response_format"));
    }
    // The first request builds the vocabulary (seconds for 150k tokens): off the async workers.
    let compiled = tokio::task::block_in_place(|| engine.grammar.get(&engine.tokenizer)?.compile(&format));
    params.decode.grammar = Some(compiled.map_err(|e| match e {
        Error::InvalidArgument { reason } => ApiError::invalid(FIELD, reason),
        other => ApiError::invalid(FIELD, other.to_string()),
    })?);
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
