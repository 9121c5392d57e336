//! Two processes mapping the same model file share its page-cache pages: each child opens a
//! ≥ 8 MB file with `Model::open` (mmap), reads every byte of every tensor, and waits; the
//! parent reads /proc/PID/smaps of both children while they are alive and checks that, for the
//! mapping of the model file, Rss covers the file, the pages are Shared_Clean and Pss is about
//! half of Rss. A contrast test shows that without mmap each process holds a private copy.
//!
//! The children are this test binary re-run with `--exact page_sharing_child`; the environment
//! variable `COLIBRI_PAGE_SHARING_CHILD` selects the child mode (the test is a no-op otherwise).

mod common;

use colibri::format::DType;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Instant;

const CHILD_ENV: &str = "COLIBRI_PAGE_SHARING_CHILD";
const READY: &str = "COLIBRI_CHILD_READY";

/// Child mode: open the file named by the environment, touch every tensor byte, report, wait
/// for the parent to close stdin.
#[test]
fn page_sharing_child() {
    let Some(arg) = std::env::var_os(CHILD_ENV) else { return };
    let arg = arg.into_string().unwrap();
    let (mode, path) = arg.split_once(':').unwrap();
    let model = open(Path::new(path), mode == "mmap").expect("child: open model");
    let mut sum = 0u64;
    for t in &model.parsed().tensors {
        let view = model.tensor(&t.name).unwrap();
        sum = view.bytes.iter().fold(sum, |a, &b| a.wrapping_add(u64::from(b)));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{READY} {} {sum}", std::process::id()).unwrap();
    out.flush().unwrap();
    drop(out);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line); // EOF when the parent is done measuring
    drop(model);
}

/// A model file of ≥ 8 MB: hidden 128, 8 experts of FFN 512, 2 layers, f32 (≈ 12.9 MB).
fn big_file(dir: &Path) -> (PathBuf, u64) {
    let path = dir.join("big.colibri");
    let bytes = write_file(&path, &FileSpec::new(&sized_config(128, 512, 8, 512), DType::F32));
    assert!(bytes.len() >= 8 << 20, "test file is only {} bytes", bytes.len());
    (std::fs::canonicalize(&path).unwrap(), bytes.len() as u64)
}

struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    sum: u64,
}

fn spawn_child(path: &Path, mode: &str) -> Kid {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "page_sharing_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{mode}:{}", path.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdin = child.stdin.take();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (pid, sum) = loop {
        let line = lines.next().expect("child exited before reporting").unwrap();
        if let Some(rest) = line.split_once(READY).map(|(_, r)| r.trim().to_string()) {
            let mut it = rest.split_whitespace().map(|x| x.parse::<u64>().unwrap());
            break (it.next().unwrap() as u32, it.next().unwrap());
        }
    };
    assert_eq!(pid, child.id());
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Kid { child, stdin, pid, sum }
}

impl Kid {
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "child {} failed: {status}", self.pid);
    }
}

/// Memory counters (kB) summed over the smaps entries of one mapping (or of the whole process).
#[derive(Debug, Default, Clone, Copy)]
struct Mem {
    size: u64,
    rss: u64,
    pss: u64,
    shared_clean: u64,
    private_clean: u64,
    private_dirty: u64,
}

impl Mem {
    fn add(&mut self, key: &str, kb: u64) {
        match key {
            "Size" => self.size += kb,
            "Rss" => self.rss += kb,
            "Pss" => self.pss += kb,
            "Shared_Clean" => self.shared_clean += kb,
            "Private_Clean" => self.private_clean += kb,
            "Private_Dirty" => self.private_dirty += kb,
            _ => {}
        }
    }
}

/// Parse `Key:   123 kB` lines.
fn field(line: &str) -> Option<(&str, u64)> {
    let (k, v) = line.split_once(':')?;
    let v = v.trim().strip_suffix(" kB")?;
    Some((k, v.trim().parse().ok()?))
}

