//! `colibri convert MODEL.gguf -o MODEL.colibri`: a GGUF model re-laid-out as a .colibri file
//! without re-quantising. Open (all parts), map the architecture, build the config, resolve and
//! plan every tensor at its GGUF type, build the tokenizer files, check the disk, then stream
//! tensor by tensor through the usual writer (per-expert alignment, checksums, temp + rename).

use super::arch::{self, Hparams};
use super::file::GgufFile;
use super::provenance::{self, dtype_names};
use super::relayout;
use super::sources::{self, Resolved};
use super::stream;
use super::tokenizer::{hf_files, HfTokenizerFiles};
use super::vocab::GgufVocab;
use crate::error::{fail, Result};
use crate::metadata::{self, MetaEntry};
use crate::{disk, ConvertArgs, ConvertReport, Progress};
use colibri::format::{DType, FileWriter, MetaKind, PlannedTensor};
use colibri::model::{meta_keys, param_count, tensor_specs, Config, Role};
use std::time::Instant;

/// The colibri dtype of every planned tensor: its GGUF type, the same for all its pieces. A
/// block-typed tensor colibri keeps in float (norms, routers) is stored as f32, ggml's own
/// dequantisation of it: `widen` holds its source dtype. The embedding keeps its block type.
fn plan(resolved: &[Resolved], warnings: &mut Vec<String>) -> Result<(Vec<PlannedTensor>, Vec<Option<DType>>)> {
    let (mut planned, mut widen, mut widened) = (Vec::new(), Vec::new(), Vec::new());
    for r in resolved {
        let ggml = r.pieces[0].tensor.info.ggml;
        if let Some(p) = r.pieces.iter().find(|p| p.tensor.info.ggml != ggml) {
            return Err(fail(format!(
                "{}: its pieces (experts, or the GGUF tensors it joins) mix GGUF types ({} and {})",
                r.spec.name, ggml.name, p.tensor.info.ggml.name
            )));
        }
        let src = ggml.dtype().ok_or_else(|| {
            fail(format!(
                "GGUF tensor {} has type {}, which this build of colibri cannot store",
                r.pieces[0].tensor.info.name, ggml.name
            ))
        })?;
        let bytes: u64 = r.pieces.iter().map(|p| p.bytes).sum();
        if src.bytes_for(r.spec.shape.iter().product()) != Some(bytes) {
            return Err(fail(format!(
                "{}: {bytes} GGUF bytes do not fill its shape {:?} as {src}",
                r.spec.name, r.spec.shape
            )));
        }
        // MLA's per-head W_UK / W_UV (the binding slices rows) and the embedding (the forward
        // pass dequantises the rows it looks up) keep self-contained block types.
        let by_rows = colibri::model::is_per_head(&r.spec) || r.spec.role == Role::Embedding;
        let keep = by_rows && src.rows_self_contained();
        let float_only = src.is_quantized() && r.spec.quant.is_none() && !keep;
        if float_only {
            widened.push(format!("{} ({src})", r.spec.name));
        }
        widen.push(float_only.then_some(src));
        // Row-sliced tensors keep their type; the others take their 8-row interleaved twin
        // where one exists and the rows allow it.
        let dtype = match src {
            _ if float_only => DType::F32,
            _ if by_rows => src,
            DType::Mxfp4 => mxfp4_dtype(r),
            _ => interleaved(src, &r.spec, in_row_groups(r, true)),
        };
        planned.push(PlannedTensor {
            name: r.spec.name.clone(),
            dtype,
            shape: r.spec.shape.clone(),
            kind: r.spec.kind,
        });
    }
    if !widened.is_empty() {
        warnings.push(format!(
            "{} block-quantised tensors are stored as f32 (their exact dequantisation), as colibri keeps them in float: {}",
            widened.len(),
            widened.join(", ")
        ));
    }
    Ok((planned, widen))
}

