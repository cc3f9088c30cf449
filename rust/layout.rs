//! The vocabulary of the file-layout declarations: `Elem`, the type of one header field,
//! section entry or record field, and `Field`, a header field at its offset.
//!
//! Each file's layout is declared once per language, as tables in these terms: the vector
//! file's in `store` (`HEADER`, `SECTIONS`), its content checksum's in `scan` (`CHECKSUMMED`)
//! and the full-text change records' in `fts::index` (`PUT_FIELDS`, `DELETE_FIELDS`). The
//! readers here are written against those tables, and the bindings export them (`_core.layout()`)
//! so that a test holds the Python declarations (`vectors/format.py`, `vectors/checksums.py`,
//! `fts/format.py`), from which the writers and the numpy fallback work, equal to them.

/// The element type of a field, little-endian where it has an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    U8,
    U32,
    U64,
    I64,
    F32,
    /// `n` bytes of ASCII text (a magic).
    Text(usize),
    /// `n` opaque bytes (an identity, a reserved run).
    Raw(usize),
}

impl Elem {
    /// Its width in bytes.
    #[must_use]
    pub const fn size(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::U32 | Self::F32 => 4,
            Self::U64 | Self::I64 => 8,
            Self::Text(n) | Self::Raw(n) => n,
        }
    }

    /// numpy's name for it (`np.dtype(...).str`), the vocabulary of the Python declarations.
    #[must_use]
    pub fn numpy(self) -> String {
        match self {
            Self::U8 => "|u1".into(),
            Self::U32 => "<u4".into(),
            Self::U64 => "<u8".into(),
            Self::I64 => "<i8".into(),
            Self::F32 => "<f4".into(),
            Self::Text(n) => format!("|S{n}"),
            Self::Raw(n) => format!("|V{n}"),
        }
    }
}

/// A fixed-offset field of a file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub offset: usize,
    pub elem: Elem,
}

impl Field {
    #[must_use]
    pub const fn new(name: &'static str, offset: usize, elem: Elem) -> Self {
        Self { name, offset, elem }
    }
}

/// Whether `fields` tile `[0, len)`: each starts where the one before it ends.
#[must_use]
pub fn tiles(fields: &[Field], len: usize) -> bool {
    let mut end = 0;
    for field in fields {
        if field.offset != end {
            return false;
        }
        end += field.elem.size();
    }
    end == len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_names_carry_the_width() {
        for elem in [Elem::U8, Elem::U32, Elem::U64, Elem::I64, Elem::F32] {
            let digits: String = elem.numpy().chars().filter(char::is_ascii_digit).collect();
            assert_eq!(digits.parse::<usize>().unwrap(), elem.size(), "{elem:?}");
        }
        assert_eq!(Elem::Text(8).numpy(), "|S8");
        assert_eq!(Elem::Raw(16).size(), 16);
    }

    #[test]
    fn tiles_finds_gaps_and_overlaps() {
        let a = Field::new("a", 0, Elem::U32);
        assert!(tiles(&[a, Field::new("b", 4, Elem::U64)], 12));
        assert!(!tiles(&[a, Field::new("b", 8, Elem::U64)], 16));
        assert!(!tiles(&[a, Field::new("b", 2, Elem::U64)], 10));
        assert!(!tiles(&[a], 8));
    }
}
