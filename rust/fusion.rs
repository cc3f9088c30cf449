//! Rank fusion over ranked lists: reciprocal-rank (rrf) and relative-score (rsf) fusion.
//!
//! The lists hold non-negative integer keys that the caller assigned to candidates (Python maps
//! `("mem", id)` / `("ep", id)` to keys); this module never sees what a key names.
//! Semantics follow spec/retrieval.md §5:
//!
//! - rrf: `score(d) = Σ_L weight_L / (k + r_L(d) + 1)` over the lists containing `d`, `r` being
//!   the 0-based rank. A negative key holds a rank without being a candidate, which is how an
//!   excluded row "still consumes its rank position" (§4.10).
//! - rsf: each channel's defined scores are min–max normalised (a lone member or equal scores
//!   give 1; a NaN score is undefined and gives 0 unless no member is defined, then every member
//!   gets 1); the sum over channels is divided by the number of non-empty channels.
//! - Both sort by fused score descending, ties in first-insertion order (lists in the order
//!   given, each in its own order; in rsf a channel's defined-score rows come before its undefined
//!   ones), which is the stable sort of §5.3–5.5.
//!
//! Accumulation is in f64. Each candidate's terms are added largest first, so its score does not
//! depend on the order of the lists: two candidates whose terms are the same multiset tie exactly,
//! and the numpy fallback, adding in the same order, gets the same bits.

use std::collections::HashMap;

use crate::error::CoreError;

/// Fused candidates, best first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fused {
    pub keys: Vec<i64>,
    pub scores: Vec<f64>,
}

/// Candidates in first-insertion order with their score terms.
#[derive(Default)]
struct Accumulator {
    index: HashMap<i64, usize>,
    keys: Vec<i64>,
    /// `(candidate index, term)` pairs, in arrival order.
    terms: Vec<(usize, f64)>,
}

impl Accumulator {
    fn add(&mut self, key: i64, term: f64) {
        let next = self.keys.len();
        let idx = *self.index.entry(key).or_insert(next);
        if idx == next {
            self.keys.push(key);
        }
        self.terms.push((idx, term));
    }

    /// Sums each candidate's terms largest first, divides by `divisor`, sorts, cuts to `limit`.
    fn finish(mut self, divisor: f64, limit: Option<usize>) -> Fused {
        self.terms
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut sums = vec![0.0f64; self.keys.len()];
        for &(idx, term) in &self.terms {
            sums[idx] += term;
        }
        for s in &mut sums {
            *s /= divisor;
        }
        let mut ranked: Vec<usize> = (0..self.keys.len()).collect();
        // Stable: equal scores keep first-insertion order.
        ranked.sort_by(|&a, &b| sums[b].total_cmp(&sums[a]));
        ranked.truncate(limit.unwrap_or(usize::MAX));
        Fused {
            keys: ranked.iter().map(|&i| self.keys[i]).collect(),
            scores: ranked.iter().map(|&i| sums[i]).collect(),
        }
    }
}

/// Reciprocal-rank fusion.
///
/// # Errors
/// `InvalidArgument` when `k < 1`, or `weights` is not one finite, non-negative weight per list.
pub fn rrf(
    rankings: &[&[i64]],
    k: u64,
    weights: Option<&[f64]>,
    limit: Option<usize>,
) -> Result<Fused, CoreError> {
    if k < 1 {
        return Err(CoreError::InvalidArgument("k must be at least 1".into()));
    }
    if let Some(w) = weights {
        if w.len() != rankings.len() {
            return Err(CoreError::InvalidArgument(format!(
                "weights has {} entries for {} rankings",
                w.len(),
                rankings.len()
            )));
        }
        if w.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err(CoreError::InvalidArgument(
                "weights must be finite and non-negative".into(),
            ));
        }
    }
    let mut acc = Accumulator::default();
    for (l, list) in rankings.iter().enumerate() {
        let weight = weights.map_or(1.0, |w| w[l]);
        for (rank, &key) in list.iter().enumerate() {
            if key >= 0 {
                // The denominator is an exact integer; one rounding, in the division.
                acc.add(key, weight / (k + rank as u64 + 1) as f64);
            }
        }
    }
    Ok(acc.finish(1.0, limit))
}

