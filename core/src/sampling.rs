//! Choosing the next token from a row of log-probabilities: greedy, or seeded sampling with a
//! temperature. Deterministic on every target ([`Rng`]).

use crate::rng::Rng;

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

impl Sampling {
    /// Sampling at `temperature` with `seed`, or [`Sampling::Greedy`] when the temperature is
    /// not above 0 (how the command line and the firmware read `--temperature`).
    pub fn from_temperature(temperature: f32, seed: u64) -> Sampling {
        if temperature > 0.0 {
            Sampling::Temperature { temperature, seed }
        } else {
            Sampling::Greedy
        }
    }
}

/// Picks tokens from log-probability rows.
#[derive(Clone, Debug)]
pub struct Sampler {
    sampling: Sampling,
    rng: Rng,
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
            rng: Rng::new(seed),
        }
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
        let mut target = self.rng.unit_f32() * total;
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
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
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
