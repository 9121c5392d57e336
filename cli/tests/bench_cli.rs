//! Contract of `colibri bench`: the JSON report carries llama-bench's fields with the requested
//! tests and consistent statistics; active bytes per token equal an independent sum over
//! `colibri inspect --json`'s tensor table; the markdown report is one header and one row per
//! test; bad arguments get exit 1 and one `error:` line.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn colibri(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_colibri")).args(args).output().expect("run colibri")
}

/// A fixture converted once into this test binary's temp dir.
fn model(name: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let out = dir.path().join(format!("{name}.colibri"));
    if !out.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models").join(name);
        let tmp = dir.path().join(format!("{name}.{:?}.partial", std::thread::current().id()));
        let o = colibri(&["convert", src.to_str().unwrap(), "-o", tmp.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

fn stdout_ok(o: &Output) -> String {
    assert!(o.status.success(), "failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn fails(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "expected exit 1: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(needle), "{:?} should mention {needle:?}", lines[0]);
    assert!(o.stdout.is_empty(), "nothing on stdout after an error");
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

/// Bytes one token reads, summed from inspect's JSON: whole plain tensors and routers, top_k
/// experts per stack (inspect's per-expert byte size), one embedding row, and the whole
/// embedding again when it doubles as the lm_head (no lm_head tensor).
fn active_bytes_from_inspect(r: &Value) -> u64 {
    let top_k = u(&r["config"]["moe"]["top_k"]);
    let tensors = r["tensors"].as_array().unwrap();
    let tied = !tensors.iter().any(|t| t["name"] == "lm_head");
    let mut sum = 0;
    for e in r["expert_layout"].as_array().unwrap() {
        sum += u(&e["expert_bytes"]) * top_k;
    }
    for t in tensors.iter().filter(|t| t["kind"] != "experts") {
        let bytes = u(&t["bytes"]);
        if t["name"] == "tok_embeddings" {
            sum += bytes / u(&t["shape"][0]) + if tied { bytes } else { 0 };
        } else {
            sum += bytes;
        }
    }
    sum
}

#[test]
fn json_report_has_the_requested_tests_and_consistent_figures() {
    for name in ["mixtral_gqa", "mixtral_mqa_swa_tied", "qwen2_moe_shared", "qwen2_moe_odd_bf16"] {
        let m = model(name);
        let m = m.to_str().unwrap();
        let out = stdout_ok(&colibri(&[
            "bench",
            "-m",
            m,
            "-p",
            "16",
            "-n",
            "4",
            "-r",
            "2",
            "-t",
            "1",
            "--no-probe",
            "-o",
            "json",
        ]));
        let rows: Vec<Value> = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{name}: bad JSON {e}: {out}"));
        assert_eq!(rows.len(), 2, "{name}: one pp and one tg row");
        let want = [(16, 0, "pp16"), (0, 4, "tg4")];
        let inspect: Value = serde_json::from_str(&stdout_ok(&colibri(&["inspect", "--json", m]))).unwrap();
        for (row, (p, n, test)) in rows.iter().zip(want) {
            assert_eq!((u(&row["n_prompt"]), u(&row["n_gen"]), u(&row["n_depth"])), (p, n, 0), "{name}");
            assert_eq!(row["test"], test);
            assert_eq!(u(&row["n_threads"]), 1);
            let ts: Vec<f64> = row["samples_ts"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            let ns: Vec<u64> = row["samples_ns"].as_array().unwrap().iter().map(u).collect();
            assert_eq!((ts.len(), ns.len()), (2, 2), "{name}: -r 2 gives two samples");
            for (t, n_) in ts.iter().zip(&ns) {
                let expect = 1e9 * (p + n) as f64 / *n_ as f64;
                assert!((t - expect).abs() <= 1e-9 * expect, "{name}: t/s {t} vs {expect}");
            }
            // Process CPU time per repetition (every thread), and its mean per token.
            let cpu: Vec<u64> = row["samples_cpu_ns"].as_array().unwrap().iter().map(u).collect();
            assert!(cpu.len() == 2 && cpu.iter().all(|&c| c > 0), "{name}: cpu samples {cpu:?}");
            let cpu_ms = row["avg_cpu_ms_per_token"].as_f64().unwrap();
            let cpu_expect = (cpu[0] + cpu[1]) as f64 / 2.0 / 1e6 / (p + n) as f64;
            assert!((cpu_ms - cpu_expect).abs() <= 1e-9 * cpu_expect, "{name}: cpu ms {cpu_ms} vs {cpu_expect}");
            let avg = row["avg_ts"].as_f64().unwrap();
            let sd = row["stddev_ts"].as_f64().unwrap();
            assert!(avg > 0.0 && (avg - (ts[0] + ts[1]) / 2.0).abs() <= 1e-9 * avg, "{name}: avg {avg} of {ts:?}");
            let sd_expect = (ts[0] - ts[1]).abs() / 2f64.sqrt();
            assert!(sd.is_finite() && (sd - sd_expect).abs() <= 1e-9 * avg, "{name}: sd {sd} vs {sd_expect}");
            assert!(row["bandwidth_gbs"].is_null() && row["bw_efficiency"].is_null(), "--no-probe: no bandwidth");
            assert!(row["bandwidth_huge_gbs"].is_null() && row["bw_efficiency_huge"].is_null(), "--no-probe");
            assert_eq!(u(&row["active_bytes"]), active_bytes_from_inspect(&inspect), "{name}: active bytes");
            // Same accounting as inspect's active count, plus the one embedding row.
            let hidden = u(&inspect["config"]["hidden_size"]);
            assert_eq!(u(&row["active_params"]), u(&inspect["active_params_per_token"]) + hidden, "{name}");
            assert_eq!(u(&row["model_n_params"]), u(&inspect["params"]));
            let tensor_bytes: u64 = inspect["tensors"].as_array().unwrap().iter().map(|t| u(&t["bytes"])).sum();
            assert_eq!(u(&row["model_size"]), tensor_bytes);
            assert!(row["cpu_path"].as_str().is_some_and(|s| !s.is_empty()));
        }
    }
}

#[test]
fn depth_and_lists_make_one_test_per_combination() {
    let m = model("mixtral_gqa");
    let m = m.to_str().unwrap();
    let out = stdout_ok(&colibri(&[
        "bench",
        "-m",
        m,
        "-p",
        "0",
        "-n",
        "2,3",
        "-d",
        "0,8",
        "-r",
        "1",
        "-t",
        "1,2",
        "--no-probe",
        "-o",
        "json",
    ]));
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    let got: Vec<(u64, u64, u64, String)> = rows
        .iter()
        .map(|r| (u(&r["n_threads"]), u(&r["n_depth"]), u(&r["n_gen"]), r["test"].as_str().unwrap().to_string()))
        .collect();
    let mut want = Vec::new();
    for t in [1, 2] {
        for (d, suffix) in [(0, ""), (8, " @ d8")] {
            for n in [2, 3] {
                want.push((t, d, n, format!("tg{n}{suffix}")));
            }
        }
    }
    assert_eq!(got, want);
    assert!(rows.iter().all(|r| u(&r["n_prompt"]) == 0 && r["stddev_ts"].as_f64() == Some(0.0)));
}

#[test]
fn markdown_report_is_a_header_and_one_row_per_test() {
    let m = model("qwen2_moe_shared");
    let o = colibri(&["bench", "-m", m.to_str().unwrap(), "-p", "16", "-n", "4", "-r", "2", "--no-probe"]);
    let out = stdout_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.starts_with("cpu path: "), "{out}");
    let table: Vec<&str> = out.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(table.len(), 4, "header, rule and two rows: {out}");
    let cols = |l: &str| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect::<Vec<_>>();
    assert_eq!(
        cols(table[0]),
        ["model", "size", "params", "active", "dtype", "threads", "test", "t/s", "cpu ms/tok", "bw eff"]
    );
    assert!(table[1].chars().all(|c| "|-: ".contains(c)), "{}", table[1]);
    for (line, test) in table[2..].iter().zip(["pp16", "tg4"]) {
        let c = cols(line);
        assert_eq!((c[0].as_str(), c[4].as_str(), c[6].as_str()), ("qwen2_moe_shared", "f32", test), "{line}");
        let (avg, sd) = c[7].split_once(" ± ").unwrap_or_else(|| panic!("t/s cell {:?}", c[7]));
        assert!(avg.parse::<f64>().unwrap() > 0.0 && sd.parse::<f64>().unwrap().is_finite());
        assert!(c[8].parse::<f64>().is_ok_and(|ms| ms > 0.0), "cpu ms per token {:?}", c[8]);
        assert_eq!(c[9], "", "no efficiency without the probe");
    }
    assert!(err.contains("pp16") && !out.contains("warm-up"), "progress belongs on stderr");
    let size = std::fs::metadata(&m).unwrap().len() as f64 / 1e9;
    assert!(err.contains(&format!("model pages read in ({size:.2} GB in ")), "the pages read before the runs: {err}");
}

#[test]
fn bad_arguments_get_one_error_line() {
    let m = model("mixtral_gqa");
    let m = m.to_str().unwrap();
    fails(&colibri(&["bench", "-m", "/nonexistent/model.colibri", "--no-probe"]), "no such file");
    fails(&colibri(&["bench", "-m", m, "-r", "0", "--no-probe"]), "-r 0");
    fails(&colibri(&["bench", "-m", m, "-t", "0", "--no-probe"]), "--threads 0");
    fails(&colibri(&["bench", "-m", m, "-p", "0", "-n", "0", "--no-probe"]), "no test to run");
}

#[test]
fn a_cpu_path_request_this_cpu_cannot_honour_is_reported() {
    // COLIBRI_CPU=amx is honoured only with AMX hardware and its tile permission; elsewhere the
    // report names the path that ran and stderr says why it is not the one asked for.
    let m = model("qwen2_moe_shared");
    let o = Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["bench", "-m", m.to_str().unwrap(), "-p", "16", "-n", "0", "-r", "1", "--no-probe"])
        .env("COLIBRI_CPU", "amx")
        .output()
        .expect("run colibri");
    let (out, err) = (stdout_ok(&o), String::from_utf8_lossy(&o.stderr).into_owned());
    let path = out.lines().next().and_then(|l| l.strip_prefix("cpu path: ")).unwrap_or_else(|| panic!("{out}"));
    if path != "amx" {
        assert!(err.contains("bench: COLIBRI_CPU=amx: ") && err.contains(&format!("using {path}")), "{err}");
    } else {
        assert!(!err.contains("COLIBRI_CPU=amx"), "an honoured request needs no note: {err}");
    }
}
