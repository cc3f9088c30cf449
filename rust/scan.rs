//! Score kernels and the scans built on them.
//!
//! - `dot_scalar` is the readable reference and the test oracle. `dot` is the fast kernel: the
//!   same sum split over 16 lanes folded pairwise (`dot_rows_lanes`, portable Rust), and `dot4`
//!   the same kernel over four rows per pass (four independent add chains, one query load for
//!   four rows). On x86-64 the `x86` module writes that arithmetic with AVX2 instructions,
//!   picked at run time. Every build multiplies and adds in the same order without
//!   fused multiply-add, so every machine and every path gives identical scores.
//! - `scan_chunk` scores a caller's block of rows (the no-index path, fed `SQLite` BLOB chunks)
//!   and keeps a thresholded top k.
//! - `scan_index` is the scoped window / far scan over a `Store`, as `docs/vector-index.md`
//!   "The scan" defines it.
//!
//! Every path scores a row with `dot` or `dot4` (bit for bit the same), and the top k is taken under the total order of
//! `topk`, so no result depends on chunk size or thread count. This module knows nothing of
//! `SQLite` or memory ids: it returns slot ids as the file stores them.

use std::sync::OnceLock;

use crate::error::CoreError;
use crate::store::{Store, FLAG_DELETED, FLAG_FOREIGN};
use crate::topk::{Hit, TopK};

/// Rows per work unit of a threaded index scan.
pub const DEFAULT_CHUNK_ROWS: usize = 4096;
/// Below this many rows per thread, spawning costs more than it saves (a 10,000-row window is
/// one thread). Used only when the caller asks for `threads = 0` (automatic).
pub const MIN_ROWS_PER_THREAD: usize = 32_768;

const LANES: usize = 16;
// The folds (`dot_rows_lanes`, `x86`) are written out for 16 lanes.
const _: () = assert!(LANES == 16);

/// Plain dot product, one accumulator. Kept as the oracle for the fast kernel.
#[must_use]
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        acc += x * y;
    }
    acc
}

/// The fixed summation order of the fast kernel: lane `i` sums elements `i, i+16, ...`, lanes
/// fold pairwise (16 -> 8 -> 4 -> 2 -> 1), then the tail, summed in order, is added.
// Always inlined: each `target_feature` caller must compile its own copy for its ISA.
#[allow(clippy::inline_always)]
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let [score] = dot_rows_lanes([a], b);
    score
}

/// `ROWS` dot products against one query in one pass, each summed exactly as `dot_lanes` sums it
/// (so the scores are bit for bit the single-row kernel's).
///
/// One row's 16 lanes are one or two vector registers whose adds form a single dependency chain:
/// the single-row loop waits on the add latency, not on memory. Four rows give four independent
/// chains and load each query chunk once for all four (docs/notes/performance-notes.md, "Kernels
/// at the floor").
#[allow(clippy::inline_always)]
#[inline(always)]
fn dot_rows_lanes<const ROWS: usize>(rows: [&[f32]; ROWS], query: &[f32]) -> [f32; ROWS] {
    let dim = rows.iter().fold(query.len(), |n, row| n.min(row.len()));
    let whole = dim - dim % LANES;
    let body = rows.map(|row| &row[..whole]);
    let mut acc = [[0.0f32; LANES]; ROWS];
    for (c, qc) in query[..whole].chunks_exact(LANES).enumerate() {
        let at = c * LANES;
        for r in 0..ROWS {
            let rc = &body[r][at..at + LANES];
            for i in 0..LANES {
                acc[r][i] += rc[i] * qc[i];
            }
        }
    }
    let mut out = [0.0f32; ROWS];
    for r in 0..ROWS {
        // The pairwise fold, one level per line: lane i takes lane i + width. Written as fresh
        // arrays (not in place) so the compiler keeps each level in a register.
        let lanes = acc[r];
        let h8: [f32; 8] = std::array::from_fn(|i| lanes[i] + lanes[i + 8]);
        let h4: [f32; 4] = std::array::from_fn(|i| h8[i] + h8[i + 4]);
        let h2: [f32; 2] = std::array::from_fn(|i| h4[i] + h4[i + 2]);
        let mut tail = 0.0f32;
        for (x, y) in rows[r][whole..dim].iter().zip(&query[whole..dim]) {
            tail += x * y;
        }
        out[r] = (h2[0] + h2[1]) + tail;
    }
    out
}

/// Rows scored per pass by `dot4`.
pub const BATCH: usize = 4;

fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

