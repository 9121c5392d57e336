//! Bench output: a llama-bench style markdown table (with the CPU path and probe result above
//! it), or a JSON list with one object per test. Only these go to stdout.

use super::footprint::Footprint;
use super::timing::{mean_sd, samples_cpu_ms, samples_ts, Sample, Test};
use crate::inspect::human_count;
use serde_json::{json, Value};

/// The model and machine facts every row shares.
pub struct Context {
    /// The path given with -m (or the default model's).
    pub model_filename: String,
    /// File stem, the table's model column.
    pub model: String,
    pub footprint: Footprint,
    /// Name of `colibri::kernels::active_path()` (as COLIBRI_CPU spells it).
    pub cpu_path: String,
}

/// Measured read bandwidth at one thread count.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub threads: usize,
    /// Through 4 KiB pages.
    pub gbs: f64,
    /// Through 2 MiB pages (transparent huge pages where the kernel gives them).
    pub gbs_huge: f64,
    /// Size of the buffer read.
    pub bytes: usize,
}

/// One measured test.
#[derive(Clone)]
pub struct Row {
    pub test: Test,
    /// Wall-clock and process CPU time of each repetition.
    pub samples: Vec<Sample>,
    /// Probe bandwidth at this row's thread count, the two page sizes mixed as the weights are
    /// mapped (None with --no-probe).
    pub bandwidth_gbs: Option<f64>,
    /// The probe through 2 MiB pages alone at this row's thread count: what the memory streams
    /// at whatever pages the weights have (None with --no-probe).
    pub bandwidth_huge_gbs: Option<f64>,
}

impl Row {
    fn ts(&self) -> (f64, f64) {
        mean_sd(&samples_ts(&self.test, &self.wall_ns()))
    }

    fn wall_ns(&self) -> Vec<u64> {
        self.samples.iter().map(|s| s.wall_ns).collect()
    }

    /// Share of the probe bandwidth a tg row reads: active bytes × tokens/s / bandwidth.
    fn efficiency(&self, f: &Footprint) -> Option<f64> {
        self.share_of(f, self.bandwidth_gbs?)
    }

    /// The same against the 2 MiB-page probe alone.
    fn efficiency_huge(&self, f: &Footprint) -> Option<f64> {
        self.share_of(f, self.bandwidth_huge_gbs?)
    }

    fn share_of(&self, f: &Footprint, bw: f64) -> Option<f64> {
        (self.test.n_gen > 0 && bw > 0.0).then(|| f.active_bytes as f64 * self.ts().0 / (bw * 1e9))
    }
}

