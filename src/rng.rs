//! Value-stable randomness. Every random quantity of a stage is drawn from its own
//! ChaCha20 stream (pipeline seed, stage position) when the map is built. The
//! integer and sign draws are written out here rather than taken from `rand`'s
//! distributions so that a seed keeps meaning the same numbers across crate versions.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// A stage's random stream.
pub struct StageRng(ChaCha20Rng);

impl StageRng {
    /// The stream of stage `stage` under pipeline seed `seed`.
    pub fn new(seed: u64, stage: u64) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        rng.set_stream(stage);
        StageRng(rng)
    }

    /// Uniform on `[0, n)`, `n ≥ 1`, by Lemire's multiply-and-reject (no modulo bias).
    pub fn below(&mut self, n: u32) -> u32 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u64::from(self.0.next_u32()) * u64::from(n);
            if (m as u32) >= threshold {
                return (m >> 32) as u32;
            }
        }
    }

    /// A Rademacher sign, ±1.
    pub fn sign(&mut self) -> i8 {
        if self.0.next_u32() & 1 == 0 {
            1
        } else {
            -1
        }
    }

    /// A standard normal draw (Box–Muller on two uniforms; the cosine branch only, so
    /// each call consumes exactly two uniforms).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Uniform on `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut r = StageRng::new(7, 0);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[r.below(7) as usize] += 1;
        }
        // Each count is Binomial(70000, 1/7): SD ≈ 92; 6 SD band.
        for c in counts {
            assert!((c as i64 - 10_000).abs() < 560, "{counts:?}");
        }
    }

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u32> = (0..8).map(|_| StageRng::new(1, 0).below(1000)).collect();
        let mut r0 = StageRng::new(1, 0);
        let mut r1 = StageRng::new(1, 1);
        let x: Vec<u32> = (0..8).map(|_| r0.below(1 << 30)).collect();
        let y: Vec<u32> = (0..8).map(|_| r1.below(1 << 30)).collect();
        assert_ne!(x, y);
        assert!(a.iter().all(|&v| v == a[0]));
    }
}