/// Relative-score fusion. `scores[c][i]` is the raw score of `rankings[c][i]`; NaN = undefined.
///
/// # Errors
/// `InvalidArgument` when the lists do not pair up, a key is negative, or a score is infinite.
pub fn rsf(
    rankings: &[&[i64]],
    scores: &[&[f64]],
    limit: Option<usize>,
) -> Result<Fused, CoreError> {
    if rankings.len() != scores.len() {
        return Err(CoreError::InvalidArgument(format!(
            "{} rankings but {} score lists",
            rankings.len(),
            scores.len()
        )));
    }
    for (keys, raw) in rankings.iter().zip(scores) {
        if keys.len() != raw.len() {
            return Err(CoreError::InvalidArgument(
                "each ranking needs one score per key".into(),
            ));
        }
        if keys.iter().any(|&key| key < 0) {
            return Err(CoreError::InvalidArgument(
                "rsf keys must be non-negative".into(),
            ));
        }
        if raw.iter().any(|s| s.is_infinite()) {
            return Err(CoreError::InvalidArgument(
                "rsf scores must be finite or NaN".into(),
            ));
        }
    }
    let mut acc = Accumulator::default();
    let mut active = 0usize;
    for (keys, raw) in rankings.iter().zip(scores) {
        if keys.is_empty() {
            continue;
        }
        active += 1;
        let defined = raw.iter().filter(|s| !s.is_nan());
        let lo = defined.clone().copied().fold(f64::INFINITY, f64::min);
        let hi = defined.copied().fold(f64::NEG_INFINITY, f64::max);
        let any_defined = lo <= hi;
        // Exact comparison on purpose: the spec's "max = min" case, where dividing is undefined.
        #[allow(clippy::float_cmp)]
        let flat = hi == lo;
        let normalise = |s: f64| -> f64 {
            if !any_defined || flat {
                1.0
            } else {
                (s - lo) / (hi - lo)
            }
        };
        for (&key, &s) in keys.iter().zip(raw.iter()) {
            if !s.is_nan() {
                acc.add(key, normalise(s));
            }
        }
        for (&key, &s) in keys.iter().zip(raw.iter()) {
            if s.is_nan() {
                acc.add(key, if any_defined { 0.0 } else { 1.0 });
            }
        }
    }
    Ok(acc.finish(active.max(1) as f64, limit))
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact scores are the point of these tests
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// rrf as the spec's formula reads, summing in list order.
    fn naive_rrf(rankings: &[Vec<i64>], k: u64) -> Vec<(i64, f64)> {
        let mut order: Vec<i64> = Vec::new();
        let mut score: HashMap<i64, f64> = HashMap::new();
        for list in rankings {
            for (r, &key) in list.iter().enumerate() {
                if key < 0 {
                    continue;
                }
                if !score.contains_key(&key) {
                    order.push(key);
                }
                *score.entry(key).or_insert(0.0) += 1.0 / (k as f64 + r as f64 + 1.0);
            }
        }
        let mut out: Vec<(i64, f64)> = order.iter().map(|key| (*key, score[key])).collect();
        out.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        out
    }

    #[test]
    fn rrf_spec_example() {
        let near = [1i64, 2];
        let fts = [2i64];
        let got = rrf(&[&near, &fts], 60, None, None).unwrap();
        assert_eq!(got.keys, vec![2, 1]);
        assert!((got.scores[0] - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-15);
        assert!((got.scores[1] - 1.0 / 61.0).abs() < 1e-15);
    }

    #[test]
    fn rrf_negative_key_consumes_rank() {
        let got = rrf(&[&[-1, 7]], 60, None, None).unwrap();
        assert_eq!(got.keys, vec![7]);
        assert_eq!(got.scores, vec![1.0 / 62.0]);
    }

    #[test]
    fn rrf_ties_keep_first_insertion() {
        let got = rrf(&[&[5], &[3]], 60, None, Some(1)).unwrap();
        assert_eq!(got.keys, vec![5]);
    }

    #[test]
    fn rrf_rejects_bad_arguments() {
        assert!(rrf(&[&[1]], 0, None, None).is_err());
        assert!(rrf(&[&[1]], 60, Some(&[1.0, 2.0]), None).is_err());
        assert!(rrf(&[&[1]], 60, Some(&[f64::NAN]), None).is_err());
    }

    #[test]
    fn rsf_normalises_per_channel_and_divides_by_active() {
        // V: a=0.9, b=0.5; F empty; E: b=3.0 (lone member -> 1); M: c undefined among defined d.
        let v = [1i64, 2];
        let e = [2i64];
        let m = [3i64, 4];
        let got = rsf(
            &[&v, &[], &e, &m],
            &[&[0.9, 0.5], &[], &[3.0], &[f64::NAN, 2.0]],
            None,
        )
        .unwrap();
        let score = |key: i64| got.scores[got.keys.iter().position(|&k| k == key).unwrap()];
        assert_eq!(score(1), 1.0 / 3.0);
        assert_eq!(score(2), 1.0 / 3.0);
        assert_eq!(score(4), 1.0 / 3.0);
        assert_eq!(score(3), 0.0);
        // Ties in insertion order: V's rows, then E, then M's defined row, then its undefined one.
        assert_eq!(got.keys, vec![1, 2, 4, 3]);
    }

    #[test]
    fn rsf_all_undefined_channel_scores_one() {
        let got = rsf(&[&[8, 9]], &[&[f64::NAN, f64::NAN]], None).unwrap();
        assert_eq!((got.keys, got.scores), (vec![8, 9], vec![1.0, 1.0]));
    }

    proptest! {
        #[test]
        fn rrf_matches_naive(
            rankings in prop::collection::vec(prop::collection::vec(-1i64..30, 0..25), 0..5),
            k in 1u64..100,
        ) {
            let refs: Vec<&[i64]> = rankings.iter().map(Vec::as_slice).collect();
            let got = rrf(&refs, k, None, None).unwrap();
            let want = naive_rrf(&rankings, k);
            prop_assert_eq!(got.keys.len(), want.len());
            for (i, (key, score)) in want.iter().enumerate() {
                let at = got.keys.iter().position(|k| k == key).unwrap();
                prop_assert!((got.scores[at] - score).abs() <= 1e-12);
                prop_assert!((got.scores[i] - score).abs() <= 1e-12);
            }
        }

        #[test]
        fn rrf_scores_ignore_list_order(
            rankings in prop::collection::vec(prop::collection::vec(0i64..20, 0..15), 1..5),
        ) {
            let refs: Vec<&[i64]> = rankings.iter().map(Vec::as_slice).collect();
            let mut reversed = refs.clone();
            reversed.reverse();
            let a = rrf(&refs, 60, None, None).unwrap();
            let b = rrf(&reversed, 60, None, None).unwrap();
            let mut pa: Vec<(i64, u64)> = a.keys.iter().zip(&a.scores).map(|(k, s)| (*k, s.to_bits())).collect();
            let mut pb: Vec<(i64, u64)> = b.keys.iter().zip(&b.scores).map(|(k, s)| (*k, s.to_bits())).collect();
            pa.sort_unstable();
            pb.sort_unstable();
            prop_assert_eq!(pa, pb);
        }
    }
}
