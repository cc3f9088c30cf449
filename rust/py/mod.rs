//! The Python bindings, `cpersona._core`: the only modules that import pyo3 and numpy.
//!
//! One module per concept, each binding the pure module of the same concept: `kernels` (the
//! dot scan and top-k selection, `scan` and `topk`), `fusion` (rrf, rsf), `vectors` (the
//! vector index file and its scoped scan, `store` and `scan`), `fulltext` (the full-text index,
//! `fts`), `tokenizer` (the e5 tokenizer, `unigram`) and `layout` (the file-layout tables, for
//! the test that holds the Python declarations to them); `args` holds the argument checks they
//! share. One naming convention: a Rust item is named as Python sees it (no `name = ...`), and
//! the pure item it wraps is reached by its module path (`fts::FtsIndex` inside
//! `fulltext::FtsIndex`); each binding module adds its items in a `register` function.
//!
//! Each function checks its arguments, converts types and calls a pure function. Arrays must
//! already have the right dtype (`TypeError` otherwise) and be one- or two-dimensional and
//! C-contiguous as documented (`ValueError` otherwise); nothing is copied behind the caller's
//! back. Work on caller-owned numpy buffers keeps the GIL, because another Python thread could
//! write to them; the index scan copies its small inputs first and releases the GIL while it
//! reads the mapping, which Rust owns. `python/cpersona/_fallback/` is the numpy twin of
//! everything here: same names, signatures, defaults, dtypes and exceptions, except `FtsIndex`
//! and `fts_fold`, whose fallback is the FTS5 statement they reproduce.

// Doc comments here are Python docstrings, written for Python readers, not rustdoc; and pyo3
// hands extracted arguments over by value.
#![allow(clippy::doc_markdown, clippy::needless_pass_by_value)]

mod args;
mod fulltext;
mod fusion;
mod kernels;
mod layout;
mod tokenizer;
mod vectors;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::error::CoreError;
use crate::scan::{self, DEFAULT_CHUNK_ROWS};

pyo3::import_exception!(cpersona.errors, StoreCorrupt);

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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEBUG_BUILD", cfg!(debug_assertions))?;
    m.add("KERNEL", scan::kernel().name)?;
    m.add("DEFAULT_CHUNK_ROWS", DEFAULT_CHUNK_ROWS)?;
    kernels::register(m)?;
    fusion::register(m)?;
    vectors::register(m)?;
    fulltext::register(m)?;
    tokenizer::register(m)?;
    layout::register(m)?;
    Ok(())
}
