//! What `--quantize` / `--quantize-only` ask for, and the streaming block quantiser: a matrix
//! arrives in chunks of whole blocks of f32 values; its quants are returned chunk by chunk (to be
//! written at once) and its f16 scales are held (2 bytes per 32 elements) until the matrix ends,
//! when they follow the quants — the layout of `colibri::format::blocks`.

use colibri::format::blocks::{self as quant, QK};
use colibri::format::DType;
use colibri::model::QuantClass;

/// A quantisation scheme of the CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// 8-bit weights (`DType::Q8`).
    Q8,
    /// 4-bit weights, float activations (`DType::Q4` in the file).
    W4A16,
}

impl Scheme {
    /// Parse a `--quantize` value.
    pub fn parse(s: &str) -> Result<Scheme, String> {
        match s {
            "q8" => Ok(Scheme::Q8),
            "w4a16" => Ok(Scheme::W4A16),
            _ => Err(format!("unknown quantisation scheme '{s}' (use q8 or w4a16)")),
        }
    }

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Q8 => "q8",
            Scheme::W4A16 => "w4a16",
        }
    }

    /// The dtype stored in the file.
    pub fn dtype(self) -> DType {
        match self {
            Scheme::Q8 => DType::Q8,
            Scheme::W4A16 => DType::Q4,
        }
    }
}

/// Parse one `--quantize-only` class name.
pub fn parse_class(name: &str) -> Result<QuantClass, String> {
    QuantClass::from_name(name.trim()).ok_or_else(|| {
        let all: Vec<&str> = QuantClass::ALL.iter().map(|c| c.name()).collect();
        format!("unknown class '{name}' (use a comma list of {})", all.join(", "))
    })
}

/// The quantisation a conversion applies.
#[derive(Clone, Debug)]
pub struct Quantize {
    pub scheme: Scheme,
    /// The classes `--quantize-only` named; `None` selects every class.
    pub only: Option<Vec<QuantClass>>,
    /// Store matrices whose rows are whole groups of 8 in the interleaved layout (q8r8 / q4r8,
    /// the default); false keeps every matrix row-major (`--no-interleave`).
    pub interleave: bool,
}

impl Quantize {
    /// `scheme` applied to the classes `only` names (each once), or to every class.
    pub fn new(scheme: Scheme, only: Option<Vec<QuantClass>>) -> Quantize {
        let only = only.map(|list| {
            let mut unique = Vec::with_capacity(list.len());
            for c in list {
                if !unique.contains(&c) {
                    unique.push(c);
                }
            }
            unique
        });
        Quantize { scheme, only, interleave: true }
    }

    /// The same, storing every matrix row-major when `interleave` is false.
    pub fn with_interleave(mut self, interleave: bool) -> Quantize {
        self.interleave = interleave;
        self
    }

    /// The block dtype of a selected matrix with `rows` rows: the scheme's, interleaved when
    /// asked for and the rows are whole groups.
    pub fn dtype_for(&self, rows: u64) -> DType {
        let d = self.scheme.dtype();
        if self.interleave && rows.is_multiple_of(quant::GROUP_ROWS as u64) {
            d.interleaved()
        } else {
            d
        }
    }

    /// The classes quantised.
    pub fn classes(&self) -> Vec<QuantClass> {
        self.only.clone().unwrap_or_else(|| QuantClass::ALL.to_vec())
    }
}

/// A block whose scale does not fit f16 although its values are finite.
#[derive(Debug, PartialEq)]
pub struct ScaleOverflow {
    /// First element of the block, counted from the start of the matrix.
    pub element: usize,
    /// The block's largest magnitude.
    pub amax: f32,
}

/// Quantises one matrix at a time, streamed in chunks of whole blocks. For an interleaved
/// dtype the quants of a row group are held until its 8 rows are complete, then written in the
/// group's order; the scales are reordered at the end.
pub struct MatrixQuantizer {
    dtype: DType,
    /// Blocks per row.
    nb: usize,
    /// Row-major scales of the matrix so far.
    scales: Vec<u16>,
    q8: Vec<i8>,
    /// Row-major quants of the current, incomplete row group (interleaved dtypes).
    pending: Vec<u8>,
}

impl MatrixQuantizer {
    /// A quantiser to block dtype `dtype` for a matrix with `cols` columns (a multiple of 32).
    pub fn new(dtype: DType, cols: usize) -> MatrixQuantizer {
        // The encodings this quantiser writes: q8 / q4, row-major or interleaved.
        assert!(
            matches!(dtype.encoding(), DType::Q8 | DType::Q4) && cols.is_multiple_of(QK),
            "MatrixQuantizer writes q8 / q4 (and their interleaved forms) in rows of 32, not {dtype} in rows of {cols}"
        );
        MatrixQuantizer { dtype, nb: cols / QK, scales: Vec::new(), q8: Vec::new(), pending: Vec::new() }
    }

    /// Bytes of one block's quants.
    fn block_bytes(&self) -> usize {
        if self.dtype.encoding() == DType::Q8 {
            QK
        } else {
            QK / 2
        }
    }

