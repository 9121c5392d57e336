//! Element types of tensors in a .colibri file, as one table (the shape of ggml's type traits):
//! each dtype has one row saying its on-disk id, name, block geometry, row grouping and what its
//! bytes mean (reference dequantiser, NaN/Inf scan, reference encoder). `DType` is an index into
//! that table; nothing else in the crate matches on dtypes to learn those facts. The kernels keep
//! their own per-dtype rows (`kernels::table`), keyed by the same index.
//!
//! Adding a dtype: one variant here, one row in `ROWS` (plus its layout in `blocks` if it is a
//! new block encoding), one row in `kernels::reference::ROWS` — SIMD rows are optional.

use super::blocks::{self, Layout, Q4, Q8, QK};
use super::finite::{self, NonFinite};
use super::ggml::{self, Block};
use super::kr8;
use super::mxfp4;
use super::tiles;

/// Elements per quantisation block of the block-quantised dtypes (the table's `group_size`).
pub const GROUP: u32 = QK as u32;

/// A tensor element type: an index into the dtype table. The on-disk ids (`id()`) are frozen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE-754 binary32.
    F32,
    /// IEEE-754 binary16.
    F16,
    /// bfloat16 (the top half of a binary32).
    BF16,
    /// 8-bit blocks of 32: i8 quants, then one f16 scale per block (`blocks`, q8).
    Q8,
    /// 4-bit blocks of 32: packed nibbles, then one f16 scale per block (`blocks`, q4).
    Q4,
    /// Q8 blocks in 8-row interleaved groups; rows a multiple of 8.
    Q8R8,
    /// Q4 blocks in 8-row interleaved groups; rows a multiple of 8.
    Q4R8,
    /// GGUF's Q8_0, kept as it is: blocks of 32, each an f16 scale then 32 i8 quants
    /// (`blocks`, q8_0).
    Q8_0,
    /// MXFP4 as ggml stores it: blocks of 32, each an E8M0 exponent then 16 bytes of FP4 (e2m1)
    /// nibbles (`mxfp4`).
    Mxfp4,
    /// GGUF's other block types, kept as GGUF stores them (`ggml`, which describes each).
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Iq4Nl,
    Iq4Xs,
    /// MXFP4 blocks in 8-row interleaved units (`mxfp4`); rows a multiple of 8.
    Mxfp4R8,
    /// q4_k / q6_k blocks in 8-row interleaved units (`kr8`); rows a multiple of 8.
    Q4KR8,
    Q6KR8,
    /// iq4_xs / iq4_nl blocks in 8-row interleaved units (`kr8`); rows a multiple of 8.
    Iq4XsR8,
    Iq4NlR8,
    /// bf16 in the AMX tiles' order: 32-row groups, each 32-column step of a group one 2 KiB
    /// unit (`tiles`); rows and columns multiples of 32.
    Bf16R32,
}

/// How a dtype lays out the bytes of one matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// One value per element (the float types).
    Elements,
    /// All blocks' quants (`quant_bytes` per block), then all blocks' f16 scales (`blocks`).
    Split { quant_bytes: u32 },
    /// Whole blocks one after another, each its scale and quants together (ggml's way); an
    /// interleaved dtype of them (mxfp4r8) keeps 8 rows' blocks of a column in one unit.
    Blocks,
}

/// What one dtype is: a row of the table.
pub struct DTypeInfo {
    pub dtype: DType,
    /// The id written to disk. Two dtypes whose tensors take the same bytes (f16/bf16, q8/q8r8,
    /// q4/q4r8) have ids two bits apart, so one flipped bit of a dtype field never turns a valid
    /// tensor into another valid one (the byte length check catches every other flip).
    pub id: u32,
    /// Lower-case name used by the CLI and in JSON; `aliases` are accepted too.
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    /// Elements per block: 1 for floats, 32 for the block-quantised types.
    pub block: u32,
    /// Bytes per block (for block types: quants and scale together).
    pub block_bytes: u32,
    /// Rows stored together (8 for the interleaved layouts, 32 for bf16r32, else 1): a matrix's
    /// rows must be a multiple of it.
    pub row_group: u32,
    /// Columns stored together beyond the block (32 for bf16r32's steps, else 1): a matrix's
    /// row length must be a multiple of it.
    pub col_group: u32,
    pub packing: Packing,
    /// Alignment the storage needs (floats: their size; block types: their u16 scales; 1 for
    /// mxfp4's bytes).
    pub align: u32,
    /// The same values stored row-major (itself unless interleaved).
    pub row_major: DType,
    /// The same values in the interleaved layout (itself when there is none).
    pub interleaved: DType,
    /// out = elements [start, start + out.len()) of a stored matrix with rows of `cols`
    /// elements, as f32: what the bytes mean. Block types need whole blocks.
    pub dequantize: fn(bytes: &[u8], cols: usize, start: usize, out: &mut [f32]),
    /// First NaN/Inf value of a stored matrix (float elements; block scales).
    pub find_nonfinite: fn(bytes: &[u8], cols: usize) -> Option<NonFinite>,
    /// The stored bytes of f32 values [x.len() / cols, cols] (reference encoder).
    pub encode: fn(x: &[f32], cols: usize) -> Vec<u8>,
}

