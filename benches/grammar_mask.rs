//! The per-token cost of structured output at a ~150k vocabulary (Qwen-sized): one step's
//! grammar mask (llguidance over the token trie), its application to the logits and the commit
//! of the chosen token, on a synthetic byte-level vocabulary of 150,000 ids (seeded: 255 byte
//! tokens, one special end-of-sequence, the rest word-like pieces with leading spaces, digits,
//! punctuation and multi-byte characters). Also the one-off costs: building the vocabulary
//! (once per model) and compiling a schema (once per request).
//!
//!     cargo bench --bench grammar_mask
//!
//! Items/s of `step_*` are tokens per second; the time per item is the overhead per token.

use colibri::grammar::{Grammar, GrammarVocab, ResponseFormat};
use colibri::rng::Rng;
use colibri::sampler::apply_mask;
use divan::counter::ItemsCount;
use divan::{black_box, Bencher};
use serde_json::json;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

const VOCAB: usize = 150_000;
/// Tokens per measured run (the grammar restarts whenever its document is complete).
const STEPS: usize = 64;

fn main() {
    divan::main();
}

/// One piece as byte-level BPE makes them (its pre-tokenizer never mixes letters, digits and
/// punctuation in one piece): a word with an optional leading space (85 %), 1-3 digits (5 %),
/// a punctuation run (7 %) or 1-2 multi-byte characters (3 %).
fn piece(rng: &mut Rng) -> Vec<u8> {
    const PUNCT: &[u8] = b"\"{}[]:,.-_'()/\\!?;";
    const WIDE: [char; 6] = ['é', 'ü', 'ß', '中', '文', '—'];
    let mut r = |n: u64| rng.next_u64() % n;
    let mut s = String::new();
    match r(100) {
        0..85 => {
            if r(3) > 0 {
                s.push(' ');
            }
            let upper = r(5) == 0;
            for i in 0..1 + r(10) {
                let c = char::from(b'a' + r(26) as u8);
                s.push(if upper && i == 0 { c.to_ascii_uppercase() } else { c });
            }
        }
        85..90 => (0..1 + r(3)).for_each(|_| s.push(char::from(b'0' + r(10) as u8))),
        90..97 => (0..1 + r(3)).for_each(|_| s.push(char::from(PUNCT[r(PUNCT.len() as u64) as usize]))),
        _ => (0..1 + r(2)).for_each(|_| s.push(WIDE[r(WIDE.len() as u64) as usize])),
    }
    s.into_bytes()
}

/// The vocabulary under test: token bytes [vocab] and the end-of-sequence id.
struct Setup {
    words: Vec<Vec<u8>>,
    eos: u32,
    vocab: Arc<GrammarVocab>,
}

/// [VOCAB] synthetic token bytes: bytes 0x00-0xFE, the end-of-sequence special (id 255), then
/// distinct pieces.
fn synthetic() -> (Vec<Vec<u8>>, u32) {
    let mut words: Vec<Vec<u8>> = (0..255u8).map(|b| vec![b]).collect();
    words.push(b"\xFF<|endoftext|>".to_vec());
    let mut seen: HashSet<Vec<u8>> = words.iter().cloned().collect();
    let mut rng = Rng::new(7);
    while words.len() < VOCAB {
        let p = piece(&mut rng);
        if seen.insert(p.clone()) {
            words.push(p);
        }
    }
    (words, 255)
}

/// A real vocabulary when COLIBRI_GRAMMAR_BENCH_VOCAB names a file of one hex line of token
/// bytes per id (COLIBRI_GRAMMAR_BENCH_EOS: its end-of-sequence id), else the synthetic one.
fn setup() -> &'static Setup {
    static S: OnceLock<Setup> = OnceLock::new();
    S.get_or_init(|| {
        let (words, eos) = match std::env::var("COLIBRI_GRAMMAR_BENCH_VOCAB") {
            Ok(path) => {
                let text = std::fs::read_to_string(&path).expect("vocabulary file");
                let hex = |l: &str| {
                    (0..l.len() / 2).map(|i| u8::from_str_radix(&l[2 * i..2 * i + 2], 16).unwrap_or(0)).collect()
                };
                let eos = std::env::var("COLIBRI_GRAMMAR_BENCH_EOS").ok().and_then(|e| e.parse().ok()).unwrap_or(0);
                (text.lines().map(hex).collect(), eos)
            }
            Err(_) => synthetic(),
        };
        eprintln!("vocabulary: {} ids, end-of-sequence {eos}", words.len());
        let vocab = Arc::new(GrammarVocab::from_token_bytes(words.clone(), &[eos]).expect("vocabulary"));
        Setup { words, eos, vocab }
    })
}

fn person() -> ResponseFormat {
    ResponseFormat::JsonSchema(json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        },
        "required": ["name", "age", "color", "tags"],
        "additionalProperties": false,
    }))
}

/// A random allowed id of `mask` (bits over the vocabulary).
fn pick(mask: &[u32], rng: &mut Rng) -> u32 {
    let n: u32 = mask.iter().map(|w| w.count_ones()).sum();
    let mut k = (rng.next_u64() % u64::from(n.max(1))) as u32;
    for (w, &bits) in mask.iter().enumerate() {
        let c = bits.count_ones();
        if k < c {
            let mut b = bits;
            for _ in 0..k {
                b &= b - 1;
            }
            return w as u32 * 32 + b.trailing_zeros();
        }
        k -= c;
    }
    setup().eos
}

