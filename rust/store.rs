//! The memory-mapped vector index file: open, validate, and hand out typed views.
//!
//! The layout is written down in `docs/vector-index.md`, and declared here as the tables
//! `HEADER` and `SECTIONS` that this reader is written against; the writer and the numpy reader
//! work from `python/cpersona/vectors/format.py`, whose declaration a test holds equal to these
//! tables (`_core.layout()`, `tests/kernels/test_kernels_layout.py`). In short (all little-endian): a 128-byte header
//! (magic `CPVECIX1`, version, dim, count, capacity, `applied_seq`, `db_uid`, table, dirty, live),
//! then the sections `ids` i64, `keys` i64, `times` i64, `agent`/`project`/`channel`/`source` u64,
//! `flags` u8,
//! `order` u32 and `vectors` f32 × dim, each sized by `capacity` and starting at a 64-byte-aligned
//! offset. The file size is exactly `vectors_offset + capacity * dim * 4`.
//!
//! This module only reads. It knows nothing about scopes or scores (that is `scan`), and nothing
//! about `SQLite` or locks: the caller holds the shared lock of the sync protocol while it scans.
//! `dim`, `capacity`, `table` and `db_uid` never change for one file (growth writes a new file and
//! renames it), so they are read once; `count`, `live`, `applied_seq` and `dirty` are re-read
//! from the mapping on every call, because the sync appends slots in place.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::error::CoreError;
use crate::layout::{Elem, Field};

#[cfg(not(target_endian = "little"))]
compile_error!(
    "the vector file is little-endian and is read in place; big-endian hosts are unsupported"
);

pub const MAGIC: &[u8; 8] = b"CPVECIX1";
/// 2: the `times` section (each row's instant, for time-scoped recall) after `keys`.
pub const VERSION: u32 = 2;
/// A `times` entry of a row with no readable instant: inside no bounded range.
pub const NO_TIME: i64 = i64::MIN;
pub const HEADER_LEN: usize = 128;
/// Every section starts at a multiple of this, so typed views of the mapping are aligned.
pub const SECTION_ALIGN: usize = 64;

/// Flag bit 0: the slot's row was deleted; it takes no scan position.
pub const FLAG_DELETED: u8 = 1;
/// Flag bit 1: the row's embedding is not `dim` floats; it takes a position but is never scored.
pub const FLAG_FOREIGN: u8 = 2;

const OFF_VERSION: usize = 8;
const OFF_DIM: usize = 12;
const OFF_COUNT: usize = 16;
const OFF_CAPACITY: usize = 24;
const OFF_APPLIED_SEQ: usize = 32;
const OFF_DB_UID: usize = 40;
const OFF_TABLE: usize = 56;
const OFF_DIRTY: usize = 60;
const OFF_LIVE: usize = 64;
const OFF_RESERVED: usize = 72;

/// The header, field by field: it tiles `HEADER_LEN` (the reserved run is zero).
pub const HEADER: [Field; 11] = [
    Field::new("magic", 0, Elem::Text(8)),
    Field::new("version", OFF_VERSION, Elem::U32),
    Field::new("dim", OFF_DIM, Elem::U32),
    Field::new("count", OFF_COUNT, Elem::U64),
    Field::new("capacity", OFF_CAPACITY, Elem::U64),
    Field::new("applied_seq", OFF_APPLIED_SEQ, Elem::I64),
    Field::new("db_uid", OFF_DB_UID, Elem::Raw(16)),
    Field::new("table", OFF_TABLE, Elem::U32),
    Field::new("dirty", OFF_DIRTY, Elem::U32),
    Field::new("live", OFF_LIVE, Elem::U64),
    Field::new(
        "reserved",
        OFF_RESERVED,
        Elem::Raw(HEADER_LEN - OFF_RESERVED),
    ),
];

