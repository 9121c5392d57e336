#!/usr/bin/env python3
"""Generate the small committed test fixtures under tests/fixtures/.

    /work/venv/bin/python tools/make_fixtures.py            # regenerate everything
    /work/venv/bin/python tools/make_fixtures.py --only olmoe,qwen3_moe_fused

What it writes (see tests/fixtures/README.md for the full description):

* tests/fixtures/tokenizers/{sp_bpe,bytelevel_bpe,bytelevel_bpe_gpt2}/
      tokenizer.json + expected.json (ids / ids_with_special / decoded from the
      Python `tokenizers` library).
* tests/fixtures/models/<name>/
      a tiny random-weight MoE checkpoint written by transformers itself, the
      tokenizer files, and oracle/ (teacher-forced logits for f32 and for the
      weights rounded to bf16 / f16, greedy continuations and per-layer routing).

Training text for the tokenizers: the license texts in /usr/share/common-licenses
(Debian `base-files`; Apache-2.0, GPL-3, LGPL-2.1, MPL-2.0, Artistic, BSD,
CC0-1.0, GFDL-1.3) plus the small inline SUPPLEMENT below (accented words so some
non-ASCII characters are real vocabulary entries).  Everything is seeded; the
tokenizer trainers are run single-threaded so reruns are byte-identical on the
same machine.

Margins.  Weights are not plain random draws: they are *designed* so every
decision the engine must reproduce exactly has a clear margin:

* Router: for every MoE layer l the router rows W_l (times the post-attention
  RMSNorm weight) span a subspace R of the hidden space.  Each vocabulary
  embedding gets a component inside R chosen so that its router logits have a
  designed ladder (top-k experts separated by random gaps of 0.8-1.5 units of
  DELTA, the k-th at >= 0.8, the rest uniformly in [-1.2, 0]).  Every residual branch output (o_proj, expert /
  shared-expert / dense down_proj) is projected so only a fraction `leak` of it
  falls inside R; hence the residual stream only perturbs the routing a little
  (routing still depends on context through the leak and the RMSNorm).
* Greedy: untied lm_head = small random background + a "bigram" code: the row
  of token pi(v) contains the (final-norm-weighted) direction of embedding v, so
  the arg-max is clear.  Tied fixtures: self-similarity dominates (the greedy
  continuation quickly repeats one token).

The script then MEASURES the margins on the real transformers forward passes
(teacher-forced input_ids and the prompt+greedy sequence, for the f32, bf16- and
f16-rounded weights) and asserts minimum relative margins; a failing draw is
retried with another seed (seed + 1000 * attempt).
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import math
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

import safetensors  # noqa: E402
import sentencepiece as spm  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (  # noqa: E402
    AutoTokenizer,
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Dots1Config,
    Dots1ForCausalLM,
    Ernie4_5_MoeConfig,
    Ernie4_5_MoeForCausalLM,
    GenerationConfig,
    Glm4MoeConfig,
    GptOssConfig,
    GptOssForCausalLM,
    Glm4MoeForCausalLM,
    GraniteMoeConfig,
    GraniteMoeForCausalLM,
    HunYuanMoEV1Config,
    HunYuanMoEV1ForCausalLM,
    Llama4ForCausalLM,
    Llama4TextConfig,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    PhimoeConfig,
    PhimoeForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

transformers.logging.set_verbosity_error()
try:
    transformers.utils.logging.disable_progress_bar()
except Exception:  # pragma: no cover
    pass

import gpt_oss_fixtures  # noqa: E402  (tools/, next to this script)
import llama4_fixtures  # noqa: E402
from transformers.models.phimoe import modeling_phimoe  # noqa: E402

STOCK_PHIMOE_ROPE = modeling_phimoe.PhimoeRotaryEmbedding.forward


def phimoe_rope_forward(self, x, position_ids=None):
    """PhimoeRotaryEmbedding.forward of transformers 5.x with ONE change: the LongRoPE factor set is chosen by
    this call's seq_len = max(position_ids) + 1 (`rope_init_fn(config, device, seq_len)`), as transformers 4.x's
    Phi-MoE, Microsoft's reference implementation and transformers' own `longrope_frequency_update` do. Stock 5.x
    calls `rope_init_fn(self.config)` without seq_len, so it never uses long_factor (only long_mscale): a
    regression the oracle does not copy. Identical to stock for every call that stays within
    original_max_position_embeddings."""
    rp = self.config.rope_parameters
    seq_len = int(torch.max(position_ids)) + 1
    mscale = None
    if rp["rope_type"] != "default" and seq_len:
        mscale = rp["long_mscale"] if seq_len > rp["original_max_position_embeddings"] else rp["short_mscale"]
    inv_freq, attention_scaling = self.rope_init_fn(self.config, x.device, seq_len=seq_len)
    mscale = attention_scaling if mscale is None else mscale
    freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * mscale).to(x.dtype), (emb.sin() * mscale).to(x.dtype)


modeling_phimoe.PhimoeRotaryEmbedding.forward = phimoe_rope_forward

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
TOK_DIR = FIX / "tokenizers"
MODEL_DIR = FIX / "models"

# --------------------------------------------------------------------------------------
# Training corpus
# --------------------------------------------------------------------------------------
CORPUS_DIR = Path("/usr/share/common-licenses")
CORPUS_FILES = ["Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.3"]
SUPPLEMENT = [
    "The café serves a naïve crème brûlée; the résumé mentions déjà vu.",
    "Über-fast façade: São Paulo, Zürich, Ångström, señor, garçon, coöperate.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 appear in 2024, 3.14159 and 1,000,000.",
] * 20


def corpus_lines() -> list[str]:
    lines: list[str] = []
    for name in CORPUS_FILES:
        path = CORPUS_DIR / name
        lines += path.read_text(encoding="utf-8").splitlines()
    lines += SUPPLEMENT
    return [ln for ln in lines if ln.strip()]


# --------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------
SP_VOCAB = 400
BL_BPE_VOCAB = 395  # + 5 added tokens = 400
QWEN_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BL_ADDED = [
    # (content, special) -- Qwen puts its control tokens after the BPE vocab as added tokens
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),  # Qwen3-style non-special added tokens
    ("</think>", False),
]

COMMON_TEXTS = [
    "Hello world",
    "The Licensor grants you a license to use the Work.",
    " leading space",
    "  two leading spaces and a trailing space ",
    "multiple   internal    spaces",
    "line one\nline two\n\nline four\n",
    "tabs\tand\r\nwindows newlines",
    "Digits: 0123456789 3.14159 2024-06-01 1,000,000",
    "Accents: café naïve résumé déjà vu Ångström",
    "Combining: e\u0301 vs \u00e9",
    "Emoji: \U0001f642\U0001f680 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "CJK and Greek: 你好，世界 Ελληνικά",
    "Contractions: don't I'LL we've they'd it's",
    "punctuation!!! ??? ... --- (brackets) [x] {y}",
    "supercalifragilisticexpialidocious",
    "",
    "   ",
    "\n",
]
SP_SPECIAL_TEXTS = [
    "<s>[INST] Hi there! [/INST] Hello</s>",
    "text with <unk> inside",
    "no<s>space</s>",
]
BL_SPECIAL_TEXTS = [
    "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "a<|im_end|>b",
]


def train_sp_bpe(lines):
    """Train a real SentencePiece BPE model with Llama's trainer settings and convert it to a
    Llama/Mixtral-style tokenizer.json (legacy form: Prepend+Replace normalizer, no pre-tokenizer,
    ByteFallback decoder, TemplateProcessing '<s> $A')."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        model_type="bpe",
        vocab_size=SP_VOCAB,
        byte_fallback=True,
        character_coverage=1.0,
        add_dummy_prefix=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
        max_sentence_length=100000,
    )
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    assert vocab["<unk>"] == 0 and vocab["<s>"] == 1 and vocab["</s>"] == 2 and vocab["<0x00>"] == 3 and vocab["<0xFF>"] == 258
    # merges: like transformers' SpmConverter -- every split of a normal piece whose halves are
    # normal pieces, ranked by the score of the merged piece (higher first).
    normal = {sp.id_to_piece(i): (sp.get_score(i), i) for i in range(n) if not (sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i))}
    ranked = []
    for tok, (score, idx) in normal.items():
        for s in range(1, len(tok)):
            left, right = tok[:s], tok[s:]
            if left in normal and right in normal:
                ranked.append((-score, idx, left, right))
    merges = [(lft, rgt) for _, _, lft, rgt in sorted(ranked)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, dropout=None))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    # Serialize the way the Mixtral/Llama hub files do: merges as "left right" strings.
    js = json.loads(tok.to_str())
    js["model"]["merges"] = [f"{a} {b}" for a, b in js["model"]["merges"]]
    text = json.dumps(js, ensure_ascii=False, indent=2)
    tok2 = Tokenizer.from_str(text)
    return tok2, text, sp


def train_bytelevel_bpe(lines):
    """Qwen2-style byte-level BPE: NFC normalizer, Split(regex, Isolated) + ByteLevel(use_regex=False)
    pre-tokenizer, ByteLevel decoder/post-processor, control tokens appended after the BPE vocab."""
    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False, dropout=None))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BL_BPE_VOCAB, min_frequency=2, show_progress=False, special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(lines, trainer=trainer)
    assert tok.get_vocab_size() == BL_BPE_VOCAB, tok.get_vocab_size()
    for content, special in BL_ADDED:
        if special:
            tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
        else:
            tok.add_tokens([AddedToken(content, special=False, normalized=False)])
    for i, (content, _) in enumerate(BL_ADDED):
        assert tok.token_to_id(content) == BL_BPE_VOCAB + i, (content, tok.token_to_id(content))
    js = json.loads(tok.to_str())
    # mirror Qwen2's hub file exactly (the Python ByteLevel decoder constructor does not keep these flags; they do not
    # change decoding) and its "" (rather than null) subword affixes
    js["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    js["model"]["continuing_subword_prefix"] = ""
    js["model"]["end_of_word_suffix"] = ""
    text = json.dumps(js, ensure_ascii=False, indent=2)
    tok2 = Tokenizer.from_str(text)
    for t in COMMON_TEXTS + BL_SPECIAL_TEXTS:
        assert tok2.encode(t).ids == tok.encode(t).ids and tok2.decode(tok2.encode(t).ids) == tok.decode(tok.encode(t).ids)
    return tok2, text


def gpt2_variant(bl_text):
    """Same vocab/merges/added tokens, GPT-2/GPT-NeoX-style pre-tokenizer ByteLevel(use_regex=True)."""
    js = json.loads(bl_text)
    js["normalizer"] = None
    js["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    js["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    js["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    text = json.dumps(js, ensure_ascii=False, indent=2)
    return Tokenizer.from_str(text), text


def tokenizer_expected(tok: Tokenizer, texts: list[str]) -> dict:
    out = {
        "texts": texts,
        "ids": [],
        "ids_with_special": [],
        "tokens": [],
        "decoded": [],
        "decoded_keep_special": [],
        "vocab_size_with_added": tok.get_vocab_size(with_added_tokens=True),
        "vocab_size_model": tok.get_vocab_size(with_added_tokens=False),
        "generated_by": f"tokenizers {tokenizers.__version__}: encode(text, add_special_tokens=False/True); decode(ids) (skip_special_tokens=True, the default) and decode(ids, skip_special_tokens=False)",
    }
    for t in texts:
        enc = tok.encode(t, add_special_tokens=False)
        out["ids"].append(enc.ids)
        out["tokens"].append(enc.tokens)
        out["ids_with_special"].append(tok.encode(t, add_special_tokens=True).ids)
        out["decoded"].append(tok.decode(enc.ids))
        out["decoded_keep_special"].append(tok.decode(enc.ids, skip_special_tokens=False))
    return out


def write_json(path: Path, obj, indent=1):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=indent) + "\n", encoding="utf-8")


def build_tokenizers(log):
    lines = corpus_lines()
    sp_tok, sp_text, sp_proc = train_sp_bpe(lines)
    bl_tok, bl_text = train_bytelevel_bpe(lines)
    g2_tok, g2_text = gpt2_variant(bl_text)
    toks = {
        "sp_bpe": (sp_tok, sp_text, COMMON_TEXTS + SP_SPECIAL_TEXTS),
        "bytelevel_bpe": (bl_tok, bl_text, COMMON_TEXTS + BL_SPECIAL_TEXTS),
        "bytelevel_bpe_gpt2": (g2_tok, g2_text, COMMON_TEXTS + BL_SPECIAL_TEXTS),
    }
    for name, (tok, text, texts) in toks.items():
        d = TOK_DIR / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        (d / "tokenizer.json").write_text(text + "\n", encoding="utf-8")
        exp = tokenizer_expected(tok, texts)
        if name == "sp_bpe":
            # cross-check against the sentencepiece library itself (texts without special tokens)
            mism = []
            for t, ids in zip(texts, exp["ids"]):
                if t in SP_SPECIAL_TEXTS:
                    continue
                ref = sp_proc.encode(t)
                if ref != ids:
                    mism.append({"text": t, "tokenizers": ids, "sentencepiece": ref})
            exp["sentencepiece_mismatches"] = mism
            log(f"  sp_bpe: {len(mism)} texts where tokenizers != sentencepiece library (recorded in expected.json)")
        write_json(d / "expected.json", exp)
        log(f"  tokenizer {name}: vocab {tok.get_vocab_size()} ({len(text)//1024} KB)")
    return {k: (v[0], v[1]) for k, v in toks.items()}


# --------------------------------------------------------------------------------------
# Chat templates
# --------------------------------------------------------------------------------------
MIXTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
CHATML_QWEN15_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QWEN3_LIKE_TEMPLATE = (
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
)
TULU_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'assistant' %}{% if not loop.last %}{{ '<|assistant|>\n' + message['content'] + eos_token + '\n' }}"
    "{% else %}{{ '<|assistant|>\n' + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}"
)
CHAT_MESSAGES_ALT = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And in words, café-style? \U0001f642"},
]
CHAT_MESSAGES_SYS = [{"role": "system", "content": "Be brief."}] + CHAT_MESSAGES_ALT

