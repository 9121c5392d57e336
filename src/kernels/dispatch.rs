//! Which kernels run: the path's table, chosen once per process from cpuid unless
//! `COLIBRI_CPU=generic|avx2|avx512|amx` asks for another, and `Kernels` — that table together
//! with the activation mode of quantised products, the handle model code computes through.
//!
//! Paths: `Generic` (the scalar reference, any CPU), `Avx2` (x86-64 AVX2 + FMA + F16C) and
//! `Avx512` (AVX2's features plus AVX-512 F/BW/VL and VNNI, and the bf16 kernels where the CPU
//! has AVX-512 BF16; tested on Zen 4). `Amx` is that AVX-512 table with the bf16 prefill GEMM on
//! AMX-BF16 tiles (`amx`; tested on an AMX Xeon): the default where cpuid reports AMX-BF16 and
//! Linux grants the tile state. A request for a path this CPU cannot run selects the best one
//! and `path_note()` says why. An aarch64/NEON path would be one more table.

use super::actq::QuantActivations;
use super::generic::GENERIC;
use super::table::{CpuPath, DeltaToken, Gate, Table};
use std::sync::OnceLock;

/// The kernels a computation runs on: a path's function table and how quantised weights meet
/// their activations. Cheap to copy; sessions carry their own (`SessionOptions::quant_act`).
#[derive(Clone, Copy)]
pub struct Kernels {
    table: &'static Table,
    act: QuantActivations,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernels({}, {})", self.table.path.name(), self.act.name())
    }
}

impl Kernels {
    /// The process's path (cpuid / `COLIBRI_CPU`) with activation mode `act`.
    pub fn new(act: QuantActivations) -> Kernels {
        Kernels { table: table(), act }
    }

    /// Path `path` with activation mode `act`, when this CPU (and build) runs it.
    pub fn on(path: CpuPath, act: QuantActivations) -> Option<Kernels> {
        table_for(path).map(|table| Kernels { table, act })
    }

    /// The path these kernels run on.
    pub fn path(&self) -> CpuPath {
        self.table.path
    }

    /// How quantised weights meet their activations.
    pub fn act(&self) -> QuantActivations {
        self.act
    }

    /// The same path with activation mode `act`.
    pub fn with_act(self, act: QuantActivations) -> Kernels {
        Kernels { act, ..self }
    }

    pub(crate) fn table(&self) -> &'static Table {
        self.table
    }

    /// Σ a[i]·b[i] (f32 KV-cache rows, attention scores).
    #[inline]
    pub fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        (self.table.dot_f32)(a, b)
    }

    /// Σ f16(a[i])·b[i].
    #[inline]
    pub fn dot_f16(&self, a: &[u16], b: &[f32]) -> f32 {
        (self.table.dot_f16)(a, b)
    }

    /// Σ bf16(a[i])·b[i].
    #[inline]
    pub fn dot_bf16(&self, a: &[u16], b: &[f32]) -> f32 {
        (self.table.dot_bf16)(a, b)
    }

    /// y[i] += a · x[i] (x at least as long as y).
    #[inline]
    pub fn axpy_f32(&self, a: f32, x: &[f32], y: &mut [f32]) {
        (self.table.axpy_f32)(a, x, y)
    }

    /// y[i] += a · f16(x[i]).
    #[inline]
    pub fn axpy_f16(&self, a: f32, x: &[u16], y: &mut [f32]) {
        (self.table.axpy_f16)(a, x, y)
    }

    /// y[i] += a · bf16(x[i]).
    #[inline]
    pub fn axpy_bf16(&self, a: f32, x: &[u16], y: &mut [f32]) {
        (self.table.axpy_bf16)(a, x, y)
    }

    /// One token of the gated delta rule on one head's state `s` [k_dim, v_dim], read from
    /// `from` when given (see `table::DeltaStepFn`); out [v_dim] receives S'ᵀq.
    #[inline]
    pub fn delta_step(&self, from: Option<&[f32]>, s: &mut [f32], t: &DeltaToken<'_>, out: &mut [f32]) {
        (self.table.delta_step)(from, s, t, out)
    }

    /// g[i] = act(g[i], u[i]) in place (the MLPs' SwiGLU or GPT-OSS's clamped form, see
    /// `table::GatedFn`), in chunks on the calling pool when g is long.
    pub fn gated(&self, g: &mut [f32], u: &[f32], act: Gate) {
        let f = self.table.gated;
        super::par::gated(g, u, |gc, uc| f(gc, uc, act));
    }
}

