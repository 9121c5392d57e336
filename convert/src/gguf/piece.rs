//! One GGUF source piece: a byte range of a tensor, optionally row-permuted (llama.cpp's q/k
//! RoPE permutation, `Permute`) or value-mapped (`ValueMap`), and the shape-checked lookups
//! every source rule starts from (`whole`, `required`).

use super::file::{GgufFile, Tensor};
use crate::error::{fail, Result};

/// llama.cpp's `permute(w, n_head)` reshaped each head's rows (h, 2, d/2) → (h, d/2, 2): the
/// colibri row h·d + j·d/2 + i is GGUF row h·d + 2i + j.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permute {
    pub head_rows: u64,
}

impl Permute {
    /// The GGUF row holding colibri row `r`.
    pub fn source_row(&self, r: u64) -> u64 {
        let d = self.head_rows;
        let (head, within) = (r / d, r % d);
        let (j, i) = (within / (d / 2), within % (d / 2));
        head * d + 2 * i + j
    }
}

/// A byte range of one GGUF tensor (rows `row_bytes` long), optionally row-permuted.
#[derive(Clone, Debug)]
pub struct Piece {
    pub tensor: Tensor,
    pub byte_offset: u64,
    pub bytes: u64,
    pub row_bytes: u64,
    pub permute: Option<Permute>,
    /// An element-wise map undoing a value transform of llama.cpp's converter (f32 only).
    pub map: Option<ValueMap>,
}

impl Piece {
    /// All of tensor `t`, unchanged.
    pub fn whole(t: &Tensor) -> Piece {
        Piece {
            tensor: t.clone(),
            byte_offset: 0,
            bytes: t.info.bytes,
            row_bytes: row_bytes(t),
            permute: None,
            map: None,
        }
    }
}

/// The value transforms llama.cpp's converter applies to some tensors, inverted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueMap {
    /// x → ln(−x): Qwen3-Next's `ssm_a` (−exp(A_log)) back to `A_log`.
    LnNeg,
}

/// `ne` (innermost first) as a row-major shape without its unit dimensions.
pub(super) fn squeezed(shape: impl Iterator<Item = u64>) -> Vec<u64> {
    shape.filter(|&d| d != 1).collect()
}

/// Bytes of one row (one element of a vector: its rows are its elements).
pub(super) fn row_bytes(t: &Tensor) -> u64 {
    let (ne, g) = (&t.info.ne, t.info.ggml);
    if ne.len() == 1 {
        g.bytes(&[g.block]).unwrap_or(0)
    } else {
        g.bytes(&ne[..1]).unwrap_or(0)
    }
}

/// The whole tensor `name`, whose shape must be `want`.
pub(super) fn whole(f: &GgufFile, name: &str, want: &[u64]) -> Result<Option<Piece>> {
    let Some(t) = f.tensor(name) else { return Ok(None) };
    if squeezed(t.info.ne.iter().rev().copied()) != squeezed(want.iter().copied()) {
        return Err(fail(format!("GGUF tensor {name} has ne {:?}, the config implies shape {want:?}", t.info.ne)));
    }
    Ok(Some(Piece::whole(t)))
}

pub(super) fn required(f: &GgufFile, names: &[String], want: &[u64], what: &str) -> Result<Piece> {
    for n in names {
        if let Some(p) = whole(f, n, want)? {
            return Ok(p);
        }
    }
    Err(fail(format!("GGUF file lacks the tensor for {what}: looked for {}", names.join(" or "))))
}

#[cfg(test)]
mod tests {
    use super::Permute;

    /// The permutation restated from llama.cpp's numpy: w.reshape(h, 2, d/2, …).swapaxes(1, 2).
    #[test]
    fn permute_inverts_llama_cpp_reshape() {
        let (heads, d) = (3u64, 8u64);
        // gguf[h·d + i·2 + j] = hf[h·d + j·d/2 + i]
        let mut gguf = vec![0u64; (heads * d) as usize];
        for h in 0..heads {
            for j in 0..2 {
                for i in 0..d / 2 {
                    gguf[(h * d + i * 2 + j) as usize] = h * d + j * d / 2 + i;
                }
            }
        }
        let p = Permute { head_rows: d };
        for r in 0..heads * d {
            assert_eq!(gguf[p.source_row(r) as usize], r);
        }
    }
}
