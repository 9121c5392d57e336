//! Shared helpers of the library's integration tests. Here, for the file-format tests: build
//! small valid .colibri files with `FileWriter` (deterministic finite weights, norms of 1.0),
//! locate every field of the written file (header, metadata directory, tensor records, names,
//! data) and patch bytes in place. `fixtures`: the HF fixture checkpoints and their conversion,
//! for the engine, batch and C ABI tests.
#![allow(dead_code)] // each test binary uses a different subset

mod fixtures;
#[allow(unused_imports)] // the file-format tests use none of them
pub use fixtures::*;

use colibri::format::{
    self, DType, FileWriter, Header, MetaKind, PlannedTensor, TensorKind, TensorRecord, HEADER_SIZE, RECORD_SIZE,
};
use colibri::model::{tensor_specs, Config, Family, LayerSpec, MoeConfig, QkNorm, QuantClass, Role, Rope, RopeScaling};
use colibri::{Error, LoadOptions, Model};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

// Fixed header field offsets (see the byte map in `colibri::format`).
pub const H_MAGIC: usize = 0x00;
pub const H_VERSION: usize = 0x04;
pub const H_NUM_EXPERTS: usize = 0x08;
pub const H_NUM_LAYERS: usize = 0x0C;
pub const H_HEADER_SIZE: usize = 0x10;
pub const H_TENSOR_COUNT: usize = 0x14;
pub const H_ROUTING_OFFSET: usize = 0x18;
pub const H_DATA_OFFSET: usize = 0x20;
pub const H_METADATA_OFFSET: usize = 0x28;
pub const H_METADATA_SIZE: usize = 0x30;
pub const H_TABLE_OFFSET: usize = 0x38;
pub const H_TABLE_SIZE: usize = 0x40;
pub const H_STRINGS_OFFSET: usize = 0x48;
pub const H_STRINGS_SIZE: usize = 0x50;
pub const H_FILE_SIZE: usize = 0x58;
pub const H_RECORD_SIZE: usize = 0x60;
pub const H_FLAGS: usize = 0x64;
pub const H_TOP_K: usize = 0x68;
pub const H_NUM_MOE_LAYERS: usize = 0x6C;
pub const H_RESERVED: usize = 0x70;

// Tensor record field offsets, relative to the record.
pub const R_NAME_OFFSET: usize = 0;
pub const R_NAME_LEN: usize = 4;
pub const R_DTYPE: usize = 8;
pub const R_NDIM: usize = 12;
pub const R_DIMS: usize = 16;
pub const R_DATA_OFFSET: usize = 48;
pub const R_BYTE_LENGTH: usize = 56;
pub const R_EXPERT_STRIDE: usize = 64;
pub const R_CHECKSUM: usize = 72;
pub const R_GROUP_SIZE: usize = 80;
pub const R_KIND: usize = 84;
pub const R_RESERVED: usize = 88;

// Metadata section: directory header, then 32-byte entries (offsets relative to the section).
pub const M_COUNT: usize = 0;
pub const M_RESERVED: usize = 4;
pub const M_ENTRIES: usize = 8;
pub const M_ENTRY_SIZE: usize = 32;
pub const E_KEY_LEN: usize = 0;
pub const E_KIND: usize = 4;
pub const E_KEY_OFFSET: usize = 8;
pub const E_VALUE_OFFSET: usize = 16;
pub const E_VALUE_LEN: usize = 24;

pub fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// The tiny model of the malformed-file and truncation tests: hidden 16, 2 MoE layers, 4 experts,
/// top-2, vocab 32, 2 heads of 8 (1 KV head), expert FFN 8, untied lm_head.
pub fn tiny_config() -> Config {
    sized_config(16, 8, 4, 32)
}

