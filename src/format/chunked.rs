//! The output stream of the file writer: bytes gathered into 2 MiB chunks written at 2 MiB
//! file offsets by a writer thread, straight to the device (`O_DIRECT`) where the filesystem
//! allows it, while the caller fills the next chunk.
//!
//! Direct writes skip the copy into the page cache, which was the largest CPU cost of a
//! conversion (`copy_folio_from_iter_atomic` under `write`: 42 % of its cycles), so the writer
//! thread mostly waits on the device and the conversion's reading and re-laying-out overlap
//! with it. They also leave the new file out of the cache: its first reader maps it from disk,
//! where read-ahead fills 2 MiB folios that the mapping then maps with 2 MiB pages. Where the
//! filesystem refuses direct I/O (tmpfs, some network filesystems), or with
//! `COLIBRI_DIRECT_IO=off`, the chunks go through the page cache; whole, aligned 2 MiB
//! writes then still let a filesystem with large folios (ext4 and XFS on recent kernels) cache
//! the file in PMD-sized folios.

use super::aligned::{direct_io_wanted, AlignedBuf};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Bytes per write (and the alignment of every write's file offset).
pub const CHUNK: usize = 2 << 20;

/// Chunk buffers in flight: one being filled, the others queued or being written.
const BUFFERS: usize = 3;

/// A page-aligned chunk buffer and the bytes of it filled so far.
struct Chunk {
    buf: AlignedBuf,
    len: usize,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk { buf: AlignedBuf::with_len(CHUNK), len: 0 }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf.bytes()[..self.len]
    }

    /// Append what fits of `bytes`; the count taken.
    fn fill(&mut self, bytes: &[u8]) -> usize {
        let take = bytes.len().min(CHUNK - self.len);
        self.buf.bytes_mut()[self.len..self.len + take].copy_from_slice(&bytes[..take]);
        self.len += take;
        take
    }
}

/// Set or clear `O_DIRECT` on `file`; false when the filesystem refuses it.
fn set_direct(file: &File, on: bool) -> bool {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this process owns; F_GETFL / F_SETFL read and set its flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return false;
        }
        let flags = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
        libc::fcntl(fd, libc::F_SETFL, flags) == 0
    }
}

/// The writer thread's side: the file, the offset of the next chunk, whether it is still
/// direct, the first error.
struct Sink {
    file: File,
    at: u64,
    direct: bool,
    error: Option<io::Error>,
}

impl Sink {
    /// Write one chunk at `at` with positioned writes, resuming after a short one; a direct
    /// write the filesystem rejects (EINVAL: an alignment or a short count it does not accept)
    /// continues through the page cache from where it stopped, which later chunks then use too.
    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < chunk.len() {
            match self.file.write_at(&chunk[done..], self.at + done as u64) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the output file took no bytes")),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    self.direct = false;
                    if !set_direct(&self.file, false) {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        self.at += chunk.len() as u64;
        Ok(())
    }

    /// Write every chunk that arrives, handing each buffer back, until the sender is dropped or
    /// a write fails (the caller's next hand-over then finds the thread gone and joins it).
    fn run(mut self, full: Receiver<Chunk>, free: SyncSender<Chunk>) -> Sink {
        for mut chunk in full {
            if let Err(e) = self.write(chunk.bytes()) {
                self.error = Some(e);
                break;
            }
            chunk.len = 0;
            let _ = free.send(chunk);
        }
        self
    }
}

/// A file written from offset 0 in whole chunks; `into_inner` writes the partial last one.
pub struct ChunkedOut {
    current: Chunk,
    full: Option<SyncSender<Chunk>>,
    free: Receiver<Chunk>,
    writer: Option<JoinHandle<Sink>>,
}

fn writer_gone() -> io::Error {
    io::Error::other("the output file's writer thread stopped")
}

impl ChunkedOut {
    /// Start the writer thread for `file` (written from its current offset, 0).
    pub fn new(file: File) -> io::Result<ChunkedOut> {
        let direct = direct_io_wanted() && set_direct(&file, true);
        let (full_tx, full_rx) = mpsc::sync_channel::<Chunk>(BUFFERS);
        let (free_tx, free_rx) = mpsc::sync_channel::<Chunk>(BUFFERS);
        for _ in 1..BUFFERS {
            free_tx.send(Chunk::new()).map_err(|_| writer_gone())?;
        }
        let sink = Sink { file, at: 0, direct, error: None };
        let writer =
            std::thread::Builder::new().name("colibri-write".into()).spawn(move || sink.run(full_rx, free_tx))?;
        Ok(ChunkedOut { current: Chunk::new(), full: Some(full_tx), free: free_rx, writer: Some(writer) })
    }