/// MXFP4 experts are stored interleaved (mxfp4r8, the same blocks) when every piece is whole
/// 8-row groups of whole rows, copied as they are otherwise.
fn mxfp4_dtype(r: &Resolved) -> DType {
    if in_row_groups(r, false) {
        crate::plan::mxfp4_dtype(&r.spec.shape, true)
    } else {
        DType::Mxfp4
    }
}

/// Every GGUF piece of `r` is whole 8-row groups of whole rows, not value-mapped (and not
/// row-permuted unless `permuted_ok`): what the interleaving writer can take piece by piece.
fn in_row_groups(r: &Resolved, permuted_ok: bool) -> bool {
    r.pieces.iter().all(|p| {
        let group = p.row_bytes * DType::Mxfp4R8.row_group() as u64;
        (permuted_ok || p.permute.is_none()) && p.map.is_none() && group > 0 && p.bytes.is_multiple_of(group)
    })
}

/// `src`'s 8-row interleaved twin (q4_k → q4_kr8, q6_k → q6_kr8, iq4_xs → iq4_xsr8, iq4_nl → iq4_nlr8, q8_0 → q8r8,
/// q4_0 → q4r8: what the int8 kernels read fastest) for a matrix whose rows are whole groups —
/// in every GGUF piece it is made of (`pieces_in_groups`) — and that is not split per head; else
/// `src` (a piece of ragged groups would otherwise stop the conversion).
fn interleaved(src: DType, spec: &colibri::model::TensorSpec, pieces_in_groups: bool) -> DType {
    let il = relayout::twin(src);
    let rows = spec.shape.len().checked_sub(2).map(|i| spec.shape[i]);
    match rows {
        Some(rows)
            if il != src
                && pieces_in_groups
                && !colibri::model::is_per_head(spec)
                && rows.is_multiple_of(il.row_group() as u64) =>
        {
            il
        }
        _ => src,
    }
}

/// Special-token ids from the vocabulary (ids outside the model's vocabulary are dropped with a
/// warning; no bos for the vocabularies llama.cpp takes none from, `GgufVocab::bos`).
fn special_ids(config: &mut Config, v: &GgufVocab, warnings: &mut Vec<String>) {
    let n = config.vocab_size as u32;
    let mut keep = |what: &str, id: u32| {
        if id >= n {
            warnings.push(format!("{what} id {id} is outside the vocabulary ({n}); ignored"));
        }
        id < n
    };
    config.bos_token_id = v.bos().filter(|&i| keep("bos token", i));
    config.pad_token_id = v.pad_id.filter(|&i| keep("pad token", i));
    for id in v.eos_id.iter().chain(&v.eot_ids) {
        if keep("eos token", *id) && !config.eos_token_ids.contains(id) {
            config.eos_token_ids.push(*id);
        }
    }
}

/// The metadata entries: config, tokenizer files, chat template.
fn meta_entries(config: &Config, v: &GgufVocab, tok: HfTokenizerFiles) -> Result<Vec<MetaEntry>> {
    match colibri::tokenizer::Tokenizer::from_json(&tok.tokenizer_json, Some(&tok.tokenizer_config_json), config) {
        Ok(_) | Err(colibri::Error::Unsupported { .. }) => {}
        Err(e) => return Err(fail(format!("the GGUF tokenizer does not fit the model: {e}"))),
    }
    let config_json = serde_json::to_vec(config).map_err(|e| fail(format!("serialising config: {e}")))?;
    let mut meta = vec![
        (meta_keys::CONFIG.to_string(), MetaKind::Json, config_json),
        (meta_keys::TOKENIZER.to_string(), MetaKind::Json, tok.tokenizer_json.into_bytes()),
        ("tokenizer_config".to_string(), MetaKind::Json, tok.tokenizer_config_json.into_bytes()),
    ];
    if let Some(t) = &v.chat_template {
        meta.push((meta_keys::CHAT_TEMPLATE.to_string(), MetaKind::Text, t.clone().into_bytes()));
    }
    Ok(meta)
}

