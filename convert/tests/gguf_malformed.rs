//! Contract: the GGUF parser turns every malformed file into one-line error, never a panic or an
//! allocation sized by a hostile count: bad magic / version / endianness, truncation anywhere,
//! arrays and strings claiming more than the file holds, nested arrays, unknown value and tensor
//! types, bad UTF-8, bad bools, duplicate keys and tensors, bad alignment, tensor data that is
//! misaligned, out of the file, overlapping, or not whole blocks. A valid file parses to the
//! values written, and the parser agrees with gguf-py on the llama.cpp-made fixtures.

use colibri_convert::gguf::{parse, GgufFile, Header, Value};
use std::io::Cursor;

fn s(b: &mut Vec<u8>, x: &[u8]) {
    b.extend((x.len() as u64).to_le_bytes());
    b.extend(x);
}

/// A GGUF file under construction.
struct G {
    version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_t: u64,
    data: Vec<u8>,
    align: usize,
}

impl G {
    fn new() -> G {
        G { version: 3, kv: vec![], n_kv: 0, infos: vec![], n_t: 0, data: vec![], align: 32 }
    }

    fn kv(&mut self, key: &[u8], ty: u32, payload: &[u8]) -> &mut G {
        s(&mut self.kv, key);
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend(payload);
        self.n_kv += 1;
        self
    }

    fn tensor(&mut self, name: &str, ne: &[u64], ty: u32, rel: u64) -> &mut G {
        s(&mut self.infos, name.as_bytes());
        self.infos.extend((ne.len() as u32).to_le_bytes());
        for d in ne {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(ty.to_le_bytes());
        self.infos.extend(rel.to_le_bytes());
        self.n_t += 1;
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(self.version.to_le_bytes());
        b.extend(self.n_t.to_le_bytes());
        b.extend(self.n_kv.to_le_bytes());
        b.extend(&self.kv);
        b.extend(&self.infos);
        b.resize(b.len().next_multiple_of(self.align), 0);
        b.extend(&self.data);
        b
    }
}

fn str_payload(x: &str) -> Vec<u8> {
    let mut b = vec![];
    s(&mut b, x.as_bytes());
    b
}

/// An array payload: element type, count, elements.
fn arr(ty: u32, n: u64, elems: &[u8]) -> Vec<u8> {
    let mut b = ty.to_le_bytes().to_vec();
    b.extend(n.to_le_bytes());
    b.extend(elems);
    b
}

/// A valid file: every value type, a nested array, an f32 and a Q8_0 tensor.
fn valid() -> G {
    let mut g = G::new();
    g.kv(b"general.architecture", 8, &str_payload("llama"))
        .kv(b"a.u8", 0, &[7])
        .kv(b"a.i8", 1, &[0xff])
        .kv(b"a.u16", 2, &300u16.to_le_bytes())
        .kv(b"a.i16", 3, &(-3i16).to_le_bytes())
        .kv(b"a.u32", 4, &70000u32.to_le_bytes())
        .kv(b"a.i32", 5, &(-5i32).to_le_bytes())
        .kv(b"a.f32", 6, &1e-5f32.to_le_bytes())
        .kv(b"a.bool", 7, &[1])
        .kv(b"a.u64", 10, &(1u64 << 40).to_le_bytes())
        .kv(b"a.i64", 11, &(-1i64).to_le_bytes())
        .kv(b"a.f64", 12, &0.25f64.to_le_bytes())
        .kv(b"a.list", 9, &arr(4, 3, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]))
        .kv(b"a.nested", 9, &arr(9, 1, &arr(0, 2, &[5, 6])))
        .kv(b"a.strings", 9, &arr(8, 2, &[str_payload("x"), str_payload("yz")].concat()));
    g.tensor("a", &[4, 2], 0, 0).tensor("b", &[32, 1], 8, 32);
    g.data = vec![0u8; 32 + 34];
    g
}

fn parsed(b: &[u8]) -> Result<Header, String> {
    parse(Cursor::new(b), b.len() as u64).map_err(|e| e.to_string())
}

/// The error of `b`, which must be one line mentioning `want`.
fn refused(b: &[u8], want: &str) {
    let e = parsed(b).expect_err("malformed file accepted");
    assert!(!e.contains('\n'), "not one line: {e}");
    assert!(e.to_lowercase().contains(&want.to_lowercase()), "error {e:?} does not mention {want:?}");
}

