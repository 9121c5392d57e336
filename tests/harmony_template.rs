//! Contract: GPT-OSS's harmony chat template (tests/fixtures/harmony/chat_template.jinja, the one
//! openai/gpt-oss-120b ships) renders every conversation of expected.json exactly as
//! transformers' apply_chat_template did (tools/make_harmony_fixture.py). The template prints
//! strftime_now("%Y-%m-%d"): both texts' dates are checked for that format, then set aside.
#![cfg(feature = "chat-template")]

use colibri::tokenizer::{ChatMessage, ChatTemplate, RenderArgs};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Deserialize)]
struct Case {
    messages: Vec<ChatMessage>,
    extra: serde_json::Map<String, serde_json::Value>,
    add_generation_prompt: bool,
    rendered: String,
}

#[derive(Deserialize)]
struct Expected {
    cases: Vec<Case>,
}

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harmony").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `text` with the YYYY-MM-DD after "Current date: " replaced by "<date>" (panics when absent
/// or not of that shape).
fn without_date(text: &str) -> String {
    const KEY: &str = "Current date: ";
    let at = text.find(KEY).expect("the template prints the date") + KEY.len();
    let date = text.get(at..at + 10).expect("a date");
    let shape = date.char_indices().all(|(i, c)| if i == 4 || i == 7 { c == '-' } else { c.is_ascii_digit() });
    assert!(shape, "not a YYYY-MM-DD date: {date:?}");
    format!("{}<date>{}", &text[..at], &text[at + 10..])
}

#[test]
fn harmony_template_renders_what_transformers_renders() {
    let template = ChatTemplate::new(&fixture("chat_template.jinja")).expect("the harmony template compiles");
    let expected: Expected = serde_json::from_str(&fixture("expected.json")).unwrap();
    assert_eq!(expected.cases.len(), 6);
    for (i, case) in expected.cases.iter().enumerate() {
        let args = RenderArgs {
            messages: &case.messages,
            add_generation_prompt: case.add_generation_prompt,
            bos_token: "",
            eos_token: "",
            extra: Some(&case.extra),
        };
        let got = template.render_with(&args).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(without_date(&got), without_date(&case.rendered), "case {i}");
        assert!(got.contains("<|start|>user<|message|>"), "case {i}: {got}");
    }
}