fn dot4_portable(rows: [&[f32]; BATCH], query: &[f32]) -> [f32; BATCH] {
    dot_rows_lanes(rows, query)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! `dot_rows_lanes` written with AVX2 instructions: the same products, the same lane sums
    //! and the same fold, so the scores are bit for bit the portable kernel's. Left to the
    //! auto-vectoriser, the four-row loop came out scalar in one build and vectorised in the
    //! next; intrinsics pin the code down. (An AVX-512 twin, one zmm per row, measured the same
    //! as this within noise on an AVX-512 Xeon, where every scan here is bound by cache or
    //! memory bandwidth, so it was left out: docs/notes/performance-notes.md.)

    use super::{BATCH, LANES};
    use std::arch::x86_64::{
        __m128, __m256, _mm256_add_ps, _mm256_castps256_ps128, _mm256_extractf128_ps,
        _mm256_loadu_ps, _mm256_mul_ps, _mm256_setzero_ps, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32,
        _mm_movehl_ps, _mm_shuffle_ps,
    };

    /// The common length of the rows and the query (each is cut to the shortest).
    fn width<const ROWS: usize>(rows: &[&[f32]; ROWS], query: &[f32]) -> usize {
        rows.iter().fold(query.len(), |n, row| n.min(row.len()))
    }

    /// Lanes 0..8 folded with lanes 8..16 already; folds 8 -> 4 -> 2 -> 1 and adds the tail.
    #[target_feature(enable = "avx2")]
    fn finish(h8: __m256, row: &[f32], query: &[f32], whole: usize, dim: usize) -> f32 {
        let h4: __m128 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps::<1>(h8));
        let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
        let h1 = _mm_add_ss(h2, _mm_shuffle_ps::<0b01>(h2, h2));
        let mut tail = 0.0f32;
        for (x, y) in row[whole..dim].iter().zip(&query[whole..dim]) {
            tail += x * y;
        }
        _mm_cvtss_f32(h1) + tail
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn dot_rows_avx2<const ROWS: usize>(
        rows: [&[f32]; ROWS],
        query: &[f32],
    ) -> [f32; ROWS] {
        let dim = width(&rows, query);
        let whole = dim - dim % LANES;
        let mut lo = [_mm256_setzero_ps(); ROWS];
        let mut hi = [_mm256_setzero_ps(); ROWS];
        let mut at = 0;
        while at < whole {
            // SAFETY: `at + LANES <= whole <= dim`, and every slice is at least `dim` long.
            unsafe {
                let q_lo = _mm256_loadu_ps(query.as_ptr().add(at));
                let q_hi = _mm256_loadu_ps(query.as_ptr().add(at + 8));
                for r in 0..ROWS {
                    let p = rows[r].as_ptr().add(at);
                    lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(_mm256_loadu_ps(p), q_lo));
                    hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(_mm256_loadu_ps(p.add(8)), q_hi));
                }
            }
            at += LANES;
        }
        std::array::from_fn(|r| finish(_mm256_add_ps(lo[r], hi[r]), rows[r], query, whole, dim))
    }

    /// Proof that this CPU runs AVX2: `detect` is the only way to get one, so the kernels
    /// that take it cannot be called where the instructions would fault.
    #[derive(Clone, Copy, Debug)]
    pub struct Avx2(());

    impl Avx2 {
        /// The proof, when the CPU has AVX2.
        #[must_use]
        pub fn detect() -> Option<Self> {
            std::is_x86_feature_detected!("avx2").then_some(Self(()))
        }

        #[allow(clippy::unused_self, reason = "the proof is used by being passed")]
        pub(super) fn dot(self, a: &[f32], b: &[f32]) -> f32 {
            // SAFETY: `self` exists only where `detect` found AVX2.
            unsafe { dot_rows_avx2([a], b)[0] }
        }

        #[allow(clippy::unused_self, reason = "the proof is used by being passed")]
        pub(super) fn dot4(self, rows: [&[f32]; BATCH], query: &[f32]) -> [f32; BATCH] {
            // SAFETY: as `dot`.
            unsafe { dot_rows_avx2(rows, query) }
        }
    }
}

/// The dot kernels picked for this CPU, with the name reported as `KERNEL`.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub name: &'static str,
    imp: Imp,
}

#[derive(Clone, Copy, Debug)]
enum Imp {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2(x86::Avx2),
}

impl Kernel {
    /// The kernel every CPU runs.
    #[must_use]
    pub const fn portable() -> Self {
        Self {
            name: "portable-f32x16",
            imp: Imp::Portable,
        }
    }

    /// The AVX2 kernel, when this CPU has AVX2.
    #[must_use]
    pub fn avx2() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        if let Some(proof) = x86::Avx2::detect() {
            return Some(Self {
                name: "avx2-f32x16",
                imp: Imp::Avx2(proof),
            });
        }
        None
    }

    /// Dot product; slices of unequal length are cut to the shorter.
    #[inline]
    #[must_use]
    pub fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        match self.imp {
            Imp::Portable => dot_portable(a, b),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(proof) => proof.dot(a, b),
        }
    }

    /// `BATCH` rows against one query; each score bit for bit `dot`'s.
    #[inline]
    #[must_use]
    pub fn dot4(&self, rows: [&[f32]; BATCH], query: &[f32]) -> [f32; BATCH] {
        match self.imp {
            Imp::Portable => dot4_portable(rows, query),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(proof) => proof.dot4(rows, query),
        }
    }
}

/// Detects the CPU once and returns the kernel every scan uses.
#[must_use]
pub fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| Kernel::avx2().unwrap_or(Kernel::portable()))
}

/// Dot product with the fast kernel. Slices of unequal length are cut to the shorter.
#[must_use]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    kernel().dot(a, b)
}

