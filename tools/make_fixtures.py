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
    GenerationConfig,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    GraniteMoeConfig,
    GraniteMoeForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
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
    "qwen3_next": (Qwen3NextConfig, Qwen3NextForCausalLM),
}

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


def router_min_rel(spec):
    """The relative router margin a fixture must keep: sigmoid routers (GLM-4.5) choose on scores in
    (0, 1) + a small bias, where max|key| ~ 1 and an absolute gap of 0.04 is far beyond rounding."""
    return 0.04 if spec["family"] == "glm4_moe" else ROUTER_MIN_REL


def moe_block(layer):
    """The layer's MoE (or dense MLP) module: `block_sparse_moe` (Granite) or `mlp`."""
    return getattr(layer, "block_sparse_moe", None) or layer.mlp


def router_of(block):
    """The router module of a MoE block: `gate` (most families) or `router` (Granite)."""
    return block.gate if hasattr(block, "gate") else block.router


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

    # 1. norm weights (Qwen3-Next stores zero-centred norms: the gain is 1 + weight)
    centre = 1.0 if spec["family"] == "qwen3_next" else 0.0
    g_post = {}
    for i, layer in enumerate(layers):
        put(layer.input_layernorm.weight, 1 - centre + 0.15 * nrm(H, 1))
        g = 1 + 0.15 * nrm(H, 1)
        put(layer.post_attention_layernorm.weight, g - centre)
        g_post[i] = g
        at = getattr(layer, "self_attn", None)
        for nm in ("q_norm", "k_norm"):
            if hasattr(at, nm):
                w = getattr(at, nm).weight
                put(w, 1 - centre + 0.15 * nrm(w.shape[0], 1))
    g_final = 1 + 0.15 * nrm(H, 1)
    put(model.model.norm.weight, g_final - centre)

    # 2. router subspace
    moe = moe_layers(model)
    E = router_of(moe_block(model.model.layers[moe[0]])).weight.shape[0]
    k = cfg.num_experts_per_tok
    W = {i: nrm((E, H), 1.0) for i in moe}
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
        qk_gain = 1.0 if hasattr(at, "q_norm") else 1.6
        for nm, gain in (("q_proj", qk_gain), ("k_proj", qk_gain), ("v_proj", 1.0)):
            lin = getattr(at, nm)
            put(lin.weight, nrm(tuple(lin.weight.shape), gain / math.sqrt(H)))
            if lin.bias is not None:
                put(lin.bias, nrm(tuple(lin.bias.shape), 0.1 if nm == "v_proj" else 0.3))
        o = at.o_proj
        din = o.weight.shape[1]
        put(o.weight, Q @ nrm((H, din), BRANCH * emb_rms * 1.5 / math.sqrt(din)))
        if o.bias is not None:
            put(o.bias, Q @ nrm(H, 0.05 * emb_rms))

    # 4. MLPs / experts
    def mlp_weights(mod, scale=1.0):
        F = mod.gate_proj.weight.shape[0]
        put(mod.gate_proj.weight, nrm((F, H), 1.0 / math.sqrt(H)))
        put(mod.up_proj.weight, nrm((F, H), 1.0 / math.sqrt(H)))
        put(mod.down_proj.weight, Q @ nrm((H, F), scale * BRANCH * emb_rms * 2.0 / math.sqrt(F)))

    for i, layer in enumerate(layers):
        mlp = moe_block(layer)
        if i in moe:
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
            if hasattr(mlp, "shared_experts"):  # GLM-4.5: added as it is
                mlp_weights(mlp.shared_experts, scale=0.3)
            bias = getattr(router_of(mlp), "e_score_correction_bias", None)
            if bias is not None:  # small, for choosing only: the oracle shows its effect
                put(bias, rng.uniform(-0.03, 0.03, bias.shape[0]))
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
            if spec["family"] == "glm4_moe":  # sigmoid scores: centre the ladder on the steep part
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
        put(router_of(moe_block(layers[i])).weight, kappa * W[i])

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
            logits, scores, idx = out
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


