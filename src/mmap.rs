//! The only file with OS mapping calls: open a model file safely (refusing directories, FIFOs and
//! devices without blocking), map it read-only and shared, or read it into aligned memory for
//! filesystems where mmap is unsafe; lock and advise on request.

use crate::error::{Error, Result};
use crate::threads::ThreadOptions;
use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// How to bring a model file into memory, and the model's worker pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Map the file (default). When false, read it into an aligned heap buffer: every byte is
    /// copied into anonymous memory (measured ≈2 s per GB here, and RSS = file size), so use it
    /// only where mmap is unsafe (e.g. network filesystems that may change under the mapping).
    pub mmap: bool,
    /// Lock the pages in RAM (mlock); fails if RLIMIT_MEMLOCK is too small.
    pub mlock: bool,
    /// Ask for transparent huge pages (MADV_HUGEPAGE; default on): page faults on a file not
    /// yet in the page cache then read it in 2 MiB folios, which the mapping maps with 2 MiB
    /// pages (without it, a file read only through the mapping — one just written by `convert`
    /// with direct I/O — gets 4 KiB pages: 3 % against 99 % in 2 MiB pages measured on Zen 4 /
    /// Linux 6.18, and one Zen 4 thread streams weights at ~25 GB/s through 4 KiB pages, ~33
    /// through 2 MiB ones). A hint: ignored where transparent huge pages are `never`.
    pub hugepages: bool,
    /// Ask the kernel to read the whole file ahead (MADV_WILLNEED); a hint.
    pub willneed: bool,
    /// Register the mapping with the SIGBUS guard (`crate::sigbus`; installs it): a read past
    /// the end of a file truncated or rewritten in place then fails the forward pass with
    /// `Error::ModelChanged` instead of killing the process. Off by default for library hosts.
    pub sigbus_guard: bool,
    /// The model's worker pool (`Model::open` makes it; the mapping does not read it): its
    /// size (0 = the physical cores) and pinning.
    pub threads: ThreadOptions,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            mmap: true,
            mlock: false,
            hugepages: true,
            willneed: false,
            sigbus_guard: false,
            threads: ThreadOptions::default(),
        }
    }
}

/// A heap buffer aligned to 4096 bytes, like a mapping.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is uniquely owned and only read after construction.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads the bytes, which never change after construction.
unsafe impl Sync for AlignedBuf {}

const PAGE: usize = 4096;

impl AlignedBuf {
    fn zeroed(len: usize) -> Result<AlignedBuf> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), PAGE)
            .map_err(|_| Error::InvalidArgument { reason: format!("cannot allocate {len} bytes") })?;
        // A refused buffer is an error the caller reports (the size comes from the file).
        // SAFETY: layout has non-zero size.
        let ptr = crate::fallible::scope(|| unsafe { std::alloc::alloc_zeroed(layout) });
        let ptr = std::ptr::NonNull::new(ptr)
            .ok_or_else(|| Error::OutOfMemory { what: "the model file read into memory".into(), bytes: len as u64 })?;
        Ok(AlignedBuf { ptr, len })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Ok(layout) = std::alloc::Layout::from_size_align(self.len.max(1), PAGE) {
            // SAFETY: allocated with this layout in `zeroed`.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

enum Storage {
    Mapped(memmap2::Mmap),
    Heap(AlignedBuf),
}

/// What identifies the file's contents when it was mapped: a rewrite in place changes the size
/// or the modification time of the same inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime: (i64, i64),
}

fn stamp(file: &File) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().ok()?;
    Some(Stamp { size: m.size(), mtime: (m.mtime(), m.mtime_nsec()) })
}

/// The bytes of a model file, read-only, page-aligned, alive as long as this value.
pub struct Mapping {
    // Unregistered from the SIGBUS guard before the mapping goes.
    guard: Option<crate::sigbus::Registration>,
    storage: Storage,
    locked: bool,
    /// The mapped file and its stamp at open (mapped storage only).
    file: Option<(File, Stamp)>,
}

/// Open `path` for reading, refusing anything that is not a regular file. Opening is
/// non-blocking so that a FIFO cannot hang the caller.
pub fn open_regular(path: &Path) -> Result<(File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat model file", e))?;
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        Some("directory")
    } else if ft.is_fifo() {
        Some("FIFO")
    } else if ft.is_socket() {
        Some("socket")
    } else if ft.is_block_device() || ft.is_char_device() {
        Some("device")
    } else {
        None
    };
    if let Some(kind) = kind {
        return Err(Error::NotAFile { kind });
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io("open model file", e))?;
    let meta = file.metadata().map_err(|e| Error::io("stat model file", e))?;
    if !meta.file_type().is_file() {
        return Err(Error::NotAFile { kind: "special file" });
    }
    Ok((file, meta.len()))
}

