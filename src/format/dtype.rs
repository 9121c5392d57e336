//! Element types of tensors in a .colibri file: their ids on disk and their sizes.

/// A tensor element type. The numeric ids are frozen (they are written to disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE-754 binary32.
    F32,
    /// IEEE-754 binary16.
    F16,
    /// bfloat16 (the top half of a binary32).
    BF16,
}

impl DType {
    /// Parse an on-disk id; ids 3..=15 are reserved for further float types and 16.. for
    /// block-quantised types, which this version does not read yet.
    pub fn from_id(id: u32) -> Option<DType> {
        match id {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            2 => Some(DType::BF16),
            _ => None,
        }
    }

    /// The on-disk id.
    pub fn id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Lower-case name used by the CLI and in JSON ("f32", "f16", "bf16").
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// Parse a CLI/JSON name.
    pub fn from_name(name: &str) -> Option<DType> {
        match name.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Some(DType::F32),
            "f16" | "float16" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            _ => None,
        }
    }

    /// Bytes needed for `elements` elements; `None` on overflow.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        elements.checked_mul(self.size())
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
