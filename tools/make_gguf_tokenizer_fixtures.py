#!/usr/bin/env python3
"""Fixtures for the GGUF tokenizer builder (convert/src/gguf/tokenizer*): one small HuggingFace
tokenizer per kind, the vocab-only .gguf llama.cpp's converter makes from it, and what the HF
tokenizer says on a multilingual / emoji / whitespace / code corpus.

    /work/venv/bin/python tools/make_gguf_tokenizer_fixtures.py [--only qwen2,spm]

For every kind K it writes tests/fixtures/gguf_tokenizers/K/:

* vocab.gguf     -- vocab-only GGUF written by llama.cpp's own conversion code
                    (conversion/base.py `_set_vocab_gpt2` / `_set_vocab_sentencepiece` and gguf-py's
                    `SpecialVocab`, run on the HF tokenizer directory), general.architecture "llama";
* vocab.json     -- the same `tokenizer.*` keys read back from vocab.gguf with gguf-py's GGUFReader,
                    named as the fields of colibri_convert::gguf::vocab::GgufVocab (the Rust tests
                    build from it, so they do not need a GGUF parser);
* expected.json  -- for every text: HF ids (add_special_tokens False / True), ids with special-token
                    strings read as text, and the HF decodings (keeping / skipping special tokens).

gpt2 kinds: a byte-level BPE trained with `tokenizers` using that kind's exact hub pre-tokenizer
(normalizer, split regexes, ByteLevel flags, ignore_merges as llama.cpp sets it) and special tokens
laid out as the hub files do (after the BPE vocabulary). The GGUF pre name is the one llama.cpp's
converter writes for that hub tokenizer (its hash lookup is replaced by the known name: a tokenizer
trained here has no hub hash). spm kinds: a real SentencePiece BPE model (byte fallback) and its
Llama-style tokenizer.json (legacy Prepend+Replace normalizer, merges from the piece scores).

Deterministic: single-threaded trainers, fixed corpus. Needs /work/venv (tokenizers, transformers,
sentencepiece, torch for llama.cpp's conversion module) and llama.cpp's source tree (env LLAMA_CPP,
default /work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp; only read, never copied).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import sys
import tempfile
import unicodedata
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"))
sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
sys.path.insert(0, str(LLAMA_CPP))
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import gguf  # noqa: E402  (llama.cpp's gguf-py)
import sentencepiece as spm  # noqa: E402
from conversion.base import TextModel  # noqa: E402  (llama.cpp's converter)
from make_fixtures import COMMON_TEXTS, corpus_lines  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "gguf_tokenizers"
BPE_VOCAB = 1500
WHOLE_WORD = "supercalifragilisticexpialidocious"
SPM_VOCAB = 1500

# ----------------------------------------------------------------------------------------------
# Text
# ----------------------------------------------------------------------------------------------
# llama.cpp's pre-tokenizer fingerprint text (convert_hf_to_gguf.py `chktxt`).
CHKTXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 "
    "3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на "
    "Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, "
    "'D you like some tea? We'Ve a'lL"
)
MULTI = [
    "Привет, мир! Это тест токенизатора: съешь же ещё этих мягких французских булок.",
    "日本語のテキストです。ひらがな、カタカナ、漢字を含みます。東京タワーは333メートル。",
    "我想在apple工作1314151天～ 中文分词测试：人工智能与机器学习。",
    "한국어 문장입니다. 안녕하세요, 세계! 가나다라마바사.",
    "हिन्दी में एक वाक्य: नमस्ते दुनिया, यह परीक्षण है।",
    "العربية: مرحبا بالعالم، هذا اختبار.",
    "ภาษาไทย สวัสดีชาวโลก កាន់តែពិសេសអាច",
    "Ελληνικά: Γειά σου Κόσμε. Ünïcödé façade naïve ＡＢＣ ｆｕｌｌｗｉｄｔｈ",
    "Emoji: 🚀🦙 😶\u200d🌫️ 👨\u200d👩\u200d👧\u200d👦 👍🏽 ❤️ 🇫🇷 ✅",
    "def parse(self, x: int) -> Dict[str, int]:\n    return {'a': x ** 2}  # comment\n\n\tif x:\n\t\tpass\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|i| i * 3).collect();\n    println!(\"{v:?}\");\n}\n",
    "HTTPServer XMLHttpRequest camelCaseWords snake_case_words SCREAMING_CASE iPhone McDonald's",
    "Numbers: 1 12 123 1234 12345 123456 3.14159 -42 1e10 0x1F ½ ² ٣ 四",
    "I'VE Been 'TOLD he'S there, 'Re you sure? 'm NOT sure I'Ll make it, 'd you? WE'VE",
    "tabs\tand\r\nCRLF\r\n\r\nnbsp\u00a0here  trailing   \n\n\n   spaces   ",
    "decomposed e\u0301 a\u0308 o\u0302 vs composed é ä ô; Hangul jamo \u1100\u1161\u11a8",
]
TEXTS = COMMON_TEXTS + MULTI + [CHKTXT, "   leading and trailing   ", "a  b   c    d", "''''\"\"\"", "~~~ ```` <<< >>>"]


def training_lines() -> list[str]:
    return corpus_lines() + (MULTI + [CHKTXT]) * 8


# ----------------------------------------------------------------------------------------------
# Kinds
# ----------------------------------------------------------------------------------------------
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT4O_RE = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_RE = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEEPSEEK_LLM_RES = [
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
]
DEEPSEEK_CODER_RES = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"]
DEEPSEEK_V3_RES = [
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]
# llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT (a GGUF without tokenizer.ggml.pre, or "default").
DEFAULT_RES = [
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
]


def check_against_llama_cpp():
    """The split regexes above are llama.cpp's (src/llama-vocab.cpp), character for character."""
    src = (LLAMA_CPP / "src" / "llama-vocab.cpp").read_text(encoding="utf-8")
    originals = [LLAMA3_RE, QWEN2_RE, QWEN35_RE, GPT4O_RE, TEKKEN_RE]  # quoted in its comments
    for r in originals + DEEPSEEK_LLM_RES + DEEPSEEK_CODER_RES + DEEPSEEK_V3_RES + DEFAULT_RES:
        c = r.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "\\r").replace("\n", "\\n")
        assert f'"{c}"' in src, r


