//! What a kernel path provides: the function types, one `MatKernels` row per dtype (indexed like
//! the format's dtype table) and the `Table` of a path. The leaf of the kernels: the arch files,
//! the portable kernels and the strategies depend on it; it depends on none of them.

use super::actq::{QuantizeFn, QuantizedActs};
use super::mat::Mat;
use crate::format::DType;
use std::ops::Range;

/// Register tile of the blocked GEMM: weight rows per micro-tile.
pub const MR: usize = 6;
/// Register tile: activation rows (tokens) per micro-tile, two 8-lane vectors.
pub const NR: usize = 16;
/// Weight rows per micro-tile of the bf16 GEMM (`TileBf16Fn`).
pub const BF16_MR: usize = 8;

/// A kernel path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuPath {
    /// Portable scalar reference.
    Generic,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX2's features plus AVX-512 F/BW/VL and VNNI.
    Avx512,
    /// The AVX-512 path (with AVX-512 BF16) whose bf16 prefill GEMM runs on AMX-BF16 tiles;
    /// the default where the CPU has AMX-BF16 and Linux grants the tile state.
    Amx,
}

impl CpuPath {
    /// Lower-case name, as `COLIBRI_CPU` spells it.
    pub fn name(self) -> &'static str {
        match self {
            CpuPath::Generic => "generic",
            CpuPath::Avx2 => "avx2",
            CpuPath::Avx512 => "avx512",
            CpuPath::Amx => "amx",
        }
    }
}

/// y block of a matrix-vector product: for rows `rows` of `w` and n activation rows `x`
/// ([n, cols]), out[t·rows.len() + i] = w[rows.start + i] · x[t].
pub(crate) type GemvFn = fn(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]);
/// The same for a block-quantised `w` against int8-quantised activation rows (W8A8 / W4A8).
pub(crate) type GemvI8Fn = fn(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]);
/// Elements [k0, k0 + kc) of rows `rows` of `w` widened to f32 into out ([rows.len(), kc],
/// kc = out.len() / rows.len()).
pub(crate) type WidenFn = fn(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]);
/// One operand of the micro-tile: row r's element k at `v[r·ld + k]` (A: the tile's MR rows, k
/// along each; B: kc rows of the tile's columns). Packed operands have ld = kc (A) and NR (B);
/// attention reads cached rows in place, ld apart.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub v: &'a [f32],
    pub ld: usize,
}

impl<'a> Operand<'a> {
    pub fn new(v: &'a [f32], ld: usize) -> Operand<'a> {
        Operand { v, ld }
    }

    /// The operand from row r's element `col` on (empty past the end).
    pub fn at(self, r: usize, col: usize) -> Operand<'a> {
        let from = r.checked_mul(self.ld).and_then(|x| x.checked_add(col));
        Operand { v: from.and_then(|x| self.v.get(x..)).unwrap_or(&[]), ld: self.ld }
    }

    /// Whether `rows` rows of `w` values, `ld` apart, lie within `v`.
    pub fn holds(&self, rows: usize, w: usize) -> bool {
        rows == 0 || (rows - 1).checked_mul(self.ld).and_then(|x| x.checked_add(w)).is_some_and(|x| x <= self.v.len())
    }
}

/// GEMM micro-tile: c[i·ldc + j] += Σ_k a[i·a.ld + k] · b[k·b.ld + j] for i < MR, j < nr, k
/// ascending; nr is NR, or NR / 2 for a last panel holding at most that many activation rows.
pub(crate) type TileFn = fn(a: Operand<'_>, b: Operand<'_>, kc: usize, c: &mut [f32], ldc: usize, nr: usize);
/// `TileFn` over two whole panels b[0], b[1] whose outputs sit side by side in c:
/// c[i·ldc + p·NR + j] += Σ_k a[i·a.ld + k] · b[p][k·b[p].ld + j] for p < 2 — the same chains as
/// two `TileFn` calls (see `Table::tile_pair`).
pub(crate) type TilePairFn = fn(a: Operand<'_>, b: [Operand<'_>; 2], kc: usize, c: &mut [f32], ldc: usize);
/// dst[j·rows + i] = src[i·lds + j] for i < rows, j < cols: a block of GEMM results (outputs ×
/// tokens, rows lds apart) turned token-major, as the product's y stores them; attention's
/// cached key rows turned into the tile's panels.
pub(crate) type TransposeFn = fn(src: &[f32], lds: usize, rows: usize, cols: usize, dst: &mut [f32]);
/// xs[i] = e^(xs[i] − m) in place (m ≥ every xs[i]), returning Σ xs (`vexp::exp_sum_body`: the
/// same bits on every path).
pub(crate) type ExpSumFn = fn(xs: &mut [f32], m: f32) -> f32;
/// xs[i] ×= scale in place, returning the largest of m and every xs[i] (NaN ignored;
/// `vexp::scale_max_body`: the same bits on every path).
pub(crate) type ScaleMaxFn = fn(xs: &mut [f32], scale: f32, m: f32) -> f32;
/// The gated activation of an MLP: g ← act(g, u) elementwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gate {
    /// silu(g) · u (SwiGLU).
    Silu,
    /// GPT-OSS: (clamp(u, ±limit) + 1) · g' · σ(alpha · g') with g' = min(g, limit).
    Clamped { alpha: f32, limit: f32 },
}
/// g[i] = act(g[i], u[i]) for every i (`vexp::gated_body`: the same bits on every path).
pub(crate) type GatedFn = fn(g: &mut [f32], u: &[f32], act: Gate);
/// Σ w[i]·x[i] over a float vector (f32, or f16 / bf16 bits).
pub(crate) type DotFn<T> = fn(w: &[T], x: &[f32]) -> f32;
/// y[i] += a · x[i] for a float vector x of at least y's length (shorter panics on every path).
pub(crate) type AxpyFn<T> = fn(a: f32, x: &[T], y: &mut [f32]);

