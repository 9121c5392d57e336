//! A loaded model: Config (plain numbers) + Weights (views into the mapping) + the metadata
//! blobs (tokenizer, chat template, provenance, user bytes). `Model::open` maps and validates
//! the file; it reads the header, metadata, table and the norm weights — never the big matrices.

mod config;
mod delta_config;
mod names;
mod validate;
mod visit;
mod weights;

pub use config::{
    AttnTemperature, Config, DeltaNetConfig, ExpertAct, ExpertGroups, Family, GroupScore, LayerKind, LayerSpec, Mla,
    MoeConfig, NormKind, QkNorm, Rope, RopeScaling, Scales, Scoring,
};
pub use names::{
    is_per_head, layer_name, param_count, suffix, tensor_specs, ParamCount, QuantClass, Role, TensorSpec, EMBEDDING,
    FINAL_NORM, FINAL_NORM_BIAS, LM_HEAD, LM_HEAD_BIAS,
};
pub use weights::{
    AttnWeights, DeltaInProj, DeltaNetWeights, FfnWeights, GqaWeights, LayerWeights, MlaWeights, MlpBias, MlpWeights,
    MoeWeights, NormWeights, Weights,
};

use crate::error::{Error, Result};
use crate::format::{self, ParsedFile};
use crate::forward::buffers::Buffers;
use crate::mmap::{LoadOptions, Mapping};
use crate::tensor::TensorView;
use crate::threads::{Pool, ThreadOptions};
use std::path::Path;

/// Metadata keys written by the converter.
pub mod meta_keys {
    pub const CONFIG: &str = "config";
    pub const TOKENIZER: &str = "tokenizer";
    pub const CHAT_TEMPLATE: &str = "chat_template";
    pub const PROVENANCE: &str = "provenance";
    pub const USER: &str = "user";
}

/// An opened, validated model. Immutable; share it across threads with `Arc<Model>`. It owns
/// the worker pool its forward passes and checks run on (`LoadOptions::threads`), shared by
/// every session and thread using it, built on first use and again in a forked child.
pub struct Model {
    // Field order matters: `weights` borrows from `mapping` and is dropped first.
    weights: Weights<'static>,
    parsed: ParsedFile,
    config: Config,
    pool: Pool,
    /// The buffers its forward steps reuse.
    buffers: Buffers,
    mapping: Mapping,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("config", &self.config).field("tensors", &self.parsed.tensors.len()).finish()
    }
}

/// What a never-quantised tensor of `role` is, for error messages.
fn float_only_what(role: Role) -> &'static str {
    match role {
        Role::Router => "a router",
        Role::Norm => "a norm weight",
        Role::Embedding => "the embedding table",
        Role::Attention => "an attention bias",
        Role::Mlp => "the shared expert gate",
        Role::Experts | Role::LmHead => "this tensor",
    }
}

/// Check the tensor table against the tensors the config implies (names, shapes, kinds, and
/// that only quantisable matrices are block-quantised).
pub fn check_tensors(config: &Config, parsed: &ParsedFile) -> Result<()> {
    let specs = tensor_specs(config);
    for s in &specs {
        let t = parsed.tensor(&s.name).ok_or_else(|| Error::MissingTensor { name: s.name.clone() })?;
        if t.shape != s.shape {
            return Err(Error::TensorMismatch {
                name: s.name.clone(),
                reason: format!("shape {:?}, the config implies {:?}", t.shape, s.shape),
            });
        }
        if t.kind != s.kind {
            return Err(Error::TensorMismatch {
                name: s.name.clone(),
                reason: format!("stored as {:?}, expected {:?}", t.kind, s.kind),
            });
        }
        // MLA's per-head matrices are sliced by rows; the embedding's looked-up rows are
        // dequantised (a GGUF's token_embd keeps its block type).
        let row_blocks = (names::is_per_head(s) || s.role == Role::Embedding) && t.dtype.rows_self_contained();
        if (t.dtype.is_quantized() || t.dtype.is_interleaved()) && s.quant.is_none() && !row_blocks {
            return Err(Error::TensorMismatch {
                name: s.name.clone(),
                reason: format!(
                    "stored as {}, but {} must stay f32/f16/bf16 (only attention q/k/v/o, MLA's per-head \
                     W_UK/W_UV and the embedding in whole-row blocks, routed and shared expert, dense MLP and \
                     lm_head matrices may be block-quantised or tile-ordered)",
                    t.dtype,
                    float_only_what(s.role)
                ),
            });
        }
    }
    let expected: std::collections::HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    if let Some(extra) = parsed.tensors.iter().find(|t| !expected.contains(t.name.as_str())) {
        return Err(Error::UnexpectedTensor { name: extra.name.clone() });
    }
    // Routers sit from routing_offset in layer order.
    let stored = parsed.tensors.iter().filter(|t| t.kind == format::TensorKind::Router);
    let wanted = specs.iter().filter(|s| s.kind == format::TensorKind::Router);
    for (i, (t, s)) in stored.zip(wanted).enumerate() {
        if t.name != s.name {
            let expected = parsed.tensor(&s.name).map(|r| r.data_offset).unwrap_or(0);
            return Err(Error::Layout {
                what: format!(
                    "router '{}' (routers must be in layer order; position {i} belongs to '{}')",
                    t.name, s.name
                ),
                expected,
                found: t.data_offset,
            });
        }
    }
    Ok(())
}