def splits(res, byte_level_regex=False):
    steps = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in res]
    return pre_tokenizers.Sequence(steps + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=byte_level_regex)])


def byte_level():
    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)


def digits_byte_level():
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level()])


def falcon():
    three = pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False)
    steps = [pre_tokenizers.Punctuation("contiguous"), byte_level(), pre_tokenizers.Digits(individual_digits=False), three]
    return pre_tokenizers.Sequence(steps)


QWEN_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<tool_call>", False), ("</tool_call>", False)]
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"

DS_BOS, DS_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def with_bos(pre, pre_tok, added, eos, **extra):
    """A kind whose post-processor adds its first added token as bos."""
    return dict(pre=pre, pre_tok=pre_tok, added=added, bos=added[0][0], eos=eos, add_bos=True, **extra)


# name: pre (None: key absent), norm(alizer), pre-tokenizer, ignore_merges, added (content, special[, normalized]),
#       special token contents, bos in the post-processor, extra padded ids, chat template
GPT2_KINDS = {
    "gpt-2": dict(pre="gpt-2", pre_tok=byte_level, added=[("<|endoftext|>", True)], bos="<|endoftext|>", eos="<|endoftext|>"),
    "default": dict(pre=None, pre_tok=lambda: splits(DEFAULT_RES), added=[("<|endoftext|>", True)], eos="<|endoftext|>"),
    "llama-bpe": with_bos(
        "llama-bpe",
        lambda: splits([LLAMA3_RE]),
        [("<|begin_of_text|>", True), ("<|end_of_text|>", True), ("<|reserved_special_token_0|>", True), ("<|start_header_id|>", True), ("<|end_header_id|>", True), ("<|eot_id|>", True)],
        "<|eot_id|>",
        ignore_merges=True,
        chat_template="{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}",
    ),
    "qwen2": dict(pre="qwen2", norm=normalizers.NFC, pre_tok=lambda: splits([QWEN2_RE]), added=QWEN_ADDED, eos="<|im_end|>", pad="<|endoftext|>", padded=3, chat_template=CHAT_TEMPLATE),
    "qwen35": dict(  # no NFC (unlike qwen2): llama.cpp's ggml-vocab-qwen35.gguf.out keeps e + U+0301 apart
        pre="qwen35",
        pre_tok=lambda: splits([QWEN35_RE]),
        added=QWEN_ADDED[:3] + [("<think>", False), ("</think>", False)],
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    ),
    "deepseek-llm": with_bos("deepseek-llm", lambda: splits(DEEPSEEK_LLM_RES), [(DS_BOS, True), (DS_EOS, True)], DS_EOS),
    "deepseek-coder": with_bos("deepseek-coder", lambda: splits(DEEPSEEK_CODER_RES), [(DS_BOS, True), (DS_EOS, True), ("<｜fim▁hole｜>", True)], DS_EOS),
    "deepseek-v3": with_bos(
        "deepseek-v3",
        lambda: splits(DEEPSEEK_V3_RES),
        [(DS_BOS, True), (DS_EOS, True), ("<｜place▁holder▁no▁0｜>", True), ("<think>", False), ("</think>", False)],
        DS_EOS,
    ),
    "olmo": dict(
        pre="olmo",
        norm=normalizers.NFC,
        pre_tok=byte_level,
        added=[("|||IP_ADDRESS|||", False, True), ("<|padding|>", True), ("<|endoftext|>", True), ("   ", False, True), ("  ", False, True)],
        eos="<|endoftext|>",
        pad="<|padding|>",
    ),
    "gpt-4o": dict(pre="gpt-4o", pre_tok=lambda: splits([GPT4O_RE]), added=[("<|endoftext|>", True), ("<|endofprompt|>", True)], eos="<|endoftext|>"),
    "glm4": dict(
        pre="glm4",
        pre_tok=lambda: splits([LLAMA3_RE]),
        ignore_merges=True,
        added=[("<|endoftext|>", True), ("[MASK]", True), ("[gMASK]", True), ("<sop>", True), ("<|user|>", True), ("<|assistant|>", True), ("<think>", False), ("</think>", False)],
        eos="<|endoftext|>",
        pad="<|endoftext|>",
    ),
    "tekken": with_bos("tekken", lambda: splits([TEKKEN_RE]), [("<s>", True), ("</s>", True), ("<unk>", True), ("[INST]", True), ("[/INST]", True)], "</s>", ignore_merges=True),
    "command-r": with_bos(
        "command-r",
        digits_byte_level,
        [("<BOS_TOKEN>", True), ("<PAD>", True), ("<EOS_TOKEN>", True), ("<|START_OF_TURN_TOKEN|>", True), ("<|END_OF_TURN_TOKEN|>", True)],
        "<|END_OF_TURN_TOKEN|>",
        norm=normalizers.NFC,
        pad="<PAD>",
        specials_first=True,
    ),
    "falcon": dict(pre="falcon", pre_tok=falcon, added=[(">>TITLE<<", True), (">>ABSTRACT<<", True), ("<|endoftext|>", True)], eos="<|endoftext|>"),
    "smollm": dict(pre="smollm", pre_tok=digits_byte_level, added=[("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True)], bos="<|im_start|>", eos="<|im_end|>"),
}
# Mistral-style control tokens and a user-defined piece, right after <unk> <s> </s>
SPM_ADDED = [("<unk>", True), ("<s>", True), ("</s>", True), ("[INST]", True), ("[/INST]", True), ("<tool>", False)]
SPM_KINDS = {"spm": dict(prefix=True), "spm-noprefix": dict(prefix=False)}


# ----------------------------------------------------------------------------------------------
# HF tokenizers
# ----------------------------------------------------------------------------------------------
def added_token(entry):
    content, special = entry[0], entry[1]
    normalized = entry[2] if len(entry) > 2 else False
    return AddedToken(content, special=special, normalized=normalized)


def train_gpt2(k, lines):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False, dropout=None))
    if k.get("norm"):
        tok.normalizer = k["norm"]()
    tok.pre_tokenizer = k["pre_tok"]()
    tok.decoder = decoders.ByteLevel()
    # specials_first: the added tokens are also the first vocabulary entries (Command-R's layout)
    first = [e[0] for e in k["added"]] if k.get("specials_first") else []
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB, min_frequency=2, show_progress=False, special_tokens=first, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(lines, trainer=trainer)
    # A vocabulary entry the merges do not reach (as hub vocabularies have): with ignore_merges a
    # pre-token equal to it is that one token, without it the merges decide.
    js = json.loads(tok.to_str())
    js["model"]["ignore_merges"] = bool(k.get("ignore_merges"))
    js["model"]["vocab"][WHOLE_WORD] = len(js["model"]["vocab"])
    tok = Tokenizer.from_str(json.dumps(js))
    for entry in k["added"]:
        (tok.add_special_tokens if entry[1] else tok.add_tokens)([added_token(entry)])
    js = json.loads(tok.to_str())
    bl = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if k.get("add_bos"):
        bos = k["bos"]
        template = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [tok.token_to_id(bos)], "tokens": [bos]}},
        }
        js["post_processor"] = {"type": "Sequence", "processors": [bl, template]}
    else:
        js["post_processor"] = bl
    return json.dumps(js, ensure_ascii=False, indent=1)