/// Counters of the mappings of `file` in process `pid` (None when the file is not mapped).
fn file_mapping(pid: u32, file: &Path) -> Option<Mem> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("read /proc/PID/smaps");
    let file = file.to_str().unwrap();
    let mut found = None::<Mem>;
    let mut in_file = false;
    for line in smaps.lines() {
        if let Some((k, kb)) = field(line) {
            if in_file {
                found.get_or_insert_with(Mem::default).add(k, kb);
            }
        } else if line.split_whitespace().next().is_some_and(|r| r.contains('-') && !r.ends_with(':')) {
            // A mapping header: "start-end perms offset dev inode   path".
            in_file = line.split_whitespace().nth(5) == Some(file) && line.ends_with(file);
        }
    }
    found
}

/// Process-wide counters from smaps_rollup.
fn rollup(pid: u32) -> Mem {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).expect("read smaps_rollup");
    let mut m = Mem::default();
    text.lines().filter_map(field).for_each(|(k, kb)| m.add(k, kb));
    m
}

#[test]
fn two_processes_share_the_pages_of_a_mapped_file() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (path, size) = big_file(dir.path());
    let kids = [spawn_child(&path, "mmap"), spawn_child(&path, "mmap")];
    let mems: Vec<Mem> = kids
        .iter()
        .map(|k| file_mapping(k.pid, &path).unwrap_or_else(|| panic!("child {} does not map the file", k.pid)))
        .collect();
    let sums: Vec<u64> = kids.iter().map(|k| k.sum).collect();
    let pids: Vec<u32> = kids.iter().map(|k| k.pid).collect();
    for k in kids {
        k.finish();
    }
    let file_kb = size.div_ceil(4096) * 4;
    for (pid, m) in pids.iter().zip(&mems) {
        eprintln!(
            "child {pid}: file {file_kb} kB mapped: Size {} kB, Rss {} kB, Pss {} kB, Shared_Clean {} kB, \
             Private_Clean {} kB, Private_Dirty {} kB (Pss/Rss = {:.3})",
            m.size,
            m.rss,
            m.pss,
            m.shared_clean,
            m.private_clean,
            m.private_dirty,
            m.pss as f64 / m.rss as f64
        );
    }
    assert_eq!(sums[0], sums[1], "the two children read different bytes");
    for (pid, m) in pids.iter().zip(&mems) {
        assert_eq!(m.size, file_kb, "child {pid}: the mapping is not the whole file");
        // Every page of the tensors was read; the header/table pages too (by the parser).
        assert!(m.rss * 100 >= file_kb * 95, "child {pid}: only {} of {file_kb} kB resident", m.rss);
        assert!(m.shared_clean * 100 >= m.rss * 95, "child {pid}: pages not shared: {m:?}");
        assert_eq!(m.private_dirty, 0, "child {pid}: the mapping was written to (copied): {m:?}");
        let ratio = m.pss as f64 / m.rss as f64;
        assert!((0.45..=0.55).contains(&ratio), "child {pid}: Pss/Rss = {ratio:.3}, expected ≈ 0.5: {m:?}");
    }
    eprintln!("page sharing test: {:.2} s", t0.elapsed().as_secs_f64());
}

#[test]
fn two_processes_reading_without_mmap_each_hold_a_private_copy() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, size) = big_file(dir.path());
    let kids = [spawn_child(&path, "read"), spawn_child(&path, "read")];
    let file_kb = size.div_ceil(4096) * 4;
    let results: Vec<(u32, Option<Mem>, Mem)> =
        kids.iter().map(|k| (k.pid, file_mapping(k.pid, &path), rollup(k.pid))).collect();
    assert_eq!(kids[0].sum, kids[1].sum);
    for k in kids {
        k.finish();
    }
    for (pid, mapped, total) in results {
        eprintln!(
            "child {pid} (no mmap): file {file_kb} kB; process Rss {} kB, Pss {} kB, Private_Dirty {} kB",
            total.rss, total.pss, total.private_dirty
        );
        assert!(mapped.is_none(), "child {pid} maps the file although mmap is off: {mapped:?}");
        assert!(total.private_dirty >= file_kb, "child {pid}: no private copy of the file: {total:?}");
    }
}
