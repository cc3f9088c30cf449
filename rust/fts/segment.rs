//! The postings segment: an immutable file holding a full-text index's rows, trigram postings
//! and folded texts in the layout the search reads in place (docs/fts-index.md, "Segment").
//!
//! It is built from the change records (at rebuild and when the rows appended since outgrow a
//! bound), written to a temporary and renamed, then memory-mapped by every process of the host:
//! its pages are the page cache's, shared, instead of one heap copy of the postings per process.
//! Rows are in ascending id order (a row's slot is its rank), so an id is found by binary search
//! and a posting list, being ascending by slot, is ascending by id as well.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use memmap2::Mmap;

use crate::error::CoreError;
use crate::layout::{Elem, Field};

/// Where a row belongs and when: the fields of a row besides its id and texts, as the change
/// records, the heap slots, the segment and `verify` all carry them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowMeta {
    pub agent: u64,
    pub project: u64,
    pub channel: u64,
    pub source: u64,
    /// `created_at` as Unix seconds (kept for the scope-ordered keyword reads).
    pub key: i64,
    /// The row's instant in microseconds since the Unix epoch, `NO_TIME` when it has none
    /// (docs/fts-index.md): what a time-scoped search admits.
    pub time: i64,
}

pub const MAGIC: &[u8; 8] = b"CPFTSSG1";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 128;
/// Every section starts at a multiple of this (so each is aligned for its element type).
pub const SECTION_ALIGN: usize = 8;

/// The header's fields (little-endian). `generation` and `end` name the records file state the
/// segment holds (its generation, and the offset where the records it was built from end);
/// `records_crc` is the CRC-32 of those records (so a reader extends it over the records after
/// `end` and checks the sidecar), `body_crc` the CRC-32 of everything after the header.
pub const HEADER: [Field; 15] = [
    Field::new("magic", 0, Elem::Text(8)),
    Field::new("version", 8, Elem::U32),
    Field::new("table", 12, Elem::U32),
    Field::new("generation", 16, Elem::U32),
    Field::new("body_crc", 20, Elem::U32),
    Field::new("end", 24, Elem::U64),
    Field::new("records_crc", 32, Elem::U32),
    Field::new("reserved0", 36, Elem::Raw(4)),
    Field::new("rows", 40, Elem::U64),
    Field::new("terms", 48, Elem::U64),
    Field::new("postings", 56, Elem::U64),
    Field::new("columns", 64, Elem::U64),
    Field::new("text_bytes", 72, Elem::U64),
    Field::new("total_tokens", 80, Elem::U64),
    Field::new("reserved", 88, Elem::Raw(40)),
];

/// What sizes a section: its entries are one of the header's counts (plus one for offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Rows,
    RowsPlusOne,
    ColumnsPlusOne,
    TextBytes,
    Terms,
    TermsPlusOne,
    Postings,
}

/// The sections after the header, in file order, each padded to `SECTION_ALIGN`.
pub const SECTIONS: [(&str, Elem, Count); 15] = [
    ("ids", Elem::I64, Count::Rows),
    ("agents", Elem::U64, Count::Rows),
    ("projects", Elem::U64, Count::Rows),
    ("channels", Elem::U64, Count::Rows),
    ("sources", Elem::U64, Count::Rows),
    ("keys", Elem::I64, Count::Rows),
    ("times", Elem::I64, Count::Rows),
    ("sizes", Elem::U64, Count::Rows),
    // A row's columns are `column_start[slot]..column_start[slot + 1]`; a column's folded text
    // is `text[column_offset[c]..column_offset[c + 1]]`.
    ("column_start", Elem::U64, Count::RowsPlusOne),
    ("column_offset", Elem::U64, Count::ColumnsPlusOne),
    ("text", Elem::U8, Count::TextBytes),
    // Trigram keys ascending; key `t`'s postings are `posting_start[t]..posting_start[t + 1]`.
    ("term_keys", Elem::U64, Count::Terms),
    ("posting_start", Elem::U64, Count::TermsPlusOne),
    ("posting_slots", Elem::U32, Count::Postings),
    ("posting_counts", Elem::U8, Count::Postings),
];

