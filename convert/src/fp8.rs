//! DeepSeek-V3/R1's FP8 checkpoints: float8_e4m3fn weights, each with a `weight_scale_inv` of
//! one f32 per [block_rows, block_cols] tile (`quantization_config.weight_block_size`, 128 × 128
//! on the hub). The converter dequantises exactly as transformers and DeepSeek's own
//! `weight_dequant` do — w = e4m3(q) · scale in f32 — and stores the result like any float
//! source (then `--dtype` / `--quantize` as usual).

use crate::error::{fail, Result};
use crate::json_keys::get;
use serde_json::Value;

/// The exact value of a float8_e4m3fn byte (1 sign, 4 exponent bits of bias 7, 3 mantissa bits;
/// no infinities, S.1111.111 is NaN).
pub fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp, man) = (i32::from((b >> 3) & 0xf), f32::from(b & 7));
    if exp == 15 && man == 7.0 {
        return f32::NAN;
    }
    let magnitude = if exp == 0 { man / 8.0 * 2f32.powi(-6) } else { (1.0 + man / 8.0) * 2f32.powi(exp - 7) };
    sign * magnitude
}

/// The tile shape of `quantization_config` when it describes FP8 block scaling (quant_method
/// "fp8"); None without a quantization_config (or with GPT-OSS's own MXFP4 one); an error naming
/// the key for any other scheme.
pub fn block_size(hf: &Value) -> Result<Option<[u64; 2]>> {
    let Some(q) = get(hf, "quantization_config") else { return Ok(None) };
    let method = get(q, "quant_method").and_then(Value::as_str).unwrap_or("?");
    if method == "mxfp4" && get(hf, "model_type").and_then(Value::as_str) == Some("gpt_oss") {
        return Ok(None); // GPT-OSS's MXFP4 experts: read as they are (`gpt_oss`), no fp8 here
    }
    let fmt = get(q, "fmt").and_then(Value::as_str).unwrap_or("e4m3");
    if method != "fp8" || fmt != "e4m3" {
        return Err(fail(format!(
            "config.json quantization_config (quant_method {method}, fmt {fmt}): the checkpoint is already \
             quantised by a scheme colibri does not read; convert from the f32/f16/bf16 original (colibri reads \
             only DeepSeek's block-scaled fp8 e4m3)"
        )));
    }
    let sizes: Option<Vec<Option<u64>>> =
        get(q, "weight_block_size").and_then(Value::as_array).map(|a| a.iter().map(Value::as_u64).collect());
    match sizes {
        None => Ok(Some([128, 128])),
        Some(v) => match v[..] {
            [Some(r), Some(c)] if r > 0 && c > 0 => Ok(Some([r, c])),
            _ => Err(fail("config.json quantization_config.weight_block_size must be two positive integers")),
        },
    }
}

/// The scales of one FP8 weight [rows, cols]: one f32 per tile, row-major [⌈rows/br⌉, ⌈cols/bc⌉].
#[derive(Clone, Debug, PartialEq)]
pub struct BlockScale {
    pub scales: Vec<f32>,
    /// Tile rows and columns.
    pub block: [u64; 2],
    /// Columns of the weight (its row length).
    pub cols: u64,
}

impl BlockScale {
    /// Check `scales` against a weight of `shape` tiled by `block`.
    pub fn new(
        name: &str,
        scales: Vec<f32>,
        scale_shape: &[u64],
        shape: &[u64],
        block: [u64; 2],
    ) -> Result<BlockScale> {
        let want = match shape {
            [r, c] => vec![r.div_ceil(block[0]), c.div_ceil(block[1])],
            _ => return Err(fail(format!("{name}: an fp8 weight must be a matrix, not shape {shape:?}"))),
        };
        if scale_shape != want.as_slice() || scales.len() as u64 != want.iter().product::<u64>() {
            return Err(fail(format!(
                "{name}_scale_inv has shape {scale_shape:?}; a {shape:?} weight in {block:?} tiles needs {want:?}"
            )));
        }
        Ok(BlockScale { scales, block, cols: shape[1] })
    }

    /// `out` = the fp8 bytes `input`, the elements `first ..` of the weight (row-major),
    /// dequantised.
    pub fn dequantise(&self, input: &[u8], first: u64, out: &mut Vec<f32>) {
        let tiles_per_row = self.cols.div_ceil(self.block[1]);
        out.clear();
        out.extend(input.iter().enumerate().map(|(i, &b)| {
            let e = first + i as u64;
            let (r, c) = (e / self.cols, e % self.cols);
            e4m3_to_f32(b) * self.scales[((r / self.block[0]) * tiles_per_row + c / self.block[1]) as usize]
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_decodes_the_format_s_landmarks() {
        // Landmarks of float8_e4m3fn: 1, the largest normal 448, the smallest normal 2^-6, the
        // smallest subnormal 2^-9, signed zero, NaN.
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0xfe), -448.0);
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x80), 0.0);
        assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
        assert_eq!(e4m3_to_f32(0x3c), 1.5);
    }

    #[test]
    fn each_tile_takes_its_own_scale() {
        // A [3, 5] weight in [2, 4] tiles: tiles (0,0) (0,1) / (1,0) (1,1).
        let s = BlockScale::new("w", vec![1.0, 2.0, 4.0, 8.0], &[2, 2], &[3, 5], [2, 4]).unwrap();
        let mut out = Vec::new();
        s.dequantise(&[0x38; 15], 0, &mut out);
        assert_eq!(out, [1., 1., 1., 1., 2., 1., 1., 1., 1., 2., 4., 4., 4., 4., 8.]);
        s.dequantise(&[0x38; 2], 9, &mut out);
        assert_eq!(out, [2., 4.], "elements 9 and 10: row 1 col 4, row 2 col 0");
        assert!(BlockScale::new("w", vec![1.0; 2], &[1, 2], &[3, 5], [2, 4]).is_err(), "too few tiles");
    }

    #[test]
    fn other_quantisation_schemes_are_refused_naming_the_key() {
        let gptq: Value = serde_json::json!({"quantization_config": {"quant_method": "gptq"}});
        let e = block_size(&gptq).unwrap_err().to_string();
        assert!(e.contains("quantization_config") && e.contains("gptq"), "{e}");
        let fp8: Value =
            serde_json::json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 32]}});
        assert_eq!(block_size(&fp8).unwrap(), Some([64, 32]));
        assert_eq!(block_size(&serde_json::json!({})).unwrap(), None);
    }
}
