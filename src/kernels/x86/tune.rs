//! Memory-access tuning of the matrix-vector kernels that depends on the microarchitecture,
//! not on the instruction set: whether the kernels issue their software prefetches — a float
//! kernel's next row group, an interleaved int8 kernel's stream 1 KiB ahead (q8r8 / q4r8 in
//! `qgroup` / `vnni`; mxfp4r8's own, off on Zen 4 only), and how far ahead the `kr8` kernels
//! (q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8) prefetch their stream.
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
//!
//! How far ahead the interleaved int8 kernels ask for their stream (`stream_ahead`) is the
//! third: one stream per task reads at what one core's hardware prefetcher keeps in flight,
//! which on the Emerald Rapids VM is a quarter below what several streams read — and, for the
//! same reason, from how many activation rows the `kr8` kernels read two row groups (two
//! streams) per pass (`kr8_two_groups_from`).
//!
//! One choice is about an instruction's rate rather than memory: whether the AVX-512 path takes
//! its bf16 products on AVX-512 BF16 (`dpbf16_full_rate`).

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
/// kernels' stream). Zen 5 (family 1Ah, where it was measured): 8 (9–13 KiB ahead; olmoe-4l
/// Q4_K_M, one thread, CPU ms per decoded token: none 7.99, 4 units 7.35, 6 units 7.14, 8 units
/// 7.07; fastest of 3, load 4–6). Zen 4 (family 19h model ≥ 10h): 8 from 8 rows on, none below —
/// there the prefetch costs decode a third of its time (DeepSeek-V2-Lite-3l Q4_K_M, q6_kr8
/// lm_head and q4_kr8 experts, one thread, CPU ms per decoded token, two rounds, load 4.5: none
/// 14.3 / 14.1, 1 unit 17.1 / 17.0, 2 17.9 / 17.3, 4 19.7 / 19.4, 8 22.2 / 22.3; olmoe-4l Q4_K_M
/// with → without 17.7 / 18.1 / 15.0 → 10.7 / 12.2 / 10.4; `gemv_kr8_expert` q6_kr8 at 1 row 121
/// → 59 µs, q4_kr8 at 4 rows 109 → 81 µs) while 8-row passes gain from it (q4_kr8 at 8 rows 150
/// against 190 µs; prefill pp512 CPU 1–2 % less). Intel: 1 — on the AMX Xeon (family 6 model 167
/// as its VM reports), olmoe-4l Q4_K_M (a llama-quantize'd GGUF, converted), `colibri bench -t 1,2
/// -p 0 -n 64 -r 3`, t/s, two rounds alternating: 0 units 39.5–40.7 (one thread), 1 unit
/// 54.9–55.3 / 94.5–97.5 (two threads), 2 units 48.1–50.8 / 89.9–91.2, 3 units 36.7–36.8 /
/// 72.0–86.1, 4 units 33.2; pp512 at two threads 741–760 with 1 unit against 745–756 with 2.
/// The Emerald Rapids VM (family 6 model 207; see `stream_ahead`): 4 — olmoe-4l Q4_K_M, tg32
/// against 1 unit, `bench/ab.py`, six rounds alternating, geometric mean of the t/s ratios: 2
/// units 1.04 / 1.03 (one / two threads), 4 units 1.10–1.11 / 1.11, 6 units 1.08 / 1.15, 8
/// units 1.12 / 1.11 (the same into L2 only or into L1).
/// `COLIBRI_PREFETCH=off` turns it off everywhere.
pub(super) fn kr8_prefetch_units(rows: usize) -> usize {
    static UNITS: OnceLock<(usize, usize)> = OnceLock::new();
    // (units ahead, from how many activation rows per pass)
    let (units, from) = *UNITS.get_or_init(|| match (forced(), amd_core()) {
        (Some(false), _) => (0, 0),
        (_, AmdCore::Zen4) => (8, 8),
        (_, AmdCore::Zen5OrLater) => (8, 0),
        _ if emerald_rapids() => (4, 0),
        _ if intel() => (1, 0),
        _ => (2, 0),
    });
    if rows >= from {
        units
    } else {
        0
    }
}

