//! A chat model's generated text split the way OpenAI-style clients expect it: the answer
//! (`content`), the model's reasoning (`reasoning_content`: `<think>…</think>` blocks, GPT-OSS
//! harmony's analysis channel) and its tool calls (`tool_calls`: name and arguments as a JSON
//! string), incrementally, so a server can stream each part as it completes.
//!
//! The syntax is told by the chat template that wrote the prompt ([`Syntax::detect`]), as
//! llama.cpp does: Qwen/Hermes `<tool_call>{json}</tool_call>` (and the XML-style bodies of
//! Qwen3-Coder and GLM-4.5 inside the same tags), Mistral `[TOOL_CALLS]`, DeepSeek's
//! `<｜tool▁calls▁begin｜>` tokens, GPT-OSS harmony messages. Text is fed as it is generated,
//! special tokens included (harmony and Mistral mark calls with control tokens).
//!
//! Reasoning and content stream as they come (only a possible start of a marker is held back);
//! a tool call is given whole once its closing marker (or the end of the text) is seen. A call
//! that does not parse stays in `content`, unchanged, rather than being lost.

mod calls;
mod grammar;
mod harmony;
mod tagged;
mod turn;

pub use calls::ToolCall;
pub use grammar::{tool_grammar, CallOptions, ToolMode, ToolSpec};
pub use turn::end_of_turn_ids;

/// How a model marks reasoning and tool calls in its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// `<think>` blocks (when `think`) and tool calls in the given tags.
    Tagged { think: bool, tools: ToolTags },
    /// GPT-OSS harmony: `<|channel|>analysis<|message|>…<|end|>`, `… to=functions.NAME …<|message|>{args}<|call|>`.
    Harmony,
}

/// The tool-call markup of a [`Syntax::Tagged`] model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolTags {
    /// No known tool-call syntax: all text is content (or reasoning).
    None,
    /// `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Qwen, Hermes; also the XML
    /// bodies `<function=NAME><parameter=P>V</parameter></function>` and GLM's
    /// `NAME<arg_key>K</arg_key><arg_value>V</arg_value>`).
    Hermes,
    /// `[TOOL_CALLS][{"name": …, "arguments": {…}}]` or `[TOOL_CALLS]NAME[ARGS]{…}`, to the end.
    Mistral,
    /// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>…<｜tool▁sep｜>…<｜tool▁call▁end｜><｜tool▁calls▁end｜>`.
    DeepSeek,
}

impl Syntax {
    /// The output syntax of the model whose chat template is `template` (its source).
    pub fn detect(template: &str) -> Syntax {
        if template.contains("<|channel|>") && template.contains("<|message|>") {
            return Syntax::Harmony;
        }
        let tools = if template.contains("<｜tool▁calls▁begin｜>") || template.contains("<｜tool▁call▁begin｜>")
        {
            ToolTags::DeepSeek
        } else if template.contains("[TOOL_CALLS]") {
            ToolTags::Mistral
        } else if template.contains("<tool_call>") {
            ToolTags::Hermes
        } else {
            ToolTags::None
        };
        Syntax::Tagged { think: template.contains("<think>") || template.contains("</think>"), tools }
    }

    /// The marker strings this syntax reads (a caller whose text skips special tokens must keep
    /// them when one of these is a special token).
    pub fn markers(&self) -> Vec<&'static str> {
        match self {
            Syntax::Harmony => harmony::MARKERS.to_vec(),
            Syntax::Tagged { think, tools } => {
                let mut m = tagged::tool_markers(*tools);
                if *think {
                    m.extend([tagged::THINK_OPEN, tagged::THINK_CLOSE]);
                }
                m
            }
        }
    }

    /// Whether a prompt that ends with `prompt_tail` leaves the model inside a reasoning block
    /// (templates that open `<think>` in the generation prompt: DeepSeek-R1, Qwen3 thinking).
    pub fn starts_in_reasoning(&self, prompt_tail: &str) -> bool {
        matches!(self, Syntax::Tagged { think: true, .. }) && prompt_tail.trim_end().ends_with(tagged::THINK_OPEN)
    }
}

/// What to read from the text.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParseOptions {
    /// Read tool calls (false: tool-call markup stays in the content).
    pub tools: bool,
    /// The text starts inside a reasoning block ([`Syntax::starts_in_reasoning`]).
    pub in_reasoning: bool,
}

/// What one piece of text completed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }

    /// `other` after this.
    pub fn append(&mut self, other: Delta) {
        self.content.push_str(&other.content);
        self.reasoning.push_str(&other.reasoning);
        self.tool_calls.extend(other.tool_calls);
    }
}

/// The incremental splitter of one generation.
pub struct OutputParser {
    inner: Inner,
}

enum Inner {
    Tagged(tagged::Parser),
    Harmony(harmony::Parser),
}

impl OutputParser {
    pub fn new(syntax: Syntax, options: ParseOptions) -> OutputParser {
        let inner = match syntax {
            Syntax::Tagged { think, tools } => Inner::Tagged(tagged::Parser::new(think, tools, options)),
            Syntax::Harmony => Inner::Harmony(harmony::Parser::new(options)),
        };
        OutputParser { inner }
    }

    /// Feed the next generated text; returns what it completed.
    pub fn push(&mut self, text: &str) -> Delta {
        match &mut self.inner {
            Inner::Tagged(p) => p.push(text),
            Inner::Harmony(p) => p.push(text),
        }
    }

    /// The generation ended: everything still held back.
    pub fn finish(&mut self) -> Delta {
        match &mut self.inner {
            Inner::Tagged(p) => p.finish(),
            Inner::Harmony(p) => p.finish(),
        }
    }

    /// Split a whole text at once.
    pub fn parse(syntax: Syntax, options: ParseOptions, text: &str) -> Delta {
        let mut p = OutputParser::new(syntax, options);
        let mut d = p.push(text);
        d.append(p.finish());
        d
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of one of `markers` (text
/// that may still become a marker), on a character boundary.
fn held_back(text: &str, markers: &[&str]) -> usize {
    let mut hold = 0;
    for m in markers {
        for l in (1..m.len().min(text.len() + 1)).rev() {
            if l > hold && m.is_char_boundary(l) && text.ends_with(&m[..l]) {
                hold = l;
                break;
            }
        }
    }
    hold
}

/// The earliest occurrence of any of `markers` in `text`: (position, marker index).
fn find_first(text: &str, markers: &[&str]) -> Option<(usize, usize)> {
    markers.iter().enumerate().filter_map(|(k, m)| text.find(m).map(|at| (at, k))).min()
}

#[cfg(test)]
mod tests;
