//! Choosing the next token from a row of log-probabilities: greedy, or seeded sampling with a
//! temperature. Deterministic on every target (a 64-bit xorshift generator).

/// How to pick the next token.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Sampling {
    /// The most likely token.
    Greedy,
    /// Sample from `p^(1 / temperature)`, seeded.
    Temperature {
        /// Above 0; 1 samples the model's distribution.
        temperature: f32,
        /// Generator seed.
        seed: u64,
    },
}

/// Picks tokens from log-probability rows.
#[derive(Clone, Debug)]
pub struct Sampler {
    sampling: Sampling,
    state: u64,
}

impl Sampler {
    /// A sampler; the seed 0 is replaced by a fixed non-zero constant.
    pub fn new(sampling: Sampling) -> Sampler {
        let seed = match sampling {
            Sampling::Greedy => 0,
            Sampling::Temperature { seed, .. } => seed,
        };
        Sampler {
            sampling,
            state: if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed },
        }
    }

    fn next_unit(&mut self) -> f32 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40; // 24 random bits
        bits as f32 / (1u32 << 24) as f32
    }

    /// The next token given `log_probs` (one per token id).
    pub fn pick(&mut self, log_probs: &[f32]) -> u32 {
        let argmax = crate::kernels::argmax(log_probs);
        let temperature = match self.sampling {
            Sampling::Greedy => return argmax as u32,
            Sampling::Temperature { temperature, .. } if temperature > 0.0 => temperature,
            Sampling::Temperature { .. } => return argmax as u32,
        };
        let top = log_probs[argmax];
        let weight = |v: f32| libm::expf((v - top) / temperature);
        let total: f32 = log_probs.iter().map(|&v| weight(v)).sum();
        let mut target = self.next_unit() * total;
        for (i, &v) in log_probs.iter().enumerate() {
            target -= weight(v);
            if target < 0.0 {
                return i as u32;
            }
        }
        argmax as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_most_likely_token() {
        let mut sampler = Sampler::new(Sampling::Greedy);
        assert_eq!(sampler.pick(&[-3.0, -0.1, -2.0]), 1);
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let mut sampler = Sampler::new(Sampling::Temperature {
            temperature: 1.0,
            seed: 7,
        });
        let log_probs = [libm::logf(0.8), libm::logf(0.2)];
        let ones = (0..2000).filter(|_| sampler.pick(&log_probs) == 1).count();
        assert!((300..500).contains(&ones), "{ones} of 2000 draws picked p = 0.2");
    }
}