def train_spm(lines):
    """A SentencePiece BPE model with Llama's settings (byte fallback, dummy prefix, split digits)."""
    proto = tempfile.NamedTemporaryFile(suffix=".model", delete=False)
    proto.close()
    prefix = proto.name[: -len(".model")]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=SPM_VOCAB,
        byte_fallback=True,
        character_coverage=0.9995,
        add_dummy_prefix=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        control_symbols=[t for t, special in SPM_ADDED[3:] if special],
        user_defined_symbols=[t for t, special in SPM_ADDED[3:] if not special],
        num_threads=1,
        minloglevel=2,
        max_sentence_length=100000,
    )
    return Path(prefix + ".model")


def spm_tokenizer_json(model_path, prefix):
    """The Llama/Mistral hub tokenizer.json of a SentencePiece model (transformers' LlamaConverter,
    legacy): merges = every split of a piece into two pieces, ranked by the merged piece's score."""
    sp = spm.SentencePieceProcessor(model_file=str(model_path))
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    score = {sp.id_to_piece(i): sp.get_score(i) for i in range(n)}
    ranked = []
    for piece, idx in vocab.items():
        for s in range(1, len(piece)):
            left, right = piece[:s], piece[s:]
            if left in vocab and right in vocab:
                ranked.append((-score[piece], idx, vocab[left], vocab[right], left, right))
    merges = [(left, right) for *_, left, right in sorted(ranked)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, dropout=None))
    norm = [normalizers.Prepend("▁")] if prefix else []
    tok.normalizer = normalizers.Sequence(norm + [normalizers.Replace(" ", "▁")])
    dec = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(dec + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    tok.add_tokens([AddedToken(t, special=special, normalized=False) for t, special in SPM_ADDED])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    if prefix:  # the HF oracle is SentencePiece itself on text without special tokens
        for t in TEXTS:
            assert tok.encode(t, add_special_tokens=False).ids == sp.encode(t), t
    return tok.to_str(pretty=True), sp


# ----------------------------------------------------------------------------------------------
# The GGUF, through llama.cpp's own converter code
# ----------------------------------------------------------------------------------------------
class Converter:
    """Just enough of a llama.cpp TextModel to run its vocabulary methods on a tokenizer directory."""

    def __init__(self, dir_model, hparams, pre, out):
        self.dir_model = dir_model
        self.hparams = hparams
        self.pre = pre
        self.gguf_writer = gguf.GGUFWriter(out, "llama")

    def get_vocab_base_pre(self, tokenizer):
        return self.pre

    def does_token_look_special(self, token):
        return TextModel.does_token_look_special(self, token)

    def get_vocab_base(self):
        return TextModel.get_vocab_base(self)

    def _create_vocab_sentencepiece(self):
        return TextModel._create_vocab_sentencepiece(self)

    def find_hparam(self, keys, optional=False):
        return next((self.hparams[k] for k in keys if k in self.hparams), None)

    def write(self, kind_model):
        if kind_model == "gpt2":
            if self.pre is None:  # a GGUF from before tokenizer.ggml.pre existed
                self.gguf_writer.add_tokenizer_pre = lambda pre: None
            TextModel._set_vocab_gpt2(self)
        else:
            # LlamaModel.set_vocab: add_prefix_space from tokenizer_config.json, then sentencepiece
            tc = json.loads((self.dir_model / "tokenizer_config.json").read_text())
            if (add_prefix_space := tc.get("add_prefix_space")) is not None:
                self.gguf_writer.add_add_space_prefix(add_prefix_space)
            TextModel._set_vocab_sentencepiece(self)
        self.gguf_writer.write_header_to_file()
        self.gguf_writer.write_kv_data_to_file()
        self.gguf_writer.close()


def read_vocab(path):
    """The tokenizer keys of a GGUF (gguf-py's reader) as GgufVocab fields."""
    r = gguf.GGUFReader(path)

    def get(key):
        f = r.get_field(key)
        return None if f is None else f.contents()

    eot = [get(k) for k in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")]
    pre = get("tokenizer.ggml.pre")
    return {
        "model": get("tokenizer.ggml.model"),
        "pre": None if pre is None else pre,
        "tokens": get("tokenizer.ggml.tokens"),
        "scores": get("tokenizer.ggml.scores"),
        "token_types": get("tokenizer.ggml.token_type"),
        "merges": get("tokenizer.ggml.merges") or [],
        "bos_id": get("tokenizer.ggml.bos_token_id"),
        "eos_id": get("tokenizer.ggml.eos_token_id"),
        "eot_ids": [i for i in eot if i is not None],
        "unk_id": get("tokenizer.ggml.unknown_token_id"),
        "pad_id": get("tokenizer.ggml.padding_token_id"),
        "add_bos": get("tokenizer.ggml.add_bos_token"),
        "add_eos": get("tokenizer.ggml.add_eos_token"),
        "add_space_prefix": get("tokenizer.ggml.add_space_prefix"),
        "chat_template": get("tokenizer.chat_template"),
    }


# ----------------------------------------------------------------------------------------------
# Expected values
# ----------------------------------------------------------------------------------------------
def expected(tok_json, specials):
    tok = Tokenizer.from_str(tok_json)
    plain = Tokenizer.from_str(tok_json)
    plain.encode_special_tokens = True
    texts = TEXTS + [f"{a}Hello {b} world{a}\n{b}" for a, b in zip(specials, specials[1:] + specials[:1])] + ["".join(specials)]
    cases = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        cases.append(
            {
                "text": t,
                "ids": ids,
                "ids_with_special": tok.encode(t, add_special_tokens=True).ids,
                "ids_as_text": plain.encode(t, add_special_tokens=False).ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            }
        )
    return {"cases": cases}


# ----------------------------------------------------------------------------------------------
# Cross-check: llama.cpp itself tokenising the written .gguf (optional, needs its libllama.so)
# ----------------------------------------------------------------------------------------------
class LlamaModelParams(ctypes.Structure):
    """struct llama_model_params of this llama.cpp version's include/llama.h."""

    _fields_ = [
        ("devices", ctypes.c_void_p),
        ("tensor_buft_overrides", ctypes.c_void_p),
        ("n_gpu_layers", ctypes.c_int32),
        ("split_mode", ctypes.c_int),
        ("load_mode", ctypes.c_int),
        ("lazy_mode", ctypes.c_int),
        ("main_gpu", ctypes.c_int32),
        ("tensor_split", ctypes.c_void_p),
        ("progress_callback", ctypes.c_void_p),
        ("progress_callback_user_data", ctypes.c_void_p),
        ("kv_overrides", ctypes.c_void_p),
    ] + [(name, ctypes.c_bool) for name in ("vocab_only", "check_tensors", "use_extra_bufts", "no_host", "no_alloc", "load_mtp")]


def llama_cpp_tokenizer(lib_path):
    """`tokenize(gguf_path, text, add_special, parse_special) -> ids` through llama.cpp's C API."""
    lib = ctypes.CDLL(str(lib_path))
    lib.llama_model_default_params.restype = LlamaModelParams
    lib.llama_model_load_from_file.restype = ctypes.c_void_p
    lib.llama_model_load_from_file.argtypes = [ctypes.c_char_p, LlamaModelParams]
    lib.llama_model_get_vocab.restype = ctypes.c_void_p
    lib.llama_model_get_vocab.argtypes = [ctypes.c_void_p]
    lib.llama_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]
    quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda level, text, user: None)
    lib.llama_log_set(quiet, None)
    lib.llama_backend_init()
    vocabs = {"quiet": quiet}  # keeps the callback alive

    def tokenize(path, text, add_special, parse_special):
        if path not in vocabs:
            params = lib.llama_model_default_params()
            params.vocab_only = True
            model = lib.llama_model_load_from_file(str(path).encode(), params)
            assert model, path
            vocabs[path] = lib.llama_model_get_vocab(model)
        raw = text.encode()
        buf = (ctypes.c_int32 * (2 * len(raw) + 8))()
        n = lib.llama_tokenize(vocabs[path], raw, len(raw), buf, len(buf), add_special, parse_special)
        assert n >= 0, text
        return list(buf[:n])

    return tokenize


