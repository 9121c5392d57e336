//! Each syntax on text as its models write it, whole and fed in every split of one character
//! at a time (streaming must give the same parts).

use super::*;

const TOOLS: ParseOptions = ParseOptions { tools: true, in_reasoning: false };

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall { id: None, name: name.into(), arguments: arguments.into() }
}

/// The parts of `text` parsed whole, checked equal to the parts fed one character at a time.
fn parse(syntax: Syntax, options: ParseOptions, text: &str) -> Delta {
    let whole = OutputParser::parse(syntax, options, text);
    let mut p = OutputParser::new(syntax, options);
    let mut streamed = Delta::default();
    for c in text.chars() {
        streamed.append(p.push(&c.to_string()));
    }
    streamed.append(p.finish());
    assert_eq!(streamed, whole, "streamed and whole parse differ for {text:?}");
    whole
}

fn hermes() -> Syntax {
    Syntax::Tagged { think: true, tools: ToolTags::Hermes }
}

#[test]
fn detects_the_syntax_from_the_template() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates");
    let detect = |name: &str| Syntax::detect(&std::fs::read_to_string(dir.join(name)).unwrap());
    assert_eq!(detect("Qwen-Qwen3-0.6B.jinja"), hermes());
    assert_eq!(detect("Qwen-Qwen2.5-7B-Instruct.jinja"), Syntax::Tagged { think: false, tools: ToolTags::Hermes });
    assert_eq!(
        detect("mistralai-Mistral-Nemo-Instruct-2407.jinja"),
        Syntax::Tagged { think: false, tools: ToolTags::Mistral }
    );
    assert_eq!(detect("deepseek-ai-DeepSeek-V3.1.jinja"), Syntax::Tagged { think: true, tools: ToolTags::DeepSeek });
    assert_eq!(detect("openai-gpt-oss-120b.jinja"), Syntax::Harmony);
    assert_eq!(detect("google-gemma-2-2b-it.jinja"), Syntax::Tagged { think: false, tools: ToolTags::None });
}

#[test]
fn hermes_json_calls_and_think_blocks() {
    let text = "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    let d = parse(hermes(), TOOLS, text);
    assert_eq!(d.reasoning, "The user wants weather.");
    assert_eq!(d.content, "Let me check.\n");
    assert_eq!(d.tool_calls, [call("get_weather", r#"{"city":"Paris","unit":"c"}"#), call("now", "{}")]);
}

#[test]
fn reasoning_opened_by_the_prompt_and_plain_text() {
    assert!(hermes().starts_in_reasoning("<|im_start|>assistant\n<think>\n"));
    assert!(!hermes().starts_in_reasoning("<think>\n\n</think>\n\n"));
    let d = parse(hermes(), ParseOptions { tools: true, in_reasoning: true }, "Two plus two.\n</think>\n\nFour.");
    assert_eq!((d.reasoning.as_str(), d.content.as_str()), ("Two plus two.", "Four."));
    // Without tools asked for, tool-call markup is content; a lone '<' is not held forever.
    let d = parse(hermes(), ParseOptions::default(), "a < b <tool_call>{\"name\": \"x\"}</tool_call>");
    assert_eq!(d.content, "a < b <tool_call>{\"name\": \"x\"}</tool_call>");
    assert!(d.tool_calls.is_empty() && d.reasoning.is_empty());
}

#[test]
fn a_call_that_does_not_parse_stays_content() {
    let d = parse(hermes(), TOOLS, "x<tool_call>{not json</tool_call>y");
    assert_eq!(d.content, "x<tool_call>{not json</tool_call>y");
    assert!(d.tool_calls.is_empty());
    // Cut off mid-call (max_tokens): the partial call is content.
    let d = parse(hermes(), TOOLS, "<tool_call>{\"name\": \"get_we");
    assert_eq!(d.content, "<tool_call>{\"name\": \"get_we");
}

#[test]
fn qwen3_coder_and_glm_bodies() {
    let qwen = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    assert_eq!(parse(hermes(), TOOLS, qwen).tool_calls, [call("get_weather", r#"{"city":"New York","days":3}"#)]);
    let glm = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>";
    assert_eq!(parse(hermes(), TOOLS, glm).tool_calls, [call("get_weather", r#"{"city":"Paris"}"#)]);
}

#[test]
fn mistral_json_list_and_args_forms() {
    let m = Syntax::Tagged { think: false, tools: ToolTags::Mistral };
    let d = parse(
        m,
        TOOLS,
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]",
    );
    let want = ToolCall { id: Some("abcDEF123".into()), ..call("get_weather", r#"{"city":"Paris"}"#) };
    assert_eq!((d.content.as_str(), d.tool_calls), ("", vec![want]));
    let d =
        parse(m, TOOLS, "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]now[CALL_ID]a1[ARGS]{}");
    assert_eq!(d.content, "Sure.");
    let now = ToolCall { id: Some("a1".into()), ..call("now", "{}") };
    assert_eq!(d.tool_calls, [call("get_weather", r#"{"city": "Paris"}"#), now]);
}

#[test]
fn deepseek_v3_r1_and_v31_forms() {
    let ds = Syntax::Tagged { think: true, tools: ToolTags::DeepSeek };
    let r1 = "<think>\nNeed weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    let d = parse(ds, TOOLS, r1);
    assert_eq!(d.reasoning, "Need weather.");
    assert_eq!(d.tool_calls, [call("get_weather", r#"{"city": "Paris"}"#)]);
    let v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    assert_eq!(parse(ds, TOOLS, v31).tool_calls, [call("get_weather", r#"{"city": "Paris"}"#), call("now", "{}")]);
}

#[test]
fn harmony_channels_and_calls() {
    let text = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}";
    let d = parse(Syntax::Harmony, TOOLS, text);
    assert_eq!(d.reasoning, "Need the weather.");
    assert_eq!((d.content.as_str(), d.tool_calls), ("", vec![call("get_weather", r#"{"city":"Paris"}"#)]));
    let text = "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Four.";
    let d = parse(Syntax::Harmony, TOOLS, text);
    assert_eq!((d.reasoning.as_str(), d.content.as_str()), ("Simple.", "Four."));
    // The recipient before the channel, and the call token kept in the text.
    let text = "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>";
    assert_eq!(parse(Syntax::Harmony, TOOLS, text).tool_calls, [call("now", "{}")]);
    // Text without any harmony header is content.
    assert_eq!(parse(Syntax::Harmony, TOOLS, "plain").content, "plain");
}
