//! The full-text index: FTS5's trigram matching and bm25, reproduced over postings the crate
//! owns (docs/fts-index.md). Python feeds it change records read from `SQLite`; it answers the
//! top rows of a scope for a list of query phrases.

pub mod fold;
mod fold_table;
pub mod index;
pub mod segment;

pub use index::{parse_records, Doc, FtsIndex, Record};
