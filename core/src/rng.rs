//! One small deterministic random generator (xorshift64*), the same on every target: the
//! sampler draws from it, and tests and benchmarks use it for reproducible data.
//!
//! ```
//! use txl_core::rng::Rng;
//!
//! let mut a = Rng::new(7);
//! let mut b = Rng::new(7);
//! assert_eq!(a.next_u64(), b.next_u64());
//! assert!(a.below(10) < 10);
//! let u = a.unit_f32();
//! assert!((0.0..1.0).contains(&u));
//! ```

/// xorshift64* (Vigna, 2016): 64 bits of state, period 2^64 - 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// Replaces the seed 0, which xorshift cannot leave.
    const ZERO_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator seeded with `seed` (0 is replaced by a fixed non-zero constant).
    pub const fn new(seed: u64) -> Rng {
        Rng {
            state: if seed == 0 { Self::ZERO_SEED } else { seed },
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)` with 24 random bits (every value exact in f32).
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[-1, 1)`.
    pub fn symmetric_f32(&mut self) -> f32 {
        2.0 * self.unit_f32() - 1.0
    }

    /// Uniform in `0..n` (`0` when `n` is 0); the modulo bias is below `n / 2^64`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `0..n` as a `usize`.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_same_seed_gives_the_same_stream_and_others_differ() {
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            [rng.next_u64(), rng.next_u64(), rng.next_u64()]
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        assert_eq!(draw(0), draw(0x9E37_79B9_7F4A_7C15));
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn draws_cover_their_range_evenly() {
        let mut rng = Rng::new(11);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.index(10)] += 1;
        }
        // Each bin expects 10,000 with a standard deviation of 95: 6 sigma either way.
        assert!(
            counts.iter().all(|&c| (9_430..=10_570).contains(&c)),
            "{counts:?}"
        );
        let mean = (0..100_000).map(|_| rng.unit_f64()).sum::<f64>() / 100_000.0;
        assert!((mean - 0.5).abs() < 0.006, "mean {mean}");
        assert!((0..10_000).all(|_| (-1.0..1.0).contains(&rng.symmetric_f32())));
    }
}
