//! The vector index file and its scoped window / far scan (`store`, `scan`).

use std::path::PathBuf;

use numpy::{PyArray1, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::args::{count, scope, vector};
use crate::scan::{self, ScanParams, DEFAULT_CHUNK_ROWS};
use crate::store::Store;

const _: () = assert!(
    DEFAULT_CHUNK_ROWS == 4096,
    "keep the scan signature's default in step"
);

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VectorIndex>()
}

type ScanArrays<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f32>>,
);

/// A validated, read-only mapping of one vector index file (docs/vector-index.md).
#[pyclass(frozen, module = "cpersona._core")]
struct VectorIndex {
    inner: Store,
}

#[pymethods]
impl VectorIndex {
    /// Maps and validates the file; raises StoreCorrupt when it cannot be trusted.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py.detach(|| Store::open(&path))?;
        Ok(Self { inner })
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// Slots in use, read from the live header.
    #[getter]
    fn count(&self) -> PyResult<usize> {
        Ok(self.inner.count()?)
    }

    #[getter]
    fn live(&self) -> u64 {
        self.inner.counters().live
    }

    #[getter]
    fn applied_seq(&self) -> i64 {
        self.inner.counters().applied_seq
    }

    #[getter]
    fn dirty(&self) -> u32 {
        self.inner.counters().dirty
    }

    #[getter]
    fn table(&self) -> u32 {
        self.inner.table()
    }

    #[getter]
    fn db_uid<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.db_uid())
    }

    /// The scoped window / far scan -> (near_ids int64, near_scores float32, far_ids int64,
    /// far_scores float32), each best first by (score desc, position asc).
    #[allow(clippy::too_many_arguments)]
    // the scan's parameters are the documented API
    // The default is spelled as a literal so that it shows in the text signature.
    #[pyo3(signature = (
        query, agent, projects, channels, sources, window, reach, threshold, k, far_k,
        chunk_rows=4096, threads=1, sums=None, *, since=None, until=None,
    ))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        query: PyReadonlyArrayDyn<'py, f32>,
        agent: u64,
        projects: PyReadonlyArrayDyn<'py, u64>,
        channels: PyReadonlyArrayDyn<'py, u64>,
        sources: PyReadonlyArrayDyn<'py, u64>,
        window: i64,
        reach: i64,
        threshold: f64,
        k: i64,
        far_k: i64,
        chunk_rows: i64,
        threads: i64,
        sums: Option<PyReadonlyArrayDyn<'py, u32>>,
        since: Option<i64>,
        until: Option<i64>,
    ) -> PyResult<ScanArrays<'py>> {
        let params = ScanParams {
            window: count(window, "window")?,
            reach: count(reach, "reach")?,
            threshold,
            k: count(k, "k")?,
            far_k: count(far_k, "far_k")?,
            chunk_rows: count(chunk_rows, "chunk_rows")?,
            threads: count(threads, "threads")?,
        };
        // Copy the small caller-owned inputs so the scan can run without the GIL.
        let query = vector(&query, "query")?.to_vec();
        let scope = scope(agent, &projects, &channels, &sources, since, until)?;
        let store = &self.inner;
        // Borrowed, not copied, with the GIL released: the checksums are a read-only mapping of
        // the sidecar file (vectors/checksums.py), as long as the file has slots, which writers
        // change only under the exclusive lock while the caller holds the shared one.
        let sums = sums.as_ref().map(|s| vector(s, "sums")).transpose()?;
        let result =
            py.detach(|| scan::scan_index_checked(store, &query, &scope, &params, sums))?;
        Ok((
            PyArray1::from_vec(py, result.near_ids),
            PyArray1::from_vec(py, result.near_scores),
            PyArray1::from_vec(py, result.far_ids),
            PyArray1::from_vec(py, result.far_scores),
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "VectorIndex(dim={}, count={}, capacity={}, table={})",
            self.inner.dim(),
            self.inner.counters().count,
            self.inner.capacity(),
            self.inner.table()
        )
    }
}
