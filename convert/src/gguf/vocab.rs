//! The tokenizer a GGUF file carries in its `tokenizer.*` metadata keys, as plain owned data:
//! what the GGUF reader extracts and the tokenizer builder turns into the HuggingFace
//! `tokenizer.json` / `tokenizer_config.json` pair every .colibri file stores.

/// `tokenizer.ggml.*` and `tokenizer.chat_template`, decoded; absent keys are `None`/empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE), "llama" (SentencePiece), …
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name ("qwen2", "llama-bpe", "deepseek-v3", …).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: token text by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores` (SentencePiece), one per token.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
    /// 6 byte — one per token.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges` ("a b" strings, BPE).
    pub merges: Vec<String>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` / `eom_token_id`: further end-of-generation ids.
    pub eot_ids: Vec<u32>,
    pub unk_id: Option<u32>,
    pub pad_id: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

/// `tokenizer.ggml.pre` names whose bos token llama.cpp drops (ChatGLM / GLM-4: the hub
/// tokenizers have none, their chat templates write `[gMASK]<sop>` themselves).
pub const NO_BOS_PRE: [&str; 3] = ["glm4", "glm5", "chatglm-bpe"];

impl GgufVocab {
    /// The bos id the model uses: `bos_id`, except for the `NO_BOS_PRE` vocabularies (none,
    /// whatever the file records).
    pub fn bos(&self) -> Option<u32> {
        self.bos_id.filter(|_| !self.pre.as_deref().is_some_and(|p| NO_BOS_PRE.contains(&p)))
    }
}
