//! Tool-call grammars (`chat_output::tool_grammar`): for every family's call syntax and mode, a
//! reply sampled at random from what the grammar allows (after a forced prefix: free text and the
//! opener for "auto", the end of the reasoning block when the prompt opened one) ends with only
//! end-of-sequence allowed, and reads back through the family's output parser into calls whose
//! arguments validate against the tool's schema. On the default model's vocabulary (markers as
//! text) and on a byte vocabulary whose markers are special tokens (written `<[id]>`).

use colibri::chat_output::{
    tool_grammar, CallOptions, OutputParser, ParseOptions, Syntax, ToolCall, ToolMode, ToolSpec, ToolTags,
};
use colibri::grammar::{vocab::SPECIAL_MARKER, Grammar, GrammarVocab, ResponseFormat};
use colibri::tokenizer::Tokenizer;
use colibri::{LoadOptions, Model};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn tools() -> Vec<ToolSpec> {
    let weather = json!({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"],
        "additionalProperties": false});
    let add = json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a"], "additionalProperties": false});
    vec![ToolSpec { name: "get_weather".into(), parameters: weather }, ToolSpec { name: "add".into(), parameters: add }]
}

/// Whether `call` is one of `tools()` with arguments valid against its schema (checked here,
/// independently of the engine).
fn valid(call: &ToolCall) -> bool {
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&call.arguments) else { return false };
    let int_in =
        |k: &str, lo: i64, hi: i64| args.get(k).and_then(Value::as_i64).is_some_and(|x| (lo..=hi).contains(&x));
    match call.name.as_str() {
        "get_weather" => {
            args.len() == 2
                && int_in("days", 1, 7)
                && matches!(args.get("city").and_then(Value::as_str), Some("Paris" | "Rome"))
        }
        "add" => args.len() == 1 && int_in("a", 0, 99),
        _ => false,
    }
}

/// xorshift64*: the test's own seeded choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

fn allowed(g: &mut Grammar) -> Vec<u32> {
    let bits = g.allowed().expect("mask").to_vec();
    (0..g.vocab_size() as u32).filter(|&i| bits[i as usize / 32] >> (i % 32) & 1 == 1).collect()
}

/// Commit `prefix` (each id must be allowed), then random allowed ids until only an
/// end-of-sequence id is allowed (at most `limit` steps). The ids, without the end, and whether
/// it ended.
fn sample(g: &mut Grammar, prefix: &[u32], seed: u64, limit: usize) -> (Vec<u32>, bool) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut out = Vec::new();
    for &id in prefix {
        assert!(allowed(g).contains(&id), "the prefix's id {id} is allowed after {out:?}");
        g.commit(id).unwrap();
        out.push(id);
    }
    for _ in 0..limit {
        let ids = allowed(g);
        let text: Vec<u32> = ids.iter().copied().filter(|&i| !g.is_end_of_sequence(i)).collect();
        if text.is_empty() {
            assert!(g.is_complete());
            return (out, true);
        }
        // Mostly end when allowed: replies of reasonable length.
        let id =
            if text.len() < ids.len() && rng.below(4) != 0 { return (out, true) } else { text[rng.below(text.len())] };
        g.commit(id).unwrap();
        out.push(id);
    }
    (out, false)
}

struct Case {
    syntax: Syntax,
    template: &'static str,
    /// Forced text in "auto": text, then the call opener.
    opener: &'static str,
    /// Forced text in "required" (harmony: past the choice of an analysis message).
    lead: &'static str,
}

fn tagged(tools: ToolTags, think: bool) -> Syntax {
    Syntax::Tagged { think, tools }
}

fn cases() -> Vec<Case> {
    vec![
        Case { syntax: tagged(ToolTags::Hermes, true), template: "", opener: "Let me look. <tool_call>", lead: "" },
        Case { syntax: tagged(ToolTags::Mistral, false), template: "", opener: "Let me look. [TOOL_CALLS]", lead: "" },
        Case {
            syntax: tagged(ToolTags::Mistral, false),
            template: "[ARGS]",
            opener: "Let me look. [TOOL_CALLS]",
            lead: "",
        },
        Case {
            syntax: tagged(ToolTags::DeepSeek, true),
            template: "```json",
            opener: "Let me look. <｜tool▁calls▁begin｜>",
            lead: "",
        },
        Case {
            syntax: tagged(ToolTags::DeepSeek, false),
            template: "",
            opener: "Let me look. <｜tool▁calls▁begin｜>",
            lead: "",
        },
        Case {
            syntax: Syntax::Harmony,
            template: "",
            opener: "<|channel|>analysis<|message|>Let me look.<|end|><|start|>assistant<|channel|>commentary",
            lead: "<|channel|>commentary",
        },
    ]
}

fn default_tokenizer() -> Tokenizer {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri");
    let model = Model::open(&path, &LoadOptions::default()).expect("open the default model");
    Tokenizer::from_model(&model).expect("its tokenizer")
}

