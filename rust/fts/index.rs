//! The in-memory full-text index of one table and its bm25 search (docs/fts-index.md).
//!
//! Each row is a slot: its id, scope hashes, token count and the folded text of each column.
//! A trigram's posting list is the ascending list of slots whose text contains it. A row that
//! changes takes a new slot and its old slot is marked dead (postings keep dead slots until the
//! next compaction), so posting lists only ever grow at their end and stay sorted.
//!
//! Search reproduces `bm25()` of FTS5 over the trigram tokenizer exactly: for each query phrase
//! the rows containing it and its instance count per row (the phrase's trigram lists intersected,
//! then each candidate's folded text searched), the phrase's IDF over the whole table, and each
//! row's score summed phrase by phrase in query order with FTS5's own expression, so the values
//! are the same doubles. A phrase's rows depend only on the table, so they are cached until the
//! table changes under them (each write updates the cached phrases it touches).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use memchr::memmem::Finder;

use super::fold::{fold_text, occurrences, token_count, trigrams};
use super::segment::{self, prefetch, Meta, RowIn, RowMeta, Segment};
use crate::error::CoreError;
use crate::layout::Elem;
use crate::scan::{HashSet64, Scope};

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Phrases kept in the cache before it is emptied (each costs its row list).
const CACHE_PHRASES: usize = 4096;
/// How many rows ahead of the one at hand a loop over rows at random places asks for the next
/// rows' data (a cache hint: enough to cover a memory load's latency).
const AHEAD: usize = 8;
/// Compact the slots once this many are dead and they outnumber the live ones.
const COMPACT_MIN_DEAD: usize = 65_536;

/// One row as the change records carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doc {
    pub id: i64,
    pub meta: RowMeta,
    pub columns: Vec<String>,
}

/// One change record: a row's current state, or its absence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Put(Doc),
    Delete(i64),
}

struct Slot {
    id: i64,
    meta: RowMeta,
    tokens: u64,
    columns: Box<[Box<str>]>,
}

/// A trigram's rows, ascending by slot, and its number of windows in each (saturating).
#[derive(Default)]
struct Postings {
    slots: Vec<u32>,
    counts: Vec<u8>,
}

/// The rows containing one folded phrase, ascending by slot, with the instance count in each.
#[derive(Clone, Default)]
struct Phrase {
    slots: Vec<u32>,
    tfs: Vec<u32>,
    /// Each row's size (FTS5's token count; a row of `SQLite`'s at most 10^9 bytes has fewer
    /// than 2^32), kept here because the scoring loop would otherwise read it from the row
    /// arrays at random, one cache miss per row.
    sizes: Vec<u32>,
    /// Live rows among `slots` (FTS5's `nHit`).
    hits: i64,
    /// The largest frequency and the smallest row size among `slots`: the phrase's best
    /// possible contribution to a score (the `MaxScore` bound) is reached at these.
    max_tf: u32,
    min_size: u64,
}

impl Phrase {
    fn push(&mut self, slot: u32, tf: u32, size: u64) {
        if self.slots.is_empty() {
            self.min_size = size;
        }
        self.slots.push(slot);
        self.tfs.push(tf);
        self.sizes.push(u32::try_from(size).unwrap_or(u32::MAX));
        self.hits += 1;
        self.max_tf = self.max_tf.max(tf);
        self.min_size = self.min_size.min(size);
    }

    fn tf_of(&self, slot: u32) -> Option<u32> {
        self.slots.binary_search(&slot).ok().map(|i| self.tfs[i])
    }

    /// The rows with their frequency and size, ascending by slot.
    fn rows(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        let rows = self.slots.iter().zip(&self.tfs).zip(&self.sizes);
        rows.map(|((&s, &tf), &size)| (s, tf, u64::from(size)))
    }
}

/// A row of the index as `verify` compares it with `SQLite`.
pub struct RowView<'a> {
    pub meta: RowMeta,
    pub columns: Vec<&'a str>,
}

/// A trigram's posting list over both parts of the index: the segment's slots, then the
/// delta's (whose slots all come after the segment's, so the whole stays ascending).
#[derive(Clone, Copy)]
struct List<'a> {
    a: &'a [u32],
    a_counts: &'a [u8],
    b: &'a [u32],
    b_counts: &'a [u8],
}

impl<'a> List<'a> {
    /// One ascending slot list (for `gallop`; it has no window counts).
    fn of(slots: &'a [u32]) -> Self {
        Self {
            a: slots,
            a_counts: &[],
            b: &[],
            b_counts: &[],
        }
    }

    fn len(&self) -> usize {
        self.a.len() + self.b.len()
    }
    fn slot(&self, i: usize) -> u32 {
        if i < self.a.len() {
            self.a[i]
        } else {
            self.b[i - self.a.len()]
        }
    }
    fn iter(&self) -> impl Iterator<Item = (u32, u8)> + '_ {
        let a = self.a.iter().zip(self.a_counts);
        a.chain(self.b.iter().zip(self.b_counts))
            .map(|(&s, &c)| (s, c))
    }
}

