//! Bounded top-k under the one total order of the core, and merging of per-chunk winners.
//!
//! The order is score descending by `f32::total_cmp`, then position ascending. It is total, so
//! a NaN cannot panic a sort and every set of candidates has exactly one top k; that is why
//! results cannot depend on chunk size or thread count. (`total_cmp` ranks `+0.0` above `-0.0`
//! and a positive NaN above `+inf`; the numpy fallback reproduces that order bit for bit.)
//! What a position means (a row of a block, a scan position) is the caller's business.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One candidate: a score and the position that breaks ties.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub score: f32,
    pub position: u64,
}

/// `Less` when `a` ranks before `b`.
#[must_use]
pub fn rank_cmp(a: &Hit, b: &Hit) -> Ordering {
    b.score
        .total_cmp(&a.score)
        .then(a.position.cmp(&b.position))
}

/// Heap entry whose maximum is the worst-ranked hit, so the heap's top is the one to evict.
#[derive(Clone, Copy, Debug)]
struct Worst(Hit);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        rank_cmp(&self.0, &other.0) == Ordering::Equal
    }
}

impl Eq for Worst {}

impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        rank_cmp(&self.0, &other.0)
    }
}

/// The integer whose order is `f32::total_cmp`'s: `total_key(a) < total_key(b)` exactly when
/// `a.total_cmp(&b)` is `Less`.
#[inline]
#[must_use]
pub fn total_key(score: f32) -> i32 {
    let bits = score.to_bits() as i32;
    // Negative floats order backwards by their bits: flip all but the sign bit.
    bits ^ ((((bits >> 31) as u32) >> 1) as i32)
}

/// The best `k` hits seen so far.
#[derive(Clone, Debug)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
    /// `total_key` of the worst kept score once `k` are kept (`i32::MIN` before): a hit scoring
    /// below it cannot get in, which one integer compare tells without touching the heap.
    floor: i32,
}

impl TopK {
    /// An empty selection of at most `k` hits. `expected` bounds the preallocation, so a huge
    /// `k` over a few candidates costs nothing.
    #[must_use]
    pub fn new(k: usize, expected: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.min(expected)),
            floor: if k == 0 { i32::MAX } else { i32::MIN },
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Offers one hit; it is kept if it ranks among the best `k`.
    #[inline]
    pub fn push(&mut self, hit: Hit) {
        // A tie with the floor may still get in on its position; only a lower score cannot.
        if total_key(hit.score) < self.floor {
            return;
        }
        self.offer(hit);
    }

    #[cold]
    #[inline(never)]
    fn offer(&mut self, hit: Hit) {
        if self.heap.len() < self.k {
            self.heap.push(Worst(hit));
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if rank_cmp(&hit, &worst.0) == Ordering::Less {
                *worst = Worst(hit);
            }
        }
        if self.heap.len() == self.k {
            if let Some(worst) = self.heap.peek() {
                self.floor = total_key(worst.0.score);
            }
        }
    }

    /// Folds another selection (typically another chunk's) into this one.
    pub fn merge(&mut self, other: TopK) {
        for Worst(hit) in other.heap {
            self.push(hit);
        }
    }

    /// The kept hits, best first.
    #[must_use]
    pub fn into_sorted(self) -> Vec<Hit> {
        let mut hits: Vec<Hit> = self.heap.into_iter().map(|w| w.0).collect();
        hits.sort_unstable_by(rank_cmp);
        hits
    }
}

/// The best `k` of `scores`, positions being the indices, best first.
#[must_use]
pub fn top_k(scores: &[f32], k: usize) -> Vec<Hit> {
    let mut top = TopK::new(k, scores.len());
    for (position, &score) in scores.iter().enumerate() {
        top.push(Hit {
            score,
            position: position as u64,
        });
    }
    top.into_sorted()
}

/// The best `k` of `(positions[i], scores[i])` pairs, best first, e.g. the concatenated winners
/// of several chunks.
///
/// # Panics
/// If the slices differ in length; the bindings check this first.
#[must_use]
pub fn merge_top_k(positions: &[u64], scores: &[f32], k: usize) -> Vec<Hit> {
    assert_eq!(
        positions.len(),
        scores.len(),
        "positions and scores must pair up"
    );
    let mut top = TopK::new(k, scores.len());
    for (&position, &score) in positions.iter().zip(scores) {
        top.push(Hit { score, position });
    }
    top.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(scores: &[f32], k: usize) -> Vec<Hit> {
        let mut all: Vec<Hit> = scores
            .iter()
            .enumerate()
            .map(|(i, &score)| Hit {
                score,
                position: i as u64,
            })
            .collect();
        all.sort_by(rank_cmp);
        all.truncate(k);
        all
    }

    fn bits(hits: &[Hit]) -> Vec<(u32, u64)> {
        hits.iter()
            .map(|h| (h.score.to_bits(), h.position))
            .collect()
    }

    #[test]
    fn ties_break_by_position_and_nan_is_ordered() {
        let scores = [0.5, 1.0, 0.5, f32::NAN, -0.0, 0.0, f32::NEG_INFINITY];
        let got = top_k(&scores, 7);
        let positions: Vec<u64> = got.iter().map(|h| h.position).collect();
        assert_eq!(positions, vec![3, 1, 0, 2, 5, 4, 6]);
    }

    #[test]
    fn k_zero_and_k_beyond_n() {
        assert!(top_k(&[1.0, 2.0], 0).is_empty());
        assert_eq!(top_k(&[1.0, 2.0], usize::MAX).len(), 2);
    }

    proptest! {
        #[test]
        fn top_k_matches_sort(scores in prop::collection::vec(-4i8..4, 0..200), k in 0usize..210) {
            let scores: Vec<f32> = scores.into_iter().map(f32::from).collect();
            prop_assert_eq!(bits(&top_k(&scores, k)), bits(&naive(&scores, k)));
        }

        /// Any f32 bit pattern (NaNs of both signs, infinities, signed zeros): the floor that
        /// skips the heap never drops a hit the full comparison would keep.
        #[test]
        fn top_k_matches_sort_on_any_bits(raw in prop::collection::vec(any::<u32>(), 0..300), k in 0usize..40) {
            let scores: Vec<f32> = raw.into_iter().map(f32::from_bits).collect();
            prop_assert_eq!(bits(&top_k(&scores, k)), bits(&naive(&scores, k)));
        }

        #[test]
        fn total_key_orders_as_total_cmp(a in any::<u32>(), b in any::<u32>()) {
            let (x, y) = (f32::from_bits(a), f32::from_bits(b));
            prop_assert_eq!(total_key(x).cmp(&total_key(y)), x.total_cmp(&y));
        }

        #[test]
        fn merging_chunks_matches_one_pass(
            scores in prop::collection::vec(-3i8..3, 0..200),
            k in 0usize..50,
            chunk in 1usize..64,
        ) {
            let scores: Vec<f32> = scores.into_iter().map(f32::from).collect();
            let mut merged = TopK::new(k, scores.len());
            for (c, part) in scores.chunks(chunk).enumerate() {
                let mut local = TopK::new(k, part.len());
                for (i, &score) in part.iter().enumerate() {
                    local.push(Hit { score, position: (c * chunk + i) as u64 });
                }
                merged.merge(local);
            }
            prop_assert_eq!(bits(&merged.into_sorted()), bits(&naive(&scores, k)));
        }
    }
}
