//! A llama-style decoder: pre-norm blocks of RoPE multi-head attention and a SwiGLU MLP,
//! decoded one token at a time against a KV cache.

use crate::ops;
use crate::phases::{timed, Phase};
use crate::rng::SplitMix64;
use crate::sampler::Sampler;

/// Longest sequence (prompt plus generated tokens) a model accepts.
pub const MAX_CONTEXT: usize = 1024;
/// Upper bound on weights, so a typo in a flag fails cleanly instead of exhausting memory.
const MAX_PARAMS: usize = 1 << 28;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub dim: usize,
    pub hidden_dim: usize,
    pub layers: usize,
    pub heads: usize,
    pub vocab: usize,
    pub seq_len: usize,
}

impl Config {
    /// Validates the shape constraints the kernels rely on; `hidden_dim` is derived.
    pub fn new(
        dim: usize,
        layers: usize,
        heads: usize,
        vocab: usize,
        seq_len: usize,
    ) -> Result<Self, String> {
        let sizes = [
            ("dim", dim),
            ("layers", layers),
            ("heads", heads),
            ("vocab", vocab),
        ];
        for (name, value) in sizes {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if dim % heads != 0 {
            return Err(format!("dim ({dim}) must be divisible by heads ({heads})"));
        }
        if (dim / heads) % 2 != 0 {
            return Err(format!(
                "head dim (dim / heads = {}) must be even for rotary embeddings",
                dim / heads
            ));
        }
        if seq_len == 0 || seq_len > MAX_CONTEXT {
            return Err(format!(
                "prompt length + tokens ({seq_len}) must be between 1 and {MAX_CONTEXT}"
            ));
        }
        let too_large = || format!("model too large (limit is {MAX_PARAMS} weights)");
        // Bounding each size first keeps the u128 arithmetic below from overflowing.
        if [dim, layers, vocab].iter().any(|&n| n > MAX_PARAMS) {
            return Err(too_large());
        }
        let hidden_dim = 4 * dim;
        let (d, h) = (dim as u128, hidden_dim as u128);
        let params = (4 * d * d + 3 * h * d) * layers as u128 + 2 * vocab as u128 * d;
        if params > MAX_PARAMS as u128 {
            return Err(too_large());
        }
        Ok(Self {
            dim,
            hidden_dim,
            layers,
            heads,
            vocab,
            seq_len,
        })
    }

    /// The same model shape for a different context length.
    pub fn with_seq_len(&self, seq_len: usize) -> Result<Self, String> {
        Self::new(self.dim, self.layers, self.heads, self.vocab, seq_len)
    }

    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    mlp_norm: Vec<f32>,
    w1: Vec<f32>,
    w2: Vec<f32>,
    w3: Vec<f32>,
}

pub struct Model {
    config: Config,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    output: Vec<f32>,
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
}

/// A `rows x cols` matrix scaled by 1/sqrt(fan_in) so activations stay O(1) with depth.
fn linear(rng: &mut SplitMix64, rows: usize, cols: usize) -> Vec<f32> {
    let scale = 1.0 / (cols as f32).sqrt();
    (0..rows * cols).map(|_| rng.next_f32() * scale).collect()
}

impl Model {
    pub fn new(config: Config, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let (d, h, v) = (config.dim, config.hidden_dim, config.vocab);
        let embed = (0..v * d).map(|_| rng.next_f32()).collect();
        let layers = (0..config.layers)
            .map(|_| Layer {
                attn_norm: vec![1.0; d],
                wq: linear(&mut rng, d, d),
                wk: linear(&mut rng, d, d),
                wv: linear(&mut rng, d, d),
                wo: linear(&mut rng, d, d),
                mlp_norm: vec![1.0; d],
                w1: linear(&mut rng, h, d),
                w2: linear(&mut rng, d, h),
                w3: linear(&mut rng, h, d),
            })
            .collect();
        let output = linear(&mut rng, v, d);
        let (rope_cos, rope_sin) = ops::rope_tables(config.seq_len, config.head_dim());
        Self {
            embed,
            layers,
            final_norm: vec![1.0; d],
            output,
            rope_cos,
            rope_sin,
            config,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Feeds `token` at the state's next position and returns the logits for the token
    /// after it.
    pub fn forward<'s>(&self, s: &'s mut State, token: u32) -> &'s [f32] {
        self.advance(s, token);
        ops::rmsnorm(&mut s.xb, &s.x, &self.final_norm);
        ops::matmul(&mut s.logits, &self.output, &s.xb);
        &s.logits
    }

