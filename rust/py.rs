//! The Python bindings: the only module that imports pyo3 and numpy.
//!
//! Each function checks its arguments, converts types and calls a pure function.

use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::error::CoreError;
use crate::scan;

pyo3::import_exception!(cpersona.errors, StoreCorrupt);

impl From<CoreError> for PyErr {
    fn from(err: CoreError) -> PyErr {
        match err {
            CoreError::Corrupt(_) => StoreCorrupt::new_err(err.to_string()),
            CoreError::Io(io) => PyOSError::new_err(io.to_string()),
            CoreError::DimensionMismatch { .. } | CoreError::InvalidArgument(_) => {
                PyValueError::new_err(err.to_string())
            }
        }
    }
}

/// scan_dot(rows, query) -> scores: rows (n, dim) float32, query (dim,) float32 -> (n,) float32.
#[pyfunction(name = "scan_dot")]
fn scan_dot_py<'py>(
    py: Python<'py>,
    rows: PyReadonlyArray2<'py, f32>,
    query: PyReadonlyArray1<'py, f32>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let dim = rows.shape()[1];
    if query.len() != dim {
        return Err(CoreError::DimensionMismatch { expected: dim, got: query.len() }.into());
    }
    // Caller-owned buffers: keep the GIL (another thread could write to them).
    let rows = rows.as_slice().map_err(|_| PyValueError::new_err("rows must be C-contiguous"))?;
    let query = query.as_slice().map_err(|_| PyValueError::new_err("query must be C-contiguous"))?;
    let scores = if dim == 0 { Vec::new() } else { scan::scan_dot(rows, query)? };
    Ok(PyArray1::from_vec(py, scores))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEBUG_BUILD", cfg!(debug_assertions))?;
    m.add("KERNEL", "chunked-f32x8")?;
    m.add_function(wrap_pyfunction!(scan_dot_py, m)?)?;
    Ok(())
}