/// The index of one table: an optional memory-mapped segment (rows `0..segment rows`, in
/// place, shared through the page cache) and the delta in this process's heap (rows appended
/// since the segment was built, slots after the segment's). A row of the segment that was
/// deleted or replaced since is marked in `base_dead`.
#[derive(Default)]
pub struct FtsIndex {
    base: Option<Segment>,
    base_dead: Vec<bool>,
    base_live: usize,
    /// The delta's rows, by local slot (global slot = segment rows + local slot).
    slots: Vec<Slot>,
    alive: Vec<bool>,
    /// Per slot, dense for the scoring loops: the agent hash and the token count.
    agents: Vec<u64>,
    sizes: Vec<u64>,
    /// The delta's live rows (global slots).
    by_id: HashMap<i64, u32>,
    /// The delta's postings (global slots).
    postings: HashMap<u64, Postings>,
    live_tokens: u64,
    cache: Mutex<HashMap<Box<str>, Arc<Phrase>>>,
    /// Zeroed per-slot arrays of finished searches, one per search that ran at once: zeroing
    /// 9 bytes a row for each search cost a millisecond at 1,000,000 rows.
    scratch: Mutex<Vec<Scratch>>,
}

/// A search's per-slot arrays: 0 = row not seen, 1 = in scope, 2 = out of scope; and each
/// in-scope row's partial score.
#[derive(Default)]
struct Scratch {
    seen: Vec<u8>,
    partial: Vec<f64>,
}

impl FtsIndex {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An index whose rows are those of `segment`, searched in place.
    #[must_use]
    pub fn mapped(segment: Segment) -> Self {
        let rows = segment.rows();
        Self {
            base_dead: vec![false; rows],
            base_live: rows,
            live_tokens: segment.total_tokens,
            base: Some(segment),
            ..Self::default()
        }
    }

    /// The segment's header, when the index has one.
    #[must_use]
    pub fn segment_meta(&self) -> Option<Meta> {
        self.base.as_ref().map(|s| s.meta)
    }

    /// Rows held in the heap (the delta's slots, dead ones included).
    #[must_use]
    pub fn delta_slots(&self) -> usize {
        self.slots.len()
    }

    /// Write the live rows as a segment to `path` (`meta.body_crc` is left 0 for the caller).
    ///
    /// # Errors
    /// `Io` when the file cannot be written.
    ///
    /// # Panics
    /// Never: every live id has a slot.
    pub fn write_segment(&self, path: &std::path::Path, meta: Meta) -> Result<(), CoreError> {
        let rows: Vec<RowIn<'_>> = self
            .ids()
            .into_iter()
            .map(|id| {
                let s = self.slot_of(id).expect("a live id has a slot");
                RowIn {
                    id,
                    meta: self.meta_of(s),
                    size: self.size(s),
                    columns: self.columns_of(s).collect(),
                }
            })
            .collect();
        segment::write(path, meta, &rows)
    }

    fn nb(&self) -> usize {
        self.base.as_ref().map_or(0, Segment::rows)
    }

    fn total_slots(&self) -> usize {
        self.nb() + self.slots.len()
    }

    #[inline]
    fn is_alive(&self, s: usize) -> bool {
        let nb = self.nb();
        if s < nb {
            !self.base_dead[s]
        } else {
            self.alive[s - nb]
        }
    }

    #[inline]
    fn size(&self, s: usize) -> u64 {
        match &self.base {
            Some(b) if s < b.rows() => b.sizes()[s],
            _ => self.sizes[s - self.nb()],
        }
    }

    #[inline]
    fn agent(&self, s: usize) -> u64 {
        match &self.base {
            Some(b) if s < b.rows() => b.agents()[s],
            _ => self.agents[s - self.nb()],
        }
    }

    fn id_at(&self, s: usize) -> i64 {
        match &self.base {
            Some(b) if s < b.rows() => b.ids()[s],
            _ => self.slots[s - self.nb()].id,
        }
    }

    fn meta_of(&self, s: usize) -> RowMeta {
        match &self.base {
            Some(b) if s < b.rows() => b.meta(s),
            _ => self.slots[s - self.nb()].meta,
        }
    }

