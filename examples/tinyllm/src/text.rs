//! Pseudo-English text derived from a seed: the tokenizer's training corpus and the
//! bench's prompts.
//!
//! Running text mixes a fixed list of frequent English words with a seed-specific lexicon
//! of invented words built from syllables. Words are drawn by Zipf's law, so, as in real
//! text, a few words are very common and most are rare: BPE learns the common ones as
//! single tokens and has to split the rare ones into pieces. Everything is integer
//! arithmetic on a seeded SplitMix64, so a seed gives the same text everywhere.

use crate::rng::SplitMix64;

/// Frequent English words, most frequent first.
const COMMON: [&str; 120] = [
    "the", "of", "and", "to", "a", "in", "is", "it", "that", "was", "for", "on", "with", "he",
    "as", "you", "they", "at", "be", "this", "from", "have", "or", "by", "one", "had", "not",
    "but", "what", "all", "were", "when", "we", "there", "can", "an", "your", "which", "their",
    "said", "if", "do", "will", "each", "about", "how", "up", "out", "them", "then", "she", "many",
    "some", "so", "these", "would", "other", "into", "has", "more", "her", "two", "like", "him",
    "see", "time", "could", "no", "make", "than", "first", "been", "its", "who", "now", "people",
    "my", "made", "over", "did", "down", "only", "way", "find", "use", "may", "water", "long",
    "little", "very", "after", "words", "called", "just", "where", "most", "know", "get",
    "through", "back", "much", "before", "go", "good", "new", "write", "our", "used", "me", "man",
    "too", "any", "day", "same", "right", "look", "think", "also", "around", "another",
];

/// Borrowed words and typography: a little non-ASCII, as real text has.
const LOANWORDS: [&str; 8] = [
    "café",
    "naïve",
    "déjà vu",
    "über",
    "façade",
    "—",
    "…",
    "résumé",
];

const ONSETS: [&str; 28] = [
    "", "", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
    "br", "cl", "dr", "gr", "pl", "st", "tr", "sh", "th",
];
const VOWELS: [&str; 10] = ["a", "e", "i", "o", "u", "a", "e", "ea", "ou", "ai"];
const CODAS: [&str; 14] = [
    "", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "rt",
];
const SUFFIXES: [&str; 12] = [
    "", "", "", "", "s", "s", "ed", "ing", "er", "ly", "tion", "ness",
];

/// Content words in the seed's lexicon.
const LEXICON_WORDS: usize = 16384;
/// Stream constants so the lexicon and each text are independent of the weights.
const LEXICON_STREAM: u64 = 0x6C65_7869_636F_6E00;
const TEXT_STREAM: u64 = 0x7465_7874_0000_0000;

/// Zipf-Mandelbrot sampling: rank `r` has weight `1 / (r + offset)`, in integers so that
/// it is exact everywhere.
struct Zipf {
    cumulative: Vec<u64>,
}

impl Zipf {
    fn new(n: usize, offset: u64) -> Self {
        let mut acc = 0u64;
        let cumulative = (0..n as u64)
            .map(|r| {
                acc += (1u64 << 32) / (r + offset);
                acc
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut SplitMix64) -> usize {
        let total = *self.cumulative.last().expect("non-empty");
        let x = rng.next_u64() % total;
        self.cumulative.partition_point(|&c| c <= x)
    }
}

/// The words of a seed's pseudo-English and how often each is used.
pub struct Language {
    /// Invented words, shortest first: as in real languages, frequent words are short.
    lexicon: Vec<String>,
    common: Zipf,
    content: Zipf,
    seed: u64,
}

impl Language {
    pub fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed ^ LEXICON_STREAM);
        let mut lexicon: Vec<String> = (0..LEXICON_WORDS).map(|_| invent_word(&mut rng)).collect();
        lexicon.sort_by_key(String::len); // stable: equal lengths keep their order
        Self {
            lexicon,
            common: Zipf::new(COMMON.len(), 1),
            content: Zipf::new(LEXICON_WORDS, 10),
            seed,
        }
    }

