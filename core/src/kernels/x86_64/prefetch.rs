//! Prefetches: weights asked for from memory a share at a time while the kernels work on the
//! rows before them.

/// Asks the caches for the share `share` of `parts` equal shares of `items`' bytes (whole 64-byte
/// lines), into the cache level `LEVEL` (1 or 2) and those below it: the second for lines the
/// first would lose to other reads before they are used. It reads nothing into the program.
#[inline]
pub fn share_into<T, const LEVEL: u8>(items: &[T], share: core::ops::Range<usize>, parts: usize) {
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        const LINE: usize = 64;
        let bytes = core::mem::size_of_val(items);
        let lines = bytes.div_ceil(LINE);
        let parts = parts.max(1);
        for line in share.start * lines / parts..(share.end * lines / parts).min(lines) {
            // SAFETY: `line * LINE < bytes`, so the address is inside `items`; a prefetch reads
            // nothing into the program and never faults.
            unsafe {
                let at = items.as_ptr().cast::<i8>().add(line * LINE);
                if LEVEL == 1 {
                    _mm_prefetch::<{ _MM_HINT_T0 }>(at);
                } else {
                    _mm_prefetch::<{ _MM_HINT_T1 }>(at);
                }
            }
        }
    }
}

/// Bytes of rows from which the AVX kernels of several inputs ask for the next block while it works on
/// one: smaller matrices (a small model's, the attention's cached keys) come from the caches,
/// where asking only costs time.
pub const LEAST_BYTES: usize = 1 << 20;
