//! A byte-level BPE tokenizer, trained from a corpus.
//!
//! Tokens 0..256 are the bytes themselves, so any input can be encoded; each merge learned
//! in training adds one token, the concatenation of an adjacent pair. Text is first split
//! into pieces (a word with its leading space, a run of digits, punctuation, whitespace)
//! and merges never cross a piece boundary, as in GPT-2.
//!
//! Every decision is deterministic: pair-count ties go to the lowest pair of ids, and hash
//! maps (with a fixed FNV hasher) are only ever looked up, never iterated.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// The number of byte tokens, which are also the ids of the bytes.
pub const BYTE_TOKENS: usize = 256;
/// What `decode` writes for an id the vocabulary does not have: U+FFFD in UTF-8.
const UNKNOWN: &[u8] = "\u{FFFD}".as_bytes();

/// FNV-1a 64. Fixed, unlike std's randomly keyed default, so runs behave identically.
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xCBF2_9CE4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
}

pub type FnvBuildHasher = BuildHasherDefault<Fnv1a>;
type FnvMap<K, V> = HashMap<K, V, FnvBuildHasher>;
type Pair = (u32, u32);

pub struct Tokenizer {
    /// `merges[i]` is the pair that token `BYTE_TOKENS + i` stands for.
    merges: Vec<Pair>,
    /// Pair to the id of its merged token. A lower id was learned earlier and wins.
    ranks: FnvMap<Pair, u32>,
    /// Token `i` is `bytes[starts[i]..starts[i + 1]]`.
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

/// How often a pair occurs in the corpus and which distinct words it occurs in. The
/// word list can hold words the pair has since been merged out of; they are skipped.
#[derive(Default)]
struct PairStats {
    count: i64,
    words: Vec<u32>,
}

/// A heap entry: the largest count pops first, then the lowest pair.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    count: i64,
    pair: Reverse<Pair>,
}

impl Tokenizer {
    /// Just the 256 byte tokens.
    pub fn bytes_only() -> Self {
        Self {
            merges: Vec::new(),
            ranks: FnvMap::default(),
            bytes: (0..=255).collect(),
            starts: (0..=BYTE_TOKENS).collect(),
        }
    }

    /// Learns merges from `corpus` until the vocabulary has `vocab_size` tokens or no
    /// adjacent pair is left to merge. Each step merges the most frequent pair; among
    /// equally frequent pairs, the one with the lowest (first id, second id).
    pub fn train(corpus: &[u8], vocab_size: usize) -> Self {
        let mut tok = Self::bytes_only();
        if vocab_size <= BYTE_TOKENS {
            return tok;
        }

        // Distinct pieces in first-seen order, with how often each occurs.
        let mut seen: FnvMap<&[u8], usize> = FnvMap::default();
        let mut words: Vec<Vec<u32>> = Vec::new();
        let mut counts: Vec<i64> = Vec::new();
        for_each_piece(corpus, |piece| match seen.entry(piece) {
            Entry::Occupied(e) => counts[*e.get()] += 1,
            Entry::Vacant(e) => {
                e.insert(words.len());
                words.push(piece.iter().map(|&b| u32::from(b)).collect());
                counts.push(1);
            }
        });

        let mut stats: FnvMap<Pair, PairStats> = FnvMap::default();
        let mut order: Vec<Pair> = Vec::new();
        for (w, word) in words.iter().enumerate() {
            for pair in word.windows(2).map(|p| (p[0], p[1])) {
                let s = stats.entry(pair).or_insert_with(|| {
                    order.push(pair);
                    PairStats::default()
                });
                s.count += counts[w];
                note_word(&mut s.words, w);
            }
        }
        let mut heap: BinaryHeap<Candidate> = order
            .iter()
            .map(|&pair| Candidate {
                count: stats[&pair].count,
                pair: Reverse(pair),
            })
            .collect();

        let mut born: Vec<Pair> = Vec::new();
        while tok.vocab_size() < vocab_size {
            let Some(Candidate {
                count,
                pair: Reverse(pair),
            }) = heap.pop()
            else {
                break;
            };
            // Counts only ever fall after an entry is pushed, so a stale entry goes back
            // with its current count and the first up-to-date entry is the true maximum.
            let current = stats[&pair].count;
            if current != count {
                if current > 0 {
                    heap.push(Candidate {
                        count: current,
                        pair: Reverse(pair),
                    });
                }
                continue;
            }
            let id = tok.push_merge(pair);
            let affected = std::mem::take(&mut stats.get_mut(&pair).expect("counted").words);
            born.clear();
            for &w in &affected {
                let word = &mut words[w as usize];
                if !word.windows(2).any(|p| (p[0], p[1]) == pair) {
                    continue;
                }
                let c = counts[w as usize];
                for p in word.windows(2) {
                    stats.get_mut(&(p[0], p[1])).expect("counted").count -= c;
                }
                merge_pair(word, pair, id);
                for p in word.windows(2).map(|p| (p[0], p[1])) {
                    // Pairs without the new token were in the word before, which their
                    // lists already record. Pairs with it are new, and go on the heap
                    // once their counts over all words are known.
                    let s = stats.entry(p).or_insert_with(|| {
                        born.push(p);
                        PairStats::default()
                    });
                    s.count += c;
                    if p.0 == id || p.1 == id {
                        note_word(&mut s.words, w as usize);
                    }
                }
            }
            for &p in &born {
                heap.push(Candidate {
                    count: stats[&p].count,
                    pair: Reverse(p),
                });
            }
        }
        tok
    }

