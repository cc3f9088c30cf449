//! Rank fusion: reciprocal-rank (rrf) and relative-score (rsf) fusion of ranked key lists
//! (`fusion`).

use numpy::{PyArray1, PyReadonlyArrayDyn};
use pyo3::prelude::*;

use super::args::{count, vector, Ranked};
use crate::fusion::{self, Fused};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rrf, m)?)?;
    m.add_function(wrap_pyfunction!(rsf, m)?)?;
    Ok(())
}

fn fused_to_arrays(py: Python<'_>, fused: Fused) -> Ranked<'_, f64> {
    (
        PyArray1::from_vec(py, fused.keys),
        PyArray1::from_vec(py, fused.scores),
    )
}

fn key_lists<'a>(rankings: &'a [PyReadonlyArrayDyn<'_, i64>]) -> PyResult<Vec<&'a [i64]>> {
    rankings.iter().map(|r| vector(r, "rankings[i]")).collect()
}

/// rrf(rankings, *, k=60, weights=None, limit=None): reciprocal-rank fusion of int64 key lists,
/// best first; a negative key holds a rank without being a candidate -> (keys int64, scores float64).
#[pyfunction]
#[pyo3(signature = (rankings, *, k=60, weights=None, limit=None))]
fn rrf<'py>(
    py: Python<'py>,
    rankings: Vec<PyReadonlyArrayDyn<'py, i64>>,
    k: i64,
    weights: Option<Vec<f64>>,
    limit: Option<i64>,
) -> PyResult<Ranked<'py, f64>> {
    let k = count(k, "k")? as u64;
    let limit = limit.map(|l| count(l, "limit")).transpose()?;
    let lists = key_lists(&rankings)?;
    Ok(fused_to_arrays(
        py,
        fusion::rrf(&lists, k, weights.as_deref(), limit)?,
    ))
}

/// rsf(rankings, scores, *, limit=None): relative-score fusion; scores[c] (float64, NaN =
/// undefined) pairs with rankings[c] -> (keys int64, scores float64).
#[pyfunction]
#[pyo3(signature = (rankings, scores, *, limit=None))]
fn rsf<'py>(
    py: Python<'py>,
    rankings: Vec<PyReadonlyArrayDyn<'py, i64>>,
    scores: Vec<PyReadonlyArrayDyn<'py, f64>>,
    limit: Option<i64>,
) -> PyResult<Ranked<'py, f64>> {
    let limit = limit.map(|l| count(l, "limit")).transpose()?;
    let lists = key_lists(&rankings)?;
    let raw: Vec<&[f64]> = scores
        .iter()
        .map(|s| vector(s, "scores[i]"))
        .collect::<PyResult<_>>()?;
    Ok(fused_to_arrays(py, fusion::rsf(&lists, &raw, limit)?))
}