/// Declares the sections once, in file order, as `name: element` (`* dim`: `dim` elements a
/// slot), and from that list `SECTIONS`, the `Layout` of their offsets and `Store`'s typed
/// view of each, so that the four cannot disagree on a name, an order or a type.
macro_rules! sections {
    ($($(#[doc = $doc:literal])* $name:ident: $elem:ident $(* $per_slot:ident)?,)+) => {
        /// The sections in file order, each `capacity` entries of its element (`DIM_SECTION`'s
        /// entries are `dim` elements each), starting at the next multiple of `SECTION_ALIGN`.
        pub const SECTIONS: [(&str, Elem); [$(stringify!($name)),+].len()] =
            [$((stringify!($name), <$elem as Plain>::ELEM)),+];

        /// Byte offsets of the sections for one `(dim, capacity)`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Layout {
            $(pub $name: usize,)+
            /// The exact file size.
            pub file_len: usize,
        }

        impl Layout {
            /// The section offsets in `SECTIONS` order.
            #[must_use]
            pub const fn offsets(&self) -> [usize; SECTIONS.len()] {
                [$(self.$name),+]
            }

            const fn from_offsets(
                [$($name),+]: [usize; SECTIONS.len()],
                file_len: usize,
            ) -> Self {
                Self { $($name,)+ file_len }
            }
        }

        impl Store {
            $(
                $(#[doc = $doc])*
                #[must_use]
                pub fn $name(&self) -> &[$elem] {
                    self.section(self.layout.$name, self.capacity $(* self.$per_slot)?)
                }
            )+
        }
    };
}

sections! {
    ids: i64,
    keys: i64,
    /// Each row's instant in microseconds since the Unix epoch (UTC), `NO_TIME` when none.
    times: i64,
    agent: u64,
    project: u64,
    channel: u64,
    source: u64,
    flags: u8,
    order: u32,
    /// All vectors, row-major, `capacity * dim` floats.
    vectors: f32 * dim,
}

/// The section that holds `dim` elements per slot.
pub const DIM_SECTION: &str = "vectors";

impl Layout {
    /// Computes the section offsets; `None` when they do not fit in `usize`.
    #[must_use]
    pub fn new(dim: u64, capacity: u64) -> Option<Self> {
        let dim = usize::try_from(dim).ok()?;
        let capacity = usize::try_from(capacity).ok()?;
        let mut end = HEADER_LEN;
        let mut offsets = [0usize; SECTIONS.len()];
        for (offset, &(name, elem)) in offsets.iter_mut().zip(&SECTIONS) {
            let per_slot = if name == DIM_SECTION {
                dim.checked_mul(elem.size())?
            } else {
                elem.size()
            };
            let start = end.checked_next_multiple_of(SECTION_ALIGN)?;
            end = start.checked_add(capacity.checked_mul(per_slot)?)?;
            *offset = start;
        }
        Some(Self::from_offsets(offsets, end))
    }
}

/// The header fields that change while a file is in use, read at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    pub count: u64,
    pub live: u64,
    pub applied_seq: i64,
    pub dirty: u32,
}

/// A validated, read-only mapping of one vector index file.
#[derive(Debug)]
pub struct Store {
    map: Mmap,
    dim: usize,
    capacity: usize,
    table: u32,
    db_uid: [u8; 16],
    layout: Layout,
}

impl Store {
    /// Opens and validates `path`.
    ///
    /// # Errors
    /// `Io` when the file cannot be opened or mapped; `Corrupt` with the reason when it fails any
    /// check of `docs/vector-index.md` (magic, version, `dim >= 1`, `count <= capacity`, exact
    /// size, `order[0..count]` in range).
    pub fn open(path: &Path) -> Result<Self, CoreError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        if len < HEADER_LEN as u64 {
            return Err(corrupt(format!(
                "file is {len} bytes, shorter than the {HEADER_LEN}-byte header"
            )));
        }
        // SAFETY: the mapping is read-only. The file may be changed by a writer in another
        // process, but only under the exclusive lock of the sync protocol, while every scan runs
        // under the shared lock; growth replaces the file by rename and never truncates it, so the
        // mapped pages stay valid for the life of `map`. Every value read from it is validated
        // before it is used as an index.
        let map = unsafe { Mmap::map(&file)? };
        Self::from_map(map)
    }

    fn from_map(map: Mmap) -> Result<Self, CoreError> {
        let bytes: &[u8] = &map;
        if bytes.len() < HEADER_LEN {
            return Err(corrupt(format!(
                "file is {} bytes, shorter than the header",
                bytes.len()
            )));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("wrong magic".to_string()));
        }
        let version = read_u32(bytes, OFF_VERSION);
        if version != VERSION {
            return Err(corrupt(format!("unsupported version {version}")));
        }
        let dim = read_u32(bytes, OFF_DIM);
        if dim == 0 {
            return Err(corrupt("dim is 0".to_string()));
        }
        let count = read_u64(bytes, OFF_COUNT);
        let capacity = read_u64(bytes, OFF_CAPACITY);
        if count > capacity {
            return Err(corrupt(format!(
                "count {count} exceeds capacity {capacity}"
            )));
        }
        let layout = Layout::new(u64::from(dim), capacity).ok_or_else(|| {
            corrupt(format!(
                "layout for dim {dim} and capacity {capacity} overflows"
            ))
        })?;
        if layout.file_len != bytes.len() {
            return Err(corrupt(format!(
                "file is {} bytes, the header implies {}",
                bytes.len(),
                layout.file_len
            )));
        }
        debug_assert_eq!(
            map.as_ptr() as usize % SECTION_ALIGN,
            0,
            "mappings are page-aligned"
        );
        let mut db_uid = [0u8; 16];
        db_uid.copy_from_slice(&bytes[OFF_DB_UID..OFF_DB_UID + 16]);
        let store = Self {
            dim: dim as usize,
            // Fits: `Layout::new` converted it to `usize`.
            capacity: capacity as usize,
            table: read_u32(bytes, OFF_TABLE),
            db_uid,
            layout,
            map,
        };
        store.check_order(count as usize)?;
        Ok(store)
    }

    /// Checks that `order[0..count]` only names slots in use.
    fn check_order(&self, count: usize) -> Result<(), CoreError> {
        let order = &self.order()[..count];
        match order.iter().position(|&slot| slot as usize >= count) {
            Some(i) => Err(corrupt(format!(
                "order[{i}] = {} is not below count {count}",
                order[i]
            ))),
            None => Ok(()),
        }
    }

    #[must_use]
    pub fn dim(&self) -> usize {
        self.dim
    }

    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    #[must_use]
    pub fn table(&self) -> u32 {
        self.table
    }

    #[must_use]
    pub fn db_uid(&self) -> [u8; 16] {
        self.db_uid
    }

    /// Reads the changing header fields now.
    #[must_use]
    pub fn counters(&self) -> Counters {
        Counters {
            count: self.volatile_u64(OFF_COUNT),
            live: self.volatile_u64(OFF_LIVE),
            applied_seq: self.volatile_u64(OFF_APPLIED_SEQ) as i64,
            dirty: self.volatile_u32(OFF_DIRTY),
        }
    }

    /// The slots in use right now, checked against the capacity (a writer could have left garbage).
    ///
    /// # Errors
    /// `Corrupt` when the header's count exceeds the capacity fixed at open.
    pub fn count(&self) -> Result<usize, CoreError> {
        let count = self.volatile_u64(OFF_COUNT);
        if count > self.capacity as u64 {
            return Err(corrupt(format!(
                "count {count} exceeds capacity {}",
                self.capacity
            )));
        }
        Ok(count as usize)
    }

    /// The embedding of `slot`. Panics if `slot >= capacity`; callers check against `count`.
    #[must_use]
    pub fn vector(&self, slot: usize) -> &[f32] {
        &self.vectors()[slot * self.dim..(slot + 1) * self.dim]
    }

    fn section<T: Plain>(&self, offset: usize, len: usize) -> &[T] {
        let end = offset + len * std::mem::size_of::<T>();
        let bytes = &self.map[offset..end];
        debug_assert_eq!(bytes.as_ptr() as usize % std::mem::align_of::<T>(), 0);
        // SAFETY: `bytes` lies inside the mapping (the slice above is bounds-checked), starts at a
        // 64-byte-aligned offset of a page-aligned mapping, and so is aligned for `T`; `T` is a
        // plain integer or float for which every bit pattern is valid; the host is little-endian
        // like the file (checked at compile time); the borrow ties the slice to `self.map`.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), len) }
    }

    // The offsets passed are multiples of 8 (4) in a page-aligned mapping.
    #[allow(clippy::cast_ptr_alignment)]
    fn volatile_u64(&self, offset: usize) -> u64 {
        let bytes = &self.map[offset..offset + 8];
        // SAFETY: 8 in-bounds bytes at an 8-aligned offset of a page-aligned mapping. A volatile
        // read because a writer in another process may have changed the field since the last
        // call, and the compiler must not reuse an earlier load.
        u64::from_le(unsafe { std::ptr::read_volatile(bytes.as_ptr().cast::<u64>()) })
    }

    #[allow(clippy::cast_ptr_alignment)]
    fn volatile_u32(&self, offset: usize) -> u32 {
        let bytes = &self.map[offset..offset + 4];
        // SAFETY: as in `volatile_u64`, with 4 bytes at a 4-aligned offset.
        u32::from_le(unsafe { std::ptr::read_volatile(bytes.as_ptr().cast::<u32>()) })
    }
}

