//! Numeric kernels over row-major `f32` slices.
//!
//! Rust never contracts `a * b + c` into an FMA and never reassociates float math, so
//! the summation orders written here are exactly the ones executed. Where a reduction
//! should vectorise, it uses independent lane accumulators combined in a fixed order.

use crate::math;
use crate::phases::{timed, Phase};

/// Independent accumulators in `dot`: enough to fill two AVX2 registers and hide the
/// latency of the adds, while any narrower SIMD width computes the same lanes.
const LANES: usize = 16;
const RMS_EPS: f32 = 1e-5;
/// Below this many multiply-adds a matmul is too small to be worth splitting.
#[cfg(feature = "parallel")]
const PARALLEL_MIN_WORK: usize = 1 << 18;

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        // Fixed-size arrays let the compiler drop bounds checks and unroll into SIMD.
        let x: &[f32; LANES] = x.try_into().unwrap();
        let y: &[f32; LANES] = y.try_into().unwrap();
        for ((s, &p), &q) in acc.iter_mut().zip(x).zip(y) {
            *s += p * q;
        }
    }
    let mut sum = 0.0f32;
    for s in acc {
        sum += s;
    }
    for (&p, &q) in ra.iter().zip(rb) {
        sum += p * q;
    }
    sum
}

/// `out = W x`, with `W` stored as `out.len()` rows of `x.len()` columns.
pub fn matmul(out: &mut [f32], w: &[f32], x: &[f32]) {
    timed(Phase::Matmul, || {
        if let Some(device) = crate::backend::accelerator() {
            if let Err(message) = device.matvec(out, w, x) {
                // Falling back mid-run would mix two summation orders in one output.
                eprintln!("tinyllm: error: GPU matmul failed: {message}");
                std::process::exit(3);
            }
            return;
        }
        #[cfg(feature = "parallel")]
        if out.len() * x.len() >= PARALLEL_MIN_WORK {
            return matmul_parallel(out, w, x);
        }
        matmul_serial(out, w, x);
    });
}

pub fn matmul_serial(out: &mut [f32], w: &[f32], x: &[f32]) {
    assert_eq!(w.len(), out.len() * x.len());
    for (o, row) in out.iter_mut().zip(w.chunks_exact(x.len())) {
        *o = dot(row, x);
    }
}

/// Each output element is one whole `dot` on one thread, so the result is bit-identical
/// to `matmul_serial` whatever the thread count or work split.
#[cfg(feature = "parallel")]
pub fn matmul_parallel(out: &mut [f32], w: &[f32], x: &[f32]) {
    use rayon::prelude::*;
    assert_eq!(w.len(), out.len() * x.len());
    // A few large tasks per thread: decode-time matmuls are small, so scheduling
    // overhead dominates if rows are handed out finely.
    let min_rows = out.len().div_ceil(4 * rayon::current_num_threads()).max(1);
    out.par_iter_mut()
        .zip(w.par_chunks_exact(x.len()))
        .with_min_len(min_rows)
        .for_each(|(o, row)| *o = dot(row, x));
}

pub fn rmsnorm(out: &mut [f32], x: &[f32], weight: &[f32]) {
    let mean_sq = dot(x, x) / x.len() as f32;
    let inv = 1.0 / (mean_sq + RMS_EPS).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(weight) {
        *o = v * inv * g;
    }
}

/// In-place softmax; subtracting the max keeps `exp` in range for any finite input.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in x.iter_mut() {
        *v = math::exp(*v - max);
    }
    let mut sum = 0.0f32;
    for &v in x.iter() {
        sum += v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// Cos/sin tables, `[seq_len][head_dim / 2]`, for the usual RoPE base of 10000.
pub fn rope_tables(seq_len: usize, head_dim: usize) -> (Vec<f32>, Vec<f32>) {
    const LN_BASE: f64 = 9.210_340_371_976_184; // ln(10000)
    let half = head_dim / 2;
    let freqs: Vec<f64> = (0..half)
        .map(|i| math::exp_f64(-LN_BASE * (2 * i) as f64 / head_dim as f64))
        .collect();
    let (mut cos, mut sin) = (Vec::with_capacity(seq_len * half), Vec::new());
    for pos in 0..seq_len {
        for &f in &freqs {
            let (s, c) = math::sin_cos_f64(pos as f64 * f);
            cos.push(c as f32);
            sin.push(s as f32);
        }
    }
    (cos, sin)
}

/// Rotates each (even, odd) pair of every head by its position's angle.
pub fn rope(v: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    for head in v.chunks_exact_mut(head_dim) {
        for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * c - b * s;
            pair[1] = a * s + b * c;
        }
    }
}

