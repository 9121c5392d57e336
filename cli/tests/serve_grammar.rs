//! `colibri serve`'s `response_format` on the shipped default model: `json_schema` and
//! `json_object` on chat and completions (whole and streamed), every answer that finishes with
//! "stop" a document of the schema over many seeds, a stop string ending a grammar's output,
//! unsupported types, bad schemas and `ignore_eos` refused with a 400 naming the field; and
//! `tool_choice` "required" / a named function on a Hermes template: calls whose arguments hold
//! to their tool's schema.

mod serve_support;

use serde_json::{json, Value};
use serve_support::{sse_chunks, Server};

fn server() -> Server {
    Server::start(&["-m", serve_support::default_model().to_str().unwrap(), "--parallel", "4"])
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "book": {"enum": ["Genesis", "Exodus", "Psalms"]},
            "chapter": {"type": "integer", "minimum": 1, "maximum": 150},
            "words": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
        },
        "required": ["book", "chapter", "words"],
        "additionalProperties": false,
    })
}

/// The schema above, checked by hand on a parsed document.
fn matches_schema(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let book = o.get("book").and_then(Value::as_str).is_some_and(|b| ["Genesis", "Exodus", "Psalms"].contains(&b));
    let chapter = o.get("chapter").and_then(Value::as_u64).is_some_and(|c| (1..=150).contains(&c));
    let words = o
        .get("words")
        .and_then(Value::as_array)
        .is_some_and(|w| w.len() <= 2 && w.iter().all(|s| s.as_str().is_some_and(|s| s.chars().count() <= 8)));
    o.len() == 3 && book && chapter && words
}

fn json_schema_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "verse", "strict": true, "schema": schema()}})
}

#[test]
fn finished_answers_are_documents_of_the_schema() {
    let s = server();
    let mut stopped = 0;
    for seed in 0..12 {
        let req = json!({
            "messages": [{"role": "user", "content": "Name a verse."}],
            "response_format": json_schema_format(), "max_tokens": 80, "seed": seed,
        });
        let r = s.post("/v1/chat/completions", &req);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        match v["choices"][0]["finish_reason"].as_str() {
            Some("stop") => {
                let doc: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {text:?}: {e}"));
                assert!(matches_schema(&doc), "seed {seed}: {text}");
                stopped += 1;
            }
            other => assert_eq!(other, Some("length"), "seed {seed}"),
        }
    }
    assert!(stopped >= 9, "only {stopped}/12 seeds finished a document");

    // Streamed, the deltas concatenate to the same document; completions take it too.
    let req = json!({"prompt": "In the beginning", "response_format": {"type": "json_object"}, "max_tokens": 60,
        "seed": 3, "stream": true});
    let chunks = sse_chunks(&s.post("/v1/completions", &req));
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    let mut whole = req.clone();
    whole["stream"] = json!(false);
    let v = s.post("/v1/completions", &whole).json();
    assert_eq!(v["choices"][0]["text"].as_str(), Some(text.as_str()));
    if v["choices"][0]["finish_reason"] == "stop" {
        assert!(serde_json::from_str::<Value>(&text).unwrap().is_object(), "{text}");
    }
}

#[test]
fn unsupported_formats_and_bad_schemas_are_400_naming_the_field() {
    let s = server();
    let chat = |extra: Value| {
        let mut req = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let r = s.post("/v1/chat/completions", &req);
        (r.status, r.json()["error"]["param"].clone())
    };
    let field = json!("response_format");
    assert_eq!(chat(json!({"response_format": {"type": "text"}})).0, 200);
    assert_eq!(chat(json!({"response_format": {"type": "regex", "regex": "a+"}})), (400, field.clone()));
    let bad_schema = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}});
    assert_eq!(chat(json!({"response_format": bad_schema})), (400, field.clone()));
    let remote =
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "https://example.invalid/s"}}});
    assert_eq!(chat(json!({"response_format": remote})), (400, field.clone()));
    assert_eq!(chat(json!({"response_format": {"type": "json_schema"}})), (400, field));
    let object = json!({"type": "json_object"});
    assert_eq!(chat(json!({"response_format": object, "stop": ["}"]})).0, 200);
    assert_eq!(chat(json!({"response_format": object, "ignore_eos": true})), (400, json!("ignore_eos")));
}

#[test]
fn required_and_named_tool_calls_hold_to_the_schema() {
    let template = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    let model = serve_support::default_model();
    let args = ["-m", model.to_str().unwrap(), "-c", "2048", "--chat-template-file", template.to_str().unwrap()];
    let s = Server::start(&args);
    let params = json!({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"],
        "additionalProperties": false});
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": params}},
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "additionalProperties": false}}}]);
    for (choice, only) in [
        (json!("required"), None),
        (json!({"type": "function", "function": {"name": "get_weather"}}), Some("get_weather")),
    ] {
        for seed in 0..4 {
            let req = json!({"messages": [{"role": "user", "content": "Weather?"}], "tools": tools, "tool_choice": choice,
                "parallel_tool_calls": false, "max_tokens": 100, "seed": seed, "temperature": 1.0});
            let v = s.post("/v1/chat/completions", &req).json();
            let c = &v["choices"][0];
            assert_eq!(c["finish_reason"], "tool_calls", "{v}");
            let calls = c["message"]["tool_calls"].as_array().expect("tool calls");
            assert_eq!(calls.len(), 1, "{v}");
            let (name, args) = (&calls[0]["function"]["name"], &calls[0]["function"]["arguments"]);
            let args: Value = serde_json::from_str(args.as_str().unwrap()).unwrap();
            assert!(only.is_none_or(|o| name == o), "{v}");
            if name == "get_weather" {
                let days = args["days"].as_i64().unwrap();
                assert!(matches!(args["city"].as_str(), Some("Paris" | "Rome")) && (1..=7).contains(&days), "{v}");
                assert_eq!(args.as_object().unwrap().len(), 2, "{v}");
            } else {
                assert_eq!((name, &args), (&json!("noop"), &json!({})), "{v}");
            }
        }
    }
}