/// Cross-check the fixed header against the config.
fn check_header(config: &Config, parsed: &ParsedFile) -> Result<()> {
    let h = &parsed.header;
    let pairs: [(&'static str, u64, u64); 4] = [
        ("num_layers", h.num_layers.into(), config.n_layers as u64),
        ("num_experts", h.num_experts.into(), config.moe.n_experts as u64),
        ("top_k", h.top_k.into(), config.moe.top_k as u64),
        ("num_moe_layers", h.num_moe_layers.into(), config.n_moe_layers() as u64),
    ];
    for (field, header, actual) in pairs {
        if header != actual {
            return Err(Error::HeaderMismatch { field, header, actual });
        }
    }
    Ok(())
}

impl Model {
    /// Map (or read) and validate the model at `path`: structure against the real file size,
    /// config, tensors against the config, header against both, norm weights finite.
    pub fn open(path: &Path, opts: &LoadOptions) -> Result<Model> {
        let pool = Pool::new(opts.threads)?;
        let mapping = Mapping::open(path, opts)?;
        Self::from_mapping(mapping, pool)
    }

    fn from_mapping(mapping: Mapping, pool: Pool) -> Result<Model> {
        let file = mapping.bytes();
        let parsed = format::parse(file)?;
        for e in &parsed.metadata {
            let want = match e.key.as_str() {
                meta_keys::CONFIG | meta_keys::TOKENIZER | meta_keys::PROVENANCE => format::MetaKind::Json,
                meta_keys::CHAT_TEMPLATE => format::MetaKind::Text,
                _ => continue,
            };
            if e.kind != want {
                return Err(Error::Metadata {
                    key: e.key.clone(),
                    reason: format!("stored as {:?}, expected {want:?}", e.kind),
                });
            }
        }
        let config_json = parsed.meta(file, meta_keys::CONFIG).ok_or_else(|| Error::Metadata {
            key: meta_keys::CONFIG.into(),
            reason: "missing (every .colibri file carries its model config)".into(),
        })?;
        let config = Config::from_json(config_json)?;
        check_header(&config, &parsed)?;
        check_tensors(&config, &parsed)?;
        for s in tensor_specs(&config).iter().filter(|s| s.role == Role::Norm) {
            if let Some(t) = parsed.tensor(&s.name) {
                let view = TensorView::new(t, file);
                if let Some(at) = format::find_nonfinite_in(view.dtype, view.bytes, view.cols() as u64) {
                    return Err(at.error(&s.name, 0, view.dtype.block() as u64));
                }
            }
        }
        // Last, so that a damaged field gets its own diagnosis above; this catches the rest.
        format::verify_prefix(file, &parsed)?;
        let weights = Weights::bind(&config, &parsed, file)?;
        // SAFETY: `weights` (bound matrices) borrows only the bytes of `mapping` (a mapping or
        // heap allocation whose address does not change when `Model` moves), which lives exactly
        // as long as the Model; `weights` is dropped first (field order) and only handed out
        // with the lifetime of `&self`.
        let weights: Weights<'static> = unsafe { std::mem::transmute::<Weights<'_>, Weights<'static>>(weights) };
        Ok(Model { weights, parsed, config, pool, buffers: Buffers::default(), mapping })
    }

    /// The model configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The worker pool of this model's forward passes and checks.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The buffers this model's forward steps take and give back (`forward::buffers`).
    pub(crate) fn buffers(&self) -> &Buffers {
        &self.buffers
    }

    /// Replace the worker pool (a tool comparing thread counts on one model).
    pub fn set_threads(&mut self, threads: ThreadOptions) -> Result<()> {
        self.pool = Pool::new(threads)?;
        Ok(())
    }

    /// The weights, borrowed for as long as the model.
    pub fn weights(&self) -> &Weights<'_> {
        &self.weights
    }

    /// The parsed structure (header, metadata directory, tensor table).
    pub fn parsed(&self) -> &ParsedFile {
        &self.parsed
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.mapping.bytes()
    }

    /// `Error::ModelChanged` when the mapped file was truncated or rewritten in place since it
    /// was opened (see `Mapping::changed`); the forward pass checks it after every step.
    pub fn check_unchanged(&self) -> Result<()> {
        match self.mapping.changed() {
            Some(reason) => Err(Error::ModelChanged { reason }),
            None => Ok(()),
        }
    }

    /// The mapping (for prefetch hints).
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// View of a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.parsed.tensor(name).map(|r| TensorView::new(r, self.mapping.bytes()))
    }

    /// Raw metadata value by key.
    pub fn meta(&self, key: &str) -> Option<&[u8]> {
        self.parsed.meta(self.mapping.bytes(), key)
    }

    /// The HuggingFace tokenizer.json, if stored.
    pub fn tokenizer_json(&self) -> Option<&str> {
        self.meta(meta_keys::TOKENIZER).and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The chat template, if stored.
    pub fn chat_template(&self) -> Option<&str> {
        self.meta(meta_keys::CHAT_TEMPLATE).and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The provenance JSON, if stored.
    pub fn provenance(&self) -> Option<&str> {
        self.meta(meta_keys::PROVENANCE).and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The user metadata blob, if any.
    pub fn user_metadata(&self) -> Option<&[u8]> {
        self.meta(meta_keys::USER)
    }

    /// Total and active parameter counts.
    pub fn params(&self) -> ParamCount {
        param_count(&self.config)
    }

    /// Full validation: every checksum, every padding byte, every element finite. Reads the
    /// whole file.
    pub fn verify(&self) -> Result<()> {
        let m = &self.mapping;
        self.pool
            .install(|| format::verify_data_with(m.bytes(), &self.parsed, &|offset, len| m.prefetch(offset, len)))?
    }
}
