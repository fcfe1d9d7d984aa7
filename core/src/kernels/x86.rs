//! x86-64 kernels with AVX2, chosen at run time (feature `std`: the detection needs the standard
//! library). Integer sums are exact in any order, so they give the scalar kernels' bits.

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_cvtepi8_epi16, _mm256_extracti128_si256,
    _mm256_madd_epi16, _mm256_setzero_si256, _mm_add_epi32, _mm_add_ps, _mm_cvtph_ps, _mm_cvtsi128_si32,
    _mm_loadl_epi64, _mm_loadu_ps, _mm_loadu_si128, _mm_mul_ps, _mm_setzero_ps, _mm_shuffle_epi32,
    _mm_storeu_ps,
};

use half::f16;

/// Whether this CPU has AVX2 (detected once, then cached by the standard library).
#[inline]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

/// Whether this CPU converts f16 to f32 in hardware (F16C; detected once, then cached).
#[inline]
pub fn has_f16c() -> bool {
    std::is_x86_feature_detected!("f16c")
}

/// `sum a[i] * b[i]` for `a` and `b` of one length, f16 weights widened by `VCVTPH2PS` (exact):
/// four lanes that are the portable kernel's four accumulators, each product rounded and then
/// added as there, so the bits equal `scalar::dot_f16`'s.
///
/// # Safety
/// The CPU must support F16C ([`has_f16c`]).
#[target_feature(enable = "f16c")]
pub unsafe fn dot_f16(a: &[f16], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let body = n / 4 * 4;
    let mut acc = _mm_setzero_ps();
    for (ca, cb) in a[..body].chunks_exact(4).zip(b[..body].chunks_exact(4)) {
        // SAFETY: each chunk is four readable f16 (8 bytes) and four f32; the loads have no
        // alignment requirement.
        let (w, x) = unsafe {
            (
                _mm_cvtph_ps(_mm_loadl_epi64(ca.as_ptr().cast())),
                _mm_loadu_ps(cb.as_ptr()),
            )
        };
        acc = _mm_add_ps(acc, _mm_mul_ps(w, x));
    }
    let mut lanes = [0.0f32; 4];
    // SAFETY: `lanes` has room for four f32.
    unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut tail = 0.0;
    for (w, x) in a[body..n].iter().zip(&b[body..n]) {
        tail += super::scalar::f16_to_f32(*w) * x;
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail
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
    use half::f16;

    #[test]
    fn f16c_dot_equals_the_scalar_dot_for_every_half() {
        if !super::has_f16c() {
            eprintln!("SKIPPED: this CPU has no F16C");
            return;
        }
        // every f16 bit pattern as a weight (NaNs compared as NaNs), against varied inputs
        let weights: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let inputs: Vec<f32> = (0..weights.len())
            .map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0)
            .collect();
        for len in [0usize, 1, 3, 4, 5, 31, 32, 33] {
            for start in (0..weights.len() - len).step_by(997) {
                let (a, b) = (&weights[start..start + len], &inputs[start..start + len]);
                // SAFETY: F16C was detected above.
                let fast = unsafe { super::dot_f16(a, b) };
                let slow = super::super::scalar::dot_f16(a, b);
                assert!(
                    fast.to_bits() == slow.to_bits() || (fast.is_nan() && slow.is_nan()),
                    "length {len} at {start}: {fast} vs {slow}"
                );
            }
        }
    }

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
