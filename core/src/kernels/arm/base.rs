//! Kernels for the Cortex-M cores without the DSP extension (Armv7-M: Cortex-M3; Armv6-M:
//! Cortex-M0, M0+), plain Rust the compiler maps onto their loads and multiplies: int8 rows
//! four at a time, each input byte loaded once for the four (`LDRSB` with post-increment and
//! `MLA` on the M3; `LDRSB`, `MULS`, `ADDS` on Armv6-M). Integer sums, exact: the portable
//! kernels' bits.

/// Rows one pass of [`row_sums_i8`] takes.
const ROWS: usize = 4;

/// `sums[r] = values[r] · xq` in i32 for each row `r < sums.len()` of the row-major int8
/// `values (rows, cols)` ([`portable::row_sums_i8`](crate::kernels::portable::row_sums_i8):
/// over the first `min(cols, xq.len())` columns): four rows per pass, each input byte loaded
/// once for them; the last rows one at a time. The same sums.
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    let xq = &xq[..cols.min(xq.len())];
    let n = xq.len();
    let whole = sums.len() / ROWS * ROWS;
    let (blocks, rest) = sums.split_at_mut(whole);
    for (b, out) in blocks.chunks_exact_mut(ROWS).enumerate() {
        let row = |k: usize| &values[(ROWS * b + k) * cols..][..n];
        let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
        let (mut a0, mut a1, mut a2, mut a3) = (0i32, 0i32, 0i32, 0i32);
        for ((((&x, &w0), &w1), &w2), &w3) in xq.iter().zip(r0).zip(r1).zip(r2).zip(r3) {
            let x = x as i32;
            a0 = a0.wrapping_add(w0 as i32 * x);
            a1 = a1.wrapping_add(w1 as i32 * x);
            a2 = a2.wrapping_add(w2 as i32 * x);
            a3 = a3.wrapping_add(w3 as i32 * x);
        }
        out.copy_from_slice(&[a0, a1, a2, a3]);
    }
    for (k, sum) in rest.iter_mut().enumerate() {
        let row = &values[(whole + k) * cols..][..n];
        *sum = row
            .iter()
            .zip(xq)
            .fold(0i32, |acc, (&w, &x)| acc.wrapping_add(w as i32 * x as i32));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::portable;
    use crate::rng::Rng;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn row_sums_are_the_portable_sums() {
        let mut rng = Rng::new(5);
        for (rows, cols) in [(1, 1), (3, 7), (4, 16), (9, 33), (17, 128), (8, 0)] {
            let values: Vec<i8> = (0..rows * cols).map(|_| rng.next_u64() as i8).collect();
            let xq: Vec<i8> = (0..cols).map(|_| (rng.next_u64() as i8).max(-127)).collect();
            let mut ours = vec![0; rows];
            let mut theirs = vec![0; rows];
            row_sums_i8(&values, cols, &xq, &mut ours);
            portable::row_sums_i8(&values, cols, &xq, &mut theirs);
            assert_eq!(ours, theirs, "{rows} × {cols}");
        }
    }
}
