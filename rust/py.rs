//! The Python bindings: the only module that imports pyo3 and numpy.
//!
//! Each function checks its arguments, converts types and calls a pure function. Arrays must
//! already have the right dtype (`TypeError` otherwise) and be one- or two-dimensional and
//! C-contiguous as documented (`ValueError` otherwise); nothing is copied behind the caller's
//! back. Work on caller-owned numpy buffers keeps the GIL, because another Python thread could
//! write to them; the index scan copies its small inputs first and releases the GIL while it
//! reads the mapping, which Rust owns. `python/cpersona/_fallback.py` is the numpy twin of
//! everything here: same names, signatures, defaults, dtypes and exceptions, except `FtsIndex`
//! and `fts_fold`, whose fallback is the FTS5 statement they reproduce.

// Doc comments here are Python docstrings, written for Python readers, not rustdoc; and pyo3
// hands extracted arguments over by value.
#![allow(clippy::doc_markdown, clippy::needless_pass_by_value)]

use std::path::PathBuf;
use std::sync::{PoisonError, RwLock};

use numpy::{Element, PyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::error::CoreError;
use crate::fts::{self, FtsIndex};
use crate::fusion::{self, Fused};
use crate::scan::{self, HashSet64, ScanParams, Scope, TimeRange, DEFAULT_CHUNK_ROWS};
use crate::store::Store;
use crate::topk::{self, Hit};
use crate::unigram;

pyo3::import_exception!(cpersona.errors, StoreCorrupt);

const _: () = assert!(
    DEFAULT_CHUNK_ROWS == 4096,
    "keep the scan signature's default in step"
);

impl From<CoreError> for PyErr {
    fn from(err: CoreError) -> PyErr {
        match err {
            CoreError::Corrupt(_) | CoreError::CorruptFullText(_) => {
                StoreCorrupt::new_err(err.to_string())
            }
            // pyo3 picks FileNotFoundError, PermissionError, ... from the error kind.
            CoreError::Io(io) => PyErr::from(io),
            CoreError::DimensionMismatch { .. } | CoreError::InvalidArgument(_) => {
                PyValueError::new_err(err.to_string())
            }
        }
    }
}

type Ranked<'py, S> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<S>>);
type ScanArrays<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f32>>,
);

fn invalid(msg: String) -> PyErr {
    CoreError::InvalidArgument(msg).into()
}

/// A 1-D, C-contiguous view of `arr`.
fn vector<'a, T: Element>(arr: &'a PyReadonlyArrayDyn<'_, T>, name: &str) -> PyResult<&'a [T]> {
    if arr.ndim() != 1 {
        return Err(invalid(format!(
            "{name} must be 1-D, got {} dimensions",
            arr.ndim()
        )));
    }
    contiguous(arr, name)
}

/// A 2-D, C-contiguous view of `arr` and its row width.
fn matrix<'a>(arr: &'a PyReadonlyArrayDyn<'_, f32>, name: &str) -> PyResult<(&'a [f32], usize)> {
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

fn count(value: i64, name: &str) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| invalid(format!("{name} must be >= 0, got {value}")))
}

fn hits_to_arrays<'py>(py: Python<'py>, hits: &[Hit]) -> Ranked<'py, f32> {
    let positions = hits.iter().map(|h| h.position as i64).collect();
    let scores = hits.iter().map(|h| h.score).collect();
    (
        PyArray1::from_vec(py, positions),
        PyArray1::from_vec(py, scores),
    )
}

fn fused_to_arrays(py: Python<'_>, fused: Fused) -> Ranked<'_, f64> {
    (
        PyArray1::from_vec(py, fused.keys),
        PyArray1::from_vec(py, fused.scores),
    )
}

/// scan_dot(rows, query): rows (n, dim) float32, query (dim,) float32 -> scores (n,) float32.
#[pyfunction(name = "scan_dot")]
fn scan_dot_py<'py>(
    py: Python<'py>,
    rows: PyReadonlyArrayDyn<'py, f32>,
    query: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let (rows, query) = rows_and_query(&rows, &query)?;
    Ok(PyArray1::from_vec(py, scan::scan_dot(rows, query)?))
}

/// top_k(scores, k): scores (n,) float32 -> (positions int64, scores float32), best first by
/// (score desc by total order, position asc).
#[pyfunction(name = "top_k")]
fn top_k_py<'py>(
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
#[pyfunction(name = "scan_chunk")]
fn scan_chunk_py<'py>(
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
#[pyfunction(name = "merge_top_k")]
fn merge_top_k_py<'py>(
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

