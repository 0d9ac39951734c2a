//! Picks the next token from the logits: greedy, or temperature + top-k + top-p.
//!
//! Sampling is reproducible bit for bit: candidates are ordered by logit with ties broken
//! by token id (a total order, so the order never depends on the sort algorithm), the
//! probabilities use the crate's own `exp` and are summed in that order, and the random
//! draw comes from a seeded SplitMix64.

use std::cmp::Ordering;

use crate::math;
use crate::ops;
use crate::rng::SplitMix64;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    /// 0 means greedy (argmax); otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`;
    /// 1 keeps all.
    pub top_p: f32,
}

impl SamplerConfig {
    pub const GREEDY: Self = Self {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
    };

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    /// The logit, and after filtering its unnormalised probability.
    score: f32,
}

/// Most likely first: higher logit, then lower id.
fn by_logit_then_id(a: &Candidate, b: &Candidate) -> Ordering {
    b.score.total_cmp(&a.score).then(a.id.cmp(&b.id))
}

pub struct Sampler {
    config: SamplerConfig,
    rng: SplitMix64,
    /// Reused between calls so sampling does not allocate.
    candidates: Vec<Candidate>,
}

impl Sampler {
    pub fn new(config: SamplerConfig, seed: u64) -> Self {
        Self {
            config,
            rng: SplitMix64::new(seed),
            candidates: Vec::new(),
        }
    }

    pub fn greedy() -> Self {
        Self::new(SamplerConfig::GREEDY, 0)
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        assert!(!logits.is_empty(), "no logits to sample from");
        if self.config.is_greedy() {
            return ops::argmax(logits) as u32;
        }
        let kept = self.filter(logits);
        // `kept` > 0 and every weight is positive, so the draw lands in the list;
        // the fallback only guards against the product rounding up to the total.
        let draw = self.rng.next_unit_f32() * kept.total;
        let mut acc = 0.0f32;
        for c in &self.candidates[..kept.len] {
            acc += c.score;
            if draw < acc {
                return c.id;
            }
        }
        self.candidates[kept.len - 1].id
    }

    /// Leaves the candidates that survive top-k and top-p at the front of
    /// `self.candidates`, most likely first, with their unnormalised probabilities.
    fn filter(&mut self, logits: &[f32]) -> Kept {
        let SamplerConfig {
            temperature,
            top_k,
            top_p,
        } = self.config;
        let cands = &mut self.candidates;
        cands.clear();
        cands.extend(logits.iter().enumerate().map(|(i, &score)| Candidate {
            id: u32::try_from(i).expect("vocabulary fits in u32"),
            score,
        }));

        // Top-k: a linear-time selection of the k best, then sort only those.
        let k = if top_k == 0 {
            cands.len()
        } else {
            top_k.min(cands.len())
        };
        if k < cands.len() {
            cands.select_nth_unstable_by(k - 1, by_logit_then_id);
            cands.truncate(k);
        }
        cands.sort_by(by_logit_then_id);

        // Softmax numerators relative to the best logit: the scaled exponent is <= 0,
        // so nothing overflows however small the temperature.
        let best = cands[0].score;
        let mut total = 0.0f32;
        for c in cands.iter_mut() {
            c.score = math::exp((c.score - best) / temperature);
            total += c.score;
        }

        // Top-p: the shortest prefix whose mass reaches `top_p` of the total.
        if top_p < 1.0 {
            let limit = top_p * total;
            let mut acc = 0.0f32;
            for (i, c) in cands.iter().enumerate() {
                acc += c.score;
                if acc >= limit {
                    return Kept {
                        len: i + 1,
                        total: acc,
                    };
                }
            }
        }
        Kept {
            len: cands.len(),
            total,
        }
    }

    /// The candidates and probabilities the next `sample` would draw from, most likely
    /// first; for tests and inspection.
    pub fn distribution(&mut self, logits: &[f32]) -> Vec<(u32, f32)> {
        if self.config.is_greedy() {
            return vec![(ops::argmax(logits) as u32, 1.0)];
        }
        let kept = self.filter(logits);
        self.candidates[..kept.len]
            .iter()
            .map(|c| (c.id, c.score / kept.total))
            .collect()
    }
}

struct Kept {
    len: usize,
    total: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(temperature: f32, top_k: usize, top_p: f32) -> SamplerConfig {
        SamplerConfig {
            temperature,
            top_k,
            top_p,
        }
    }

    fn ids(dist: &[(u32, f32)]) -> Vec<u32> {
        dist.iter().map(|&(id, _)| id).collect()
    }

