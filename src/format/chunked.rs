//! The output stream of the file writer: bytes gathered into 2 MiB chunks written at 2 MiB
//! file offsets. Whole, aligned 2 MiB writes let a filesystem with large page-cache folios
//! (ext4 and XFS on recent kernels) cache the new file in PMD-sized folios, which a reader's
//! mapping then maps with 2 MiB pages: fewer TLB misses when decode streams the weights (Zen 4,
//! one thread, bf16 matrix-vector read: 25 GB/s through 4 KiB pages, 33 GB/s through 2 MiB
//! ones). With 1 MiB writes the folios stay small until the file is evicted and read back.

use std::fs::File;
use std::io::{self, Write};

/// Bytes per write (and the alignment of every write's file offset).
pub const CHUNK: usize = 2 << 20;

/// A file written from offset 0 in whole chunks; `into_inner` writes the partial last one.
pub struct ChunkedOut {
    file: File,
    buf: Vec<u8>,
}

impl ChunkedOut {
    pub fn new(file: File) -> ChunkedOut {
        ChunkedOut { file, buf: Vec::with_capacity(CHUNK) }
    }

    /// Write what is buffered and hand the file back.
    pub fn into_inner(mut self) -> io::Result<File> {
        self.file.write_all(&self.buf)?;
        self.buf.clear();
        Ok(self.file)
    }
}

impl Write for ChunkedOut {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let take = bytes.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&bytes[..take]);
        if self.buf.len() == CHUNK {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(take)
    }

    /// Buffered bytes stay until a chunk is whole (`into_inner` writes the rest).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn bytes_arrive_in_order_whatever_the_write_sizes() {
        let dir = std::env::temp_dir().join(format!("colibri-chunked-{}", std::process::id()));
        let file = File::create(&dir).expect("temp file");
        let want: Vec<u8> = (0..CHUNK * 2 + 12345).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = ChunkedOut::new(file);
        let mut at = 0;
        for size in [1, 4095, CHUNK + 3, 17, CHUNK].iter().cycle() {
            let end = (at + size).min(want.len());
            out.write_all(&want[at..end]).expect("write");
            at = end;
            if at == want.len() {
                break;
            }
        }
        drop(out.into_inner().expect("last chunk"));
        let mut got = Vec::new();
        File::open(&dir).expect("reopen").read_to_end(&mut got).expect("read");
        let _ = std::fs::remove_file(&dir);
        assert!(got == want, "{} bytes back of {}", got.len(), want.len());
    }
}