/// Every mode of every case on `vocab`: `encode` gives a text's ids, `decode` the text of ids.
fn check_all(
    vocab: &Arc<GrammarVocab>,
    special: &dyn Fn(&str) -> Option<u32>,
    encode: &dyn Fn(&str) -> Vec<u32>,
    decode: &dyn Fn(&[u32]) -> String,
) {
    let tools = tools();
    for case in cases() {
        for (mode, parallel, in_reasoning) in [
            (ToolMode::Required, true, false),
            (ToolMode::Required, false, false),
            (ToolMode::Auto, false, false),
            (ToolMode::Required, true, true),
            (ToolMode::Auto, false, true),
        ] {
            if in_reasoning && !matches!(case.syntax, Syntax::Tagged { think: true, .. }) {
                continue;
            }
            let options = CallOptions { mode, parallel, in_reasoning };
            let lark = tool_grammar(case.syntax, case.template, &tools, &options, special).unwrap().unwrap();
            let compiled = vocab.compile(&ResponseFormat::Lark(lark.clone())).unwrap_or_else(|e| panic!("{lark}\n{e}"));
            let mut lead = String::from(if in_reasoning { "some thought</think>" } else { "" });
            lead.push_str(if mode == ToolMode::Auto { case.opener } else { case.lead });
            for seed in 0..6 {
                let mut g = compiled.clone();
                let (ids, ended) = sample(&mut g, &encode(&lead), seed, 1500);
                let text = decode(&ids);
                assert!(ended, "{:?} {mode:?} seed {seed}: no end after 1500 steps: {text:?}", case.syntax);
                let parsed = OutputParser::parse(case.syntax, ParseOptions { tools: true, in_reasoning }, &text);
                let what =
                    format!("{:?} {:?} parallel {parallel} seed {seed}: {text:?} → {parsed:?}", case.syntax, mode);
                assert!(!parsed.tool_calls.is_empty() && parsed.tool_calls.iter().all(valid), "{what}");
                assert!(parallel || parsed.tool_calls.len() == 1, "{what}");
                if mode == ToolMode::Required {
                    assert_eq!(parsed.content.trim(), "", "{what}");
                }
            }
        }
    }
}

#[test]
fn every_syntax_and_mode_reads_back_as_valid_calls_on_the_default_vocabulary() {
    let tok = default_tokenizer();
    let end_of_turn = tok.token_id("<|im_end|>").expect("ChatML end of turn");
    let vocab = Arc::new(GrammarVocab::ending_with(&tok, &[end_of_turn]).expect("vocabulary"));
    let encode = |s: &str| tok.encode_as_text(s).unwrap();
    let decode = |ids: &[u32]| tok.decode(ids, false).unwrap();
    check_all(&vocab, &|_| None, &encode, &decode);
    // Plain text, then nothing: "auto" lets a reply without a call end.
    let options = CallOptions { mode: ToolMode::Auto, parallel: true, in_reasoning: false };
    let lark = tool_grammar(tagged(ToolTags::Hermes, false), "", &tools(), &options, &|_| None).unwrap().unwrap();
    let mut g = vocab.compile(&ResponseFormat::Lark(lark)).unwrap();
    for id in encode("No call needed.") {
        g.commit(id).unwrap();
    }
    assert!(g.is_complete() && allowed(&mut g).contains(&end_of_turn), "the end-of-turn token ends the reply");
}

/// Markers of the byte vocabulary that are special tokens (ids 256…).
const SPECIALS: &[&str] = &[
    "</s>",
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|end|>",
    "<|start|>",
];

#[test]
fn markers_that_are_special_tokens_are_written_by_id() {
    let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    words.extend(SPECIALS.iter().map(|s| [&[SPECIAL_MARKER][..], s.as_bytes()].concat()));
    let vocab = Arc::new(GrammarVocab::from_token_bytes(words, &[256]).expect("byte vocabulary"));
    let special = |s: &str| SPECIALS.iter().position(|m| *m == s).map(|i| 256 + i as u32);
    // Text bytes are ids 0..=255; a special token's whole text is one id.
    let encode = |s: &str| {
        let mut ids = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            match SPECIALS.iter().position(|m| rest.starts_with(m)) {
                Some(i) => {
                    ids.push(256 + i as u32);
                    rest = &rest[SPECIALS[i].len()..];
                }
                None => {
                    let c = rest.chars().next().unwrap_or_default();
                    ids.extend(rest[..c.len_utf8()].bytes().map(u32::from));
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        ids
    };
    let decode = |ids: &[u32]| {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&i| match i {
                0..=255 => vec![i as u8],
                _ => SPECIALS[i as usize - 256].as_bytes().to_vec(),
            })
            .collect();
        String::from_utf8(bytes).expect("UTF-8")
    };
    let options = CallOptions { mode: ToolMode::Required, parallel: false, in_reasoning: false };
    let lark = tool_grammar(tagged(ToolTags::Mistral, false), "[ARGS]", &tools(), &options, &special).unwrap().unwrap();
    assert!(lark.starts_with("start: <[259]>"), "{lark}");
    check_all(&vocab, &special, &encode, &decode);
}
