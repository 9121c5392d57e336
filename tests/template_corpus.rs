//! The real chat-template corpus: every template llama.cpp keeps in models/templates/ (copied to
//! tests/fixtures/chat_templates/) renders each conversation of expected.json — plain turns,
//! tools, tool calls, tool results, reasoning — exactly as transformers' apply_chat_template did
//! (tools/make_template_corpus.py), with `strftime_now` pinned to the same instant. Where
//! transformers refused a case, colibri must refuse it too.
#![cfg(feature = "chat-template")]

use colibri::tokenizer::{ChatMessage, ChatTemplate, RenderArgs};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Cases transformers refuses on a Python type error where minijinja is lenient, and the one
/// known difference (template/case: why).
const KNOWN: [(&str, &str); 5] = [
    (
        "CohereForAI-c4ai-command-r-plus-tool_use",
        "iterates `tools` when it is none (Python: TypeError; minijinja: empty)",
    ),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "iterates `tools` when it is none"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "iterates `tools` when it is none"),
    ("llama-cpp-deepseek-r1", "`tojson` of a `map` generator (Python: not serialisable; minijinja: a list)"),
    (
        "meetkai-functionary-medium-v3.1",
        "`'text'|safe + str`: Python's Markup escapes the str (&#34;) even without autoescape; minijinja concatenates",
    ),
];

#[derive(Deserialize)]
struct Case {
    messages: Vec<ChatMessage>,
    tools: Option<Value>,
    add_generation_prompt: bool,
}

/// One expected result (see the script: a full text, a tail after an earlier case's prefix, or
/// transformers' error).
#[derive(Deserialize)]
#[serde(untagged)]
enum Outcome {
    Rendered { rendered: String },
    Tail { base: String, keep: usize, tail: String },
    Error { error: String },
}

#[derive(Deserialize)]
struct Corpus {
    clock: i64,
    bos_token: String,
    eos_token: String,
    cases: BTreeMap<String, Case>,
    expected: BTreeMap<String, BTreeMap<String, Outcome>>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates")
}

/// The expected text of `case` (None when transformers refused it).
fn expected_text(results: &BTreeMap<String, Outcome>, case: &str) -> Option<String> {
    match &results[case] {
        Outcome::Rendered { rendered } => Some(rendered.clone()),
        Outcome::Tail { base, keep, tail } => {
            let prefix: String = expected_text(results, base)?.chars().take(*keep).collect();
            Some(prefix + tail)
        }
        Outcome::Error { .. } => None,
    }
}

#[test]
fn every_corpus_template_renders_what_transformers_renders() {
    let corpus: Corpus = serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap()).unwrap();
    assert!(corpus.expected.len() >= 70, "the corpus holds llama.cpp's ~70 templates");
    let (mut same, mut refused, mut failures, mut known) = (0, 0, Vec::new(), std::collections::BTreeSet::new());
    for (name, results) in &corpus.expected {
        let is_known = KNOWN.iter().any(|(k, _)| k == name);
        let source = std::fs::read_to_string(dir().join(format!("{name}.jinja"))).unwrap();
        let template = match ChatTemplate::new(&source) {
            Ok(t) => t.at_time(corpus.clock),
            Err(e) => {
                failures.push(format!("{name}: does not compile: {e}"));
                continue;
            }
        };
        for (case_name, case) in &corpus.cases {
            let mut extra = Map::new();
            if let Some(tools) = &case.tools {
                extra.insert("tools".into(), tools.clone());
            }
            let args = RenderArgs {
                messages: &case.messages,
                add_generation_prompt: case.add_generation_prompt,
                bos_token: &corpus.bos_token,
                eos_token: &corpus.eos_token,
                extra: Some(&extra),
            };
            match (expected_text(results, case_name), template.render_with(&args)) {
                (Some(want), Ok(got)) if got == want => same += 1,
                (_, Ok(_)) if is_known => {
                    known.insert(name.as_str());
                }
                (Some(want), Ok(got)) => {
                    failures.push(format!("{name}/{case_name}: differs\n--- want\n{want}\n--- got\n{got}"))
                }
                (Some(_), Err(e)) => failures.push(format!("{name}/{case_name}: colibri fails: {e}")),
                (None, Err(_)) => refused += 1,
                (None, Ok(got)) => {
                    let Outcome::Error { error } = &results[case_name] else { unreachable!() };
                    failures.push(format!("{name}/{case_name}: transformers refused ({error}), colibri renders\n{got}"))
                }
            }
        }
    }
    eprintln!("{same} renderings identical, {refused} refusals shared, {} failures", failures.len());
    let listed: std::collections::BTreeSet<&str> = KNOWN.iter().map(|(k, _)| *k).collect();
    assert_eq!(known, listed, "the known differences are exactly those listed");
    assert!(failures.is_empty(), "{} of the corpus cases fail:\n\n{}", failures.len(), failures.join("\n\n"));
}