    /// The folded texts of a slot's columns.
    fn columns_of(&self, s: usize) -> Box<dyn Iterator<Item = &[u8]> + '_> {
        match &self.base {
            Some(b) if s < b.rows() => Box::new(b.columns(s)),
            _ => Box::new(
                self.slots[s - self.nb()]
                    .columns
                    .iter()
                    .map(|c| c.as_bytes()),
            ),
        }
    }

    /// The global slot of live row `id`.
    fn slot_of(&self, id: i64) -> Option<usize> {
        if let Some(&s) = self.by_id.get(&id) {
            return Some(s as usize);
        }
        let s = self.base.as_ref()?.slot_of(id)?;
        (!self.base_dead[s]).then_some(s)
    }

    /// Live rows (FTS5's `nRow`).
    #[must_use]
    pub fn live(&self) -> usize {
        self.base_live + self.by_id.len()
    }

    /// Tokens over all live rows and columns (FTS5's total column size).
    #[must_use]
    pub fn total_tokens(&self) -> u64 {
        self.live_tokens
    }

    #[must_use]
    pub fn slot_count(&self) -> usize {
        self.total_slots()
    }

    /// Live row ids, ascending.
    #[must_use]
    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.by_id.keys().copied().collect();
        if let Some(b) = &self.base {
            let live = b.ids().iter().zip(&self.base_dead).filter(|(_, &d)| !d);
            ids.extend(live.map(|(&id, _)| id));
        }
        ids.sort_unstable();
        ids
    }

    #[must_use]
    pub fn row(&self, id: i64) -> Option<RowView<'_>> {
        self.slot_of(id).map(|s| {
            RowView {
                meta: self.meta_of(s),
                // The texts were UTF-8 when written (the segment's CRC says they still are).
                columns: self
                    .columns_of(s)
                    .map(|c| std::str::from_utf8(c).unwrap_or("\u{fffd}"))
                    .collect(),
            }
        })
    }

    /// Apply change records in order (idempotent per record: a put replaces, a delete of an
    /// absent row does nothing).
    pub fn apply(&mut self, records: Vec<Record>) {
        let cache = self.cache.get_mut().unwrap_or_else(PoisonError::into_inner);
        let mut cache = std::mem::take(cache);
        for record in records {
            match record {
                Record::Put(doc) => {
                    self.remove(doc.id, &mut cache);
                    self.insert(&doc, &mut cache);
                }
                Record::Delete(id) => self.remove(id, &mut cache),
            }
        }
        *self.cache.get_mut().unwrap_or_else(PoisonError::into_inner) = cache;
        let dead = self.slots.len() - self.by_id.len();
        if dead >= COMPACT_MIN_DEAD && dead > self.by_id.len() {
            self.compact();
        }
    }

    fn insert(&mut self, doc: &Doc, cache: &mut HashMap<Box<str>, Arc<Phrase>>) {
        let slot = u32::try_from(self.total_slots()).expect("fewer than 2^32 slots");
        let mut tokens = 0u64;
        let mut columns = Vec::with_capacity(doc.columns.len());
        let mut keys: Vec<u64> = Vec::new();
        for text in &doc.columns {
            let (folded, chars) = fold_text(text);
            tokens += token_count(chars);
            keys.extend(trigrams(&folded));
            columns.push(folded.into_boxed_str());
        }
        keys.sort_unstable();
        for run in keys.chunk_by(|a, b| a == b) {
            let list = self.postings.entry(run[0]).or_default();
            list.slots.push(slot);
            list.counts.push(u8::try_from(run.len()).unwrap_or(u8::MAX));
        }
        for (term, phrase) in cache.iter_mut() {
            let finder = Finder::new(term.as_bytes());
            let tf: u32 = columns
                .iter()
                .map(|c| occurrences(&finder, c.as_bytes()))
                .sum();
            if tf > 0 {
                Arc::make_mut(phrase).push(slot, tf, tokens);
            }
        }
        self.slots.push(Slot {
            id: doc.id,
            meta: doc.meta,
            tokens,
            columns: columns.into_boxed_slice(),
        });
        self.alive.push(true);
        self.agents.push(doc.meta.agent);
        self.sizes.push(tokens);
        self.by_id.insert(doc.id, slot);
        self.live_tokens += tokens;
    }

    fn remove(&mut self, id: i64, cache: &mut HashMap<Box<str>, Arc<Phrase>>) {
        let nb = self.nb();
        let slot = if let Some(slot) = self.by_id.remove(&id) {
            let local = slot as usize - nb;
            self.alive[local] = false;
            self.live_tokens -= self.slots[local].tokens;
            slot
        } else {
            let Some(s) = self.base.as_ref().and_then(|b| b.slot_of(id)) else {
                return;
            };
            if self.base_dead[s] {
                return;
            }
            self.base_dead[s] = true;
            self.base_live -= 1;
            self.live_tokens -= self.size(s);
            s as u32
        };
        for phrase in cache.values_mut() {
            if phrase.slots.binary_search(&slot).is_ok() {
                Arc::make_mut(phrase).hits -= 1;
            }
        }
    }

    /// Renumber the delta's live slots densely and rebuild its postings (the cache is
    /// dropped; the segment's rows stay as they are).
    fn compact(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let alive = std::mem::take(&mut self.alive);
        self.agents.clear();
        self.sizes.clear();
        self.by_id.clear();
        self.postings.clear();
        self.live_tokens = self.base.as_ref().map_or(0, |b| {
            let live = b.sizes().iter().zip(&self.base_dead).filter(|(_, &d)| !d);
            live.map(|(&n, _)| n).sum()
        });
        self.cache
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let mut none = HashMap::new();
        for (slot, live) in old.into_iter().zip(alive) {
            if live {
                let doc = Doc {
                    id: slot.id,
                    meta: slot.meta,
                    columns: slot.columns.iter().map(ToString::to_string).collect(),
                };
                self.insert(&doc, &mut none);
            }
        }
    }

    /// Forget every cached phrase (what a freshly loaded index has).
    pub fn clear_cache(&self) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The rows of one folded phrase, from the cache or computed (and then cached).
    fn phrase(&self, term: &str) -> Arc<Phrase> {
        let cache = || self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hit) = cache().get(term) {
            return Arc::clone(hit);
        }
        let phrase = Arc::new(self.compute_phrase(term));
        let mut cache = cache();
        if cache.len() >= CACHE_PHRASES {
            cache.clear();
        }
        cache.insert(term.into(), Arc::clone(&phrase));
        phrase
    }

    fn compute_phrase(&self, term: &str) -> Phrase {
        let mut keys: Vec<u64> = trigrams(term).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut lists = Vec::with_capacity(keys.len());
        for key in &keys {
            let a = self.base.as_ref().and_then(|b| b.postings(*key));
            let b = self.postings.get(key);
            if a.is_none() && b.is_none() {
                return Phrase::default();
            }
            let (a, a_counts) = a.unwrap_or((&[], &[]));
            let (b, b_counts) = b.map_or((&[][..], &[][..]), |p| (&p.slots[..], &p.counts[..]));
            lists.push(List {
                a,
                a_counts,
                b,
                b_counts,
            });
        }
        if lists.is_empty() {
            return Phrase::default();
        }
        let finder = Finder::new(term.as_bytes());
        let mut out = Phrase::default();
        if term.chars().count() == 3 {
            // One window: the rows holding the trigram are the phrase's rows, and the
            // trigram's count in a row is the phrase frequency (counted anew only if saturated).
            let list = lists[0];
            for (j, (slot, count)) in list.iter().enumerate() {
                if j + AHEAD < list.len() {
                    self.prefetch_stat(list.slot(j + AHEAD) as usize, Segment::sizes, &self.sizes);
                }
                if self.is_alive(slot as usize) {
                    let tf = if count < u8::MAX {
                        u32::from(count)
                    } else {
                        self.frequency(slot, &finder)
                    };
                    out.push(slot, tf, self.size(slot as usize));
                }
            }
            return out;
        }
        lists.sort_by_key(List::len);
        let (drive, others) = lists.split_first().expect("non-empty");
        // Every other list is probed: a probe reads posting arrays in ascending order, while a
        // false candidate costs a read of its text at a random place.
        let mut cursors = vec![0usize; others.len()];
        let mut candidates: Vec<u32> = Vec::new();
        'rows: for (slot, _) in drive.iter() {
            if !self.is_alive(slot as usize) {
                continue;
            }
            for (list, pos) in others.iter().zip(cursors.iter_mut()) {
                if !gallop(list, pos, slot) {
                    continue 'rows;
                }
            }
            candidates.push(slot);
        }
        self.verify(&candidates, &finder, &mut out);
        out
    }

    /// The candidates' frequencies (their texts searched), the matching ones pushed to `out`.
    ///
    /// Each candidate of the segment costs three dependent reads at random places (its column
    /// range, the column's offset, the text) and one for its size; they are requested
    /// `AHEAD` candidates early, one level per stage, so the loads overlap instead of each
    /// waiting for memory in turn.
    fn verify(&self, candidates: &[u32], finder: &Finder<'_>, out: &mut Phrase) {
        let ahead = |i: usize, stage| {
            if let (Some(b), Some(&slot)) = (&self.base, candidates.get(i)) {
                if (slot as usize) < b.rows() {
                    b.prefetch(slot as usize, stage);
                }
            }
        };
        for i in 0..AHEAD * 3 {
            ahead(i, i / AHEAD);
        }
        for (i, &slot) in candidates.iter().enumerate() {
            ahead(i + AHEAD * 3, 0);
            ahead(i + AHEAD * 2, 1);
            ahead(i + AHEAD, 2);
            let tf = self.frequency(slot, finder);
            if tf > 0 {
                out.push(slot, tf, self.size(slot as usize));
            }
        }
    }

    /// Occurrences of a phrase in one row, over its columns.
    fn frequency(&self, slot: u32, finder: &Finder<'_>) -> u32 {
        let s = slot as usize;
        match &self.base {
            Some(b) if s < b.rows() => b.columns(s).map(|c| occurrences(finder, c)).sum(),
            _ => self.slots[s - self.nb()]
                .columns
                .iter()
                .map(|c| occurrences(finder, c.as_bytes()))
                .sum(),
        }
    }

    /// The top `limit` rows of `scope` matching any of `terms` (already-folded query phrases,
    /// in query order), as `(id, bm25)` ordered by bm25 ascending then id ascending: what
    /// `ORDER BY bm25(fts), id LIMIT limit` returns over the FTS5 table joined to the scope.
    ///
    /// `MaxScore`: phrases are taken by their best possible contribution, largest first, each
    /// adding to every row in scope it matches; once the `limit`-th best partial score beats
    /// what all the phrases left could add, rows not yet seen cannot reach the top, and the
    /// remaining phrases only complete the rows already seen (by lookup when those are few).
    /// The rows that can still be in the top are then scored exactly, phrase by phrase in
    /// query order as FTS5 sums them.
    #[must_use]
    pub fn search(&self, terms: &[String], scope: &Scope, limit: usize) -> Vec<(i64, f64)> {
        let n_row = self.live() as i64;
        if limit == 0 || n_row == 0 || terms.is_empty() {
            return Vec::new();
        }
        let phrases: Vec<Arc<Phrase>> = terms.iter().map(|t| self.phrase(t)).collect();
        let avgdl = self.live_tokens as f64 / n_row as f64;
        let idfs: Vec<f64> = phrases.iter().map(|p| idf(n_row, p.hits)).collect();
        let bound = |i: usize| {
            let p = &phrases[i];
            contribution(idfs[i], p.max_tf, p.min_size, avgdl)
        };
        let mut order: Vec<usize> = (0..phrases.len())
            .filter(|&i| phrases[i].hits > 0)
            .collect();
        order.sort_by(|&a, &b| bound(b).total_cmp(&bound(a)));
        let mut rest: f64 = order.iter().map(|&i| bound(i)).sum();

        let mut scratch = self.scratch();
        let Scratch { seen, partial } = &mut scratch;
        // Every slot whose `seen` is set: what is zeroed again before the scratch goes back.
        let mut marked: Vec<u32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        let mut next = 0;
        while next < order.len() {
            if touched.len() >= limit && kth_largest(&touched, partial, limit) > rest * SAFETY {
                break;
            }
            let i = order[next];
            let p = &phrases[i];
            for (j, (slot, tf, size)) in p.rows().enumerate() {
                if let Some(&ahead) = p.slots.get(j + AHEAD) {
                    // The rows' scratch entries and agents are read at random places.
                    let ahead = ahead as usize;
                    prefetch(seen.get(ahead));
                    prefetch(partial.get(ahead));
                    self.prefetch_stat(ahead, Segment::agents, &self.agents);
                }
                let s = slot as usize;
                match seen[s] {
                    0 => {
                        let ok = self.is_alive(s) && self.in_scope(s, scope);
                        seen[s] = if ok { 1 } else { 2 };
                        marked.push(slot);
                        if !ok {
                            continue;
                        }
                        touched.push(slot);
                    }
                    2 => continue,
                    _ => {}
                }
                partial[s] += contribution(idfs[i], tf, size, avgdl);
            }
            rest -= bound(i);
            next += 1;
        }
        // In slot order, so each lookup below gallops on from the last instead of a binary
        // search over the whole list (at 1,000,000 rows twenty reads at random places each).
        touched.sort_unstable();
        for &i in &order[next..] {
            let p = &phrases[i];
            if touched.len().saturating_mul(16) < p.slots.len() {
                let list = List::of(&p.slots);
                let mut pos = 0;
                for &slot in &touched {
                    if gallop(&list, &mut pos, slot) {
                        let size = u64::from(p.sizes[pos]);
                        partial[slot as usize] += contribution(idfs[i], p.tfs[pos], size, avgdl);
                    }
                }
            } else {
                for (slot, tf, size) in p.rows() {
                    let s = slot as usize;
                    if seen[s] == 1 {
                        partial[s] += contribution(idfs[i], tf, size, avgdl);
                    }
                }
            }
        }
        // `partial` now holds each seen row's whole score, summed in another order than
        // FTS5's: keep every row within rounding of the limit-th, then score those exactly.
        if touched.len() > limit {
            let kth = kth_largest(&touched, partial, limit);
            touched.retain(|&s| partial[s as usize] >= kth / SAFETY);
        }
        for &slot in &marked {
            seen[slot as usize] = 0;
            partial[slot as usize] = 0.0;
        }
        self.give_back(scratch);
        let mut ranked: Vec<(i64, f64)> = touched
            .iter()
            .map(|&slot| {
                let s = slot as usize;
                let mut sum = 0.0f64;
                for (i, p) in phrases.iter().enumerate() {
                    if let Some(tf) = p.tf_of(slot) {
                        sum += contribution(idfs[i], tf, self.size(s), avgdl);
                    }
                }
                (self.id_at(s), -sum)
            })
            .collect();
        let by_rank = |a: &(i64, f64), b: &(i64, f64)| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0));
        ranked.sort_unstable_by(by_rank);
        ranked.truncate(limit);
        ranked
    }

    /// Whether slot `s` is in the scope; reads only the parts the scope restricts (each is
    /// another array of the segment, and a read of it one more cache miss per row).
    fn in_scope(&self, s: usize, scope: &Scope) -> bool {
        if self.agent(s) != scope.agent {
            return false;
        }
        let field = |base: fn(&Segment) -> &[u64], heap: fn(&RowMeta) -> u64| match &self.base {
            Some(b) if s < b.rows() => base(b)[s],
            _ => heap(&self.slots[s - self.nb()].meta),
        };
        let admits = |set: &HashSet64, base, heap| set.is_all() || set.admits(field(base, heap));
        admits(&scope.projects, Segment::projects, |m| m.project)
            && admits(&scope.channels, Segment::channels, |m| m.channel)
            && admits(&scope.sources, Segment::sources, |m| m.source)
            && (scope.times.is_all() || scope.times.admits(self.meta_of(s).time))
    }

    /// A cache hint for slot `s`'s entry of a per-row array (`base` of the segment's rows,
    /// `heap` of the delta's).
    fn prefetch_stat(&self, s: usize, base: fn(&Segment) -> &[u64], heap: &[u64]) {
        match &self.base {
            Some(b) if s < b.rows() => prefetch(base(b).get(s)),
            _ => prefetch(heap.get(s - self.nb())),
        }
    }

    /// A search's per-slot scratch, all zero: one kept from an earlier search, else new.
    fn scratch(&self) -> Scratch {
        let kept = self
            .scratch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut scratch = kept.unwrap_or_default();
        let n = self.total_slots();
        scratch.seen.resize(n, 0);
        scratch.partial.resize(n, 0.0);
        scratch
    }

    /// Keep a search's scratch (zeroed again by it) for the next search.
    fn give_back(&self, scratch: Scratch) {
        self.scratch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(scratch);
    }
}

