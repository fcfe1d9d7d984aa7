//! x86-64 kernels with AVX2, chosen at run time (feature `std`: the detection needs the standard
//! library). Integer sums are exact in any order, so they give the scalar kernels' bits.

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_cvtepi8_epi16, _mm256_extracti128_si256,
    _mm256_madd_epi16, _mm256_setzero_si256, _mm_add_epi32, _mm_cvtsi128_si32, _mm_loadu_si128,
    _mm_shuffle_epi32,
};

/// Whether this CPU has AVX2 (detected once, then cached by the standard library).
#[inline]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

/// `sum a[i] * b[i]` in i32, 16 products per step; equal to `scalar::dot_i8`.
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`]).
#[target_feature(enable = "avx2")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let body = n / 16 * 16;
    let mut acc: __m256i = _mm256_setzero_si256();
    for (ca, cb) in a[..body].chunks_exact(16).zip(b[..body].chunks_exact(16)) {
        // SAFETY: each chunk is 16 readable bytes; `loadu` has no alignment requirement.
        let (va, vb) = unsafe {
            (
                _mm_loadu_si128(ca.as_ptr().cast()),
                _mm_loadu_si128(cb.as_ptr().cast()),
            )
        };
        // widen to i16 (exact, -127..=127 or -128), multiply pairs and add them to i32 lanes
        let products = _mm256_madd_epi16(_mm256_cvtepi8_epi16(va), _mm256_cvtepi8_epi16(vb));
        acc = _mm256_add_epi32(acc, products);
    }
    let halves = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256::<1>(acc));
    let pairs = _mm_add_epi32(halves, _mm_shuffle_epi32::<0b01_00_11_10>(halves));
    let total = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
    _mm_cvtsi128_si32(total) + super::scalar::dot_i8(&a[body..n], &b[body..n])
}

#[cfg(test)]
mod tests {
    #[test]
    fn avx2_dot_equals_the_scalar_dot() {
        if !super::has_avx2() {
            eprintln!("SKIPPED: this CPU has no AVX2");
            return;
        }
        let mut state = 1u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 24) as i8
        };
        for len in [0usize, 1, 15, 16, 17, 31, 64, 100, 1000, 4099] {
            let a: Vec<i8> = (0..len).map(|_| next()).collect();
            let mut b: Vec<i8> = (0..len).map(|_| next()).collect();
            b.iter_mut().take(3).for_each(|v| *v = -128);
            // SAFETY: AVX2 was detected above.
            let fast = unsafe { super::dot_i8(&a, &b) };
            assert_eq!(fast, super::super::scalar::dot_i8(&a, &b), "length {len}");
        }
    }
}
