//! A `SentencePiece` unigram tokenizer: per-character normalisation, then the most probable split.
//!
//! It reads the tables that ship with a model (pieces, their log-probabilities and a map of
//! characters to their normalised replacements), so it holds no vocabulary of its own. The split
//! is the Viterbi path over the characters of the normalised text: among all ways to cut it into
//! known pieces, the one whose scores sum highest; a character no piece covers becomes one
//! `unk` token scored `min(score) - 10` (`SentencePiece`'s penalty). Ties keep the path found
//! first, scanning starts and then ends left to right, with sums in `f32`: the engine the model
//! was packaged with does the same, and a different tie rule would change token ids.

use std::collections::HashMap;

use crate::error::CoreError;

/// The metaspace marker that stands for a space inside pieces.
const META: char = '\u{2581}';
/// `SentencePiece`'s score penalty for an unknown character, below the worst known piece.
const UNK_PENALTY: f32 = 10.0;

/// A loaded vocabulary and normaliser; `encode` is safe to call from many threads at once.
pub struct Unigram {
    /// Piece bytes, back to back; piece `i` is `blob[offsets[i]..offsets[i + 1]]`.
    blob: Vec<u8>,
    offsets: Vec<u32>,
    scores: Vec<f32>,
    /// Open-addressing table of piece ids + 1 (0 = empty), indexed by `hash(bytes) & mask`:
    /// one allocation for a 250,000-piece vocabulary instead of one per piece.
    slots: Vec<u32>,
    mask: usize,
    /// One bit per hash of every byte prefix of every piece: a clear bit proves that no piece
    /// starts with a span, so the split stops extending it (most spans end after a few
    /// characters instead of at the longest piece's length).
    prefixes: Vec<u64>,
    max_piece_bytes: usize,
    unk_id: u32,
    unk_score: f32,
    /// Character -> its replacement (possibly empty: the character is dropped).
    norm: HashMap<char, Box<[char]>>,
}

impl Unigram {
    /// Builds the tokenizer from the model's tables.
    ///
    /// `blob[offsets[i]..offsets[i + 1]]` is the UTF-8 text of piece `i`, scored `scores[i]`.
    /// Character `norm_cp[j]` normalises to the characters `norm_out[norm_off[j]..norm_off[j +
    /// 1]]`.
    ///
    /// # Errors
    /// `InvalidArgument` when the tables are inconsistent (lengths, ranges, ids, code points).
    pub fn new(
        blob: &[u8],
        offsets: &[u32],
        scores: &[f32],
        unk_id: u32,
        norm_cp: &[u32],
        norm_off: &[u32],
        norm_out: &[u32],
    ) -> Result<Self, CoreError> {
        let invalid = |msg: &str| CoreError::InvalidArgument(msg.to_string());
        if offsets.len() != scores.len() + 1 {
            return Err(invalid("offsets must hold one more entry than scores"));
        }
        if unk_id as usize >= scores.len() {
            return Err(invalid("unk_id is not a piece id"));
        }
        let mut max_piece_bytes = 1;
        for bounds in offsets.windows(2) {
            let (start, end) = (bounds[0] as usize, bounds[1] as usize);
            if start > end || end > blob.len() {
                return Err(invalid("piece offsets must rise within the blob"));
            }
            max_piece_bytes = max_piece_bytes.max(end - start);
        }
        let capacity = (scores.len() * 2).next_power_of_two().max(2);
        let mut table = Self {
            blob: blob.to_vec(),
            offsets: offsets.to_vec(),
            scores: scores.to_vec(),
            slots: vec![0; capacity],
            mask: capacity - 1,
            prefixes: vec![0; PREFIX_BITS / 64],
            max_piece_bytes,
            unk_id,
            unk_score: 0.0,
            norm: HashMap::new(),
        };
        // Pieces are read from the caller's tables: `table` is being filled.
        let piece_of = |id: usize| &blob[offsets[id] as usize..offsets[id + 1] as usize];
        for id in 0..scores.len() {
            let piece = piece_of(id);
            if piece.is_empty() {
                continue; // an empty piece can never match
            }
            let mut h = FNV_OFFSET;
            for &b in piece {
                h = fnv_step(h, b);
                let bit = prefix_bit(h);
                table.prefixes[bit / 64] |= 1 << (bit % 64);
            }
            let mut slot = h as usize & table.mask;
            loop {
                match table.slots[slot] {
                    0 => {
                        table.slots[slot] = id as u32 + 1;
                        break;
                    }
                    // The first of duplicate pieces wins.
                    taken if piece_of(taken as usize - 1) == piece => break,
                    _ => slot = (slot + 1) & table.mask,
                }
            }
        }
        table.unk_score = scores.iter().copied().fold(f32::INFINITY, f32::min) - UNK_PENALTY;
        if norm_off.len() != norm_cp.len() + 1 {
            return Err(invalid("norm_off must hold one more entry than norm_cp"));
        }
        let to_char = |cp: u32| char::from_u32(cp).ok_or_else(|| invalid("bad code point"));
        let mut norm = HashMap::with_capacity(norm_cp.len());
        for (&cp, bounds) in norm_cp.iter().zip(norm_off.windows(2)) {
            let (start, end) = (bounds[0] as usize, bounds[1] as usize);
            if start > end || end > norm_out.len() {
                return Err(invalid("norm offsets must rise within norm_out"));
            }
            let out = norm_out[start..end]
                .iter()
                .map(|&c| to_char(c))
                .collect::<Result<Box<[char]>, _>>()?;
            norm.insert(to_char(cp)?, out);
        }
        table.norm = norm;
        Ok(table)
    }