fn key_lists<'a>(rankings: &'a [PyReadonlyArrayDyn<'_, i64>]) -> PyResult<Vec<&'a [i64]>> {
    rankings.iter().map(|r| vector(r, "rankings[i]")).collect()
}

/// rrf(rankings, *, k=60, weights=None, limit=None): reciprocal-rank fusion of int64 key lists,
/// best first; a negative key holds a rank without being a candidate -> (keys int64, scores float64).
#[pyfunction(name = "rrf", signature = (rankings, *, k=60, weights=None, limit=None))]
fn rrf_py<'py>(
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
#[pyfunction(name = "rsf", signature = (rankings, scores, *, limit=None))]
fn rsf_py<'py>(
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

/// A validated, read-only mapping of one vector index file (docs/vector-index.md).
#[pyclass(frozen, name = "VectorIndex", module = "cpersona._core")]
struct VectorIndex {
    store: Store,
}

#[pymethods]
impl VectorIndex {
    /// Maps and validates the file; raises StoreCorrupt when it cannot be trusted.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let store = py.detach(|| Store::open(&path))?;
        Ok(Self { store })
    }

    #[getter]
    fn dim(&self) -> usize {
        self.store.dim()
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.store.capacity()
    }

    /// Slots in use, read from the live header.
    #[getter]
    fn count(&self) -> PyResult<usize> {
        Ok(self.store.count()?)
    }

    #[getter]
    fn live(&self) -> u64 {
        self.store.counters().live
    }

    #[getter]
    fn applied_seq(&self) -> i64 {
        self.store.counters().applied_seq
    }

    #[getter]
    fn dirty(&self) -> u32 {
        self.store.counters().dirty
    }

    #[getter]
    fn table(&self) -> u32 {
        self.store.table()
    }

    #[getter]
    fn db_uid<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.store.db_uid())
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
        let scope = Scope {
            agent,
            projects: HashSet64::new(vector(&projects, "projects")?),
            channels: HashSet64::new(vector(&channels, "channels")?),
            sources: HashSet64::new(vector(&sources, "sources")?),
            times: time_range(since, until)?,
        };
        let store = &self.store;
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
            self.store.dim(),
            self.store.counters().count,
            self.store.capacity(),
            self.store.table()
        )
    }
}

/// The full-text index of one table, held in memory (docs/fts-index.md). Thread-safe: searches
/// share it, `apply` takes it exclusively; both run without the GIL.
#[pyclass(frozen, name = "FtsIndex", module = "cpersona._core")]
struct FtsIndexPy {
    inner: RwLock<FtsIndex>,
}

type FtsRow = (u64, u64, u64, u64, i64, i64, Vec<String>);

impl FtsIndexPy {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, FtsIndex> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl FtsIndexPy {
    #[new]
    fn new() -> Self {
        Self {
            inner: RwLock::new(FtsIndex::new()),
        }
    }

    /// Applies change records (the bytes of the file's record area); raises StoreCorrupt when
    /// they cannot be parsed, before changing anything.
    fn apply(&self, py: Python<'_>, records: &[u8]) -> PyResult<()> {
        let records = records.to_vec();
        py.detach(|| -> Result<(), CoreError> {
            let parsed = fts::parse_records(&records)?;
            self.inner
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .apply(parsed);
            Ok(())
        })?;
        Ok(())
    }

