//! The numeric core of cpersona.
//!
//! Pure modules (no pyo3) hold the logic and are checked by `cargo test` without Python;
//! `py` is the only module that knows about Python, and only under the `python` feature.

pub mod error;
pub mod scan;

#[cfg(feature = "python")]
mod py;