/// Activation rows from which the VNNI kr8 kernels take two adjacent row groups per pass (two
/// streams, half the instructions per weight byte; `x86::kr8`). 16 where it was set (Zen 5):
/// below it the one-group kernels were faster on weights streamed from memory (an expert's few
/// tokens: `cargo bench --bench kernels -- gemv_kr8_expert`, q4_kr8 1024 × 2048 at 8 rows 99
/// against 115 µs, at 16 rows 200 against 168 µs); on weights in cache the zmm form is faster
/// from 2 rows on (`gemm_expert_ragged`). The Emerald Rapids VM: 1 — one stream per core reads a
/// quarter below several there (see `stream_ahead`), and two streams per pass read its decode
/// products faster: the DeepSeek-V2-Lite-3l Q4_K_M lm_head (q6_kr8, 172 MB, one thread, three
/// processes of four products each) 10.3 / 11.2 / 11.8 GB/s against 10.1 / 9.7 / 10.4; decode
/// tg32 (`bench/ab.py`, six rounds alternating, geometric mean of the t/s ratios, one / two
/// threads) DeepSeek-V2-Lite-3l Q4_K_M 1.081 / 1.065, olmoe-4l Q4_K_M 1.080 / 1.021; batched
/// decode of olmoe-4l Q4_K_M on two threads (`examples/batch_decode`, three runs) 2 sequences
/// 108–111 against 105–110 t/s, 4: 144–151 against 130–140, 8: 165–197 against 139–161.
pub(super) fn kr8_two_groups_from() -> usize {
    static FROM: OnceLock<usize> = OnceLock::new();
    *FROM.get_or_init(|| if emerald_rapids() { 1 } else { 16 })
}

/// How far ahead of the unit being read the q8r8 / q4r8 kernels (`qgroup`, `vnni`) and the
/// mxfp4r8 ones ask for their stream, where they do (`software_prefetch`, `mxfp4r8_prefetch`),
/// and into which cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ahead {
    /// Bytes past the start of the unit being read.
    pub bytes: usize,
    /// Into L2 only (`prefetcht1`), not L1: a line asked for this far ahead would wait in L1
    /// while the lines before it are read, and takes one of its few miss buffers.
    pub l2: bool,
}

/// The stream prefetch of the interleaved int8 kernels (`Ahead`). Everywhere but one: 1 KiB
/// into L1 (the best of 512 / 1024 / 2048 / 4096 for q4 decode on Zen 3, +15–25 % over none:
/// a task's stream is 64–128 KiB of a small expert, too short for the hardware prefetcher to
/// ramp up). On the Emerald Rapids VM (Intel family 6 model 207; AVX-512, no AMX granted) one
/// core reads one stream at ~10.5 GB/s and several at ~14 (a bf16 matrix-vector product over 8
/// rows in lockstep, one 4 KiB page each): 4 KiB ahead into L2 lifts the one stream toward that —
/// olmoe-4l tg32, `bench/ab.py`, six rounds alternating, geometric mean of the t/s ratios against
/// 1 KiB into L1, one / two threads: q8r8 (Q8_0 imported) 2 KiB into L1 1.09 / 1.10, 2 KiB
/// `prefetcht2` 1.08 / 1.07, 4 KiB `prefetcht1` (kept) 1.19 / 1.17, 4 KiB `prefetcht2` 1.22 /
/// 1.16, 8 KiB `prefetcht2` 1.15 / 1.20 (both hints fill L2, not L1, on Intel cores); q4r8
/// (`--quantize w4a16`) 4 KiB `prefetcht1` 1.18 / 1.15. (Reading 4 groups in lockstep instead:
/// q8r8 1.18 / 1.12.)
pub(super) fn stream_ahead() -> Ahead {
    static AHEAD: OnceLock<Ahead> = OnceLock::new();
    *AHEAD.get_or_init(|| {
        if emerald_rapids() {
            Ahead { bytes: 4096, l2: true }
        } else {
            Ahead { bytes: 1024, l2: false }
        }
    })
}