# --------------------------------------------------------------------------------------
# Model fixtures
# --------------------------------------------------------------------------------------
FAMILIES = {
    "mixtral": (MixtralConfig, MixtralForCausalLM),
    "qwen2_moe": (Qwen2MoeConfig, Qwen2MoeForCausalLM),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
    "olmoe": (OlmoeConfig, OlmoeForCausalLM),
    "granitemoe": (GraniteMoeConfig, GraniteMoeForCausalLM),
    "glm4_moe": (Glm4MoeConfig, Glm4MoeForCausalLM),
    "deepseek_v2": (DeepseekV2Config, DeepseekV2ForCausalLM),
    "deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM),
    "gpt_oss": (GptOssConfig, GptOssForCausalLM),
    "phimoe": (PhimoeConfig, PhimoeForCausalLM),
    "qwen3_next": (Qwen3NextConfig, Qwen3NextForCausalLM),
    "dots1": (Dots1Config, Dots1ForCausalLM),
    "ernie4_5_moe": (Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM),
    "hunyuan_v1_moe": (HunYuanMoEV1Config, HunYuanMoEV1ForCausalLM),
    "llama4": (Llama4TextConfig, Llama4ForCausalLM),
}

# Sigmoid routers (scores + e_score_correction_bias) need the smaller absolute router margin.
SIGMOID_FAMILIES = ("glm4_moe", "deepseek_v3", "dots1")
# Softmax routers with a choice bias added to the probabilities (ERNIE-4.5-MoE's moe_statics).
BIASED_SOFTMAX_FAMILIES = ("ernie4_5_moe",)

SP_IDS = {"unk": 0, "bos": 1, "eos": 2}
BL_IDS = {"endoftext": 395, "im_start": 396, "im_end": 397, "think": 398, "think_end": 399}

