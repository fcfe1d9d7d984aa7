//! The f32 and f16 weight rows the AVX float kernels read, and the portable tail of a row.

use core::arch::x86_64::*;

use half::f16;

/// A weight type the row kernels read: f32 as it is, f16 widened exactly by F16C.
pub trait RowElement: Copy {
    /// Four elements at `a` and four at `b` as f32: `[a0, a1, a2, a3 | b0, b1, b2, b3]`.
    ///
    /// # Safety
    /// Four elements must be readable at each pointer, and the CPU must have AVX and F16C.
    unsafe fn two_quads(a: *const Self, b: *const Self) -> __m256;
    /// Four elements at `a` as f32.
    ///
    /// # Safety
    /// As for [`RowElement::two_quads`].
    unsafe fn quad(a: *const Self) -> __m128;
    /// Eight elements at `a` as f32.
    ///
    /// # Safety
    /// Eight elements must be readable at `a`, and the CPU must have AVX and F16C.
    unsafe fn eight(a: *const Self) -> __m256;
    /// One element as f32, as the portable kernel widens it.
    fn widen(self) -> f32;
    /// Whether the rows are f32 already, to be read in place (else widened first, by
    /// [`RowElement::eight`] and [`RowElement::quad`]).
    const IN_PLACE: bool;
}

impl RowElement for f32 {
    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn two_quads(a: *const f32, b: *const f32) -> __m256 {
        // SAFETY: the caller gives four readable f32 at each pointer; no alignment needed.
        unsafe { _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(_mm_loadu_ps(a)), _mm_loadu_ps(b)) }
    }

    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn quad(a: *const f32) -> __m128 {
        // SAFETY: the caller gives four readable f32; no alignment needed.
        unsafe { _mm_loadu_ps(a) }
    }

    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn eight(a: *const f32) -> __m256 {
        // SAFETY: the caller gives eight readable f32; no alignment needed.
        unsafe { _mm256_loadu_ps(a) }
    }

    #[inline]
    fn widen(self) -> f32 {
        self
    }

    const IN_PLACE: bool = true;
}

impl RowElement for f16 {
    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn two_quads(a: *const f16, b: *const f16) -> __m256 {
        // SAFETY: the caller gives four readable f16 (8 bytes) at each pointer; `MOVQ`'s 64-bit
        // loads need no alignment (`_mm_loadh_pd` would: it reads an `f64`, 8-byte aligned, and
        // f16 rows are 2-byte aligned).
        unsafe {
            let (low, high) = (_mm_loadl_epi64(a.cast()), _mm_loadl_epi64(b.cast()));
            _mm256_cvtph_ps(_mm_unpacklo_epi64(low, high))
        }
    }

    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn quad(a: *const f16) -> __m128 {
        // SAFETY: the caller gives four readable f16 (8 bytes); no alignment needed.
        unsafe { _mm_cvtph_ps(_mm_loadl_epi64(a.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn eight(a: *const f16) -> __m256 {
        // SAFETY: the caller gives eight readable f16 (16 bytes); no alignment needed.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(a.cast())) }
    }

    #[inline]
    fn widen(self) -> f32 {
        crate::kernels::portable::f16_to_f32(self)
    }

    const IN_PLACE: bool = false;
}

/// The portable kernels' `tail`: columns `body..x.len()` added in order to 0.
///
/// # Safety
/// `x.len()` elements must be readable at `row`.
#[inline]
pub unsafe fn row_tail<T: RowElement>(row: *const T, x: &[f32], body: usize) -> f32 {
    let mut tail = 0.0;
    for (c, x) in x.iter().enumerate().skip(body) {
        // SAFETY: `c < x.len()`.
        tail += unsafe { *row.add(c) }.widen() * x;
    }
    tail
}
