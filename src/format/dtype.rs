//! Element types of tensors in a .colibri file: their ids on disk and how many bytes a given
//! number of elements takes. Float types store one value per element; block-quantised types
//! store blocks of `GROUP` elements in the layout of `kernels::quant` (quants, then f16 scales).

use crate::kernels::quant;

/// Elements per quantisation block of the block-quantised dtypes (the table's `group_size`).
pub const GROUP: u32 = quant::QK as u32;

/// A tensor element type. The numeric ids are frozen (they are written to disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE-754 binary32.
    F32,
    /// IEEE-754 binary16.
    F16,
    /// bfloat16 (the top half of a binary32).
    BF16,
    /// 8-bit blocks of 32: i8 quants, then one f16 scale per block (`kernels::quant` q8).
    Q8,
    /// 4-bit blocks of 32: packed nibbles, then one f16 scale per block (`kernels::quant` q4).
    Q4,
}

impl DType {
    /// Parse an on-disk id; ids 3..=15 are reserved for further float types and 18.. for
    /// further block-quantised types.
    pub fn from_id(id: u32) -> Option<DType> {
        match id {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            2 => Some(DType::BF16),
            16 => Some(DType::Q8),
            17 => Some(DType::Q4),
            _ => None,
        }
    }

    /// The on-disk id.
    pub fn id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            DType::Q8 => 16,
            DType::Q4 => 17,
        }
    }

    /// True for the block-quantised types.
    pub fn is_quantized(self) -> bool {
        matches!(self, DType::Q8 | DType::Q4)
    }

    /// The `group_size` a tensor record of this dtype carries: `GROUP` for block-quantised
    /// types, 0 for floats.
    pub fn group_size(self) -> u32 {
        if self.is_quantized() {
            GROUP
        } else {
            0
        }
    }

    /// Bytes per element of a float type; `None` for block-quantised types (use `bytes_for`).
    pub fn float_size(self) -> Option<u64> {
        match self {
            DType::F32 => Some(4),
            DType::F16 | DType::BF16 => Some(2),
            DType::Q8 | DType::Q4 => None,
        }
    }

    /// Lower-case name used by the CLI and in JSON ("f32", "f16", "bf16", "q8", "q4").
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::Q8 => "q8",
            DType::Q4 => "q4",
        }
    }

    /// Parse a CLI/JSON name.
    pub fn from_name(name: &str) -> Option<DType> {
        match name.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Some(DType::F32),
            "f16" | "float16" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            "q8" => Some(DType::Q8),
            "q4" => Some(DType::Q4),
            _ => None,
        }
    }

    /// Bytes needed for `elements` elements stored as one matrix (for block types: all quants,
    /// then all scales); `None` on overflow, or for block types when `elements` is not a
    /// multiple of `GROUP`.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        if let Some(size) = self.float_size() {
            return elements.checked_mul(size);
        }
        if elements % u64::from(GROUP) != 0 {
            return None;
        }
        // Bounded so the formulas of `quant` (at most 17/16 · n) cannot overflow.
        let n = usize::try_from(elements).ok().filter(|&n| n <= usize::MAX / 2)?;
        let bytes = if self == DType::Q8 { quant::q8_bytes(n) } else { quant::q4_bytes(n) };
        u64::try_from(bytes).ok()
    }

    /// Stored bits per weight (8.5 for q8, 4.5 for q4: the f16 scale of each block included).
    pub fn bits_per_weight(self) -> f64 {
        let g = u64::from(GROUP);
        self.bytes_for(g).map_or(0.0, |b| (b * 8) as f64 / g as f64)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_types_size_whole_groups_only() {
        assert_eq!(DType::Q8.bytes_for(64), Some(64 + 4));
        assert_eq!(DType::Q4.bytes_for(64), Some(32 + 4));
        assert_eq!(DType::Q8.bytes_for(48), None);
        assert_eq!(DType::Q4.bytes_for(u64::MAX - 31), None);
        assert_eq!(DType::F16.bytes_for(3), Some(6));
        assert_eq!(DType::Q8.bits_per_weight(), 8.5);
        assert_eq!(DType::Q4.bits_per_weight(), 4.5);
    }

    #[test]
    fn ids_round_trip() {
        for d in [DType::F32, DType::F16, DType::BF16, DType::Q8, DType::Q4] {
            assert_eq!(DType::from_id(d.id()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_id(18), None);
        assert_eq!(DType::from_id(3), None);
    }
}
