//! Row-wise work of a step on the pool: what is done to each row of an activation matrix on its
//! own (gathering, scattering, embedding) split across the threads when it is big enough.

use rayon::prelude::*;

/// f(i, row i) for every `width`-wide row of `x`, on the pool when there are enough values to
/// be worth it (each row on its own: the result is the same either way).
pub fn by_rows(x: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    const PAR_MIN_VALUES: usize = 1 << 16;
    if x.len() >= PAR_MIN_VALUES && crate::threads::current() > 1 {
        x.par_chunks_mut(width).enumerate().for_each(|(i, row)| f(i, row));
    } else {
        x.chunks_mut(width).enumerate().for_each(|(i, row)| f(i, row));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_visited_once_with_its_index_on_and_off_the_pool() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (width, rows) in [(3, 5), (64, 1 << 11)] {
            let want: Vec<f32> = (0..rows * width).map(|i| (i / width) as f32 + 1.0).collect();
            let run = || {
                let mut x = vec![0f32; rows * width];
                by_rows(&mut x, width, |i, row| row.iter_mut().for_each(|v| *v += i as f32 + 1.0));
                x
            };
            assert_eq!(run(), want);
            assert_eq!(pool.install(run), want);
        }
    }
}