    /// Hand the full current chunk to the writer thread and take a free buffer; a thread that
    /// stopped on a write error is joined and its error returned at once.
    fn pass_on(&mut self) -> io::Result<()> {
        let handed = match self.free.recv() {
            Ok(next) => {
                let full = std::mem::replace(&mut self.current, next);
                self.full.as_ref().is_some_and(|tx| tx.send(full).is_ok())
            }
            Err(_) => false,
        };
        if handed {
            return Ok(());
        }
        drop(self.full.take());
        let sink = self.writer.take().ok_or_else(writer_gone)?.join().map_err(|_| writer_gone())?;
        Err(sink.error.unwrap_or_else(writer_gone))
    }

    /// Wait for the writer thread, write what is buffered (through the page cache: the last
    /// chunk is partial) and hand the file back, without `O_DIRECT`; the first write error of
    /// any chunk is returned here.
    pub fn into_inner(mut self) -> io::Result<File> {
        drop(self.full.take());
        let sink = self.writer.take().ok_or_else(writer_gone)?.join().map_err(|_| writer_gone())?;
        let Sink { file, at, direct, error } = sink;
        if let Some(e) = error {
            return Err(e);
        }
        if direct && !set_direct(&file, false) {
            return Err(io::Error::other("cannot clear O_DIRECT on the output file"));
        }
        file.write_all_at(self.current.bytes(), at)?;
        Ok(file)
    }
}

impl Drop for ChunkedOut {
    /// An abandoned stream still stops its writer thread.
    fn drop(&mut self) {
        drop(self.full.take());
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Write for ChunkedOut {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let take = self.current.fill(bytes);
        if self.current.len == CHUNK {
            self.pass_on()?;
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

    fn roundtrip(dir: &std::path::Path) {
        let path = dir.join(format!("colibri-chunked-{}", std::process::id()));
        let file = File::create(&path).expect("temp file");
        let want: Vec<u8> = (0..CHUNK * 5 + 12345).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = ChunkedOut::new(file).expect("writer");
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
        File::open(&path).expect("reopen").read_to_end(&mut got).expect("read");
        let _ = std::fs::remove_file(&path);
        assert!(got == want, "{} bytes back of {} in {}", got.len(), want.len(), dir.display());
    }

    #[test]
    fn bytes_arrive_in_order_whatever_the_write_sizes() {
        // The system's temp dir (tmpfs on some systems: no direct I/O) and the package's own
        // folder (a disk filesystem, which takes direct writes).
        roundtrip(&std::env::temp_dir());
        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("temp dir");
        roundtrip(disk.path());
    }

    #[test]
    fn a_write_error_is_returned_not_lost() {
        // A read-only descriptor: every chunk's write fails in the writer thread.
        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("temp dir");
        let path = disk.path().join("ro");
        std::fs::write(&path, b"").expect("create");
        let mut out = ChunkedOut::new(File::open(&path).expect("open")).expect("writer");
        let mut failed = false;
        for _ in 0..BUFFERS + 2 {
            failed |= out.write_all(&vec![1u8; CHUNK]).is_err();
        }
        assert!(failed || out.into_inner().is_err(), "a failed chunk write went unreported");
    }
}
