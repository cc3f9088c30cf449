//! The numeric core of cpersona: memory-mapped vector scans, top-k selection and rank fusion.
//!
//! The pure modules hold all the logic and never import pyo3, so `cargo test` runs without
//! Python: `error` (the one error type), `store` (the mmap'd index file), `scan` (dot kernels and
//! the scans), `topk` (bounded selection under the total order), `fusion` (rrf, rsf), `fts`
//! (the full-text index: FTS5's trigram matching and bm25 over owned postings) and `unigram`
//! (the e5 model's tokenizer). `py` is the only module that knows about Python, and it is built
//! only under the `python` feature.
//! Nothing here knows about `SQLite`, memory ids or users: it sees slots, scope hashes and scores.

pub mod error;
pub mod fts;
pub mod fusion;
pub mod scan;
pub mod store;
pub mod topk;
pub mod unigram;

#[cfg(feature = "python")]
mod py;
