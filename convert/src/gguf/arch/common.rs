//! What every mapping reads the same way: `{arch}.*` keys with llama.cpp's defaults, and the
//! config fields that follow from the tensors present (tied output, biases, MoE layers).

use crate::error::{fail, Result};
use crate::gguf::file::GgufFile;
use crate::gguf::value::{Metadata, Value};
use colibri::model::{Config, Family, LayerSpec, MoeConfig, NormKind, QkNorm, Rope, RopeScaling, Scales};

/// Most layers a file may claim before the config is validated.
const MAX_LAYERS: usize = 1 << 12;

/// The hyperparameters of one file: its `{arch}.*` keys and its tensor list.
pub struct Hparams<'a> {
    pub arch: &'a str,
    pub file: &'a GgufFile,
}

impl Hparams<'_> {
    fn meta(&self) -> &Metadata {
        self.file.metadata()
    }

    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// `{arch}.k` as an integer, if present.
    pub fn u(&self, k: &str) -> Result<Option<usize>> {
        let key = self.key(k);
        self.meta()
            .u64(&key)?
            .map(|x| usize::try_from(x).map_err(|_| fail(format!("GGUF key {key} = {x} is too large"))))
            .transpose()
    }

    pub fn need(&self, k: &str) -> Result<usize> {
        self.u(k)?.ok_or_else(|| fail(format!("GGUF file lacks the key {}", self.key(k))))
    }

    pub fn f(&self, k: &str) -> Result<Option<f64>> {
        self.meta().f64(&self.key(k))
    }

    pub fn b(&self, k: &str) -> Result<Option<bool>> {
        self.meta().bool(&self.key(k))
    }

    pub fn s(&self, k: &str) -> Result<Option<&str>> {
        self.meta().str(&self.key(k))
    }

    pub fn has(&self, tensor: &str) -> bool {
        self.file.tensor(tensor).is_some()
    }

    /// Whether any layer has the tensor `blk.{l}.{leaf}`.
    pub fn any_layer_has(&self, leaf: &str) -> bool {
        let n = self.file.tensors.len();
        (0..n).any(|l| self.has(&format!("blk.{l}.{leaf}")))
    }

    /// The rows (ne[1]) of the first layer's `blk.{l}.{leaf}` matrix, if any layer has one (the
    /// shared experts' width, when the metadata does not say it reliably).
    pub fn rows_of(&self, leaf: &str) -> Option<usize> {
        let suffix = format!(".{leaf}");
        let t = self.file.tensors.iter().find(|t| t.info.name.starts_with("blk.") && t.info.name.ends_with(&suffix))?;
        t.info.ne.get(1).and_then(|&r| usize::try_from(r).ok())
    }

    /// The values of a small F32 vector tensor (LongRoPE's factors), if present.
    pub fn f32s(&self, tensor: &str) -> Result<Option<Vec<f64>>> {
        let Some(t) = self.file.tensor(tensor) else { return Ok(None) };
        if t.info.ggml.id != 0 || t.info.bytes > 1 << 20 {
            return Err(fail(format!("GGUF tensor {tensor} is not a small F32 vector")));
        }
        let mut buf = vec![0u8; t.info.bytes as usize];
        self.file.read(t, 0, &mut buf)?;
        // Through each f32's shortest decimal form, as the metadata's f32 numbers (`Value::as_f64`).
        let wide = |x: &[u8]| Value::F32(f32::from_le_bytes([x[0], x[1], x[2], x[3]])).as_f64().unwrap_or(f64::NAN);
        Ok(Some(buf.chunks_exact(4).map(wide).collect()))
    }
}

/// Per-family choices of the common config (llama.cpp's behaviour for the architecture).
pub struct Defaults {
    pub family: Family,
    /// Renormalise the top-k weights when `expert_weights_norm` is absent.
    pub norm_topk: bool,
    pub qk_norm: QkNorm,
    /// `expert_feed_forward_length` may be absent and `feed_forward_length` then is the experts'.
    pub ffn_is_expert: bool,
}