FIXTURES = [
    dict(
        name="mixtral_gqa",
        family="mixtral",
        tokenizer="sp_bpe",
        seed=1101,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False,
            max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=("tokenizer_config", MIXTRAL_TEMPLATE, CHAT_MESSAGES_ALT),
        notes="Mixtral GQA (4 q heads / 2 kv heads, head_dim 16), 8 experts top-2 (always renormalised), untied lm_head, "
        "hub per-expert layout block_sparse_moe.experts.{e}.w1/w2/w3, f32, config as written by transformers 5 (rope_parameters).",
    ),
    dict(
        name="mixtral_mqa_swa_tied",
        family="mixtral",
        tokenizer="sp_bpe",
        seed=2202,
        T=18,
        config=dict(
            vocab_size=400, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=True,
            sliding_window=6, max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=True, dtype="float32", config_style="legacy_hub",
        chat=("jinja_file", MIXTRAL_TEMPLATE, CHAT_MESSAGES_ALT),
        notes="Mixtral MQA (4 q heads / 1 kv head, head_dim 8), 4 experts top-2, tie_word_embeddings=true (no lm_head.weight "
        "in the checkpoint), sliding_window=6 < sequence length 18 (token i attends to keys j with i-6 < j <= i), "
        "SHARDED into model-0000{1,2}-of-00002.safetensors + index, config.json rewritten in the legacy hub style "
        "(rope_theta top level, torch_dtype, no rope_parameters / head_dim), chat template in chat_template.jinja. "
        "Tied embeddings make the greedy continuation repeat the last prompt token (self-similarity dominates).",
    ),
    dict(
        name="qwen2_moe_shared",
        family="qwen2_moe",
        tokenizer="bytelevel_bpe",
        seed=3303,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=48, moe_intermediate_size=16, shared_expert_intermediate_size=40,
            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, num_experts=8, num_experts_per_tok=4,
            decoder_sparse_step=2, norm_topk_prob=False, max_position_embeddings=4096, rms_norm_eps=1e-6,
            bos_token_id=395, eos_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=("tokenizer_config", CHATML_QWEN15_TEMPLATE, CHAT_MESSAGES_SYS),
        gen_eos=[397, 395],
        notes="Qwen1.5-MoE style: q/k/v bias, decoder_sparse_step=2 -> layers 1 and 3 sparse, layers 0 and 2 dense MLP "
        "(intermediate_size); 8 experts top-4 with norm_topk_prob=false (weights are the raw softmax probs, sum < 1); "
        "shared expert (shared_expert_intermediate_size) scaled by sigmoid(shared_expert_gate(x)) and added; f32 per-expert layout.",
    ),
    dict(
        name="qwen2_moe_odd_bf16",
        family="qwen2_moe",
        tokenizer="bytelevel_bpe",
        seed=4404,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=72, moe_intermediate_size=40, shared_expert_intermediate_size=56,
            num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=3, num_experts=6, num_experts_per_tok=2,
            decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=True, max_position_embeddings=4096, rms_norm_eps=1e-6,
            bos_token_id=395, eos_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        layout="per_expert", sharded=False, dtype="bfloat16", config_style="legacy_hub",
        legacy_extra={"use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21},
        chat=None,
        notes="Odd sizes: hidden 48, 3 heads (MHA, head_dim 16), expert ffn 40, shared ffn 56, dense ffn 72; "
        "mlp_only_layers=[1] -> layer 1 dense, layers 0 and 2 sparse; 6 experts top-2 with norm_topk_prob=true; "
        "checkpoint stored in BF16 (torch_dtype bfloat16) -- logits_f32 == logits_bf16 by construction; "
        "config.json in legacy hub style with sliding_window=32768 but use_sliding_window=false (must be IGNORED); "
        "no chat template.",
    ),
    dict(
        name="qwen3_moe_fused",
        family="qwen3_moe",
        tokenizer="bytelevel_bpe",
        seed=5505,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=24, num_experts=8, num_experts_per_tok=2,
            mlp_only_layers=[0], norm_topk_prob=True, max_position_embeddings=2048, rms_norm_eps=1e-6,
            bos_token_id=395, eos_token_id=397, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024, "rope_theta": 1000000.0},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=("tokenizer_config", QWEN3_LIKE_TEMPLATE, CHAT_MESSAGES_SYS),
        gen_eos=[397, 395],
        notes="Qwen3-MoE: explicit head_dim=24 != hidden/heads=16 (q_proj out 96, o_proj in 96), per-head q_norm/k_norm "
        "(RMSNorm over head_dim, before RoPE), no attention bias, mlp_only_layers=[0] (layer 0 dense with intermediate_size), "
        "8 experts top-2 norm_topk_prob=true; YaRN rope written the transformers-5 way (rope_parameters: rope_type yarn, "
        "factor 2, original_max_position_embeddings 1024, rope_theta 1e6); config.json as written by transformers 5 "
        "(note: Qwen3MoeConfig serialises the expert count as num_local_experts, not num_experts); FUSED expert layout (mlp.experts.gate_up_proj [E,2F,H], "
        "mlp.experts.down_proj [E,H,F]) as in transformers-5 memory (save_pretrained(save_original_format=False)).",
    ),
    dict(
        name="qwen3_moe_yarn",
        family="qwen3_moe",
        tokenizer="bytelevel_bpe",
        seed=6606,
        T=16,
        config=dict(
            vocab_size=416, hidden_size=48, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=1, head_dim=16, num_experts=6, num_experts_per_tok=3,
            norm_topk_prob=True, max_position_embeddings=2048, rms_norm_eps=1e-6,
            bos_token_id=395, eos_token_id=397, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512, "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="legacy_hub",
        legacy_extra={"max_window_layers": 2},
        chat=("jinja_file", QWEN3_LIKE_TEMPLATE, CHAT_MESSAGES_SYS),
        notes="Qwen3-MoE with YaRN rope written the way Qwen's hub configs / docs do it (legacy transformers-4 style: "
        "rope_theta 1e4 at top level + rope_scaling {rope_type: yarn, factor: 4, original_max_position_embeddings: 512}; "
        "num_experts instead of num_local_experts; torch_dtype); cos/sin are multiplied by attention_factor 0.1*ln(4)+1, MQA (4 q heads / 1 kv head), head_dim 16 != 48/4, "
        "all layers sparse, 6 experts top-3 norm_topk_prob=true; model vocab_size 416 is PADDED beyond the tokenizer's 400 "
        "ids (like real Qwen checkpoints): ids 400..415 have no token.",
    ),
    dict(
        name="olmoe",
        family="olmoe",
        tokenizer="bytelevel_bpe",
        seed=7707,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_experts=8, num_experts_per_tok=3, norm_topk_prob=False, max_position_embeddings=4096,
            rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=395, pad_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=("tokenizer_config", TULU_TEMPLATE, CHAT_MESSAGES_SYS),
        notes="OLMoE: q_norm is an RMSNorm over the WHOLE q projection (num_heads*head_dim = 64) and k_norm over the whole "
        "k projection ((hidden/heads)*num_kv_heads = 32, kv heads 2 < 4 q heads on purpose), applied before the head split "
        "and RoPE; 8 experts top-3 with norm_topk_prob=false; no shared expert.",
    ),
    dict(
        name="granitemoe_tied",
        family="granitemoe",
        tokenizer="bytelevel_bpe",
        seed=8808,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=True,
            max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=395, eos_token_id=395, pad_token_id=395,
            embedding_multiplier=12.0, attention_multiplier=0.0625, residual_multiplier=0.22, logits_scaling=6.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Granite-MoE (granite-3.x-moe-like multipliers): x = embed * 12, attention scores * 0.0625 (= 1/head_dim, "
        "not 1/sqrt(head_dim)), each residual branch * 0.22, logits / 6; router softmax over the top-2 LOGITS (= renormalised "
        "top-k probabilities); tied embeddings; GQA 4/2; transformers-5 names (block_sparse_moe.router.weight, "
        "block_sparse_moe.experts.gate_up_proj [E,2F,H] / down_proj [E,H,F]) written with save_original_format=False.",
    ),
    dict(
        name="granitemoe_hub",
        family="granitemoe",
        tokenizer="bytelevel_bpe",
        seed=9909,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=1, num_local_experts=6, num_experts_per_tok=3, tie_word_embeddings=False,
            max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=395, eos_token_id=395,
            embedding_multiplier=4.0, attention_multiplier=0.2, residual_multiplier=0.5, logits_scaling=2.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="hub", sharded=False, dtype="float32", config_style="legacy_hub",
        chat=None,
        notes="Granite-MoE, MQA (4 q heads / 1 kv head, head_dim 12), 6 experts top-3, untied lm_head, other multipliers "
        "(embed * 4, scores * 0.2, residual * 0.5, logits / 2.5); the HUB layout save_pretrained writes by default "
        "(block_sparse_moe.router.layer.weight, block_sparse_moe.input_linear.weight [E,2F,H], output_linear.weight [E,H,F]); "
        "legacy hub config (rope_theta top level, torch_dtype).",
    ),
    dict(
        name="glm4_moe_groups",
        family="glm4_moe",
        tokenizer="bytelevel_bpe",
        seed=10101,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
            n_group=2, topk_group=1, routed_scaling_factor=2.5, first_k_dense_replace=1, norm_topk_prob=True,
            use_qk_norm=True, attention_bias=True, max_position_embeddings=4096, rms_norm_eps=1e-5,
            bos_token_id=None, eos_token_id=395, pad_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="GLM-4.5: sigmoid router scores + e_score_correction_bias (random, for choosing only), 8 experts in 2 groups "
        "(group score = sum of its two best biased scores; topk_group=1), top-2 renormalised (+1e-20) then x2.5 "
        "(routed_scaling_factor), one ungated shared expert (moe_intermediate_size), first_k_dense_replace=1 (layer 0 dense, "
        "intermediate_size 48), per-head q/k RMSNorm (use_qk_norm), q/k/v bias, partial RoPE (half of head_dim 16), "
        "hub per-expert layout (mlp.experts.{e}.gate_proj ...; mlp.gate.weight, mlp.gate.e_score_correction_bias, "
        "mlp.shared_experts.*).",
    ),
    dict(
        name="glm4_moe_plain",
        family="glm4_moe",
        tokenizer="bytelevel_bpe",
        seed=11111,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=40, moe_intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=3, num_key_value_heads=1, head_dim=16, n_routed_experts=6, num_experts_per_tok=3,
            n_shared_experts=2, n_group=1, topk_group=1, routed_scaling_factor=1.0, first_k_dense_replace=0,
            norm_topk_prob=False, use_qk_norm=False, attention_bias=False, max_position_embeddings=4096, rms_norm_eps=1e-5,
            bos_token_id=None, eos_token_id=395, pad_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="GLM-4.5 without groups: 6 experts top-3 by biased sigmoid scores, weights = the raw sigmoid scores "
        "(norm_topk_prob=false, routed_scaling_factor 1), two shared experts (shared ffn 2 x 24), every layer sparse, "
        "MQA 3/1 with head_dim 16 != 48/3, no q/k norm, no bias, partial RoPE 0.25 (4 of 16 dims); fused layout.",
    ),
    dict(
        name="gpt_oss_mxfp4",
        family="gpt_oss",
        tokenizer="bytelevel_bpe",
        seed=12121,
        T=20,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=6,
            max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=395, pad_token_id=395,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
        ),
        layout="mxfp4", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="GPT-OSS as the hub ships it: experts as MXFP4 (mlp.experts.gate_up_proj_blocks [E,2F,H/32,16] u8 + "
        "_scales [E,2F,H/32] u8, gate/up interleaved along 2F; down_proj_blocks/_scales), quantization_config "
        "quant_method mxfp4, everything else f32; attention sinks, q/k/v/o biases, layer_types sliding(6)/full/sliding "
        "with a 20-token input, YaRN x32 (truncate false), router with bias (softmax over the top-2 of 4 logits), "
        "experts with biases and the clamped gate (alpha 1.702, limit 7). The oracle loads the experts with transformers' "
        "convert_moe_packed_tensors (what from_pretrained uses to dequantise).",
    ),
    dict(
        name="gpt_oss_bf16",
        family="gpt_oss",
        tokenizer="bytelevel_bpe",
        seed=13131,
        T=20,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=24, num_hidden_layers=2, num_attention_heads=6,
            num_key_value_heads=2, head_dim=8, num_local_experts=6, num_experts_per_tok=3, sliding_window=5,
            layer_types=["full_attention", "sliding_attention"], max_position_embeddings=4096, rms_norm_eps=1e-5,
            bos_token_id=None, eos_token_id=395, pad_token_id=395, tie_word_embeddings=False, swiglu_limit=2.0,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": True, "original_max_position_embeddings": 512},
        ),
        layout="hub", sharded=False, dtype="bfloat16", config_style="transformers5",
        chat=None,
        notes="GPT-OSS with bf16 experts as transformers saves them (mlp.experts.gate_up_proj [E,H,2F] with gate/up "
        "interleaved along 2F, gate_up_proj_bias [E,2F], down_proj [E,F,H], down_proj_bias [E,H]), bf16 checkpoint; "
        "layer_types full/sliding(5) with a 20-token input, 6 experts top-3, swiglu_limit 2 (the clamps bite), "
        "YaRN x8 over 512 (truncate true).",
    ),
]

# DeepSeek: multi-head latent attention (heads 4, nope 16 + rope 8, v 16, latent 32) unless stated.
MLA_DIMS = dict(num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                v_head_dim=16)
DS_COMMON = dict(vocab_size=400, hidden_size=64, max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=None,
                 eos_token_id=395, pad_token_id=395, tie_word_embeddings=False)
FIXTURES += [
    dict(
        name="deepseek_v2_greedy",
        family="deepseek_v2",
        tokenizer="bytelevel_bpe",
        seed=12121,
        T=24,
        config=dict(
            DS_COMMON, **MLA_DIMS, q_lora_rank=None, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
            n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1,
            topk_method="greedy", routed_scaling_factor=1.0, norm_topk_prob=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="DeepSeek-V2 (Lite-like): MLA with a full q_proj (q_lora_rank null), kv_a_proj_with_mqa -> 32-dim latent "
        "(RMSNorm eps 1e-6) + 8-dim shared rope key, kv_b_proj -> per-head 16-dim nope keys and 16-dim values, RoPE on "
        "interleaved pairs; softmax router, greedy top-2 of 8, weights = the softmax probabilities (never renormalised) x 1.0; "
        "two ungated shared experts (ffn 2 x 16); layer 0 dense (first_k_dense_replace=1); hub per-expert layout.",
    ),
    dict(
        name="deepseek_v2_groups_yarn",
        family="deepseek_v2",
        tokenizer="bytelevel_bpe",
        seed=13131,
        T=24,
        config=dict(
            DS_COMMON, **MLA_DIMS, q_lora_rank=24, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
            n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=0,
            topk_method="group_limited_greedy", n_group=4, topk_group=2, routed_scaling_factor=2.0, norm_topk_prob=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 1024,
                             "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="legacy_hub",
        chat=None,
        notes="DeepSeek-V2 with the low-rank query (q_a_proj 24 -> q_a_layernorm -> q_b_proj), group_limited_greedy routing "
        "(8 experts in 4 groups scored by their best softmax probability, the best 2 groups compete), weights x 2.0, one "
        "shared expert, every layer sparse; YaRN (factor 4 over 1024, mscale = mscale_all_dim = 0.707: cos/sin x 1, softmax "
        "scale x mscale(4, 0.707)^2); legacy hub config (rope_scaling, rope_theta top level).",
    ),
    dict(
        name="deepseek_v3_mtp",
        family="deepseek_v3",
        tokenizer="bytelevel_bpe",
        seed=14141,
        T=24,
        config=dict(
            DS_COMMON, **MLA_DIMS, q_lora_rank=24, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
            n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
            norm_topk_prob=True, routed_scaling_factor=2.5, rope_interleave=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        mtp=True,
        chat=None,
        notes="DeepSeek-V3: MLA with the low-rank query, rope_interleave=true; sigmoid router + e_score_correction_bias (for "
        "choosing only), 8 experts in 2 groups (top-2 sums, 1 group kept), top-2 renormalised then x2.5, one shared expert, "
        "layer 0 dense; plus the tensors of one multi-token-prediction layer (model.layers.3.*, past num_hidden_layers) "
        "that transformers does not load.",
    ),
    dict(
        name="deepseek_v3_halves",
        family="deepseek_v3",
        tokenizer="bytelevel_bpe",
        seed=15151,
        T=24,
        config=dict(
            DS_COMMON, num_attention_heads=3, num_key_value_heads=3, kv_lora_rank=24, qk_nope_head_dim=12, qk_rope_head_dim=4,
            v_head_dim=8, q_lora_rank=None, intermediate_size=40, moe_intermediate_size=24, num_hidden_layers=2,
            n_routed_experts=6, num_experts_per_tok=3, n_shared_experts=2, first_k_dense_replace=0, n_group=1, topk_group=1,
            norm_topk_prob=False, routed_scaling_factor=1.0, rope_interleave=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="DeepSeek-V3 with rope_interleave=false (rotate-half), a full q_proj, 3 heads of nope 12 + rope 4 and values of "
        "8 (!= nope), latent 24; no groups, top-3 of 6 by biased sigmoid scores, weights the raw scores (no "
        "renormalisation, x1); two shared experts; every layer sparse; fused expert layout.",
    ),
    dict(
        name="phimoe_hub",
        family="phimoe",
        tokenizer="sp_bpe",
        seed=12121,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=6, num_experts_per_tok=2, tie_word_embeddings=False,
            attention_bias=True, lm_head_bias=True, router_jitter_noise=0.01, max_position_embeddings=8192,
            rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, sliding_window=None,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
                             "short_factor": [1.0, 1.05, 1.1, 1.2, 1.4, 1.7, 2.1, 2.6],
                             "long_factor": [1.0, 1.2, 1.9, 3.5, 7.0, 12.0, 20.0, 31.0],
                             "short_mscale": 1.2, "long_mscale": 1.35},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="legacy_hub",
        legacy_extra={"original_max_position_embeddings": 4096},
        chat=None,
        notes="Phi-3.5-MoE as the hub ships it: LayerNorm (weight + bias) for both layer norms and the final norm, "
        "q/k/v/o biases (attention_bias), lm_head bias, sparsemixer top-2 with router_jitter_noise 0.01 (the threshold "
        "keeps only the best expert in each step: both weights 1.0), GQA 4/2 (head_dim 16), 6 experts, untied; LongRoPE "
        "with original_max_position_embeddings 4096 (every call here is short: short_factor and short_mscale 1.2 apply); "
        "legacy hub config (rope_scaling with 'type': 'longrope', top-level original_max_position_embeddings, "
        "rope_theta, torch_dtype); hub per-expert names (block_sparse_moe.gate.weight, block_sparse_moe.experts.{e}.w1/w2/w3).",
    ),
    dict(
        name="phimoe_long",
        family="phimoe",
        tokenizer="sp_bpe",
        seed=13131,
        T=16,
        incremental_oracle=True,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=1, num_local_experts=6, num_experts_per_tok=2, tie_word_embeddings=True,
            attention_bias=False, lm_head_bias=False, router_jitter_noise=0.3, max_position_embeddings=64,
            rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 12,
                             "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                             "long_factor": [1.5, 2.5, 4.0, 6.0, 9.0, 13.0],
                             "short_mscale": 1.1, "long_mscale": 1.25},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Phi-MoE past its original context: LongRoPE with original_max_position_embeddings 12, so the 16-token "
        "teacher-forced call uses long_factor and long_mscale for ALL its rows (the set is chosen per call from its highest "
        "position), and greedy generation from a 5-token prompt crosses position 12 (transformers' generate() then drops "
        "the cache and re-encodes the whole sequence with the long set); oracle/logits_incremental_f32.npy holds "
        "transformers' logits when input_ids are fed one token at a time through the cache (cached keys keep the set they "
        "were computed with). router_jitter_noise 0.3: the threshold keeps several experts in each sparsemixer step, so the "
        "weights are real masked softmaxes; MQA 4/1 (head_dim 12), tied embeddings, no biases but the LayerNorms'; fused "
        "transformers-5 names (mlp.router.weight, mlp.experts.gate_up_proj / down_proj).",
    ),
    dict(
        name="qwen3_next_hybrid",
        family="qwen3_next",
        tokenizer="bytelevel_bpe",
        seed=12121,
        T=80,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=48, moe_intermediate_size=16,
            shared_expert_intermediate_size=24, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=8, linear_num_key_heads=2,
            linear_num_value_heads=4, max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=None,
            eos_token_id=395, pad_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Qwen3-Next: layer_types from full_attention_interval 4 (layers 0-2 Gated DeltaNet, layer 3 gated full "
        "attention), DeltaNet with 2 key heads / 4 value heads (grouped in_proj_qkvz / in_proj_ba, value heads 2 per key "
        "head), key head 16, value head 8, conv kernel 4; full attention 4/2 heads of 16 with an output gate in q_proj, "
        "per-head zero-centred q/k RMSNorm, partial RoPE 0.25; 8 experts top-2 renormalised + a sigmoid-gated shared expert "
        "(24) in every layer; T=80 crosses the DeltaNet chunk of 64; hub per-expert layout.",
    ),
    dict(
        name="qwen3_next_dense_tied",
        family="qwen3_next",
        tokenizer="bytelevel_bpe",
        seed=13131,
        T=70,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=32, moe_intermediate_size=16,
            shared_expert_intermediate_size=16, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, num_experts=6, num_experts_per_tok=3, norm_topk_prob=False, decoder_sparse_step=1,
            mlp_only_layers=[0], layer_types=["linear_attention", "full_attention", "linear_attention"],
            linear_conv_kernel_dim=3, linear_key_head_dim=8, linear_value_head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=None,
            eos_token_id=395, pad_token_id=395, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Qwen3-Next with explicit layer_types (linear, full, linear), mlp_only_layers=[0] (layer 0 a dense MLP of 32), "
        "6 experts top-3 not renormalised + gated shared expert, DeltaNet 2/2 heads (key 8, value 16), conv kernel 3, "
        "MQA 2/1 heads of 16, partial RoPE 0.5, tied embeddings; T=70 crosses the chunk of 64; fused layout.",
    ),
]

# dots.llm1 and ERNIE-4.5-MoE
FIXTURES += [
    dict(
        name="dots1_groups_swa",
        family="dots1",
        tokenizer="bytelevel_bpe",
        seed=14141,
        T=20,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, n_routed_experts=8, num_experts_per_tok=2,
            n_shared_experts=1, n_group=2, topk_group=1, routed_scaling_factor=2.5, first_k_dense_replace=1,
            norm_topk_prob=True, sliding_window=6, max_window_layers=2, max_position_embeddings=4096,
            rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=395, pad_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="dots.llm1: per-head q/k RMSNorm, GQA 4/2 heads of 16; DeepSeek-V3 routing (sigmoid scores + random "
        "e_score_correction_bias for choosing only, 8 experts in 2 groups by top-2 sums, topk_group 1, top-2 "
        "renormalised then x2.5), one ungated shared expert, first_k_dense_replace=1; sliding_window 6 from "
        "max_window_layers=2 on (layer_types full, full, sliding) with a 20-token input; hub per-expert layout.",
    ),
    dict(
        name="dots1_plain_bias",
        family="dots1",
        tokenizer="bytelevel_bpe",
        seed=15151,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=40, moe_intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=3, num_key_value_heads=1, head_dim=16, n_routed_experts=6, num_experts_per_tok=3,
            n_shared_experts=2, n_group=1, topk_group=1, routed_scaling_factor=1.0, first_k_dense_replace=0,
            norm_topk_prob=False, attention_bias=True, sliding_window=None, max_position_embeddings=4096,
            rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=395, pad_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="dots.llm1 without groups: 6 experts top-3 by biased sigmoid scores, weights the raw scores "
        "(norm_topk_prob false), two shared experts, every layer sparse, MQA 3/1 with head_dim 16 != 48/3, "
        "attention_bias (q/k/v/o biases), no sliding window; fused layout.",
    ),
    dict(
        name="ernie4_5_moe_hub",
        family="ernie4_5_moe",
        tokenizer="bytelevel_bpe",
        seed=16161,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, moe_num_experts=8, moe_k=2,
            moe_num_shared_experts=1, moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=1,
            max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=395, pad_token_id=395,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="ERNIE-4.5-MoE: RoPE on interleaved pairs, GQA 4/2 heads of 16, softmax router + random "
        "e_score_correction_bias added to the probabilities for choosing only (hub name mlp.moe_statics.*, [1, E]), "
        "8 experts top-2 renormalised, one ungated shared expert, layer 0 dense (moe_layer_start_index 1); "
        "hub per-expert layout.",
    ),
    dict(
        name="ernie4_5_moe_tied_interval",
        family="ernie4_5_moe",
        tokenizer="bytelevel_bpe",
        seed=17171,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=40, moe_intermediate_size=24, num_hidden_layers=4,
            num_attention_heads=6, num_key_value_heads=2, head_dim=8, moe_num_experts=6, moe_k=3,
            moe_num_shared_experts=0, moe_layer_start_index=0, moe_layer_end_index=2, moe_layer_interval=2,
            max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=395, pad_token_id=395,
            tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="ERNIE-4.5-MoE with MoE layers by interval 2 between 0 and 2 (only layer 1 sparse; 0, 2, 3 dense), "
        "no shared experts, 6 experts top-3, GQA 6/2 heads of 8, rope_theta 500000, tied embeddings; fused layout "
        "(mlp.gate.moe_statics.e_score_correction_bias).",
    ),
    dict(
        name="hunyuan_moe_alpha",
        family="hunyuan_v1_moe",
        tokenizer="bytelevel_bpe",
        seed=18181,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=64, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_experts=8, moe_topk=2, max_position_embeddings=4096,
            rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=395, pad_token_id=395, tie_word_embeddings=False,
            rope_parameters={"rope_type": "dynamic", "alpha": 50.0, "factor": 1.0, "rope_theta": 10000.0},
        ),
        layout="per_expert", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Hunyuan-MoE as transformers ports it: per-head q/k RMSNorm (query_layernorm / key_layernorm) AFTER RoPE, "
        "GQA 4/2 heads of 16, router mlp.gate.wg (softmax, top-2 of 8 renormalised), ungated shared MLP "
        "(mlp.shared_mlp, intermediate_size 16 like the experts) in every layer, RoPE 'dynamic' with alpha 50 "
        "(NTK-alpha: base 10000 * 50^(16/14)); hub per-expert layout.",
    ),
    dict(
        name="hunyuan_moe_tied_bias",
        family="hunyuan_v1_moe",
        tokenizer="bytelevel_bpe",
        seed=19191,
        T=16,
        config=dict(
            vocab_size=400, hidden_size=48, intermediate_size=24, num_hidden_layers=3, num_attention_heads=6,
            num_key_value_heads=1, head_dim=8, num_experts=6, moe_topk=3, attention_bias=True,
            max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=395, pad_token_id=395,
            tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="fused", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Hunyuan-MoE with q/k/v/o biases (attention_bias), MQA 6/1 heads of 8, 6 experts top-3, plain RoPE, "
        "tied embeddings; fused layout.",
    ),
]

# Llama-4 (tools/llama4_fixtures.py)
FIXTURES += llama4_fixtures.FIXTURES

# design constants
DELTA = 0.9  # router logit spacing (absolute, before the rms(h)/rms(e) rescale)
F_ROUTER = 0.25  # fraction of embedding energy inside the router subspace
LEAK = 0.05  # fraction of each residual branch output left inside the router subspace
BRANCH_TOTAL = 0.8  # rough relative size of all residual branch outputs together (per branch: / sqrt(2 * layers))
A_LM = 8.0  # designed top logit
BG_LM = 0.5  # std of the random lm_head background logits
ROUTER_MIN_REL = 0.08  # asserted: min over tokens/layers/i<=k of (l_i - l_{i+1}) / max|l|
GREEDY_MIN_REL = 0.05  # asserted: min over greedy steps of (top1 - top2) / max|logit|
MAX_ATTEMPTS = 20


SPARSEMIXER_MIN_MASK = 0.03  # asserted (Phi-MoE): min |(m - s) / max(|s|, m) - 2 eps| over the sparsemixer steps


def router_min_rel(spec):
    """The relative router margin a fixture must keep: sigmoid routers (GLM-4.5) choose on scores in
    (0, 1) + a small bias, where max|key| ~ 1 and an absolute gap of 0.04 is far beyond rounding."""
    return 0.04 if spec["family"] in SIGMOID_FAMILIES + BIASED_SOFTMAX_FAMILIES else ROUTER_MIN_REL


def moe_block(layer):
    """The layer's MoE (or dense MLP) module: `block_sparse_moe` (Granite), `feed_forward` (Llama-4) or `mlp`."""
    return getattr(layer, "block_sparse_moe", None) or getattr(layer, "feed_forward", None) or layer.mlp


def router_of(block):
    """The router module of a MoE block: `gate` (most families) or `router` (Granite)."""
    return block.gate if hasattr(block, "gate") else block.router


def router_weight(router):
    """The router's [E, H] weight: `weight`, or Hunyuan's `wg.weight`."""
    return router.wg.weight if hasattr(router, "wg") else router.weight


def moe_layers(model):
    return [i for i, layer in enumerate(model.model.layers) if hasattr(moe_block(layer), "experts")]


def special_ids(spec):
    if spec["tokenizer"] == "sp_bpe":
        return set(SP_IDS.values())
    return set(BL_IDS.values())


def normal_ids(spec):
    V = spec["config"]["vocab_size"]
    n_tok = 400
    sp = special_ids(spec)
    return [i for i in range(min(V, n_tok)) if i not in sp]


def sparsemixer_ladder(rng):
    """The three best router logits of a token for Phi-MoE's sparsemixer at 2 * jitter_eps = 0.6: a ratio
    r = (m - s) / m below 0.6 keeps s in that step's softmax. Pattern A keeps the second expert in the first
    step (r2 ~ 0.38) and the third in the second (r3' ~ 0.5; r3 ~ 0.69 > 0.6 in the first); B keeps the second in
    the first step only (r3' ~ 0.8); C keeps none (r2 ~ 0.75, r3' ~ 0.95: both weights 1)."""
    t1 = rng.uniform(2.6, 3.0)
    q2, q3 = [(0.62, 0.5), (0.62, 0.2), (0.25, 0.05)][int(rng.integers(3))]
    t2 = t1 * (q2 + rng.uniform(-0.02, 0.02))
    return np.array([t1, t2, t2 * (q3 + rng.uniform(-0.02, 0.02))])


@torch.no_grad()
def design_weights(model, spec, seed):
    rng = np.random.default_rng(seed)
    cfg = model.config
    H = cfg.hidden_size
    V = cfg.vocab_size
    layers = model.model.layers
    tied = bool(cfg.tie_word_embeddings)
    emb_rms = A_LM / H if tied else 1.0
    BRANCH = BRANCH_TOTAL / math.sqrt(2 * cfg.num_hidden_layers)
    if spec["family"] == "granitemoe":  # keep each branch's share of the residual stream as designed
        BRANCH *= cfg.embedding_multiplier / cfg.residual_multiplier

    def nrm(shape, std):
        return rng.standard_normal(shape) * std

    def put(param, arr):
        param.copy_(torch.from_numpy(np.asarray(arr, dtype=np.float64)).to(param.dtype).reshape(param.shape))

    # 1. norm weights (and LayerNorm biases: Phi-MoE; Qwen3-Next stores zero-centred norms: the gain
    # is 1 + weight)
    centre = 1.0 if spec["family"] == "qwen3_next" else 0.0
    g_post = {}
    for i, layer in enumerate(layers):
        put(layer.input_layernorm.weight, 1 - centre + 0.15 * nrm(H, 1))
        if getattr(layer.input_layernorm, "bias", None) is not None:
            put(layer.input_layernorm.bias, nrm(H, 0.05))
        g = 1 + 0.15 * nrm(H, 1)
        put(layer.post_attention_layernorm.weight, g - centre)
        g_post[i] = g
        at = getattr(layer, "self_attn", None)
        for nm in ("q_norm", "k_norm", "q_a_layernorm", "kv_a_layernorm", "query_layernorm", "key_layernorm"):
            if getattr(at, nm, None) is not None:
                w = getattr(at, nm).weight
                put(w, 1 - centre + 0.15 * nrm(w.shape[0], 1))
    g_final = 1 + 0.15 * nrm(H, 1)
    put(model.model.norm.weight, g_final - centre)
    if getattr(model.model.norm, "bias", None) is not None:
        put(model.model.norm.bias, nrm(H, 0.02))

    # 2. router subspace
    moe = moe_layers(model)
    E = router_weight(router_of(moe_block(model.model.layers[moe[0]]))).shape[0]
    k = cfg.num_experts_per_tok
    W = {i: nrm((E, H), 1.0) for i in moe}
    layer_norm = getattr(layers[moe[0]].post_attention_layernorm, "bias", None) is not None
    if layer_norm:
        # LayerNorm: router rows orthogonal to the norm weight (removing the mean then leaves the
        # logits alone) and a norm bias outside the router rows (it adds nothing to them).
        for i in moe:
            g = g_post[i]
            W[i] = W[i] - np.outer(W[i] @ g, g) / (g @ g)
            b = nrm(H, 0.05)
            put(layers[i].post_attention_layernorm.bias, b - np.linalg.pinv(W[i]) @ (W[i] @ b))
    A = np.concatenate([W[i] * g_post[i][None, :] for i in moe], axis=0)  # M x H
    M = A.shape[0]
    assert M <= H * 0.75, f"router subspace {M} too large for hidden {H}"
    A_pinv = np.linalg.pinv(A)  # H x M
    P = A_pinv @ A  # projector onto row space
    Q = np.eye(H) - (1 - LEAK) * P

    # 3. attention (Qwen3-Next: Gated DeltaNet in the linear_attention layers)
    for layer in layers:
        la = getattr(layer, "linear_attn", None)
        if la is not None:
            design_deltanet(la, H, Q, BRANCH * emb_rms, nrm, put, rng)
            continue
        at = layer.self_attn
        qk_gain = 1.0 if hasattr(at, "q_norm") or hasattr(at, "query_layernorm") else 1.6
        qk_gain /= (cfg.rope_parameters or {}).get("short_mscale", 1.0)  # LongRoPE scales q and k: keep the scores
        projs = (("q_proj", qk_gain), ("k_proj", qk_gain), ("v_proj", 1.0))
        if hasattr(at, "kv_b_proj"):  # MLA: each projection's input has unit rms (x, or a normed latent)
            projs = (("q_proj", 1.6), ("q_a_proj", 1.0), ("q_b_proj", 1.6), ("kv_a_proj_with_mqa", 1.0), ("kv_b_proj", 1.6))
        for nm, gain in projs:
            lin = getattr(at, nm, None)
            if lin is None:
                continue
            fan_in = lin.weight.shape[1]
            if fan_in != H:
                gain *= math.sqrt(H / fan_in)
            put(lin.weight, nrm(tuple(lin.weight.shape), gain / math.sqrt(H)))
            if lin.bias is not None:
                put(lin.bias, nrm(tuple(lin.bias.shape), 0.1 if nm == "v_proj" else 0.3))
        o = at.o_proj
        din = o.weight.shape[1]
        put(o.weight, Q @ nrm((H, din), BRANCH * emb_rms * 1.5 / math.sqrt(din)))
        if o.bias is not None:
            put(o.bias, Q @ nrm(H, 0.05 * emb_rms))
        if hasattr(at, "sinks"):  # GPT-OSS: one logit per head in the softmax denominator
            put(at.sinks, nrm(at.sinks.shape[0], 1.0))

    # 4. MLPs / experts
    def mlp_weights(mod, scale=1.0):
        F = mod.gate_proj.weight.shape[0]
        put(mod.gate_proj.weight, nrm((F, H), 1.0 / math.sqrt(H)))
        put(mod.up_proj.weight, nrm((F, H), 1.0 / math.sqrt(H)))
        put(mod.down_proj.weight, Q @ nrm((H, F), scale * BRANCH * emb_rms * 2.0 / math.sqrt(F)))

    for i, layer in enumerate(layers):
        mlp = moe_block(layer)
        if i in moe and spec["family"] == "gpt_oss":
            gpt_oss_fixtures.design_experts(mlp.experts, nrm, put, Q, BRANCH * emb_rms * 1.5)
            put(mlp.router.bias, rng.uniform(-0.05, 0.05, mlp.router.bias.shape[0]))
        elif i in moe and spec["family"] == "llama4":  # transposed stacks; the shared expert ungated
            llama4_fixtures.design_experts(mlp.experts, nrm, put, Q, H, BRANCH * emb_rms * 2.5)
            mlp_weights(mlp.shared_expert, scale=0.8)
        elif i in moe:
            ex = mlp.experts
            Ee, twoF, _ = ex.gate_up_proj.shape
            F = twoF // 2
            put(ex.gate_up_proj, nrm((Ee, twoF, H), 1.0 / math.sqrt(H)))
            rs = getattr(cfg, "routed_scaling_factor", 1.0) or 1.0  # GLM: weights x rs; keep the branch size
            down = np.stack([Q @ nrm((H, F), BRANCH * emb_rms * 2.5 / (rs * math.sqrt(F))) for _ in range(Ee)])
            put(ex.down_proj, down)
            if hasattr(mlp, "shared_expert"):
                mlp_weights(mlp.shared_expert, scale=0.8)
                put(mlp.shared_expert_gate.weight, nrm((1, H), 1.5 / math.sqrt(H)))
            if getattr(mlp, "shared_experts", None) is not None:  # GLM-4.5: added as it is (ERNIE: may be None)
                mlp_weights(mlp.shared_experts, scale=0.3)
            if hasattr(mlp, "shared_mlp"):  # Hunyuan: added as it is
                mlp_weights(mlp.shared_mlp, scale=0.3)
            bias = getattr(router_of(mlp), "e_score_correction_bias", None)
            statics = getattr(router_of(mlp), "moe_statics", None)  # ERNIE-4.5: [1, E]
            bias = statics.e_score_correction_bias if statics is not None else bias
            if bias is not None:  # small, for choosing only: the oracle shows its effect
                put(bias, rng.uniform(-0.03, 0.03, bias.numel()))
        else:
            mlp_weights(mlp)

    # 5. embeddings with designed router ladders
    T = np.zeros((V, M))
    for v in range(V):
        for j, _ in enumerate(moe):
            t = np.empty(E)
            perm = rng.permutation(E)
            n_group = getattr(cfg, "n_group", 1) or 1
            if n_group > 1:  # the ladder inside one group, so that group wins clearly
                per = E // n_group
                g = int(rng.integers(n_group))
                inside = rng.permutation(np.arange(g * per, (g + 1) * per))
                outside = rng.permutation(np.setdiff1d(np.arange(E), inside))
                perm = np.concatenate([inside[:k], outside, inside[k:]])
            # top-k ladder with random gaps in [0.8, 1.5] units (diverse routing weights), rest in [-1.2, 0]
            t[perm[:k]] = np.cumsum(rng.uniform(0.8, 1.5, k))[::-1]
            t[perm[k:]] = rng.uniform(-1.2, 0.0, E - k)
            if getattr(cfg, "router_jitter_noise", 0.0) > 0.1:
                t[perm[:3]] = sparsemixer_ladder(rng)
            if spec["family"] in SIGMOID_FAMILIES:  # sigmoid scores: centre the ladder on the steep part
                t -= t[perm[:k]].mean()
            T[v, j * E:(j + 1) * E] = t
    X = T @ A_pinv.T  # V x H, A X^T = T^T
    Z = nrm((V, H), 1.0) @ (np.eye(H) - P)
    a = math.sqrt(F_ROUTER * H / np.mean(np.sum(X * X, axis=1)))
    b = math.sqrt((1 - F_ROUTER) * H / np.mean(np.sum(Z * Z, axis=1)))
    Emb = emb_rms * (a * X + b * Z)
    put(model.model.embed_tokens.weight, Emb)
    kappa = DELTA / a
    for i in moe:
        put(router_weight(router_of(moe_block(layers[i]))), kappa * W[i])
    if spec.get("layout") == "mxfp4":  # the hub's MXFP4 holds exactly these expert values
        gpt_oss_fixtures.round_experts_to_mxfp4(model)

    # 6. lm_head
    pi = None
    if not tied:
        normals = normal_ids(spec)
        perm = rng.permutation(normals)
        pi = np.empty(V, dtype=np.int64)
        pi[np.array(normals)] = perm
        others = [v for v in range(V) if v not in set(normals)]
        pi[others] = rng.choice(normals, size=len(others))
        C = np.zeros((V, H))
        ge = Emb * g_final[None, :]
        ge /= np.linalg.norm(ge, axis=1, keepdims=True)
        np.add.at(C, pi, ge)
        rms_g = math.sqrt(np.mean(g_final**2))
        alpha = A_LM / (math.sqrt(H) * rms_g)
        Wlm = nrm((V, H), BG_LM / (math.sqrt(H) * rms_g)) + alpha * C
        put(model.lm_head.weight, Wlm)
    else:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if getattr(model.lm_head, "bias", None) is not None:
        put(model.lm_head.bias, nrm(V, 0.3))
    return {"router_subspace_dim": int(M), "kappa": float(kappa), "embedding_rms": float(np.sqrt(np.mean(Emb**2)))}


def design_deltanet(la, H, Q, branch, nrm, put, rng):
    """Gated DeltaNet weights: projections at unit gain, a conv that mixes a few steps, decays
    exp(g) with g = -A * softplus(a + dt_bias) mostly in [-0.15, -0.003] (the state reaches across
    the chunk of 64), the output projection inside Q (off the router subspace)."""
    for lin in (la.in_proj_qkvz, la.in_proj_ba):
        put(lin.weight, nrm(tuple(lin.weight.shape), 1.0 / math.sqrt(H)))
    put(la.conv1d.weight, nrm(tuple(la.conv1d.weight.shape), 0.6))
    put(la.A_log, np.log(rng.uniform(0.02, 0.3, la.A_log.shape[0])))
    put(la.dt_bias, rng.uniform(-2.0, -0.5, la.dt_bias.shape[0]))
    put(la.norm.weight, 1 + 0.15 * nrm(la.norm.weight.shape[0], 1))
    din = la.out_proj.weight.shape[1]
    put(la.out_proj.weight, Q @ nrm((H, din), branch * 1.5 / math.sqrt(din)))


# --------------------------------------------------------------------------------------
# Running transformers
# --------------------------------------------------------------------------------------
class RouterRecorder:
    def __init__(self, model):
        self.layers = moe_layers(model)
        self.n_layers = len(model.model.layers)
        self.records = {}
        self.handles = []
        for i in self.layers:
            self.handles.append(router_of(moe_block(model.model.layers[i])).register_forward_hook(self._hook(i)))

    def _hook(self, i):
        def fn(mod, inp, out):
            logits, scores, idx = llama4_fixtures.router_record(mod, out) if len(out) == 2 else out
            scores, idx = scores.detach().float().clone(), idx.detach().clone()
            order = torch.sort(scores, dim=-1, descending=True, stable=True).indices  # by weight (GLM: unsorted topk)
            scores, idx = scores.gather(-1, order), idx.gather(-1, order)
            self.records[i] = (choice_keys(mod, logits.detach().float().clone()), scores, idx)

        return fn

    def reset(self):
        self.records = {}

    def remove(self):
        for h in self.handles:
            h.remove()


def choice_keys(router, logits: torch.Tensor) -> torch.Tensor:
    """What a router's top-k is taken over: the logits (softmax routers: same order), or for the
    sigmoid routers sigmoid(logits) + e_score_correction_bias, with the losing groups' experts put
    at (the k-th best winning key - the group margin): the margin at position k then also covers
    the choice of groups."""
    statics = getattr(router, "moe_statics", None)
    if statics is not None:  # ERNIE-4.5: softmax probabilities + the bias
        return logits.softmax(-1) + statics.e_score_correction_bias.float().reshape(-1)
    bias = getattr(router, "e_score_correction_bias", None)
    if bias is None:
        return logits
    keys = logits.sigmoid() + bias.float()
    g = getattr(router, "num_group", 1) or 1
    if g > 1:
        per = keys.shape[-1] // g
        gs = keys.view(-1, g, per).topk(2, dim=-1)[0].sum(-1)  # [T, g]
        sg, _ = torch.sort(gs, dim=-1, descending=True)
        tg = router.topk_group
        win = gs >= sg[:, tg - 1:tg]
        # a losing group's experts rank below every winner by exactly the group margin
        gap = (sg[:, tg - 1] - sg[:, tg]).clamp_min(0)
        winners = keys.masked_fill(~win.repeat_interleave(per, -1), float("-inf"))
        floor = winners.topk(router.top_k, dim=-1)[0][:, -1] - gap
        keys = torch.where(win.repeat_interleave(per, -1), keys, floor[:, None] - 1e-9 * torch.arange(keys.shape[-1]))
    return keys


def router_margin(logits: torch.Tensor, k: int) -> tuple[float, float]:
    """min over tokens and i in 1..k of (l_i - l_{i+1}) relative to max|l| of that token, and absolute."""
    s, _ = torch.sort(logits.double(), dim=-1, descending=True)
    gaps = s[:, :k] - s[:, 1:k + 1]
    scale = logits.double().abs().max(dim=-1, keepdim=True).values.clamp_min(1e-12)
    return float((gaps / scale).min()), float(gaps.min())


def sparsemixer_mask_margin(logits: torch.Tensor, eps: float) -> float:
    """Phi-MoE: min over tokens, both sparsemixer steps and the experts left of |(m - s) / max(|s|, m) - 2 eps|,
    the distance of every jitter-mask decision from its threshold (ratio units)."""
    lg = logits.double()
    worst = math.inf
    first = lg.argmax(-1, keepdim=True)
    for taken in (None, first):
        left = lg if taken is None else lg.scatter(-1, taken, float("-inf"))
        m = left.max(-1, keepdim=True).values
        ratio = (m - lg) / lg.abs().clamp(min=m)
        free = torch.isfinite(left) & (left < m)
        worst = min(worst, float((ratio - 2 * eps).abs()[free].min()))
    return worst


def greedy_margin(logits: torch.Tensor) -> tuple[float, float]:
    top2 = torch.topk(logits.double(), 2, dim=-1).values
    gaps = top2[:, 0] - top2[:, 1]
    scale = logits.double().abs().max(dim=-1).values
    return float((gaps / scale).min()), float(gaps.min())


def mask_margin(model, logits) -> float:
    """The sparsemixer mask margin scaled so ROUTER_MIN_REL applies (Phi-MoE), else inf."""
    if model.config.model_type != "phimoe":
        return math.inf
    return sparsemixer_mask_margin(logits, model.config.router_jitter_noise) * ROUTER_MIN_REL / SPARSEMIXER_MIN_MASK


@torch.no_grad()
def run_variant(model, input_ids, prompt, n_new=32):
    """Teacher-forced logits + routing over input_ids, greedy generation, margins."""
    k = model.config.num_experts_per_tok
    rec = RouterRecorder(model)
    try:
        ids = torch.tensor([input_ids], dtype=torch.long)
        out = model(input_ids=ids, use_cache=False)
        logits = out.logits[0].float().clone()
        routing, weights = [], []
        r_rel, r_abs = math.inf, math.inf
        for i in range(rec.n_layers):
            if i not in rec.records:
                routing.append(None)
                weights.append(None)
                continue
            lg, sc, ix = rec.records[i]
            routing.append(ix.tolist())
            weights.append([[float(x) for x in row] for row in sc.tolist()])
            rr, ra = router_margin(lg, k)
            r_rel, r_abs = min(r_rel, rr, mask_margin(model, lg)), min(r_abs, ra)
        # greedy
        rec.reset()
        p = torch.tensor([prompt], dtype=torch.long)
        saved_gc = model.generation_config
        model.generation_config = GenerationConfig(pad_token_id=0)  # no eos, no sampling defaults
        gen = model.generate(
            input_ids=p,
            attention_mask=torch.ones_like(p),
            do_sample=False,
            max_new_tokens=n_new,
            min_new_tokens=n_new,
            eos_token_id=None,
            pad_token_id=0,
            num_beams=1,
            temperature=None,
            top_k=None,
            top_p=None,
            repetition_penalty=None,
        )
        model.generation_config = saved_gc
        new = gen[0, len(prompt):].tolist()
        assert len(new) == n_new, len(new)
        # teacher-forced pass over prompt+generated: greedy consistency + margins. LongRoPE chooses its factors by
        # a call's length, so there each step is checked against a forward over its own prefix (what generate()
        # computes: it re-encodes the whole sequence when it first crosses original_max_position_embeddings).
        longrope = (model.config.rope_parameters or {}).get("rope_type") == "longrope"
        passes = [prompt + new[:j] for j in range(n_new)] if longrope else [prompt + new]
        rows = []
        for seq in passes:
            rec.reset()
            out2 = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False)
            rows.append(out2.logits[0, -1:] if longrope else out2.logits[0, len(prompt) - 1: len(prompt) - 1 + n_new])
            for i in rec.layers:
                rr, ra = router_margin(rec.records[i][0], k)
                r_rel, r_abs = min(r_rel, rr, mask_margin(model, rec.records[i][0])), min(r_abs, ra)
        lg2 = torch.cat(rows).float()
        argmax = lg2.argmax(-1).tolist()
        assert argmax == new, f"generate() != argmax of the forward over each step's prefix: {new} vs {argmax}"
        g_rel, g_abs = greedy_margin(lg2)
    finally:
        rec.remove()
    return dict(logits=logits, routing=routing, weights=weights, greedy=new, r_rel=r_rel, r_abs=r_abs, g_rel=g_rel, g_abs=g_abs)


@torch.no_grad()
def phimoe_extras(model, spec, input_ids, logits, od: Path) -> dict:
    """Phi-MoE: how far stock transformers (short factors only) is from the oracle's LongRoPE on input_ids, and
    with spec["incremental_oracle"] transformers' logits of input_ids fed one token at a time through the cache
    (oracle/logits_incremental_f32.npy): rows past original_max_position_embeddings differ from the one-call
    logits, since cached keys keep the factor set they were computed with."""
    ids = torch.tensor([input_ids], dtype=torch.long)
    modeling_phimoe.PhimoeRotaryEmbedding.forward = STOCK_PHIMOE_ROPE
    try:
        stock = model(input_ids=ids, use_cache=False).logits[0].float()
    finally:
        modeling_phimoe.PhimoeRotaryEmbedding.forward = phimoe_rope_forward
    scale = float(logits.abs().max())
    out = {"stock_transformers_rel_diff": float((stock - logits).abs().max()) / scale,
           "rope_note": "oracle = transformers with phimoe_rope_forward (tools/make_fixtures.py): the LongRoPE set is "
           "chosen per call by max(position_ids) + 1 > original_max_position_embeddings; stock_transformers_rel_diff = "
           "max|stock 5.x - oracle| / max|oracle| on input_ids (stock never uses long_factor)"}
    if not spec.get("incremental_oracle"):
        return out
    cache = transformers.DynamicCache(config=model.config)
    rows = [model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1].float() for t in input_ids]
    inc = torch.stack(rows)
    np.save(od / "logits_incremental_f32.npy", inc.numpy().astype(np.float32))
    diff = (inc - logits).abs().max(-1).values / scale
    # Row 0 attends to itself only (its value whatever the rotation); every later row differs from the one-call
    # logits, which used the long set for all rows.
    assert float(diff[0]) < 1e-5 and float(diff[1:].min()) > 1e-3, diff
    out["incremental_rel_diff_per_row"] = [float(x) for x in diff]
    out["logits_incremental_f32"] = ("float32 [T, V]: input_ids fed one token at a time through a DynamicCache: rows "
                                     "< original_max_position_embeddings use the short set, later rows the long set "
                                     "over keys cached with the short one; logits_f32 (one call past the original "
                                     "context) used the long set for every row")
    return out


def rounded_copy(model, dtype):
    """Every weight rounded to `dtype`, except those transformers keeps in f32 when it loads the
    model in that dtype (`_keep_in_fp32_modules_strict`: GLM-4.5's router gate.weight)."""
    m = copy.deepcopy(model)
    keep = getattr(m, "_keep_in_fp32_modules_strict", None) or []
    with torch.no_grad():
        for name, p in m.named_parameters():
            if not any(k in name for k in keep):
                p.copy_(p.to(dtype).to(torch.float32))
    return m


# --------------------------------------------------------------------------------------
# Independent float64 numpy re-implementation, reading ONLY the files in the fixture dir
# (config.json in either style + safetensors in either layout).  Used as a self-check that
# the oracle matches the semantics documented in tests/fixtures/README.md.
# --------------------------------------------------------------------------------------
def _np_rms(x, g, eps):
    return g * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def _np_silu(x):
    return x / (1 + np.exp(-x))


def _np_rope(c, hd, T):
    rp = dict(c.get("rope_parameters") or {})
    theta = rp.get("rope_theta", c.get("rope_theta"))
    sc = c.get("rope_scaling") or (rp if rp.get("rope_type", "default") != "default" else None)
    hd = int(hd * rp.get("partial_rotary_factor", 1.0))  # the rotated leading dims (GLM-4.5: a part)
    if rp.get("alpha"):  # Hunyuan's NTK-alpha: a fixed larger base
        theta, sc = theta * rp["alpha"] ** (hd / (hd - 2)), None
    inv = 1.0 / (theta ** (np.arange(0, hd, 2) / hd))
    att = 1.0
    if sc and sc.get("rope_type", sc.get("type")) == "longrope":  # the set chosen by this call's length
        om = c.get("original_max_position_embeddings") or sc["original_max_position_embeddings"]
        long = T > om
        inv = inv / np.array(sc["long_factor" if long else "short_factor"])
        att = sc["long_mscale" if long else "short_mscale"]
    elif sc:
        assert sc.get("rope_type", sc.get("type")) == "yarn", sc
        f, om = sc["factor"], sc["original_max_position_embeddings"]
        att = 0.1 * math.log(f) + 1.0
        if sc.get("mscale") and sc.get("mscale_all_dim"):  # DeepSeek: a ratio of two mscales
            att = (0.1 * sc["mscale"] * math.log(f) + 1.0) / (0.1 * sc["mscale_all_dim"] * math.log(f) + 1.0)

        def corr_dim(n_rot):
            return hd * math.log(om / (n_rot * 2 * math.pi)) / (2 * math.log(theta))

        lo, hi = corr_dim(sc.get("beta_fast", 32)), corr_dim(sc.get("beta_slow", 1))
        if sc.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, hd - 1)
        hi = hi + 0.001 if lo == hi else hi
        extrap = 1 - np.clip((np.arange(hd // 2) - lo) / (hi - lo), 0, 1)
        inv = (inv / f) * (1 - extrap) + inv * extrap
    ang = np.arange(T)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], -1)
    return np.cos(ang) * att, np.sin(ang) * att


def _np_norm(W, name, x, eps, off=0.0):
    """RMSNorm with gain off + weight, or LayerNorm when the checkpoint has the norm's bias (Phi-MoE)."""
    if name + ".bias" not in W:
        return _np_rms(x, off + W[name + ".weight"], eps)
    xc = x - x.mean(-1, keepdims=True)
    return W[name + ".weight"] * xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) + W[name + ".bias"]


def _np_sparsemixer(lg, eps):
    """modeling_phimoe.sparsemixer (eval): two steps, each the largest logit left with the jitter-masked softmax
    at it as its weight; returned by weight, descending (stable)."""
    T = lg.shape[0]
    top, tw = np.zeros((T, 2), dtype=np.int64), np.zeros((T, 2))
    for t in range(T):
        left = lg[t].copy()
        for j in range(2):
            e = int(np.argmax(left))
            m = left[e]
            g = np.where((m - lg[t]) / np.maximum(np.abs(lg[t]), m) > 2 * eps, -np.inf, left)
            g = np.exp(g - g.max())
            top[t, j], tw[t, j] = e, g[e] / g.sum()
            left[e] = -np.inf
    order = np.argsort(-tw, -1, kind="stable")
    return np.take_along_axis(top, order, -1), np.take_along_axis(tw, order, -1)


def _np_rot(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def _np_rope_apply(x, cos, sin, interleaved):
    """RoPE on x [T, heads, r] with tables [T, r] (cat(freqs, freqs)): rotate-half, or pairs (2i, 2i+1)."""
    if not interleaved:
        return x * cos[:, None] + _np_rot(x) * sin[:, None]
    c, s = cos[:, None, : x.shape[-1] // 2], sin[:, None, : x.shape[-1] // 2]
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
    return out


def _np_mla(c, W, p, h, T):
    """DeepSeek multi-head latent attention, expanded: q [T, nh, nope+rope], k (same), v [T, nh, v], scale."""
    nh, nope, rope, vd, rank = (c[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))

    def lin(name, inp):
        return inp @ W[p + name + ".weight"].T

    if p + "self_attn.q_a_proj.weight" in W:  # the low-rank query, its norm at transformers' default eps 1e-6
        q = lin("self_attn.q_b_proj", _np_rms(lin("self_attn.q_a_proj", h), W[p + "self_attn.q_a_layernorm.weight"], 1e-6))
    else:
        q = lin("self_attn.q_proj", h)
    q = q.reshape(T, nh, nope + rope)
    ckv = lin("self_attn.kv_a_proj_with_mqa", h)
    lat = _np_rms(ckv[:, :rank], W[p + "self_attn.kv_a_layernorm.weight"], 1e-6)
    kv = lin("self_attn.kv_b_proj", lat).reshape(T, nh, nope + vd)
    cos, sin = _np_rope(dict(c, head_dim=rope), rope, T)
    inter = c["model_type"] == "deepseek_v2" or c.get("rope_interleave", True)
    q_pe = _np_rope_apply(q[..., nope:], cos, sin, inter)
    k_pe = _np_rope_apply(ckv[:, None, rank:], cos, sin, inter)
    q = np.concatenate([q[..., :nope], q_pe], -1)
    k = np.concatenate([kv[..., :nope], np.repeat(k_pe, nh, 1)], -1)
    scale = (nope + rope) ** -0.5
    rp = c.get("rope_scaling") or c.get("rope_parameters") or {}
    if rp.get("rope_type", rp.get("type", "default")) != "default" and rp.get("mscale_all_dim"):
        m = 0.1 * rp["mscale_all_dim"] * math.log(rp["factor"]) + 1.0
        scale *= m * m
    return q, k, kv[..., nope:], scale


def independent_forward(d: Path, ids):
    c = json.loads((d / "config.json").read_text())
    W = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for key in fh.keys():
                W[key] = fh.get_tensor(key).double().numpy()
    fam = c["model_type"]
    if fam == "gpt_oss":
        return gpt_oss_fixtures.np_forward(d, ids, _np_rms, _np_rope, _np_rot)
    if fam == "llama4_text":
        return llama4_fixtures.np_forward(d, ids)
    nxt = fam == "qwen3_next"
    off = 1.0 if nxt else 0.0  # Qwen3-Next's zero-centred norms: gain 1 + w
    H, nh, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or H // nh
    eps, T = c["rms_norm_eps"], len(ids)
    k = c.get("num_experts_per_tok") or c.get("moe_k") or c["moe_topk"]  # ERNIE-4.5: moe_k; Hunyuan: moe_topk
    cos, sin = _np_rope(c, hd, T)
    sw = c.get("sliding_window") if (fam == "mixtral" or c.get("use_sliding_window")) else None
    granite = fam == "granitemoe"
    res_mult = c.get("residual_multiplier", 1.0) if granite else 1.0
    att_scale = c.get("attention_multiplier", 1.0) if granite else 1 / math.sqrt(hd)
    x = W["model.embed_tokens.weight"][ids] * (c.get("embedding_multiplier", 1.0) if granite else 1.0)
    routing = []
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."

        def lin(name, inp):
            y = inp @ W[p + name + ".weight"].T
            return y + W[p + name + ".bias"] if p + name + ".bias" in W else y

        h = _np_norm(W, p + "input_layernorm", x, eps, off)
        if nxt and c["layer_types"][L] == "linear_attention":  # Qwen3-Next's Gated DeltaNet
            x = x + _np_deltanet(c, W, p, h, eps)
            h = _np_norm(W, p + "post_attention_layernorm", x, eps, off)
            x, rt = _np_ffn(c, W, p, fam, h, x, T, k, granite, res_mult)
            routing.append(rt)
            continue
        if p + "self_attn.kv_b_proj.weight" in W:  # DeepSeek MLA (expanded, as transformers computes it)
            q, kk, v, att_scale = _np_mla(c, W, p, h, T)
            nkv, cos, sin = nh, np.zeros((T, 0)), np.zeros((T, 0))  # RoPE already applied
        else:
            q, kk, v = lin("self_attn.q_proj", h), lin("self_attn.k_proj", h), lin("self_attn.v_proj", h)
        if nxt:  # q_proj holds [query, gate] per head
            q, gate = q.reshape(T, nh, 2 * hd)[..., :hd], q.reshape(T, nh, 2 * hd)[..., hd:].reshape(T, nh * hd)
        if fam == "olmoe":  # RMSNorm over the whole projection, before the head split
            q = _np_rms(q, W[p + "self_attn.q_norm.weight"], eps)
            kk = _np_rms(kk, W[p + "self_attn.k_norm.weight"], eps)
        q, kk, v = q.reshape(T, nh, -1), kk.reshape(T, nkv, -1), v.reshape(T, nkv, -1)
        if fam in ("qwen3_moe", "glm4_moe", "qwen3_next", "dots1") and p + "self_attn.q_norm.weight" in W:  # per head
            q = _np_rms(q, off + W[p + "self_attn.q_norm.weight"], eps)
            kk = _np_rms(kk, off + W[p + "self_attn.k_norm.weight"], eps)
        r = cos.shape[-1]  # rotate the leading r dims of each head, pass the rest
        il = fam == "ernie4_5_moe"  # ERNIE-4.5: interleaved pairs
        q = np.concatenate([_np_rope_apply(q[..., :r], cos, sin, il), q[..., r:]], -1)
        kk = np.concatenate([_np_rope_apply(kk[..., :r], cos, sin, il), kk[..., r:]], -1)
        if fam == "hunyuan_v1_moe":  # per-head q/k norm after RoPE
            q = _np_rms(q, W[p + "self_attn.query_layernorm.weight"], eps)
            kk = _np_rms(kk, W[p + "self_attn.key_layernorm.weight"], eps)
        kk, v = np.repeat(kk, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
        sc = np.einsum("qhd,khd->hqk", q, kk) * att_scale
        qi, kj = np.arange(T)[:, None], np.arange(T)[None, :]
        mask = kj <= qi
        if fam == "dots1" and c["layer_types"][L] == "sliding_attention":
            mask &= kj > qi - c["sliding_window"]
        elif sw:
            mask &= kj > qi - sw
        sc = np.where(mask[None], sc, -np.inf)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        att = np.einsum("hqk,khd->qhd", sc, v).reshape(T, -1)
        if nxt:  # output gate
            att = att / (1 + np.exp(-gate))
        x = x + res_mult * lin("self_attn.o_proj", att)
        h = _np_norm(W, p + "post_attention_layernorm", x, eps, off)
        x, rt = _np_ffn(c, W, p, fam, h, x, T, k, granite, res_mult)
        routing.append(rt)
    x = _np_norm(W, "model.norm", x, eps, off)
    lm = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    logits = x @ lm.T + W.get("lm_head.bias", 0.0)
    return logits / (c.get("logits_scaling", 1.0) if granite else 1.0), routing



def _np_deltanet(c, W, p, h, eps):
    """Qwen3-Next's Gated DeltaNet in its recurrent form, float64, from the grouped projections."""
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    r, T, la = nv // nk, h.shape[0], p + "linear_attn."
    qkvz = (h @ W[la + "in_proj_qkvz.weight"].T).reshape(T, nk, 2 * dk + 2 * r * dv)
    ba = (h @ W[la + "in_proj_ba.weight"].T).reshape(T, nk, 2 * r)
    z = qkvz[..., 2 * dk + r * dv:].reshape(T, nv, dv)
    b, a = ba[..., :r].reshape(T, nv), ba[..., r:].reshape(T, nv)
    mixed = np.concatenate([qkvz[..., :dk].reshape(T, -1), qkvz[..., dk:2 * dk].reshape(T, -1),
                            qkvz[..., 2 * dk:2 * dk + r * dv].reshape(T, -1)], -1)
    w = W[la + "conv1d.weight"][:, 0, :]  # [C, K]
    pad = np.concatenate([np.zeros((K - 1, mixed.shape[1])), mixed], 0)
    conv = _np_silu(np.stack([(pad[t:t + K] * w.T).sum(0) for t in range(T)]))
    kd = nk * dk

    def l2(u):
        return u / np.sqrt((u * u).sum(-1, keepdims=True) + 1e-6)

    q = np.repeat(l2(conv[:, :kd].reshape(T, nk, dk)), r, 1) / math.sqrt(dk)
    kk = np.repeat(l2(conv[:, kd:2 * kd].reshape(T, nk, dk)), r, 1)
    v = conv[:, 2 * kd:].reshape(T, nv, dv)
    beta = 1 / (1 + np.exp(-b))
    g = -np.exp(W[la + "A_log"]) * np.log1p(np.exp(a + W[la + "dt_bias"]))
    S, o = np.zeros((nv, dk, dv)), np.zeros((T, nv, dv))
    for t in range(T):
        S = S * np.exp(g[t])[:, None, None]
        delta = (v[t] - np.einsum("hkv,hk->hv", S, kk[t])) * beta[t][:, None]
        S = S + kk[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, q[t])
    o = W[la + "norm.weight"] * (o / np.sqrt((o * o).mean(-1, keepdims=True) + eps)) * _np_silu(z)
    return o.reshape(T, nv * dv) @ W[la + "out_proj.weight"].T


def _np_ffn(c, W, p, fam, h, x, T, k, granite, res_mult):
    """The dense MLP or MoE block of one layer on normed h: (x + its output, the layer's routing)."""
    hub_moe = fam in ("mixtral", "granitemoe") or (fam == "phimoe" and p + "block_sparse_moe.gate.weight" in W)
    pre = p + ("block_sparse_moe." if hub_moe else "mlp.")
    router = next((pre + r for r in ("gate.weight", "router.weight", "router.layer.weight", "gate.wg.weight") if pre + r in W), None)
    if granite and pre + "input_linear.weight" in W:  # Granite hub names of the fused stacks
        W[pre + "experts.gate_up_proj"] = W[pre + "input_linear.weight"]
        W[pre + "experts.down_proj"] = W[pre + "output_linear.weight"]
    if router is None:  # dense layer
        return x + (_np_silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T, None
    lg = h @ W[router].T
    if fam == "phimoe":
        top, tw = _np_sparsemixer(lg, c.get("router_jitter_noise", 0.01))
    elif fam in SIGMOID_FAMILIES:  # sigmoid scores; choose by score + bias within the best groups
        pr = 1 / (1 + np.exp(-lg))
        keys = pr + W[pre + "gate.e_score_correction_bias"]
        g = c.get("n_group", 1)
        if g > 1:
            per = keys.shape[-1] // g
            gs = np.sort(keys.reshape(T, g, per), -1)[..., -2:].sum(-1)
            lose = np.argsort(-gs, -1, kind="stable")[:, c["topk_group"]:]
            for t in range(T):
                for gi in lose[t]:
                    keys[t, gi * per:(gi + 1) * per] = -np.inf
        top = np.argsort(-keys, -1, kind="stable")[:, :k]
        tw = np.take_along_axis(pr, top, -1)
        order = np.argsort(-tw, -1, kind="stable")
        top, tw = np.take_along_axis(top, order, -1), np.take_along_axis(tw, order, -1)
        if c.get("norm_topk_prob"):
            tw = tw / (tw.sum(-1, keepdims=True) + 1e-20)
        tw = tw * c.get("routed_scaling_factor", 1.0)
    else:
        pr = np.exp(lg - lg.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        keys = pr.copy()
        for name in ("moe_statics.e_score_correction_bias", "gate.moe_statics.e_score_correction_bias"):
            if pre + name in W:  # ERNIE-4.5: choose by probability + bias
                keys = keys + W[pre + name].reshape(-1)
        if c.get("topk_method") == "group_limited_greedy":  # DeepSeek-V2: groups scored by their best
            g = c["n_group"]
            gs = keys.reshape(T, g, -1).max(-1)
            lose = np.argsort(-gs, -1, kind="stable")[:, c["topk_group"]:]
            for t in range(T):
                for gi in lose[t]:
                    keys[t, gi * (keys.shape[-1] // g):(gi + 1) * (keys.shape[-1] // g)] = -np.inf
        top = np.argsort(-keys, -1, kind="stable")[:, :k]
        tw = np.take_along_axis(pr, top, -1)
        order = np.argsort(-tw, -1, kind="stable")  # listed by weight
        top, tw = np.take_along_axis(top, order, -1), np.take_along_axis(tw, order, -1)
        if fam == "deepseek_v2":  # never renormalised; x routed_scaling_factor
            tw = tw * c.get("routed_scaling_factor", 1.0)
    if fam in ("mixtral", "granitemoe", "ernie4_5_moe", "hunyuan_v1_moe") or (fam not in SIGMOID_FAMILIES + ("deepseek_v2",) and c.get("norm_topk_prob")):  # Granite: softmax over the top-k logits
        tw = tw / tw.sum(-1, keepdims=True)
    rt = top.tolist()
    y = np.zeros_like(x)
    for t in range(T):
        for j in range(k):
            e = top[t, j]
            if pre + "experts.gate_up_proj" in W:  # fused: [E, 2F, H] = cat(gate, up) ; down [E, H, F]
                gu = W[pre + "experts.gate_up_proj"][e]
                F = gu.shape[0] // 2
                gw, uw, dw = gu[:F], gu[F:], W[pre + "experts.down_proj"][e]
            elif fam in ("mixtral", "phimoe"):  # w1 = gate, w3 = up, w2 = down
                gw, uw, dw = (W[pre + f"experts.{e}.{n}.weight"] for n in ("w1", "w3", "w2"))
            else:
                gw, uw, dw = (W[pre + f"experts.{e}.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj"))
            y[t] += tw[t, j] * ((_np_silu(h[t] @ gw.T) * (h[t] @ uw.T)) @ dw.T)
    if pre + "shared_expert_gate.weight" in W:
        se = (_np_silu(h @ W[pre + "shared_expert.gate_proj.weight"].T) * (h @ W[pre + "shared_expert.up_proj.weight"].T)) @ W[pre + "shared_expert.down_proj.weight"].T
        y += se / (1 + np.exp(-(h @ W[pre + "shared_expert_gate.weight"].T)))
    if pre + "shared_mlp.gate_proj.weight" in W:  # Hunyuan: ungated
        y += (_np_silu(h @ W[pre + "shared_mlp.gate_proj.weight"].T) * (h @ W[pre + "shared_mlp.up_proj.weight"].T)) @ W[pre + "shared_mlp.down_proj.weight"].T
    if pre + "shared_experts.gate_proj.weight" in W:  # GLM-4.5: ungated
        y += (_np_silu(h @ W[pre + "shared_experts.gate_proj.weight"].T) * (h @ W[pre + "shared_experts.up_proj.weight"].T)) @ W[pre + "shared_experts.down_proj.weight"].T
    return x + res_mult * y, rt


# --------------------------------------------------------------------------------------
# Writing checkpoints
# --------------------------------------------------------------------------------------
def legacy_config(cfg_json: dict, spec) -> dict:
    """Rewrite a transformers-5 config.json into the transformers-4 hub style."""
    c = dict(cfg_json)
    rp = c.pop("rope_parameters", None) or {}
    rp = dict(rp)
    c["rope_theta"] = rp.pop("rope_theta")
    rp.pop("rope_type", None) if rp.get("rope_type") == "default" else None
    if rp and spec["family"] == "phimoe":  # Phi-3.5-MoE's hub file: {"type": "longrope", ...}
        rp["type"] = rp.pop("rope_type")
    if rp:
        c["rope_scaling"] = rp
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    if spec["family"] == "mixtral" and c.get("head_dim", 0) is None:
        c.pop("head_dim")
    if spec["family"] == "qwen2_moe":
        c.pop("layer_types", None)
    if spec["family"] == "qwen3_moe" and "num_local_experts" in c:
        c["num_experts"] = c.pop("num_local_experts")
    c.update(spec.get("legacy_extra", {}))
    c["transformers_version"] = "4.40.0"
    return dict(sorted(c.items()))


def tokenizer_config(spec, chat_in_config: str | None) -> dict:
    if spec["tokenizer"] == "sp_bpe":
        added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
                 for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))}
        tc = {
            "add_bos_token": True,
            "add_eos_token": False,
            "added_tokens_decoder": added,
            "bos_token": "<s>",
            "clean_up_tokenization_spaces": False,
            "eos_token": "</s>",
            "legacy": True,
            "model_max_length": 1000000000000000019884624838656,
            "pad_token": None,
            "sp_model_kwargs": {},
            "spaces_between_special_tokens": False,
            "tokenizer_class": "LlamaTokenizer",
            "unk_token": "<unk>",
            "use_default_system_prompt": False,
        }
    else:
        added = {str(BL_BPE_VOCAB + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": s}
                 for i, (t, s) in enumerate(BL_ADDED)}
        fam = spec["family"]
        if fam == "olmoe":
            tc = {
                "add_bos_token": False,
                "add_eos_token": False,
                "added_tokens_decoder": added,
                "bos_token": "<|endoftext|>",
                "clean_up_tokenization_spaces": True,
                "eos_token": "<|endoftext|>",
                "model_max_length": 4096,
                "pad_token": "<|endoftext|>",
                "tokenizer_class": "GPTNeoXTokenizer",
                "unk_token": None,
            }
        else:
            tc = {
                "add_prefix_space": False,
                "added_tokens_decoder": added,
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                "bos_token": None,
                "clean_up_tokenization_spaces": False,
                "eos_token": "<|im_end|>" if fam == "qwen3_moe" else "<|endoftext|>",
                "errors": "replace",
                "model_max_length": 32768,
                "pad_token": "<|endoftext|>",
                "split_special_tokens": False,
                "tokenizer_class": "Qwen2Tokenizer",
                "unk_token": None,
            }
    if chat_in_config is not None:
        tc["chat_template"] = chat_in_config
    return tc


def generation_config(spec) -> dict:
    c = spec["config"]
    g = {"_from_model_config": False, "transformers_version": transformers.__version__}
    if c.get("bos_token_id") is not None:
        g["bos_token_id"] = c["bos_token_id"]
    g["eos_token_id"] = spec.get("gen_eos", c.get("eos_token_id"))
    if spec["family"] in ("qwen2_moe", "qwen3_moe"):
        g.update({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "pad_token_id": 395})
    if spec["family"] == "olmoe":
        g["pad_token_id"] = 395
    return dict(sorted(g.items()))


def st_listing(d: Path) -> list:
    rows = []
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for key in sorted(fh.keys()):
                sl = fh.get_slice(key)
                rows.append([key, list(sl.get_shape()), sl.get_dtype(), f.name])
    return rows


def write_checkpoint(model, spec, out: Path, tok_text: str):
    dtype = torch.bfloat16 if spec["dtype"] == "bfloat16" else torch.float32
    m = model.to(dtype) if dtype != torch.float32 else model
    m.generation_config = GenerationConfig(**{k: v for k, v in generation_config(spec).items() if k not in ("_from_model_config", "transformers_version")})
    kwargs = {}
    if spec["sharded"]:
        total = sum(p.numel() * p.element_size() for p in m.state_dict().values())
        kwargs["max_shard_size"] = int(total * 0.6)
    if spec["layout"] == "fused":
        kwargs["save_original_format"] = False
    m.save_pretrained(str(out), **kwargs)
    if spec["layout"] == "mxfp4":
        gpt_oss_fixtures.write_mxfp4(m, out)
    if dtype != torch.float32:
        model.to(torch.float32)
    # generation_config.json exactly as we want it
    write_json(out / "generation_config.json", generation_config(spec), indent=2)
    cfg_path = out / "config.json"
    cfg_json = json.loads(cfg_path.read_text())
    cfg_json.pop("_experts_implementation", None)
    if spec["config_style"] == "legacy_hub":
        cfg_json = legacy_config(cfg_json, spec)
    write_json(cfg_path, cfg_json, indent=2)
    # tokenizer files
    (out / "tokenizer.json").write_text(tok_text + "\n", encoding="utf-8")
    chat = spec.get("chat")
    in_cfg = chat[1] if chat and chat[0] == "tokenizer_config" else None
    write_json(out / "tokenizer_config.json", tokenizer_config(spec, in_cfg), indent=2)
    if chat and chat[0] == "jinja_file":
        (out / "chat_template.jinja").write_text(chat[1], encoding="utf-8")
    # sanity: files present
    names = sorted(p.name for p in out.iterdir())
    if spec["sharded"]:
        assert "model.safetensors.index.json" in names and "model-00001-of-00002.safetensors" in names and "model-00002-of-00002.safetensors" in names, names
    else:
        assert "model.safetensors" in names, names


def add_mtp_layer(out: Path, cfg, seed):
    """Append the tensors of one DeepSeek-V3 multi-token-prediction layer (model.layers.{num_hidden_layers}.*, as the
    hub checkpoints carry them) to model.safetensors: transformers does not load them, nor may a converter."""
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(seed)
    H, L = cfg.hidden_size, cfg.num_hidden_layers
    p = f"model.layers.{L}."
    extra = {
        p + "enorm.weight": torch.ones(H),
        p + "hnorm.weight": torch.ones(H),
        p + "eh_proj.weight": torch.randn(H, 2 * H, generator=g),
        p + "input_layernorm.weight": torch.ones(H),
        p + "self_attn.kv_a_proj_with_mqa.weight": torch.randn(cfg.kv_lora_rank + cfg.qk_rope_head_dim, H, generator=g),
        p + "mlp.gate.weight": torch.randn(cfg.n_routed_experts, H, generator=g),
        p + "shared_head.norm.weight": torch.ones(H),
    }
    f = out / "model.safetensors"
    tensors = load_file(str(f))
    tensors.update(extra)
    save_file(tensors, str(f), metadata={"format": "pt"})


def load_fixture(out: Path, family: str):
    if (out / "model.safetensors").is_file() and "quantization_config" in json.loads((out / "config.json").read_text()):
        m = gpt_oss_fixtures.load_mxfp4(out, FAMILIES[family][1], FAMILIES[family][0])
        m.set_attn_implementation("eager")
        m.set_experts_implementation("eager")
        return m
    cls = FAMILIES[family][1]
    if family == "llama4":
        return llama4_fixtures.load(cls, out)
    m = cls.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    m.eval()
    return m


def chat_oracle(out: Path, spec, tok: Tokenizer) -> dict | None:
    chat = spec.get("chat")
    if not chat:
        return None
    hf = AutoTokenizer.from_pretrained(str(out))
    msgs = chat[2]
    res = {"messages": msgs, "cases": []}
    for agp in (True, False):
        txt = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp)
        res["cases"].append({"add_generation_prompt": agp, "rendered": txt, "ids": tok.encode(txt, add_special_tokens=False).ids})
    if "enable_thinking" in chat[1]:
        txt = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
        res["cases"].append({"add_generation_prompt": True, "enable_thinking": False, "rendered": txt, "ids": tok.encode(txt, add_special_tokens=False).ids})
    res["notes"] = ("rendered with transformers apply_chat_template(tokenize=False); ids = tokenizers encode(rendered, "
                    "add_special_tokens=False) with this directory's tokenizer.json")
    # how transformers' AutoTokenizer (tokenizer_class in tokenizer_config.json) tokenizes vs raw tokenizer.json
    diffs = []
    for t in COMMON_TEXTS + (SP_SPECIAL_TEXTS if spec["tokenizer"] == "sp_bpe" else BL_SPECIAL_TEXTS):
        a = hf.encode(t, add_special_tokens=False)
        b = tok.encode(t, add_special_tokens=False).ids
        if a != b:
            diffs.append({"text": t, "autotokenizer": a, "tokenizer_json": b})
    res["autotokenizer_class"] = type(hf).__name__
    res["autotokenizer_vs_tokenizer_json_diffs"] = diffs
    return res


def build_fixture(spec, tok_texts, log):
    fam = spec["family"]
    cfg_cls, model_cls = FAMILIES[fam]
    tok, tok_text = tok_texts[spec["tokenizer"]]
    out = MODEL_DIR / spec["name"]
    last_err = None
    for attempt in range(MAX_ATTEMPTS):
        seed = spec["seed"] + 1000 * attempt
        torch.manual_seed(seed)
        cfg = cfg_cls(**spec["config"])
        model = model_cls(cfg)
        model.eval()
        if model.config.tie_word_embeddings:
            model.tie_weights()
        info = design_weights(model, spec, seed)
        rng = np.random.default_rng(seed + 17)
        normals = normal_ids(spec)
        input_ids = [int(x) for x in rng.choice(normals, size=spec["T"], replace=True)]
        prompt = [int(x) for x in rng.choice(normals, size=5, replace=True)]
        # quick margin check on the in-memory model before writing anything
        model.set_attn_implementation("eager")
        if fam != "llama4":  # Llama-4's experts have one implementation
            model.set_experts_implementation("eager")
        if spec["dtype"] == "bfloat16":
            model = rounded_copy(model, torch.bfloat16)
        ref = run_variant(model, input_ids, prompt)
        r_min = router_min_rel(spec)
        if ref["r_rel"] < r_min or ref["g_rel"] < GREEDY_MIN_REL:
            last_err = f"attempt {attempt} (seed {seed}): router {ref['r_rel']:.4f} greedy {ref['g_rel']:.4f}"
            log("    retry: " + last_err)
            continue
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        write_checkpoint(model, spec, out, tok_text)
        if spec.get("mtp"):
            add_mtp_layer(out, model.config, seed)
        loaded = load_fixture(out, fam)
        # checkpoint round-trip: loaded weights == designed weights (after storage dtype rounding)
        sd_mem, sd_load = model.state_dict(), loaded.state_dict()
        assert set(sd_mem) == set(sd_load), set(sd_mem) ^ set(sd_load)
        for key in sd_mem:
            assert torch.equal(sd_mem[key].float(), sd_load[key].float()), key
        variants = {"f32": loaded, "bf16": rounded_copy(loaded, torch.bfloat16), "f16": rounded_copy(loaded, torch.float16)}
        res = {name: run_variant(m, input_ids, prompt) for name, m in variants.items()}
        assert torch.allclose(res["f32"]["logits"], ref["logits"], atol=1e-5, rtol=0), "reloaded checkpoint changed the logits"
        bad = [(n, r["r_rel"], r["g_rel"]) for n, r in res.items() if r["r_rel"] < r_min or r["g_rel"] < GREEDY_MIN_REL]
        if bad:
            last_err = f"attempt {attempt} (seed {seed}): {bad}"
            log("    retry: " + last_err)
            continue
        break
    else:
        raise SystemExit(f"{spec['name']}: could not satisfy margins: {last_err}")

    od = out / "oracle"
    od.mkdir()
    for name, r in res.items():
        np.save(od / f"logits_{name}.npy", r["logits"].numpy().astype(np.float32))
    extra = phimoe_extras(loaded, spec, input_ids, res["f32"]["logits"], od) if fam == "phimoe" else {}
    layout_note = {
        "per_expert": "hub per-expert layout written by save_pretrained (save_original_format=True, the default)",
        "fused": "fused layout: transformers-5 in-memory names, written by save_pretrained(save_original_format=False)",
        "hub": "the family's hub layout written by save_pretrained (save_original_format=True, the default)",
        "mxfp4": "save_pretrained's layout with the experts rewritten as the hub's MXFP4 *_blocks / *_scales",
    }[spec["layout"]]
    cfg_json = json.loads((out / "config.json").read_text())
    meta = {
        "family": fam,
        "name": spec["name"],
        "input_ids": input_ids,
        "greedy_prompt": prompt,
        "greedy_f32": res["f32"]["greedy"],
        "greedy_bf16": res["bf16"]["greedy"],
        "greedy_f16": res["f16"]["greedy"],
        "routing_f32": res["f32"]["routing"],
        "routing_bf16": res["bf16"]["routing"],
        "routing_f16": res["f16"]["routing"],
        "routing_weights_f32": res["f32"]["weights"],
        "routing_weights_bf16": res["bf16"]["weights"],
        "routing_weights_f16": res["f16"]["weights"],
        "moe_layers": moe_layers(loaded),
        "num_experts_per_tok": loaded.config.num_experts_per_tok,
        "min_router_margin": min(r["r_rel"] for r in res.values()),
        "min_router_margin_abs": min(r["r_abs"] for r in res.values()),
        "min_greedy_margin": min(r["g_rel"] for r in res.values()),
        "min_greedy_margin_abs": min(r["g_abs"] for r in res.values()),
        "margins_per_variant": {n: {"router_rel": r["r_rel"], "router_abs": r["r_abs"], "greedy_rel": r["g_rel"], "greedy_abs": r["g_abs"]} for n, r in res.items()},
        "margin_definitions": {
            "router": "min over MoE layers, tokens (teacher-forced input_ids AND prompt+greedy_f32 sequence) and i=1..k of "
            "(l_i - l_{i+1}) where l is the sorted router logit vector; *_rel divides by max_j |l_j| of that token",
            "greedy": "min over the 32 greedy steps of (top1 - top2) logit; *_rel divides by max |logit| of that step",
        },
        "source_dtype": spec["dtype"],
        "layout": spec["layout"],
        "sharded": spec["sharded"],
        "config_style": spec["config_style"],
        "tie_word_embeddings": bool(loaded.config.tie_word_embeddings),
        "vocab_size": loaded.config.vocab_size,
        "tokenizer": spec["tokenizer"],
        "chat_template_location": (spec["chat"][0] if spec.get("chat") else None),
        "seed": spec["seed"],
        "seed_used": spec["seed"] + 1000 * attempt,
        "design": info,
        "logits_files": {
            "logits_f32.npy": "float32 [T, V] teacher-forced logits over input_ids (no BOS added), model loaded in float32, eager attention, eager experts",
            "logits_bf16.npy": "same, every weight rounded to bfloat16 then back to float32 (except what transformers keeps in "
            "float32: _keep_in_fp32_modules_strict), computed in float32",
            "logits_f16.npy": "same, every weight rounded to float16 then back to float32, computed in float32",
        },
        "routing_format": "routing_*[layer][token] = top-k expert ids sorted by routing weight descending (null for dense "
        "layers); routing_weights_*[layer][token] = the weights actually multiplied onto those experts' outputs "
        "(after the family's renormalisation rule)",
        "greedy_format": "model.generate(prompt, do_sample=False, max_new_tokens=32, min_new_tokens=32, eos_token_id=None): "
        "exactly 32 new tokens, pure argmax (EOS not special-cased); only the new tokens are listed",
        "safetensors": st_listing(out),
        "layout_note": layout_note,
        "config_json": cfg_json,
        "notes": spec["notes"],
        "generated_with": {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__},
    }
    # self-check with the independent numpy implementation (files only)
    np_logits, np_routing = independent_forward(out, input_ids)
    rel = float(np.abs(np_logits - res["f32"]["logits"].numpy()).max() / np.abs(np_logits).max())
    assert rel < 1e-5 and np_routing == res["f32"]["routing"], (spec["name"], rel)
    meta["independent_numpy_check_rel_err"] = rel
    meta.update(extra)
    write_json(od / "meta.json", meta, indent=1)
    chat = chat_oracle(out, spec, tok)
    if chat is not None:
        write_json(od / "chat.json", chat, indent=1)
        if chat["autotokenizer_vs_tokenizer_json_diffs"]:
            log(f"    note: AutoTokenizer ({chat['autotokenizer_class']}) differs from raw tokenizer.json on "
                f"{len(chat['autotokenizer_vs_tokenizer_json_diffs'])} texts (recorded in oracle/chat.json)")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    agree = {n: (res[n]["greedy"] == res["f32"]["greedy"], res[n]["routing"] == res["f32"]["routing"]) for n in ("bf16", "f16")}
    log(f"  model {spec['name']}: seed {meta['seed_used']}, numpy-check {rel:.1e}, router margin {meta['min_router_margin']:.3f} "
        f"(abs {meta['min_router_margin_abs']:.3f}), greedy margin {meta['min_greedy_margin']:.3f} "
        f"(abs {meta['min_greedy_margin_abs']:.3f}), same-as-f32 (greedy, routing) {agree}, {size // 1024} KB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated fixture names (tokenizers are always rebuilt)")
    args = ap.parse_args()
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)

    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")
    tok_texts = build_tokenizers(log)
    only = {s for s in args.only.split(",") if s}
    specs = [s for s in FIXTURES if not only or s["name"] in only]
    # only the fixture directories named in FIXTURES / the three tokenizer dirs are (re)written; anything else
    # under tests/fixtures is left alone
    for spec in specs:
        build_fixture(spec, tok_texts, log)
    total = sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file())
    log(f"done: tests/fixtures = {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