impl Default for Kernels {
    /// The process's path with the default activation mode.
    fn default() -> Kernels {
        Kernels::new(QuantActivations::from_env())
    }
}

struct Chosen {
    table: &'static Table,
    note: Option<String>,
}

static CHOSEN: OnceLock<Chosen> = OnceLock::new();

/// The best table this CPU can run: AMX, else AVX-512, else AVX2, else the reference.
fn best() -> &'static Table {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = amx_table().ok().or_else(super::x86::table_512).or_else(super::x86::table) {
        return t;
    }
    &GENERIC
}

/// The table of `path`, or None when this CPU (or build) lacks it.
pub(crate) fn table_for(path: CpuPath) -> Option<&'static Table> {
    match path {
        CpuPath::Generic => Some(&GENERIC),
        #[cfg(target_arch = "x86_64")]
        CpuPath::Avx2 => super::x86::table(),
        #[cfg(target_arch = "x86_64")]
        CpuPath::Avx512 => super::x86::table_512(),
        CpuPath::Amx => amx_table().ok(),
        #[cfg(not(target_arch = "x86_64"))]
        CpuPath::Avx2 | CpuPath::Avx512 => None,
    }
}

/// The AMX table, or why this CPU (or build, or kernel) does not run it.
fn amx_table() -> Result<&'static Table, String> {
    #[cfg(target_arch = "x86_64")]
    return super::x86::table_amx();
    #[cfg(not(target_arch = "x86_64"))]
    Err("AMX exists on x86-64 only".into())
}

fn choose(request: Option<&str>) -> Chosen {
    let Some(req) = request.map(str::trim).filter(|s| !s.is_empty()) else {
        return Chosen { table: best(), note: None };
    };
    let fallback = |why: String| Chosen { table: best(), note: Some(why) };
    match req.to_ascii_lowercase().as_str() {
        "generic" => Chosen { table: &GENERIC, note: None },
        "avx2" => match table_for(CpuPath::Avx2) {
            Some(t) => Chosen { table: t, note: None },
            None => fallback(format!("COLIBRI_CPU=avx2: this CPU lacks AVX2/FMA/F16C; using {}", best().path.name())),
        },
        "avx512" => match table_for(CpuPath::Avx512) {
            Some(t) => Chosen { table: t, note: None },
            None => fallback(format!(
                "COLIBRI_CPU=avx512: this CPU lacks AVX-512 F/BW/VL/VNNI (or AVX2/FMA/F16C); using {}",
                best().path.name()
            )),
        },
        "amx" => match amx_table() {
            Ok(t) => Chosen { table: t, note: None },
            Err(why) => fallback(format!("COLIBRI_CPU=amx: {why}; using {}", best().path.name())),
        },
        _ => fallback(format!("COLIBRI_CPU={req} is not one of generic|avx2|avx512|amx; using {}", best().path.name())),
    }
}

/// The process's table: chosen once.
fn table() -> &'static Table {
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
    [CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Amx]
        .into_iter()
        .filter(|p| table_for(*p).is_some())
        .collect()
}

/// Kernels over a table a test builds (leaked: `Kernels` holds a `'static` table).
#[cfg(test)]
pub(crate) fn kernels_on(table: Table, act: QuantActivations) -> Kernels {
    Kernels { table: Box::leak(Box::new(table)), act }
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
        match amx_table() {
            Ok(_) => assert_eq!((amx.table.path, amx.note.is_none()), (CpuPath::Amx, true)),
            Err(why) => {
                assert_eq!(amx.table.path, best().path);
                assert!(amx.note.as_deref().unwrap_or("").contains(&why), "the fallback must say why: {why}");
                eprintln!("COLIBRI_CPU=amx here: {}", amx.note.as_deref().unwrap_or(""));
            }
        }
        let runs_amx = amx_table().is_ok();
        assert_eq!(best().path == CpuPath::Amx, runs_amx, "the default is AMX exactly where it runs");
        let avx2 = choose(Some("avx2"));
        match table_for(CpuPath::Avx2) {
            Some(_) => assert_eq!((avx2.table.path, avx2.note.is_none()), (CpuPath::Avx2, true)),
            None => assert!(avx2.note.is_some()),
        }
    }
}