/// Element types that may be viewed in place in the mapping: every bit pattern is a valid value.
trait Plain: Copy {
    /// How the layout tables name it.
    const ELEM: Elem;
}
impl Plain for u8 {
    const ELEM: Elem = Elem::U8;
}
impl Plain for u32 {
    const ELEM: Elem = Elem::U32;
}
impl Plain for u64 {
    const ELEM: Elem = Elem::U64;
}
impl Plain for i64 {
    const ELEM: Elem = Elem::I64;
}
impl Plain for f32 {
    const ELEM: Elem = Elem::F32;
}

fn corrupt(reason: String) -> CoreError {
    CoreError::Corrupt(reason)
}

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut buf = [0u8; 4];
    buf.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(buf)
}

fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut buf = [0u8; 8];
    buf.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(buf)
}

/// A minimal writer for the Rust unit tests; the real writer is `vectors/format.py`.
#[cfg(test)]
pub(crate) mod testfile {
    use super::{Layout, FLAG_FOREIGN, HEADER_LEN, MAGIC, VERSION};
    use std::path::PathBuf;

    /// One slot to write; `vector: None` writes a foreign-width slot.
    #[derive(Clone, Debug)]
    pub struct Slot {
        pub id: i64,
        pub key: i64,
        pub time: i64,
        pub scope: [u64; 4],
        pub flags: u8,
        pub vector: Option<Vec<f32>>,
    }

