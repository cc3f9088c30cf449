//! The one error type of the core. No pyo3 here: `py/mod.rs` maps it to Python exceptions.

use std::fmt;

#[derive(Debug)]
pub enum CoreError {
    /// Two arrays that must share a width do not.
    DimensionMismatch {
        expected: usize,
        got: usize,
    },
    /// An argument outside its documented domain.
    InvalidArgument(String),
    /// A vector file that cannot be trusted, with the reason.
    Corrupt(String),
    /// A full-text index (its records or a change record) that cannot be trusted.
    CorruptFullText(String),
    Io(std::io::Error),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DimensionMismatch { expected, got } => {
                write!(f, "dimension mismatch: expected {expected}, got {got}")
            }
            Self::InvalidArgument(msg) => write!(f, "{msg}"),
            Self::Corrupt(msg) => write!(f, "corrupt vector file: {msg}"),
            Self::CorruptFullText(msg) => write!(f, "corrupt full-text index: {msg}"),
            Self::Io(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for CoreError {}

impl From<std::io::Error> for CoreError {
    fn from(err: std::io::Error) -> Self {
        Self::Io(err)
    }
}