/// `gate = silu(gate) * up`, the SwiGLU nonlinearity.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + math::exp(-*g)) * u;
    }
}

/// `out += a * x`
pub fn axpy(out: &mut [f32], a: f32, x: &[f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o += a * v;
    }
}

pub fn add_assign(out: &mut [f32], x: &[f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o += v;
    }
}

/// Index of the largest value; ties go to the lowest index so sampling is reproducible.
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate().skip(1) {
        if v > x[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| rng.next_f32()).collect()
    }

    fn norm(v: &[f32]) -> f64 {
        v.iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt()
    }

    #[test]
    fn dot_matches_f64_reference() {
        for n in [0, 1, 15, 16, 17, 64, 100] {
            let (a, b) = (random(n, 1), random(n, 2));
            let want: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x * y)).sum();
            assert!((f64::from(dot(&a, &b)) - want).abs() < 1e-4, "n = {n}");
        }
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = random(37, 3);
        softmax(&mut x);
        let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
        assert!((sum - 1.0).abs() < 1e-5);
        assert!(x.iter().all(|&v| v > 0.0));
    }

    #[test]
    fn softmax_is_stable_for_large_inputs() {
        let mut x = vec![1000.0, 1001.0, 1002.0, -1e30];
        softmax(&mut x);
        assert!(x.iter().all(|v| v.is_finite()));
        let mut small = vec![0.0, 1.0, 2.0];
        softmax(&mut small);
        for (a, b) in x.iter().zip(&small) {
            assert!((a - b).abs() < 1e-6);
        }
        assert!(x[3] < 1e-30);
    }

    #[test]
    fn rmsnorm_gives_unit_rms() {
        let x: Vec<f32> = random(64, 4).iter().map(|v| v * 37.0).collect();
        let mut out = vec![0.0; 64];
        rmsnorm(&mut out, &x, &vec![1.0; 64]);
        assert!((norm(&out) / 8.0 - 1.0).abs() < 1e-4);
    }

    #[test]
    fn rope_preserves_norm() {
        let head_dim = 16;
        let (cos, sin) = rope_tables(200, head_dim);
        let half = head_dim / 2;
        for pos in [0, 1, 7, 199] {
            let mut v = random(4 * head_dim, pos as u64);
            let before = norm(&v);
            let range = pos * half..(pos + 1) * half;
            rope(&mut v, head_dim, &cos[range.clone()], &sin[range]);
            assert!((norm(&v) - before).abs() < 1e-5 * before);
        }
        // Position 0 is the identity rotation.
        assert!(cos[..half].iter().all(|&c| c == 1.0) && sin[..half].iter().all(|&s| s == 0.0));
    }

    #[test]
    fn argmax_ties_go_to_lowest_index() {
        assert_eq!(argmax(&[1.0, 3.0, 2.0, 3.0]), 1);
        assert_eq!(argmax(&[5.0, 5.0, 5.0]), 0);
        assert_eq!(argmax(&[-1.0, -0.5, -0.5]), 1);
    }

    #[test]
    fn swiglu_matches_definition() {
        let mut g: Vec<f32> = vec![-3.0, 0.0, 0.5, 4.0];
        let u = vec![2.0, 1.0, -1.0, 0.5];
        let want: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(&x, &y)| x / (1.0 + (-x).exp()) * y)
            .collect();
        swiglu(&mut g, &u);
        for (a, b) in g.iter().zip(&want) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[cfg(feature = "parallel")]
    #[test]
    fn parallel_matmul_is_bit_identical() {
        let (rows, cols) = (1000, 257);
        let (w, x) = (random(rows * cols, 5), random(cols, 6));
        let (mut serial, mut parallel) = (vec![0.0; rows], vec![0.0; rows]);
        matmul_serial(&mut serial, &w, &x);
        matmul_parallel(&mut parallel, &w, &x);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&serial), bits(&parallel));
    }
}