/// A Mixtral-style config of the given sizes (2 layers, both MoE, head_dim 8, top-2).
pub fn sized_config(hidden: usize, expert_ffn: usize, n_experts: usize, vocab: usize) -> Config {
    Config {
        family: Family::Mixtral,
        vocab_size: vocab,
        hidden_size: hidden,
        n_layers: 2,
        n_heads: hidden / 8,
        n_kv_heads: 1,
        head_dim: 8,
        rms_norm_eps: 1e-5,
        rope: Rope { theta: 10000.0, partial_rotary_factor: 1.0, scaling: RopeScaling::None, interleaved: false },
        max_position_embeddings: 256,
        attention_bias: false,
        attention_out_bias: false,
        norm: Default::default(),
        lm_head_bias: false,
        qk_norm: QkNorm::None,
        clip_qkv: None,
        moe: MoeConfig {
            n_experts,
            top_k: 2,
            expert_ffn,
            norm_topk_prob: true,
            shared_expert_ffn: 0,
            shared_expert_gate: false,
            scoring: Default::default(),
            choice_bias: false,
            groups: None,
            routed_scaling: 1.0,
            router_bias: false,
            expert_bias: false,
            expert_act: Default::default(),
            weights_on_input: false,
        },
        dense_ffn: 0,
        layers: vec![LayerSpec::attention(true); 2],
        tie_embeddings: false,
        hidden_act: "silu".into(),
        bos_token_id: Some(1),
        eos_token_ids: vec![2],
        pad_token_id: None,
        scales: Default::default(),
        mla: None,
        attention_sinks: false,
        delta_net: None,
        attn_output_gate: false,
        norm_offset: 0.0,
        qk_norm_after_rope: false,
        attn_temperature: None,
    }
}

/// The tiny model of the block-quantised cases: every row length a multiple of 32 (hidden 32,
/// expert, shared-expert and dense FFN 32, 4 heads of 8 with 1 KV head, vocab 32), layer 0 MoE
/// with a gated shared expert, layer 1 dense — so every quantisable class is present.
pub fn quant_config() -> Config {
    let mut c = sized_config(32, 32, 4, 32);
    c.moe.shared_expert_ffn = 32;
    c.moe.shared_expert_gate = true;
    c.dense_ffn = 32;
    c.layers[1].moe = false;
    c
}

/// `quant_config`'s file: expert stacks q4, the other quantisable matrices q8, the rest f32.
pub fn quant_spec() -> FileSpec {
    let config = quant_config();
    let mut spec = FileSpec::new(&config, DType::F32);
    for (t, s) in spec.plan.iter_mut().zip(tensor_specs(&config)) {
        t.dtype = match s.quant {
            Some(QuantClass::Experts) => DType::Q4,
            Some(_) => DType::Q8,
            None => DType::F32,
        };
    }
    spec
}

/// The valid block-quantised model of `quant_spec` (built once per test binary).
pub fn quant_base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| build(&quant_spec()))
}

/// The layout of `quant_base()`.
pub fn quant_layout() -> &'static Layout {
    static L: OnceLock<Layout> = OnceLock::new();
    L.get_or_init(|| Layout::of(quant_base()))
}

/// A small but valid tokenizer.json-shaped blob (only its JSON validity matters to the loader).
pub const TOKENIZER_JSON: &str = r#"{"version":"1.0","model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]}}"#;
pub const CHAT_TEMPLATE: &str = "{% for m in messages %}{{ m.content }}{% endfor %}";

