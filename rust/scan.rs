//! Score kernels and the scans built on them.
//!
//! - `dot_scalar` is the readable reference and the test oracle. `dot` is the fast kernel: the
//!   same sum split over 16 independent accumulators, which LLVM vectorises. On x86-64 with
//!   AVX2 the same code is compiled a second time for AVX2 and picked at run time; both builds
//!   add in the same order without fused multiply-add, so every machine gets identical scores.
//! - `scan_chunk` scores a caller's block of rows (the no-index path, fed `SQLite` BLOB chunks)
//!   and keeps a thresholded top k.
//! - `scan_index` is the scoped window / far scan over a `Store`, as `docs/vector-index.md`
//!   "The scan" defines it.
//!
//! Every path scores a row with the same `dot`, and the top k is taken under the total order of
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
    let mut acc = [0.0f32; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (xa, xb) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += xa[i] * xb[i];
        }
    }
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            acc[i] += acc[i + width];
        }
        width /= 2;
    }
    let mut tail = 0.0f32;
    for (x, y) in ta.iter().zip(tb) {
        tail += x * y;
    }
    acc[0] + tail
}

fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_avx2_impl(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: `kernel()` hands this function out only after `is_x86_feature_detected!("avx2")`.
    unsafe { dot_avx2_impl(a, b) }
}

/// The dot kernel picked for this CPU, with the name reported as `KERNEL`.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub name: &'static str,
    pub dot: fn(&[f32], &[f32]) -> f32,
}

/// Detects the CPU once and returns the kernel every scan uses.
#[must_use]
pub fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            return Kernel {
                name: "avx2-f32x16",
                dot: dot_avx2,
            };
        }
        Kernel {
            name: "portable-f32x16",
            dot: dot_portable,
        }
    })
}

/// Dot product with the fast kernel. Slices of unequal length are cut to the shorter.
#[must_use]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    (kernel().dot)(a, b)
}

/// Scores every row of `rows` (row-major, `query.len()` wide) against `query`.
///
/// # Errors
/// `InvalidArgument` for an empty query; `DimensionMismatch` when `rows` is not a whole number
/// of rows.
pub fn scan_dot(rows: &[f32], query: &[f32]) -> Result<Vec<f32>, CoreError> {
    check_rows(rows, query)?;
    let dot = kernel().dot;
    Ok(rows
        .chunks_exact(query.len())
        .map(|row| dot(row, query))
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
    let dot = kernel().dot;
    let mut top = TopK::new(k, n);
    for (i, row) in rows.chunks_exact(query.len()).enumerate() {
        let score = dot(row, query);
        if f64::from(score) >= threshold {
            top.push(Hit {
                score,
                position: base_position + i as u64,
            });
        }
    }
    Ok(top.into_sorted())
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
}

/// Which slots a scan may see: agent exact; project, channel and source in their sets.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub agent: u64,
    pub projects: HashSet64,
    pub channels: HashSet64,
    pub sources: HashSet64,
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
    };
    let (near, far) = if threads <= 1 {
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
            for handle in handles {
                let (n, f) = handle
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e));
                near.merge(n);
                far.merge(f);
            }
            (near, far)
        })
    };
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
    let (flags, agent, project, channel, source) = (
        store.flags(),
        store.agent(),
        store.project(),
        store.channel(),
        store.source(),
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
}

/// Scores the units `first, first + step, ...` into one near and one far selection.
fn score_units(ctx: &Ctx<'_>, units: &[Unit], first: usize, step: usize) -> (TopK, TopK) {
    let dim = ctx.store.dim();
    let (vectors, flags) = (ctx.store.vectors(), ctx.store.flags());
    let dot = kernel().dot;
    let threshold = ctx.params.threshold;
    let mut near = TopK::new(ctx.params.k, ctx.params.window.min(ctx.slots.len()));
    let mut far = TopK::new(ctx.params.far_k, ctx.slots.len());
    for unit in units.iter().skip(first).step_by(step) {
        let top = if unit.list == List::Near {
            &mut near
        } else {
            &mut far
        };
        let mut score_at = |position: usize| {
            let slot = ctx.slots[position] as usize;
            if flags[slot] & FLAG_FOREIGN != 0 {
                return;
            }
            let score = dot(&vectors[slot * dim..(slot + 1) * dim], ctx.query);
            if f64::from(score) >= threshold {
                top.push(Hit {
                    score,
                    position: position as u64,
                });
            }
        };
        // A file appended in time order lists its slots newest (highest) first, so scan order
        // walks memory backwards, which the hardware prefetcher does not follow: 4x slower on a
        // 200,000 x 768 far scan (docs/performance.md). The top k does not depend on the order
        // rows are offered in, so walk such a unit backwards, i.e. forwards through memory.
        if ctx.slots[unit.range.start] > ctx.slots[unit.range.end - 1] {
            unit.range.clone().rev().for_each(&mut score_at);
        } else {
            unit.range.clone().for_each(&mut score_at);
        }
    }
    (near, far)
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
                    |(i, (key, agent, project, channel, source, kind, v))| Slot {
                        id: i as i64 + 1,
                        key,
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
        }
    }

    #[test]
    fn scan_index_checks_query_width_and_threshold() {
        let slots = [Slot {
            id: 1,
            key: 1,
            scope: [1, 0, 0, 0],
            flags: 0,
            vector: Some(vec![1.0, 2.0]),
        }];
        let store = Store::open(&write_temp("width.vec", &build(2, 1, &slots))).unwrap();
        let params = ScanParams {
            window: 10,
            reach: 0,
            threshold: 0.0,
            k: 5,
            far_k: 0,
            chunk_rows: 1,
            threads: 1,
        };
        let scope = Scope {
            agent: 1,
            ..Scope::default()
        };
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
