//! ggml tensor types: each type's number, name and block geometry (gguf-py's `GGML_QUANT_SIZES`),
//! enough to size and bounds-check any tensor of a GGUF file, and the colibri dtype a type is
//! stored as (F32/F16/BF16 as themselves, every other type `t` as dtype id 32 + t when this build
//! has that dtype).

use colibri::format::DType;

/// One ggml type: number, name, elements per block, bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub block_bytes: u64,
}

const fn t(id: u32, name: &'static str, block: u64, block_bytes: u64) -> GgmlType {
    GgmlType { id, name, block, block_bytes }
}

/// Every ggml type a GGUF file may hold (numbers 4, 5, 31..=33 and 36..=38 were removed).
static TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),
    t(3, "Q4_1", 32, 20),
    t(6, "Q5_0", 32, 22),
    t(7, "Q5_1", 32, 24),
    t(8, "Q8_0", 32, 34),
    t(9, "Q8_1", 32, 36),
    t(10, "Q2_K", 256, 84),
    t(11, "Q3_K", 256, 110),
    t(12, "Q4_K", 256, 144),
    t(13, "Q5_K", 256, 176),
    t(14, "Q6_K", 256, 210),
    t(15, "Q8_K", 256, 292),
    t(16, "IQ2_XXS", 256, 66),
    t(17, "IQ2_XS", 256, 74),
    t(18, "IQ3_XXS", 256, 98),
    t(19, "IQ1_S", 256, 50),
    t(20, "IQ4_NL", 32, 18),
    t(21, "IQ3_S", 256, 110),
    t(22, "IQ2_S", 256, 82),
    t(23, "IQ4_XS", 256, 136),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54),
    t(35, "TQ2_0", 256, 66),
    t(39, "MXFP4", 32, 17),
    t(40, "NVFP4", 64, 36),
    t(41, "Q1_0", 128, 18),
    t(42, "Q2_0", 64, 18),
];

impl GgmlType {
    /// The type numbered `id`, if ggml has one.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TYPES.iter().find(|t| t.id == id).copied()
    }

    /// Bytes of a tensor of this type with `ne` elements per dimension (ne[0] innermost), or
    /// None when ne[0] is not a whole number of blocks or the size overflows.
    pub fn bytes(&self, ne: &[u64]) -> Option<u64> {
        let (&first, rest) = ne.split_first()?;
        if first % self.block != 0 {
            return None;
        }
        let row = (first / self.block).checked_mul(self.block_bytes)?;
        rest.iter().try_fold(row, |acc, &d| acc.checked_mul(d))
    }

    /// The colibri dtype holding this type's bytes unchanged, if this build has one.
    pub fn dtype(&self) -> Option<DType> {
        match self.id {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            30 => Some(DType::BF16),
            id => DType::from_id(32 + id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_block_geometry() {
        let q8 = GgmlType::from_id(8).unwrap();
        assert_eq!(q8.bytes(&[64, 3]), Some(2 * 34 * 3));
        assert_eq!(q8.bytes(&[48, 3]), None, "48 is not whole blocks of 32");
        assert_eq!(GgmlType::from_id(0).unwrap().bytes(&[u64::MAX, 2]), None, "overflow");
        assert_eq!(GgmlType::from_id(4), None, "removed type");
        assert_eq!(q8.dtype(), Some(DType::Q8_0));
        assert_eq!(GgmlType::from_id(30).unwrap().dtype(), Some(DType::BF16));
        assert_eq!(GgmlType::from_id(24).unwrap().dtype(), None, "I8 has no colibri dtype");
    }
}
