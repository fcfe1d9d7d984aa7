//! RV32IM kernels: the base integer instructions and the `M` extension's `MUL`, no SIMD (the
//! RV32IMAC core of the `riscv32-virt` board). Plain, safe Rust, compiled into the host's unit
//! tests as well.
//!
//! A multiply-accumulate costs at least three instructions here: the weight's `LB`, a `MUL`
//! and an `ADD`. The kernels take several weight rows per pass, so that each input byte loaded
//! meets all of them, and unroll `STEP` columns, so that one pointer step per row and input
//! covers them all. The inner loops, as rustc 1.95 compiles them:
//!
//! - [`row_sums_i8`]: four rows a pass; per column one input `LB` and four each of `LB`, `MUL`
//!   and `ADD`: 214 instructions per 64 multiply-accumulates with the five pointer steps and the
//!   branch, 3.34 each.
//! - [`row_sums_pair_i8`]: three rows for two inputs a pass; per column two input `LB`s, three
//!   weight `LB`s, six `MUL`s and six `ADD`s: 280 instructions per 96, 2.92 each.
//!
//! Each column is a step of its own (`column`), ended by `black_box(())`, which tells the
//! compiler that memory may have changed there: the next column's loads stay after this
//! column's, so no more values are live than there are registers. Without it the compiler
//! loads columns ahead and keeps sums on the stack: 351 instructions for the 64
//! multiply-accumulates of four rows, 542 for the 96 of the pair. It adds no instruction.
//!
//! Two int8 products in one `MUL` (two inputs in the 16-bit halves of a register, one weight)
//! do not pay: a product reaches `(-128)²`, so a half holds the sum of two products at most
//! before it must be split out, and the split costs more than the `MUL` saved.
//!
//! Integer sums are exact in any order (`Config::validate` bounds the widths so that no sum
//! overflows; the additions wrap as the portable ones do in a release build), so these kernels
//! give the portable kernels' sums.

/// Columns per step of the inner loops, unrolled (`unrolled!`).
const STEP: usize = 16;

/// Rows per pass of [`row_sums_i8`].
const ROWS: usize = 4;

/// Rows per pass of [`row_sums_pair_i8`] (four rows for two inputs would keep sums on the
/// stack).
const PAIR_ROWS: usize = 3;

/// One column of a pass: `acc[p][j] += x[p] * w[j]` for the `P` inputs' values `x` and the
/// `R` rows' weights `w` of that column.
#[inline(always)]
fn column<const R: usize, const P: usize>(acc: &mut [[i32; R]; P], x: [i8; P], w: [i8; R]) {
    let x = x.map(i32::from);
    for (j, w) in w.into_iter().enumerate() {
        let w = i32::from(w);
        for (acc, x) in acc.iter_mut().zip(x) {
            acc[j] = acc[j].wrapping_add(x * w);
        }
    }
    // the next column's loads after this column's products (see the module docs)
    core::hint::black_box(());
}

/// [`column()`] for each of the columns named, `$k` of step `$i` of the inputs `$x` and rows `$r`.
macro_rules! unrolled {
    ($acc:ident, $x:ident, $r:ident, $i:ident; $($k:literal)*) => {
        $(
            column(
                &mut $acc,
                core::array::from_fn(|p| $x[p][$i][$k]),
                core::array::from_fn(|j| $r[j][$i][$k]),
            );
        )*
    };
}

