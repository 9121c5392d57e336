//! Streaming writer of .colibri files: the layout is planned up front from the tensor list,
//! data is streamed tensor by tensor (checksummed on the way), the table is rewritten with the
//! checksums at the end, and the file appears under its final name only after fsync + rename.

use super::chunked::ChunkedOut;
use super::header::{prefix_checksum, Header, FLAG_PREFIX_CHECKSUM, HEADER_SIZE, VERSION};
use super::metadata::{self, MetaKind};
use super::table::{TensorKind, TensorRecord, RECORD_SIZE};
use super::{align_up, DType, EXPERT_ALIGN};
use crate::error::{Error, Result};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh64::Xxh64;

/// A tensor to be written: its place in the file follows from the order of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub kind: TensorKind,
}

/// What a finished write produced.
#[derive(Clone, Debug)]
pub struct WriteSummary {
    pub path: PathBuf,
    pub file_size: u64,
    pub tensor_count: usize,
}

/// Writes one .colibri file through a temporary file next to the destination.
pub struct FileWriter {
    final_path: PathBuf,
    tmp_path: PathBuf,
    out: Option<ChunkedOut>,
    header: Header,
    records: Vec<TensorRecord>,
    meta: Vec<u8>,
    strings: Vec<u8>,
    name_offsets: Vec<u32>,
    /// Index of the tensor being written, if any.
    current: Option<usize>,
    /// Tensors completed so far.
    done: usize,
    /// Bytes of the current tensor's payload written (expert gaps excluded).
    payload: u64,
    hasher: Xxh64,
    pos: u64,
}

fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(op, e)
}

fn overflow() -> Error {
    Error::InvalidArgument { reason: "tensor sizes overflow the file layout".into() }
}

/// The records of `tensors` laid out from `data_offset` (each at its kind's alignment, right
/// after the previous one), and the end of the last: the file size.
fn plan_records(tensors: Vec<PlannedTensor>, data_offset: u64, num_experts: u32) -> Result<(Vec<TensorRecord>, u64)> {
    let mut records = Vec::with_capacity(tensors.len());
    let mut cursor = data_offset;
    for t in tensors {
        TensorRecord::check_block_shape(t.dtype, &t.shape, t.kind)
            .map_err(|reason| Error::InvalidArgument { reason: format!("'{}': {reason}", t.name) })?;
        let (byte_length, expert_stride) = TensorRecord::layout_for(t.dtype, &t.shape, t.kind).ok_or_else(overflow)?;
        if t.kind != TensorKind::Plain && t.shape.first() != Some(&u64::from(num_experts)) {
            return Err(Error::InvalidArgument { reason: format!("'{}' does not have {num_experts} experts", t.name) });
        }
        let data_offset = align_up(cursor, t.kind.align()).ok_or_else(overflow)?;
        cursor = data_offset.checked_add(byte_length).ok_or_else(overflow)?;
        records.push(TensorRecord {
            name: t.name,
            dtype: t.dtype,
            shape: t.shape,
            data_offset,
            byte_length,
            expert_stride,
            checksum: 0,
            group_size: t.dtype.group_size(),
            kind: t.kind,
        });
    }
    Ok((records, cursor))
}

/// A new temporary file next to `path` (same directory, so the final rename is atomic).
fn temp_file(path: &Path) -> Result<(PathBuf, File)> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::InvalidArgument { reason: format!("output path {} has no file name", path.display()) })?;
    let tmp_path = dir.join(format!(".{}.{}.tmp", file_name.to_string_lossy(), std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp_path)
        .map_err(io("create temporary output file"))?;
    Ok((tmp_path, file))
}