impl Mapping {
    /// Open and map (or read) the file at `path`. Never reads past the real file size.
    pub fn open(path: &Path, opts: &LoadOptions) -> Result<Mapping> {
        let (file, size) = open_regular(path)?;
        if size < crate::format::HEADER_SIZE {
            return Err(Error::FileTooSmall { size, need: crate::format::HEADER_SIZE });
        }
        let len = usize::try_from(size).map_err(|_| Error::TooLarge {
            what: "file size",
            value: size,
            cap: usize::MAX as u64,
        })?;
        let storage = if opts.mmap {
            // SAFETY: the mapping is read-only; replacing the file in place while mapped is
            // documented as unsupported (write a new file and rename instead).
            let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file) }
                .map_err(|e| Error::io("mmap model file", e))?;
            if opts.hugepages {
                let _ = map.advise(memmap2::Advice::HugePage);
            }
            if opts.willneed {
                let _ = map.advise(memmap2::Advice::WillNeed);
            }
            Storage::Mapped(map)
        } else {
            // The header first: a file that is not a model (or lies about its size) is refused
            // before a buffer of its size is asked for.
            let mut head = [0u8; crate::format::HEADER_SIZE as usize];
            read_fully(&file, &mut head)?;
            crate::format::Header::decode(&head, size)?;
            let mut buf = AlignedBuf::zeroed(len)?;
            read_fully(&file, buf.as_mut_slice())?;
            Storage::Heap(buf)
        };
        let mut m = Mapping { guard: None, storage, locked: false, file: None };
        if let Storage::Mapped(_) = m.storage {
            if opts.sigbus_guard {
                crate::sigbus::install()?;
                m.guard = crate::sigbus::Registration::new(m.bytes());
            }
            m.file = stamp(&file).map(|s| (file, s));
        }
        if opts.mlock {
            m.lock()?;
        }
        Ok(m)
    }

    /// Why the mapped bytes can no longer be trusted, if they cannot: the file was truncated or
    /// rewritten in place after it was mapped (its size or modification time changed), or the
    /// SIGBUS guard absorbed a read past its new end. None for a file read into memory.
    pub fn changed(&self) -> Option<&'static str> {
        if self.guard.as_ref().is_some_and(|g| g.poisoned()) {
            return Some("a read past its new end was absorbed (the file shrank under the mapping)");
        }
        let (file, at_open) = self.file.as_ref()?;
        (stamp(file) != Some(*at_open)).then_some("its size or modification time changed (rewritten in place)")
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Mapped(m) => m,
            Storage::Heap(b) => b.as_slice(),
        }
    }

    /// True when the file is mapped (not read into memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped(_))
    }

    fn lock(&mut self) -> Result<()> {
        let bytes = self.bytes();
        // SAFETY: the range is a live allocation or mapping owned by self.
        let rc = unsafe { libc::mlock(bytes.as_ptr().cast(), bytes.len()) };
        if rc != 0 {
            return Err(Error::io("mlock model file", std::io::Error::last_os_error()));
        }
        self.locked = true;
        Ok(())
    }

    /// Hint that `range` (byte offsets into the file) will be needed soon; a no-op for heap
    /// storage. Errors are ignored: this is only a hint.
    pub fn prefetch(&self, offset: usize, len: usize) {
        if let Storage::Mapped(m) = &self.storage {
            let start = offset & !(PAGE - 1);
            let end = offset.saturating_add(len).min(m.len());
            if start < end {
                let _ = m.advise_range(memmap2::Advice::WillNeed, start, end - start);
            }
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.locked {
            let bytes = self.bytes();
            // SAFETY: unlocking the range locked in `lock`.
            unsafe { libc::munlock(bytes.as_ptr().cast(), bytes.len()) };
        }
    }
}

fn read_fully(file: &File, buf: &mut [u8]) -> Result<()> {
    let mut done = 0usize;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], done as u64) {
            Ok(0) => {
                return Err(Error::Truncated { expected: buf.len() as u64, actual: done as u64 });
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read model file", e)),
        }
    }
    Ok(())
}