/// `sums[p][j] = rows[j] · xs[p]` over the inputs' length (every row at least as long):
/// [`STEP`] columns a step, then the columns after the last whole step one at a time.
#[inline(always)]
fn pass<const R: usize, const P: usize>(rows: [&[i8]; R], xs: [&[i8]; P]) -> [[i32; R]; P] {
    let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    let steps = cols / STEP;
    let x: [&[[i8; STEP]]; P] = xs.map(|x| &x.as_chunks::<STEP>().0[..steps]);
    let r: [&[[i8; STEP]]; R] = rows.map(|row| &row.as_chunks::<STEP>().0[..steps]);
    let mut acc = [[0i32; R]; P];
    for i in 0..steps {
        unrolled!(acc, x, r, i; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    }
    for c in steps * STEP..cols {
        column(
            &mut acc,
            core::array::from_fn(|p| xs[p][c]),
            core::array::from_fn(|j| rows[j][c]),
        );
    }
    acc
}

/// `sums[p][r] = row_r · xs[p]` for the rows of `cols` bytes of `values` (as many as the
/// outputs, all of one length), `R` rows a pass and the last rows one at a time; each input
/// at most `cols` long.
#[inline(always)]
fn rows_in_passes<const R: usize, const P: usize>(
    values: &[i8],
    cols: usize,
    xs: [&[i8]; P],
    mut sums: [&mut [i32]; P],
) {
    let count = sums.iter().map(|s| s.len()).min().unwrap_or(0);
    if cols == 0 {
        return sums.into_iter().for_each(|s| s.fill(0));
    }
    let mut rows = values[..count * cols].chunks_exact(cols);
    let mut first = 0;
    while first + R <= count {
        let block: [&[i8]; R] = core::array::from_fn(|_| rows.next().unwrap_or_default());
        let acc = pass(block, xs);
        for (sums, acc) in sums.iter_mut().zip(acc) {
            sums[first..first + R].copy_from_slice(&acc);
        }
        first += R;
    }
    for (r, row) in rows.enumerate() {
        let acc = pass([row], xs);
        for (sums, [acc]) in sums.iter_mut().zip(acc) {
            sums[first + r] = acc;
        }
    }
}

/// `sums[r] = values[r] · xq` in i32 for each row `r < sums.len()` of the row-major int8
/// `values (rows, cols)` ([`portable::row_sums_i8`](crate::kernels::portable::row_sums_i8):
/// over the first `min(cols, xq.len())` columns): four rows per pass, the last rows one at a
/// time. The same sums.
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    rows_in_passes::<ROWS, 1>(values, cols, [&xq[..cols.min(xq.len())]], [sums]);
}

/// [`row_sums_i8`] for two inputs at once, `sums[p][r] = values[r] · xq[p]`: three rows per
/// pass for both inputs, each weight loaded once for the two; the last rows one at a time.
/// Inputs of different lengths, or rows one output has and the other has not, take
/// [`row_sums_i8`]. The same sums as one [`row_sums_i8`] per input.
pub fn row_sums_pair_i8(values: &[i8], cols: usize, xq: [&[i8]; 2], sums: [&mut [i32]; 2]) {
    let [sums_a, sums_b] = sums;
    let [x_a, x_b] = xq.map(|x| &x[..cols.min(x.len())]);
    if x_a.len() != x_b.len() {
        row_sums_i8(values, cols, x_a, sums_a);
        return row_sums_i8(values, cols, x_b, sums_b);
    }
    let rows = sums_a.len().min(sums_b.len());
    let (sums_a, rest_a) = sums_a.split_at_mut(rows);
    let (sums_b, rest_b) = sums_b.split_at_mut(rows);
    let (values, rest) = values.split_at(rows * cols);
    rows_in_passes::<PAIR_ROWS, 2>(values, cols, [x_a, x_b], [sums_a, sums_b]);
    // the rows only one output has
    row_sums_i8(rest, cols, x_a, rest_a);
    row_sums_i8(rest, cols, x_b, rest_b);
}

#[cfg(test)]
mod tests {
    use super::{row_sums_i8, row_sums_pair_i8};
    use crate::kernels::portable;
    use crate::rng::Rng;
    use alloc::{vec, vec::Vec};

    /// Pseudo-random int8 values, a share of them the extremes -128 and 127.
    fn bytes(count: usize, rng: &mut Rng) -> Vec<i8> {
        (0..count)
            .map(|_| match rng.next_u64() >> 59 {
                0 => -128,
                1 => 127,
                bits => (bits as u8).wrapping_mul(37).wrapping_add(rng.next_u64() as u8) as i8,
            })
            .collect()
    }

    /// Columns that reach every edge of the loops: none, a partial step, whole steps, both.
    fn widths() -> Vec<usize> {
        if cfg!(miri) {
            vec![0, 1, 15, 16, 17, 35]
        } else {
            vec![
                0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 47, 48, 64, 100, 128, 129, 255, 256,
            ]
        }
    }