/// Relative margin between a bound and a sum of floating-point terms (each term is a few
/// roundings off its exact value, ~1e-16 relative; the margin is far above that).
const SAFETY: f64 = 1.0 + 1e-9;

/// FTS5's IDF of a phrase found in `n_hit` of `n_row` rows.
fn idf(n_row: i64, n_hit: i64) -> f64 {
    let idf = (((n_row - n_hit) as f64 + 0.5) / (n_hit as f64 + 0.5)).ln();
    if idf <= 0.0 {
        1e-6
    } else {
        idf
    }
}

/// One phrase's term of FTS5's bm25 sum, written as FTS5 writes it so the doubles agree.
#[inline]
fn contribution(idf: f64, tf: u32, size: u64, avgdl: f64) -> f64 {
    let freq = f64::from(tf);
    let d = size as f64;
    idf * ((freq * (K1 + 1.0)) / (freq + K1 * (1.0 - B + B * d / avgdl)))
}

/// The `k`-th largest of `scores` over `slots` (`slots.len() >= k >= 1`).
fn kth_largest(slots: &[u32], scores: &[f64], k: usize) -> f64 {
    let mut values: Vec<f64> = slots.iter().map(|&s| scores[s as usize]).collect();
    let (_, kth, _) = values.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    *kth
}