/// Ask for the line at `p` as `ahead` says (a hint: never faults, any address is fine).
#[inline(always)]
pub(super) fn prefetch_line(p: *const u8, ahead: Ahead) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
    // SAFETY: a prefetch reads nothing architecturally; SSE is part of x86-64.
    unsafe {
        if ahead.l2 {
            _mm_prefetch::<_MM_HINT_T1>(p.cast());
        } else {
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
        }
    }
}

/// Whether the mxfp4r8 kernels ask for the lines ahead of the unit they read (`stream_ahead`). Where it was
/// added no difference was measured; on Zen 4 it costs: gpt-oss-20b-4l
/// (MXFP4 experts), one thread, decode, `perf record` samples of the VNNI kernel over the same
/// 64 tokens, four rounds alternating, load 3.8–5.3: with 2857 / 2856 / 2872 / 3027, without
/// 2462 / 2558 / 2546 / 2560 (−12 %). `COLIBRI_PREFETCH=on|off` overrides.
pub(super) fn mxfp4r8_prefetch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| forced().unwrap_or_else(|| amd_core() != AmdCore::Zen4))
}

/// Whether AVX-512 BF16's `vdpbf16ps` issues at the rate of the f32 FMAs it replaces (each adds
/// two bf16 products per lane, twice an FMA's work), so that the AVX-512 path takes bf16 products
/// on it (`Reduced` mode, `x86::bf16`) rather than f32 FMAs on widened weights. AMD Zen 4 and
/// later: yes (bf16 pp512 1.63–1.94× the AVX2 path on Zen 4). The Intel Xeon with AMX these
/// figures come from (family 6 model 167 as its VM reports): no — `vdpbf16ps zmm` issues once
/// per two cycles (16 independent chains, thread CPU time: 1.7 per ns against `vfmadd231ps zmm`
/// 6.7), 16 multiply-adds per cycle against two FMAs' 32; there the widened route prefills faster
/// and its matrix-vector product reads as fast as AVX2's, where the `vdpbf16ps` one lost a quarter
/// (`COLIBRI_CPU=avx512 colibri bench -t 2 -p 512 -n 32 -r 2`, two rounds, `vdpbf16ps` / widened
/// / AVX2: olmoe-4l pp512 290–301 / 326–330 / 220–270 t/s, tg32 27.9 / 36.0–36.6 / 36.5–37.2;
/// qwen2moe-4l pp512 224–236 / 251–261 / 208–211, tg32 25.5–25.6 / 33.1–33.2 / 33.3–33.5). Intel's
/// AMX path keeps its tiles either way; this decides the AVX-512 path there (forced, or where
/// Linux refuses the tile state).
pub(super) fn dpbf16_full_rate() -> bool {
    zen4_or_later()
}

/// How many rows of a row-major float matrix (f32 / f16 / bf16) the one-activation-row product
/// reads in lockstep (`gemv::gemv_float`): 8, or 4 on AMD cores before Zen 4 (Zen 3), where eight
/// streams per core read slower — DeepSeek-V2-Lite-3l bf16, tg32, `bench/ab.py`, same binary with
/// the count switched, 4 against 8 rows: two threads 1.220 / 1.114 / 1.322 / 1.128 (geometric
/// mean 1.193), one thread 1.463 / 0.941 / 1.029 (1.123); 1 row against 8 at two threads 1.120;
/// 2 rows against 4 at two threads 1.049 (within noise). Each row's sums do not depend on how
/// many rows share a pass, so the results are the same bits either way.
pub(super) fn float_gemv_rows() -> usize {
    static ROWS: OnceLock<usize> = OnceLock::new();
    *ROWS.get_or_init(|| if vendor() == AMD && amd_core() == AmdCore::Other { 4 } else { 8 })
}

/// The AMD core generations whose memory-access choices differ here.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AmdCore {
    /// Not AMD, or an AMD core before Zen 4 (Zen 3: family 19h model < 10h).
    Other,
    /// Family 19h model ≥ 10h.
    Zen4,
    /// Family 1Ah or later.
    Zen5OrLater,
}

/// This CPU's `AmdCore`, from cpuid's vendor and family / model.
fn amd_core() -> AmdCore {
    let amd = vendor() == AMD;
    let (family, model) = family_model(core::arch::x86_64::__cpuid(1).eax);
    match (amd, family, model) {
        (true, f, _) if f > 0x19 => AmdCore::Zen5OrLater,
        (true, 0x19, m) if m >= 0x10 => AmdCore::Zen4,
        _ => AmdCore::Other,
    }
}