/// Scores every row of `rows` (row-major, `query.len()` wide) against `query`.
///
/// # Errors
/// `InvalidArgument` for an empty query; `DimensionMismatch` when `rows` is not a whole number
/// of rows.
pub fn scan_dot(rows: &[f32], query: &[f32]) -> Result<Vec<f32>, CoreError> {
    check_rows(rows, query)?;
    let kernel = kernel();
    Ok(rows
        .chunks_exact(query.len())
        .map(|row| kernel.dot(row, query))
        .collect())
}

/// Scores a block of rows and keeps the best `k` with `score >= threshold`, best first, by
/// (score desc, position asc). Row `i` has position `base_position + i`, so a caller streaming
/// a window in blocks gets positions that merge (`topk::merge_top_k`) into the single-pass answer.
///
/// The threshold is compared in f64 against the f32 score widened, as the spec compares the
/// widened similarity with the double threshold.
///
/// # Errors
/// As `scan_dot`; `InvalidArgument` for a NaN threshold or positions past `u64::MAX`.
pub fn scan_chunk(
    rows: &[f32],
    query: &[f32],
    threshold: f64,
    k: usize,
    base_position: u64,
) -> Result<Vec<Hit>, CoreError> {
    check_rows(rows, query)?;
    check_threshold(threshold)?;
    let n = rows.len() / query.len();
    if base_position.checked_add(n as u64).is_none() {
        return Err(CoreError::InvalidArgument(
            "base_position + rows overflows".into(),
        ));
    }
    let mut top = TopK::new(k, n);
    score_block(&kernel(), rows, query, |i, score| {
        if f64::from(score) >= threshold {
            top.push(Hit {
                score,
                position: base_position + i as u64,
            });
        }
    });
    Ok(top.into_sorted())
}

/// Scores every row of a contiguous block, `BATCH` rows per pass, and hands `(row, score)` to
/// `keep` in row order.
#[inline]
fn score_block(kernel: &Kernel, rows: &[f32], query: &[f32], mut keep: impl FnMut(usize, f32)) {
    let dim = query.len();
    let mut batches = rows.chunks_exact(BATCH * dim);
    let mut i = 0;
    for batch in &mut batches {
        let (r0, rest) = batch.split_at(dim);
        let (r1, rest) = rest.split_at(dim);
        let (r2, r3) = rest.split_at(dim);
        let scores = kernel.dot4([r0, r1, r2, r3], query);
        for (j, score) in scores.into_iter().enumerate() {
            keep(i + j, score);
        }
        i += BATCH;
    }
    for row in batches.remainder().chunks_exact(dim) {
        keep(i, kernel.dot(row, query));
        i += 1;
    }
}

fn check_rows(rows: &[f32], query: &[f32]) -> Result<(), CoreError> {
    if query.is_empty() {
        return Err(CoreError::InvalidArgument("query must not be empty".into()));
    }
    if rows.len() % query.len() != 0 {
        return Err(CoreError::DimensionMismatch {
            expected: query.len(),
            got: rows.len() % query.len(),
        });
    }
    Ok(())
}

fn check_threshold(threshold: f64) -> Result<(), CoreError> {
    if threshold.is_nan() {
        return Err(CoreError::InvalidArgument(
            "threshold must not be NaN".into(),
        ));
    }
    Ok(())
}

/// A set of scope hashes; empty admits everything.
#[derive(Clone, Debug, Default)]
pub struct HashSet64 {
    sorted: Vec<u64>,
}

impl HashSet64 {
    #[must_use]
    pub fn new(values: &[u64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        Self { sorted }
    }

    #[inline]
    #[must_use]
    pub fn admits(&self, value: u64) -> bool {
        // Scopes are one or two hashes; only source sets expanded from a prefix get long.
        match self.sorted.len() {
            0 => true,
            1..=8 => self.sorted.contains(&value),
            _ => self.sorted.binary_search(&value).is_ok(),
        }
    }

    /// Whether the set admits every value (it is empty), so a caller need not read the value.
    #[inline]
    #[must_use]
    pub fn is_all(&self) -> bool {
        self.sorted.is_empty()
    }
}

/// A half-open range of row instants `[lo, hi)` in microseconds since the Unix epoch.
///
/// The default, `[i64::MIN, i64::MAX)` with `hi` read as unbounded, admits every row, the
/// ones without an instant (`NO_TIME` = `i64::MIN`) included: an unscoped call sees what it
/// saw before ranges existed. A caller's range always has `lo > i64::MIN`, so it never admits
/// a row without an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    pub lo: i64,
    pub hi: i64,
}

impl TimeRange {
    pub const ALL: Self = Self {
        lo: i64::MIN,
        hi: i64::MAX,
    };

    #[must_use]
    pub fn is_all(&self) -> bool {
        *self == Self::ALL
    }

    #[inline]
    #[must_use]
    pub fn admits(&self, time: i64) -> bool {
        self.is_all() || (self.lo <= time && time < self.hi)
    }
}

impl Default for TimeRange {
    fn default() -> Self {
        Self::ALL
    }
}