#[test]
fn a_valid_file_reads_back_what_was_written() {
    let h = parsed(&valid().bytes()).unwrap();
    let m = &h.metadata;
    assert_eq!(h.version, 3);
    assert_eq!(m.str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(m.get("a.i8"), Some(&Value::I8(-1)));
    assert_eq!(m.u64("a.u16").unwrap(), Some(300));
    assert_eq!(m.get("a.i16"), Some(&Value::I16(-3)));
    assert_eq!(m.u64("a.u32").unwrap(), Some(70000));
    assert_eq!(m.get("a.i32"), Some(&Value::I32(-5)));
    assert_eq!(m.f64("a.f32").unwrap(), Some(1e-5), "f32 read through its shortest decimal");
    assert_eq!(m.bool("a.bool").unwrap(), Some(true));
    assert_eq!(m.u64("a.u64").unwrap(), Some(1 << 40));
    assert_eq!(m.get("a.i64"), Some(&Value::I64(-1)));
    assert!(m.u64("a.i64").is_err(), "a negative i64 is not a count");
    assert_eq!(m.f64("a.f64").unwrap(), Some(0.25));
    assert_eq!(m.array("a.list").unwrap().unwrap(), &[Value::U32(1), Value::U32(2), Value::U32(3)]);
    assert_eq!(m.array("a.nested").unwrap().unwrap(), &[Value::Array(vec![Value::U8(5), Value::U8(6)])]);
    assert_eq!(m.array("a.strings").unwrap().unwrap(), &[Value::Str("x".into()), Value::Str("yz".into())]);
    assert_eq!(h.tensors.len(), 2);
    assert_eq!((h.tensors[1].ne.as_slice(), h.tensors[1].ggml.name, h.tensors[1].bytes), (&[32u64, 1][..], "Q8_0", 34));
    assert_eq!(h.tensors[1].offset, h.data_offset + 32);
    assert_eq!(h.data_offset % 32, 0);
}

#[test]
fn every_truncation_is_refused() {
    let b = valid().bytes();
    for n in 0..b.len() {
        let e = parsed(&b[..n]).expect_err("truncated file accepted");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn every_single_byte_corruption_is_handled() {
    let b = valid().bytes();
    let header_end = b.len() - valid().data.len();
    for i in 0..header_end {
        for x in [0x00, 0xff, 0x80, b[i] ^ 1] {
            let mut c = b.clone();
            c[i] = x;
            if let Err(e) = parsed(&c) {
                assert!(!e.contains('\n'), "{e}");
            }
        }
    }
}

#[test]
fn header_fields() {
    let mut b = valid().bytes();
    b[0] = b'X';
    refused(&b, "magic");
    for (v, want) in [(1u32, "version 1"), (4, "unsupported GGUF version 4"), (3u32.swap_bytes(), "big-endian")] {
        let mut g = valid();
        g.version = v;
        refused(&g.bytes(), want);
    }
    let mut b = valid().bytes();
    b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    refused(&b, "tensors");
    let mut b = valid().bytes();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    refused(&b, "metadata keys");
}

#[test]
fn hostile_lengths_allocate_nothing() {
    let mut g = G::new();
    g.kv(b"big", 9, &arr(0, 1 << 60, &[]));
    refused(&g.bytes(), "array of 1152921504606846976 elements");
    let mut g = G::new();
    g.kv(b"big", 9, &arr(8, 1 << 20, &[0; 64]));
    refused(&g.bytes(), "more than the file holds");
    let mut g = G::new();
    g.kv(b"s", 8, &(1u64 << 62).to_le_bytes());
    refused(&g.bytes(), "claims 4611686018427387904 bytes");
    let mut b = b"GGUF".to_vec();
    for x in [3u32.to_le_bytes().to_vec(), 0u64.to_le_bytes().to_vec(), 1u64.to_le_bytes().to_vec()] {
        b.extend(x);
    }
    b.extend(u64::MAX.to_le_bytes());
    refused(&b, "metadata key 0 claims");
    let mut g = G::new();
    g.kv(b"deep", 9, &arr(9, 1, &arr(9, 1, &arr(9, 1, &arr(0, 1, &[1])))));
    refused(&g.bytes(), "nested deeper");
}

#[test]
fn bad_values() {
    let mut g = G::new();
    g.kv(b"k", 13, &[0; 8]);
    refused(&g.bytes(), "unknown value type 13");
    let mut g = G::new();
    g.kv(b"k", 9, &arr(77, 1, &[0; 8]));
    refused(&g.bytes(), "array of unknown type 77");
    let mut g = G::new();
    g.kv(b"k", 7, &[2]);
    refused(&g.bytes(), "bool byte is 2");
    let mut g = G::new();
    g.kv(b"k\xff", 0, &[0]);
    refused(&g.bytes(), "UTF-8");
    let mut g = G::new();
    g.kv(b"k", 8, &[1, 0, 0, 0, 0, 0, 0, 0, 0xc3]);
    refused(&g.bytes(), "UTF-8");
    let mut g = G::new();
    g.kv(b"k", 0, &[0]).kv(b"k", 0, &[1]);
    refused(&g.bytes(), "appears twice");
    for payload in [3u32.to_le_bytes().to_vec(), 0u32.to_le_bytes().to_vec()] {
        let mut g = G::new();
        g.kv(b"general.alignment", 4, &payload);
        refused(&g.bytes(), "power of two");
    }
    let mut g = G::new();
    g.kv(b"general.alignment", 10, &32u64.to_le_bytes());
    refused(&g.bytes(), "must be a u32");
}

/// `valid()` with its tensor infos replaced by (name, ne, type, offset).
fn with_tensors(ts: &[(&str, &[u64], u32, u64)]) -> Vec<u8> {
    let mut g = valid();
    g.infos.clear();
    g.n_t = 0;
    for &(name, ne, ty, rel) in ts {
        g.tensor(name, ne, ty, rel);
    }
    g.bytes()
}

#[test]
fn bad_tensors() {
    refused(&with_tensors(&[("a", &[4, 2], 4, 0)]), "unknown type 4");
    refused(&with_tensors(&[("a", &[], 0, 0)]), "0 dimensions");
    refused(&with_tensors(&[("a", &[1, 1, 1, 1, 1], 0, 0)]), "5 dimensions");
    refused(&with_tensors(&[("b", &[16, 1], 8, 0)]), "whole 32-element blocks");
    refused(&with_tensors(&[("a", &[1 << 62, 1 << 62], 0, 0)]), "without overflow");
    refused(&with_tensors(&[("a", &[u64::MAX], 0, 0)]), "above 2^63");
    refused(&with_tensors(&[("a", &[4, 2], 0, 8)]), "not aligned");
    refused(&with_tensors(&[("a", &[4, 2], 0, 64)]), "runs past the end");
    refused(&with_tensors(&[("a", &[4, 2], 0, u64::MAX - 31)]), "runs past the end");
    refused(&with_tensors(&[("a", &[16, 1], 0, 0), ("b", &[8], 0, 32)]), "overlap");
    refused(&with_tensors(&[("a", &[4], 0, 0), ("a", &[4], 0, 32)]), "appears twice");
    refused(&with_tensors(&[(&"n".repeat(300), &[4], 0, 0)]), "name is 300 bytes");
}

/// Offsets and values as gguf-py's GGUFReader reports them for the llama.cpp-made fixture.
#[test]
fn agrees_with_gguf_py_on_a_llama_cpp_file() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf/mixtral_gqa.q8_0.gguf");
    let f = GgufFile::open(&path).unwrap();
    let m = f.metadata();
    assert_eq!(f.header.version, 3);
    assert_eq!(m.0.len(), 30, "gguf-py's GGUF.kv_count");
    assert_eq!(f.tensors.len(), 23);
    assert_eq!(m.u64("llama.expert_count").unwrap(), Some(8));
    assert_eq!(m.f64("llama.attention.layer_norm_rms_epsilon").unwrap(), Some(1e-5));
    assert_eq!(m.u64("general.file_type").unwrap(), Some(7));
    let t = |n: &str| f.tensor(n).unwrap().info.clone();
    let down = t("blk.0.ffn_down_exps.weight");
    assert_eq!((down.ggml.name, down.ne.as_slice(), down.offset), ("F16", &[16u64, 64, 8][..], 74496));
    let gate = t("blk.0.ffn_gate_exps.weight");
    assert_eq!((gate.ggml.name, gate.ne.as_slice(), gate.offset), ("Q8_0", &[64u64, 16, 8][..], 65792));
    assert_eq!(t("output_norm.weight").offset, 164608);
    let v = f.vocab().unwrap();
    assert_eq!(
        (v.model.as_str(), v.tokens.len(), v.bos_id, v.eos_id, v.add_bos),
        ("llama", 400, Some(1), Some(2), Some(true))
    );
}

/// `vocab()`: the tokenizer keys decoded, each checked for its type and per-token arrays for
/// their length.
#[test]
fn vocabulary_keys_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v.gguf");
    let tokens = arr(8, 2, &[str_payload("a"), str_payload("b")].concat());
    let mut g = valid();
    g.kv(b"tokenizer.ggml.model", 8, &str_payload("gpt2")).kv(b"tokenizer.ggml.tokens", 9, &tokens);
    g.kv(b"tokenizer.ggml.eos_token_id", 4, &1u32.to_le_bytes());
    std::fs::write(&path, g.bytes()).unwrap();
    let v = GgufFile::open(&path).unwrap().vocab().unwrap();
    assert_eq!(
        (v.model.as_str(), v.tokens.as_slice(), v.eos_id),
        ("gpt2", &["a".to_string(), "b".to_string()][..], Some(1))
    );
    let mut bad = valid();
    bad.kv(b"tokenizer.ggml.model", 8, &str_payload("gpt2")).kv(b"tokenizer.ggml.tokens", 9, &tokens);
    bad.kv(b"tokenizer.ggml.scores", 9, &arr(6, 1, &0f32.to_le_bytes()));
    std::fs::write(&path, bad.bytes()).unwrap();
    let e = GgufFile::open(&path).unwrap().vocab().unwrap_err().to_string();
    assert!(e.contains("scores has Some(1) entries for 2 tokens"), "{e}");
    let mut bad = valid();
    bad.kv(b"tokenizer.ggml.model", 4, &0u32.to_le_bytes());
    std::fs::write(&path, bad.bytes()).unwrap();
    let e = GgufFile::open(&path).unwrap().vocab().unwrap_err().to_string();
    assert!(e.contains("tokenizer.ggml.model must be a string"), "{e}");
}
