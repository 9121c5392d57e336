//! Memory-access tuning of the matrix-vector kernels that depends on the microarchitecture,
//! not on the instruction set: whether the kernels issue their software prefetches — a float
//! kernel's next row group, an interleaved int8 kernel's stream 1 KiB ahead (q8r8 / q4r8 in
//! `qgroup` / `vnni`; mxfp4r8 keeps its own: no difference measured), and how far ahead
//! the `kr8` kernels (q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8) prefetch their stream.
//!
//! The float matrix-vector kernels read R rows in lockstep; with short rows every group
//! restarts R hardware streams, and on Zen 3 a software prefetch of the next group's line at
//! the current column was added for that. On Zen 4 the same prefetch costs bandwidth (bf16
//! 14336 × 4096 at one thread: 25–27 GB/s without, 19.5–20.6 with; f32 25.5–26.2 vs
//! 19.2–19.9; neutral for 4 KiB rows), so it is off there and on elsewhere, where it was
//! measured. The interleaved int8 kernels' stream prefetch was measured on Zen 3 too (+15–25 %
//! for q4 decode); on Zen 4 it costs as well (olmoe-4l, one thread, CPU ms per decoded token
//! with → without: Q4_K_M 19.8–20.4 → 14.5–15.3, q8r8 15.4–16.2 → 14.9–15.2; prefill equal).
//! `COLIBRI_PREFETCH=on|off` overrides the choice (read once per process).

use std::sync::OnceLock;

/// `COLIBRI_PREFETCH`: Some(true) for on, Some(false) for off, None when unset (read once).
fn forced() -> Option<bool> {
    static FORCED: OnceLock<Option<bool>> = OnceLock::new();
    *FORCED.get_or_init(|| match std::env::var("COLIBRI_PREFETCH").ok().as_deref().map(str::trim) {
        Some("on" | "1") => Some(true),
        Some("off" | "0") => Some(false),
        _ => None,
    })
}

/// Whether the matrix-vector kernels issue their software prefetches (see the module).
pub(super) fn software_prefetch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| forced().unwrap_or_else(|| !zen4_or_later()))
}

/// Units (8 rows × 256 columns; iq4_nlr8 scales it to its 32-column units) ahead that the kr8 kernels
/// prefetch when a pass takes `rows` activation rows, 0 for none. Zen 3: 2 (as the other int8
/// kernels' stream). Zen 5 (family 1Ah, where it was measured): 8 (9–13 KiB ahead; olmoe-4l Q4_K_M, one thread, CPU ms per decoded
/// token: none 7.99, 4 units 7.35, 6 units 7.14, 8 units 7.07; fastest of 3, load 4–6 — the
/// whole-unit prefetch two units ahead was the one that cost, see the module). Zen 4 (family 19h
/// model 11h): 8 from 8 rows on, none below — there the prefetch costs decode a third of its time
/// (the same file, one thread, CPU ms per decoded token with → without: 17.7 / 18.1 / 15.0 →
/// 10.7 / 12.2 / 10.4, load 4–5; `gemv_kr8_expert` q6_kr8 at 1 row 121 → 59 µs, q4_kr8 at 4 rows
/// 109 → 81 µs) while 8-row passes gain from it (q4_kr8 at 8 rows 150 against 190 µs; prefill
/// pp512 CPU 1–2 % less). `COLIBRI_PREFETCH=off` turns it off too.
pub(super) fn kr8_prefetch_units(rows: usize) -> usize {
    static UNITS: OnceLock<(usize, usize)> = OnceLock::new();
    // (units ahead, from how many activation rows per pass)
    let (units, from) = *UNITS.get_or_init(|| match (forced(), amd_family_model()) {
        (Some(false), _) => (0, 0),
        (_, Some((0x19, m))) if m >= 0x10 => (8, 8),
        _ if zen4_or_later() => (8, 0),
        _ => (2, 0),
    });
    if rows >= from {
        units
    } else {
        0
    }
}

/// The AMD family and model (None on other vendors).
fn amd_family_model() -> Option<(u32, u32)> {
    let (vendor, sig) = (core::arch::x86_64::__cpuid(0), core::arch::x86_64::__cpuid(1).eax);
    let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163); // "AuthenticAMD"
    let family = ((sig >> 8) & 0xf) + ((sig >> 20) & 0xff);
    let model = ((sig >> 4) & 0xf) | (((sig >> 16) & 0xf) << 4);
    amd.then_some((family, model))
}

/// AMD family 19h model ≥ 10h (Zen 4; family 19h below that is Zen 3) or a later family.
fn zen4_or_later() -> bool {
    amd_family_model().is_some_and(|(family, model)| family > 0x19 || (family == 0x19 && model >= 0x10))
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_cpu_is_classified() {
        // The VM these figures come from is family 25 model 17 (Zen 4): the decoder must
        // see it as such; any CPU gives a definite answer.
        let sig = core::arch::x86_64::__cpuid(1).eax;
        let family = ((sig >> 8) & 0xf) + ((sig >> 20) & 0xff);
        let model = ((sig >> 4) & 0xf) | (((sig >> 16) & 0xf) << 4);
        if (family, model) == (25, 17) {
            assert!(super::zen4_or_later());
            // Zen 4: the kr8 kernels prefetch in 8-row passes only (none when forced off).
            assert_eq!(super::kr8_prefetch_units(1), 0);
            assert_eq!(super::kr8_prefetch_units(8), if super::forced() == Some(false) { 0 } else { 8 });
        }
    }
}
