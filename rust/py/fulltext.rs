//! The full-text index of one table and the FTS5 trigram folding (`fts`).

use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use numpy::{PyArray1, PyReadonlyArrayDyn};
use pyo3::prelude::*;

use super::args::{count, scope, Ranked};
use crate::error::CoreError;
use crate::fts;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FtsIndex>()?;
    m.add_function(wrap_pyfunction!(fts_fold, m)?)?;
    Ok(())
}

/// The full-text index of one table, held in memory (docs/fts-index.md). Thread-safe: searches
/// share it, `apply` takes it exclusively; both run without the GIL.
#[pyclass(frozen, module = "cpersona._core")]
struct FtsIndex {
    inner: RwLock<fts::FtsIndex>,
}

type FtsRow = (u64, u64, u64, u64, i64, i64, Vec<String>);

impl FtsIndex {
    fn read(&self) -> RwLockReadGuard<'_, fts::FtsIndex> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl FtsIndex {
    #[new]
    fn new() -> Self {
        Self {
            inner: RwLock::new(fts::FtsIndex::new()),
        }
    }

    /// The index of the segment file at `path`, searched in place (memory-mapped; the rows
    /// appended after it go to the delta through `apply`). Raises StoreCorrupt when the file
    /// fails a check of docs/fts-index.md ("Segment"), OSError when it cannot be read.
    #[staticmethod]
    fn mapped(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Self> {
        let segment = py.detach(|| fts::segment::Segment::open(&path))?;
        Ok(Self {
            inner: RwLock::new(fts::FtsIndex::mapped(segment)),
        })
    }

    /// (table, generation, end, records_crc, body_crc) of the mapped segment, else None.
    #[getter]
    fn segment(&self) -> Option<(u32, u32, u64, u32, u32)> {
        self.read()
            .segment_meta()
            .map(|m| (m.table, m.generation, m.end, m.records_crc, m.body_crc))
    }

    /// Rows held in this process's heap (appended after the segment; dead ones included).
    #[getter]
    fn delta_slots(&self) -> usize {
        self.read().delta_slots()
    }

    /// Writes the live rows as a segment file to `path`, naming the records it holds (the
    /// records file's generation, the offset they end at and their CRC-32); `body_crc` is
    /// left 0 for the caller to fill in before renaming the file into place.
    fn write_segment(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        table: u32,
        generation: u32,
        end: u64,
        records_crc: u32,
    ) -> PyResult<()> {
        let meta = fts::segment::Meta {
            table,
            generation,
            end,
            records_crc,
            body_crc: 0,
        };
        py.detach(|| self.read().write_segment(&path, meta))?;
        Ok(())
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
        let scope = scope(agent, &projects, &channels, &sources, since, until)?;
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
                r.meta.agent,
                r.meta.project,
                r.meta.channel,
                r.meta.source,
                r.meta.key,
                r.meta.time,
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
#[pyfunction]
fn fts_fold(text: &str) -> String {
    fts::fold::fold_text(text).0
}
