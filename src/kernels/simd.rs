//! Run-time choice of kernel implementations. Today every entry is the scalar reference (which
//! LLVM vectorises for the baseline target); the SIMD paths register here, picked once from
//! cpuid and `COLIBRI_CPU`, so model code never names an instruction set.

use super::reference;
use std::sync::OnceLock;

/// The kernel path in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuPath {
    /// Portable scalar reference.
    Generic,
}

/// Function table of one path.
pub(crate) struct Table {
    pub path: CpuPath,
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    pub dot_f16: fn(&[u16], &[f32]) -> f32,
    pub dot_bf16: fn(&[u16], &[f32]) -> f32,
}

static GENERIC: Table = Table {
    path: CpuPath::Generic,
    dot_f32: reference::dot_f32,
    dot_f16: reference::dot_f16,
    dot_bf16: reference::dot_bf16,
};

static CHOSEN: OnceLock<&'static Table> = OnceLock::new();

pub(crate) fn table() -> &'static Table {
    CHOSEN.get_or_init(|| &GENERIC)
}

/// The path the kernels run on.
pub fn active_path() -> CpuPath {
    table().path
}