/// The RoPE of the file: base, rotated fraction, scaling.
fn rope(h: &Hparams, head_dim: usize, ctx: usize) -> Result<Rope> {
    let theta = h.f("rope.freq_base")?.unwrap_or(10000.0);
    let partial = h.u("rope.dimension_count")?.map_or(1.0, |d| d as f64 / head_dim as f64);
    let factor = h.f("rope.scaling.factor")?.filter(|&f| f != 0.0);
    let scaling = match h.s("rope.scaling.type")? {
        None | Some("none") => match h.f("rope.scale_linear")? {
            Some(f) if f != 1.0 => RopeScaling::Linear { factor: f },
            _ => RopeScaling::None,
        },
        Some("linear") => RopeScaling::Linear { factor: factor.unwrap_or(1.0) },
        Some("yarn") => {
            let factor = factor.unwrap_or(1.0);
            let original = h.u("rope.scaling.original_context_length")?.unwrap_or(ctx) as u64;
            // transformers' default attention factor (get_mscale), which llama.cpp applies too.
            let mscale = if factor <= 1.0 { 1.0 } else { 0.1 * factor.ln() + 1.0 };
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings: original,
                beta_fast: h.f("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: h.f("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
                attention_factor: h.f("rope.scaling.yarn_attn_factor")?.unwrap_or(mscale),
                truncate: true,
            }
        }
        Some(other) => return Err(fail(format!("GGUF rope scaling type '{other}' is not supported"))),
    };
    Ok(Rope { theta, partial_rotary_factor: partial, scaling, interleaved: false })
}

/// The config every family shares; families adjust what differs.
pub fn base(h: &Hparams, d: &Defaults) -> Result<Config> {
    let n_layers = h.need("block_count")?.saturating_sub(h.u("nextn_predict_layers")?.unwrap_or(0));
    // Sized from before `Config::validate` runs: bound it here (validate's own cap is lower).
    if n_layers > MAX_LAYERS {
        return Err(fail(format!("GGUF {}.block_count {n_layers} is above {MAX_LAYERS}", h.arch)));
    }
    let hidden = h.need("embedding_length")?;
    let n_heads = h.need("attention.head_count")?;
    if n_heads == 0 {
        return Err(fail(format!("GGUF {}.attention.head_count is 0", h.arch)));
    }
    let head_dim = h.u("attention.key_length")?.unwrap_or(hidden / n_heads);
    // MLA files (deepseek2) describe the latent cache there: their mapping sets the head sizes.
    let mla = h.u("attention.kv_lora_rank")?.is_some();
    if !mla && h.u("attention.value_length")?.is_some_and(|v| v != head_dim) {
        return Err(fail("GGUF attention.value_length differs from key_length: not supported"));
    }
    let ctx = h.u("context_length")?.unwrap_or(4096);
    let embd = h.file.tensor("token_embd.weight").ok_or_else(|| fail("GGUF file has no token_embd.weight"))?;
    let vocab = h.u("vocab_size")?.or(embd.info.ne.get(1).map(|&v| v as usize)).unwrap_or(0);
    let ffn = h.u("feed_forward_length")?;
    let expert_ffn = match (h.u("expert_feed_forward_length")?, d.ffn_is_expert) {
        (Some(f), _) => f,
        (None, true) => ffn.ok_or_else(|| fail(format!("GGUF file lacks {}.feed_forward_length", h.arch)))?,
        (None, false) => h.need("expert_feed_forward_length")?,
    };
    let layer = |l| LayerSpec::attention(h.has(&format!("blk.{l}.ffn_gate_inp.weight")));
    let layers: Vec<LayerSpec> = (0..n_layers).map(layer).collect();
    let any_dense = layers.iter().any(|l| !l.moe);
    let moe = MoeConfig {
        norm_topk_prob: h.b("expert_weights_norm")?.unwrap_or(d.norm_topk),
        shared_expert_ffn: h.u("expert_shared_feed_forward_length")?.unwrap_or(0),
        shared_expert_gate: h.has("blk.0.ffn_gate_inp_shexp.weight")
            || layers.iter().enumerate().any(|(l, _)| h.has(&format!("blk.{l}.ffn_gate_inp_shexp.weight"))),
        ..MoeConfig::plain(h.need("expert_count")?, h.need("expert_used_count")?, expert_ffn)
    };
    Ok(Config {
        family: d.family,
        vocab_size: vocab,
        hidden_size: hidden,
        n_layers,
        n_heads,
        n_kv_heads: h.u("attention.head_count_kv")?.unwrap_or(n_heads),
        head_dim,
        rms_norm_eps: h.f("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
        rope: rope(h, head_dim, ctx)?,
        max_position_embeddings: ctx,
        attention_bias: h.has("blk.0.attn_q.bias") || h.has("blk.0.attn_qkv.bias"),
        qk_norm: d.qk_norm,
        clip_qkv: None,
        moe,
        dense_ffn: if any_dense { ffn.unwrap_or(0) } else { 0 },
        layers,
        tie_embeddings: !h.has("output.weight"),
        hidden_act: "silu".into(),
        bos_token_id: None,
        eos_token_ids: Vec::new(),
        pad_token_id: None,
        scales: Scales::default(),
        mla: None,
        attention_out_bias: false,
        attention_sinks: false,
        norm: NormKind::Rms,
        lm_head_bias: false,
        delta_net: None,
        attn_output_gate: false,
        norm_offset: 0.0,
        qk_norm_after_rope: false,
        attn_temperature: None,
    })
}