    /// Writes a valid file of `slots` (order by key desc, id desc) and returns its bytes.
    pub fn build(dim: usize, capacity: usize, slots: &[Slot]) -> Vec<u8> {
        let layout = Layout::new(dim as u64, capacity as u64).unwrap();
        let mut buf = vec![0u8; layout.file_len];
        buf[..8].copy_from_slice(MAGIC);
        put(&mut buf, 8, &VERSION.to_le_bytes());
        put(&mut buf, 12, &(dim as u32).to_le_bytes());
        put(&mut buf, 16, &(slots.len() as u64).to_le_bytes());
        put(&mut buf, 24, &(capacity as u64).to_le_bytes());
        let live = slots.iter().filter(|s| s.flags & 1 == 0).count() as u64;
        put(&mut buf, 64, &live.to_le_bytes());
        for (i, s) in slots.iter().enumerate() {
            put(&mut buf, layout.ids + 8 * i, &s.id.to_le_bytes());
            put(&mut buf, layout.keys + 8 * i, &s.key.to_le_bytes());
            put(&mut buf, layout.times + 8 * i, &s.time.to_le_bytes());
            for (j, off) in [layout.agent, layout.project, layout.channel, layout.source]
                .iter()
                .enumerate()
            {
                put(&mut buf, off + 8 * i, &s.scope[j].to_le_bytes());
            }
            let foreign = if s.vector.is_none() { FLAG_FOREIGN } else { 0 };
            buf[layout.flags + i] = s.flags | foreign;
            if let Some(v) = &s.vector {
                for (d, x) in v.iter().enumerate() {
                    put(
                        &mut buf,
                        layout.vectors + 4 * (i * dim + d),
                        &x.to_le_bytes(),
                    );
                }
            }
        }
        let mut order: Vec<usize> = (0..slots.len()).collect();
        order.sort_by(|&a, &b| (slots[b].key, slots[b].id).cmp(&(slots[a].key, slots[a].id)));
        for (p, slot) in order.iter().enumerate() {
            put(
                &mut buf,
                layout.order + 4 * p,
                &(*slot as u32).to_le_bytes(),
            );
        }
        assert!(HEADER_LEN <= layout.ids);
        buf
    }

