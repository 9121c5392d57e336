//! Run-time choice of kernel implementations. Every path fills one `Table`; the best path the
//! CPU supports is picked once (cpuid), unless `COLIBRI_CPU=generic|avx2|avx512|amx` asks for
//! another. Model code never names an instruction set.
//!
//! Paths: `Generic` (the scalar reference, any CPU) and `Avx2` (x86-64 AVX2 + FMA + F16C).
//! AVX-512 and AMX are recognised names but have no kernels yet: asking for them selects the best
//! implemented path and says so in `path_note()`. An aarch64/NEON path would be one more table.

use super::{generic, Mat};
use std::ops::Range;
use std::sync::OnceLock;

/// The kernel path in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuPath {
    /// Portable scalar reference.
    Generic,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
}

impl CpuPath {
    /// Lower-case name, as `COLIBRI_CPU` spells it.
    pub fn name(self) -> &'static str {
        match self {
            CpuPath::Generic => "generic",
            CpuPath::Avx2 => "avx2",
        }
    }
}

/// y block of a matrix-vector product: for rows `rows` of `w` ([_, cols]) and n activation rows
/// `x` ([n, cols]), out[t·rows.len() + i] = w[rows.start + i] · x[t].
pub(crate) type GemvFn = fn(w: Mat<'_>, cols: usize, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]);
/// The same for q8/q4 `w` against int8-quantised activation rows (W8A8 / W4A8).
pub(crate) type GemvI8Fn =
    fn(w: Mat<'_>, cols: usize, rows: Range<usize>, xa: &super::actq::QuantizedActs, n: usize, out: &mut [f32]);
/// Elements [k0, k0 + kc) of rows `rows` of `w` ([_, cols]) widened to f32 into out
/// ([rows.len(), kc], kc = out.len() / rows.len()).
pub(crate) type WidenFn = fn(w: Mat<'_>, cols: usize, rows: Range<usize>, k0: usize, out: &mut [f32]);
/// GEMM micro-tile: c[i·ldc + j] += Σ_k a[i·kc + k] · b[k·NR + j] for i < MR, j < nr, k ascending;
/// nr is NR, or NR / 2 for a last panel holding at most that many activation rows.
pub(crate) type TileFn = fn(a: &[f32], b: &[f32], kc: usize, c: &mut [f32], ldc: usize, nr: usize);

/// Int8 activation blocks of x (a multiple of 32 values): quants, scales, sums per block.
pub(crate) type QuantizeFn = fn(x: &[f32], qs: &mut [i8], d: &mut [f32], sums: &mut [i32]);

/// Function table of one path.
pub(crate) struct Table {
    pub path: CpuPath,
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    pub dot_f16: fn(&[u16], &[f32]) -> f32,
    pub dot_bf16: fn(&[u16], &[f32]) -> f32,
    pub gemv: GemvFn,
    pub gemv_i8: GemvI8Fn,
    pub widen: WidenFn,
    pub tile: TileFn,
    /// y[i] += a · x[i] for a float vector x (attention's value accumulation).
    pub axpy: fn(a: f32, x: Mat<'_>, y: &mut [f32]),
    /// Int8 activation blocks (`actq::quantize_blocks`).
    pub quantize: QuantizeFn,
}

pub(crate) static GENERIC: Table = Table {
    path: CpuPath::Generic,
    dot_f32: super::reference::dot_f32,
    dot_f16: super::reference::dot_f16,
    dot_bf16: super::reference::dot_bf16,
    gemv: generic::gemv,
    gemv_i8: generic::gemv_i8,
    widen: generic::widen_rows,
    tile: generic::tile,
    axpy: generic::axpy,
    quantize: super::actq::quantize_blocks,
};

struct Choice {
    table: &'static Table,
    note: Option<String>,
}

static CHOSEN: OnceLock<Choice> = OnceLock::new();

/// The best table this CPU can run.
fn best() -> &'static Table {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = super::x86::table() {
        return t;
    }
    &GENERIC
}

/// The table for an explicit request, or None when this CPU (or build) lacks it.
pub(crate) fn table_for(path: CpuPath) -> Option<&'static Table> {
    match path {
        CpuPath::Generic => Some(&GENERIC),
        #[cfg(target_arch = "x86_64")]
        CpuPath::Avx2 => super::x86::table(),
        #[cfg(not(target_arch = "x86_64"))]
        CpuPath::Avx2 => None,
    }
}

fn choose(request: Option<&str>) -> Choice {
    let Some(req) = request.map(str::trim).filter(|s| !s.is_empty()) else {
        return Choice { table: best(), note: None };
    };
    let fallback = |why: String| Choice { table: best(), note: Some(why) };
    match req.to_ascii_lowercase().as_str() {
        "generic" => Choice { table: &GENERIC, note: None },
        "avx2" => match table_for(CpuPath::Avx2) {
            Some(t) => Choice { table: t, note: None },
            None => fallback(format!("COLIBRI_CPU=avx2: this CPU lacks AVX2/FMA/F16C; using {}", best().path.name())),
        },
        "avx512" | "amx" => {
            fallback(format!("COLIBRI_CPU={req}: no {req} kernels in this build; using {}", best().path.name()))
        }
        _ => fallback(format!("COLIBRI_CPU={req} is not one of generic|avx2|avx512|amx; using {}", best().path.name())),
    }
}

pub(crate) fn table() -> &'static Table {
    CHOSEN.get_or_init(|| choose(std::env::var("COLIBRI_CPU").ok().as_deref())).table
}

/// The path the kernels run on.
pub fn active_path() -> CpuPath {
    table().path
}

/// Why the active path differs from what `COLIBRI_CPU` asked for (None when it does not).
pub fn path_note() -> Option<&'static str> {
    table();
    CHOSEN.get().and_then(|c| c.note.as_deref())
}

/// Every path this CPU can run (for tests and benchmarks).
pub fn available_paths() -> Vec<CpuPath> {
    [CpuPath::Generic, CpuPath::Avx2].into_iter().filter(|p| table_for(*p).is_some()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_resolve_to_runnable_paths_with_notes() {
        assert_eq!(choose(Some("generic")).table.path, CpuPath::Generic);
        assert!(choose(Some("generic")).note.is_none());
        assert_eq!(choose(None).table.path, best().path);
        let bogus = choose(Some("sse9"));
        assert_eq!(bogus.table.path, best().path);
        assert!(bogus.note.as_deref().unwrap_or("").contains("sse9"));
        let amx = choose(Some("AMX"));
        assert!(amx.note.is_some(), "AMX has no kernels yet: the choice must say so");
        let avx2 = choose(Some("avx2"));
        match table_for(CpuPath::Avx2) {
            Some(_) => assert_eq!((avx2.table.path, avx2.note.is_none()), (CpuPath::Avx2, true)),
            None => assert!(avx2.note.is_some()),
        }
    }
}