    /// Feeds `token` at the state's next position without computing logits. A prompt
    /// token that is not the last needs only its keys and values in the cache, and the
    /// output projection is the largest matmul of small models.
    pub fn advance(&self, s: &mut State, token: u32) {
        let c = &self.config;
        let (d, hd, pos) = (c.dim, c.head_dim(), s.pos);
        assert!(pos < c.seq_len, "context of {} tokens is full", c.seq_len);
        let t = token as usize;
        assert!(t < c.vocab, "token {token} is outside the vocabulary");
        let half = hd / 2;
        let cos = &self.rope_cos[pos * half..(pos + 1) * half];
        let sin = &self.rope_sin[pos * half..(pos + 1) * half];
        let scale = 1.0 / (hd as f32).sqrt();

        s.x.copy_from_slice(&self.embed[t * d..(t + 1) * d]);
        for (l, layer) in self.layers.iter().enumerate() {
            let base = l * c.seq_len * d;
            let row = base + pos * d;

            ops::rmsnorm(&mut s.xb, &s.x, &layer.attn_norm);
            ops::matmul(&mut s.q, &layer.wq, &s.xb);
            ops::rope(&mut s.q, hd, cos, sin);
            // Keys and values are written straight into this position's cache slot.
            let k = &mut s.k_cache[row..row + d];
            ops::matmul(k, &layer.wk, &s.xb);
            ops::rope(k, hd, cos, sin);
            ops::matmul(&mut s.v_cache[row..row + d], &layer.wv, &s.xb);

            for h in 0..c.heads {
                let off = h * hd;
                let q = &s.q[off..off + hd];
                let att = &mut s.att[..=pos];
                for (p, a) in att.iter_mut().enumerate() {
                    let k0 = base + p * d + off;
                    *a = ops::dot(q, &s.k_cache[k0..k0 + hd]) * scale;
                }
                ops::softmax(att);
                let out = &mut s.xb[off..off + hd];
                out.fill(0.0);
                for (p, &a) in att.iter().enumerate() {
                    let v0 = base + p * d + off;
                    ops::axpy(out, a, &s.v_cache[v0..v0 + hd]);
                }
            }
            ops::matmul(&mut s.xb2, &layer.wo, &s.xb);
            ops::add_assign(&mut s.x, &s.xb2);

            ops::rmsnorm(&mut s.xb, &s.x, &layer.mlp_norm);
            ops::matmul(&mut s.hb, &layer.w1, &s.xb);
            ops::matmul(&mut s.hb2, &layer.w3, &s.xb);
            ops::swiglu(&mut s.hb, &s.hb2);
            ops::matmul(&mut s.xb2, &layer.w2, &s.hb);
            ops::add_assign(&mut s.x, &s.xb2);
        }
        s.pos += 1;
    }
}

/// Per-sequence activations and KV cache, allocated once so decoding never allocates.
pub struct State {
    pos: usize,
    x: Vec<f32>,
    xb: Vec<f32>,
    xb2: Vec<f32>,
    q: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    att: Vec<f32>,
    logits: Vec<f32>,
    /// `[layer][position][dim]`
    k_cache: Vec<f32>,
    v_cache: Vec<f32>,
}

impl State {
    pub fn new(c: &Config) -> Self {
        let cache = c.layers * c.seq_len * c.dim;
        Self {
            pos: 0,
            x: vec![0.0; c.dim],
            xb: vec![0.0; c.dim],
            xb2: vec![0.0; c.dim],
            q: vec![0.0; c.dim],
            hb: vec![0.0; c.hidden_dim],
            hb2: vec![0.0; c.hidden_dim],
            att: vec![0.0; c.seq_len],
            logits: vec![0.0; c.vocab],
            k_cache: vec![0.0; cache],
            v_cache: vec![0.0; cache],
        }
    }
}

pub struct Generation {
    pub tokens: Vec<u32>,
    /// Logits of the final decoding step (the ones the last token was chosen from).
    pub logits: Vec<f32>,
}

impl Generation {
    /// FNV-1a 64 over the token ids and the logit bits, all as little-endian u32s.
    pub fn checksum(&self) -> u64 {
        let words = self.tokens.iter().copied();
        let words = words.chain(self.logits.iter().map(|l| l.to_bits()));
        let mut hash = 0xCBF2_9CE4_8422_2325u64;
        for byte in words.flat_map(u32::to_le_bytes) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
        }
        hash
    }
}