    /// Quantise the next `x.len()` elements of the matrix (a multiple of 32) into `out`
    /// (replaced by the quants ready to be written); their scales are kept for `finish`.
    pub fn push(&mut self, x: &[f32], out: &mut Vec<u8>) -> Result<(), ScaleOverflow> {
        debug_assert_eq!(x.len() % QK, 0);
        let first = self.scales.len();
        self.scales.resize(first + x.len() / QK, 0);
        let scales = &mut self.scales[first..];
        out.clear();
        if self.dtype.encoding() == DType::Q8 {
            self.q8.resize(x.len(), 0);
            quant::quantize_row_q8(x, &mut self.q8, scales);
            out.extend(self.q8.iter().map(|&q| q as u8));
        } else {
            out.resize(x.len() / 2, 0);
            quant::quantize_row_q4(x, out, scales);
        }
        for (b, (&d, xb)) in scales.iter().zip(x.chunks_exact(QK)).enumerate() {
            if d & 0x7c00 == 0x7c00 && xb.iter().all(|v| v.is_finite()) {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                return Err(ScaleOverflow { element: (first + b) * QK, amax });
            }
        }
        if self.dtype.is_interleaved() {
            self.regroup(out);
        }
        Ok(())
    }

    /// Move the row-major quants in `out` behind the pending ones and put back every complete
    /// row group, interleaved.
    fn regroup(&mut self, out: &mut Vec<u8>) {
        let bb = self.block_bytes();
        let group = self.nb * bb * quant::GROUP_ROWS;
        self.pending.extend_from_slice(out);
        let whole = self.pending.len() / group * group;
        out.resize(whole, 0);
        quant::interleave_quants(&self.pending[..whole], bb, self.nb, out);
        self.pending.drain(..whole);
    }

    /// The scale region of the matrix pushed so far, into `out` (replaced); resets for the next.
    /// Panics if an interleaved matrix ended inside a row group (the plan admits only whole
    /// groups).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.clear();
        if self.dtype.is_interleaved() {
            assert!(self.pending.is_empty(), "interleaved matrix ended inside a row group");
            let mut grouped = vec![0u16; self.scales.len()];
            quant::interleave_scales(&self.scales, self.nb, &mut grouped);
            self.scales = grouped;
        }
        out.extend(self.scales.iter().flat_map(|d| d.to_le_bytes()));
        self.scales.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0).collect()
    }

    #[test]
    fn chunked_quantisation_equals_one_shot() {
        // 16 rows of 64: chunks of 96 elements end inside rows and inside row groups.
        let mut row_major = Vec::new();
        for dtype in [DType::Q8, DType::Q4, DType::Q8R8, DType::Q4R8] {
            let x = values(16 * 64);
            let mut q = MatrixQuantizer::new(dtype, 64);
            let mut whole = Vec::new();
            q.push(&x, &mut whole).unwrap();
            let mut scales = Vec::new();
            q.finish(&mut scales);
            whole.extend_from_slice(&scales);
            let mut chunked = Vec::new();
            let mut tail = Vec::new();
            for c in x.chunks(96) {
                let mut out = Vec::new();
                q.push(c, &mut out).unwrap();
                chunked.extend_from_slice(&out);
            }
            q.finish(&mut tail);
            chunked.extend_from_slice(&tail);
            assert_eq!(chunked, whole, "{dtype}");
            assert_eq!(whole.len() as u64, dtype.bytes_for(x.len() as u64).unwrap());
            if !dtype.is_interleaved() {
                row_major.push(whole);
                continue;
            }
            // The interleaved file is the row-major one reordered.
            let plain = &row_major[usize::from(dtype.encoding() == DType::Q4)];
            let bb = if dtype.encoding() == DType::Q8 { QK } else { QK / 2 };
            assert_eq!(whole, quant::interleave_stored(plain, bb, 2), "{dtype}");
        }
    }

    #[test]
    fn matrices_of_whole_row_groups_are_interleaved_unless_asked_not_to() {
        let q = Quantize::new(Scheme::W4A16, None);
        assert_eq!((q.dtype_for(16), q.dtype_for(12)), (DType::Q4R8, DType::Q4));
        let q = Quantize::new(Scheme::Q8, None).with_interleave(false);
        assert_eq!(q.dtype_for(16), DType::Q8);
    }

    #[test]
    fn a_scale_that_overflows_f16_is_an_error() {
        let mut x = values(64);
        x[40] = 1e7; // 1e7 / 127 > 65504
        let mut q = MatrixQuantizer::new(DType::Q8, 64);
        assert_eq!(q.push(&x, &mut Vec::new()), Err(ScaleOverflow { element: 32, amax: 1e7 }));
    }

    #[test]
    fn class_names_parse_and_unknown_ones_are_rejected() {
        let list = ["experts", " shared", "experts"].map(|n| parse_class(n).unwrap()).to_vec();
        let q = Quantize::new(Scheme::Q8, Some(list));
        assert_eq!(q.classes(), vec![QuantClass::Experts, QuantClass::Shared]);
        assert_eq!(Quantize::new(Scheme::Q8, None).classes(), QuantClass::ALL.to_vec());
        assert!(parse_class("routers").unwrap_err().contains("experts, shared, attn, mlp, lm_head"));
        assert!(parse_class("").is_err());
        assert_eq!(Scheme::parse("w4a16").unwrap().dtype(), DType::Q4);
        assert!(Scheme::parse("q4").is_err());
    }
}