/// Which slots a scan may see: agent exact; project, channel and source in their sets; the
/// row's instant in `times`.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub agent: u64,
    pub projects: HashSet64,
    pub channels: HashSet64,
    pub sources: HashSet64,
    pub times: TimeRange,
}

/// The knobs of one index scan (`docs/vector-index.md`, "The scan").
#[derive(Clone, Copy, Debug)]
pub struct ScanParams {
    /// N: positions `[0, N)` form the window.
    pub window: usize,
    /// R: positions `[N, R)` form the far region; `R <= N` means none (and no work for it).
    pub reach: usize,
    pub threshold: f64,
    pub k: usize,
    pub far_k: usize,
    /// Rows per work unit; only the split across threads depends on it, never the result.
    pub chunk_rows: usize,
    /// Threads to score with; 0 picks one per `MIN_ROWS_PER_THREAD` rows, up to the CPU count.
    pub threads: usize,
}

/// The near (window) and far lists: slot ids and scores, best first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScanResult {
    pub near_ids: Vec<i64>,
    pub near_scores: Vec<f32>,
    pub far_ids: Vec<i64>,
    pub far_scores: Vec<f32>,
}

/// Runs the scoped window / far scan over `store`.
///
/// Walks `order[0..count]` newest first; deleted and out-of-scope slots are skipped, the others
/// take positions 0, 1, 2, ...; foreign-width slots take a position and are never scored. Keeps
/// `score >= threshold`; near = top `k` of the window, far = top `far_k` of the far region.
///
/// # Errors
/// `DimensionMismatch` when the query is not `dim` wide; `InvalidArgument` for a NaN threshold or
/// `chunk_rows == 0`; `Corrupt` when the live header or `order` no longer make sense.
pub fn scan_index(
    store: &Store,
    query: &[f32],
    scope: &Scope,
    params: &ScanParams,
) -> Result<ScanResult, CoreError> {
    scan_index_checked(store, query, scope, params, None)
}

/// The sections a slot's content checksum covers: every 32-bit word of the vector, and both
/// words of each other section's value (`slot_checksum`; `vectors/checksums.py` declares the same).
pub const CHECKSUMMED: [&str; 8] = [
    "vectors", "ids", "keys", "times", "agent", "project", "channel", "source",
];

/// The content checksum of `slot` (`docs/vector-index.md`, "Content checksums"): the wrapping
/// `u32` sum of the little-endian 32-bit words of its vector and of its `ids`, `keys`, `times`,
/// `agent`, `project`, `channel` and `source` values (two words each). Order-free and exact, so the
/// writer (numpy) and every kernel compute the same value; any change of one word changes it.
#[must_use]
pub fn slot_checksum(store: &Store, slot: usize) -> u32 {
    let words = |v: u64| (v as u32).wrapping_add((v >> 32) as u32);
    let meta = [
        store.ids()[slot] as u64,
        store.keys()[slot] as u64,
        store.times()[slot] as u64,
        store.agent()[slot],
        store.project()[slot],
        store.channel()[slot],
        store.source()[slot],
    ]
    .iter()
    .fold(0u32, |acc, &v| acc.wrapping_add(words(v)));
    store
        .vector(slot)
        .iter()
        .fold(meta, |acc, x| acc.wrapping_add(x.to_bits()))
}

/// `scan_index`, and with `sums` (one content checksum per slot, at least `count` of them) every
/// slot the scan scores is checked against its checksum first: the answer never comes from a
/// slot whose bytes changed after its writer summed them.
///
/// # Errors
/// As `scan_index`; `Corrupt` naming the first slot whose checksum differs, or when `sums` is
/// shorter than `count`.
pub fn scan_index_checked(
    store: &Store,
    query: &[f32],
    scope: &Scope,
    params: &ScanParams,
    sums: Option<&[u32]>,
) -> Result<ScanResult, CoreError> {
    if query.len() != store.dim() {
        return Err(CoreError::DimensionMismatch {
            expected: store.dim(),
            got: query.len(),
        });
    }
    check_threshold(params.threshold)?;
    if params.chunk_rows == 0 {
        return Err(CoreError::InvalidArgument(
            "chunk_rows must be at least 1".into(),
        ));
    }
    let has_far = params.reach > params.window;
    let span = if has_far { params.reach } else { params.window };
    let slots = in_scope_slots(store, scope, span)?;
    if let Some(sums) = sums {
        let count = store.count()?;
        if sums.len() < count {
            return Err(CoreError::Corrupt(format!(
                "{} content checksums for {count} slots",
                sums.len()
            )));
        }
    }

    let near_end = slots.len().min(params.window);
    let far_range = if has_far {
        near_end..slots.len()
    } else {
        near_end..near_end
    };
    let mut units = Vec::new();
    if params.k > 0 {
        push_units(&mut units, 0..near_end, params.chunk_rows, List::Near);
    }
    if params.far_k > 0 {
        push_units(&mut units, far_range.clone(), params.chunk_rows, List::Far);
    }
    let rows: usize = units.iter().map(|u| u.range.len()).sum();
    let threads = thread_count(params.threads, rows, units.len());
    let ctx = Ctx {
        store,
        query,
        slots: &slots,
        params,
        sums,
    };
    let (near, far, damaged) = if threads <= 1 {
        score_units(&ctx, &units, 0, 1)
    } else {
        std::thread::scope(|s| {
            let ctx = &ctx;
            let units = &units;
            let handles: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || score_units(ctx, units, t, threads)))
                .collect();
            let mut near = TopK::new(params.k, near_end);
            let mut far = TopK::new(params.far_k, far_range.len());
            let mut damaged = None;
            for handle in handles {
                let (n, f, d) = handle
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e));
                near.merge(n);
                far.merge(f);
                damaged = damaged.or(d);
            }
            (near, far, damaged)
        })
    };
    if let Some(slot) = damaged {
        return Err(CoreError::Corrupt(format!(
            "the content checksum of slot {slot} (row {}) differs: its bytes changed after they were written",
            store.ids()[slot]
        )));
    }
    let ids = store.ids();
    let split = |top: TopK| -> (Vec<i64>, Vec<f32>) {
        top.into_sorted()
            .iter()
            .map(|h| (ids[slots[h.position as usize] as usize], h.score))
            .unzip()
    };
    let (near_ids, near_scores) = split(near);
    let (far_ids, far_scores) = split(far);
    Ok(ScanResult {
        near_ids,
        near_scores,
        far_ids,
        far_scores,
    })
}

