//! Open-time and memory figures of `Model::open` for one `.colibri` file.
//!
//! ```text
//! cargo build --release --example open_stats
//! target/release/examples/open_stats MODEL.colibri [--read] [--repeat N]
//! ```
//!
//! For each mode it prints the wall time of `Model::open`, VmRSS before and after the open (and
//! the split into RssFile = mapped file pages, RssAnon = heap), and VmHWM (peak RSS during the
//! open; reset before each open through /proc/self/clear_refs where the kernel allows it).
//! Modes: the default `LoadOptions` (mmap), then, with `--read`, `mmap: false` (the whole file is
//! read into an aligned heap buffer). `--repeat N` opens N times per mode (the model is dropped
//! between opens) and prints the median. Only std and the `colibri` crate are used; Linux only
//! (reads /proc/self/status).

use colibri::{LoadOptions, Model};
use std::path::PathBuf;
use std::time::Instant;

/// The kB values of the named fields of /proc/self/status, in MiB.
fn status(fields: &[&str]) -> Vec<f64> {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    fields
        .iter()
        .map(|f| {
            text.lines()
                .find_map(|l| l.strip_prefix(f).and_then(|r| r.strip_prefix(':')))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<f64>().ok())
                .map(|kb| kb / 1024.0)
                .unwrap_or(f64::NAN)
        })
        .collect()
}

struct Sample {
    ms: f64,
    rss_before: f64,
    rss: f64,
    rss_file: f64,
    rss_anon: f64,
    hwm: f64,
}

fn open_once(path: &std::path::Path, opts: &LoadOptions) -> Result<Sample, colibri::Error> {
    // Reset the peak-RSS watermark (Linux >= 4.0); ignored where not permitted.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status(&["VmRSS"])[0];
    let t0 = Instant::now();
    let model = Model::open(path, opts)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let s = status(&["VmRSS", "RssFile", "RssAnon", "VmHWM"]);
    std::hint::black_box(model.params());
    drop(model);
    Ok(Sample { ms, rss_before: before, rss: s[0], rss_file: s[1], rss_anon: s[2], hwm: s[3] })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let mut path = None;
    let mut read = false;
    let mut repeat = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--read" | "--no-mmap" => read = true,
            "--repeat" => repeat = args.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or(1),
            "-h" | "--help" => {
                println!("usage: open_stats MODEL.colibri [--read] [--repeat N]");
                return;
            }
            _ if path.is_none() => path = Some(PathBuf::from(a)),
            other => {
                eprintln!("unexpected argument {other}");
                std::process::exit(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("usage: open_stats MODEL.colibri [--read] [--repeat N]");
        std::process::exit(2);
    };
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("file {} ({:.3} GB)", path.display(), size as f64 / 1e9);
    let mut modes = vec![("mmap", LoadOptions::default())];
    if read {
        modes.push(("read (mmap: false)", LoadOptions { mmap: false, ..Default::default() }));
    }
    for (label, opts) in modes {
        let mut times = Vec::new();
        let mut rss = Vec::new();
        for i in 0..repeat {
            match open_once(&path, &opts) {
                Ok(s) => {
                    println!(
                        "{label:>18} #{i}: open {:9.3} ms | VmRSS {:8.1} -> {:8.1} MiB (RssFile {:8.1}, RssAnon {:8.1}) | VmHWM {:8.1} MiB",
                        s.ms, s.rss_before, s.rss, s.rss_file, s.rss_anon, s.hwm
                    );
                    times.push(s.ms);
                    rss.push(s.rss);
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
        if repeat > 1 {
            println!(
                "{label:>18} median of {repeat}: open {:.3} ms, VmRSS after open {:.1} MiB",
                median(times),
                median(rss)
            );
        }
    }
}