/// The metadata a converter would write: config, tokenizer, chat template, provenance.
pub fn default_meta(config: &Config) -> Vec<(String, MetaKind, Vec<u8>)> {
    vec![
        ("config".into(), MetaKind::Json, serde_json::to_vec(config).unwrap()),
        ("tokenizer".into(), MetaKind::Json, TOKENIZER_JSON.as_bytes().to_vec()),
        ("chat_template".into(), MetaKind::Text, CHAT_TEMPLATE.as_bytes().to_vec()),
        ("provenance".into(), MetaKind::Json, br#"{"source":"tests","dtype":"f32"}"#.to_vec()),
    ]
}

/// The tensors `config` implies, all of `dtype`, in canonical file order.
pub fn default_plan(config: &Config, dtype: DType) -> Vec<PlannedTensor> {
    tensor_specs(config)
        .into_iter()
        .map(|s| PlannedTensor { name: s.name, dtype, shape: s.shape, kind: s.kind })
        .collect()
}

/// What to write: header numbers, metadata entries and the tensor plan (norm tensors are
/// recognised by name and filled with ones, everything else with small finite values).
pub struct FileSpec {
    pub num_layers: u32,
    pub num_experts: u32,
    pub top_k: u32,
    pub meta: Vec<(String, MetaKind, Vec<u8>)>,
    pub plan: Vec<PlannedTensor>,
}

impl FileSpec {
    /// A spec consistent with `config` (all tensors of `dtype`).
    pub fn new(config: &Config, dtype: DType) -> FileSpec {
        FileSpec {
            num_layers: config.n_layers as u32,
            num_experts: config.moe.n_experts as u32,
            top_k: config.moe.top_k as u32,
            meta: default_meta(config),
            plan: default_plan(config, dtype),
        }
    }

    /// Replace the value of metadata entry `key` (kind kept).
    pub fn set_meta(&mut self, key: &str, value: &[u8]) -> &mut Self {
        let e = self.meta.iter_mut().find(|e| e.0 == key).expect("metadata key present");
        e.2 = value.to_vec();
        self
    }

    /// The plan entry called `name`.
    pub fn tensor(&mut self, name: &str) -> &mut PlannedTensor {
        self.plan.iter_mut().find(|t| t.name == name).expect("tensor in plan")
    }
}

/// Deterministic small finite values (an LCG), in [-0.125, 0.125).
fn fill_values(n: usize, seed: u64, out: &mut Vec<f32>) {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    out.clear();
    out.extend((0..n).map(|_| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.25
    }));
}

/// `values` stored as one matrix of `dtype` with rows of `cols` (the dtype table's reference
/// encoder: block types quantised, interleaved types reordered into their row groups).
pub fn encode(dtype: DType, values: &[f32], cols: usize) -> Vec<u8> {
    dtype.encode(values, cols)
}

fn is_norm_name(name: &str) -> bool {
    name == "norm" || name.ends_with("_norm")
}

/// Write `spec` to `path` with `FileWriter` and return the file's bytes.
pub fn write_file(path: &Path, spec: &FileSpec) -> Vec<u8> {
    let mut w = FileWriter::create(path, spec.num_layers, spec.num_experts, spec.top_k, &spec.meta, spec.plan.clone())
        .expect("plan a test file");
    let mut values = Vec::new();
    for (i, t) in spec.plan.iter().enumerate() {
        let n = t.shape.iter().product::<u64>() as usize;
        if is_norm_name(&t.name) {
            values.clear();
            values.resize(n, 1.0);
        } else {
            fill_values(n, i as u64 + 1, &mut values);
        }
        // Each expert of a stack is its own matrix (for block types: its quants, then its scales).
        let units = if t.kind == TensorKind::Experts { t.shape[0] as usize } else { 1 };
        let cols = t.shape.last().copied().unwrap_or(1) as usize;
        let bytes: Vec<u8> = values.chunks(n / units).flat_map(|u| encode(t.dtype, u, cols)).collect();
        w.tensor(&t.name, &bytes).expect("write tensor");
    }
    w.finish().expect("finish test file");
    std::fs::read(path).expect("read back test file")
}

/// Build `spec` in a scratch directory and return the bytes.
pub fn build(spec: &FileSpec) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("model.colibri"), spec)
}

/// The valid tiny f32 model (built once per test binary).
pub fn base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| build(&FileSpec::new(&tiny_config(), DType::F32)))
}

/// Where everything is in a valid file.
pub struct Layout {
    pub header: Header,
    pub tensors: Vec<TensorRecord>,
    /// Absolute offset of the metadata section.
    pub meta: usize,
    pub meta_len: usize,
    pub meta_keys: Vec<String>,
}