    fn piece(&self, id: usize) -> &[u8] {
        &self.blob[self.offsets[id] as usize..self.offsets[id + 1] as usize]
    }

    /// Whether some piece may start with the bytes hashed to `h` (never false when one does).
    fn may_prefix(&self, h: u64) -> bool {
        let bit = prefix_bit(h);
        self.prefixes[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// The id and score of the piece spelled `bytes` (FNV-1a hash `h`), if any.
    fn lookup(&self, h: u64, bytes: &[u8]) -> Option<(u32, f32)> {
        let mut slot = h as usize & self.mask;
        loop {
            match self.slots[slot] {
                0 => return None,
                taken if self.piece(taken as usize - 1) == bytes => {
                    let id = taken - 1;
                    return Some((id, self.scores[id as usize]));
                }
                _ => slot = (slot + 1) & self.mask,
            }
        }
    }

    /// The normalised text the split runs over: characters mapped, runs of spaces collapsed to
    /// one, a leading space added unless there is one, and every space written as U+2581.
    #[must_use]
    pub fn normalize(&self, text: &str) -> String {
        let mut chars: Vec<char> = Vec::with_capacity(text.len() + 1);
        for c in text.chars() {
            match self.norm.get(&c) {
                Some(out) => {
                    for &o in out {
                        push_collapsed(&mut chars, o);
                    }
                }
                None => push_collapsed(&mut chars, c),
            }
        }
        let mut out = String::with_capacity(text.len() + 4);
        if chars.first() != Some(&' ') {
            out.push(META);
        }
        out.extend(chars.iter().map(|&c| if c == ' ' { META } else { c }));
        out
    }

    /// The piece ids of `text`, without the model's start and end tokens.
    #[must_use]
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let normalized = self.normalize(text);
        let bytes = normalized.as_bytes();
        // Byte offset of every character start, and the end.
        let mut starts: Vec<usize> = normalized.char_indices().map(|(i, _)| i).collect();
        starts.push(bytes.len());
        let n = starts.len() - 1;
        let mut best = vec![f32::NEG_INFINITY; n + 1];
        let mut piece = vec![self.unk_id; n + 1];
        let mut from = vec![0usize; n + 1];
        best[0] = 0.0;
        for i in 0..n {
            let here = best[i];
            if here == f32::NEG_INFINITY {
                continue;
            }
            let mut h = FNV_OFFSET;
            for e in i + 1..=n {
                let span = &bytes[starts[i]..starts[e]];
                if span.len() > self.max_piece_bytes {
                    break;
                }
                for &b in &bytes[starts[e - 1]..starts[e]] {
                    h = fnv_step(h, b);
                }
                if !self.may_prefix(h) {
                    break;
                }
                if let Some((id, score)) = self.lookup(h, span) {
                    let total = here + score;
                    if id != self.unk_id && total > best[e] {
                        best[e] = total;
                        piece[e] = id;
                        from[e] = i;
                    }
                }
            }
            let total = here + self.unk_score;
            if total > best[i + 1] {
                best[i + 1] = total;
                piece[i + 1] = self.unk_id;
                from[i + 1] = i;
            }
        }
        let mut ids = Vec::with_capacity(n);
        let mut at = n;
        while at > 0 {
            ids.push(piece[at]);
            at = from[at];
        }
        ids.reverse();
        ids
    }
}

/// FNV-1a, byte by byte, so a span's hash extends as the span grows: short keys, no
/// allocation, and good enough spread for a table kept half empty.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// Bits of the prefix filter: 8 Mi (1 MiB) for about 2 Mi prefixes of a 250,000-piece vocabulary.
const PREFIX_BITS: usize = 1 << 23;

fn fnv_step(h: u64, byte: u8) -> u64 {
    (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
}

/// The filter uses the hash's high bits; the piece table its low ones.
fn prefix_bit(h: u64) -> usize {
    (h >> 40) as usize % PREFIX_BITS
}

fn push_collapsed(chars: &mut Vec<char>, c: char) {
    if !(c == ' ' && chars.last() == Some(&' ')) {
        chars.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces: ▁ab (-1), ▁a (-2), b (-2), a (-3), ▁ (-4), <unk> (0); "é" normalises to "e".
    fn small() -> Unigram {
        let pieces = [
            "<unk>",
            "\u{2581}ab",
            "\u{2581}a",
            "b",
            "a",
            "\u{2581}",
            "e",
        ];
        let scores = [0.0, -1.0, -2.0, -2.0, -3.0, -4.0, -1.0];
        let mut blob = Vec::new();
        let mut offsets = vec![0u32];
        for p in pieces {
            blob.extend_from_slice(p.as_bytes());
            offsets.push(blob.len() as u32);
        }
        Unigram::new(
            &blob,
            &offsets,
            &scores,
            0,
            &['é' as u32],
            &[0, 1],
            &['e' as u32],
        )
        .unwrap()
    }

    #[test]
    fn best_split_wins() {
        let t = small();
        assert_eq!(t.encode("ab"), vec![1]); // ▁ab (-1) beats ▁a + b (-4)
        assert_eq!(t.encode("ba"), vec![5, 3, 4]);
    }

    #[test]
    fn spaces_collapse_and_unknowns_are_unk() {
        let t = small();
        assert_eq!(t.normalize("a   b"), "\u{2581}a\u{2581}b");
        assert_eq!(t.normalize(" a"), "\u{2581}a");
        assert_eq!(t.encode("az"), vec![2, 0]);
        assert_eq!(t.encode("é"), vec![5, 6]);
        assert_eq!(t.encode(""), vec![5]);
    }

    #[test]
    fn inconsistent_tables_are_refused() {
        assert!(Unigram::new(b"ab", &[0, 3], &[0.0], 0, &[], &[0], &[]).is_err());
        assert!(Unigram::new(b"ab", &[0, 2], &[0.0], 1, &[], &[0], &[]).is_err());
        assert!(Unigram::new(b"ab", &[0, 2], &[0.0], 0, &[0xD800], &[0, 0], &[]).is_err());
    }
}
