//! The text rules of `SQLite`'s FTS5 trigram tokenizer (case folding on, no diacritic removal),
//! as this crate reproduces them.
//!
//! A column's tokens are every window of three consecutive code points of its folded text, the
//! text being cut at its first NUL (the tokenizer stops there). A query phrase matches where its
//! folded code points occur as a substring, and each occurrence (overlapping ones included) is
//! one phrase instance. So the index keeps each column's folded text as UTF-8 and matches bytes:
//! UTF-8 is self-synchronising, so a byte match of a whole folded term is a code point match.

use super::fold_table::FOLD;

/// The code point the tokenizer folds `c` to (measured from `SQLite`: `tools/gen_fold_table.py`).
#[must_use]
pub fn fold_char(c: u32) -> u32 {
    if c < 128 {
        return if (u32::from(b'A')..=u32::from(b'Z')).contains(&c) {
            c + 32
        } else {
            c
        };
    }
    match FOLD.binary_search_by_key(&c, |&(from, _)| from) {
        Ok(i) => FOLD[i].1,
        Err(_) => c,
    }
}

/// `text` folded, cut at its first NUL, and its number of code points.
#[must_use]
pub fn fold_text(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut n = 0usize;
    for ch in text.chars() {
        if ch == '\0' {
            break;
        }
        // Every folded value in the table is a scalar value, so this never falls back.
        out.push(char::from_u32(fold_char(ch as u32)).unwrap_or(ch));
        n += 1;
    }
    (out, n)
}

/// The tokens of a column of `chars` code points.
#[must_use]
pub fn token_count(chars: usize) -> u64 {
    chars.saturating_sub(2) as u64
}

/// The trigram keys of a folded text, in text order (duplicates included).
pub fn trigrams(folded: &str) -> impl Iterator<Item = u64> + '_ {
    let mut it = folded.chars().map(|c| u64::from(c as u32));
    let mut a = it.next();
    let mut b = it.next();
    std::iter::from_fn(move || {
        let c = it.next()?;
        let key = (a? << 42) | (b? << 21) | c;
        a = b;
        b = Some(c);
        Some(key)
    })
}

/// Occurrences of `needle` in `hay`, overlapping ones included.
#[must_use]
pub fn occurrences(finder: &memchr::memmem::Finder<'_>, hay: &[u8]) -> u32 {
    let mut n = 0u32;
    let mut start = 0usize;
    while start < hay.len() {
        match finder.find(&hay[start..]) {
            Some(p) => {
                n += 1;
                // A folded term starts with a leading byte, so the next match cannot begin
                // inside this one's first character: one byte on is the next candidate.
                start += p + 1;
            }
            None => break,
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_ascii_and_table_entries() {
        assert_eq!(fold_text("AbC"), ("abc".to_string(), 3));
        assert_eq!(
            fold_char(0x0130),
            FOLD.iter().find(|p| p.0 == 0x0130).map_or(0x0130, |p| p.1)
        );
        assert_eq!(fold_char(0xFFFF), 0xFFFD);
        assert_eq!(fold_char(0x3042), 0x3042);
    }

    #[test]
    fn cuts_at_nul_and_counts_windows() {
        assert_eq!(fold_text("ab\0cd"), ("ab".to_string(), 2));
        assert_eq!(token_count(2), 0);
        assert_eq!(token_count(5), 3);
        assert_eq!(trigrams("abcd").count(), 2);
        assert_eq!(trigrams("ab").count(), 0);
    }

    #[test]
    fn counts_overlapping_occurrences() {
        let f = memchr::memmem::Finder::new("aaa");
        assert_eq!(occurrences(&f, b"aaaaa"), 3);
        let f = memchr::memmem::Finder::new("\u{3042}\u{3042}\u{3042}");
        assert_eq!(
            occurrences(&f, "\u{3042}\u{3042}\u{3042}\u{3042}".as_bytes()),
            2
        );
    }
}
