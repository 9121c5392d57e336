//! Reading safetensors checkpoints (single file, sharded with an index, or a set of shards):
//! headers are parsed and checked against each file's size; tensor bytes are read on demand with
//! positioned reads, so nothing is mapped and the converter's RSS stays small.

use crate::error::{fail, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Element type of a source tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrcDType {
    F32,
    F16,
    BF16,
    /// Bytes of MXFP4 experts (`*_blocks` / `*_scales` of a GPT-OSS checkpoint); no float value.
    U8,
    /// float8_e4m3fn with block scales (`fp8`): dequantised on reading.
    F8E4M3,
}

impl SrcDType {
    pub fn size(self) -> usize {
        match self {
            SrcDType::F32 => 4,
            SrcDType::F16 | SrcDType::BF16 => 2,
            SrcDType::U8 | SrcDType::F8E4M3 => 1,
        }
    }

    /// The float type a tensor of this dtype is stored as without `--dtype` (fp8: bf16, as
    /// DeepSeek's own fp8 → bf16 cast does); None for bytes (MXFP4 blocks and scales).
    pub fn to_colibri(self) -> Option<colibri::format::DType> {
        match self {
            SrcDType::F32 => Some(colibri::format::DType::F32),
            SrcDType::F16 => Some(colibri::format::DType::F16),
            SrcDType::BF16 | SrcDType::F8E4M3 => Some(colibri::format::DType::BF16),
            SrcDType::U8 => None,
        }
    }
}

/// One tensor inside one shard.
#[derive(Clone, Debug)]
pub struct SrcTensor {
    pub shard: usize,
    pub dtype: SrcDType,
    pub shape: Vec<u64>,
    /// Absolute byte offset of the data in the shard file.
    pub offset: u64,
    pub len: u64,
}

/// All tensors of a checkpoint directory.
pub struct Checkpoint {
    shards: Vec<(PathBuf, File)>,
    pub tensors: BTreeMap<String, SrcTensor>,
    /// The tile of fp8 weights' scales (`quantization_config.weight_block_size`), if any.
    pub fp8_block: Option<[u64; 2]>,
}

#[derive(Deserialize)]
struct RawInfo {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

#[derive(Deserialize)]
struct IndexFile {
    weight_map: HashMap<String, String>,
}

const MAX_HEADER: u64 = 100 << 20;

fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| fail(format!("reading {}: {e}", index.display())))?;
        let idx: IndexFile =
            serde_json::from_str(&text).map_err(|e| fail(format!("model.safetensors.index.json: {e}")))?;
        let mut names: Vec<String> = idx.weight_map.into_values().collect();
        names.sort();
        names.dedup();
        for n in &names {
            if n.contains('/') || n.contains("..") {
                return Err(fail(format!("index names a shard outside the checkpoint directory: {n}")));
            }
        }
        return Ok(names.into_iter().map(|n| dir.join(n)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| fail(format!("reading directory {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    found.sort();
    if found.is_empty() {
        let has_pickle = dir.join("pytorch_model.bin").exists() || dir.join("pytorch_model.bin.index.json").exists();
        return Err(fail(if has_pickle {
            "only pytorch_model.bin (pickle) weights found: colibri reads safetensors only (pickle can run code)"
                .to_string()
        } else {
            format!("no .safetensors files in {}", dir.display())
        }));
    }
    Ok(found)
}

fn parse_dtype(name: &str, dtype: &str) -> Result<SrcDType> {
    match dtype {
        "F32" => Ok(SrcDType::F32),
        "F16" => Ok(SrcDType::F16),
        "BF16" => Ok(SrcDType::BF16),
        // GPT-OSS's MXFP4 experts (`sources` pairs each *_blocks with its *_scales).
        "U8" if name.ends_with("_blocks") || name.ends_with("_scales") => Ok(SrcDType::U8),
        "F8_E4M3" => Ok(SrcDType::F8E4M3),
        "I8" | "U8" | "I4" | "U4" | "F8_E5M2" | "I32" | "U32" => Err(fail(format!(
            "tensor {name} has dtype {dtype}: the checkpoint looks already quantised; convert from the f32/f16/bf16 original"
        ))),
        other => Err(fail(format!("tensor {name} has unsupported dtype {other}"))),
    }
}

impl Checkpoint {
    /// Open every shard of the checkpoint in `dir` and index its tensors.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let mut shards = Vec::new();
        let mut tensors = BTreeMap::new();
        for (si, path) in shard_files(dir)?.into_iter().enumerate() {
            let file = File::open(&path).map_err(|e| fail(format!("opening {}: {e}", path.display())))?;
            let size = file.metadata().map_err(|e| fail(format!("stat {}: {e}", path.display())))?.len();
            let shown = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let mut len8 = [0u8; 8];
            file.read_exact_at(&mut len8, 0)
                .map_err(|_| fail(format!("{shown}: too short for a safetensors header")))?;
            let hlen = u64::from_le_bytes(len8);
            if hlen > MAX_HEADER || hlen.checked_add(8).is_none_or(|end| end > size) {
                return Err(fail(format!("{shown}: header length {hlen} is invalid for a {size}-byte file")));
            }
            let mut header = vec![0u8; hlen as usize];
            file.read_exact_at(&mut header, 8).map_err(|e| fail(format!("{shown}: reading header: {e}")))?;
            let raw: BTreeMap<String, serde_json::Value> =
                serde_json::from_slice(&header).map_err(|e| fail(format!("{shown}: header is not valid JSON: {e}")))?;
            let data_start = 8 + hlen;
            for (name, value) in raw {
                if name == "__metadata__" {
                    continue;
                }
                let info: RawInfo =
                    serde_json::from_value(value).map_err(|e| fail(format!("{shown}: entry {name}: {e}")))?;
                let dtype = parse_dtype(&name, &info.dtype)?;
                let [start, end] = info.data_offsets;
                let elems = info.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
                let want = elems.and_then(|n| n.checked_mul(dtype.size() as u64));
                if end < start || Some(end - start) != want || data_start.checked_add(end).is_none_or(|e| e > size) {
                    return Err(fail(format!("{shown}: tensor {name} has inconsistent offsets/shape")));
                }
                let t = SrcTensor { shard: si, dtype, shape: info.shape, offset: data_start + start, len: end - start };
                if tensors.insert(name.clone(), t).is_some() {
                    return Err(fail(format!("tensor {name} appears in two shards")));
                }
            }
            shards.push((path, file));
        }
        Ok(Checkpoint { shards, tensors, fp8_block: None })
    }

    /// Read `len` bytes at `offset` (relative to the tensor's data) of tensor `t` into `buf`.
    pub fn read(&self, t: &SrcTensor, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (path, file) = &self.shards[t.shard];
        if offset + buf.len() as u64 > t.len {
            return Err(fail("internal: read past a source tensor"));
        }
        file.read_exact_at(buf, t.offset + offset).map_err(|e| fail(format!("reading {}: {e}", path.display())))
    }
}
