//! Elementary functions built only from `+ - * /` and bit manipulation.
//!
//! Those operations are correctly rounded by IEEE 754, so unlike libm calls (which differ
//! between libcs and may be constant-folded by the compiler with another implementation)
//! these give the same bits everywhere.

const SHIFT_F32: f32 = 12_582_912.0; // 1.5 * 2^23
const SHIFT_F64: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52

/// `e^x` with about 1 ulp of error; inputs are clamped to [-87, 88], which keeps the
/// result a finite normal float.
#[inline]
pub fn exp(x: f32) -> f32 {
    // ln 2 split so that `n * LN2_HI` is exact for the |n| <= 127 we can produce.
    const LN2_HI: f32 = 355.0 / 512.0;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    // Adding 1.5 * 2^23 rounds to the nearest integer and leaves it in the low mantissa
    // bits: branch-free and vectorisable, unlike `round()` which may be a libm call.
    let t = x * std::f32::consts::LOG2_E + SHIFT_F32;
    let n = t - SHIFT_F32;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Taylor series of e^r; |r| <= ln(2) / 2 makes degree 7 accurate to f32 precision.
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    let n_int = t.to_bits() as i32 - SHIFT_F32.to_bits() as i32;
    p * f32::from_bits(((n_int + 127) as u32) << 23)
}

/// `e^x` in f64 for moderate |x| (< 700). Only used to build tables, so it favours
/// simplicity over speed.
pub fn exp_f64(x: f64) -> f64 {
    let n = (x * std::f64::consts::LOG2_E + SHIFT_F64) - SHIFT_F64;
    let r = x - n * std::f64::consts::LN_2;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for k in 1..=16 {
        term = term * r / f64::from(k);
        sum += term;
    }
    sum * f64::from_bits(((n as i64 + 1023) as u64) << 52)
}

/// `(sin x, cos x)` in f64 for |x| up to a few thousand, accurate to ~1e-15.
pub fn sin_cos_f64(x: f64) -> (f64, f64) {
    use std::f64::consts::TAU;
    let k = (x / TAU + SHIFT_F64) - SHIFT_F64;
    let r = x - k * TAU; // now in [-pi, pi]
    let r2 = r * r;
    let (mut s_term, mut c_term) = (r, 1.0f64);
    let (mut s, mut c) = (r, 1.0f64);
    for n in 1..=15 {
        let n2 = f64::from(2 * n);
        s_term *= -r2 / (n2 * (n2 + 1.0));
        c_term *= -r2 / ((n2 - 1.0) * n2);
        s += s_term;
        c += c_term;
    }
    (s, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 1e-6,
                "exp({x}) = {got}, want {want}"
            );
            x += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1e30) > 0.0 && exp(1e30).is_finite());
    }

    #[test]
    fn f64_helpers_match_std() {
        for i in 0..2000 {
            let x = f64::from(i) * 0.731 - 300.0;
            let (s, c) = sin_cos_f64(x);
            assert!(
                (s - x.sin()).abs() < 1e-12 && (c - x.cos()).abs() < 1e-12,
                "{x}"
            );
            let e = x / 40.0;
            assert!((exp_f64(e) - e.exp()).abs() / e.exp() < 1e-14, "{e}");
        }
    }
}