/// Advance `pos` in the ascending `list` to the first entry >= `target`; whether it is `target`.
fn gallop(list: &List<'_>, pos: &mut usize, target: u32) -> bool {
    let mut lo = *pos;
    let len = list.len();
    if lo >= len {
        return false;
    }
    if list.slot(lo) < target {
        let mut step = 1usize;
        let mut hi = lo + 1;
        while hi < len && list.slot(hi) < target {
            lo = hi;
            step *= 2;
            hi = lo + step;
        }
        let mut hi = hi.min(len);
        // Binary search in [lo, hi): list[lo] < target.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if list.slot(mid) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
    }
    *pos = lo;
    lo < len && list.slot(lo) == target
}

/// Each change record is its body's length, then the body: a put's or a delete's fields.
pub const RECORD_LENGTH: Elem = Elem::U32;
/// The `op` of a put (the row as it is now) and of a delete (the row is gone).
pub const OP_PUT: u8 = 1;
pub const OP_DELETE: u8 = 2;
/// A put's fixed fields in order; `columns` texts follow, each `COLUMN_LENGTH` bytes then UTF-8.
pub const PUT_FIELDS: [(&str, Elem); 9] = [
    ("op", Elem::U8),
    ("id", Elem::I64),
    ("agent", Elem::U64),
    ("project", Elem::U64),
    ("channel", Elem::U64),
    ("source", Elem::U64),
    ("key", Elem::I64),
    ("time", Elem::I64),
    ("columns", Elem::U8),
];
pub const COLUMN_LENGTH: Elem = Elem::U32;
pub const DELETE_FIELDS: [(&str, Elem); 2] = [("op", Elem::U8), ("id", Elem::I64)];