/// The opened model, its config and resolved tensors.
pub struct Mapped {
    pub file: GgufFile,
    pub arch: String,
    pub config: Config,
    pub resolved: Vec<Resolved>,
    pub planned: Vec<PlannedTensor>,
    /// Per planned tensor: the block dtype it is dequantised from, if it is stored as f32.
    pub widen: Vec<Option<DType>>,
    pub vocab: GgufVocab,
    pub warnings: Vec<String>,
}

/// Open and map a GGUF model without writing anything.
pub fn map(path: &std::path::Path) -> Result<Mapped> {
    let file = GgufFile::open(path)?;
    let arch = file
        .metadata()
        .str("general.architecture")?
        .ok_or_else(|| fail("GGUF file lacks general.architecture"))?
        .to_string();
    let mapping = arch::mapping(&arch)?;
    let mut config = (mapping.config)(&Hparams { arch: &arch, file: &file })?;
    let mut warnings = Vec::new();
    let vocab = file.vocab()?;
    special_ids(&mut config, &vocab, &mut warnings);
    config.validate()?;
    let resolved = sources::resolve(&file, &config, mapping.permuted_qk, &tensor_specs(&config))?;
    let unused = sources::unused(&file, &config, &resolved);
    if !unused.is_empty() {
        warnings.push(format!("{} GGUF tensors are not used: {}", unused.len(), unused.join(", ")));
    }
    let (planned, widen) = plan(&resolved, &mut warnings)?;
    Ok(Mapped { file, arch, config, resolved, planned, widen, vocab, warnings })
}

/// Convert the GGUF model at `args.input`. `tokenizer` replaces the files built from the GGUF
/// vocabulary (tests use the source checkpoint's).
pub fn convert(
    args: &ConvertArgs,
    progress: &dyn Progress,
    tokenizer: Option<HfTokenizerFiles>,
) -> Result<ConvertReport> {
    let start = Instant::now();
    if args.dtype.is_some() || args.quantize.is_some() {
        return Err(fail("a GGUF model is converted as it is: its tensors keep their GGUF types (--dtype and --quantize are for HuggingFace checkpoints)"));
    }
    let Mapped { file, arch, config, resolved, planned, widen, vocab, warnings } = map(&args.input)?;
    let tok = match tokenizer {
        Some(t) => t,
        None => hf_files(&vocab)?,
    };
    let mut meta = meta_entries(&config, &vocab, tok)?;
    meta.push(provenance::entry(&file, &arch, &config, &resolved, &planned));
    meta.extend(metadata::user_blob(args)?);
    let payload: u64 = planned.iter().map(|t| t.dtype.bytes_for(t.shape.iter().product()).unwrap_or(0)).sum();
    let (n_experts, top_k) = (config.moe.n_experts, config.moe.top_k);
    let mut writer = FileWriter::create(
        &args.output,
        config.n_layers as u32,
        n_experts as u32,
        top_k as u32,
        &meta,
        planned.clone(),
    )?;
    disk::ensure_space(&args.output, writer.header().file_size)?;
    progress.start(payload);
    let mut buf = colibri::format::AlignedBuf::default();
    for ((r, from), p) in resolved.iter().zip(&widen).zip(&planned) {
        if relayout::writes(p.dtype) {
            relayout::tensor(&file, &mut writer, r, p.dtype, &mut buf, &|n| progress.advance(n))?;
        } else {
            stream::tensor(&file, &mut writer, r, *from, p.dtype, &mut buf, &|n| progress.advance(n))?;
        }
    }
    let summary = writer.finish()?;
    progress.finish();
    let params = param_count(&config);
    let elements: u64 = planned.iter().map(|t| t.shape.iter().product::<u64>()).sum();
    let quantised: Vec<&PlannedTensor> = planned.iter().filter(|t| t.dtype.is_quantized()).collect();
    let block_names = dtype_names(&quantised);
    Ok(ConvertReport {
        family: config.family.name(),
        params: params.total,
        active: params.active,
        n_experts,
        top_k,
        n_layers: config.n_layers,
        bytes: summary.file_size,
        bits_per_weight: if elements == 0 { 0.0 } else { payload as f64 * 8.0 / elements as f64 },
        tensors: planned.len(),
        quantised: quantised.len(),
        quant_dtype: (!quantised.is_empty()).then(|| block_names.join("/")),
        seconds: start.elapsed().as_secs_f64(),
        output: summary.path,
        warnings,
    })
}