/// The prompt is derived from the seed on its own stream, independent of the weights.
pub fn prompt_tokens(seed: u64, vocab: usize, len: usize) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed ^ 0xD1B5_4A32_D192_ED03);
    let vocab = u32::try_from(vocab).expect("vocab fits in u32");
    (0..len).map(|_| rng.below(vocab)).collect()
}

/// Greedy decoding of `n` tokens after `prompt`.
pub fn generate(model: &Model, prompt: &[u32], n: usize) -> Generation {
    generate_with(model, prompt, n, &mut Sampler::greedy())
}

/// Decodes `n` tokens after `prompt`, each chosen by `sampler`.
pub fn generate_with(model: &Model, prompt: &[u32], n: usize, sampler: &mut Sampler) -> Generation {
    let (&last, context) = prompt
        .split_last()
        .filter(|_| n > 0)
        .expect("need a prompt and at least one token");
    let mut state = State::new(&model.config);
    timed(Phase::Forward, || {
        for &t in context {
            model.advance(&mut state, t);
        }
        model.forward(&mut state, last);
    });
    let mut tokens = Vec::with_capacity(n);
    loop {
        let next = timed(Phase::Sample, || sampler.sample(&state.logits));
        tokens.push(next);
        if tokens.len() == n {
            break;
        }
        timed(Phase::Forward, || {
            model.forward(&mut state, next);
        });
    }
    Generation {
        tokens,
        logits: state.logits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seq_len: usize) -> Config {
        Config::new(32, 2, 4, 50, seq_len).unwrap()
    }

    /// Recomputes every position from scratch, layer by layer over the whole sequence
    /// with a causal mask and no cache, returning each position's logits.
    fn full_sequence_logits(m: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
        let c = &m.config;
        let (d, hd, n) = (c.dim, c.head_dim(), tokens.len());
        let half = hd / 2;
        let mut xs: Vec<Vec<f32>> = tokens
            .iter()
            .map(|&t| m.embed[t as usize * d..(t as usize + 1) * d].to_vec())
            .collect();
        for layer in &m.layers {
            let (mut qs, mut ks, mut vs) = (vec![], vec![], vec![]);
            for (p, x) in xs.iter().enumerate() {
                let (cos, sin) = (&m.rope_cos[p * half..], &m.rope_sin[p * half..]);
                let mut xb = vec![0.0; d];
                ops::rmsnorm(&mut xb, x, &layer.attn_norm);
                let (mut q, mut k, mut v) = (vec![0.0; d], vec![0.0; d], vec![0.0; d]);
                ops::matmul_serial(&mut q, &layer.wq, &xb);
                ops::matmul_serial(&mut k, &layer.wk, &xb);
                ops::matmul_serial(&mut v, &layer.wv, &xb);
                ops::rope(&mut q, hd, &cos[..half], &sin[..half]);
                ops::rope(&mut k, hd, &cos[..half], &sin[..half]);
                qs.push(q);
                ks.push(k);
                vs.push(v);
            }
            for (p, x) in xs.iter_mut().enumerate() {
                let mut mixed = vec![0.0; d];
                for h in 0..c.heads {
                    let r = h * hd..(h + 1) * hd;
                    let mut att: Vec<f32> = (0..=p)
                        .map(|t| {
                            ops::dot(&qs[p][r.clone()], &ks[t][r.clone()]) / (hd as f32).sqrt()
                        })
                        .collect();
                    ops::softmax(&mut att);
                    for (t, &a) in att.iter().enumerate() {
                        ops::axpy(&mut mixed[r.clone()], a, &vs[t][r.clone()]);
                    }
                }
                let mut o = vec![0.0; d];
                ops::matmul_serial(&mut o, &layer.wo, &mixed);
                ops::add_assign(x, &o);
                let mut xb = vec![0.0; d];
                ops::rmsnorm(&mut xb, x, &layer.mlp_norm);
                let (mut g, mut u) = (vec![0.0; c.hidden_dim], vec![0.0; c.hidden_dim]);
                ops::matmul_serial(&mut g, &layer.w1, &xb);
                ops::matmul_serial(&mut u, &layer.w3, &xb);
                ops::swiglu(&mut g, &u);
                ops::matmul_serial(&mut o, &layer.w2, &g);
                ops::add_assign(x, &o);
            }
        }
        (0..n)
            .map(|p| {
                let mut xb = vec![0.0; d];
                ops::rmsnorm(&mut xb, &xs[p], &m.final_norm);
                let mut logits = vec![0.0; c.vocab];
                ops::matmul_serial(&mut logits, &m.output, &xb);
                logits
            })
            .collect()
    }

    #[test]
    fn kv_cache_matches_full_recompute() {
        let model = Model::new(small(12), 3);
        let tokens = prompt_tokens(9, 50, 12);
        let reference = full_sequence_logits(&model, &tokens);
        let mut state = State::new(model.config());
        for (&t, want) in tokens.iter().zip(&reference) {
            let got = model.forward(&mut state, t);
            for (a, b) in got.iter().zip(want) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn prefill_without_logits_changes_nothing() {
        let model = Model::new(small(10), 4);
        let tokens = prompt_tokens(4, 50, 6);
        let (mut a, mut b) = (State::new(model.config()), State::new(model.config()));
        for &t in &tokens[..5] {
            model.forward(&mut a, t);
            model.advance(&mut b, t);
        }
        let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let want = bits(model.forward(&mut a, tokens[5]));
        assert_eq!(bits(model.forward(&mut b, tokens[5])), want);
    }

    #[test]
    fn sampled_generation_is_seeded() {
        use crate::sampler::SamplerConfig;
        let model = Model::new(small(24), 6);
        let prompt = prompt_tokens(6, 50, 4);
        let config = SamplerConfig {
            temperature: 1.0,
            top_k: 10,
            top_p: 0.9,
        };
        let run = |seed| generate_with(&model, &prompt, 20, &mut Sampler::new(config, seed));
        let (a, b, c) = (run(1), run(1), run(2));
        assert_eq!((&a.tokens, a.checksum()), (&b.tokens, b.checksum()));
        assert_ne!(a.tokens, c.tokens);
        // Temperature 0 is greedy whatever the seed.
        let greedy = SamplerConfig {
            temperature: 0.0,
            ..config
        };
        let g = generate_with(&model, &prompt, 20, &mut Sampler::new(greedy, 9));
        assert_eq!(g.tokens, generate(&model, &prompt, 20).tokens);
    }

    #[test]
    fn same_seed_same_output_different_seed_different_output() {
        let run = |seed| {
            let model = Model::new(small(20), seed);
            generate(&model, &prompt_tokens(seed, 50, 4), 16)
        };
        let (a, b, c) = (run(1), run(1), run(2));
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(a.checksum(), b.checksum());
        assert_ne!(a.checksum(), c.checksum());
        assert_eq!(a.tokens.len(), 16);
    }

    #[test]
    fn longer_generation_extends_shorter_one() {
        let prompt = prompt_tokens(5, 50, 4);
        let short = generate(&Model::new(small(12), 5), &prompt, 8);
        let long = generate(&Model::new(small(24), 5), &prompt, 20);
        assert_eq!(short.tokens[..], long.tokens[..8]);
    }

    #[test]
    fn config_validation() {
        assert!(Config::new(64, 2, 4, 256, 20).is_ok());
        assert!(Config::new(64, 2, 5, 256, 20)
            .unwrap_err()
            .contains("divisible"));
        assert!(Config::new(6, 1, 2, 256, 20).unwrap_err().contains("even"));
        assert!(Config::new(64, 0, 4, 256, 20)
            .unwrap_err()
            .contains("layers"));
        assert!(Config::new(64, 2, 4, 256, MAX_CONTEXT + 1).is_err());
        assert!(Config::new(64, usize::MAX, 4, usize::MAX, 20)
            .unwrap_err()
            .contains("too large"));
        assert!(Config::new(1 << 20, 64, 4, 256, 20)
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn checksum_is_fnv1a() {
        let g = Generation {
            tokens: vec![],
            logits: vec![],
        };
        assert_eq!(g.checksum(), 0xCBF2_9CE4_8422_2325);
        // FNV-1a of the bytes 01 00 00 00.
        let g = Generation {
            tokens: vec![1],
            logits: vec![],
        };
        let mut h = 0xCBF2_9CE4_8422_2325u64;
        for b in [1u8, 0, 0, 0] {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
        assert_eq!(g.checksum(), h);
    }
}
