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
    /// Q8 blocks in 8-row interleaved groups (`kernels::quant::Layout::Interleaved`); rows a
    /// multiple of 8.
    Q8R8,
    /// Q4 blocks in 8-row interleaved groups; rows a multiple of 8.
    Q4R8,
}

impl DType {
    /// Parse an on-disk id; ids 3..=15 are reserved for further float types and 20.. for
    /// further block-quantised types.
    pub fn from_id(id: u32) -> Option<DType> {
        match id {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            2 => Some(DType::BF16),
            16 => Some(DType::Q8),
            17 => Some(DType::Q4),
            18 => Some(DType::Q4R8),
            19 => Some(DType::Q8R8),
            _ => None,
        }
    }

    /// The on-disk id. Two dtypes whose tensors take the same bytes (f16/bf16, q8/q8r8,
    /// q4/q4r8) have ids two bits apart, so one flipped bit of a dtype field never turns a valid
    /// tensor into another valid one (the byte length check catches every other flip).
    pub fn id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            DType::Q8 => 16,
            DType::Q4 => 17,
            DType::Q4R8 => 18,
            DType::Q8R8 => 19,
        }
    }

    /// True for the block-quantised types.
    pub fn is_quantized(self) -> bool {
        matches!(self, DType::Q8 | DType::Q4 | DType::Q8R8 | DType::Q4R8)
    }

    /// True for the block types stored in 8-row interleaved groups (their rows must be a
    /// multiple of `kernels::quant::GROUP_ROWS`).
    pub fn is_interleaved(self) -> bool {
        matches!(self, DType::Q8R8 | DType::Q4R8)
    }

    /// The block encoding, whatever the layout: Q8 for Q8/Q8R8, Q4 for Q4/Q4R8, else itself.
    pub fn encoding(self) -> DType {
        match self {
            DType::Q8R8 => DType::Q8,
            DType::Q4R8 => DType::Q4,
            d => d,
        }
    }

    /// The same encoding stored in 8-row interleaved groups (block types; floats unchanged).
    pub fn interleaved(self) -> DType {
        match self {
            DType::Q8 => DType::Q8R8,
            DType::Q4 => DType::Q4R8,
            d => d,
        }
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
            DType::Q8 | DType::Q4 | DType::Q8R8 | DType::Q4R8 => None,
        }
    }

    /// Lower-case name used by the CLI and in JSON ("f32", "f16", "bf16", "q8", "q4", "q8r8",
    /// "q4r8").
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::Q8 => "q8",
            DType::Q4 => "q4",
            DType::Q8R8 => "q8r8",
            DType::Q4R8 => "q4r8",
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
            "q8r8" => Some(DType::Q8R8),
            "q4r8" => Some(DType::Q4R8),
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
        let bytes = if self.encoding() == DType::Q8 { quant::q8_bytes(n) } else { quant::q4_bytes(n) };
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
        assert_eq!(DType::Q4R8.bytes_for(64), Some(32 + 4));
        assert_eq!(DType::Q8R8.bits_per_weight(), 8.5);
    }

    #[test]
    fn ids_round_trip() {
        for d in [DType::F32, DType::F16, DType::BF16, DType::Q8, DType::Q4, DType::Q8R8, DType::Q4R8] {
            assert_eq!(DType::from_id(d.id()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
            assert_eq!(d.interleaved().encoding(), d.encoding());
        }
        assert_eq!(DType::from_id(20), None);
        let same_size = [(DType::F16, DType::BF16), (DType::Q8, DType::Q8R8), (DType::Q4, DType::Q4R8)];
        for (a, b) in same_size {
            assert!((a.id() ^ b.id()).count_ones() >= 2, "{a} and {b} are one bit flip apart");
        }
        assert_eq!(DType::from_id(3), None);
    }
}