/// The first `span` in-scope slots in scan order; index = scan position.
fn in_scope_slots(store: &Store, scope: &Scope, span: usize) -> Result<Vec<u32>, CoreError> {
    let count = store.count()?;
    let (flags, agent, project, channel, source, times) = (
        store.flags(),
        store.agent(),
        store.project(),
        store.channel(),
        store.source(),
        store.times(),
    );
    let mut slots = Vec::with_capacity(span.min(count));
    if span == 0 {
        return Ok(slots);
    }
    for (i, &slot) in store.order()[..count].iter().enumerate() {
        let s = slot as usize;
        if s >= count {
            return Err(CoreError::Corrupt(format!(
                "order[{i}] = {slot} is not below count {count}"
            )));
        }
        if flags[s] & FLAG_DELETED != 0
            || agent[s] != scope.agent
            || !scope.projects.admits(project[s])
            || !scope.channels.admits(channel[s])
            || !scope.sources.admits(source[s])
            || !scope.times.admits(times[s])
        {
            continue;
        }
        slots.push(slot);
        if slots.len() == span {
            break;
        }
    }
    Ok(slots)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    Near,
    Far,
}

/// A run of scan positions scored as one piece of work.
#[derive(Clone, Debug)]
struct Unit {
    range: std::ops::Range<usize>,
    list: List,
}

fn push_units(units: &mut Vec<Unit>, range: std::ops::Range<usize>, chunk_rows: usize, list: List) {
    let mut start = range.start;
    while start < range.end {
        let end = range.end.min(start.saturating_add(chunk_rows));
        units.push(Unit {
            range: start..end,
            list,
        });
        start = end;
    }
}

fn thread_count(requested: usize, rows: usize, units: usize) -> usize {
    let wanted = if requested == 0 {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        cpus.min(rows.div_ceil(MIN_ROWS_PER_THREAD))
    } else {
        requested
    };
    wanted.min(units).max(1)
}

struct Ctx<'a> {
    store: &'a Store,
    query: &'a [f32],
    slots: &'a [u32],
    params: &'a ScanParams,
    sums: Option<&'a [u32]>,
}

/// Scores the units `first, first + step, ...` into one near and one far selection, and the
/// first slot found whose content checksum differs (the scan then stops).
fn score_units(
    ctx: &Ctx<'_>,
    units: &[Unit],
    first: usize,
    step: usize,
) -> (TopK, TopK, Option<usize>) {
    let mut near = TopK::new(ctx.params.k, ctx.params.window.min(ctx.slots.len()));
    let mut far = TopK::new(ctx.params.far_k, ctx.slots.len());
    for unit in units.iter().skip(first).step_by(step) {
        let top = if unit.list == List::Near {
            &mut near
        } else {
            &mut far
        };
        // A file appended in time order lists its slots newest (highest) first, so scan order
        // walks memory backwards, which the hardware prefetcher does not follow: 4x slower on a
        // 200,000 x 768 far scan (docs/notes/performance-notes.md). The top k does not depend on
        // the order rows are offered in, so walk such a unit backwards, i.e. forwards through
        // memory.
        let damaged = if ctx.slots[unit.range.start] > ctx.slots[unit.range.end - 1] {
            score_positions(ctx, unit.range.clone().rev(), top)
        } else {
            score_positions(ctx, unit.range.clone(), top)
        };
        if damaged.is_some() {
            return (near, far, damaged);
        }
    }
    (near, far, None)
}