    fn push_merge(&mut self, pair: Pair) -> u32 {
        let id = u32::try_from(self.vocab_size()).expect("vocabulary fits in u32");
        for part in [pair.0, pair.1] {
            let (start, end) = self.span(part);
            self.bytes.extend_from_within(start..end);
        }
        self.starts.push(self.bytes.len());
        self.merges.push(pair);
        self.ranks.insert(pair, id);
        id
    }

    fn span(&self, id: u32) -> (usize, usize) {
        let i = id as usize;
        (self.starts[i], self.starts[i + 1])
    }

    pub fn vocab_size(&self) -> usize {
        self.starts.len() - 1
    }

    /// The learned merges, in the order they were learned.
    pub fn merges(&self) -> &[(u32, u32)] {
        &self.merges
    }

    /// The bytes of token `id`, or `None` outside the vocabulary.
    pub fn token(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        (i < self.vocab_size()).then(|| &self.bytes[self.starts[i]..self.starts[i + 1]])
    }

    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_bytes(text.as_bytes())
    }

    /// Splits `text` into pieces and applies, within each, the earliest-learned merge
    /// present until none applies: the segmentation training gave that piece.
    pub fn encode_bytes(&self, text: &[u8]) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut symbols = Vec::new();
        for_each_piece(text, |piece| {
            symbols.clear();
            symbols.extend(piece.iter().map(|&b| u32::from(b)));
            while symbols.len() > 1 {
                let mut best: Option<(u32, Pair)> = None;
                for p in symbols.windows(2) {
                    let pair = (p[0], p[1]);
                    if let Some(&id) = self.ranks.get(&pair) {
                        if best.is_none_or(|(b, _)| id < b) {
                            best = Some((id, pair));
                        }
                    }
                }
                let Some((id, pair)) = best else { break };
                merge_pair(&mut symbols, pair, id);
            }
            out.extend_from_slice(&symbols);
        });
        out
    }

    /// The bytes of `ids`; an id outside the vocabulary becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token(id).unwrap_or(UNKNOWN));
        }
        out
    }
}

/// Records that word `w` contains a pair. All of a word's pairs are noted before the
/// next word's, so checking the last entry is enough to avoid duplicates.
fn note_word(words: &mut Vec<u32>, w: usize) {
    let w = u32::try_from(w).expect("word count fits in u32");
    if words.last() != Some(&w) {
        words.push(w);
    }
}

/// Replaces each occurrence of `pair`, scanning left to right, with `id`.
fn merge_pair(symbols: &mut Vec<u32>, pair: Pair, id: u32) {
    let (mut read, mut write) = (0, 0);
    while read < symbols.len() {
        if read + 1 < symbols.len() && (symbols[read], symbols[read + 1]) == pair {
            symbols[write] = id;
            read += 2;
        } else {
            symbols[write] = symbols[read];
            read += 1;
        }
        write += 1;
    }
    symbols.truncate(write);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// ASCII letters and every non-ASCII byte, so UTF-8 sequences stay inside words.
    Letter,
    Digit,
    Space,
    Other,
}

fn class(b: u8) -> Class {
    match b {
        b'a'..=b'z' | b'A'..=b'Z' | 0x80..=0xFF => Class::Letter,
        b'0'..=b'9' => Class::Digit,
        b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C => Class::Space,
        _ => Class::Other,
    }
}

/// Longest run of digits kept in one piece, so numbers do not flood the vocabulary.
const MAX_DIGITS: usize = 3;