    fn row_counts() -> Vec<usize> {
        if cfg!(miri) {
            vec![0, 1, 3, 4, 5, 7]
        } else {
            (0..=13).collect()
        }
    }

    #[test]
    fn int8_rows_equal_the_portable_sums() {
        let mut rng = Rng::new(11);
        for cols in widths() {
            for rows in row_counts() {
                let values = bytes(rows * cols, &mut rng);
                let x = bytes(cols, &mut rng);
                let (mut fast, mut slow) = (vec![7i32; rows], vec![-7i32; rows]);
                row_sums_i8(&values, cols, &x, &mut fast);
                portable::row_sums_i8(&values, cols, &x, &mut slow);
                assert_eq!(fast, slow, "{rows} x {cols}");
            }
        }
    }

    #[test]
    fn int8_rows_of_extreme_values_give_the_largest_sums() {
        let cols = if cfg!(miri) { 40 } else { 1000 };
        for (w, x) in [(-128i8, -128i8), (-128, 127), (127, 127), (127, -128)] {
            let values = vec![w; 5 * cols];
            let xq = vec![x; cols];
            let expected = cols as i32 * i32::from(w) * i32::from(x);
            let mut sums = [0i32; 5];
            row_sums_i8(&values, cols, &xq, &mut sums);
            assert_eq!(sums, [expected; 5], "{w} x {x}");
            // the other input the other extreme
            let y = if x == 127 { -128i8 } else { 127 };
            let other = cols as i32 * i32::from(w) * i32::from(y);
            let (mut a, mut b) = ([0i32; 5], [0i32; 5]);
            row_sums_pair_i8(&values, cols, [&xq, &vec![y; cols]], [&mut a, &mut b]);
            assert_eq!((a, b), ([expected; 5], [other; 5]), "{w} x {x}");
        }
    }

    #[test]
    fn int8_rows_for_two_inputs_equal_the_portable_sums() {
        let mut rng = Rng::new(12);
        for cols in widths() {
            for rows in row_counts() {
                let values = bytes(rows * cols, &mut rng);
                let (x_a, x_b) = (bytes(cols, &mut rng), bytes(cols, &mut rng));
                let (mut a, mut b) = (vec![7i32; rows], vec![7i32; rows]);
                row_sums_pair_i8(&values, cols, [&x_a, &x_b], [&mut a, &mut b]);
                for (x, fast) in [(&x_a, &a), (&x_b, &b)] {
                    let mut slow = vec![-7i32; rows];
                    portable::row_sums_i8(&values, cols, x, &mut slow);
                    assert_eq!(fast, &slow, "{rows} x {cols}");
                }
            }
        }
    }

    #[test]
    fn int8_rows_take_the_shorter_input_and_each_output_its_rows() {
        let mut rng = Rng::new(13);
        let (rows, cols) = (7, 37);
        let values = bytes(rows * cols, &mut rng);
        let x = bytes(cols, &mut rng);
        // an input shorter than the rows: its columns only, as the portable dot product
        for short in [0, 5, 16, 20] {
            let (mut fast, mut slow) = (vec![1i32; rows], vec![2i32; rows]);
            row_sums_i8(&values, cols, &x[..short], &mut fast);
            portable::row_sums_i8(&values, cols, &x[..short], &mut slow);
            assert_eq!(fast, slow, "input of {short}");
            let (mut a, mut b) = (vec![1i32; rows], vec![1i32; rows]);
            row_sums_pair_i8(&values, cols, [&x[..short], &x], [&mut a, &mut b]);
            assert_eq!(a, slow, "input of {short} beside a whole one");
        }
        // outputs of different lengths: each gets its own rows
        let (mut a, mut b) = (vec![0i32; 2], vec![0i32; rows]);
        row_sums_pair_i8(&values, cols, [&x, &x], [&mut a, &mut b]);
        let mut slow = vec![0i32; rows];
        portable::row_sums_i8(&values, cols, &x, &mut slow);
        assert_eq!((a.as_slice(), b.as_slice()), (&slow[..2], slow.as_slice()));
    }
}
