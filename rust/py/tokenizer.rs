//! The e5 model's tokenizer: SentencePiece unigram over the model's own tables (`unigram`).

use numpy::PyReadonlyArrayDyn;
use pyo3::prelude::*;

use super::args::vector;
use crate::unigram;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Unigram>()
}

/// A SentencePiece unigram tokenizer over a model's own tables (rust/unigram.rs).
#[pyclass(frozen, module = "cpersona._core")]
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