/// True when `path` is a file starting with the GGUF magic.
pub fn is_gguf(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == super::parse::MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;
    use colibri::format::TensorKind;
    use colibri::model::TensorSpec;

    /// GGUF's q4_k / q6_k / iq4_xs / q8_0 / q4_0 matrices are written interleaved when their rows
    /// are whole 8-row groups and they are not split per head; otherwise as they are.
    #[test]
    fn block_matrices_of_whole_row_groups_take_their_interleaved_twin() {
        let spec = |name: &str, shape: &[u64]| TensorSpec {
            name: name.into(),
            shape: shape.to_vec(),
            kind: TensorKind::Experts,
            role: Role::Experts,
            quant: None,
        };
        let experts = spec("layers.0.moe.experts.gate", &[64, 1024, 2048]);
        let twins = [
            (DType::Q4K, DType::Q4KR8),
            (DType::Q6K, DType::Q6KR8),
            (DType::Iq4Xs, DType::Iq4XsR8),
            (DType::Iq4Nl, DType::Iq4NlR8),
            (DType::Q8_0, DType::Q8R8),
            (DType::Q4_0, DType::Q4R8),
        ];
        for (src, il) in twins {
            assert_eq!(interleaved(src, &experts, true), il, "{src}");
            assert!(relayout::writes(il), "{il}");
            assert_eq!(interleaved(src, &experts, false), src, "{src}: a GGUF piece of ragged groups");
            assert_eq!(interleaved(src, &spec("layers.0.moe.experts.gate", &[64, 1020, 2048]), true), src, "{src}");
            assert_eq!(interleaved(src, &spec("layers.0.attn.k_b", &[16, 128, 512]), true), src, "{src}: per head");
        }
        // Types without an interleaved layout stay as they are.
        assert_eq!(interleaved(DType::Q3K, &experts, true), DType::Q3K);
        assert_eq!(interleaved(DType::Q5K, &experts, true), DType::Q5K);
    }

    /// A GLM-4 vocabulary's recorded bos is not the model's (llama.cpp and HF take none); its
    /// eos and pad are.
    #[test]
    fn glm_vocabularies_give_the_config_no_bos() {
        let json = serde_json::json!({
            "family": "mixtral", "vocab_size": 16, "hidden_size": 16, "n_layers": 1, "n_heads": 2,
            "n_kv_heads": 1, "head_dim": 8, "rms_norm_eps": 1e-5, "rope": {"theta": 10000.0},
            "max_position_embeddings": 64, "attention_bias": false, "qk_norm": "none",
            "moe": {"n_experts": 2, "top_k": 1, "expert_ffn": 8, "norm_topk_prob": true},
            "dense_ffn": 0, "layers": [{"moe": true}], "tie_embeddings": false, "hidden_act": "silu",
            "bos_token_id": null, "eos_token_ids": [], "pad_token_id": null,
        });
        let base = Config::from_json(json.to_string().as_bytes()).unwrap();
        for (pre, bos) in [("glm4", None), ("chatglm-bpe", None), ("qwen2", Some(3))] {
            let v = GgufVocab {
                pre: Some(pre.into()),
                bos_id: Some(3),
                eos_id: Some(4),
                pad_id: Some(4),
                ..GgufVocab::default()
            };
            let (mut config, mut warnings) = (base.clone(), Vec::new());
            special_ids(&mut config, &v, &mut warnings);
            assert_eq!(
                (config.bos_token_id, config.eos_token_ids.clone(), config.pad_token_id),
                (bos, vec![4], Some(4)),
                "{pre}"
            );
            assert!(warnings.is_empty());
        }
    }
}