const S_IDS: usize = 0;
const S_AGENTS: usize = 1;
const S_PROJECTS: usize = 2;
const S_CHANNELS: usize = 3;
const S_SOURCES: usize = 4;
const S_KEYS: usize = 5;
const S_TIMES: usize = 6;
const S_SIZES: usize = 7;
const S_COLUMN_START: usize = 8;
const S_COLUMN_OFFSET: usize = 9;
const S_TEXT: usize = 10;
const S_TERM_KEYS: usize = 11;
const S_POSTING_START: usize = 12;
const S_POSTING_SLOTS: usize = 13;
const S_POSTING_COUNTS: usize = 14;

/// The header counts that size the sections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub rows: usize,
    pub terms: usize,
    pub postings: usize,
    pub columns: usize,
    pub text_bytes: usize,
}

impl Counts {
    fn of(self, count: Count) -> usize {
        match count {
            Count::Rows => self.rows,
            Count::RowsPlusOne => self.rows + 1,
            Count::ColumnsPlusOne => self.columns + 1,
            Count::TextBytes => self.text_bytes,
            Count::Terms => self.terms,
            Count::TermsPlusOne => self.terms + 1,
            Count::Postings => self.postings,
        }
    }

    /// Each section's offset, and the file's length.
    fn offsets(self) -> ([usize; SECTIONS.len()], usize) {
        let mut out = [0usize; SECTIONS.len()];
        let mut at = HEADER_LEN;
        for (i, &(_, elem, count)) in SECTIONS.iter().enumerate() {
            out[i] = at;
            at += (elem.size() * self.of(count)).next_multiple_of(SECTION_ALIGN);
        }
        (out, at)
    }
}

/// What the header says about the records the segment was built from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub table: u32,
    pub generation: u32,
    pub end: u64,
    pub records_crc: u32,
    pub body_crc: u32,
}

/// A validated, read-only mapping of one segment file.
pub struct Segment {
    map: Mmap,
    pub meta: Meta,
    pub counts: Counts,
    pub total_tokens: u64,
    offsets: [usize; SECTIONS.len()],
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("meta", &self.meta)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Segment {
    /// Opens and validates `path`: magic, version, exact length, offsets that stay inside
    /// their sections, ids and term keys strictly ascending. (The body's CRC is checked by the
    /// caller, `fts/segment.py`, with zlib over the same mapping's pages.)
    ///
    /// # Errors
    /// `Io` when the file cannot be opened or mapped; `CorruptFullText` when a check fails.
    pub fn open(path: &Path) -> Result<Self, CoreError> {
        let file = File::open(path)?;
        // SAFETY: the mapping is read-only and the file is never written after it is renamed
        // into place (a new segment replaces it by rename, so the mapped inode stays intact).
        // Every offset read from it is validated below before it is used as an index.
        let map = unsafe { Mmap::map(&file)? };
        Self::from_map(map)
    }

    fn from_map(map: Mmap) -> Result<Self, CoreError> {
        let bytes: &[u8] = &map;
        if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
            return Err(corrupt("not a full-text segment (length or magic)"));
        }
        if read_u32(bytes, 8) != VERSION {
            return Err(corrupt("unsupported segment version"));
        }
        let meta = Meta {
            table: read_u32(bytes, 12),
            generation: read_u32(bytes, 16),
            body_crc: read_u32(bytes, 20),
            end: read_u64(bytes, 24),
            records_crc: read_u32(bytes, 32),
        };
        let count = |offset| usize::try_from(read_u64(bytes, offset)).unwrap_or(usize::MAX / 16);
        let counts = Counts {
            rows: count(40),
            terms: count(48),
            postings: count(56),
            columns: count(64),
            text_bytes: count(72),
        };
        if [
            counts.rows,
            counts.terms,
            counts.postings,
            counts.columns,
            counts.text_bytes,
        ]
        .iter()
        .any(|&c| c > (1 << 40))
        {
            return Err(corrupt("a segment count is out of range"));
        }
        let (offsets, len) = counts.offsets();
        if len != bytes.len() {
            return Err(corrupt("the segment's length disagrees with its counts"));
        }
        let seg = Self {
            total_tokens: read_u64(bytes, 80),
            map,
            meta,
            counts,
            offsets,
        };
        seg.validate()?;
        Ok(seg)
    }

