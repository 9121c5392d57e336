//! Contract: a GGUF's Q8_0 / Q4_0 matrices whose rows are whole 8-row groups are imported as
//! q8r8 / q4r8 (colibri's interleaved layouts, the q4_kr8 / q6_kr8 of the K-quants), their
//! blocks moved and nothing else. On llama.cpp's own files (tools/make_gguf_fixtures.py: Q8_0
//! from its converter, Q4_0 from llama-quantize):
//! * every q8r8 / q4r8 tensor, taken back apart block by block through `blocks::Layout`, is
//!   the GGUF tensor's bytes (through llama.cpp's q/k permutation), expert by expert;
//! * the file with those tensors written back row-major (q8_0 / q4_0: the former import) gives
//!   the same logits up to float summation order with f32 activations, the same greedy tokens
//!   with int8 ones, and its values are the interleaved file's bit for bit.
//!
//! (Their dequantisation against gguf-py on llama-quantize'd blocks: tests/kquant_r8.rs.)

#[path = "../../tests/common/fixtures.rs"]
mod fixtures;
#[path = "support/gguf.rs"]
mod gguf;

use colibri::format::blocks::{Layout, Q4, Q8, QK};
use colibri::format::{DType, FileWriter, PlannedTensor, TensorKind};
use colibri::kernels::QuantActivations;
use colibri::{LoadOptions, Model};
use fixtures::{argmax, ids, meta, models_root};
use gguf::{convert_gguf, gguf_root, logits_with};
use std::path::Path;

/// (fixture, GGUF type) pairs.
const FILES: [(&str, &str); 4] =
    [("mixtral_gqa", "q8_0"), ("qwen3_moe_yarn", "q8_0"), ("deepseek_v2_greedy", "q8_0"), ("mixtral_gqa", "q4_0")];

/// The row-major GGUF blocks (f16 scale, then quants) of one interleaved q8r8 / q4r8 matrix.
fn row_major(dtype: DType, bytes: &[u8], cols: usize) -> Vec<u8> {
    let n = bytes.len() / dtype.info().block_bytes as usize * QK;
    let layout = Layout::Interleaved { nb: cols / QK };
    let mut out = Vec::with_capacity(bytes.len());
    for blk in 0..n / QK {
        if dtype == DType::Q8R8 {
            let m = Q8::from_bytes(bytes, n, layout).unwrap();
            out.extend(m.d[layout.scale_pos(blk)].to_le_bytes());
            out.extend(m.block(blk).map(|q| q as u8));
        } else {
            let m = Q4::from_bytes(bytes, n, layout).unwrap();
            out.extend(m.d[layout.scale_pos(blk)].to_le_bytes());
            out.extend(m.block(blk));
        }
    }
    out
}

/// The GGUF bytes of every piece of colibri tensor `name` (rows gathered through the q/k
/// permutation), one Vec per piece.
fn gguf_pieces(mapped: &colibri_convert::gguf::Mapped, name: &str) -> Vec<Vec<u8>> {
    let r = mapped.resolved.iter().find(|r| r.spec.name == name).unwrap();
    r.pieces
        .iter()
        .map(|p| {
            let mut out = vec![0u8; p.bytes as usize];
            for (k, row) in out.chunks_exact_mut(p.row_bytes as usize).enumerate() {
                let src = p.permute.map_or(k as u64, |perm| perm.source_row(k as u64));
                mapped.file.read(&p.tensor, p.byte_offset + src * p.row_bytes, row).unwrap();
            }
            out
        })
        .collect()
}