/// The dtype table, in `DType` order.
static ROWS: [DTypeInfo; DType::COUNT] = [
    float_row(DType::F32, 0, "f32", &["float32"], 4, deq_f32, finite::f32_elements, enc_f32),
    float_row(DType::F16, 1, "f16", &["float16"], 2, deq_f16, finite::f16_elements, enc_f16),
    float_row(DType::BF16, 2, "bf16", &["bfloat16"], 2, deq_bf16, finite::bf16_elements, enc_bf16),
    block_row(DType::Q8, 16, "q8", 34, Q8_TWINS, deq_q8::<false>, finite::block_scales::<34, false>, enc_q8::<false>),
    block_row(DType::Q4, 17, "q4", 18, Q4_TWINS, deq_q4::<false>, finite::block_scales::<18, false>, enc_q4::<false>),
    block_row(DType::Q8R8, 19, "q8r8", 34, Q8_TWINS, deq_q8::<true>, finite::block_scales::<34, true>, enc_q8::<true>),
    block_row(DType::Q4R8, 18, "q4r8", 18, Q4_TWINS, deq_q4::<true>, finite::block_scales::<18, true>, enc_q4::<true>),
    // GGUF block types: id 32 + ggml's type number.
    DTypeInfo {
        dtype: DType::Q8_0,
        id: 40,
        name: "q8_0",
        aliases: &[],
        block: GROUP,
        block_bytes: 34,
        row_group: 1,
        col_group: 1,
        packing: Packing::Blocks,
        align: 2,
        row_major: DType::Q8_0,
        interleaved: DType::Q8_0,
        dequantize: |bytes, _, start, out| blocks::dequantize_q8_0(bytes, start, out),
        find_nonfinite: finite::block_heads::<34>,
        encode: |x, _| blocks::quantize_q8_0(x),
    },
    DTypeInfo {
        dtype: DType::Mxfp4,
        id: 71,
        name: "mxfp4",
        aliases: &[],
        block: GROUP,
        block_bytes: mxfp4::BLOCK_BYTES as u32,
        row_group: 1,
        col_group: 1,
        packing: Packing::Blocks,
        align: 1,
        row_major: DType::Mxfp4,
        interleaved: DType::Mxfp4R8,
        dequantize: |bytes, _, start, out| mxfp4::dequantize(bytes, start, out),
        find_nonfinite: mxfp4::find_nan_scale,
        encode: |x, _| mxfp4::quantize(x),
    },
    ggml_row::<ggml::BlockQ4_0>(DType::Q4_0, 34, "q4_0"),
    ggml_row::<ggml::BlockQ4_1>(DType::Q4_1, 35, "q4_1"),
    ggml_row::<ggml::BlockQ5_0>(DType::Q5_0, 38, "q5_0"),
    ggml_row::<ggml::BlockQ5_1>(DType::Q5_1, 39, "q5_1"),
    ggml_row::<ggml::BlockQ2K>(DType::Q2K, 42, "q2_k"),
    ggml_row::<ggml::BlockQ3K>(DType::Q3K, 43, "q3_k"),
    DTypeInfo { interleaved: DType::Q4KR8, ..ggml_row::<ggml::BlockQ4K>(DType::Q4K, 44, "q4_k") },
    ggml_row::<ggml::BlockQ5K>(DType::Q5K, 45, "q5_k"),
    DTypeInfo { interleaved: DType::Q6KR8, ..ggml_row::<ggml::BlockQ6K>(DType::Q6K, 46, "q6_k") },
    DTypeInfo { interleaved: DType::Iq4NlR8, ..ggml_row::<ggml::BlockIq4Nl>(DType::Iq4Nl, 52, "iq4_nl") },
    DTypeInfo { interleaved: DType::Iq4XsR8, ..ggml_row::<ggml::BlockIq4Xs>(DType::Iq4Xs, 55, "iq4_xs") },
    DTypeInfo {
        dtype: DType::Mxfp4R8,
        id: 24,
        name: "mxfp4r8",
        aliases: &[],
        block: GROUP,
        block_bytes: mxfp4::BLOCK_BYTES as u32,
        row_group: blocks::GROUP_ROWS as u32,
        col_group: 1,
        packing: Packing::Blocks,
        align: 1,
        row_major: DType::Mxfp4,
        interleaved: DType::Mxfp4R8,
        dequantize: |bytes, cols, start, out| {
            mxfp4::dequantize_in(bytes, Layout::Interleaved { nb: cols / QK }, start, out)
        },
        find_nonfinite: mxfp4::find_nan_scale_r8,
        encode: mxfp4::quantize_r8,
    },
    // Interleaved K-quants: free ids ≥ 20 two bits from every 4.25 / 4.5 / 6.5625-bit dtype
    // (q6_kr8's 25 retired with its earlier layout: `table::RETIRED`).
    kr8_row::<ggml::BlockQ4K>(DType::Q4KR8, DType::Q4K, 23, "q4_kr8"),
    kr8_row::<ggml::BlockQ6K>(DType::Q6KR8, DType::Q6K, 26, "q6_kr8"),
    kr8_row::<ggml::BlockIq4Xs>(DType::Iq4XsR8, DType::Iq4Xs, 27, "iq4_xsr8"),
    kr8_row::<ggml::BlockIq4Nl>(DType::Iq4NlR8, DType::Iq4Nl, 28, "iq4_nlr8"),
    // bf16's tile-ordered twin: a free float id two bits from f16 (1) and bf16 (2).
    DTypeInfo {
        row_group: tiles::TILE as u32,
        col_group: tiles::TILE as u32,
        row_major: DType::BF16,
        ..float_row(DType::Bf16R32, 7, "bf16r32", &[], 2, tiles::dequantize, tiles::find_nonfinite, tiles::encode)
    },
];

