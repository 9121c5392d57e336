//! NumPy .npy files of float32 (little-endian, C order): read [seq, hidden] embeddings, write
//! [n_tokens, vocab] logits. Only what the CLI needs, with every header field checked.

use colibri::Error;
use std::io::Write;
use std::path::Path;

fn bad(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::InvalidArgument { reason: format!("{}: {reason}", path.display()) }
}

/// Read a 2-D float32 array; returns (shape, data).
pub fn read_f32_2d(path: &Path) -> Result<([usize; 2], Vec<f32>), Error> {
    let b = std::fs::read(path).map_err(|e| bad(path, e))?;
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad(path, "not a .npy file"));
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(bad(path, format!("unsupported .npy version {v}"))),
    };
    let header = b.get(start..start + hlen).ok_or_else(|| bad(path, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(path, "header is not text"))?;
    let descr = field(header, "descr").ok_or_else(|| bad(path, "header lacks descr"))?;
    if descr.trim_matches(|c| c == '\'' || c == '"') != "<f4" {
        return Err(bad(path, format!("dtype {descr} is not float32 ('<f4')")));
    }
    if field(header, "fortran_order").map(|v| v.trim()) != Some("False") {
        return Err(bad(path, "Fortran-ordered arrays are not supported (save with C order)"));
    }
    let shape_txt = field(header, "shape").ok_or_else(|| bad(path, "header lacks shape"))?;
    let dims: Vec<usize> = shape_txt
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<usize>().map_err(|_| bad(path, format!("bad shape {shape_txt}"))))
        .collect::<Result<_, _>>()?;
    if dims.len() != 2 {
        return Err(bad(path, format!("expected a 2-D array [seq, hidden], got shape {shape_txt}")));
    }
    let n = dims[0].checked_mul(dims[1]).ok_or_else(|| bad(path, "shape overflows"))?;
    let data = &b[start + hlen..];
    if data.len() != n * 4 {
        return Err(bad(path, format!("shape {shape_txt} needs {} data bytes, file has {}", n * 4, data.len())));
    }
    Ok(([dims[0], dims[1]], data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()))
}

/// The value text of `key` in a .npy header dict ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }").
fn field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') { rest.find(')')? + 1 } else { rest.find(',')? };
    Some(&rest[..end])
}

/// Write a 2-D float32 array atomically (temp file + rename).
pub fn write_f32_2d(path: &Path, shape: [usize; 2], data: &[f32]) -> Result<(), Error> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", shape[0], shape[1]);
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = Vec::with_capacity(10 + header.len() + data.len() * 4);
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    data.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io("write .npy file", e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejections() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        write_f32_2d(&p, [2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.5]).unwrap();
        let (shape, data) = read_f32_2d(&p).unwrap();
        assert_eq!(shape, [2, 3]);
        assert_eq!(data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.5]);
        let mut b = std::fs::read(&p).unwrap();
        b.pop();
        std::fs::write(&p, &b).unwrap();
        assert!(read_f32_2d(&p).is_err());
        std::fs::write(&p, b"not numpy").unwrap();
        assert!(read_f32_2d(&p).is_err());
    }
}