impl Layout {
    pub fn of(bytes: &[u8]) -> Layout {
        let p = format::parse(bytes).expect("layout of a valid file");
        Layout {
            meta: p.metadata_range.start,
            meta_len: p.metadata_range.len(),
            meta_keys: p.metadata.iter().map(|e| e.key.clone()).collect(),
            header: p.header,
            tensors: p.tensors,
        }
    }

    /// Table index of tensor `name`.
    pub fn index(&self, name: &str) -> usize {
        self.tensors.iter().position(|t| t.name == name).unwrap_or_else(|| panic!("no tensor {name}"))
    }

    /// The record of tensor `name`.
    pub fn record(&self, name: &str) -> &TensorRecord {
        &self.tensors[self.index(name)]
    }

    /// Absolute offset of record `i`.
    pub fn rec_at(&self, i: usize) -> usize {
        (self.header.table_offset + i as u64 * RECORD_SIZE) as usize
    }

    /// Absolute offset of the record of tensor `name`.
    pub fn rec(&self, name: &str) -> usize {
        self.rec_at(self.index(name))
    }

    /// Absolute offset of the name bytes of tensor `name` in the string table.
    pub fn name_at(&self, bytes: &[u8], name: &str) -> usize {
        self.header.strings_offset as usize + get_u32(bytes, self.rec(name) + R_NAME_OFFSET) as usize
    }

    /// Absolute offset of the data of tensor `name`.
    pub fn data(&self, name: &str) -> usize {
        self.record(name).data_offset as usize
    }

    /// Absolute offset of metadata directory entry `i`.
    pub fn entry(&self, i: usize) -> usize {
        self.meta + M_ENTRIES + i * M_ENTRY_SIZE
    }

    /// Absolute offset of the directory entry of metadata `key`.
    pub fn entry_of(&self, key: &str) -> usize {
        self.entry(self.meta_keys.iter().position(|k| k == key).unwrap_or_else(|| panic!("no metadata {key}")))
    }

    /// Absolute offset of the first padding byte after tensor `name` (before the next tensor),
    /// if there is any padding there.
    pub fn padding_after(&self, name: &str) -> Option<usize> {
        let i = self.index(name);
        let end = self.tensors[i].end();
        let next = self.tensors.get(i + 1)?.data_offset;
        (next > end).then_some(end as usize)
    }

    /// Names of the norm tensors, in table order.
    pub fn norm_names(&self, config: &Config) -> Vec<String> {
        tensor_specs(config).into_iter().filter(|s| s.role == Role::Norm).map(|s| s.name).collect()
    }
}

/// The layout of `base()`.
pub fn base_layout() -> &'static Layout {
    static L: OnceLock<Layout> = OnceLock::new();
    L.get_or_init(|| Layout::of(base()))
}

/// Recompute the checksum of tensor `i` after its data was patched.
pub fn fix_checksum(bytes: &mut [u8], layout: &Layout, i: usize) {
    let t = &layout.tensors[i];
    let sum = xxhash_rust::xxh64::xxh64(&bytes[t.data_offset as usize..t.end() as usize], 0);
    put_u64(bytes, layout.rec_at(i) + R_CHECKSUM, sum);
    reseal(bytes);
}

/// Recompute the prefix checksum (header, metadata, tables) after the prefix was patched, so
/// that a test reaches the check it is about.
pub fn reseal(bytes: &mut [u8]) {
    let h = colibri::format::Header::decode(bytes, bytes.len() as u64).expect("a header to reseal");
    if h.flags & colibri::format::FLAG_PREFIX_CHECKSUM != 0 {
        let sum = colibri::format::prefix_checksum(&bytes[..h.data_offset as usize]);
        put_u64(bytes, colibri::format::PREFIX_CHECKSUM_OFFSET, sum);
    }
}

/// The two ways of loading a file.
pub const MODES: [(&str, bool); 2] = [("mmap", true), ("read", false)];

