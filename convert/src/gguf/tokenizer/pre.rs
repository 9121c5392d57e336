//! `tokenizer.ggml.pre` → the normalizer and pre-tokenizer of the HuggingFace tokenizer that name
//! stands for (convert_hf_to_gguf_update.py's table), with llama.cpp's `ignore_merges` flag.
//! The split regexes are the hub tokenizer.json ones, which llama.cpp's src/llama-vocab.cpp
//! quotes (it adapts some for its own regex engine; the originals are used here).

use crate::error::{fail, Result};
use serde_json::{json, Value};

/// What a pre-tokenizer name fixes in tokenizer.json.
pub(super) struct PreTokenizer {
    pub normalizer: Value,
    pub pre_tokenizer: Value,
    /// BPE `ignore_merges`: a pre-token that is a whole vocabulary entry is emitted as is.
    pub ignore_merges: bool,
    /// llama.cpp drops the bos token of these vocabularies (ChatGLM / GLM-4).
    pub no_bos: bool,
    /// llama.cpp's default `add_bos_token` when the GGUF lacks the key.
    pub add_bos_default: bool,
}

const CONTRACTIONS: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)";
const LLAMA3: &str = r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const TEKKEN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const DEEPSEEK_LLM: [&str; 6] = [
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u{1f7d}ᾀ-ᾴᾶ-ᾼ\u{1fbe}ῂ-ῄῆ-ῌῐ-\u{1fd3}ῖ-\u{1fdb}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u{2126}ℨ\u{212a}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
];
const DEEPSEEK_CODER: [&str; 5] = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"];
const DEEPSEEK_V3: [&str; 3] = [
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];
/// llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT: what it runs for a GGUF without a pre name (or
/// "default"); no hub tokenizer stands behind it.
const LLAMA_CPP_DEFAULT: [&str; 4] = [
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
];

/// The pre-tokenizer of `name` (`None`: the key is absent, llama.cpp's default).
pub(super) fn pre_tokenizer(name: Option<&str>) -> Result<PreTokenizer> {
    let (normalizer, pre_tokenizer) = match name.unwrap_or("default") {
        "default" => (Value::Null, splits(&LLAMA_CPP_DEFAULT)),
        "gpt-2" | "phi-2" => (Value::Null, byte_level(true)),
        "olmo" | "mpt" => (nfc(), byte_level(true)),
        "starcoder" | "refact" | "smollm" => (Value::Null, digits_byte_level()),
        "command-r" => (nfc(), digits_byte_level()),
        "llama-bpe" | "llama3" | "llama-v3" | "smaug-bpe" | "dbrx" | "glm4" | "glm5" | "chatglm-bpe" => {
            (Value::Null, splits(&[&format!("{CONTRACTIONS}{LLAMA3}")]))
        }
        "qwen2" | "deepseek-r1-qwen" => (nfc(), splits(&[&format!("{CONTRACTIONS}{QWEN2}")])),
        // no NFC: llama.cpp's recorded hub ids keep "e\u{301}" as two tokens
        "qwen35" => (Value::Null, splits(&[&format!("{CONTRACTIONS}{QWEN35}")])),
        "deepseek-llm" => (Value::Null, splits(&DEEPSEEK_LLM)),
        "deepseek-coder" => (Value::Null, splits(&DEEPSEEK_CODER)),
        "deepseek-v3" => (Value::Null, splits(&DEEPSEEK_V3)),
        "gpt-4o" | "llama4" => (Value::Null, splits(&[GPT4O])),
        "tekken" => (Value::Null, splits(&[TEKKEN])),
        "falcon" => (Value::Null, falcon()),
        other => return Err(fail(format!("GGUF pre-tokenizer {other:?} (tokenizer.ggml.pre) is not supported"))),
    };
    let name = name.unwrap_or("default");
    Ok(PreTokenizer {
        normalizer,
        pre_tokenizer,
        ignore_merges: matches!(name, "llama-bpe" | "llama3" | "llama-v3" | "glm4" | "glm5" | "tekken"),
        no_bos: crate::gguf::vocab::NO_BOS_PRE.contains(&name),
        add_bos_default: matches!(name, "llama-bpe" | "llama3" | "llama-v3" | "tekken"),
    })
}

fn nfc() -> Value {
    json!({"type": "NFC"})
}

/// Single digits split off, then ByteLevel's GPT-2 split (StarCoder, SmolLM, Command-R).
fn digits_byte_level() -> Value {
    let digits = json!({"type": "Digits", "individual_digits": true});
    json!({"type": "Sequence", "pretokenizers": [digits, byte_level(true)]})
}

/// ByteLevel; `use_regex` is its built-in GPT-2 split.
fn byte_level(use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex})
}

/// Falcon: punctuation runs, ByteLevel's GPT-2 split, digit runs, then groups of three digits.
fn falcon() -> Value {
    let punct = json!({"type": "Punctuation", "behavior": "Contiguous"});
    let digits = json!({"type": "Digits", "individual_digits": false});
    let threes =
        json!({"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": false});
    json!({"type": "Sequence", "pretokenizers": [punct, byte_level(true), digits, threes]})
}

/// One isolating Split per regex, in order, then the byte mapping.
fn splits(regexes: &[&str]) -> Value {
    let mut steps: Vec<Value> = regexes
        .iter()
        .map(|r| json!({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": false}))
        .collect();
    steps.push(byte_level(false));
    json!({"type": "Sequence", "pretokenizers": steps})
}
