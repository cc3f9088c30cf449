//! Score kernels: dot products of one query against row-major float32 rows.
//!
//! `dot_scalar` is the readable reference and the test oracle; `dot_rows` is the fast path.

use crate::error::CoreError;

/// Plain dot product, one accumulator. Kept as the oracle for the fast kernel.
#[must_use]
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        acc += x * y;
    }
    acc
}

/// Dot product with eight independent accumulators, which LLVM vectorises.
#[must_use]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0.0f32; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (xa, xb) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += xa[i] * xb[i];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ta.iter().zip(tb) {
        tail += x * y;
    }
    let pairs = [acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]];
    (pairs[0] + pairs[2]) + (pairs[1] + pairs[3]) + tail
}

/// Scores every row of `rows` (row-major, `dim` wide) against `query`.
///
/// # Errors
/// `DimensionMismatch` when `rows` is not a whole number of `query`-wide rows.
pub fn scan_dot(rows: &[f32], query: &[f32]) -> Result<Vec<f32>, CoreError> {
    let dim = query.len();
    if dim == 0 {
        return Err(CoreError::InvalidArgument("query must not be empty".into()));
    }
    if rows.len() % dim != 0 {
        return Err(CoreError::DimensionMismatch { expected: dim, got: rows.len() % dim });
    }
    Ok(rows.chunks_exact(dim).map(|row| dot(row, query)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_scalar_on_integer_vectors() {
        for dim in [1usize, 3, 7, 8, 9, 17, 33, 384] {
            let a: Vec<f32> = (0..dim).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
            let b: Vec<f32> = (0..dim).map(|i| ((i * 3) % 4) as f32 - 1.0).collect();
            assert_eq!(dot(&a, &b), dot_scalar(&a, &b), "dim {dim}");
        }
    }

    #[test]
    fn scan_dot_rejects_ragged_rows() {
        assert!(scan_dot(&[1.0, 2.0, 3.0], &[1.0, 1.0]).is_err());
    }
}
