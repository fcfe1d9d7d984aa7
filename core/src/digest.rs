//! The digest that says two runs gave the same bits: FNV-1a (32-bit) over the little-endian
//! bytes of every log-probability, in order.
//!
//! This is the contract between the host and the device: `txl score --json` prints it, the
//! firmware prints it, and equal digests mean bit-identical log-probabilities.
//!
//! ```
//! use txl_core::digest::{Digest, Fnv1a};
//!
//! assert_eq!(Fnv1a::of(b"foobar"), 0xbf9c_f968);
//! let mut digest = Digest::new();
//! digest.push(-0.5);
//! digest.push(-2.25);
//! assert_eq!(digest.value(), Fnv1a::of(&[(-0.5f32).to_le_bytes(), (-2.25f32).to_le_bytes()].concat()));
//! ```

/// FNV-1a, 32-bit, fed incrementally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a(u32);

impl Fnv1a {
    const OFFSET: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;

    /// The hash of nothing.
    pub const fn new() -> Fnv1a {
        Fnv1a(Self::OFFSET)
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u32::from(byte)).wrapping_mul(Self::PRIME);
        }
    }

    /// The hash so far.
    pub const fn value(&self) -> u32 {
        self.0
    }

    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> u32 {
        let mut hash = Fnv1a::new();
        hash.write(bytes);
        hash.value()
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a::new()
    }
}

/// The digest of a sequence of log-probabilities (f32), fed one at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest(Fnv1a);

impl Digest {
    /// The digest of no values.
    pub const fn new() -> Digest {
        Digest(Fnv1a::new())
    }

    /// Continues a digest whose value so far is `value` (one saved across a restart).
    pub const fn resume(value: u32) -> Digest {
        Digest(Fnv1a(value))
    }

    /// Feeds one log-probability.
    pub fn push(&mut self, log_prob: f32) {
        self.0.write(&log_prob.to_bits().to_le_bytes());
    }

    /// The digest so far.
    pub const fn value(&self) -> u32 {
        self.0.value()
    }

    /// The digest of `log_probs`.
    pub fn of(log_probs: &[f32]) -> u32 {
        let mut digest = Digest::new();
        log_probs.iter().for_each(|&v| digest.push(v));
        digest.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(Fnv1a::of(b""), 0x811c_9dc5);
        assert_eq!(Fnv1a::of(b"a"), 0xe40c_292c);
        assert_eq!(Fnv1a::of(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn the_digest_hashes_the_bits_in_order() {
        let values = [-1.0f32, -0.0, 0.0, f32::MIN_POSITIVE];
        let mut bytes = [0u8; 16];
        for (chunk, v) in bytes.chunks_exact_mut(4).zip(values) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        assert_eq!(Digest::of(&values), Fnv1a::of(&bytes));
        // -0.0 and 0.0 are equal numbers with different bits: the digest tells them apart.
        assert_ne!(Digest::of(&[0.0]), Digest::of(&[-0.0]));
        assert_ne!(Digest::of(&[-1.0, -2.0]), Digest::of(&[-2.0, -1.0]));
    }

    #[test]
    fn a_resumed_digest_continues_where_it_stopped() {
        let values = [-1.5f32, -0.25, -3.0, -7.5];
        let mut resumed = Digest::resume(Digest::of(&values[..2]));
        values[2..].iter().for_each(|&v| resumed.push(v));
        assert_eq!(resumed.value(), Digest::of(&values));
        assert_eq!(Digest::resume(Digest::new().value()), Digest::new());
    }
}