/// `m` written again with its q8r8 / q4r8 tensors row-major (checked against the GGUF's bytes).
fn row_major_twin(m: &Model, mapped: &colibri_convert::gguf::Mapped, path: &Path) -> (Model, usize) {
    let p = m.parsed();
    let meta: Vec<_> = p.metadata.iter().map(|e| (e.key.clone(), e.kind, m.meta(&e.key).unwrap().to_vec())).collect();
    let back = |d: DType| match d {
        DType::Q8R8 => DType::Q8_0,
        DType::Q4R8 => DType::Q4_0,
        d => d,
    };
    let plan: Vec<PlannedTensor> = p
        .tensors
        .iter()
        .map(|t| PlannedTensor { name: t.name.clone(), dtype: back(t.dtype), shape: t.shape.clone(), kind: t.kind })
        .collect();
    let h = &p.header;
    let mut w = FileWriter::create(path, h.num_layers, h.num_experts, h.top_k, &meta, plan).unwrap();
    let mut relaid = 0;
    for t in &p.tensors {
        let view = m.tensor(&t.name).unwrap();
        let mats: Vec<&[u8]> = match t.kind {
            TensorKind::Experts => (0..view.n_experts()).map(|e| view.expert(e).unwrap().bytes).collect(),
            _ => vec![view.bytes],
        };
        let bytes: Vec<u8> = if back(t.dtype) != t.dtype {
            relaid += 1;
            let rm: Vec<Vec<u8>> = mats.iter().map(|b| row_major(t.dtype, b, view.cols())).collect();
            assert_eq!(rm, gguf_pieces(mapped, &t.name), "{}: the GGUF's blocks", t.name);
            rm.concat()
        } else {
            mats.concat()
        };
        w.tensor(&t.name, &bytes).unwrap();
    }
    w.finish().unwrap();
    (Model::open(path, &LoadOptions::default()).unwrap(), relaid)
}

#[test]
fn q8_0_and_q4_0_matrices_are_their_gguf_blocks_interleaved() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, ty) in FILES {
        let (dir, gguf) = (models_root().join(name), gguf_root().join(format!("{name}.{ty}.gguf")));
        let out = tmp.path().join(format!("{name}.{ty}.colibri"));
        convert_gguf(&gguf, &dir, &out);
        let m = Model::open(&out, &LoadOptions::default()).unwrap();
        m.verify().unwrap();
        let mapped = colibri_convert::gguf::map(&gguf).unwrap();
        let (twin, relaid) = row_major_twin(&m, &mapped, &tmp.path().join(format!("{name}.{ty}.rows.colibri")));
        let (il, rm) = if ty == "q8_0" { (DType::Q8R8, DType::Q8_0) } else { (DType::Q4R8, DType::Q4_0) };
        let count = |m: &Model, d: DType| m.parsed().tensors.iter().filter(|t| t.dtype == d).count();
        let (q8r8, q4r8) = (count(&m, DType::Q8R8), count(&m, DType::Q4R8));
        eprintln!("{name} {ty}: {q8r8} tensors q8r8, {q4r8} q4r8, {} kept {rm}", count(&m, rm));
        // llama-quantize's Q4_0 files hold Q8_0 tensors too (k / v, the output).
        assert!(count(&m, il) > 0 && relaid == q8r8 + q4r8, "{name} {ty}");
        assert_eq!(count(&twin, DType::Q8R8) + count(&twin, DType::Q4R8), 0, "{name} {ty}");
        for t in &m.parsed().tensors {
            let (a, b) = (m.tensor(&t.name).unwrap(), twin.tensor(&t.name).unwrap());
            let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(a.to_f32_vec()), bits(b.to_f32_vec()), "{name} {ty}: {} values", t.name);
        }
        let input = ids(&meta(&dir)["input_ids"]);
        let (a, b) =
            (logits_with(&m, &input, QuantActivations::Float), logits_with(&twin, &input, QuantActivations::Float));
        let max_abs = a.iter().fold(0f32, |s, x| s.max(x.abs()));
        let diff = a.iter().zip(&b).fold(0f32, |s, (x, y)| s.max((x - y).abs()));
        eprintln!("{name} {ty}: f32 activations, max |Δlogit| {:.2e} of max |logit|", diff / max_abs);
        assert!(diff <= 1e-4 * max_abs, "{name} {ty}: {diff} (max |logit| {max_abs})");
        let (a, b) = (
            logits_with(&m, &input, QuantActivations::default()),
            logits_with(&twin, &input, QuantActivations::default()),
        );
        let vocab = m.config().vocab_size;
        let greedy = |l: &[f32]| l.chunks(vocab).map(argmax).collect::<Vec<_>>();
        assert_eq!(greedy(&a), greedy(&b), "{name} {ty}: int8 activations, greedy tokens");
    }
}