const Q8_TWINS: [DType; 2] = [DType::Q8, DType::Q8R8];
const Q4_TWINS: [DType; 2] = [DType::Q4, DType::Q4R8];

type Dequantize = fn(&[u8], usize, usize, &mut [f32]);
type Scan = fn(&[u8], usize) -> Option<NonFinite>;
type Encode = fn(&[f32], usize) -> Vec<u8>;

#[allow(clippy::too_many_arguments)]
const fn float_row(
    dtype: DType,
    id: u32,
    name: &'static str,
    aliases: &'static [&'static str],
    size: u32,
    dequantize: Dequantize,
    find_nonfinite: Scan,
    encode: Encode,
) -> DTypeInfo {
    DTypeInfo {
        dtype,
        id,
        name,
        aliases,
        block: 1,
        block_bytes: size,
        row_group: 1,
        col_group: 1,
        packing: Packing::Elements,
        align: size,
        row_major: dtype,
        interleaved: dtype,
        dequantize,
        find_nonfinite,
        encode,
    }
}

/// A row of the 32-element block types; `twins` = [row-major, interleaved] of its encoding.
#[allow(clippy::too_many_arguments)]
const fn block_row(
    dtype: DType,
    id: u32,
    name: &'static str,
    block_bytes: u32,
    twins: [DType; 2],
    dequantize: Dequantize,
    scan: Scan,
    encode: Encode,
) -> DTypeInfo {
    let grouped = twins[1] as usize == dtype as usize;
    DTypeInfo {
        dtype,
        id,
        name,
        aliases: &[],
        block: GROUP,
        block_bytes,
        row_group: if grouped { blocks::GROUP_ROWS as u32 } else { 1 },
        col_group: 1,
        packing: Packing::Split { quant_bytes: block_bytes - 2 },
        align: 2,
        row_major: twins[0],
        interleaved: twins[1],
        dequantize,
        find_nonfinite: scan,
        encode,
    }
}

/// A row of a GGUF block type `B` (ggml's layout, whole blocks; `ggml`), stored at id
/// 32 + ggml's type number.
const fn ggml_row<B: Block>(dtype: DType, id: u32, name: &'static str) -> DTypeInfo {
    DTypeInfo {
        dtype,
        id,
        name,
        aliases: &[],
        block: B::QK as u32,
        block_bytes: ggml::block_bytes::<B>() as u32,
        row_group: 1,
        col_group: 1,
        packing: Packing::Blocks,
        align: 2,
        row_major: dtype,
        interleaved: dtype,
        dequantize: deq_ggml::<B>,
        find_nonfinite: scan_ggml::<B>,
        encode: enc_ggml::<B>,
    }
}

