//! The token a chat template ends an assistant turn with, to be treated as end-of-sequence when
//! generating a chat reply. A model's generation config often lists it among its
//! end-of-sequence ids (Qwen: `<|im_end|>`), but not always (colibri's default model lists only
//! `<|endoftext|>`, though its ChatML template ends every turn with `<|im_end|>`). As llama.cpp
//! does (its end-of-generation tokens), a special token with one of the known end-of-turn names
//! ends the reply — here only when the chat template writes it.

use crate::tokenizer::Tokenizer;

/// End-of-turn token names (llama.cpp's end-of-generation list).
const END_OF_TURN: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|end_of_turn|>",
    "<EOT>",
    "<|return|>",
    "<|call|>",
    "<｜end▁of▁sentence｜>",
    "<|endoftext|>",
];

/// The special tokens of `tokenizer` that end an assistant turn of chat template `template`
/// (its source): known end-of-turn names the template writes. In GPT-OSS harmony `<|end|>`
/// ends a message, not the turn (`<|return|>` and `<|call|>` do), so it is left out there.
pub fn end_of_turn_ids(template: &str, tokenizer: &Tokenizer) -> Vec<u32> {
    let harmony = template.contains("<|channel|>") && template.contains("<|return|>");
    END_OF_TURN
        .iter()
        .filter(|name| template.contains(*name) && !(harmony && **name == "<|end|>"))
        .filter_map(|name| tokenizer.token_id(name))
        .filter(|&id| tokenizer.is_special(id))
        .collect()
}