/// STEPS tokens: mask, apply to the logits, choose, commit.
fn steps(fresh: &Grammar, logits: &mut [f32], rng: &mut Rng) {
    let mut g = fresh.clone();
    for _ in 0..STEPS {
        let mask = g.allowed().expect("mask");
        apply_mask(logits, mask);
        let t = pick(mask, rng);
        if t == setup().eos {
            g = fresh.clone();
        } else {
            g.commit(t).expect("commit");
        }
    }
    black_box(logits);
}

/// `text` tokenised by longest match over `words` (every byte is a token, so it always ends).
fn greedy_tokens(words: &[Vec<u8>], text: &[u8]) -> Vec<u32> {
    let ids: std::collections::HashMap<&[u8], u32> =
        words.iter().enumerate().map(|(i, w)| (w.as_slice(), i as u32)).collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let len = (1..=(text.len() - at).min(64)).rev().find(|&l| ids.contains_key(&text[at..at + l])).unwrap_or(1);
        out.push(ids.get(&text[at..at + len]).copied().unwrap_or(0));
        at += len;
    }
    out
}

/// The steps of a model writing one fixed document of the schema: mask, apply, commit its
/// tokens in turn (items: its tokens).
#[divan::bench(sample_count = 20)]
fn step_document(bencher: Bencher) {
    let doc = br#"{"name": "Johannes Gutenberg of Mainz", "age": 68, "color": "blue", "tags": ["printer", "goldsmith", "inventor"]}"#;
    let tokens = greedy_tokens(&setup().words, doc);
    let fresh = setup().vocab.compile(&person()).expect("compile");
    let mut logits = vec![0.0f32; setup().words.len()];
    bencher.counter(ItemsCount::new(tokens.len())).bench_local(|| {
        let mut g = fresh.clone();
        for &t in &tokens {
            apply_mask(&mut logits, g.allowed().expect("mask"));
            g.commit(t).expect("the document's tokens are allowed");
        }
        assert!(g.is_complete());
    });
}

/// The steps of a reply under a tool grammar with `tool_choice: "auto"` (Hermes syntax): free
/// text, where the mask is computed too (no lazy grammar), then a call (items: its tokens).
#[divan::bench(sample_count = 20)]
fn step_tool_reply(bencher: Bencher) {
    use colibri::chat_output::{tool_grammar, CallOptions, Syntax, ToolMode, ToolSpec, ToolTags};
    let doc = b"Let me check the weather in Paris for you, one moment please.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
    let tokens = greedy_tokens(&setup().words, doc);
    let params = json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"], "additionalProperties": false});
    let tools = [ToolSpec { name: "get_weather".into(), parameters: params }];
    let options = CallOptions { mode: ToolMode::Auto, parallel: true, in_reasoning: false };
    let syntax = Syntax::Tagged { think: false, tools: ToolTags::Hermes };
    let lark = tool_grammar(syntax, "", &tools, &options, &|_| None).expect("grammar").expect("a call syntax");
    let fresh = setup().vocab.compile(&ResponseFormat::Lark(lark)).expect("compile");
    let mut logits = vec![0.0f32; setup().words.len()];
    bencher.counter(ItemsCount::new(tokens.len())).bench_local(|| {
        let mut g = fresh.clone();
        for &t in &tokens {
            apply_mask(&mut logits, g.allowed().expect("mask"));
            g.commit(t).expect("the reply's tokens are allowed");
        }
        assert!(g.is_complete());
    });
}

fn bench_steps(bencher: Bencher, format: ResponseFormat) {
    let fresh = setup().vocab.compile(&format).expect("compile");
    let mut logits = vec![0.0f32; setup().words.len()];
    let mut rng = Rng::new(1);
    bencher.counter(ItemsCount::new(STEPS)).bench_local(|| steps(&fresh, &mut logits, &mut rng));
}

#[divan::bench(sample_count = 20)]
fn step_json_schema(bencher: Bencher) {
    bench_steps(bencher, person());
}

#[divan::bench(sample_count = 20)]
fn step_json_object(bencher: Bencher) {
    bench_steps(bencher, ResponseFormat::JsonObject);
}

/// The mask's application alone (a 150k-entry logits row).
#[divan::bench(sample_count = 50)]
fn apply_only(bencher: Bencher) {
    let mut g = setup().vocab.compile(&ResponseFormat::JsonObject).expect("compile");
    let mask = g.allowed().expect("mask").to_vec();
    let mut logits = vec![0.0f32; setup().words.len()];
    bencher.bench_local(|| apply_mask(black_box(&mut logits), black_box(&mask)));
}

#[divan::bench(sample_count = 20)]
fn compile_schema(bencher: Bencher) {
    let v = &setup().vocab;
    bencher.bench_local(|| black_box(v.compile(&person()).expect("compile")));
}

#[divan::bench(sample_count = 2, sample_size = 1)]
fn build_vocabulary(bencher: Bencher) {
    let s = setup();
    bencher.bench_local(|| black_box(GrammarVocab::from_token_bytes(s.words.clone(), &[s.eos]).expect("vocabulary")));
}
