//! The file layouts the core reads, as data: `layout()` hands the tables of `store`, `scan`
//! and `fts` to Python, where a test holds the Python declarations equal to them.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::fts::index::{
    COLUMN_LENGTH, DELETE_FIELDS, OP_DELETE, OP_PUT, PUT_FIELDS, RECORD_LENGTH,
};
use crate::fts::segment as seg;
use crate::layout::Elem;
use crate::scan::CHECKSUMMED;
use crate::store::{
    DIM_SECTION, FLAG_DELETED, FLAG_FOREIGN, HEADER, HEADER_LEN, MAGIC, NO_TIME, SECTIONS,
    SECTION_ALIGN, VERSION,
};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(layout, m)?)
}

fn named(fields: &[(&'static str, Elem)]) -> Vec<(&'static str, String)> {
    fields
        .iter()
        .map(|&(name, elem)| (name, elem.numpy()))
        .collect()
}

/// layout() -> dict: the file layouts this core reads, dtypes as numpy names them.
/// "vector_file": magic, version, header_len, header [(name, offset, dtype)], section_align,
/// sections [(name, dtype)] in file order, dim_section, flag_deleted, flag_foreign, no_time,
/// checksummed (the sections a slot's content checksum covers); "fulltext_records": length
/// (a record's length prefix), op_put, op_delete, put and delete [(name, dtype)],
/// column_length (each put column's length prefix); "fulltext_segment": magic, version,
/// header_len, header [(name, offset, dtype)], section_align, sections [(name, dtype, count)].
#[pyfunction]
fn layout(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let vector_file = PyDict::new(py);
    vector_file.set_item("magic", PyBytes::new(py, MAGIC))?;
    vector_file.set_item("version", VERSION)?;
    vector_file.set_item("header_len", HEADER_LEN)?;
    let header: Vec<_> = HEADER
        .iter()
        .map(|f| (f.name, f.offset, f.elem.numpy()))
        .collect();
    vector_file.set_item("header", header)?;
    vector_file.set_item("section_align", SECTION_ALIGN)?;
    vector_file.set_item("sections", named(&SECTIONS))?;
    vector_file.set_item("dim_section", DIM_SECTION)?;
    vector_file.set_item("flag_deleted", FLAG_DELETED)?;
    vector_file.set_item("flag_foreign", FLAG_FOREIGN)?;
    vector_file.set_item("no_time", NO_TIME)?;
    vector_file.set_item("checksummed", CHECKSUMMED.to_vec())?;

    let records = PyDict::new(py);
    records.set_item("length", RECORD_LENGTH.numpy())?;
    records.set_item("op_put", OP_PUT)?;
    records.set_item("op_delete", OP_DELETE)?;
    records.set_item("put", named(&PUT_FIELDS))?;
    records.set_item("column_length", COLUMN_LENGTH.numpy())?;
    records.set_item("delete", named(&DELETE_FIELDS))?;

    let segment = PyDict::new(py);
    segment.set_item("magic", PyBytes::new(py, seg::MAGIC))?;
    segment.set_item("version", seg::VERSION)?;
    segment.set_item("header_len", seg::HEADER_LEN)?;
    let header: Vec<_> = seg::HEADER
        .iter()
        .map(|f| (f.name, f.offset, f.elem.numpy()))
        .collect();
    segment.set_item("header", header)?;
    segment.set_item("section_align", seg::SECTION_ALIGN)?;
    let sections: Vec<_> = seg::SECTIONS
        .iter()
        .map(|&(name, elem, count)| (name, elem.numpy(), format!("{count:?}")))
        .collect();
    segment.set_item("sections", sections)?;

    let out = PyDict::new(py);
    out.set_item("vector_file", vector_file)?;
    out.set_item("fulltext_records", records)?;
    out.set_item("fulltext_segment", segment)?;
    Ok(out)
}
