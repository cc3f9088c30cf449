//! The argument checks and conversions every binding module shares: numpy views of the
//! documented dimensions, counts, and the scope of a scan or a search.

use numpy::{Element, PyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::error::CoreError;
use crate::scan::{HashSet64, Scope, TimeRange};

/// A ranked answer: (keys or positions int64, scores).
pub(super) type Ranked<'py, S> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<S>>);

pub(super) fn invalid(msg: String) -> PyErr {
    CoreError::InvalidArgument(msg).into()
}

/// A 1-D, C-contiguous view of `arr`.
pub(super) fn vector<'a, T: Element>(
    arr: &'a PyReadonlyArrayDyn<'_, T>,
    name: &str,
) -> PyResult<&'a [T]> {
    if arr.ndim() != 1 {
        return Err(invalid(format!(
            "{name} must be 1-D, got {} dimensions",
            arr.ndim()
        )));
    }
    contiguous(arr, name)
}

/// A 2-D, C-contiguous view of `arr` and its row width.
pub(super) fn matrix<'a>(
    arr: &'a PyReadonlyArrayDyn<'_, f32>,
    name: &str,
) -> PyResult<(&'a [f32], usize)> {
    if arr.ndim() != 2 {
        return Err(invalid(format!(
            "{name} must be 2-D, got {} dimensions",
            arr.ndim()
        )));
    }
    Ok((contiguous(arr, name)?, arr.shape()[1]))
}

fn contiguous<'a, T: Element>(arr: &'a PyReadonlyArrayDyn<'_, T>, name: &str) -> PyResult<&'a [T]> {
    // `as_slice` also accepts Fortran order, which would silently read columns as rows.
    if !arr.is_c_contiguous() {
        return Err(invalid(format!("{name} must be C-contiguous")));
    }
    // The other refusal: a misaligned buffer (numpy allows one, a Rust slice does not).
    arr.as_slice()
        .map_err(|_| invalid(format!("{name} must be aligned")))
}

pub(super) fn count(value: i64, name: &str) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| invalid(format!("{name} must be >= 0, got {value}")))
}

/// The rows a time-scoped call admits: instants (microseconds since the Unix epoch) in
/// `[since, until)`; neither bound given admits every row, also those without an instant.
fn time_range(since: Option<i64>, until: Option<i64>) -> PyResult<TimeRange> {
    if since.is_none() && until.is_none() {
        return Ok(TimeRange::ALL);
    }
    // i64::MIN is NO_TIME: a bounded range never admits a row without an instant.
    let lo = since.unwrap_or(i64::MIN + 1).max(i64::MIN + 1);
    let hi = until.unwrap_or(i64::MAX);
    if hi < lo {
        return Err(invalid(format!("until ({hi}) is before since ({lo})")));
    }
    Ok(TimeRange { lo, hi })
}

/// The scope of an index scan or a full-text search, its hash sets copied (so the work can
/// run without the GIL).
pub(super) fn scope(
    agent: u64,
    projects: &PyReadonlyArrayDyn<'_, u64>,
    channels: &PyReadonlyArrayDyn<'_, u64>,
    sources: &PyReadonlyArrayDyn<'_, u64>,
    since: Option<i64>,
    until: Option<i64>,
) -> PyResult<Scope> {
    Ok(Scope {
        agent,
        projects: HashSet64::new(vector(projects, "projects")?),
        channels: HashSet64::new(vector(channels, "channels")?),
        sources: HashSet64::new(vector(sources, "sources")?),
        times: time_range(since, until)?,
    })
}