pub fn open(path: &Path, mmap: bool) -> colibri::Result<Model> {
    Model::open(path, &LoadOptions { mmap, ..LoadOptions::default() })
}

/// A scratch directory holding the files of one test.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, bytes).expect("write scratch file");
        p
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::new()
    }
}

/// Check an error: its code is `code` and its message contains every one of `needles`.
/// Returns the message.
pub fn check_err(case: &str, err: &Error, code: &str, needles: &[&str]) -> String {
    let msg = err.to_string();
    if std::env::var_os("SHOW_ERRORS").is_some() {
        eprintln!("ERRMSG [{case}] {}: {msg}", err.code());
    }
    assert_eq!(err.code(), code, "[{case}] wrong error class; message: {msg}");
    for n in needles {
        assert!(msg.contains(n), "[{case}] message {msg:?} does not mention {n:?}");
    }
    msg
}

/// Open `bytes` (written to a scratch file) with mmap and with a plain read: both must fail with
/// `code` and a message mentioning every needle. Returns the message.
pub fn expect_open_err(case: &str, bytes: &[u8], code: &str, needles: &[&str]) -> String {
    let s = Scratch::new();
    let path = s.write("case.colibri", bytes);
    expect_path_err(case, &path, code, needles)
}

/// As `expect_open_err`, for a path.
pub fn expect_path_err(case: &str, path: &Path, code: &str, needles: &[&str]) -> String {
    let mut msg = String::new();
    for (mode, mmap) in MODES {
        match open(path, mmap) {
            Ok(_) => panic!("[{case}] ({mode}) opened successfully, expected error '{code}'"),
            Err(e) => msg = check_err(&format!("{case}, {mode}"), &e, code, needles),
        }
    }
    msg
}

/// Open `bytes` (both modes must succeed), then the full `verify` must fail with `code`.
pub fn expect_verify_err(case: &str, bytes: &[u8], code: &str, needles: &[&str]) -> String {
    let s = Scratch::new();
    let path = s.write("case.colibri", bytes);
    let mut msg = String::new();
    for (mode, mmap) in MODES {
        let model = open(&path, mmap).unwrap_or_else(|e| panic!("[{case}] ({mode}) open failed: {e} ({})", e.code()));
        match model.verify() {
            Ok(()) => panic!("[{case}] ({mode}) verify passed, expected error '{code}'"),
            Err(e) => msg = check_err(&format!("{case}, {mode}, verify"), &e, code, needles),
        }
    }
    msg
}

/// Size of the fixed header, as usize.
pub const HDR: usize = HEADER_SIZE as usize;

/// Kind id as written on disk.
pub fn kind_id(k: TensorKind) -> u32 {
    match k {
        TensorKind::Plain => 0,
        TensorKind::Router => 1,
        TensorKind::Experts => 2,
    }
}

/// The shipped default model opened through the C ABI (panics on failure).
pub fn open_default_model_c() -> *mut colibri::ffi::colibri_model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri");
    let path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut m = std::ptr::null_mut();
    // SAFETY: a valid C string and out-pointer; NULL params are the defaults.
    let st = unsafe { colibri::ffi::colibri_model_open(path.as_ptr(), std::ptr::null(), &mut m) };
    assert_eq!(st, colibri::ffi::COLIBRI_STATUS_OK);
    m
}

/// `colibri_model_get_info` of the .colibri file at `path`, opened and freed through the C ABI.
pub fn c_model_info(path: &Path) -> colibri::ffi::colibri_model_info {
    use colibri::ffi::*;
    let path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string and out-pointers; the model is freed before returning.
    unsafe {
        let mut m = std::ptr::null_mut();
        assert_eq!(colibri_model_open(path.as_ptr(), std::ptr::null(), &mut m), COLIBRI_STATUS_OK);
        let mut info = std::mem::zeroed::<colibri_model_info>();
        colibri_model_info_init(&mut info);
        assert_eq!(colibri_model_get_info(m, &mut info), COLIBRI_STATUS_OK);
        colibri_model_free(m);
        info
    }
}
