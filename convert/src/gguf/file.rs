//! A GGUF model on disk: one file, or the parts of a split model (`NAME-00001-of-00003.gguf`, with
//! `split.count` / `split.no` / `split.tensors.count` in every part) read as one. Headers are
//! parsed once; tensor bytes are read on demand with positioned reads, so nothing is mapped.
//! Bulk spans are read straight from the device (`O_DIRECT`, whole 4 KiB blocks around the
//! span into a page-aligned buffer) where the filesystem allows it: a cold model file then
//! costs no copy out of the page cache, which had become the largest CPU cost of a conversion
//! once its writes went direct (`_copy_to_iter` under `pread`: 38 % of its cycles).

use super::parse::{self, Header, TensorInfo};
use super::value::Metadata;
use crate::error::{fail, Result};
use colibri::format::{direct_io_wanted, AlignedBuf, IO_ALIGN};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::BufReader;
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Most parts of a split model.
const MAX_SPLITS: u64 = 1 << 12;

/// A tensor of the model and the part holding it.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub info: TensorInfo,
    pub part: usize,
}

/// One file of the model: its path, a descriptor, and one opened for direct reads (None when
/// the filesystem refuses `O_DIRECT` or `COLIBRI_DIRECT_IO=off`).
struct Part {
    path: PathBuf,
    file: File,
    direct: Option<File>,
}

impl Part {
    fn error(&self, e: impl std::fmt::Display) -> crate::Error {
        fail(format!("reading {}: {e}", self.path.display()))
    }

    /// The whole 4 KiB blocks around `len` bytes at `at` read into `buf` from the direct
    /// descriptor, and where the span lies in it; after a short read that is not a whole number
    /// of blocks, or a refusal (EINVAL: `direct_ok` is cleared for later spans), the rest
    /// through the page cache.
    fn read_blocks(&self, at: u64, len: usize, buf: &mut AlignedBuf, direct_ok: &AtomicBool) -> Result<Range<usize>> {
        let direct = self.direct.as_ref().ok_or_else(|| fail("internal: no direct descriptor"))?;
        let start = at / IO_ALIGN as u64 * IO_ALIGN as u64;
        let head = (at - start) as usize;
        let need = head + len;
        buf.set_len(need.next_multiple_of(IO_ALIGN));
        let mut got = 0;
        while got < need && got % IO_ALIGN == 0 {
            match direct.read_at(&mut buf.bytes_mut()[got..], start + got as u64) {
                Ok(0) => return Err(self.error("the file ends early")),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    direct_ok.store(false, Ordering::Relaxed);
                    break;
                }
                Err(e) => return Err(self.error(e)),
            }
        }
        if got < need {
            self.file.read_exact_at(&mut buf.bytes_mut()[got..need], start + got as u64).map_err(|e| self.error(e))?;
        }
        Ok(head..need)
    }
}

/// An opened GGUF model.
pub struct GgufFile {
    parts: Vec<Part>,
    /// Cleared when a direct read is refused (EINVAL): every later span is read buffered.
    direct_ok: AtomicBool,
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
        let wanted = direct_io_wanted();
        for (i, (path, file, header)) in parts.into_iter().enumerate() {
            for info in &header.tensors {
                if index.insert(info.name.clone(), tensors.len()).is_some() {
                    return Err(fail(format!("tensor {} appears in two parts of the split model", info.name)));
                }
                tensors.push(Tensor { info: info.clone(), part: i });
            }
            let direct =
                if wanted { OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path).ok() } else { None };
            files.push(Part { path, file, direct });
            first.get_or_insert(header);
        }
        let header = first.ok_or_else(|| fail("internal: a GGUF model without parts"))?;
        Ok(GgufFile { parts: files, direct_ok: AtomicBool::new(true), header, tensors, index })
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
        self.parts.iter().map(|p| p.path.as_path())
    }

    /// Read `buf.len()` bytes at `offset` into tensor `t`'s data (through the page cache).
    pub fn read(&self, t: &Tensor, offset: u64, buf: &mut [u8]) -> Result<()> {
        let part = self.check(t, offset, buf.len())?;
        part.file.read_exact_at(buf, t.info.offset + offset).map_err(|e| part.error(e))
    }

    /// The `len` bytes at `offset` into tensor `t`'s data, read into `buf` — directly from the
    /// device where that is possible (module comment), else through the page cache.
    pub fn read_span<'b>(&self, t: &Tensor, offset: u64, len: usize, buf: &'b mut AlignedBuf) -> Result<&'b mut [u8]> {
        let part = self.check(t, offset, len)?;
        if len > 0 && part.direct.is_some() && self.direct_ok.load(Ordering::Relaxed) {
            let span = part.read_blocks(t.info.offset + offset, len, buf, &self.direct_ok)?;
            return Ok(&mut buf.bytes_mut()[span]);
        }
        buf.set_len(len);
        self.read(t, offset, buf.bytes_mut())?;
        Ok(buf.bytes_mut())
    }

    /// The part holding `t`, once `len` bytes at `offset` are known to lie inside its data.
    fn check(&self, t: &Tensor, offset: u64, len: usize) -> Result<&Part> {
        if offset.checked_add(len as u64).is_none_or(|end| end > t.info.bytes) {
            return Err(fail(format!("internal: read past tensor {}", t.info.name)));
        }
        Ok(&self.parts[t.part])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans of every tensor of a committed fixture read both ways: straight from the device
    /// (when the filesystem takes O_DIRECT) and through the page cache, at offsets and lengths
    /// that are not block multiples, up to the last byte of the file.
    #[test]
    fn direct_spans_equal_buffered_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf/qwen3_next_hybrid.f32.gguf");
        let f = GgufFile::open(&path).expect("fixture");
        let mut buf = AlignedBuf::default();
        let mut spans = 0;
        for t in &f.tensors {
            let n = t.info.bytes;
            for (off, len) in [(0, n), (n / 3, n - n / 3), (1, n.saturating_sub(1) / 2), (n, 0)] {
                let mut want = vec![0u8; len as usize];
                f.read(t, off, &mut want).expect("buffered read");
                let got = f.read_span(t, off, len as usize, &mut buf).expect("span");
                assert!(got == want.as_slice(), "{} at {off}+{len}", t.info.name);
                spans += 1;
            }
        }
        assert!(spans > 0);
        assert!(f.read_span(&f.tensors[0], f.tensors[0].info.bytes, 1, &mut buf).is_err(), "past the tensor");
    }
}