/// Parse change records (the file format of docs/fts-index.md; `PUT_FIELDS`, `DELETE_FIELDS`).
///
/// # Errors
/// `Corrupt` when a record is cut short or malformed.
pub fn parse_records(bytes: &[u8]) -> Result<Vec<Record>, CoreError> {
    let mut out = Vec::new();
    let mut r = Reader { bytes, pos: 0 };
    while r.pos < bytes.len() {
        let len = r.u32()? as usize;
        let end = r.pos.checked_add(len).filter(|&e| e <= bytes.len());
        let Some(end) = end else {
            return Err(corrupt("a record runs past the end"));
        };
        let op = r.u8()?;
        let id = r.u64()? as i64;
        let record = match op {
            OP_PUT => {
                let agent = r.u64()?;
                let project = r.u64()?;
                let channel = r.u64()?;
                let source = r.u64()?;
                let key = r.u64()? as i64;
                let time = r.u64()? as i64;
                let ncols = r.u8()?;
                let mut columns = Vec::with_capacity(usize::from(ncols));
                for _ in 0..ncols {
                    let n = r.u32()? as usize;
                    let raw = r.take(n)?;
                    let text =
                        std::str::from_utf8(raw).map_err(|_| corrupt("text is not UTF-8"))?;
                    columns.push(text.to_string());
                }
                Record::Put(Doc {
                    id,
                    meta: RowMeta {
                        agent,
                        project,
                        channel,
                        source,
                        key,
                        time,
                    },
                    columns,
                })
            }
            OP_DELETE => Record::Delete(id),
            _ => return Err(corrupt("unknown record type")),
        };
        if r.pos != end {
            return Err(corrupt("a record's length disagrees with its fields"));
        }
        out.push(record);
    }
    Ok(out)
}