/// "18.80 MiB" below 1 GiB, else "3.56 GiB".
fn size(bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    if gib >= 1.0 {
        format!("{gib:.2} GiB")
    } else {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// The markdown report: CPU path, probe lines, then the table.
pub fn markdown(cx: &Context, probes: &[Probe], huge_share: Option<f64>, rows: &[Row]) -> String {
    let f = &cx.footprint;
    let mut out = format!("cpu path: {}\n", cx.cpu_path);
    for p in probes {
        out += &format!(
            "memory bandwidth: {:.2} GB/s through 4 KiB pages, {:.2} through 2 MiB pages, with {} threads (best of {} \
             passes over {} MiB, as one stream and as {} per thread)\n",
            p.gbs,
            p.gbs_huge,
            p.threads,
            super::probe::PASSES,
            p.bytes >> 20,
            super::probe::STREAMS
        );
    }
    if probes.is_empty() {
        out += "memory bandwidth: not measured (--no-probe)\n";
    } else {
        out += &weights_line(&cx.model_filename, huge_share);
    }
    out += "\n";
    let header = ["model", "size", "params", "active", "dtype", "threads", "test", "t/s", "cpu ms/tok", "bw eff"];
    let right = [false, true, true, true, false, true, true, true, true, true];
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|r| {
            let (avg, sd) = r.ts();
            [
                cx.model.clone(),
                size(f.weight_bytes),
                human_count(f.params),
                human_count(f.active_params),
                f.dtypes.join("+"),
                r.test.n_threads.to_string(),
                r.test.name(),
                format!("{avg:.2} ± {sd:.2}"),
                format!("{:.3}", mean_sd(&samples_cpu_ms(&r.test, &r.samples)).0),
                r.efficiency(f)
                    .map(|e| format!("{:.1} %{}", e * 100.0, if e > 1.0 { " *" } else { "" }))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let width: Vec<usize> = (0..header.len())
        .map(|i| cells.iter().map(|c| c[i].chars().count()).chain([header[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |vals: &[String]| {
        let padded: Vec<String> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| if right[i] { format!("{v:>w$}", w = width[i]) } else { format!("{v:<w$}", w = width[i]) })
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    out += &line(&header.map(String::from));
    let rule: Vec<String> = (0..header.len())
        .map(|i| if right[i] { format!("{}:", "-".repeat(width[i] - 1)) } else { "-".repeat(width[i]) })
        .collect();
    out += &format!("| {} |\n", rule.join(" | "));
    for c in &cells {
        out += &line(c);
    }
    if rows.iter().any(|r| r.efficiency(f).is_some_and(|e| e > 1.0)) {
        out += &format!("\n* above 100 %: {}\n", cache_note(f));
    }
    if let Some(line) = huge_probe_line(f, huge_share, rows) {
        out += &line;
    }
    out
}

/// What share of the weights is mapped with 2 MiB pages, what bw eff is against, and below 99 %
/// how to have the file read into 2 MiB pages.
fn weights_line(path: &str, huge_share: Option<f64>) -> String {
    let Some(h) = huge_share else {
        return "weights: page sizes unknown; bw eff is against the 4 KiB-page probe\n".to_string();
    };
    let mut line = format!(
        "weights: {:.0} % of the resident bytes mapped with 2 MiB pages; bw eff is against the probes mixed so",
        h * 100.0
    );
    if h < ALL_HUGE {
        line += &format!(
            " (the rest is in 4 KiB pages of the page cache: `dd if={} iflag=nocache count=0` drops them when no process \
             maps the file, and the next run reads it into 2 MiB pages)",
            shell_word(path)
        );
    }
    line + "\n"
}

/// A 2 MiB share at least this large counts as all of the weights in 2 MiB pages.
const ALL_HUGE: f64 = 0.99;

/// `s` as one shell word: itself when it needs no quoting, else single-quoted.
fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c)) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Weights not all in 2 MiB pages (or page sizes unknown): each tg row against the 2 MiB-page
/// probe alone. The mixed probe then reads slower than the memory can, and a decode that is not
/// bound by the page size (as on the AMX Xeon VMs) would look closer to the machine's bandwidth
/// than it is.
fn huge_probe_line(f: &Footprint, huge_share: Option<f64>, rows: &[Row]) -> Option<String> {
    let huge: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let t = r.test.n_threads;
            let e = r.efficiency_huge(f)? * 100.0;
            Some(format!("{} at {t} thread{} {e:.1} %", r.test.name(), if t == 1 { "" } else { "s" }))
        })
        .collect();
    (huge_share.is_none_or(|h| h < ALL_HUGE) && !huge.is_empty()).then(|| {
        format!(
            "\nbw eff against the 2 MiB-page probe alone (the weights are not all in 2 MiB pages): {}\n",
            huge.join(", ")
        )
    })
}

/// Why a tg row can read faster than the memory probe: its weights fit in the caches, or it
/// reads memory faster than the probe's loop does through the same page sizes.
fn cache_note(f: &Footprint) -> String {
    let llc = super::probe::cache_bytes() as u64;
    if f.active_bytes > llc {
        return format!(
            "the active weights per token ({}) exceed the last-level cache ({}): the decode reads memory faster \
             than the probe's loop does through the same page sizes",
            size(f.active_bytes),
            size(llc)
        );
    }
    format!(
        "the active weights per token ({}) are read from the CPU caches (last level {}), not from memory as the \
         probe's buffer is",
        size(f.active_bytes),
        size(llc)
    )
}

/// The JSON report: one object per test, llama-bench's field names where they exist.
pub fn json(cx: &Context, rows: &[Row]) -> Value {
    let f = &cx.footprint;
    let list: Vec<Value> = rows
        .iter()
        .map(|r| {
            let wall_ns = r.wall_ns();
            let ts = samples_ts(&r.test, &wall_ns);
            let (avg_ts, stddev_ts) = mean_sd(&ts);
            let ns: Vec<f64> = wall_ns.iter().map(|&x| x as f64).collect();
            let (avg_ns, stddev_ns) = mean_sd(&ns);
            json!({
                "build_version": colibri::VERSION,
                "cpu_path": cx.cpu_path,
                "model_filename": cx.model_filename,
                "model_type": cx.model,
                "model_size": f.weight_bytes,
                "model_n_params": f.params,
                "active_params": f.active_params,
                "active_bytes": f.active_bytes,
                "dtypes": f.dtypes,
                "n_threads": r.test.n_threads,
                "n_prompt": r.test.n_prompt,
                "n_gen": r.test.n_gen,
                "n_depth": r.test.n_depth,
                "test": r.test.name(),
                "avg_ns": avg_ns,
                "stddev_ns": stddev_ns,
                "avg_ts": avg_ts,
                "stddev_ts": stddev_ts,
                "samples_ns": wall_ns,
                "samples_ts": ts,
                "samples_cpu_ns": r.samples.iter().map(|s| s.cpu_ns).collect::<Vec<_>>(),
                "avg_cpu_ms_per_token": mean_sd(&samples_cpu_ms(&r.test, &r.samples)).0,
                "bandwidth_gbs": r.bandwidth_gbs,
                "bw_efficiency": r.efficiency(f),
                "bandwidth_huge_gbs": r.bandwidth_huge_gbs,
                "bw_efficiency_huge": r.efficiency_huge(f),
                "bw_efficiency_note": r.efficiency(f).filter(|&e| e > 1.0).map(|_| cache_note(f)),
            })
        })
        .collect();
    Value::Array(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::probe;
    use crate::bench::timing::Test;

    /// A bf16 model of `active_bytes` per token (all of it active).
    fn context(active_bytes: u64) -> Context {
        let footprint = Footprint {
            weight_bytes: active_bytes,
            params: 1000,
            active_params: 500,
            active_bytes,
            dtypes: vec!["bf16"],
        };
        Context { model_filename: "m.colibri".into(), model: "m".into(), footprint, cpu_path: "generic".into() }
    }

    /// A tg row faster than the probe's bandwidth allows is marked and explained, in both
    /// outputs; one below it is not.
    #[test]
    fn an_efficiency_above_100_percent_says_why() {
        let cx = context(1 << 20);
        let test = Test { n_prompt: 0, n_gen: 10, n_depth: 0, n_threads: 1 };
        // 10 tokens in 1 ms: 10 000 tokens/s × 1 MiB ≈ 10.5 GB/s.
        let samples = vec![Sample { wall_ns: 1_000_000, cpu_ns: 2_500_000 }];
        let row =
            |gbs: f64| Row { test, samples: samples.clone(), bandwidth_gbs: Some(gbs), bandwidth_huge_gbs: Some(6.0) };
        let probe = [Probe { threads: 1, gbs: 5.0, gbs_huge: 6.0, bytes: 64 << 20 }];
        let md = markdown(&cx, &probe, Some(0.25), &[row(5.0)]);
        assert!(
            md.contains("209.7 % *") && md.contains("\n* above 100 %: the active weights per token (1.00 MiB)"),
            "{md}"
        );
        assert!(
            md.contains("over 64 MiB, as one stream and as 8 per thread)") && md.contains("6.00 through 2 MiB pages"),
            "{md}"
        );
        assert!(md.contains("weights: 25 % of the resident bytes mapped with 2 MiB pages"), "{md}");
        // 2.5 ms of CPU over 10 tokens.
        assert!(md.contains("| cpu ms/tok |") && md.contains("|      0.250 |"), "{md}");
        let js = json(&cx, &[row(5.0), row(50.0)]);
        assert!(js[0]["bw_efficiency_note"].as_str().is_some_and(|n| n.contains("CPU caches")));
        assert!(js[1]["bw_efficiency_note"].is_null());
        assert_eq!(js[0]["avg_cpu_ms_per_token"], 0.25);
        let md = markdown(&cx, &probe, None, &[row(50.0)]);
        assert!(md.contains("21.0 %") && !md.contains('*'), "{md}");
    }

    /// Weights not all in 2 MiB pages: the row is also given against the 2 MiB probe alone (in
    /// both outputs); with every weight byte in 2 MiB pages the table's figure is that already.
    #[test]
    fn weights_in_small_pages_are_also_measured_against_the_huge_page_probe() {
        // Active bytes beyond any last-level cache.
        let cx = context(8 << 30);
        let test = Test { n_prompt: 0, n_gen: 10, n_depth: 0, n_threads: 2 };
        // 10 tokens in 8 s × 8 GiB: 10.74 GB/s; 12 GB/s through 4 KiB pages, 16 through 2 MiB.
        let samples = vec![Sample { wall_ns: 8_000_000_000, cpu_ns: 16_000_000_000 }];
        let probe = [Probe { threads: 2, gbs: 12.0, gbs_huge: 16.0, bytes: 64 << 20 }];
        let rows =
            [Row { test, samples, bandwidth_gbs: Some(probe::mixed(12.0, 16.0, 0.0)), bandwidth_huge_gbs: Some(16.0) }];
        let md = markdown(&cx, &probe, Some(0.0), &rows);
        assert!(md.contains("89.5 %"), "{md}");
        assert!(
            md.contains("2 MiB-page probe alone (the weights are not all in 2 MiB pages): tg10 at 2 threads 67.1 %"),
            "{md}"
        );
        assert!(md.contains("`dd if=m.colibri iflag=nocache count=0` drops them"), "{md}");
        assert!(markdown(&cx, &probe, None, &rows).contains("probe alone"), "page sizes unknown");
        assert!(weights_line("my models/it's.colibri", Some(0.5)).contains(r"`dd if='my models/it'\''s.colibri' iflag"));
        let all = markdown(&cx, &probe, Some(1.0), &rows);
        assert!(!all.contains("probe alone") && !all.contains("nocache"), "all in 2 MiB pages: {all}");
        // Above the mixed probe with 8 GiB a token: not the caches' doing.
        let fast = [Row { bandwidth_gbs: Some(10.0), ..rows[0].clone() }];
        let md = markdown(&cx, &probe, Some(0.0), &fast);
        assert!(md.contains("107.4 % *") && md.contains("decode reads memory faster than the probe's loop"), "{md}");
        assert!(!md.contains("read from the CPU caches"), "{md}");
        let js = json(&cx, &rows);
        assert_eq!(js[0]["bandwidth_huge_gbs"], 16.0);
        assert!((js[0]["bw_efficiency_huge"].as_f64().unwrap() - 0.671).abs() < 1e-3, "{js}");
    }
}