    /// Whole sentences until the text is at least `min_bytes` long (at least one).
    /// Different `stream`s give unrelated texts.
    pub fn text(&self, stream: u64, min_bytes: usize) -> String {
        let mixed = SplitMix64::new(self.seed ^ TEXT_STREAM).next_u64() ^ stream;
        let mut rng = SplitMix64::new(mixed);
        let mut out = String::with_capacity(min_bytes + 128);
        loop {
            self.sentence(&mut rng, &mut out);
            if out.len() >= min_bytes {
                return out;
            }
            // Paragraph breaks now and then, otherwise one space between sentences.
            out.push_str(if rng.below(6) == 0 { "\n\n" } else { " " });
        }
    }

    /// The tokenizer's training text.
    pub fn corpus(&self, min_bytes: usize) -> String {
        self.text(u64::MAX, min_bytes)
    }

    fn sentence(&self, rng: &mut SplitMix64, out: &mut String) {
        let words = 4 + rng.below(12);
        for i in 0..words {
            if i > 0 {
                out.push(' ');
            }
            let start = out.len();
            self.word(rng, out);
            if i == 0 {
                capitalize(out, start);
            }
            if i + 1 < words && rng.below(12) == 0 {
                out.push(',');
            }
        }
        out.push(match rng.below(20) {
            0 | 1 => '?',
            2 => '!',
            _ => '.',
        });
    }

    fn word(&self, rng: &mut SplitMix64, out: &mut String) {
        match rng.below(100) {
            0..=44 => out.push_str(COMMON[self.common.sample(rng)]),
            45..=46 => {
                let n = rng.below(2000);
                out.push_str(&n.to_string());
            }
            47 => out.push_str(LOANWORDS[rng.below(LOANWORDS.len() as u32) as usize]),
            48..=51 => {
                // A proper noun: a lexicon word, capitalised.
                let start = out.len();
                out.push_str(&self.lexicon[self.content.sample(rng)]);
                capitalize(out, start);
            }
            _ => out.push_str(&self.lexicon[self.content.sample(rng)]),
        }
    }
}

/// Upper-cases the ASCII letter at byte `at`, if that is what is there.
fn capitalize(text: &mut String, at: usize) {
    if text.as_bytes()[at].is_ascii() {
        text[at..=at].make_ascii_uppercase();
    }
}

fn invent_word(rng: &mut SplitMix64) -> String {
    let pick =
        |rng: &mut SplitMix64, list: &[&'static str]| list[rng.below(list.len() as u32) as usize];
    let mut word = String::new();
    let syllables = match rng.below(20) {
        0..=6 => 1,
        7..=16 => 2,
        _ => 3,
    };
    for _ in 0..syllables {
        word.push_str(pick(rng, &ONSETS));
        word.push_str(pick(rng, &VOWELS));
        word.push_str(pick(rng, &CODAS));
    }
    word.push_str(pick(rng, &SUFFIXES));
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        let one = Language::new(1);
        assert_eq!(one.corpus(2000), Language::new(1).corpus(2000));
        assert_ne!(one.corpus(2000), Language::new(2).corpus(2000));
        assert_ne!(one.text(0, 500), one.text(1, 500));
        assert_eq!(one.text(0, 500), one.text(0, 500));
    }

    #[test]
    fn zipf_prefers_low_ranks() {
        let zipf = Zipf::new(1000, 1);
        let mut rng = SplitMix64::new(1);
        let mut hits = vec![0u32; 1000];
        for _ in 0..100_000 {
            hits[zipf.sample(&mut rng)] += 1;
        }
        // Rank 0 has twice the weight of rank 1 and 1/H(1000) = 13% of the mass.
        assert!((12_000..14_500).contains(&hits[0]), "{}", hits[0]);
        assert!(hits[0] > hits[1] && hits[1] > hits[10] && hits[10] > hits[500]);
        assert!(hits[999] > 0);
    }

    #[test]
    fn looks_like_sentences() {
        let text = Language::new(3).corpus(5000);
        assert!(text.len() >= 5000);
        assert!(text.ends_with(['.', '?', '!']));
        assert!(text.chars().next().unwrap().is_ascii_uppercase());
        assert!(text.contains(" the "));
        let words = text.split_whitespace().count();
        assert!(words > 5000 / 8, "{words} words");
    }
}