/// cpuid leaf 0's vendor string as its three registers (ebx, edx, ecx).
fn vendor() -> (u32, u32, u32) {
    let v = core::arch::x86_64::__cpuid(0);
    (v.ebx, v.edx, v.ecx)
}

/// "AuthenticAMD" and "GenuineIntel" as `vendor` reads them.
const AMD: (u32, u32, u32) = (0x6874_7541, 0x6974_6e65, 0x444d_4163);
const INTEL: (u32, u32, u32) = (0x756e_6547, 0x4965_6e69, 0x6c65_746e);

/// Whether this is an Intel CPU.
fn intel() -> bool {
    vendor() == INTEL
}

/// Intel family 6 model 207 (CFh, Emerald Rapids), as the VM the `stream_ahead` figures come
/// from reports it.
fn emerald_rapids() -> bool {
    intel() && family_model(core::arch::x86_64::__cpuid(1).eax) == (6, 0xCF)
}

/// cpuid leaf 1's display family and model.
fn family_model(sig: u32) -> (u32, u32) {
    let family = ((sig >> 8) & 0xf) + ((sig >> 20) & 0xff);
    let model = ((sig >> 4) & 0xf) | (((sig >> 16) & 0xf) << 4);
    (family, model)
}

/// AMD family 19h model ≥ 10h (Zen 4; family 19h below that is Zen 3) or a later family.
fn zen4_or_later() -> bool {
    amd_core() != AmdCore::Other
}

#[cfg(test)]
mod tests {
    use super::{amd_core, family_model, AmdCore};

    #[test]
    fn this_cpu_is_classified() {
        // The VMs these figures come from are family 25 model 17 (Zen 4), family 26 model 2
        // (Zen 5) and family 6 model 167 (the AMX Xeon): the decoder must tell them apart; any
        // CPU gives a definite answer.
        let (family, model) = family_model(core::arch::x86_64::__cpuid(1).eax);
        match (family, model) {
            (25, 17) => {
                assert_eq!(amd_core(), AmdCore::Zen4);
                // Zen 4: the kr8 kernels prefetch in 8-row passes only (none when forced off).
                assert_eq!(super::kr8_prefetch_units(1), 0);
                assert_eq!(super::kr8_prefetch_units(8), if super::forced() == Some(false) { 0 } else { 8 });
            }
            (26, 2) => assert_eq!(amd_core(), AmdCore::Zen5OrLater),
            (6, 207) => {
                // The Emerald Rapids VM: its streams are asked for 4 KiB ahead, into L2.
                assert!(super::emerald_rapids());
                assert_eq!(super::stream_ahead(), super::Ahead { bytes: 4096, l2: true });
                assert_eq!(super::kr8_prefetch_units(1), if super::forced() == Some(false) { 0 } else { 4 });
                // … and its kr8 kernels read two row groups per pass at any row count.
                assert_eq!(super::kr8_two_groups_from(), 1);
            }
            (6, 167) => {
                // The AMX Xeon's VM: an Intel core, whose kr8 kernels prefetch one unit ahead.
                assert!(super::intel());
                assert_eq!(amd_core(), AmdCore::Other);
                assert!(!super::emerald_rapids());
                assert_eq!(super::stream_ahead(), super::Ahead { bytes: 1024, l2: false });
                assert_eq!(super::kr8_prefetch_units(1), if super::forced() == Some(false) { 0 } else { 1 });
                assert_eq!(super::kr8_two_groups_from(), 16);
            }
            _ => {}
        }
    }

    #[test]
    fn family_and_model_are_decoded_with_their_extended_fields() {
        // Signatures as cpuid reports them: Zen 4 EPYC (A10F11), Zen 5 EPYC (B00F21), Zen 3 (A00F11).
        assert_eq!(family_model(0x00A1_0F11), (0x19, 0x11));
        assert_eq!(family_model(0x00B0_0F21), (0x1A, 0x02));
        assert_eq!(family_model(0x00A0_0F11), (0x19, 0x01));
    }
}