impl FileWriter {
    /// Plan the layout and start the temporary file. `num_experts` / `top_k` go to the header;
    /// every router and expert stack must have `num_experts` as its first dimension.
    pub fn create(
        path: &Path,
        num_layers: u32,
        num_experts: u32,
        top_k: u32,
        meta: &[(String, MetaKind, Vec<u8>)],
        tensors: Vec<PlannedTensor>,
    ) -> Result<FileWriter> {
        if tensors.is_empty() {
            return Err(Error::InvalidArgument { reason: "a .colibri file needs at least one tensor".into() });
        }
        let meta_bytes = metadata::encode(meta)?;
        let mut strings = Vec::new();
        let mut name_offsets = Vec::with_capacity(tensors.len());
        for t in &tensors {
            name_offsets.push(u32::try_from(strings.len()).map_err(|_| overflow())?);
            strings.extend_from_slice(t.name.as_bytes());
        }
        let metadata_offset = HEADER_SIZE;
        let metadata_size = meta_bytes.len() as u64;
        let table_offset = align_up(metadata_offset + metadata_size, 8).ok_or_else(overflow)?;
        let table_size = tensors.len() as u64 * RECORD_SIZE;
        let strings_offset = table_offset + table_size;
        let data_offset = align_up(strings_offset + strings.len() as u64, EXPERT_ALIGN).ok_or_else(overflow)?;

        let (records, cursor) = plan_records(tensors, data_offset, num_experts)?;
        let routers: Vec<&TensorRecord> = records.iter().filter(|r| r.kind == TensorKind::Router).collect();
        let header = Header {
            version: VERSION,
            num_experts,
            num_layers,
            header_size: HEADER_SIZE as u32,
            tensor_count: u32::try_from(records.len()).map_err(|_| overflow())?,
            routing_offset: routers.first().map(|r| r.data_offset).unwrap_or(0),
            data_offset,
            metadata_offset,
            metadata_size,
            table_offset,
            table_size,
            strings_offset,
            strings_size: strings.len() as u64,
            file_size: cursor,
            record_size: RECORD_SIZE as u32,
            flags: FLAG_PREFIX_CHECKSUM,
            top_k,
            num_moe_layers: routers.len() as u32,
            prefix_checksum: 0,
        };

        let (tmp_path, file) = temp_file(path)?;
        let out = match ChunkedOut::new(file) {
            Ok(out) => out,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp_path);
                return Err(Error::io("start the output writer thread", e));
            }
        };
        let mut w = FileWriter {
            final_path: path.to_path_buf(),
            tmp_path,
            out: Some(out),
            header,
            records,
            meta: meta_bytes,
            strings,
            name_offsets,
            current: None,
            done: 0,
            payload: 0,
            hasher: Xxh64::new(0),
            pos: 0,
        };
        w.write_prefix()?;
        Ok(w)
    }

    /// The planned records (offsets are final; checksums are filled as tensors complete).
    pub fn records(&self) -> &[TensorRecord] {
        &self.records
    }

    /// The planned header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        let out =
            self.out.as_mut().ok_or_else(|| Error::InvalidArgument { reason: "writer already finished".into() })?;
        out.write_all(bytes).map_err(io("write output file"))?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn zeros_to(&mut self, target: u64) -> Result<()> {
        const Z: [u8; 4096] = [0; 4096];
        while self.pos < target {
            let n = (target - self.pos).min(Z.len() as u64) as usize;
            self.raw(&Z[..n])?;
        }
        Ok(())
    }

    fn table_bytes(&self) -> Vec<u8> {
        let mut t = Vec::with_capacity(self.records.len() * RECORD_SIZE as usize);
        for (r, &off) in self.records.iter().zip(&self.name_offsets) {
            t.extend_from_slice(&r.encode(off));
        }
        t
    }

    /// Every byte before the data section: header, metadata, table, strings and padding.
    fn prefix_bytes(&self) -> Vec<u8> {
        let h = &self.header;
        let mut p = Vec::with_capacity(h.data_offset as usize);
        p.extend_from_slice(&h.encode());
        p.extend_from_slice(&self.meta);
        p.resize(h.table_offset as usize, 0);
        p.extend_from_slice(&self.table_bytes());
        p.extend_from_slice(&self.strings);
        p.resize(h.data_offset as usize, 0);
        p
    }

    fn write_prefix(&mut self) -> Result<()> {
        let prefix = self.prefix_bytes();
        self.raw(&prefix)
    }

    /// Start the next tensor; `name` must be the next one in the plan.
    pub fn begin(&mut self, name: &str) -> Result<()> {
        if self.current.is_some() {
            return Err(Error::InvalidArgument { reason: format!("begin('{name}') while another tensor is open") });
        }
        let rec = self.records.get(self.done).ok_or_else(|| Error::InvalidArgument {
            reason: format!("begin('{name}'): all planned tensors are written"),
        })?;
        if rec.name != name {
            return Err(Error::InvalidArgument {
                reason: format!("begin('{name}'): the plan expects '{}' next", rec.name),
            });
        }
        let start = rec.data_offset;
        self.zeros_to(start)?;
        self.current = Some(self.done);
        self.payload = 0;
        self.hasher = Xxh64::new(0);
        Ok(())
    }

    /// Append payload bytes (the row-major elements, experts one after another; for block types
    /// each expert's quants then its scales) to the open tensor; the zero gaps between experts
    /// are inserted automatically.
    pub fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        let i = self.current.ok_or_else(|| Error::InvalidArgument { reason: "write() with no open tensor".into() })?;
        let (unit, stride, total_units) = {
            let r = &self.records[i];
            (r.unit_bytes(), r.expert_stride.max(r.unit_bytes()), r.units())
        };
        let total = unit * total_units;
        if self.payload + bytes.len() as u64 > total {
            return Err(Error::InvalidArgument {
                reason: format!("tensor '{}' receives more than its {total} bytes", self.records[i].name),
            });
        }
        while !bytes.is_empty() {
            let in_unit = self.payload % unit;
            let take = ((unit - in_unit) as usize).min(bytes.len());
            let (head, rest) = bytes.split_at(take);
            self.hasher.update(head);
            self.raw(head)?;
            self.payload += take as u64;
            bytes = rest;
            if self.payload.is_multiple_of(unit) && self.payload < total {
                let gap = (stride - unit) as usize;
                let zeros = vec![0u8; gap];
                self.hasher.update(&zeros);
                self.raw(&zeros)?;
            }
        }
        Ok(())
    }

    /// Close the open tensor; its payload must be complete.
    pub fn end(&mut self) -> Result<()> {
        let i =
            self.current.take().ok_or_else(|| Error::InvalidArgument { reason: "end() with no open tensor".into() })?;
        let r = &self.records[i];
        let total = r.unit_bytes() * r.units();
        if self.payload != total {
            return Err(Error::InvalidArgument {
                reason: format!("tensor '{}' got {} of its {total} bytes", r.name, self.payload),
            });
        }
        self.records[i].checksum = self.hasher.digest();
        self.done += 1;
        Ok(())
    }

    /// Write a whole tensor at once.
    pub fn tensor(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.begin(name)?;
        self.write(bytes)?;
        self.end()
    }

    /// Finish: rewrite the table with checksums, fsync, rename over the destination, fsync the
    /// directory. Until this returns Ok, the destination path is untouched.
    pub fn finish(mut self) -> Result<WriteSummary> {
        if self.current.is_some() || self.done != self.records.len() {
            return Err(Error::InvalidArgument {
                reason: format!("finish() after {} of {} tensors", self.done, self.records.len()),
            });
        }
        // The table now holds every checksum; the prefix checksum covers it.
        self.header.prefix_checksum = 0;
        self.header.prefix_checksum = prefix_checksum(&self.prefix_bytes());
        let prefix = self.prefix_bytes();
        let out = self.out.take().ok_or_else(|| Error::InvalidArgument { reason: "writer already finished".into() })?;
        let tmp = self.tmp_path.clone();
        let publish = || -> Result<()> {
            let mut file = out.into_inner().map_err(io("flush output file"))?;
            file.seek(SeekFrom::Start(0)).map_err(io("seek output file"))?;
            file.write_all(&prefix).map_err(io("write header and tensor table"))?;
            file.sync_all().map_err(io("fsync output file"))?;
            drop(file);
            std::fs::rename(&tmp, &self.final_path).map_err(io("rename output file"))
        };
        if let Err(e) = publish() {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        if let Some(dir) = self.final_path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(WriteSummary {
            path: self.final_path.clone(),
            file_size: self.header.file_size,
            tensor_count: self.records.len(),
        })
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // An unfinished write leaves nothing behind.
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp_path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Vec<PlannedTensor> {
        vec![
            PlannedTensor { name: "r".into(), dtype: DType::F32, shape: vec![2, 3], kind: TensorKind::Router },
            PlannedTensor { name: "x".into(), dtype: DType::F16, shape: vec![2, 3, 5], kind: TensorKind::Experts },
        ]
    }

    #[test]
    fn an_unfinished_write_leaves_no_file_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.colibri");
        {
            let mut w = FileWriter::create(&path, 1, 2, 1, &[], plan()).unwrap();
            w.tensor("r", &[0u8; 24]).unwrap();
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn tensors_must_follow_the_plan_and_have_exact_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.colibri");
        let mut w = FileWriter::create(&path, 1, 2, 1, &[], plan()).unwrap();
        assert!(w.begin("x").is_err(), "out of order");
        w.begin("r").unwrap();
        assert!(w.write(&[0u8; 25]).is_err(), "too many bytes");
        w.write(&[0u8; 20]).unwrap();
        assert!(w.end().is_err(), "too few bytes");
    }

    #[test]
    fn experts_are_page_aligned_with_zero_gaps_and_the_file_parses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.colibri");
        let mut w = FileWriter::create(&path, 1, 2, 1, &[], plan()).unwrap();
        w.tensor("r", &[1u8; 24]).unwrap();
        w.tensor("x", &[7u8; 60]).unwrap();
        let s = w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, s.file_size);
        let p = crate::format::parse(&bytes).unwrap();
        let x = p.tensor("x").unwrap();
        assert_eq!(x.data_offset % 4096, 0);
        assert_eq!(x.expert_stride, 4096);
        let at = x.data_offset as usize;
        assert!(bytes[at..at + 30].iter().all(|&b| b == 7));
        assert!(bytes[at + 30..at + 4096].iter().all(|&b| b == 0));
        assert!(bytes[at + 4096..at + 4126].iter().all(|&b| b == 7));
        assert_eq!(p.header.routing_offset, p.tensor("r").unwrap().data_offset);
        crate::format::verify_data(&bytes, &p).unwrap();
    }

    #[test]
    fn block_tensors_get_their_group_and_bad_block_shapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.colibri");
        let q = |shape: Vec<u64>, kind| vec![PlannedTensor { name: "w".into(), dtype: DType::Q4, shape, kind }];
        for (shape, kind, why) in [
            (vec![64], TensorKind::Plain, "2-D matrix"),
            (vec![4, 48], TensorKind::Plain, "row length 48"),
            (vec![2, 4, 48], TensorKind::Experts, "row length 48"),
        ] {
            let e = FileWriter::create(&path, 1, 2, 1, &[], q(shape, kind)).err().expect("refused");
            assert!(e.to_string().contains(why), "{e}");
        }
        let w = FileWriter::create(&path, 1, 2, 1, &[], q(vec![2, 3, 64], TensorKind::Experts)).unwrap();
        let r = &w.records()[0];
        assert_eq!((r.group_size, r.unit_bytes(), r.expert_stride), (32, 3 * 64 / 2 + 3 * 2 * 2, 4096));
    }
}