    /// The top `limit` rows of the scope matching any of `terms` (query phrases, in query
    /// order) -> (ids int64, bm25 float64), by bm25 ascending then id ascending.
    #[allow(clippy::too_many_arguments)] // the scope's parts are the documented API
    #[pyo3(signature = (
        terms, agent, projects, channels, sources, limit, *, since=None, until=None,
    ))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        terms: Vec<String>,
        agent: u64,
        projects: PyReadonlyArrayDyn<'py, u64>,
        channels: PyReadonlyArrayDyn<'py, u64>,
        sources: PyReadonlyArrayDyn<'py, u64>,
        limit: i64,
        since: Option<i64>,
        until: Option<i64>,
    ) -> PyResult<Ranked<'py, f64>> {
        let limit = count(limit, "limit")?;
        let scope = Scope {
            agent,
            projects: HashSet64::new(vector(&projects, "projects")?),
            channels: HashSet64::new(vector(&channels, "channels")?),
            sources: HashSet64::new(vector(&sources, "sources")?),
            times: time_range(since, until)?,
        };
        let hits = py.detach(|| {
            let folded: Vec<String> = terms.iter().map(|t| fts::fold::fold_text(t).0).collect();
            self.read().search(&folded, &scope, limit)
        });
        let (ids, scores): (Vec<i64>, Vec<f64>) = hits.into_iter().unzip();
        Ok((PyArray1::from_vec(py, ids), PyArray1::from_vec(py, scores)))
    }

    /// Live rows.
    #[getter]
    fn live(&self) -> usize {
        self.read().live()
    }

    /// Forgets the cached phrase rows (benchmarks of a freshly loaded index).
    fn clear_cache(&self) {
        self.read().clear_cache();
    }

    /// Tokens over all live rows.
    #[getter]
    fn total_tokens(&self) -> u64 {
        self.read().total_tokens()
    }

    /// Slots held, dead ones included.
    #[getter]
    fn slots(&self) -> usize {
        self.read().slot_count()
    }

    /// Live row ids, ascending.
    fn ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        PyArray1::from_vec(py, self.read().ids())
    }

    /// (agent, project, channel, source, key, time, folded columns) of a live row, else None.
    fn row(&self, id: i64) -> Option<FtsRow> {
        self.read().row(id).map(|r| {
            (
                r.agent,
                r.project,
                r.channel,
                r.source,
                r.key,
                r.time,
                r.columns.iter().map(ToString::to_string).collect(),
            )
        })
    }

    fn __repr__(&self) -> String {
        let ix = self.read();
        format!("FtsIndex(live={}, slots={})", ix.live(), ix.slot_count())
    }
}

/// `text` as the FTS5 trigram tokenizer sees it: folded, cut at its first NUL.
#[pyfunction(name = "fts_fold")]
fn fts_fold_py(text: &str) -> String {
    fts::fold::fold_text(text).0
}

/// A SentencePiece unigram tokenizer over a model's own tables (rust/unigram.rs).
#[pyclass(frozen, name = "Unigram", module = "cpersona._core")]
struct Unigram {
    inner: unigram::Unigram,
}

#[pymethods]
impl Unigram {
    /// Unigram(blob, offsets, scores, unk_id, norm_cp, norm_off, norm_out): piece i is
    /// blob[offsets[i]:offsets[i + 1]] (UTF-8) scored scores[i]; character norm_cp[j] normalises
    /// to norm_out[norm_off[j]:norm_off[j + 1]]. Arrays are 1-D uint32 (scores float32).
    #[new]
    fn new(
        blob: &[u8],
        offsets: PyReadonlyArrayDyn<'_, u32>,
        scores: PyReadonlyArrayDyn<'_, f32>,
        unk_id: u32,
        norm_cp: PyReadonlyArrayDyn<'_, u32>,
        norm_off: PyReadonlyArrayDyn<'_, u32>,
        norm_out: PyReadonlyArrayDyn<'_, u32>,
    ) -> PyResult<Self> {
        let offsets = vector(&offsets, "offsets")?;
        let scores = vector(&scores, "scores")?;
        let norm_cp = vector(&norm_cp, "norm_cp")?;
        let norm_off = vector(&norm_off, "norm_off")?;
        let norm_out = vector(&norm_out, "norm_out")?;
        let inner =
            unigram::Unigram::new(blob, offsets, scores, unk_id, norm_cp, norm_off, norm_out)?;
        Ok(Self { inner })
    }

    /// The normalised text the split runs over (spaces as U+2581).
    fn normalize(&self, text: &str) -> String {
        self.inner.normalize(text)
    }

    /// The piece ids of text, without start and end tokens.
    fn encode(&self, py: Python<'_>, text: &str) -> Vec<u32> {
        py.detach(|| self.inner.encode(text))
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEBUG_BUILD", cfg!(debug_assertions))?;
    m.add("KERNEL", scan::kernel().name)?;
    m.add("DEFAULT_CHUNK_ROWS", DEFAULT_CHUNK_ROWS)?;
    m.add_function(wrap_pyfunction!(scan_dot_py, m)?)?;
    m.add_function(wrap_pyfunction!(top_k_py, m)?)?;
    m.add_function(wrap_pyfunction!(scan_chunk_py, m)?)?;
    m.add_function(wrap_pyfunction!(merge_top_k_py, m)?)?;
    m.add_function(wrap_pyfunction!(rrf_py, m)?)?;
    m.add_function(wrap_pyfunction!(rsf_py, m)?)?;
    m.add_class::<VectorIndex>()?;
    m.add_class::<FtsIndexPy>()?;
    m.add_function(wrap_pyfunction!(fts_fold_py, m)?)?;
    m.add_class::<Unigram>()?;
    Ok(())
}
