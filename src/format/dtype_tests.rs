//! The dtype table's invariants: ids, names, sizes, and every dtype's encode / dequantise pair.

use super::*;

#[test]
fn block_types_size_whole_groups_only() {
    assert_eq!(DType::Q8.bytes_for(64), Some(64 + 4));
    assert_eq!(DType::Q4.bytes_for(64), Some(32 + 4));
    assert_eq!(DType::Q8.bytes_for(48), None);
    assert_eq!(DType::Q4.bytes_for(u64::MAX - 31), None);
    assert_eq!(DType::F16.bytes_for(3), Some(6));
    assert_eq!(DType::Q8.bits_per_weight(), 8.5);
    assert_eq!(DType::Q4.bits_per_weight(), 4.5);
    assert_eq!(DType::Q4R8.bytes_for(64), Some(32 + 4));
    assert_eq!(DType::Q8R8.bits_per_weight(), 8.5);
}

#[test]
fn ids_round_trip() {
    for &d in DType::ALL {
        assert_eq!(DType::from_id(d.id()), Some(d));
        assert_eq!(DType::from_name(d.name()), Some(d));
        assert_eq!(d.interleaved().encoding(), d.encoding());
    }
    assert_eq!(DType::from_id(20), None);
    for (id, _) in super::super::table::RETIRED {
        assert!(DType::from_id(id).is_none() && (DType::Q6KR8.id() ^ id).count_ones() >= 2, "id {id}");
    }
    // Any two dtypes whose tensors take the same bytes (f16/bf16, q8/q8r8/q8_0, q4/q4r8).
    for &a in DType::ALL {
        for b in DType::ALL.iter().copied().filter(|&b| b != a && b.bits_per_weight() == a.bits_per_weight()) {
            assert!((a.id() ^ b.id()).count_ones() >= 2, "{a} and {b} are one bit flip apart");
        }
    }
    assert_eq!(DType::from_id(3), None);
}

#[test]
fn the_table_is_in_dtype_order_with_unique_ids_and_names() {
    for (i, &d) in DType::ALL.iter().enumerate() {
        assert_eq!((d.index(), d.info().dtype), (i, d), "row {i}");
    }
    for &a in DType::ALL {
        for b in DType::ALL.iter().copied().filter(|&b| b != a) {
            assert!(a.id() != b.id() && a.name() != b.name(), "{a} and {b} share an id or name");
        }
        assert_eq!(a.bytes_for(a.block() as u64), Some(u64::from(a.info().block_bytes)));
    }
}

#[test]
fn every_dtype_encodes_and_dequantises_back() {
    let (rows, cols) = (32, 256);
    let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0).collect();
    for &d in DType::ALL {
        let bytes = d.encode(&x, cols);
        assert_eq!(bytes.len() as u64, d.bytes_for((rows * cols) as u64).unwrap(), "{d}");
        let mut y = vec![0f32; rows * cols];
        d.dequantize(&bytes, cols, 0, &mut y);
        // About half a step of the grid the dtype's bits allow (q2_k: 2 bits, q3_k: 3; q4's
        // d/2 = max/16; FP4's widest gap: 2 · 2^(e−128) ≤ max/4).
        let step = match d.bits_per_weight() {
            _ if d.encoding() == DType::Mxfp4 => 50.0 / 64.0 / 4.0,
            b if b < 3.0 => 0.3,
            b if b < 4.0 => 0.25,
            b if b < 16.0 => 50.0 / 64.0 / 7.0,
            _ => 1e-2,
        };
        for (i, (a, b)) in x.iter().zip(&y).enumerate() {
            assert!((a - b).abs() <= step, "{d} element {i}: {a} vs {b}");
        }
        // The interleaved twin holds the same values.
        let mut z = vec![0f32; rows * cols];
        d.interleaved().dequantize(&d.interleaved().encode(&x, cols), cols, 0, &mut z);
        assert_eq!(y, z, "{d} and {}", d.interleaved());
    }
}
