//! The kernels: dot products of rows with a query, and top-k selection under the total order
//! (`scan`, `topk`).

use numpy::{PyArray1, PyReadonlyArrayDyn};
use pyo3::prelude::*;

use super::args::{count, invalid, matrix, vector, Ranked};
use crate::error::CoreError;
use crate::scan;
use crate::topk::{self, Hit};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan_dot, m)?)?;
    m.add_function(wrap_pyfunction!(top_k, m)?)?;
    m.add_function(wrap_pyfunction!(scan_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(merge_top_k, m)?)?;
    Ok(())
}

/// A query of width `dim` for `rows` of width `dim` (`dim >= 1`).
fn rows_and_query<'a>(
    rows: &'a PyReadonlyArrayDyn<'_, f32>,
    query: &'a PyReadonlyArrayDyn<'_, f32>,
) -> PyResult<(&'a [f32], &'a [f32])> {
    let (rows, dim) = matrix(rows, "rows")?;
    let query = vector(query, "query")?;
    if dim == 0 {
        return Err(invalid("rows must have at least one column".into()));
    }
    if query.len() != dim {
        return Err(CoreError::DimensionMismatch {
            expected: dim,
            got: query.len(),
        }
        .into());
    }
    Ok((rows, query))
}

fn hits_to_arrays<'py>(py: Python<'py>, hits: &[Hit]) -> Ranked<'py, f32> {
    let positions = hits.iter().map(|h| h.position as i64).collect();
    let scores = hits.iter().map(|h| h.score).collect();
    (
        PyArray1::from_vec(py, positions),
        PyArray1::from_vec(py, scores),
    )
}

/// scan_dot(rows, query): rows (n, dim) float32, query (dim,) float32 -> scores (n,) float32.
#[pyfunction]
fn scan_dot<'py>(
    py: Python<'py>,
    rows: PyReadonlyArrayDyn<'py, f32>,
    query: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let (rows, query) = rows_and_query(&rows, &query)?;
    Ok(PyArray1::from_vec(py, scan::scan_dot(rows, query)?))
}

/// top_k(scores, k): scores (n,) float32 -> (positions int64, scores float32), best first by
/// (score desc by total order, position asc).
#[pyfunction]
fn top_k<'py>(
    py: Python<'py>,
    scores: PyReadonlyArrayDyn<'py, f32>,
    k: i64,
) -> PyResult<Ranked<'py, f32>> {
    let k = count(k, "k")?;
    let scores = vector(&scores, "scores")?;
    Ok(hits_to_arrays(py, &topk::top_k(scores, k)))
}

/// scan_chunk(rows, query, threshold, k, base_position): the best k rows of the block with
/// `score >= threshold`, positions offset by base_position -> (positions int64, scores float32).
#[pyfunction]
fn scan_chunk<'py>(
    py: Python<'py>,
    rows: PyReadonlyArrayDyn<'py, f32>,
    query: PyReadonlyArrayDyn<'py, f32>,
    threshold: f64,
    k: i64,
    base_position: i64,
) -> PyResult<Ranked<'py, f32>> {
    let k = count(k, "k")?;
    let base = count(base_position, "base_position")?;
    let (rows, query) = rows_and_query(&rows, &query)?;
    // Positions come back as int64.
    if base
        .checked_add(rows.len() / query.len())
        .is_none_or(|end| end > i64::MAX as usize)
    {
        return Err(invalid("base_position + rows exceeds int64".into()));
    }
    let base = base as u64;
    Ok(hits_to_arrays(
        py,
        &scan::scan_chunk(rows, query, threshold, k, base)?,
    ))
}

/// merge_top_k(positions, scores, k): the best k of (positions[i], scores[i]) pairs, e.g. the
/// concatenated results of several `scan_chunk` calls -> (positions int64, scores float32).
#[pyfunction]
fn merge_top_k<'py>(
    py: Python<'py>,
    positions: PyReadonlyArrayDyn<'py, i64>,
    scores: PyReadonlyArrayDyn<'py, f32>,
    k: i64,
) -> PyResult<Ranked<'py, f32>> {
    let k = count(k, "k")?;
    let positions = vector(&positions, "positions")?;
    let scores = vector(&scores, "scores")?;
    if positions.len() != scores.len() {
        return Err(CoreError::DimensionMismatch {
            expected: positions.len(),
            got: scores.len(),
        }
        .into());
    }
    let positions: Vec<u64> = positions
        .iter()
        .map(|&p| u64::try_from(p).map_err(|_| invalid(format!("positions must be >= 0, got {p}"))))
        .collect::<PyResult<_>>()?;
    Ok(hits_to_arrays(
        py,
        &topk::merge_top_k(&positions, scores, k),
    ))
}
