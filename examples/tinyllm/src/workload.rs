//! The inference pipeline around the model, as `generate` and `bench` run it: train the
//! tokenizer for the model's vocabulary, encode prompts, sample tokens, decode them.

use std::hash::Hasher;

use crate::model::{self, Model};
use crate::phases::{timed, Phase};
use crate::sampler::{Sampler, SamplerConfig};
use crate::text::Language;
use crate::tokenizer::{Fnv1a, Tokenizer, BYTE_TOKENS};

/// Prompts per bench iteration, of increasing length.
pub const BATCH: usize = 4;
/// About how many bytes of the generated text a token covers at the bench's vocabulary
/// size, used to size prompts.
const BYTES_PER_TOKEN: usize = 3;
/// Separates the sampler's random stream from the weights' and the prompt's.
const SAMPLER_STREAM: u64 = 0x5A3D_96C1_E2F4_7B08;

/// Training text for a vocabulary of `vocab` tokens: enough that merges rarely run
/// out before the vocabulary is full, at about 20 bytes per merge.
fn corpus_bytes(vocab: usize) -> usize {
    16 * 1024 + 20 * vocab.saturating_sub(BYTE_TOKENS)
}

/// The tokenizer for a model with `vocab` tokens, trained on the language's corpus. A
/// vocab of 256 or less needs no training: it is the bytes (or some of them).
pub fn tokenizer_for(language: &Language, vocab: usize) -> Tokenizer {
    if vocab <= BYTE_TOKENS {
        return Tokenizer::bytes_only();
    }
    timed(Phase::Train, || {
        let corpus = language.corpus(corpus_bytes(vocab));
        Tokenizer::train(corpus.as_bytes(), vocab)
    })
}

/// The sampler seed of request `index` of iteration `iter`.
pub fn sampler_seed(seed: u64, iter: usize, index: usize) -> u64 {
    seed ^ SAMPLER_STREAM ^ ((iter as u64) << 20) ^ index as u64
}

/// The bench's requests: `iters` batches of `BATCH` texts, the j-th of each batch sized
/// for about (j + 1) / BATCH of `max_prompt` tokens (always at least one sentence).
pub fn prompt_texts(language: &Language, iters: usize, max_prompt: usize) -> Vec<Vec<String>> {
    (0..iters)
        .map(|i| {
            (0..BATCH)
                .map(|j| {
                    let stream = (i * BATCH + j) as u64;
                    let bytes = max_prompt * BYTES_PER_TOKEN * (j + 1) / BATCH;
                    language.text(stream, bytes)
                })
                .collect()
        })
        .collect()
}

pub struct Request<'a> {
    pub text: &'a str,
    /// A longer prompt keeps only its last `max_prompt` tokens, as a server does when a
    /// prompt would overflow the context window.
    pub max_prompt: usize,
    pub tokens: usize,
    pub sampling: SamplerConfig,
    pub seed: u64,
}

/// Runs one request end to end and adds its result (generated ids, final logits and
/// decoded text) to `hash`.
pub fn serve(model: &Model, tokenizer: &Tokenizer, req: &Request, hash: &mut Fnv1a) {
    let mut prompt = timed(Phase::Encode, || tokenizer.encode(req.text));
    assert!(!prompt.is_empty(), "empty prompt");
    if prompt.len() > req.max_prompt {
        prompt.drain(..prompt.len() - req.max_prompt);
    }
    let mut sampler = Sampler::new(req.sampling, req.seed);
    let out = model::generate_with(model, &prompt, req.tokens, &mut sampler);
    let text = timed(Phase::Decode, || tokenizer.decode(&out.tokens));
    hash.write(&out.checksum().to_le_bytes());
    hash.write(&text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Config;

    #[test]
    fn tokenizer_fills_the_vocabulary() {
        for vocab in [100, 256, 300, 2048] {
            let tok = tokenizer_for(&Language::new(3), vocab);
            assert_eq!(tok.vocab_size(), vocab.max(BYTE_TOKENS), "vocab {vocab}");
        }
    }

    #[test]
    fn prompts_grow_within_a_batch() {
        let texts = prompt_texts(&Language::new(1), 2, 64);
        assert_eq!((texts.len(), texts[0].len()), (2, BATCH));
        for batch in &texts {
            assert!(batch.windows(2).all(|w| w[0].len() <= w[1].len()));
            assert!(batch[BATCH - 1].len() >= 64 * BYTES_PER_TOKEN);
        }
        assert_ne!(texts[0], texts[1]);
    }

    #[test]
    fn serving_is_deterministic_and_sampled() {
        let config = Config::new(32, 1, 2, 300, 48).unwrap();
        let model = Model::new(config, 2);
        let tok = tokenizer_for(&Language::new(2), 300);
        let run = |sampling, seed| {
            let mut hash = Fnv1a::default();
            let text = "The quick brown fox jumps over the lazy dog. Again!";
            let req = Request {
                text,
                max_prompt: 16,
                tokens: 32,
                sampling,
                seed,
            };
            serve(&model, &tok, &req, &mut hash);
            hash.finish()
        };
        let sampled = SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
        };
        assert_eq!(run(sampled, 1), run(sampled, 1));
        assert_ne!(run(sampled, 1), run(sampled, 2));
        let greedy = SamplerConfig::GREEDY;
        assert_eq!(run(greedy, 1), run(greedy, 2));
    }
}