def greedy_margin(logits: torch.Tensor) -> tuple[float, float]:
    top2 = torch.topk(logits.double(), 2, dim=-1).values
    gaps = top2[:, 0] - top2[:, 1]
    scale = logits.double().abs().max(dim=-1).values
    return float((gaps / scale).min()), float(gaps.min())


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
            r_rel, r_abs = min(r_rel, rr), min(r_abs, ra)
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
        # teacher-forced pass over prompt+generated: greedy consistency + margins
        rec.reset()
        full = torch.tensor([prompt + new], dtype=torch.long)
        out2 = model(input_ids=full, use_cache=False)
        lg2 = out2.logits[0, len(prompt) - 1: len(prompt) - 1 + n_new].float()
        argmax = lg2.argmax(-1).tolist()
        assert argmax == new, f"generate() != argmax of the full forward: {new} vs {argmax}"
        g_rel, g_abs = greedy_margin(lg2)
        for i in rec.layers:
            rr, ra = router_margin(rec.records[i][0], k)
            r_rel, r_abs = min(r_rel, rr), min(r_abs, ra)
    finally:
        rec.remove()
    return dict(logits=logits, routing=routing, weights=weights, greedy=new, r_rel=r_rel, r_abs=r_abs, g_rel=g_rel, g_abs=g_abs)


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
    inv = 1.0 / (theta ** (np.arange(0, hd, 2) / hd))
    att = 1.0
    if sc:
        assert sc.get("rope_type", sc.get("type")) == "yarn", sc
        f, om = sc["factor"], sc["original_max_position_embeddings"]
        att = 0.1 * math.log(f) + 1.0

        def corr_dim(n_rot):
            return hd * math.log(om / (n_rot * 2 * math.pi)) / (2 * math.log(theta))

        lo, hi = max(math.floor(corr_dim(32)), 0), min(math.ceil(corr_dim(1)), hd - 1)
        hi = hi + 0.001 if lo == hi else hi
        extrap = 1 - np.clip((np.arange(hd // 2) - lo) / (hi - lo), 0, 1)
        inv = (inv / f) * (1 - extrap) + inv * extrap
    ang = np.arange(T)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], -1)
    return np.cos(ang) * att, np.sin(ang) * att


def _np_rot(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def independent_forward(d: Path, ids):
    c = json.loads((d / "config.json").read_text())
    W = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for key in fh.keys():
                W[key] = fh.get_tensor(key).double().numpy()
    fam = c["model_type"]
    nxt = fam == "qwen3_next"
    off = 1.0 if nxt else 0.0  # Qwen3-Next's zero-centred norms: gain 1 + w
    H, nh, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or H // nh
    eps, T = c["rms_norm_eps"], len(ids)
    k = c["num_experts_per_tok"]
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

        h = _np_rms(x, off + W[p + "input_layernorm.weight"], eps)
        if nxt and c["layer_types"][L] == "linear_attention":
            x = x + _np_deltanet(c, W, p, h, eps)
            h = _np_rms(x, off + W[p + "post_attention_layernorm.weight"], eps)
            x, rt = _np_ffn(c, W, p, fam, h, x, T, k, granite, res_mult)
            routing.append(rt)
            continue
        q, kk, v = lin("self_attn.q_proj", h), lin("self_attn.k_proj", h), lin("self_attn.v_proj", h)
        if nxt:  # q_proj holds [query, gate] per head
            q, gate = q.reshape(T, nh, 2 * hd)[..., :hd], q.reshape(T, nh, 2 * hd)[..., hd:].reshape(T, nh * hd)
        if fam == "olmoe":  # RMSNorm over the whole projection, before the head split
            q = _np_rms(q, W[p + "self_attn.q_norm.weight"], eps)
            kk = _np_rms(kk, W[p + "self_attn.k_norm.weight"], eps)
        q, kk, v = q.reshape(T, nh, hd), kk.reshape(T, nkv, hd), v.reshape(T, nkv, hd)
        if fam in ("qwen3_moe", "glm4_moe", "qwen3_next") and p + "self_attn.q_norm.weight" in W:  # per head
            q = _np_rms(q, off + W[p + "self_attn.q_norm.weight"], eps)
            kk = _np_rms(kk, off + W[p + "self_attn.k_norm.weight"], eps)
        r = cos.shape[-1]  # rotate the leading r dims of each head, pass the rest
        q = np.concatenate([q[..., :r] * cos[:, None] + _np_rot(q[..., :r]) * sin[:, None], q[..., r:]], -1)
        kk = np.concatenate([kk[..., :r] * cos[:, None] + _np_rot(kk[..., :r]) * sin[:, None], kk[..., r:]], -1)
        kk, v = np.repeat(kk, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
        sc = np.einsum("qhd,khd->hqk", q, kk) * att_scale
        qi, kj = np.arange(T)[:, None], np.arange(T)[None, :]
        mask = kj <= qi
        if sw:
            mask &= kj > qi - sw
        sc = np.where(mask[None], sc, -np.inf)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        att = np.einsum("hqk,khd->qhd", sc, v).reshape(T, nh * hd)
        if nxt:  # output gate
            att = att / (1 + np.exp(-gate))
        x = x + res_mult * lin("self_attn.o_proj", att)
        h = _np_rms(x, off + W[p + "post_attention_layernorm.weight"], eps)
        x, rt = _np_ffn(c, W, p, fam, h, x, T, k, granite, res_mult)
        routing.append(rt)
    x = _np_rms(x, off + W["model.norm.weight"], eps)
    lm = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ lm.T / (c.get("logits_scaling", 1.0) if granite else 1.0), routing


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
    pre = p + ("block_sparse_moe." if fam in ("mixtral", "granitemoe") else "mlp.")
    router = next((pre + r for r in ("gate.weight", "router.weight", "router.layer.weight") if pre + r in W), None)
    if granite and pre + "input_linear.weight" in W:  # Granite hub names of the fused stacks
        W[pre + "experts.gate_up_proj"] = W[pre + "input_linear.weight"]
        W[pre + "experts.down_proj"] = W[pre + "output_linear.weight"]
    if router is None:  # dense layer
        return x + (_np_silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T, None
    lg = h @ W[router].T
    if fam == "glm4_moe":  # sigmoid scores; choose by score + bias within the best groups
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
        top = np.argsort(-pr, -1, kind="stable")[:, :k]
        tw = np.take_along_axis(pr, top, -1)
    if fam in ("mixtral", "granitemoe") or (fam != "glm4_moe" and c.get("norm_topk_prob")):  # Granite: softmax over the top-k logits
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
            elif fam == "mixtral":  # w1 = gate, w3 = up, w2 = down
                gw, uw, dw = (W[pre + f"experts.{e}.{n}.weight"] for n in ("w1", "w3", "w2"))
            else:
                gw, uw, dw = (W[pre + f"experts.{e}.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj"))
            y[t] += tw[t, j] * ((_np_silu(h[t] @ gw.T) * (h[t] @ uw.T)) @ dw.T)
    if pre + "shared_expert_gate.weight" in W:
        se = (_np_silu(h @ W[pre + "shared_expert.gate_proj.weight"].T) * (h @ W[pre + "shared_expert.up_proj.weight"].T)) @ W[pre + "shared_expert.down_proj.weight"].T
        y += se / (1 + np.exp(-(h @ W[pre + "shared_expert_gate.weight"].T)))
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


def load_fixture(out: Path, family: str):
    cls = FAMILIES[family][1]
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
    layout_note = {
        "per_expert": "hub per-expert layout written by save_pretrained (save_original_format=True, the default)",
        "fused": "fused layout: transformers-5 in-memory names, written by save_pretrained(save_original_format=False)",
        "hub": "the family's hub layout written by save_pretrained (save_original_format=True, the default)",
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
