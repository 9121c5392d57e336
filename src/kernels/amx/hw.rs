//! The tile operations on the hardware (AMX-TILE / AMX-BF16 / AMX-INT8 inline asm, stable Rust), and
//! whether this process may run them: cpuid reports both features and Linux granted the tile
//! data state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`), asked once per process.
//! `Hw` is reached only through the AMX table, which exists only when `status()` is Ok.

use super::{TileConfig, Tiles};
use crate::kernels::table::CachedRows;
use core::arch::asm;
use std::sync::OnceLock;

/// The tile registers of this CPU (zero-sized: the state lives in the core).
#[derive(Default)]
pub(crate) struct Hw;

// Each asm block touches only the tile registers and the memory its operands name; none is
// `pure`, so they stay in program order. SAFETY (every block): reached only where `status()` is
// Ok (the instructions exist and the process holds the tile state); memory as the trait says.
impl Tiles for Hw {
    fn configure(&mut self, cfg: &TileConfig) {
        // SAFETY: see above; cfg is 64 readable bytes.
        unsafe {
            asm!("ldtilecfg [{p}]", p = in(reg) cfg as *const TileConfig, options(readonly, nostack, preserves_flags))
        }
    }

    fn zero<const T: u8>(&mut self) {
        // SAFETY: see above.
        unsafe { asm!("tilezero tmm{t}", t = const T, options(nomem, nostack, preserves_flags)) }
    }

    unsafe fn load<const T: u8>(&mut self, ptr: *const u8, stride: usize) {
        // SAFETY: see above; the caller's bounds.
        unsafe {
            asm!("tileloadd tmm{t}, [{p} + {s}*1]", t = const T, p = in(reg) ptr, s = in(reg) stride,
                options(readonly, nostack, preserves_flags))
        }
    }

    fn dpbf16ps<const C: u8, const A: u8, const B: u8>(&mut self) {
        // SAFETY: see above.
        unsafe {
            asm!("tdpbf16ps tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
                options(nomem, nostack, preserves_flags))
        }
    }

    fn dpbssd<const C: u8, const A: u8, const B: u8>(&mut self) {
        // SAFETY: see above (the int8 kernels only where cpuid also has AMX-INT8).
        unsafe {
            asm!("tdpbssd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
                options(nomem, nostack, preserves_flags))
        }
    }

    unsafe fn store<const T: u8>(&mut self, ptr: *mut u8, stride: usize) {
        // SAFETY: see above; the caller's bounds.
        unsafe {
            asm!("tilestored [{p} + {s}*1], tmm{t}", t = const T, p = in(reg) ptr, s = in(reg) stride,
                options(nostack, preserves_flags))
        }
    }

    fn release(&mut self) {
        // SAFETY: see above.
        unsafe { asm!("tilerelease", options(nomem, nostack, preserves_flags)) }
    }
}

/// `arch_prctl` code asking for an extended state component (linux/arch/x86/include/uapi/asm/prctl.h).
const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
/// The AMX tile data state component.
const XFEATURE_XTILEDATA: libc::c_ulong = 18;

/// True when cpuid (leaf 7, sub-leaf 0) reports AMX-BF16 (EDX bit 22) and AMX-TILE (bit 24).
pub(crate) fn cpuid_has_amx_bf16() -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // Leaf 7 is read only when leaf 0 lists it.
    let edx = if __cpuid(0).eax >= 7 { __cpuid_count(7, 0).edx } else { 0 };
    edx & (1 << 22) != 0 && edx & (1 << 24) != 0
}

/// True when cpuid (leaf 7, sub-leaf 0) also reports AMX-INT8 (EDX bit 25): the int8 kernels'
/// condition on top of `status()` (the tile data permission covers every AMX instruction).
pub(crate) fn cpuid_has_amx_int8() -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    let edx = if __cpuid(0).eax >= 7 { __cpuid_count(7, 0).edx } else { 0 };
    edx & (1 << 25) != 0
}

/// Ask Linux for the tile data state for this process (all its threads).
fn request_permission() -> Result<(), std::io::Error> {
    // SAFETY: arch_prctl with these arguments only changes the process's permitted xstate.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Ok when the tiles may run; otherwise why not: no AMX in cpuid (the permission is then not
/// asked for), or the permission refused.
pub(crate) fn decide(has_amx: bool, request: impl FnOnce() -> Result<(), std::io::Error>) -> Result<(), String> {
    if !has_amx {
        return Err("this CPU has no amx_bf16/amx_tile in cpuid".into());
    }
    request().map_err(|e| format!("Linux refused the AMX tile permission (arch_prctl ARCH_REQ_XCOMP_PERM: {e})"))
}

/// Whether this process runs the AMX tiles (decided once).
pub(crate) fn status() -> &'static Result<(), String> {
    static STATUS: OnceLock<Result<(), String>> = OnceLock::new();
    STATUS.get_or_init(|| decide(cpuid_has_amx_bf16(), request_permission))
}

/// The AMX-INT8 product of q8r8 / q4r8 (`table::GemvI8Fn`) on this CPU's tiles: reached only
/// through the AMX table's int8 rows, which exist only when `cpuid_has_amx_int8()`.
pub(crate) fn gemv_i8(
    w: crate::kernels::mat::Mat<'_>,
    rows: std::ops::Range<usize>,
    xa: &crate::kernels::actq::QuantizedActs,
    n: usize,
    out: &mut [f32],
) {
    super::int8::gemv_i8::<Hw>(w, rows, xa, n, out)
}

/// The AMX GEMM (`table::Bf16GemmFn`) on this CPU's tiles.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    transpose: crate::kernels::table::TransposeFn,
    w: crate::kernels::mat::Mat<'_>,
    rows: std::ops::Range<usize>,
    panels: &[u32],
    n: usize,
    out: crate::kernels::table::Bf16Out<'_>,
    pool: bool,
    up: Option<crate::kernels::table::GatedUp<'_>>,
) {
    super::gemm::<Hw>(transpose, w, rows, panels, n, out, pool, up)
}

/// Blocked attention's products on this CPU's tiles (`amx::attend`).
pub(crate) const ATTEND: crate::kernels::table::AttendTiles = crate::kernels::table::AttendTiles {
    scores: super::attend::scores::<Hw>,
    values: super::attend::values::<Hw>,
    pack_values,
};

/// `attend::pack_values` compiled for AVX-512 (32 values per instruction).
fn pack_values(rows: CachedRows<'_>, vw: usize, vwp: usize, ksp: usize, vt: &mut [u32]) {
    #[target_feature(enable = "avx2,avx512f,avx512bw")]
    unsafe fn wide(rows: CachedRows<'_>, vw: usize, vwp: usize, ksp: usize, vt: &mut [u32]) {
        super::attend::pack_values_body(rows, vw, vwp, ksp, vt)
    }
    // SAFETY: reached only through the AMX table, which exists only on CPUs with AVX-512 F/BW
    // (it extends the AVX-512 BF16 table).
    unsafe { wide(rows, vw, vwp, ksp, vt) }
}