def llama_cpp_agrees(tokenize, name, path, cases):
    """llama.cpp gives the HF ids, except where it knowingly departs from the hub tokenizer: it
    applies no NFC normaliser, and its gpt-4o and tekken regexes are adaptations that differ on
    marks (\p{M})."""
    nfc = name in ("qwen2", "olmo", "command-r")
    checked = 0
    for c in cases:
        t = c["text"]
        if nfc and unicodedata.normalize("NFC", t) != t:
            continue
        if name in ("gpt-4o", "tekken") and any(unicodedata.category(ch).startswith("M") for ch in t):
            continue
        assert tokenize(path, t, False, True) == c["ids"], (name, t)
        assert tokenize(path, t, True, True) == c["ids_with_special"], (name, t)
        assert tokenize(path, t, False, False) == c["ids_as_text"], (name, t)
        checked += 1
    return checked


def write_json(path, value):
    path.write_text(json.dumps(value, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")


def make_kind(name, lines, work, tokenize):
    src = work / name
    src.mkdir()
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if name in GPT2_KINDS:
        k = GPT2_KINDS[name]
        tok_json = train_gpt2(k, lines)
        tok = Tokenizer.from_str(tok_json)
        n = tok.get_vocab_size(with_added_tokens=True)
        tc = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
        for role in ("bos", "eos", "pad"):
            tc[f"{role}_token"] = k.get(role)
        if k.get("chat_template"):
            tc["chat_template"] = k["chat_template"]
        hparams = {"vocab_size": n + k.get("padded", 0)}
        for role in ("bos", "eos", "pad"):
            if k.get(role):
                hparams[f"{role}_token_id"] = tok.token_to_id(k[role])
        kind_model, pre, specials = "gpt2", k["pre"], [e[0] for e in k["added"]]
    else:
        prefix = SPM_KINDS[name]["prefix"]
        model_path = train_spm(lines)
        shutil.copy(model_path, src / "tokenizer.model")
        tok_json, _ = spm_tokenizer_json(model_path, prefix)
        tc = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "add_prefix_space": prefix, "legacy": True}
        # as the hub files list them (llama.cpp's converter types the tokens from this)
        tc["added_tokens_decoder"] = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": special} for i, (t, special) in enumerate(SPM_ADDED)}
        tc["chat_template"] = "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}"
        hparams = {"vocab_size": SPM_VOCAB, "bos_token_id": 1, "eos_token_id": 2}
        kind_model, pre, specials = "llama", None, [t for t, _ in SPM_ADDED]
    (src / "tokenizer.json").write_text(tok_json, encoding="utf-8")
    write_json(src / "tokenizer_config.json", tc)
    write_json(src / "config.json", {"architectures": ["LlamaForCausalLM"], **hparams})
    Converter(src, hparams, pre, out / "vocab.gguf").write(kind_model)
    vocab = read_vocab(out / "vocab.gguf")
    assert vocab["model"] == kind_model and vocab["pre"] == (pre if kind_model == "gpt2" else "default"), vocab["pre"]
    write_json(out / "vocab.json", vocab)
    exp = expected(tok_json, specials)
    write_json(out / "expected.json", exp)
    agree = f", llama.cpp agrees on {llama_cpp_agrees(tokenize, name, out / 'vocab.gguf', exp['cases'])}" if tokenize else ""
    print(f"{name}: {len(vocab['tokens'])} tokens, {len(vocab['merges'])} merges, {len(exp['cases'])} texts{agree}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated kinds")
    ap.add_argument("--libllama", type=Path, default=Path("/work/llama/build/bin/libllama.so"), help="cross-check with llama.cpp if present")
    args = ap.parse_args()
    tokenize = llama_cpp_tokenizer(args.libllama) if args.libllama.is_file() else None
    kinds = list(GPT2_KINDS) + list(SPM_KINDS)
    if args.only:
        kinds = [k for k in kinds if k in args.only.split(",")]
    check_against_llama_cpp()
    lines = training_lines()
    with tempfile.TemporaryDirectory() as work:
        for name in kinds:
            make_kind(name, lines, Path(work), tokenize)


if __name__ == "__main__":
    main()