fn corrupt(msg: &str) -> CoreError {
    CoreError::CorruptFullText(msg.to_owned())
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CoreError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| corrupt("a record is cut short"))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, CoreError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, CoreError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, CoreError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::HashSet64;

    fn doc(id: i64, text: &str) -> Record {
        Record::Put(Doc {
            id,
            meta: RowMeta {
                agent: 7,
                time: id,
                ..RowMeta::default()
            },
            columns: vec![text.to_string()],
        })
    }

    fn scope() -> Scope {
        Scope {
            agent: 7,
            projects: HashSet64::new(&[]),
            channels: HashSet64::new(&[]),
            sources: HashSet64::new(&[]),
            times: crate::scan::TimeRange::ALL,
        }
    }

    #[test]
    fn matches_substrings_case_insensitively_and_orders_by_score_then_id() {
        let mut ix = FtsIndex::new();
        ix.apply(vec![
            doc(1, "Hello world"),
            doc(2, "say hello hello"),
            doc(3, "nothing"),
            doc(4, "xyz"),
        ]);
        let hits = ix.search(&["hello".into()], &scope(), 10);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![2, 1]);
        assert!(hits[0].1 < hits[1].1);
        ix.apply(vec![Record::Delete(2), doc(1, "bye")]);
        assert!(ix.search(&["hello".into()], &scope(), 10).is_empty());
        assert_eq!(ix.live(), 3);
    }

    #[test]
    fn records_round_trip_and_reject_truncation() {
        let mut bytes = Vec::new();
        let body: Vec<u8> = [vec![2u8], 5i64.to_le_bytes().to_vec()].concat();
        bytes.extend((body.len() as u32).to_le_bytes());
        bytes.extend(&body);
        assert_eq!(parse_records(&bytes).unwrap(), vec![Record::Delete(5)]);
        assert!(parse_records(&bytes[..bytes.len() - 1]).is_err());
    }

    /// A record written field by field from a declaration, each field's value looked up by name.
    fn declared_record(
        fields: &[(&str, Elem)],
        value: impl Fn(&str) -> u64,
        tail: &[u8],
    ) -> Vec<u8> {
        let mut body: Vec<u8> = Vec::new();
        for &(name, elem) in fields {
            body.extend(&value(name).to_le_bytes()[..elem.size()]);
        }
        body.extend(tail);
        let mut out = (body.len() as u32).to_le_bytes()[..RECORD_LENGTH.size()].to_vec();
        out.extend(body);
        out
    }

    #[test]
    fn the_parser_reads_the_declared_fields() {
        let put = |name: &str| match name {
            "op" => u64::from(OP_PUT),
            "id" => 3,
            "agent" => 11,
            "project" => 12,
            "channel" => 13,
            "source" => 14,
            "key" => 15,
            "time" => (-16i64) as u64,
            "columns" => 2,
            other => panic!("a put field the test does not know: {other}"),
        };
        let mut tail = Vec::new();
        for text in ["ab", "cde"] {
            tail.extend(&(text.len() as u32).to_le_bytes()[..COLUMN_LENGTH.size()]);
            tail.extend(text.as_bytes());
        }
        let mut bytes = declared_record(&PUT_FIELDS, put, &tail);
        let delete = |name: &str| {
            if name == "op" {
                u64::from(OP_DELETE)
            } else {
                9
            }
        };
        bytes.extend(declared_record(&DELETE_FIELDS, delete, &[]));
        let want = Doc {
            id: 3,
            meta: RowMeta {
                agent: 11,
                project: 12,
                channel: 13,
                source: 14,
                key: 15,
                time: -16,
            },
            columns: vec!["ab".into(), "cde".into()],
        };
        assert_eq!(
            parse_records(&bytes).unwrap(),
            vec![Record::Put(want), Record::Delete(9)]
        );
    }

    /// Every matching row scored in full, phrase by phrase in query order: the search
    /// without `MaxScore`, for the property below.
    fn brute_force(
        ix: &FtsIndex,
        terms: &[String],
        scope: &Scope,
        limit: usize,
    ) -> Vec<(i64, f64)> {
        let n_row = ix.live() as i64;
        let avgdl = ix.total_tokens() as f64 / n_row as f64;
        let phrases: Vec<Phrase> = terms.iter().map(|t| ix.compute_phrase(t)).collect();
        let mut out = Vec::new();
        for id in ix.ids() {
            let s = ix.slot_of(id).unwrap();
            if !scope.times.admits(ix.meta_of(s).time) {
                continue;
            }
            let mut total = 0.0;
            let mut any = false;
            for p in &phrases {
                if let Some(tf) = p.tf_of(s as u32) {
                    any = true;
                    total += contribution(idf(n_row, p.hits), tf, ix.size(s), avgdl);
                }
            }
            if any {
                out.push((id, -total));
            }
        }
        out.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        out.truncate(limit);
        out
    }

    proptest::proptest! {
        #[test]
        fn maxscore_returns_the_full_scoring_top(
            docs in proptest::collection::vec(proptest::collection::vec(0usize..12, 0..30), 1..120),
            deletes in proptest::collection::vec(0i64..120, 0..20),
            query in proptest::collection::vec(0usize..12, 1..6),
            limit in 1usize..12,
            times in proptest::option::of((0i64..120, 0i64..120)),
        ) {
            const WORDS: [&str; 12] = [
                "the", "then", "hen", "maybe", "aaa", "aaaa", "rare", "zebra", "when", "xyz",
                "東京都", "thé",
            ];
            let mut ix = FtsIndex::new();
            let records = docs.iter().enumerate().map(|(i, words)| {
                let text: Vec<&str> = words.iter().map(|&w| WORDS[w]).collect();
                doc(i as i64, &text.join(" "))
            }).collect();
            ix.apply(records);
            ix.apply(deletes.into_iter().map(Record::Delete).collect());
            let terms: Vec<String> = query.iter().map(|&w| WORDS[w].to_string()).collect();
            let mut scope = scope();
            if let Some((lo, len)) = times {
                scope.times = crate::scan::TimeRange { lo, hi: lo + len };
            }
            if ix.live() > 0 {
                proptest::prop_assert_eq!(ix.search(&terms, &scope, limit), brute_force(&ix, &terms, &scope, limit));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// A segment of the first records plus a delta of the rest answers as one heap index
        /// of all of them: same ids, same bm25 doubles, same rows.
        #[test]
        fn segment_plus_delta_equals_one_index(
            docs in proptest::collection::vec((0i64..60, proptest::collection::vec(0usize..8, 0..12)), 1..80),
            split in 0usize..80,
            deletes in proptest::collection::vec(0i64..60, 0..10),
            query in proptest::collection::vec(0usize..8, 1..4),
            limit in 1usize..10,
        ) {
            const WORDS: [&str; 8] = ["the", "then", "hen", "aaaa", "rare", "zebra", "東京都", "thé"];
            let records: Vec<Record> = docs.iter().map(|(id, words)| {
                let text: Vec<&str> = words.iter().map(|&w| WORDS[w]).collect();
                doc(*id, &text.join(" "))
            }).chain(deletes.into_iter().map(Record::Delete)).collect();
            let split = split.min(records.len());
            let mut whole = FtsIndex::new();
            whole.apply(records.clone());
            let mut first = FtsIndex::new();
            first.apply(records[..split].to_vec());
            let path = std::env::temp_dir().join(format!(
                "cpersona-seg-test-{}-{:?}", std::process::id(), std::thread::current().id()));
            first.write_segment(&path, Meta::default()).unwrap();
            let mut mapped = FtsIndex::mapped(Segment::open(&path).unwrap());
            std::fs::remove_file(&path).unwrap();
            mapped.apply(records[split..].to_vec());
            let terms: Vec<String> = query.iter().map(|&w| WORDS[w].to_string()).collect();
            proptest::prop_assert_eq!(mapped.live(), whole.live());
            proptest::prop_assert_eq!(mapped.ids(), whole.ids());
            proptest::prop_assert_eq!(mapped.total_tokens(), whole.total_tokens());
            for id in whole.ids() {
                let (a, b) = (mapped.row(id).unwrap(), whole.row(id).unwrap());
                proptest::prop_assert_eq!((a.meta, a.columns), (b.meta, b.columns));
            }
            proptest::prop_assert_eq!(mapped.search(&terms, &scope(), limit), whole.search(&terms, &scope(), limit));
            // And a segment written from the segment + delta (compaction) answers the same.
            mapped.write_segment(&path, Meta::default()).unwrap();
            let again = FtsIndex::mapped(Segment::open(&path).unwrap());
            std::fs::remove_file(&path).unwrap();
            proptest::prop_assert_eq!(again.search(&terms, &scope(), limit), whole.search(&terms, &scope(), limit));
            proptest::prop_assert_eq!(again.ids(), whole.ids());
        }
    }

    #[test]
    fn a_damaged_segment_is_refused() {
        let mut ix = FtsIndex::new();
        ix.apply(vec![doc(1, "hello world"), doc(2, "other text")]);
        let path = std::env::temp_dir().join(format!("cpersona-seg-damage-{}", std::process::id()));
        ix.write_segment(&path, Meta::default()).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(bytes.len() - 8);
        std::fs::write(&path, &bytes).unwrap();
        assert!(Segment::open(&path).is_err());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn gallop_finds_members() {
        let list = List {
            a: &[1u32, 3, 5, 7],
            a_counts: &[1; 4],
            b: &[9, 11, 13],
            b_counts: &[1; 3],
        };
        let list = &list;
        let mut pos = 0;
        assert!(gallop(list, &mut pos, 5));
        assert!(!gallop(list, &mut pos, 6));
        assert!(gallop(list, &mut pos, 13));
        assert!(!gallop(list, &mut pos, 14));
    }
}
