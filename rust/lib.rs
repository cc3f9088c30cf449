//! The core of cpersona: memory-mapped vector scans, top-k selection, rank fusion, the
//! full-text index and the e5 tokenizer.
//!
//! The pure modules hold all the logic and never import pyo3, so `cargo test` runs without
//! Python: `error` (the one error type), `store` (the mmap'd index file), `scan` (dot kernels and
//! the scans), `topk` (bounded selection under the total order), `fusion` (rrf, rsf), `fts`
//! (the full-text index: FTS5's trigram matching and bm25 over owned postings), `unigram`
//! (the e5 model's tokenizer) and `layout` (the terms the file-layout tables of `store`, `scan`
//! and `fts` are declared in). `py` (one binding module per concept) is the only module that
//! knows about Python, and it is built only under the `python` feature.
//! No database is opened here and nothing knows about users: the core sees slots, row ids,
//! scope hashes, instants and scores. The full-text index reproduces `SQLite` FTS5's trigram
//! matching and bm25 exactly (the tests compare it with FTS5), from postings it owns.

pub mod error;
pub mod fts;
pub mod fusion;
pub mod layout;
pub mod scan;
pub mod store;
pub mod topk;
pub mod unigram;

#[cfg(feature = "python")]
mod py;