/// bf16 weight rows `rows` of `w` against bf16 activation rows xb ([n, w.cols()] bits, see
/// `bf16act`): out[t·rows.len() + i] = w[rows.start + i] · xb[t].
pub(crate) type GemvBf16Fn = fn(w: Mat<'_>, rows: Range<usize>, xb: &[u16], n: usize, out: &mut [f32]);
/// bf16 GEMM micro-tile read straight from the stored weights: for the rows i < BF16_MR of `w`
/// from r0 that exist, each panel b = panels[p] (a panel's column pairs of ks, [ks.len() / 2, NR],
/// `Bf16Acts::panels`: zero past the activation rows) and j < NR, c[i·ldc + p·NR + j] +=
/// Σ_{k in ks} w[r0 + i, k] · x[j, k]; ks starts and ends even. One to three panels per pass over
/// the weights (three only with `half`). With `half` the last panel holds at most NR / 2
/// activation rows: only its lanes j < NR / 2 are computed and stored.
pub(crate) type TileBf16Fn =
    fn(w: Mat<'_>, r0: usize, ks: Range<usize>, panels: &[&[u32]], half: bool, c: &mut [f32], ldc: usize);

/// One token of the gated delta rule on one value head (Qwen3-Next's DeltaNet): q, k [k_dim]
/// (l2-normalised, q scaled), v [v_dim], the decay e^g and the write strength β.
pub struct DeltaToken<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub decay: f32,
    pub beta: f32,
}

/// One token of the delta rule on a head's state S [k_dim, v_dim] (`delta::reference_step`):
/// S' = decay·S + k ⊗ β(v − decay·Sᵀk), out [v_dim] = S'ᵀq. S is read from `from` when given
/// (then `s` is only written: the double-buffered state's first write of a call), else from `s`.
pub(crate) type DeltaStepFn = fn(from: Option<&[f32]>, s: &mut [f32], t: &DeltaToken<'_>, out: &mut [f32]);

/// A whole bf16 product at every activation-row count: y [n, rows.len()] = x · w[rows]ᵀ for bf16
/// `w` (even row length) against x's tile panels ([⌈n / NR⌉, w.cols() / 2, min(n, NR)],
/// `Bf16Acts::pack_tiles`), on the calling pool when `pool`, else on the calling thread. With
/// `up`, y = act(x · w[rows]ᵀ, x · up[rows]ᵀ) instead: an MLP's gate and up in one pass, each
/// element the bits of the two products and `GatedUp::gated` apart.
pub(crate) type Bf16GemmFn = fn(
    transpose: TransposeFn,
    w: Mat<'_>,
    rows: std::ops::Range<usize>,
    panels: &[u32],
    n: usize,
    out: Bf16Out<'_>,
    pool: bool,
    up: Option<GatedUp<'_>>,
);

/// Where a whole bf16 product (`Bf16GemmFn`) puts its results.
pub(crate) enum Bf16Out<'a> {
    /// y [n, rows.len()] in f32, token-major.
    Rows(&'a mut [f32]),
    /// Rounded to bf16 as the activation panels of a product whose columns are these rows
    /// (`Bf16Acts::pack_tiles`' layout: [⌈n / 16⌉, rows / 2, lanes], lanes = min(n, 16), zero
    /// past n): rows the whole matrix, an even count. An MLP's gated intermediate goes straight
    /// to the down projection so, never written in f32, rounded or packed on its own.
    Panels(&'a mut [u32]),
}

/// The second matrix of a fused gate/up product and the activation joining them (`Bf16GemmFn`).
#[derive(Clone, Copy)]
pub(crate) struct GatedUp<'a> {
    /// The up projection: the gate's shape.
    pub up: Mat<'a>,
    /// The path's gated activation, and which.
    pub gated: GatedFn,
    pub act: Gate,
}

/// The products of bf16 weights with bf16 activations (`Reduced` mode) on a path with a bf16 dot
/// instruction.
#[derive(Clone, Copy)]
pub(crate) struct Bf16Kernels {
    pub gemv: GemvBf16Fn,
    pub tile: TileBf16Fn,
    /// A product replacing both `gemv` and the blocked GEMM over `tile` at every row count
    /// (AMX): one summation order whatever the batch.
    pub gemm: Option<Bf16GemmFn>,
}

/// Attention's two products over a block of cached positions held in bf16, on tiles
/// (`amx::attend`, whose module gives the operands' tile order): scores s [mp, ks] = q·kᵀ from
/// the queries q [mp, kwp] (bf16) and the keys kt; values acc [mp, vwp] += p·v from the weights
/// p [mp, ksp] (bf16) and the values vt.
#[derive(Clone, Copy)]
pub(crate) struct AttendTiles {
    pub scores: fn(q: &[u16], kwp: usize, kt: &[u32], ks: usize, s: &mut [f32]),
    pub values: fn(p: &[u16], ksp: usize, vt: &[u32], vwp: usize, acc: &mut [f32]),
    /// `amx::attend::pack_values` compiled for the path.
    pub pack_values: PackValuesFn,
}

/// `amx::attend::pack_values`: a block's value rows into the value product's tile order.
pub(crate) type PackValuesFn = fn(rows: CachedRows<'_>, vw: usize, vwp: usize, ksp: usize, vt: &mut [u32]);

/// Rows of a block of cached positions as a KV cache stores them: row j (block-relative) at
/// `bits[j·stride ..]`, for j in `live` (the block's other rows are not read).
#[derive(Clone)]
pub(crate) struct CachedRows<'a> {
    pub bits: &'a [u16],
    pub stride: usize,
    pub live: Range<usize>,
}

/// The kernels of one dtype on one path.
#[derive(Clone, Copy)]
pub(crate) struct MatKernels {
    pub gemv: GemvFn,
    /// Int8-activation products (block dtypes only).
    pub gemv_i8: Option<GemvI8Fn>,
    pub widen: WidenFn,
    /// Capability: in int8 mode this dtype's int8 kernel outruns widening for the GEMM at every
    /// activation-row count (it meets several activation rows per weight unpack), so products
    /// take it whatever n is.
    pub int8_at_any_n: bool,
}

/// The function table of one path: a row per dtype plus the dtype-free kernels.
pub(crate) struct Table {
    pub path: CpuPath,
    /// Indexed by `DType::index()`.
    pub mats: [MatKernels; DType::COUNT],
    pub dot_f32: DotFn<f32>,
    pub dot_f16: DotFn<u16>,
    pub dot_bf16: DotFn<u16>,
    /// Attention's value accumulation over cached rows.
    pub axpy_f32: AxpyFn<f32>,
    pub axpy_f16: AxpyFn<u16>,
    pub axpy_bf16: AxpyFn<u16>,
    pub tile: TileFn,
    /// Two panels in one tile where the path has it: 12 chains instead of 6, for cores that
    /// issue two 512-bit FMAs per cycle at four cycles' latency (six chains fill three quarters
    /// of that).
    pub tile_pair: Option<TilePairFn>,
    /// The GEMMs' write-back (`TransposeFn`).
    pub transpose: TransposeFn,
    /// The softmax rows of blocked attention (`ScaleMaxFn`, `ExpSumFn`).
    pub scale_max: ScaleMaxFn,
    pub exp_sum: ExpSumFn,
    /// The MLPs' gated activations (`GatedFn`).
    pub gated: GatedFn,
    /// Int8 activation blocks (`actq::quantize_blocks`).
    pub quantize: QuantizeFn,
    /// bf16 × bf16 products, when the path has a bf16 dot instruction (otherwise the float
    /// kernels run on the rounded activations).
    pub bf16: Option<Bf16Kernels>,
    /// The delta rule's decode step (`DeltaStepFn`).
    pub delta_step: DeltaStepFn,
    /// Blocked attention's products on bf16 tiles, for bf16 KV caches in `Reduced` mode (AMX).
    pub attend: Option<AttendTiles>,
}

impl Table {
    /// `tile` over two whole panels whose outputs sit side by side in c (`TilePairFn`): the
    /// path's pair tile, or two `tile` calls — every output the same chain either way.
    pub fn tile2(&self, a: Operand<'_>, b: [Operand<'_>; 2], kc: usize, c: &mut [f32], ldc: usize) {
        match self.tile_pair {
            Some(pair) => pair(a, b, kc, c, ldc),
            None => {
                (self.tile)(a, b[0], kc, c, ldc, NR);
                (self.tile)(a, b[1], kc, &mut c[NR..], ldc, NR);
            }
        }
    }

    /// The kernels of `dtype` on this path.
    #[inline]
    pub fn mat(&self, dtype: DType) -> &MatKernels {
        &self.mats[dtype.index()]
    }
}
