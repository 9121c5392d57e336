//! A GGUF model on disk: one file, or the parts of a split model (`NAME-00001-of-00003.gguf`, with
//! `split.count` / `split.no` / `split.tensors.count` in every part) read as one. Headers are
//! parsed once; tensor bytes are read on demand with positioned reads, so nothing is mapped.

use super::parse::{self, Header, TensorInfo};
use super::value::Metadata;
use crate::error::{fail, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Most parts of a split model.
const MAX_SPLITS: u64 = 1 << 12;

/// A tensor of the model and the part holding it.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub info: TensorInfo,
    pub part: usize,
}

/// An opened GGUF model.
pub struct GgufFile {
    parts: Vec<(PathBuf, File)>,
    /// The first part's header: its metadata is the model's.
    pub header: Header,
    /// Every tensor of every part, in file order.
    pub tensors: Vec<Tensor>,
    index: HashMap<String, usize>,
}

fn open_one(path: &Path) -> Result<(File, Header)> {
    let file = File::open(path).map_err(|e| fail(format!("opening {}: {e}", path.display())))?;
    let meta = file.metadata().map_err(|e| fail(format!("stat {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(fail(format!("{} is not a regular file", path.display())));
    }
    let reader = BufReader::with_capacity(1 << 20, &file);
    let header = parse::parse(reader, meta.len()).map_err(|e| fail(format!("{}: {}", path.display(), reason(e))))?;
    Ok((file, header))
}

fn reason(e: crate::Error) -> String {
    match e {
        crate::Error::Source { reason } => reason,
        other => other.to_string(),
    }
}

/// `split.count` of a header (1 when absent).
fn split_count(m: &Metadata) -> Result<u64> {
    Ok(m.u64("split.count")?.unwrap_or(1))
}

/// The paths of all `count` parts, from the name of any one of them.
fn part_paths(path: &Path, count: u64) -> Result<Vec<PathBuf>> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let suffix = format!("-of-{count:05}.gguf");
    let stem = name
        .strip_suffix(&suffix)
        .and_then(|s| s.get(..s.len().checked_sub(6)?))
        .filter(|_| name.len() > suffix.len() + 6)
        .ok_or_else(|| {
            fail(format!(
                "{name} is part of a {count}-part split model but is not named PREFIX-0000N-of-{count:05}.gguf"
            ))
        })?;
    Ok((1..=count).map(|i| path.with_file_name(format!("{stem}-{i:05}{suffix}"))).collect())
}

impl GgufFile {
    /// Open a GGUF model (any part of a split one opens all its parts).
    pub fn open(path: &Path) -> Result<GgufFile> {
        let (file, header) = open_one(path)?;
        let count = split_count(&header.metadata)?;
        if count > MAX_SPLITS || count == 0 {
            return Err(fail(format!("{}: split.count {count} is out of range", path.display())));
        }
        if count == 1 {
            return GgufFile::assemble(vec![(path.to_path_buf(), file, header)]);
        }
        let mut parts = Vec::new();
        for (i, p) in part_paths(path, count)?.into_iter().enumerate() {
            let (f, h) = open_one(&p)?;
            let no = h.metadata.u64("split.no")?;
            if no != Some(i as u64) || split_count(&h.metadata)? != count {
                return Err(fail(format!(
                    "{}: split.no {no:?} / split.count do not match part {}",
                    p.display(),
                    i + 1
                )));
            }
            parts.push((p, f, h));
        }
        let want = parts[0].2.metadata.u64("split.tensors.count")?;
        let total: usize = parts.iter().map(|p| p.2.tensors.len()).sum();
        if want.is_some_and(|w| w != total as u64) {
            return Err(fail(format!("split model holds {total} tensors, split.tensors.count says {want:?}")));
        }
        GgufFile::assemble(parts)
    }

    fn assemble(parts: Vec<(PathBuf, File, Header)>) -> Result<GgufFile> {
        let mut tensors = Vec::new();
        let mut index = HashMap::new();
        let mut files = Vec::new();
        let mut first = None;
        for (i, (path, file, header)) in parts.into_iter().enumerate() {
            for info in &header.tensors {
                if index.insert(info.name.clone(), tensors.len()).is_some() {
                    return Err(fail(format!("tensor {} appears in two parts of the split model", info.name)));
                }
                tensors.push(Tensor { info: info.clone(), part: i });
            }
            files.push((path, file));
            first.get_or_insert(header);
        }
        let header = first.ok_or_else(|| fail("internal: a GGUF model without parts"))?;
        Ok(GgufFile { parts: files, header, tensors, index })
    }

    /// The model's metadata (the first part's).
    pub fn metadata(&self) -> &Metadata {
        &self.header.metadata
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The paths of the model's files.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.parts.iter().map(|(p, _)| p.as_path())
    }

    /// Read `buf.len()` bytes at `offset` into tensor `t`'s data.
    pub fn read(&self, t: &Tensor, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (path, file) = &self.parts[t.part];
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > t.info.bytes) {
            return Err(fail(format!("internal: read past tensor {}", t.info.name)));
        }
        file.read_exact_at(buf, t.info.offset + offset).map_err(|e| fail(format!("reading {}: {e}", path.display())))
    }
}