    fn validate(&self) -> Result<(), CoreError> {
        let ascending = |s: &[u64], last: usize| {
            s.first() == Some(&0)
                && s.windows(2).all(|w| w[0] <= w[1])
                && s.last() == Some(&(last as u64))
        };
        if !ascending(self.column_start(), self.counts.columns)
            || !ascending(self.column_offset(), self.counts.text_bytes)
            || !ascending(self.posting_start(), self.counts.postings)
        {
            return Err(corrupt("segment offsets are not ascending within bounds"));
        }
        if !self.ids().windows(2).all(|w| w[0] < w[1])
            || !self.term_keys().windows(2).all(|w| w[0] < w[1])
        {
            return Err(corrupt("segment ids or terms are not strictly ascending"));
        }
        Ok(())
    }

    #[must_use]
    pub fn rows(&self) -> usize {
        self.counts.rows
    }

    fn section<T: Plain>(&self, i: usize) -> &[T] {
        let (_, elem, count) = SECTIONS[i];
        debug_assert_eq!(elem.size(), std::mem::size_of::<T>());
        let len = self.counts.of(count);
        let offset = self.offsets[i];
        let bytes = &self.map[offset..offset + len * std::mem::size_of::<T>()];
        debug_assert_eq!(bytes.as_ptr() as usize % std::mem::align_of::<T>(), 0);
        // SAFETY: `bytes` lies inside the mapping (bounds-checked above), starts at a multiple
        // of 8 of a page-aligned mapping, so is aligned for `T`; `T` is a plain integer for
        // which every bit pattern is valid; the host is little-endian like the file (checked
        // at compile time in `store`); the borrow ties the slice to `self.map`.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), len) }
    }

    #[must_use]
    pub fn ids(&self) -> &[i64] {
        self.section(S_IDS)
    }
    #[must_use]
    pub fn agents(&self) -> &[u64] {
        self.section(S_AGENTS)
    }
    #[must_use]
    pub fn projects(&self) -> &[u64] {
        self.section(S_PROJECTS)
    }
    #[must_use]
    pub fn channels(&self) -> &[u64] {
        self.section(S_CHANNELS)
    }
    #[must_use]
    pub fn sources(&self) -> &[u64] {
        self.section(S_SOURCES)
    }
    #[must_use]
    pub fn keys(&self) -> &[i64] {
        self.section(S_KEYS)
    }
    #[must_use]
    pub fn times(&self) -> &[i64] {
        self.section(S_TIMES)
    }
    #[must_use]
    pub fn sizes(&self) -> &[u64] {
        self.section(S_SIZES)
    }
    fn column_start(&self) -> &[u64] {
        self.section(S_COLUMN_START)
    }
    fn column_offset(&self) -> &[u64] {
        self.section(S_COLUMN_OFFSET)
    }
    fn term_keys(&self) -> &[u64] {
        self.section(S_TERM_KEYS)
    }
    fn posting_start(&self) -> &[u64] {
        self.section(S_POSTING_START)
    }

    /// Where a row belongs and when.
    #[must_use]
    pub fn meta(&self, slot: usize) -> RowMeta {
        RowMeta {
            agent: self.agents()[slot],
            project: self.projects()[slot],
            channel: self.channels()[slot],
            source: self.sources()[slot],
            key: self.keys()[slot],
            time: self.times()[slot],
        }
    }

    /// A hint that row `slot`'s texts are read soon (`FtsIndex::verify`): at `stage` 0 its
    /// column range is requested from memory, at 1 its first column's offset (reading the
    /// range, requested earlier), at 2 its text and size. Results never depend on it.
    pub fn prefetch(&self, slot: usize, stage: usize) {
        let start = self.column_start();
        match stage {
            0 => prefetch(start.get(slot)),
            1 => prefetch(
                start
                    .get(slot)
                    .and_then(|&c| self.column_offset().get(c as usize)),
            ),
            _ => {
                let text: &[u8] = self.section(S_TEXT);
                let offset = self.column_offset();
                let (Some(&c0), Some(&c1)) = (start.get(slot), start.get(slot + 1)) else {
                    return;
                };
                let (Some(&from), Some(&to)) = (offset.get(c0 as usize), offset.get(c1 as usize))
                else {
                    return;
                };
                // The row's texts, up to four cache lines (most rows are one or two).
                for at in (from..to).step_by(64).take(4) {
                    prefetch(text.get(at as usize));
                }
                prefetch(self.sizes().get(slot));
            }
        }
    }

