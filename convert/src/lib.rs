//! The colibri converter (`colibri convert` in the CLI): HuggingFace checkpoint directory → one
//! .colibri file, optionally with block-quantised matrices; or a llama.cpp GGUF model → one
//! .colibri file with its tensors at their GGUF types (`gguf`, chosen by the file's magic).
//! Streams tensor by tensor (bounded buffers, positioned reads), writes through a temp file +
//! fsync + rename. Progress is reported through the `Progress` trait; drawing it is the caller's
//! business.

pub mod cast;
mod deepseek;
mod disk;
mod dots1;
mod ernie;
mod error;
mod fp8;
pub mod gguf;
mod gpt_oss;
mod hf_config;
mod hunyuan;
mod json_keys;
mod metadata;
mod piece;
mod plan;
pub mod quantize;
mod safetensors;
mod sources;
mod stream;

use crate::error::fail;
pub use crate::error::{Error, Result};
use colibri::format::{DType, FileWriter};
use colibri::model::{param_count, tensor_specs};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What the user asked for.
pub struct ConvertArgs {
    pub input: PathBuf,
    pub output: PathBuf,
    /// Output dtype of every tensor left unquantised (a float type); None keeps each tensor's
    /// source dtype.
    pub dtype: Option<DType>,
    /// Block quantisation of the quantisable matrices, if asked for.
    pub quantize: Option<quantize::Quantize>,
    pub user_metadata: Option<PathBuf>,
}

/// Observer of the payload writing (the CLI draws its progress bar with it). Called from the
/// converting thread: `start` once before the first tensor, `advance` as bytes are written,
/// `finish` once the file is complete (not when the conversion fails).
pub trait Progress {
    /// `total` payload bytes are about to be written.
    fn start(&self, total: u64);
    /// `bytes` more payload bytes were written.
    fn advance(&self, bytes: u64);
    /// Every byte is written and the file renamed into place.
    fn finish(&self);
}

/// The `Progress` of a conversion nobody watches.
struct Silent;

impl Progress for Silent {
    fn start(&self, _: u64) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
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
    /// Stored bits per weight over all tensors.
    pub bits_per_weight: f64,
    pub tensors: usize,
    /// Tensors stored block-quantised, and their dtypes ("q4r8", or "q4r8/q4" when some
    /// matrices' rows are not whole groups of 8).
    pub quantised: usize,
    pub quant_dtype: Option<String>,
    pub seconds: f64,
    pub output: PathBuf,
    pub warnings: Vec<String>,
}

/// Warnings for the checkpoint tensors no colibri tensor reads, and for the layers past
/// num_hidden_layers (multi-token prediction) that are skipped.
fn warn_unused_sources(
    ck: &safetensors::Checkpoint,
    resolved: &[sources::Resolved],
    config: &colibri::Config,
    warnings: &mut Vec<String>,
) {
    let unused = sources::unused(ck, resolved, config);
    if !unused.is_empty() {
        warnings.push(format!("{} source tensors are not used: {}", unused.len(), unused.join(", ")));
    }
    let extra = ck.tensors.keys().filter(|k| sources::beyond_layers(k, config)).count();
    if extra > 0 {
        warnings.push(format!(
            "{extra} tensors of layers past num_hidden_layers (multi-token prediction) skipped, as transformers does"
        ));
    }
}

/// Run a conversion, reporting the bytes written to `progress` if given.
pub fn convert(args: &ConvertArgs, progress: Option<&dyn Progress>) -> Result<ConvertReport> {
    if args.input.is_file() && gguf::is_gguf(&args.input) {
        return gguf::convert::convert(args, progress.unwrap_or(&Silent), None);
    }
    let start = Instant::now();
    let dir = &args.input;
    if !dir.is_dir() {
        return Err(fail(format!("{} is not a checkpoint directory (nor a GGUF file)", dir.display())));
    }
    if args.dtype.is_some_and(DType::is_quantized) {
        return Err(fail("--dtype takes a float type; block types come from --quantize"));
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
    let mut meta = metadata::gather(dir, &hf_text, &mut config, &mut warnings)?;
    config.validate()?;

    let mut ck = safetensors::Checkpoint::open(dir)?;
    ck.fp8_block = fp8::block_size(&hf)?;
    let specs = tensor_specs(&config);
    let resolved = sources::resolve(&ck, &config, &specs)?;
    warn_unused_sources(&ck, &resolved, &config, &mut warnings);
    // Routers transformers keeps f32 whatever the dtype (`_keep_in_fp32_modules_strict`):
    // sigmoid routers, DeepSeek-V2's and ERNIE-4.5's.
    let routers_f32 = config.moe.scoring == colibri::model::Scoring::Sigmoid
        || matches!(config.family, colibri::model::Family::DeepseekV2 | colibri::model::Family::Ernie45Moe);
    let plan = plan::plan(&resolved, args.dtype, args.quantize.as_ref(), routers_f32, &mut warnings)?;
    meta.push(metadata::provenance(dir, &config, args, plan.provenance(args.quantize.as_ref())));
    meta.extend(metadata::user_blob(args)?);

    let progress = progress.unwrap_or(&Silent);
    progress.start(plan.payload_bytes());
    let mut writer = FileWriter::create(
        &args.output,
        config.n_layers as u32,
        config.moe.n_experts as u32,
        config.moe.top_k as u32,
        &meta,
        plan.tensors.clone(),
    )?;
    disk::ensure_space(&args.output, writer.header().file_size)?;
    let mut streamer = stream::Streamer::default();
    for (r, p) in resolved.iter().zip(&plan.tensors) {
        streamer.tensor(&ck, &mut writer, r, p, &|n| progress.advance(n))?;
    }
    let summary = writer.finish()?;
    progress.finish();
    let params = param_count(&config);
    Ok(ConvertReport {
        family: config.family.name(),
        params: params.total,
        active: params.active,
        n_experts: config.moe.n_experts,
        top_k: config.moe.top_k,
        n_layers: config.n_layers,
        bytes: summary.file_size,
        bits_per_weight: plan.bits_per_weight(),
        tensors: plan.tensors.len(),
        quantised: plan.quantised,
        quant_dtype: args
            .quantize
            .as_ref()
            .map(|_| plan.block_dtypes().iter().map(|d| d.name()).collect::<Vec<_>>().join("/")),
        seconds: start.elapsed().as_secs_f64(),
        output: summary.path,
        warnings,
    })
}

/// The directory name shown in provenance (never an absolute path).
pub(crate) fn source_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string())
}