    fn random_logits(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| rng.next_f32() * 4.0).collect()
    }

    #[test]
    fn temperature_zero_is_argmax() {
        let logits = random_logits(300, 1);
        let want = ops::argmax(&logits) as u32;
        for cfg in [SamplerConfig::GREEDY, config(0.0, 5, 0.5)] {
            let mut s = Sampler::new(cfg, 42);
            assert!((0..20).all(|_| s.sample(&logits) == want));
        }
        // Ties go to the lowest id, as in argmax.
        assert_eq!(Sampler::greedy().sample(&[1.0, 3.0, 3.0]), 1);
    }

    #[test]
    fn top_k_keeps_the_k_best_with_ties_by_id() {
        let logits = [0.5, 2.0, 1.0, 2.0, -1.0, 1.0];
        let mut s = Sampler::new(config(1.0, 3, 1.0), 0);
        assert_eq!(ids(&s.distribution(&logits)), [1, 3, 2]);
        let mut s = Sampler::new(config(1.0, 0, 1.0), 0);
        assert_eq!(ids(&s.distribution(&logits)), [1, 3, 2, 5, 0, 4]);
        let mut s = Sampler::new(config(1.0, 100, 1.0), 0);
        assert_eq!(s.distribution(&logits).len(), 6);
        let mut s = Sampler::new(config(0.7, 1, 1.0), 9);
        assert!((0..50).all(|_| s.sample(&logits) == 1));
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_reaching_p() {
        // ln of 0.5, 0.3, 0.15, 0.05: probabilities at temperature 1.
        let logits: Vec<f32> = [0.5f64, 0.3, 0.15, 0.05]
            .iter()
            .map(|p| p.ln() as f32)
            .collect();
        let cut = |p: f32| {
            let mut s = Sampler::new(config(1.0, 0, p), 0);
            ids(&s.distribution(&logits))
        };
        assert_eq!(cut(0.4), [0]);
        assert_eq!(cut(0.79), [0, 1]);
        assert_eq!(cut(0.9), [0, 1, 2]);
        assert_eq!(cut(0.99), [0, 1, 2, 3]);
        assert_eq!(cut(1.0), [0, 1, 2, 3]);
        assert_eq!(cut(1e-9), [0]);

        let mut s = Sampler::new(config(1.0, 0, 0.79), 0);
        let dist = s.distribution(&logits);
        assert!((dist[0].1 - 0.625).abs() < 1e-6 && (dist[1].1 - 0.375).abs() < 1e-6);
        // Top-k applies first.
        let mut s = Sampler::new(config(1.0, 1, 0.99), 0);
        assert_eq!(ids(&s.distribution(&logits)), [0]);
    }

    #[test]
    fn seeded_sampling_is_deterministic() {
        let logits = random_logits(512, 2);
        let cfg = config(0.8, 40, 0.95);
        let run = |seed| {
            let mut s = Sampler::new(cfg, seed);
            (0..200).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        let (a, b, c) = (run(7), run(7), run(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
        // It samples: several different tokens, all from the top 40.
        let mut s = Sampler::new(cfg, 0);
        let allowed = ids(&s.distribution(&logits));
        assert!(allowed.len() > 1 && allowed.len() <= 40);
        assert!(a.iter().all(|t| allowed.contains(t)));
        let mut distinct = a.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 5, "{distinct:?}");
    }

    #[test]
    fn frequencies_follow_the_probabilities() {
        let logits = [2.0f32.ln(), 1.0f32.ln(), 1.0f32.ln()];
        let mut s = Sampler::new(config(1.0, 0, 1.0), 3);
        let mut hits = [0u32; 3];
        for _ in 0..20_000 {
            hits[s.sample(&logits) as usize] += 1;
        }
        let share = f64::from(hits[0]) / 20_000.0;
        assert!((share - 0.5).abs() < 0.02, "{hits:?}");
        // Low temperature sharpens, high flattens.
        let mut cold = Sampler::new(config(0.05, 0, 1.0), 0);
        assert!(cold.distribution(&logits)[0].1 > 0.999);
        let mut hot = Sampler::new(config(100.0, 0, 1.0), 0);
        assert!(hot.distribution(&logits)[0].1 < 0.34);
    }

    #[test]
    fn tiny_temperature_stays_finite() {
        let logits = [1e30, -1e30, 0.0];
        let mut s = Sampler::new(config(1e-30, 0, 1.0), 0);
        let dist = s.distribution(&logits);
        assert!(dist.iter().all(|&(_, p)| p.is_finite()));
        assert_eq!(s.sample(&logits), 0);
    }
}