    pub fn put(buf: &mut [u8], offset: usize, bytes: &[u8]) {
        buf[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// Writes `bytes` to a fresh file under the system temp dir.
    pub fn write_temp(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cpersona-core-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

#[cfg(test)]
mod tests {
    use super::testfile::{build, put, write_temp, Slot};
    use super::*;

    fn slot(id: i64, vector: Vec<f32>) -> Slot {
        Slot {
            id,
            key: id,
            time: id,
            scope: [1, 1, 1, 0],
            flags: 0,
            vector: Some(vector),
        }
    }

    fn expect_corrupt(name: &str, bytes: &[u8]) -> String {
        match Store::open(&write_temp(name, bytes)) {
            Err(CoreError::Corrupt(reason)) => reason,
            other => panic!("{name}: expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn layout_sections_are_aligned_and_ordered() {
        let layout = Layout::new(7, 3).unwrap();
        let offsets = layout.offsets();
        assert_eq!(layout.ids, HEADER_LEN);
        assert!(offsets.iter().all(|o| o % SECTION_ALIGN == 0));
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(layout.file_len, layout.vectors + 3 * 7 * 4);
        assert!(Layout::new(u64::MAX, u64::MAX).is_none());
    }

    #[test]
    fn header_fields_tile_the_header() {
        assert!(crate::layout::tiles(&HEADER, HEADER_LEN));
        assert_eq!(HEADER[0].elem.size(), MAGIC.len());
    }

    #[test]
    fn sections_are_declared_in_file_order() {
        // The declaration against docs/vector-index.md: names, order and element widths.
        let read = [
            ("ids", size_of::<i64>()),
            ("keys", size_of::<i64>()),
            ("times", size_of::<i64>()),
            ("agent", size_of::<u64>()),
            ("project", size_of::<u64>()),
            ("channel", size_of::<u64>()),
            ("source", size_of::<u64>()),
            ("flags", size_of::<u8>()),
            ("order", size_of::<u32>()),
            ("vectors", size_of::<f32>()),
        ];
        let declared = SECTIONS.map(|(name, elem)| (name, elem.size()));
        assert_eq!(declared, read);
        assert_eq!(SECTIONS[SECTIONS.len() - 1].0, DIM_SECTION);
    }

    #[test]
    fn open_reads_header_and_slots() {
        let bytes = build(
            3,
            4,
            &[slot(10, vec![1.0, 2.0, 3.0]), slot(11, vec![4.0, 5.0, 6.0])],
        );
        let store = Store::open(&write_temp("ok.vec", &bytes)).unwrap();
        assert_eq!(
            (store.dim(), store.capacity(), store.count().unwrap()),
            (3, 4, 2)
        );
        assert_eq!(store.counters().live, 2);
        assert_eq!(&store.order()[..2], &[1, 0]);
        assert_eq!(store.vector(1), &[4.0, 5.0, 6.0]);
        assert_eq!(&store.ids()[..2], &[10, 11]);
    }

    #[test]
    fn open_rejects_bad_files() {
        let good = build(2, 2, &[slot(1, vec![1.0, 0.0])]);
        assert!(expect_corrupt("short.vec", &good[..100]).contains("shorter"));
        assert!(expect_corrupt("trunc.vec", &good[..good.len() - 1]).contains("bytes"));
        let mut long = good.clone();
        long.push(0);
        assert!(expect_corrupt("long.vec", &long).contains("bytes"));
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(expect_corrupt("magic.vec", &magic).contains("magic"));
        let mut version = good.clone();
        put(&mut version, 8, &1u32.to_le_bytes());
        assert!(expect_corrupt("version.vec", &version).contains("version"));
        let mut dim0 = good.clone();
        put(&mut dim0, 12, &0u32.to_le_bytes());
        assert!(expect_corrupt("dim0.vec", &dim0).contains("dim"));
        let mut count = good.clone();
        put(&mut count, 16, &3u64.to_le_bytes());
        assert!(expect_corrupt("count.vec", &count).contains("capacity"));
        let mut order = good.clone();
        let at = Layout::new(2, 2).unwrap().order;
        put(&mut order, at, &1u32.to_le_bytes());
        assert!(expect_corrupt("order.vec", &order).contains("order"));
    }

    #[test]
    fn open_missing_file_is_io() {
        let missing = std::env::temp_dir().join("cpersona-core-no-such-file.vec");
        assert!(matches!(Store::open(&missing), Err(CoreError::Io(_))));
    }
}