/// A row of the 8-row interleaved layout of K-quant `B` (`kr8`), twin of `row_major`.
const fn kr8_row<B: kr8::Interleave>(dtype: DType, row_major: DType, id: u32, name: &'static str) -> DTypeInfo {
    DTypeInfo {
        row_group: kr8::ROWS as u32,
        col_group: 1,
        row_major,
        interleaved: dtype,
        dequantize: kr8::dequantize::<B>,
        find_nonfinite: kr8::find_bad_scale::<B>,
        encode: kr8::encode::<B>,
        ..ggml_row::<B>(dtype, id, name)
    }
}

fn deq_ggml<B: Block>(bytes: &[u8], _cols: usize, start: usize, out: &mut [f32]) {
    ggml::dequantize::<B>(bytes, start, out)
}

fn scan_ggml<B: Block>(bytes: &[u8], _cols: usize) -> Option<NonFinite> {
    ggml::find_bad_scale::<B>(bytes).map(NonFinite::Scale)
}

fn enc_ggml<B: Block>(x: &[f32], _cols: usize) -> Vec<u8> {
    ggml::quantize::<B>(x)
}

impl DType {
    /// Every dtype, in table order.
    pub const ALL: &'static [DType] = &[
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8,
        DType::Q4,
        DType::Q8R8,
        DType::Q4R8,
        DType::Q8_0,
        DType::Mxfp4,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Iq4Nl,
        DType::Iq4Xs,
        DType::Mxfp4R8,
        DType::Q4KR8,
        DType::Q6KR8,
        DType::Iq4XsR8,
        DType::Iq4NlR8,
        DType::Bf16R32,
    ];
    /// Number of dtypes (rows of the table).
    pub const COUNT: usize = DType::ALL.len();

    /// This dtype's row of the table.
    #[inline]
    pub fn info(self) -> &'static DTypeInfo {
        &ROWS[self as usize]
    }

    /// Position in the dtype tables (also `kernels::table`'s rows).
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Parse an on-disk id; ids 3..=15 are reserved for further float types, 20.. for further
    /// block-quantised types (GGUF's at 32 + ggml's type number).
    pub fn from_id(id: u32) -> Option<DType> {
        ROWS.iter().find(|r| r.id == id).map(|r| r.dtype)
    }

    /// The on-disk id.
    pub fn id(self) -> u32 {
        self.info().id
    }

    /// True for the block-quantised types.
    pub fn is_quantized(self) -> bool {
        self.info().block > 1
    }

    /// True for the types stored in row groups (the 8-row block layouts, bf16r32): their rows
    /// must be a multiple of `row_group()`, and rows cannot be sliced out one by one.
    pub fn is_interleaved(self) -> bool {
        self.info().row_group > 1
    }

    /// True when every row of a matrix of this dtype is its own byte range (floats, and block
    /// types stored as whole blocks row after row): any run of rows can be sliced out.
    pub fn rows_self_contained(self) -> bool {
        !self.is_interleaved() && (!self.is_quantized() || matches!(self.info().packing, Packing::Blocks))
    }

    /// Columns stored together beyond the block (32 for bf16r32, else 1): a row length must be
    /// a multiple of it.
    pub fn col_group(self) -> usize {
        self.info().col_group as usize
    }

    /// Rows stored together (1 unless interleaved).
    pub fn row_group(self) -> usize {
        self.info().row_group as usize
    }

    /// Elements per block (1 for floats).
    pub fn block(self) -> usize {
        self.info().block as usize
    }

    /// The block encoding whatever the layout: Q8 for Q8/Q8R8, Q4 for Q4/Q4R8, else itself.
    pub fn encoding(self) -> DType {
        self.info().row_major
    }

    /// The same encoding stored in interleaved groups (block types; floats unchanged).
    pub fn interleaved(self) -> DType {
        self.info().interleaved
    }

    /// Where a block matrix of this dtype with `cols` columns keeps its blocks.
    pub fn layout(self, cols: usize) -> Layout {
        if self.is_interleaved() {
            Layout::Interleaved { nb: cols / QK }
        } else {
            Layout::Rows
        }
    }

    /// The `group_size` a tensor record of this dtype carries: the block size for
    /// block-quantised types, 0 for floats.
    pub fn group_size(self) -> u32 {
        if self.is_quantized() {
            self.info().block
        } else {
            0
        }
    }

    /// Bytes per element of a float type; `None` for block-quantised types (use `bytes_for`).
    pub fn float_size(self) -> Option<u64> {
        (!self.is_quantized()).then_some(u64::from(self.info().block_bytes))
    }

    /// Lower-case name used by the CLI and in JSON (the table's `name`: "f32", "bf16", "q4r8", …).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Parse a CLI/JSON name (or alias, any case).
    pub fn from_name(name: &str) -> Option<DType> {
        let name = name.to_ascii_lowercase();
        ROWS.iter().find(|r| r.name == name || r.aliases.contains(&name.as_str())).map(|r| r.dtype)
    }

    /// Bytes needed for `elements` elements stored as one matrix; `None` on overflow, or for
    /// block types when `elements` is not a multiple of the block or above usize::MAX / 2 (no
    /// block matrix that large can be addressed).
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        let info = self.info();
        let block = u64::from(info.block);
        if !elements.is_multiple_of(block) || (block > 1 && elements > (usize::MAX / 2) as u64) {
            return None;
        }
        (elements / block).checked_mul(u64::from(info.block_bytes))
    }

    /// Stored bits per weight (8.5 for q8, 4.5 for q4: the f16 scale of each block included).
    pub fn bits_per_weight(self) -> f64 {
        let info = self.info();
        f64::from(info.block_bytes * 8) / f64::from(info.block)
    }

    /// The reference dequantisation of elements [start, start + out.len()) of a stored matrix
    /// with rows of `cols` elements (see `DTypeInfo::dequantize`).
    pub fn dequantize(self, bytes: &[u8], cols: usize, start: usize, out: &mut [f32]) {
        (self.info().dequantize)(bytes, cols, start, out)
    }

    /// The stored bytes of a matrix of f32 values with rows of `cols` (the reference encoder:
    /// floats round to nearest even, block types quantise with `blocks`' quantisers).
    pub fn encode(self, x: &[f32], cols: usize) -> Vec<u8> {
        (self.info().encode)(x, cols)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn deq_f32(bytes: &[u8], _cols: usize, start: usize, out: &mut [f32]) {
    let src = bytes[start * 4..].chunks_exact(4);
    out.iter_mut().zip(src).for_each(|(o, b)| *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
}

fn deq_f16(bytes: &[u8], _cols: usize, start: usize, out: &mut [f32]) {
    let src = bytes[start * 2..].chunks_exact(2);
    out.iter_mut().zip(src).for_each(|(o, b)| *o = blocks::f16_to_f32(u16::from_le_bytes([b[0], b[1]])));
}

fn deq_bf16(bytes: &[u8], _cols: usize, start: usize, out: &mut [f32]) {
    let src = bytes[start * 2..].chunks_exact(2);
    out.iter_mut().zip(src).for_each(|(o, b)| *o = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16));
}

/// Block count × 32 of a whole stored block matrix of `bb`-byte blocks.
fn block_elements(bytes: &[u8], block_bytes: usize) -> usize {
    bytes.len() / block_bytes * QK
}

fn grouping<const GROUPED: bool>(cols: usize) -> Layout {
    [Layout::Rows, Layout::Interleaved { nb: cols / QK }][usize::from(GROUPED)]
}

fn deq_q8<const GROUPED: bool>(bytes: &[u8], cols: usize, start: usize, out: &mut [f32]) {
    let m = Q8::from_bytes(bytes, block_elements(bytes, 34), grouping::<GROUPED>(cols))
        .expect("dequantize: a whole, 2-aligned q8 matrix");
    blocks::dequantize_q8(m, start, out)
}

fn deq_q4<const GROUPED: bool>(bytes: &[u8], cols: usize, start: usize, out: &mut [f32]) {
    let m = Q4::from_bytes(bytes, block_elements(bytes, 18), grouping::<GROUPED>(cols))
        .expect("dequantize: a whole, 2-aligned q4 matrix");
    blocks::dequantize_q4(m, start, out)
}

fn enc_f32(x: &[f32], _cols: usize) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn enc_f16(x: &[f32], _cols: usize) -> Vec<u8> {
    x.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect()
}

fn enc_bf16(x: &[f32], _cols: usize) -> Vec<u8> {
    x.iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect()
}

fn enc_q8<const GROUPED: bool>(x: &[f32], cols: usize) -> Vec<u8> {
    blocks::quantize_matrix(x, cols, true, GROUPED)
}

fn enc_q4<const GROUPED: bool>(x: &[f32], cols: usize) -> Vec<u8> {
    blocks::quantize_matrix(x, cols, false, GROUPED)
}

#[cfg(test)]
#[path = "dtype_tests.rs"]
mod tests;
