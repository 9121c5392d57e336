//! Element conversion between float dtypes, correctly rounded (round-to-nearest-even via `half`).
//! A finite value that overflows the target type (f16 tops out at 65504) is an error naming the
//! element, never a silent Inf. Block-quantised targets are `quantize.rs`'s job.

use super::safetensors::SrcDType;
use colibri::format::DType;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};

/// Index and value of the first finite source element that became non-finite.
#[derive(Debug, PartialEq)]
pub struct Overflow {
    pub index: usize,
    pub value: f32,
}

/// The little-endian elements in `input` widened (exactly) to f32, replacing `out`.
pub fn widen(src: SrcDType, input: &[u8], out: &mut Vec<f32>) {
    out.clear();
    match src {
        SrcDType::F32 => out.extend(input.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        SrcDType::F16 => {
            out.extend(input.chunks_exact(2).map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()))
        }
        SrcDType::BF16 => {
            out.extend(input.chunks_exact(2).map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()))
        }
        // Bytes are not values; `sources` sends MXFP4 bytes to `stream`'s own path, never here.
        SrcDType::U8 => out.extend(input.iter().map(|&b| f32::from(b))),
        // Unscaled codes: `sources` gives every fp8 piece its scales, read by `fp8::BlockScale`.
        SrcDType::F8E4M3 => out.extend(input.iter().map(|&b| crate::fp8::e4m3_to_f32(b))),
    }
}

/// Convert the little-endian elements in `input` from `src` to the float dtype `dst`, replacing
/// `out`. Same dtype → a byte copy (bit-exact).
pub fn convert(src: SrcDType, dst: DType, input: &[u8], out: &mut Vec<u8>) -> Result<(), Overflow> {
    out.clear();
    if src.to_colibri() == Some(dst) && src != SrcDType::F8E4M3 {
        out.extend_from_slice(input);
        return Ok(());
    }
    let mut wide = Vec::with_capacity(input.len() / src.size());
    widen(src, input, &mut wide);
    from_f32(dst, &wide, out)
}

/// Encode f32 values as the float dtype `dst` (little-endian), replacing `out`.
pub fn from_f32(dst: DType, wide: &[f32], out: &mut Vec<u8>) -> Result<(), Overflow> {
    out.clear();
    match dst {
        DType::F32 => out.extend(wide.iter().flat_map(|x| x.to_le_bytes())),
        DType::F16 | DType::BF16 => {
            let mut bits = vec![0u16; wide.len()];
            if dst == DType::F16 {
                bits.reinterpret_cast_mut::<f16>().convert_from_f32_slice(wide);
            } else {
                bits.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(wide);
            }
            let limit = if dst == DType::F16 { 0x7c00 } else { 0x7f80 };
            if let Some(index) = bits.iter().zip(wide).position(|(&b, x)| b & limit == limit && x.is_finite()) {
                return Err(Overflow { index, value: wide[index] });
            }
            out.extend(bits.iter().flat_map(|b| b.to_le_bytes()));
        }
        // The plan sends block-quantised tensors to `quantize`, never here.
        block => unreachable!("cast::from_f32 to block dtype {block}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_to_bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1.0).
        let x = 1.0f32 + 2f32.powi(-8);
        let mut out = Vec::new();
        convert(SrcDType::F32, DType::BF16, &x.to_le_bytes(), &mut out).unwrap();
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), bf16::from_f32(1.0).to_bits());
        // Just above the tie rounds up.
        let y = 1.0f32 + 2f32.powi(-8) + 2f32.powi(-20);
        convert(SrcDType::F32, DType::BF16, &y.to_le_bytes(), &mut out).unwrap();
        assert_eq!(bf16::from_bits(u16::from_le_bytes([out[0], out[1]])).to_f32(), 1.0 + 2f32.powi(-7));
    }

    #[test]
    fn same_dtype_is_a_copy() {
        let bytes = [1u8, 2, 3, 4, 5, 6];
        let mut out = Vec::new();
        convert(SrcDType::BF16, DType::BF16, &bytes, &mut out).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn bf16_to_f32_is_exact() {
        let v = bf16::from_f32(-3.140625);
        let mut out = Vec::new();
        convert(SrcDType::BF16, DType::F32, &v.to_bits().to_le_bytes(), &mut out).unwrap();
        assert_eq!(f32::from_le_bytes([out[0], out[1], out[2], out[3]]), -3.140625);
    }

    #[test]
    fn f16_overflow_is_reported_not_written_as_inf() {
        let input: Vec<u8> = [1.0f32, 70000.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        assert_eq!(convert(SrcDType::F32, DType::F16, &input, &mut out), Err(Overflow { index: 1, value: 70000.0 }));
        // A source Inf stays Inf (the full validation rejects it later): not an overflow.
        let input: Vec<u8> = [f32::INFINITY].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(convert(SrcDType::F32, DType::F16, &input, &mut out).is_ok());
    }
}
