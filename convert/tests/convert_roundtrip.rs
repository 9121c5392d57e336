//! Contract: for every fixture checkpoint, the converter then `Model::open` gives back every
//! source tensor — bit-exact when the dtype is kept, correctly rounded (round-to-nearest-even)
//! when converting f32 → f16/bf16. The source is read with the independent `safetensors` crate
//! and the HF→colibri name mapping is restated here, so a wrong mapping in the converter fails.

#[path = "../../tests/common/fixtures.rs"]
mod fixtures;

use colibri::format::{DType, TensorKind};
use colibri::{LoadOptions, Model};
use fixtures::*;
use half::f16;
use safetensors::Dtype;
use std::path::Path;

/// Round-to-nearest-even f32 → bf16, written out independently of `half`.
fn bf16_rne(x: f32) -> u16 {
    let bits = x.to_bits();
    assert!(x.is_finite());
    let lsb = (bits >> 16) & 1;
    ((bits + 0x7fff + lsb) >> 16) as u16
}

fn check_tensor(name: &str, src_dtype: Dtype, src: &[u8], out_dtype: DType, out: &[u8]) {
    let same = matches!(
        (src_dtype, out_dtype),
        (Dtype::F32, DType::F32) | (Dtype::F16, DType::F16) | (Dtype::BF16, DType::BF16) | (Dtype::U8, DType::Mxfp4)
    );
    if same {
        assert!(src == out, "{name}: bytes differ although the dtype was kept");
        return;
    }
    let n = src.len() / elem_size(src_dtype);
    assert_eq!(Some(out.len() as u64), out_dtype.bytes_for(n as u64), "{name}: element count");
    for i in 0..n {
        let x = to_f32(src_dtype, &src[i * elem_size(src_dtype)..]);
        match out_dtype {
            DType::F32 => {
                let y = f32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
                assert_eq!(x.to_bits(), y.to_bits(), "{name}[{i}]: widening must be exact");
            }
            DType::BF16 => {
                let y = u16::from_le_bytes([out[i * 2], out[i * 2 + 1]]);
                assert_eq!(y, bf16_rne(x), "{name}[{i}]: {x} not rounded to nearest-even bf16");
            }
            DType::F16 => {
                let y = f16::from_bits(u16::from_le_bytes([out[i * 2], out[i * 2 + 1]]));
                // Correct rounding: no f16 neighbour of y is closer to x.
                let err = (y.to_f32() - x).abs();
                let b = y.to_bits();
                let near = if b & 0x7fff == 0 { [0x0001, 0x8001] } else { [b.wrapping_add(1), b.wrapping_sub(1)] };
                for n in near.map(|n| f16::from_bits(n).to_f32()).into_iter().filter(|n| n.is_finite()) {
                    assert!(err <= (n - x).abs(), "{name}[{i}]: {x} badly rounded to {y} (neighbour {n} is closer)");
                }
            }
            block => panic!("{name}: converted without --quantize but stored as {block}"),
        }
    }
}

/// As `colibri convert DIR -o OUT [--dtype DTYPE]`, through the library.
fn convert(dir: &Path, out: &Path, dtype: Option<&str>) {
    convert_as(dir, out, dtype.map(|d| DType::from_name(d).unwrap_or_else(|| panic!("unknown dtype {d}"))));
}

#[test]
fn every_tensor_reads_back_equal_to_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0usize;
    for dir in fixtures() {
        let src = load_sources(&dir);
        for dtype in [None, Some("f32"), Some("f16"), Some("bf16")] {
            let out = tmp.path().join("m.colibri");
            convert(&dir, &out, dtype);
            for mmap in [true, false] {
                let model = Model::open(&out, &LoadOptions { mmap, ..Default::default() }).unwrap();
                model.verify().unwrap();
                for rec in &model.parsed().tensors {
                    let view = model.tensor(&rec.name).unwrap();
                    // Sigmoid routers and their choice bias (and DeepSeek-V2's and ERNIE-4.5's softmax
                    // routers, which transformers also keeps f32) stay f32 whatever --dtype says.
                    let sigmoid = model.config().moe.scoring == colibri::model::Scoring::Sigmoid
                        || matches!(
                            model.config().family,
                            colibri::model::Family::DeepseekV2 | colibri::model::Family::Ernie45Moe
                        );
                    let routerish = rec.kind == TensorKind::Router || rec.name.ends_with(".moe.router_bias");
                    // MXFP4 experts (GPT-OSS as the hub ships it) stay MXFP4 whatever --dtype says.
                    let mxfp4 = rec.kind == TensorKind::Experts && src.keys().any(|k| k.ends_with("_blocks"));
                    if let Some(want) = dtype {
                        let want = if sigmoid && routerish { "f32" } else { want };
                        // In 8-row interleaved units (mxfp4r8) when the rows are whole groups.
                        let want = match mxfp4 {
                            true if view.rows().is_multiple_of(8) => "mxfp4r8",
                            true => "mxfp4",
                            false => want,
                        };
                        assert_eq!(rec.dtype.name(), want, "{}: dtype", rec.name);
                    }
                    if rec.kind == TensorKind::Experts {
                        for e in 0..view.n_experts() {
                            let ev = view.expert(e).unwrap();
                            let (sd, mut sb) = expected_bytes(&src, &rec.name, Some(e), ev.rows());
                            let mut out_dtype = rec.dtype;
                            if out_dtype == DType::Mxfp4R8 {
                                // The same blocks, interleaved (`format::mxfp4`).
                                let plain = std::mem::take(&mut sb);
                                sb = vec![0; plain.len()];
                                let nb = plain.len() / colibri::format::mxfp4::BLOCK_BYTES / ev.rows();
                                colibri::format::mxfp4::interleave(&plain, nb, &mut sb);
                                out_dtype = DType::Mxfp4;
                            }
                            check_tensor(&format!("{}[{e}]", rec.name), sd, &sb, out_dtype, ev.bytes);
                        }
                    } else {
                        let (sd, sb) = expected_bytes(&src, &rec.name, None, view.rows());
                        if dtype.is_none() {
                            assert_eq!(
                                format!("{sd:?}").to_lowercase(),
                                rec.dtype.name(),
                                "{}: the source dtype must be kept by default",
                                rec.name
                            );
                        }
                        check_tensor(&rec.name, sd, &sb, rec.dtype, view.bytes);
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} tensors checked");
}