    /// The folded texts of a row's columns, as UTF-8 bytes.
    pub fn columns(&self, slot: usize) -> impl Iterator<Item = &[u8]> {
        let start = self.column_start();
        let offset = self.column_offset();
        let text: &[u8] = self.section(S_TEXT);
        (start[slot] as usize..start[slot + 1] as usize)
            .map(move |c| &text[offset[c] as usize..offset[c + 1] as usize])
    }

    /// The slot of row `id`, if the segment holds it.
    #[must_use]
    pub fn slot_of(&self, id: i64) -> Option<usize> {
        self.ids().binary_search(&id).ok()
    }

    /// A trigram's posting list: slots ascending and the window count in each.
    #[must_use]
    pub fn postings(&self, key: u64) -> Option<(&[u32], &[u8])> {
        let t = self.term_keys().binary_search(&key).ok()?;
        let start = self.posting_start();
        let range = start[t] as usize..start[t + 1] as usize;
        let slots: &[u32] = self.section(S_POSTING_SLOTS);
        let counts: &[u8] = self.section(S_POSTING_COUNTS);
        Some((&slots[range.clone()], &counts[range]))
    }
}

/// One row handed to `write`, in ascending id order.
pub struct RowIn<'a> {
    pub id: i64,
    pub meta: RowMeta,
    pub size: u64,
    pub columns: Vec<&'a [u8]>,
}