/// Calls `f` with each piece of `text`, in order; the pieces concatenate to `text`.
/// A piece is an optional single space followed by a run of letters, of up to three
/// digits or of other symbols; or a run of whitespace, less a final space that
/// belongs to the word after it.
fn for_each_piece<'t>(text: &'t [u8], mut f: impl FnMut(&'t [u8])) {
    let n = text.len();
    let mut i = 0;
    while i < n {
        let start = i;
        if text[i] == b' ' && i + 1 < n && class(text[i + 1]) != Class::Space {
            i += 1;
        }
        match class(text[i]) {
            Class::Space => {
                let mut end = i + 1;
                while end < n && class(text[end]) == Class::Space {
                    end += 1;
                }
                if end < n && end - i > 1 && text[end - 1] == b' ' {
                    end -= 1;
                }
                i = end;
            }
            Class::Digit => {
                let limit = (i + MAX_DIGITS).min(n);
                while i < limit && class(text[i]) == Class::Digit {
                    i += 1;
                }
            }
            c => {
                while i < n && class(text[i]) == c {
                    i += 1;
                }
            }
        }
        f(&text[start..i]);
    }
}

/// `text` as one printable ASCII line: printable ASCII stays, `\` `\n` `\r` `\t` get
/// backslash escapes, other control bytes `\xNN`, and every other character `\u{...}`.
/// Done by hand because `escape_debug` depends on the Unicode tables of the toolchain.
pub fn escape_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(ch),
            '\0'..='\x7f' => out.push_str(&format!("\\x{:02x}", u32::from(ch))),
            _ => out.push_str(&format!("\\u{{{:x}}}", u32::from(ch))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Language;
    use std::cmp::Ordering;

    /// Descending count, then ascending pair: the order merges are chosen in.
    fn by_priority(a: &(Pair, i64), b: &(Pair, i64)) -> Ordering {
        b.1.cmp(&a.1).then(a.0.cmp(&b.0))
    }

    /// The definition of encoding: every merge, in order, over each piece.
    fn reference_encode(tok: &Tokenizer, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for_each_piece(text.as_bytes(), |p| {
            let mut symbols: Vec<u32> = p.iter().map(|&b| u32::from(b)).collect();
            for (i, &pair) in tok.merges().iter().enumerate() {
                merge_pair(&mut symbols, pair, (BYTE_TOKENS + i) as u32);
            }
            out.extend(symbols);
        });
        out
    }

    fn prefix(s: &str, max: usize) -> &str {
        let cut = (0..=max.min(s.len()))
            .rev()
            .find(|&i| s.is_char_boundary(i));
        &s[..cut.unwrap()]
    }

    fn pieces(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for_each_piece(text.as_bytes(), |p| {
            out.push(std::str::from_utf8(p).unwrap())
        });
        out
    }

    /// Textbook BPE: recount every pair from scratch before each merge.
    fn reference_merges(corpus: &[u8], vocab_size: usize) -> Vec<Pair> {
        let mut words: Vec<Vec<u32>> = Vec::new();
        for_each_piece(corpus, |p| {
            words.push(p.iter().map(|&b| u32::from(b)).collect())
        });
        let mut merges = Vec::new();
        while BYTE_TOKENS + merges.len() < vocab_size {
            let mut counts: Vec<(Pair, i64)> = Vec::new();
            for word in &words {
                for p in word.windows(2) {
                    let pair = (p[0], p[1]);
                    match counts.iter_mut().find(|(q, _)| *q == pair) {
                        Some((_, c)) => *c += 1,
                        None => counts.push((pair, 1)),
                    }
                }
            }
            let Some(&(best, _)) = counts.iter().min_by(|a, b| by_priority(a, b)) else {
                break;
            };
            let id = (BYTE_TOKENS + merges.len()) as u32;
            for word in &mut words {
                merge_pair(word, best, id);
            }
            merges.push(best);
        }
        merges
    }

    #[test]
    fn pieces_split_like_gpt2() {
        assert_eq!(
            pieces("Hello, world!  It's 12345 cafés\n\nok "),
            [
                "Hello", ",", " world", "!", " ", " It", "'", "s", " 123", "45", " cafés", "\n\n",
                "ok", " "
            ]
        );
        assert_eq!(pieces(""), Vec::<&str>::new());
        assert_eq!(pieces("   "), ["   "]);
        assert_eq!(pieces(" a"), [" a"]);
    }

    #[test]
    fn round_trips_any_text() {
        let corpus = Language::new(1).corpus(20_000);
        let tok = Tokenizer::train(corpus.as_bytes(), 600);
        assert_eq!(tok.vocab_size(), 600);
        for s in [
            "",
            "The quick brown fox.",
            prefix(&corpus, 3000),
            "naïve façade — ünïcödé 😀 \u{0}\t\r\n~",
            "   leading and trailing   ",
        ] {
            let ids = tok.encode(s);
            assert!(ids.iter().all(|&id| (id as usize) < tok.vocab_size()));
            assert_eq!(tok.decode(&ids), s.as_bytes(), "{s:?}");
        }
        // Merges compress text like the training text.
        let sample = prefix(&corpus, 3000);
        let ids = tok.encode(sample);
        assert!(ids.len() * 2 < sample.len(), "{} tokens", ids.len());
    }

    #[test]
    fn unseen_bytes_fall_back_to_byte_tokens() {
        let tok = Tokenizer::train(b"aaab aab ab b", 270);
        assert!(tok.vocab_size() > BYTE_TOKENS);
        // None of these bytes occur in the corpus.
        let ids = tok.encode("\u{1F600}\u{0}xyz");
        let mut want: Vec<u32> = "\u{1F600}\u{0}xyz".bytes().map(u32::from).collect();
        assert_eq!(ids, want);
        // A mix of learned and unseen.
        let ids = tok.encode(" ab€");
        want = tok.encode(" ab");
        assert!(want.len() < 3);
        want.extend("€".bytes().map(u32::from));
        assert_eq!(ids, want);
        assert_eq!(tok.decode(&ids), " ab€".as_bytes());
    }

    #[test]
    fn unknown_ids_decode_to_replacement_character() {
        let tok = Tokenizer::bytes_only();
        assert_eq!(tok.decode(&[104, 105]), b"hi");
        assert_eq!(
            tok.decode(&[104, 256, 105, u32::MAX]),
            "h\u{FFFD}i\u{FFFD}".as_bytes()
        );
        assert_eq!(tok.token(256), None);
    }

    #[test]
    fn merges_are_deterministic_and_match_reference() {
        let corpus = Language::new(7).corpus(6000);
        let a = Tokenizer::train(corpus.as_bytes(), 400);
        let b = Tokenizer::train(corpus.as_bytes(), 400);
        assert_eq!(a.merges(), b.merges());
        assert_eq!(a.merges(), &reference_merges(corpus.as_bytes(), 400)[..]);
        // A different corpus learns something else.
        let c = Tokenizer::train(Language::new(8).corpus(6000).as_bytes(), 400);
        assert_ne!(a.merges(), c.merges());
        // Training longer extends the same merge list.
        let longer = Tokenizer::train(corpus.as_bytes(), 500);
        assert_eq!(&longer.merges()[..a.merges().len()], a.merges());
    }

    #[test]
    fn ties_go_to_lowest_pair() {
        // Pieces "cd", " ab", " cd", " ab": (c, d), (' ', a) and (a, b) occur twice each.
        let corpus = b"cd ab cd ab";
        let (sp, a, b, c, d) = (32, 97, 98, 99, 100);
        let tok = Tokenizer::train(corpus, 257);
        assert_eq!(tok.merges(), [(sp, a)]);
        // Then (c, d) and (" a", b) twice each, and (' ', c) once.
        let tok = Tokenizer::train(corpus, 260);
        assert_eq!(tok.merges(), [(sp, a), (c, d), (256, b), (sp, 257)]);
        assert_eq!(reference_merges(corpus, 260), tok.merges());
    }

    #[test]
    fn training_stops_when_nothing_is_left_to_merge() {
        let tok = Tokenizer::train(b"abc abc", 10_000);
        // "abc", " abc" need 2 + 1 merges: ab, abc, " abc".
        assert_eq!(tok.vocab_size(), BYTE_TOKENS + 3);
        assert_eq!(tok.encode("abc abc"), [257, 258]);
        assert_eq!(Tokenizer::train(b"", 1000).vocab_size(), BYTE_TOKENS);
        assert_eq!(Tokenizer::train(b"abc", 100).vocab_size(), BYTE_TOKENS);
    }

    #[test]
    fn encode_matches_applying_every_merge_in_order() {
        let language = Language::new(4);
        let corpus = language.corpus(8000);
        let tok = Tokenizer::train(corpus.as_bytes(), 700);
        let unseen = language.text(99, 4000);
        for s in [&corpus, &unseen] {
            assert_eq!(tok.encode(s), reference_encode(&tok, s));
        }
    }

    #[test]
    fn escape_line_is_one_printable_line() {
        assert_eq!(escape_line("a b~"), "a b~");
        assert_eq!(escape_line("x\\y\n\t\r\0\x7f"), "x\\\\y\\n\\t\\r\\x00\\x7f");
        assert_eq!(
            escape_line("é\u{FFFD}\u{2028}"),
            "\\u{e9}\\u{fffd}\\u{2028}"
        );
    }
}
