//! Element conversion between float dtypes, correctly rounded (round-to-nearest-even via `half`).

use super::safetensors::SrcDType;
use colibri::format::DType;
use half::{bf16, f16};

fn read_f32(src: SrcDType, b: &[u8]) -> f32 {
    match src {
        SrcDType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        SrcDType::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        SrcDType::BF16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
    }
}

/// Convert the little-endian elements in `input` from `src` to `dst`, replacing `out`.
/// Same dtype → a byte copy (bit-exact).
pub fn convert(src: SrcDType, dst: DType, input: &[u8], out: &mut Vec<u8>) {
    out.clear();
    if src.to_colibri() == dst {
        out.extend_from_slice(input);
        return;
    }
    let n = input.len() / src.size();
    out.reserve(n * dst.size() as usize);
    for chunk in input.chunks_exact(src.size()) {
        let x = read_f32(src, chunk);
        match dst {
            DType::F32 => out.extend_from_slice(&x.to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16::from_f32(x).to_bits().to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&bf16::from_f32(x).to_bits().to_le_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_to_bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1.0).
        let x = 1.0f32 + 2f32.powi(-8);
        let mut out = Vec::new();
        convert(SrcDType::F32, DType::BF16, &x.to_le_bytes(), &mut out);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), bf16::from_f32(1.0).to_bits());
        // Just above the tie rounds up.
        let y = 1.0f32 + 2f32.powi(-8) + 2f32.powi(-20);
        convert(SrcDType::F32, DType::BF16, &y.to_le_bytes(), &mut out);
        assert_eq!(bf16::from_bits(u16::from_le_bytes([out[0], out[1]])).to_f32(), 1.0 + 2f32.powi(-7));
    }

    #[test]
    fn same_dtype_is_a_copy() {
        let bytes = [1u8, 2, 3, 4, 5, 6];
        let mut out = Vec::new();
        convert(SrcDType::BF16, DType::BF16, &bytes, &mut out);
        assert_eq!(out, bytes);
    }

    #[test]
    fn bf16_to_f32_is_exact() {
        let v = bf16::from_f32(-3.140625);
        let mut out = Vec::new();
        convert(SrcDType::BF16, DType::F32, &v.to_bits().to_le_bytes(), &mut out);
        assert_eq!(f32::from_le_bytes([out[0], out[1], out[2], out[3]]), -3.140625);
    }
}