/// Write a segment of `rows` (ascending by id, the live rows of an index) to `path` with
/// `body_crc` = 0 (the caller fills it in after, then renames the file into place).
///
/// # Errors
/// `Io` when the file cannot be written.
///
/// # Panics
/// With 2^32 rows or more (slots are u32, as in the heap index).
pub fn write(path: &Path, meta: Meta, rows: &[RowIn<'_>]) -> Result<(), CoreError> {
    let mut postings: std::collections::HashMap<u64, (Vec<u32>, Vec<u8>)> =
        std::collections::HashMap::new();
    let mut counts = Counts {
        rows: rows.len(),
        ..Counts::default()
    };
    let mut total_tokens = 0u64;
    let mut keys: Vec<u64> = Vec::new();
    for (slot, row) in rows.iter().enumerate() {
        let slot = u32::try_from(slot).expect("fewer than 2^32 rows");
        keys.clear();
        for col in &row.columns {
            // The texts were folded and validated as UTF-8 when the index took them.
            keys.extend(super::fold::trigrams(
                std::str::from_utf8(col).unwrap_or(""),
            ));
            counts.columns += 1;
            counts.text_bytes += col.len();
        }
        total_tokens += row.size;
        keys.sort_unstable();
        for run in keys.chunk_by(|a, b| a == b) {
            let list = postings.entry(run[0]).or_default();
            list.0.push(slot);
            list.1.push(u8::try_from(run.len()).unwrap_or(u8::MAX));
        }
    }
    let mut terms: Vec<u64> = postings.keys().copied().collect();
    terms.sort_unstable();
    counts.terms = terms.len();
    counts.postings = postings.values().map(|l| l.0.len()).sum();

    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let header = header_bytes(meta, counts, total_tokens);
    out.write_all(&header)?;
    let mut written = HEADER_LEN;
    let mut section = |out: &mut BufWriter<File>, bytes: &mut dyn Iterator<Item = u8>| {
        let mut n = 0usize;
        for b in bytes {
            out.write_all(&[b])?;
            n += 1;
        }
        let pad = n.next_multiple_of(SECTION_ALIGN) - n;
        out.write_all(&[0u8; SECTION_ALIGN][..pad])?;
        written += n + pad;
        Ok::<(), std::io::Error>(())
    };
    let le64 = |v: u64| v.to_le_bytes();
    section(&mut out, &mut rows.iter().flat_map(|r| le64(r.id as u64)))?;
    section(&mut out, &mut rows.iter().flat_map(|r| le64(r.meta.agent)))?;
    section(
        &mut out,
        &mut rows.iter().flat_map(|r| le64(r.meta.project)),
    )?;
    section(
        &mut out,
        &mut rows.iter().flat_map(|r| le64(r.meta.channel)),
    )?;
    section(&mut out, &mut rows.iter().flat_map(|r| le64(r.meta.source)))?;
    section(
        &mut out,
        &mut rows.iter().flat_map(|r| le64(r.meta.key as u64)),
    )?;
    section(
        &mut out,
        &mut rows.iter().flat_map(|r| le64(r.meta.time as u64)),
    )?;
    section(&mut out, &mut rows.iter().flat_map(|r| le64(r.size)))?;
    let column_start = std::iter::once(0u64).chain(rows.iter().scan(0u64, |n, r| {
        *n += r.columns.len() as u64;
        Some(*n)
    }));
    section(&mut out, &mut column_start.flat_map(le64))?;
    let all_columns = || rows.iter().flat_map(|r| r.columns.iter());
    let column_offset = std::iter::once(0u64).chain(all_columns().scan(0u64, |n, c| {
        *n += c.len() as u64;
        Some(*n)
    }));
    section(&mut out, &mut column_offset.flat_map(le64))?;
    section(&mut out, &mut all_columns().flat_map(|c| c.iter().copied()))?;
    section(&mut out, &mut terms.iter().flat_map(|&k| le64(k)))?;
    let posting_start = std::iter::once(0u64).chain(terms.iter().scan(0u64, |n, k| {
        *n += postings[k].0.len() as u64;
        Some(*n)
    }));
    section(&mut out, &mut posting_start.flat_map(le64))?;
    section(
        &mut out,
        &mut terms
            .iter()
            .flat_map(|k| postings[k].0.iter().flat_map(|s| s.to_le_bytes())),
    )?;
    section(
        &mut out,
        &mut terms.iter().flat_map(|k| postings[k].1.iter().copied()),
    )?;
    out.flush()?;
    debug_assert_eq!(written, counts.offsets().1);
    out.into_inner()
        .map_err(std::io::IntoInnerError::into_error)?
        .sync_all()?;
    Ok(())
}

/// The header of a segment of `counts` (with `body_crc` 0).
fn header_bytes(meta: Meta, counts: Counts, total_tokens: u64) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(MAGIC);
    let mut put =
        |offset: usize, raw: &[u8]| header[offset..offset + raw.len()].copy_from_slice(raw);
    put(8, &VERSION.to_le_bytes());
    put(12, &meta.table.to_le_bytes());
    put(16, &meta.generation.to_le_bytes());
    put(24, &meta.end.to_le_bytes());
    put(32, &meta.records_crc.to_le_bytes());
    put(40, &(counts.rows as u64).to_le_bytes());
    put(48, &(counts.terms as u64).to_le_bytes());
    put(56, &(counts.postings as u64).to_le_bytes());
    put(64, &(counts.columns as u64).to_le_bytes());
    put(72, &(counts.text_bytes as u64).to_le_bytes());
    put(80, &total_tokens.to_le_bytes());
    header
}

fn corrupt(msg: &str) -> CoreError {
    CoreError::CorruptFullText(msg.to_owned())
}

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Ask the CPU to start loading the cache line of `at` (a hint: it reads nothing the program
/// sees and never faults).
#[inline]
pub(super) fn prefetch<T>(at: Option<&T>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(at) = at {
        // SAFETY: `_mm_prefetch` only hints the cache; `at` is a valid reference anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                std::ptr::from_ref(at).cast::<i8>(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Element types that may be viewed in place in the mapping: every bit pattern is a valid value.
trait Plain: Copy {}
impl Plain for u8 {}
impl Plain for u32 {}
impl Plain for u64 {}
impl Plain for i64 {}
