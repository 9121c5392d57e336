//! `colibri convert`: HuggingFace checkpoint directory → one .colibri file. Streams tensor by
//! tensor (bounded buffers, positioned reads), writes through a temp file + fsync + rename.

mod cast;
mod hf_config;
mod metadata;
mod safetensors;
mod sources;

use colibri::format::{DType, FileWriter, PlannedTensor};
use colibri::model::{param_count, tensor_specs};
use colibri::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

type Result<T> = std::result::Result<T, Error>;

/// What the user asked for.
pub struct ConvertArgs {
    pub input: PathBuf,
    pub output: PathBuf,
    /// Output dtype of every tensor; None keeps each tensor's source dtype.
    pub dtype: Option<DType>,
    pub user_metadata: Option<PathBuf>,
    pub progress: bool,
}

/// Figures printed in the summary line.
pub struct ConvertReport {
    pub family: &'static str,
    pub params: u64,
    pub active: u64,
    pub n_experts: usize,
    pub top_k: usize,
    pub n_layers: usize,
    pub bytes: u64,
    pub seconds: f64,
    pub output: PathBuf,
    pub warnings: Vec<String>,
}

/// Source bytes read per step: bounds the converter's buffers.
const CHUNK: usize = 8 << 20;

fn fail(reason: impl Into<String>) -> Error {
    Error::Convert { reason: reason.into() }
}

/// Run a conversion.
pub fn convert(args: &ConvertArgs) -> Result<ConvertReport> {
    let start = Instant::now();
    let dir = &args.input;
    if !dir.is_dir() {
        return Err(fail(format!("{} is not a checkpoint directory", dir.display())));
    }
    let hf_text = std::fs::read_to_string(dir.join("config.json"))
        .map_err(|e| fail(format!("cannot read config.json in {}: {e}", dir.display())))?;
    let hf: serde_json::Value =
        serde_json::from_str(&hf_text).map_err(|e| fail(format!("config.json is not valid JSON: {e}")))?;
    let mut config = hf_config::config_from_hf(&hf)?;
    if config.layers.iter().all(|l| l.moe) {
        config.dense_ffn = 0;
    }
    let mut warnings = Vec::new();
    let meta = metadata::gather(dir, &hf_text, &mut config, args, &mut warnings)?;
    config.validate()?;

    let ck = safetensors::Checkpoint::open(dir)?;
    let specs = tensor_specs(&config);
    let resolved = sources::resolve(&ck, &config, &specs)?;
    let unused = sources::unused(&ck, &resolved, &config);
    if !unused.is_empty() {
        warnings.push(format!("{} source tensors are not used: {}", unused.len(), unused.join(", ")));
    }
    let plan: Vec<PlannedTensor> = resolved
        .iter()
        .map(|r| {
            let src = r.pieces[0].tensor.dtype;
            if r.pieces.iter().any(|p| p.tensor.dtype != src) && args.dtype.is_none() {
                return Err(fail(format!("{}: experts mix dtypes; pass --dtype", r.spec.name)));
            }
            Ok(PlannedTensor {
                name: r.spec.name.clone(),
                dtype: args.dtype.unwrap_or(src.to_colibri()),
                shape: r.spec.shape.clone(),
                kind: r.spec.kind,
            })
        })
        .collect::<Result<_>>()?;

    let payload: u64 = plan.iter().map(|p| p.shape.iter().product::<u64>() * p.dtype.size()).sum();
    let bar = progress_bar(args.progress, payload);
    let mut writer = FileWriter::create(
        &args.output,
        config.n_layers as u32,
        config.moe.n_experts as u32,
        config.moe.top_k as u32,
        &meta,
        plan.clone(),
    )?;
    let mut src_buf = Vec::new();
    let mut out_buf = Vec::new();
    for (r, p) in resolved.iter().zip(&plan) {
        writer.begin(&p.name)?;
        for piece in &r.pieces {
            let esize = piece.tensor.dtype.size() as u64;
            let total = piece.elements * esize;
            let mut done = 0u64;
            while done < total {
                let n = (total - done).min(CHUNK as u64) as usize;
                src_buf.resize(n, 0);
                ck.read(&piece.tensor, piece.byte_offset + done, &mut src_buf)?;
                cast::convert(piece.tensor.dtype, p.dtype, &src_buf, &mut out_buf).map_err(|o| {
                    fail(format!(
                        "{} (from {}): value {} at element {} does not fit {}; convert with --dtype bf16 or f32",
                        p.name,
                        piece.source,
                        o.value,
                        done / esize + o.index as u64,
                        p.dtype
                    ))
                })?;
                writer.write(&out_buf)?;
                bar.inc(out_buf.len() as u64);
                done += n as u64;
            }
        }
        writer.end()?;
    }
    let summary = writer.finish()?;
    bar.finish_and_clear();
    let params = param_count(&config);
    Ok(ConvertReport {
        family: config.family.name(),
        params: params.total,
        active: params.active,
        n_experts: config.moe.n_experts,
        top_k: config.moe.top_k,
        n_layers: config.n_layers,
        bytes: summary.file_size,
        seconds: start.elapsed().as_secs_f64(),
        output: summary.path,
        warnings,
    })
}

fn progress_bar(enabled: bool, total: u64) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// The directory name shown in provenance (never an absolute path).
pub fn source_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string())
}