/// Scores the slots at `positions` (foreign-width slots skipped), `BATCH` rows per pass; with
/// checksums, returns the first scored slot whose checksum differs (its score is not kept).
fn score_positions(
    ctx: &Ctx<'_>,
    positions: impl Iterator<Item = usize>,
    top: &mut TopK,
) -> Option<usize> {
    let dim = ctx.store.dim();
    let (vectors, flags) = (ctx.store.vectors(), ctx.store.flags());
    let kernel = kernel();
    let threshold = ctx.params.threshold;
    let row = |slot: usize| &vectors[slot * dim..(slot + 1) * dim];
    let mut keep = |position: usize, score: f32| {
        if f64::from(score) >= threshold {
            top.push(Hit {
                score,
                position: position as u64,
            });
        }
    };
    let mut pending = [(0usize, 0usize); BATCH];
    let mut held = 0;
    for position in positions {
        let slot = ctx.slots[position] as usize;
        if flags[slot] & FLAG_FOREIGN != 0 {
            continue;
        }
        // Summed right before scoring, while the row's cache lines are being fetched anyway.
        if ctx
            .sums
            .is_some_and(|sums| slot_checksum(ctx.store, slot) != sums[slot])
        {
            return Some(slot);
        }
        pending[held] = (position, slot);
        held += 1;
        if held == BATCH {
            let scores = kernel.dot4(pending.map(|(_, slot)| row(slot)), ctx.query);
            for ((position, _), score) in pending.into_iter().zip(scores) {
                keep(position, score);
            }
            held = 0;
        }
    }
    for &(position, slot) in &pending[..held] {
        keep(position, kernel.dot(row(slot), ctx.query));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testfile::{build, write_temp, Slot};
    use crate::topk::rank_cmp;
    use proptest::prelude::*;

    #[test]
    fn dot_matches_scalar_on_integer_vectors() {
        for dim in [1usize, 3, 7, 8, 15, 16, 17, 31, 33, 63, 65, 97, 384, 768] {
            let a: Vec<f32> = (0..dim).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
            let b: Vec<f32> = (0..dim).map(|i| ((i * 3) % 4) as f32 - 1.0).collect();
            assert_eq!(
                dot(&a, &b).to_bits(),
                dot_scalar(&a, &b).to_bits(),
                "dim {dim}"
            );
            assert_eq!(
                dot_portable(&a, &b).to_bits(),
                dot(&a, &b).to_bits(),
                "dim {dim}"
            );
        }
    }

    /// Every kernel this CPU can run, the portable one first.
    fn kernels() -> Vec<Kernel> {
        std::iter::once(Kernel::portable())
            .chain(Kernel::avx2())
            .collect()
    }

    #[test]
    fn zero_vectors_score_positive_zero() {
        let a = vec![0.0f32; 33];
        let b: Vec<f32> = (0..33).map(|i| -(i as f32)).collect();
        assert_eq!(dot(&a, &b).to_bits(), 0.0f32.to_bits());
    }

    #[test]
    fn scan_dot_rejects_ragged_rows_and_empty_query() {
        assert!(scan_dot(&[1.0, 2.0, 3.0], &[1.0, 1.0]).is_err());
        assert!(scan_dot(&[], &[]).is_err());
    }

    proptest! {
        #[test]
        fn dot_is_close_to_f64_reference(
            pair in (1usize..200).prop_flat_map(|d| (
                prop::collection::vec(-1.0f32..1.0, d),
                prop::collection::vec(-1.0f32..1.0, d),
            ))
        ) {
            let (a, b) = pair;
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            let bound: f64 = a.iter().zip(&b).map(|(x, y)| (f64::from(*x) * f64::from(*y)).abs()).sum();
            let tol = 1e-6 * (bound + 1.0);
            prop_assert!((f64::from(dot(&a, &b)) - exact).abs() <= tol);
            prop_assert!((f64::from(dot_portable(&a, &b)) - f64::from(dot(&a, &b))).abs() == 0.0);
        }

        /// The four-row pass of every kernel gives each row the portable single-row score, bit
        /// for bit, whatever the values (infinities, signed zeros, subnormals included). A NaN
        /// result is only required to be a NaN: Rust leaves the payload and sign of an
        /// arithmetic NaN unspecified (the compiler may swap an add's operands), and stored
        /// vectors are finite (`Writer` refuses others), so no stored row scores NaN.
        #[test]
        fn every_kernel_scores_four_rows_as_one(
            dim in 1usize..140,
            bits in prop::collection::vec(any::<u32>(), 5 * 140),
            finite in any::<bool>(),
        ) {
            let value = |b: u32| {
                let x = f32::from_bits(b);
                if finite && !x.is_finite() { 0.5 } else { x }
            };
            let data: Vec<f32> = bits[..5 * dim].iter().map(|&b| value(b)).collect();
            let (query, rows) = data.split_at(dim);
            let rows: [&[f32]; BATCH] = std::array::from_fn(|r| &rows[r * dim..(r + 1) * dim]);
            let canon = |x: f32| if x.is_nan() { f32::NAN.to_bits() } else { x.to_bits() };
            let expected: Vec<u32> = rows.iter().map(|r| canon(dot_portable(r, query))).collect();
            for k in kernels() {
                let four: Vec<u32> = k.dot4(rows, query).iter().map(|&s| canon(s)).collect();
                let one: Vec<u32> = rows.iter().map(|r| canon(k.dot(r, query))).collect();
                prop_assert_eq!(&four, &expected, "{} dot4, dim {}", k.name, dim);
                prop_assert_eq!(&one, &expected, "{} dot, dim {}", k.name, dim);
            }
        }

        /// `scan_chunk` (four rows per pass plus a remainder) keeps exactly the rows and scores
        /// that scoring each row alone with `scan_dot` and ranking them gives.
        #[test]
        fn scan_chunk_matches_row_by_row_scores(
            n in 0usize..23,
            dim in 1usize..40,
            values in prop::collection::vec(-1.0f32..1.0, 23 * 40 + 40),
            k in 0usize..30,
            threshold in -0.5f64..0.5,
            base in 0u64..1000,
        ) {
            let query = &values[..dim];
            let rows = &values[dim..dim + n * dim];
            let got = scan_chunk(rows, query, threshold, k, base).unwrap();
            let mut naive: Vec<Hit> = scan_dot(rows, query).unwrap().into_iter().enumerate()
                .filter(|(_, s)| f64::from(*s) >= threshold)
                .map(|(i, score)| Hit { score, position: base + i as u64 }).collect();
            naive.sort_by(rank_cmp);
            naive.truncate(k);
            let bits = |h: &[Hit]| h.iter().map(|h| (h.score.to_bits(), h.position)).collect::<Vec<_>>();
            prop_assert_eq!(bits(&got), bits(&naive));
        }

        #[test]
        fn scan_chunk_blocks_merge_to_one_pass(
            values in prop::collection::vec(-3i8..4, 0..300),
            dim in 1usize..6,
            k in 0usize..20,
            block in 1usize..40,
            threshold in -4i8..4,
        ) {
            let n = values.len() / dim;
            let rows: Vec<f32> = values[..n * dim].iter().map(|&v| f32::from(v)).collect();
            let query: Vec<f32> = (0..dim).map(|i| (i % 3) as f32 - 1.0).collect();
            let threshold = f64::from(threshold);
            let whole = scan_chunk(&rows, &query, threshold, k, 0).unwrap();
            let mut merged = TopK::new(k, n);
            for (b, part) in rows.chunks(block * dim).enumerate() {
                for hit in scan_chunk(part, &query, threshold, k, (b * block) as u64).unwrap() {
                    merged.push(hit);
                }
            }
            prop_assert_eq!(merged.into_sorted(), whole.clone());
            let mut naive: Vec<Hit> = scan_dot(&rows, &query).unwrap().into_iter().enumerate()
                .filter(|(_, s)| f64::from(*s) >= threshold)
                .map(|(i, score)| Hit { score, position: i as u64 }).collect();
            naive.sort_by(rank_cmp);
            naive.truncate(k);
            prop_assert_eq!(whole, naive);
        }
    }

    /// Slots with small-integer vectors and a few scope values, some deleted or foreign.
    fn slots_strategy() -> impl Strategy<Value = Vec<Slot>> {
        prop::collection::vec(
            (
                0i64..20,
                prop::option::of(0i64..20),
                0u64..2,
                0u64..3,
                0u64..3,
                0u64..3,
                0u8..8,
                prop::collection::vec(-3i8..4, 3),
            ),
            0..120,
        )
        .prop_map(|raw| {
            raw.into_iter()
                .enumerate()
                .map(
                    |(i, (key, time, agent, project, channel, source, kind, v))| Slot {
                        id: i as i64 + 1,
                        key,
                        time: time.unwrap_or(crate::store::NO_TIME),
                        scope: [agent, project, channel, source],
                        flags: u8::from(kind == 0),
                        vector: (kind != 1).then(|| v.into_iter().map(f32::from).collect()),
                    },
                )
                .collect()
        })
    }

    /// The scan as the spec reads, on plain vectors: filter, number, score, sort.
    fn naive_scan(slots: &[Slot], query: &[f32], scope: &Scope, p: &ScanParams) -> ScanResult {
        let mut visible: Vec<&Slot> = slots
            .iter()
            .filter(|s| {
                s.flags & 1 == 0
                    && s.scope[0] == scope.agent
                    && scope.projects.admits(s.scope[1])
                    && scope.channels.admits(s.scope[2])
                    && scope.sources.admits(s.scope[3])
                    && (scope.times.is_all()
                        || (scope.times.lo <= s.time && s.time < scope.times.hi))
            })
            .collect();
        visible.sort_by_key(|s| std::cmp::Reverse((s.key, s.id)));
        let pick = |range: std::ops::Range<usize>, k: usize| -> (Vec<i64>, Vec<f32>) {
            let mut hits: Vec<(f32, usize, i64)> = range
                .filter_map(|pos| {
                    let s = visible.get(pos)?;
                    let sim = dot_scalar(s.vector.as_ref()?, query);
                    (f64::from(sim) >= p.threshold).then_some((sim, pos, s.id))
                })
                .collect();
            hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            hits.truncate(k);
            hits.iter().map(|h| (h.2, h.0)).unzip()
        };
        let (near_ids, near_scores) = pick(0..p.window, p.k);
        let far = if p.reach > p.window {
            p.window..p.reach
        } else {
            0..0
        };
        let (far_ids, far_scores) = pick(far, p.far_k);
        ScanResult {
            near_ids,
            near_scores,
            far_ids,
            far_scores,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn scan_index_matches_naive_for_any_chunking(
            slots in slots_strategy(),
            window in 0usize..60,
            extra in 0usize..80,
            k in 0usize..12,
            far_k in 0usize..12,
            threshold in -3i8..3,
            projects in prop::collection::vec(0u64..3, 0..3),
            sources in prop::collection::vec(0u64..3, 0..2),
            times in prop::option::of((1i64..20, 0i64..20)),
        ) {
            let bytes = build(3, slots.len() + 2, &slots);
            let path = write_temp(&format!("scan-{}.vec", std::thread::current().name().unwrap_or("t").replace("::", "-")), &bytes);
            let store = Store::open(&path).unwrap();
            let query = [1.0f32, -1.0, 2.0];
            let scope = Scope {
                agent: 1,
                projects: HashSet64::new(&projects),
                channels: HashSet64::new(&[]),
                sources: HashSet64::new(&sources),
                times: times.map_or(TimeRange::ALL, |(lo, len)| TimeRange { lo, hi: lo + len }),
            };
            let base = ScanParams {
                window, reach: window + extra, threshold: f64::from(threshold), k, far_k,
                chunk_rows: DEFAULT_CHUNK_ROWS, threads: 1,
            };
            let expected = naive_scan(&slots, &query, &scope, &base);
            for (chunk_rows, threads) in [(4096, 1), (1, 1), (7, 2), (3, 3), (5, 0)] {
                let params = ScanParams { chunk_rows, threads, ..base };
                prop_assert_eq!(&scan_index(&store, &query, &scope, &params).unwrap(), &expected);
            }
            let sums: Vec<u32> = (0..slots.len()).map(|s| slot_checksum(&store, s)).collect();
            let checked = scan_index_checked(&store, &query, &scope, &base, Some(&sums)).unwrap();
            prop_assert_eq!(&checked, &expected);
        }
    }

    /// A window-only scan of agent 1 (ten rows, the best five, one thread) at `threshold`.
    fn window_scan(threshold: f64) -> (ScanParams, Scope) {
        let params = ScanParams {
            window: 10,
            reach: 0,
            threshold,
            k: 5,
            far_k: 0,
            chunk_rows: 1,
            threads: 1,
        };
        let scope = Scope {
            agent: 1,
            ..Scope::default()
        };
        (params, scope)
    }

    #[test]
    fn checked_scan_refuses_a_scored_slot_whose_bytes_changed() {
        let slot = |id: i64, vector: Vec<f32>| Slot {
            id,
            key: id,
            time: 0,
            scope: [1, 0, 0, 0],
            flags: 0,
            vector: Some(vector),
        };
        let slots = [slot(1, vec![1.0, 2.0]), slot(2, vec![0.5, -1.0])];
        let good = build(2, 2, &slots);
        let store = Store::open(&write_temp("sums-good.vec", &good)).unwrap();
        // The documented formula, by hand: vector words, then id, key, time (0) and agent (low
        // words).
        let want = 1.0f32
            .to_bits()
            .wrapping_add(2.0f32.to_bits())
            .wrapping_add(1 + 1 + 1);
        assert_eq!(slot_checksum(&store, 0), want);
        let sums = [slot_checksum(&store, 0), slot_checksum(&store, 1)];
        let (params, scope) = window_scan(-10.0);
        let query = [1.0f32, 1.0];
        assert_eq!(
            scan_index_checked(&store, &query, &scope, &params, Some(&sums)).unwrap(),
            scan_index(&store, &query, &scope, &params).unwrap()
        );
        let mut damaged = good.clone();
        let at = crate::store::Layout::new(2, 2).unwrap().vectors + 4 * 2; // slot 1, first float
        damaged[at + 3] ^= 0x40;
        let store = Store::open(&write_temp("sums-bad.vec", &damaged)).unwrap();
        let err = scan_index_checked(&store, &query, &scope, &params, Some(&sums)).unwrap_err();
        assert!(
            matches!(&err, CoreError::Corrupt(r) if r.contains("row 2")),
            "{err:?}"
        );
        assert!(matches!(
            scan_index_checked(&store, &query, &scope, &params, Some(&sums[..1])),
            Err(CoreError::Corrupt(_))
        ));
    }

    #[test]
    fn scan_index_checks_query_width_and_threshold() {
        let slots = [Slot {
            id: 1,
            key: 1,
            time: 1,
            scope: [1, 0, 0, 0],
            flags: 0,
            vector: Some(vec![1.0, 2.0]),
        }];
        let store = Store::open(&write_temp("width.vec", &build(2, 1, &slots))).unwrap();
        let (params, scope) = window_scan(0.0);
        assert!(matches!(
            scan_index(&store, &[1.0], &scope, &params),
            Err(CoreError::DimensionMismatch { .. })
        ));
        let nan = ScanParams {
            threshold: f64::NAN,
            ..params
        };
        assert!(scan_index(&store, &[1.0, 1.0], &scope, &nan).is_err());
        let got = scan_index(&store, &[1.0, 1.0], &scope, &params).unwrap();
        assert_eq!((got.near_ids, got.near_scores), (vec![1], vec![3.0]));
    }
}
