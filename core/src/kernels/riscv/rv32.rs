//! RV32IM kernels: the base integer instructions and the `M` extension's `MUL`, no SIMD (the
//! RV32IMAC core of the `riscv32-virt` board). Plain, safe Rust, compiled into the host's unit
//! tests as well, but for one block of assembly: eight int8 rows a pass ([`row_sums_i8`]).
//!
//! A multiply-accumulate costs at least three instructions here: the weight's `LB`, a `MUL`
//! and an `ADD`. The kernels take several weight rows per pass, so that each input byte loaded
//! meets all of them, and unroll `STEP` columns, so that one pointer step per row and input
//! covers them all. The inner loops, as rustc 1.95 compiles them:
//!
//! - [`row_sums_i8`]: for rows of 128, 256 or 512 columns sixteen rows a pass in assembly, the
//!   sums in registers and the rows at immediate offsets from four pointers: 790 instructions
//!   per 256 multiply-accumulates, 3.09 each; for other widths eight rows a pass in assembly
//!   (the compiler keeps eight rows' sums on the stack); per column one input `LB` and eight
//!   each of `LB`, `MUL` and `ADD`: 410 instructions per 128 multiply-accumulates with the nine
//!   pointer steps and the branch, 3.20 each. The rows after the last eight four a pass in
//!   Rust: 214 instructions per 64, 3.34 each.
//! - [`row_sums_pair_i8`]: three rows for two inputs a pass; per column two input `LB`s, three
//!   weight `LB`s, six `MUL`s and six `ADD`s: 278 instructions per 96, 2.90 each.
//! - [`key_sums_i8`]: four keys a pass as four rows, each 16-bit query value (`LH`) meeting
//!   them: 214 instructions per 64, as [`row_sums_i8`].
//! - [`value_sums_i8`]: sixteen columns with their sums in registers, each weight (`LW`)
//!   meeting them: 53 instructions per 16, 3.31 each.
//! - [`row_sums_i4`]: four rows a pass, two products a `MUL` (the int4 section below): 84
//!   instructions per block of eight columns of the four rows (2.63 per multiply-accumulate);
//!   a group of 32 columns then costs about 190 more for the four rows (the sums out of their
//!   accumulators, the multipliers, the i64 sums, and the registers the inner loop needs saved
//!   and restored): about 4.1 per multiply-accumulate in all.
//!
//! Each column is a step of its own (`column`), ended by `black_box(())`, which tells the
//! compiler that memory may have changed there: the next column's loads stay after this
//! column's, so no more values are live than there are registers. Without it the compiler
//! loads columns ahead and keeps sums on the stack: 351 instructions for the 64
//! multiply-accumulates of four rows, 542 for the 96 of the pair, 82 for the 16 of the values'
//! columns. It adds no instruction.
//!
//! Two int8 products in one `MUL` (two inputs in the 16-bit halves of a register, one weight)
//! do not pay: a product reaches `(-128)²`, so a half holds the sum of two products at most
//! before it must be split out, and the split costs more than the `MUL` saved. int4 products
//! are small enough: sixteen `MUL`s, 32 products, add up in a half (below).
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
fn column<const R: usize, const P: usize>(acc: &mut [[i32; R]; P], x: [i32; P], w: [i8; R]) {
    for (j, w) in w.into_iter().enumerate() {
        let w = i32::from(w);
        for (acc, x) in acc.iter_mut().zip(x) {
            acc[j] = acc[j].wrapping_add(x.wrapping_mul(w));
        }
    }
    // the next column's loads after this column's products (see the module docs)
    core::hint::black_box(());
}

/// [`column()`] for each pair of columns named: column `$k` of step `$i` of the rows `$r`,
/// value `$h` of step `$i` of the inputs `$x`.
macro_rules! unrolled {
    ($acc:ident, $x:ident, $r:ident, $i:ident; $(($k:literal, $h:literal))*) => {
        $(
            column(
                &mut $acc,
                core::array::from_fn(|p| $x[p][$i][$h].into()),
                core::array::from_fn(|j| $r[j][$i][$k]),
            );
        )*
    };
}

/// Where an input keeps its value of column `c`: at `c`, or (`PAIRED`, a query as
/// `int8_attention::QueryWords` widens it, seen as 16-bit halves) at `c` with the middle two of
/// each four swapped: columns `4g` and `4g + 2` share a word, then `4g + 1` and `4g + 3`.
#[inline(always)]
const fn input_index<const PAIRED: bool>(c: usize) -> usize {
    if PAIRED {
        c / 4 * 4 + [0, 2, 1, 3][c % 4]
    } else {
        c
    }
}

/// `sums[p][j] = Σ_c rows[j][c] · xs[p][input_index(c)]` over the first `cols` columns (every
/// row at least as long, every input as far as it is read): [`STEP`] columns a step, then the
/// columns after the last whole step one at a time.
#[inline(always)]
fn pass<const R: usize, const P: usize, X: Copy + Into<i32>, const PAIRED: bool>(
    rows: [&[i8]; R],
    xs: [&[X]; P],
    cols: usize,
) -> [[i32; R]; P] {
    let steps = cols / STEP;
    let x: [&[[X; STEP]]; P] = xs.map(|x| &x.as_chunks::<STEP>().0[..steps]);
    let r: [&[[i8; STEP]]; R] = rows.map(|row| &row.as_chunks::<STEP>().0[..steps]);
    let mut acc = [[0i32; R]; P];
    for i in 0..steps {
        if PAIRED {
            unrolled!(acc, x, r, i; (0, 0) (1, 2) (2, 1) (3, 3) (4, 4) (5, 6) (6, 5) (7, 7)
                (8, 8) (9, 10) (10, 9) (11, 11) (12, 12) (13, 14) (14, 13) (15, 15));
        } else {
            unrolled!(acc, x, r, i; (0, 0) (1, 1) (2, 2) (3, 3) (4, 4) (5, 5) (6, 6) (7, 7)
                (8, 8) (9, 9) (10, 10) (11, 11) (12, 12) (13, 13) (14, 14) (15, 15));
        }
    }
    for c in steps * STEP..cols {
        column(
            &mut acc,
            core::array::from_fn(|p| xs[p][input_index::<PAIRED>(c)].into()),
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
    let width = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    let mut rows = values[..count * cols].chunks_exact(cols);
    let mut first = 0;
    while first + R <= count {
        let block: [&[i8]; R] = core::array::from_fn(|_| rows.next().unwrap_or_default());
        let acc = pass::<R, P, i8, false>(block, xs, width);
        for (sums, acc) in sums.iter_mut().zip(acc) {
            sums[first..first + R].copy_from_slice(&acc);
        }
        first += R;
    }
    for (r, row) in rows.enumerate() {
        let acc = pass::<1, P, i8, false>([row], xs, width);
        for (sums, [acc]) in sums.iter_mut().zip(acc) {
            sums[first + r] = acc;
        }
    }
}

/// `sums[r] = values[r] · xq` in i32 for each row `r < sums.len()` of the row-major int8
/// `values (rows, cols)` ([`portable::row_sums_i8`](crate::kernels::portable::row_sums_i8):
/// over the first `min(cols, xq.len())` columns): sixteen rows a pass for rows of 128, 256 or
/// 512 columns ([`tall_rows`]), else eight, the last rows four and then one at a time. The
/// same sums.
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    let x = &xq[..cols.min(xq.len())];
    let n = x.len();
    let done = tall_rows(values, cols, x, sums);
    let (values, sums) = (&values[done * cols..], &mut sums[done..]);
    let blocks = sums.len() / WIDE_ROWS * WIDE_ROWS;
    let (wide, rest) = sums.split_at_mut(blocks);
    for (b, out) in wide.chunks_exact_mut(WIDE_ROWS).enumerate() {
        let rows = core::array::from_fn(|k| &values[(WIDE_ROWS * b + k) * cols..][..n]);
        out.copy_from_slice(&eight_rows(x, rows));
    }
    rows_in_passes::<ROWS, 1>(&values[blocks * cols..], cols, [x], [rest]);
}

/// Rows per pass of [`tall_rows`].
const TALL_ROWS: usize = 16;

/// [`row_sums_i8`]'s rows sixteen a pass for a width the kernel is built for (`COLS`: 128, 256
/// or 512 columns, every row whole), each input byte loaded once for the sixteen; returns how
/// many rows it summed (whole passes, 0 for another width), the caller sums the rest.
fn tall_rows(values: &[i8], cols: usize, x: &[i8], sums: &mut [i32]) -> usize {
    use crate::kernels::portable::row_passes;
    match (cols, x.len() == cols) {
        (128, true) => row_passes(values, cols, sums, |rows| sixteen_rows::<128>(x, rows)),
        (256, true) => row_passes(values, cols, sums, |rows| sixteen_rows::<256>(x, rows)),
        (512, true) => row_passes(values, cols, sums, |rows| sixteen_rows::<512>(x, rows)),
        _ => 0,
    }
}

/// `row_k · x` for the sixteen rows of `COLS` columns in `rows` (`x` `COLS` long): off
/// RISC-V, [`pass`].
#[cfg(not(target_arch = "riscv32"))]
fn sixteen_rows<const COLS: usize>(x: &[i8], rows: &[i8]) -> [i32; TALL_ROWS] {
    let rows = core::array::from_fn(|k| &rows[k * COLS..(k + 1) * COLS]);
    let [acc] = pass::<TALL_ROWS, 1, i8, false>(rows, [x], COLS);
    acc
}

/// [`sixteen_rows`] on RV32IM: the sixteen sums in registers, the rows read through four
/// pointers (one per four rows, each row at an immediate offset `j · COLS + k`, below 2048 for
/// `COLS ≤ 677`); per column one input `LB` and sixteen each of `LB`, `MUL` and `ADD`, then five
/// pointer steps and the branch per sixteen columns (790 instructions per 256
/// multiply-accumulates, 3.09 each).
#[cfg(target_arch = "riscv32")]
fn sixteen_rows<const COLS: usize>(x: &[i8], rows: &[i8]) -> [i32; TALL_ROWS] {
    const { assert!(COLS.is_multiple_of(STEP) && COLS > 0 && 3 * COLS + STEP <= 2048) };
    let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7, mut a8, mut a9, mut a10, mut a11, mut a12, mut a13, mut a14, mut a15] =
        [0i32; TALL_ROWS];
    if x.len() < COLS || rows.len() < TALL_ROWS * COLS {
        return [0; TALL_ROWS]; // (the callers pass whole rows)
    }
    let base = rows.as_ptr();
    // SAFETY: pointer `g` reads bytes `j · COLS + k` (j < 4, k < COLS) past row `4g`, within
    // the `16 · COLS` bytes of `rows`; the input's pointer reads its `COLS` bytes; each moves on
    // by 16 a step, and `end` is where the input's stops.
    unsafe {
        let (mut p0, mut p1, mut p2, mut p3) =
            (base, base.add(4 * COLS), base.add(8 * COLS), base.add(12 * COLS));
        let mut xp = x.as_ptr();
        let end = xp.add(COLS);
        core::arch::asm!(
            "2:",
            ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
            "lb {x}, \\k({xp})",
                "lb {w}, \\k+0*{cols}({p0})",
                "mul {w}, {w}, {x}",
                "add {a0}, {a0}, {w}",
                "lb {w}, \\k+1*{cols}({p0})",
                "mul {w}, {w}, {x}",
                "add {a1}, {a1}, {w}",
                "lb {w}, \\k+2*{cols}({p0})",
                "mul {w}, {w}, {x}",
                "add {a2}, {a2}, {w}",
                "lb {w}, \\k+3*{cols}({p0})",
                "mul {w}, {w}, {x}",
                "add {a3}, {a3}, {w}",
                "lb {w}, \\k+0*{cols}({p1})",
                "mul {w}, {w}, {x}",
                "add {a4}, {a4}, {w}",
                "lb {w}, \\k+1*{cols}({p1})",
                "mul {w}, {w}, {x}",
                "add {a5}, {a5}, {w}",
                "lb {w}, \\k+2*{cols}({p1})",
                "mul {w}, {w}, {x}",
                "add {a6}, {a6}, {w}",
                "lb {w}, \\k+3*{cols}({p1})",
                "mul {w}, {w}, {x}",
                "add {a7}, {a7}, {w}",
                "lb {w}, \\k+0*{cols}({p2})",
                "mul {w}, {w}, {x}",
                "add {a8}, {a8}, {w}",
                "lb {w}, \\k+1*{cols}({p2})",
                "mul {w}, {w}, {x}",
                "add {a9}, {a9}, {w}",
                "lb {w}, \\k+2*{cols}({p2})",
                "mul {w}, {w}, {x}",
                "add {a10}, {a10}, {w}",
                "lb {w}, \\k+3*{cols}({p2})",
                "mul {w}, {w}, {x}",
                "add {a11}, {a11}, {w}",
                "lb {w}, \\k+0*{cols}({p3})",
                "mul {w}, {w}, {x}",
                "add {a12}, {a12}, {w}",
                "lb {w}, \\k+1*{cols}({p3})",
                "mul {w}, {w}, {x}",
                "add {a13}, {a13}, {w}",
                "lb {w}, \\k+2*{cols}({p3})",
                "mul {w}, {w}, {x}",
                "add {a14}, {a14}, {w}",
                "lb {w}, \\k+3*{cols}({p3})",
                "mul {w}, {w}, {x}",
                "add {a15}, {a15}, {w}",
            ".endr",
            "addi {xp}, {xp}, 16",
            "addi {p0}, {p0}, 16",
            "addi {p1}, {p1}, 16",
            "addi {p2}, {p2}, 16",
            "addi {p3}, {p3}, 16",
            "bne {xp}, {end}, 2b",
            xp = inout(reg) xp,
            p0 = inout(reg) p0,
            p1 = inout(reg) p1,
            p2 = inout(reg) p2,
            p3 = inout(reg) p3,
                a0 = inout(reg) a0,
                a1 = inout(reg) a1,
                a2 = inout(reg) a2,
                a3 = inout(reg) a3,
                a4 = inout(reg) a4,
                a5 = inout(reg) a5,
                a6 = inout(reg) a6,
                a7 = inout(reg) a7,
                a8 = inout(reg) a8,
                a9 = inout(reg) a9,
                a10 = inout(reg) a10,
                a11 = inout(reg) a11,
                a12 = inout(reg) a12,
                a13 = inout(reg) a13,
                a14 = inout(reg) a14,
                a15 = inout(reg) a15,
            end = in(reg) end,
            x = out(reg) _,
            w = out(reg) _,
            cols = const COLS,
            options(nostack, readonly),
        );
        let _ = (xp, p0, p1, p2, p3);
    }
    [
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
    ]
}

/// The loop of [`eight_rows`] and [`eight_keys`] on RV32IM: sixteen columns a step, per column
/// the input's value by `$load` (into `{x}`, at column `\k` of the step) and eight each of `LB`,
/// `MUL` and `ADD` (row `j` through pointer `$pj` into sum `$aj`), then `$step` for the input's
/// pointer `$xp`, a step of 16 for each row's, and the branch back until `$xp` is `$end`.
#[cfg(target_arch = "riscv32")]
macro_rules! eight_sums_asm {
    ($load:literal, $step:literal, $xp:ident, $end:ident,
     [$p0:ident, $p1:ident, $p2:ident, $p3:ident, $p4:ident, $p5:ident, $p6:ident, $p7:ident],
     [$a0:ident, $a1:ident, $a2:ident, $a3:ident, $a4:ident, $a5:ident, $a6:ident, $a7:ident]) => {
        core::arch::asm!(
            "2:",
            ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
            $load,
            "lb {w}, \\k({p0})",
            "mul {w}, {w}, {x}",
            "add {a0}, {a0}, {w}",
            "lb {w}, \\k({p1})",
            "mul {w}, {w}, {x}",
            "add {a1}, {a1}, {w}",
            "lb {w}, \\k({p2})",
            "mul {w}, {w}, {x}",
            "add {a2}, {a2}, {w}",
            "lb {w}, \\k({p3})",
            "mul {w}, {w}, {x}",
            "add {a3}, {a3}, {w}",
            "lb {w}, \\k({p4})",
            "mul {w}, {w}, {x}",
            "add {a4}, {a4}, {w}",
            "lb {w}, \\k({p5})",
            "mul {w}, {w}, {x}",
            "add {a5}, {a5}, {w}",
            "lb {w}, \\k({p6})",
            "mul {w}, {w}, {x}",
            "add {a6}, {a6}, {w}",
            "lb {w}, \\k({p7})",
            "mul {w}, {w}, {x}",
            "add {a7}, {a7}, {w}",
            ".endr",
            $step,
            "addi {p0}, {p0}, 16",
            "addi {p1}, {p1}, 16",
            "addi {p2}, {p2}, 16",
            "addi {p3}, {p3}, 16",
            "addi {p4}, {p4}, 16",
            "addi {p5}, {p5}, 16",
            "addi {p6}, {p6}, 16",
            "addi {p7}, {p7}, 16",
            "bne {xp}, {end}, 2b",
            xp = inout(reg) $xp,
            p0 = inout(reg) $p0,
            p1 = inout(reg) $p1,
            p2 = inout(reg) $p2,
            p3 = inout(reg) $p3,
            p4 = inout(reg) $p4,
            p5 = inout(reg) $p5,
            p6 = inout(reg) $p6,
            p7 = inout(reg) $p7,
            a0 = inout(reg) $a0,
            a1 = inout(reg) $a1,
            a2 = inout(reg) $a2,
            a3 = inout(reg) $a3,
            a4 = inout(reg) $a4,
            a5 = inout(reg) $a5,
            a6 = inout(reg) $a6,
            a7 = inout(reg) $a7,
            end = in(reg) $end,
            x = out(reg) _,
            w = out(reg) _,
            options(nostack, readonly),
        );
    };
}

/// Rows per pass of [`eight_rows`].
const WIDE_ROWS: usize = 8;

/// `row_k · x` for eight rows (each as long as `x`), each input byte loaded once for the eight:
/// off RISC-V, [`pass`].
#[cfg(not(target_arch = "riscv32"))]
fn eight_rows(x: &[i8], rows: [&[i8]; WIDE_ROWS]) -> [i32; WIDE_ROWS] {
    let [acc] = pass::<WIDE_ROWS, 1, i8, false>(rows, [x], x.len());
    acc
}

/// [`eight_rows`] on RV32IM, whose compiler keeps eight rows' sums on the stack: sixteen columns
/// a step in assembly, per column one input `LB` and eight each of `LB`, `MUL` and `ADD`, then
/// nine pointer steps and the branch (410 instructions per 128 multiply-accumulates, 3.20
/// each); the columns after the last sixteen by [`pass`].
#[cfg(target_arch = "riscv32")]
fn eight_rows(x: &[i8], rows: [&[i8]; WIDE_ROWS]) -> [i32; WIDE_ROWS] {
    let n = x.len();
    let body = n / STEP * STEP;
    let mut acc = [0i32; WIDE_ROWS];
    if body > 0 {
        let [mut p0, mut p1, mut p2, mut p3, mut p4, mut p5, mut p6, mut p7] = rows.map(|r| r.as_ptr());
        let mut xp = x.as_ptr();
        let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7] = acc;
        // SAFETY: each pointer reads the first `body` bytes of its slice (each at least `n`
        // long), sixteen a step at offsets 0 to 15, then moves on by 16; `end` is where the
        // input's pointer stops.
        unsafe {
            let end = xp.add(body);
            eight_sums_asm!(
                "lb {x}, \\k({xp})",
                "addi {xp}, {xp}, 16",
                xp,
                end,
                [p0, p1, p2, p3, p4, p5, p6, p7],
                [a0, a1, a2, a3, a4, a5, a6, a7]
            );
        }
        let _ = (xp, p0, p1, p2, p3, p4, p5, p6, p7);
        acc = [a0, a1, a2, a3, a4, a5, a6, a7];
    }
    if body < n {
        let tail = rows.map(|r| &r[body..n]);
        let [rest] = pass::<WIDE_ROWS, 1, i8, false>(tail, [&x[body..]], n - body);
        for (a, r) in acc.iter_mut().zip(rest) {
            *a = a.wrapping_add(r);
        }
    }
    acc
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

// ---- the int8 attention's sums ------------------------------------------------------------------

/// Columns of the values whose sums [`value_sums_i8`] keeps in registers.
const VALUE_COLS: usize = 16;

/// `sums[t] = query · key_t` for `t < sums.len()`, key `t` the first `d_head` bytes at
/// `keys[t * stride..]`, the 16-bit query widened into `words` as `int8_attention::QueryWords`
/// lays it out ([`portable::key_sums_i8`](crate::kernels::portable::key_sums_i8)): eight keys
/// a pass ([`eight_keys`]), then four, then one, as [`row_sums_i8`] takes rows, each query value
/// (`LH`, read where the words keep it) meeting the keys of the pass. The same sums.
pub fn key_sums_i8(keys: &[i8], stride: usize, d_head: usize, words: &[u32], sums: &mut [i32]) {
    let halves: &[i16] = bytemuck::cast_slice(&words[..2 * d_head.div_ceil(4)]);
    let key = |t: usize| &keys[t * stride..t * stride + d_head];
    let wide = sums.len() / WIDE_ROWS * WIDE_ROWS;
    let (wide_sums, sums) = sums.split_at_mut(wide);
    for (b, out) in wide_sums.chunks_exact_mut(WIDE_ROWS).enumerate() {
        let first = b * WIDE_ROWS;
        out.copy_from_slice(&eight_keys(
            halves,
            core::array::from_fn(|j| key(first + j)),
            d_head,
        ));
    }
    let first = wide + sums.len() / ROWS * ROWS;
    let mut blocks = sums.chunks_exact_mut(ROWS);
    for (b, out) in (&mut blocks).enumerate() {
        let first = wide + b * ROWS;
        let keys = core::array::from_fn(|j| key(first + j));
        let [acc] = pass::<ROWS, 1, i16, true>(keys, [halves], d_head);
        out.copy_from_slice(&acc);
    }
    for (t, sum) in blocks.into_remainder().iter_mut().enumerate() {
        let [[acc]] = pass::<1, 1, i16, true>([key(first + t)], [halves], d_head);
        *sum = acc;
    }
}

/// `query · key_j` for eight keys of `d_head` bytes, the query as [`key_sums_i8`] reads it
/// (16-bit halves, the middle two of each four swapped): off RISC-V, [`pass`].
#[cfg(not(target_arch = "riscv32"))]
fn eight_keys(halves: &[i16], keys: [&[i8]; WIDE_ROWS], d_head: usize) -> [i32; WIDE_ROWS] {
    let [acc] = pass::<WIDE_ROWS, 1, i16, true>(keys, [halves], d_head);
    acc
}

/// [`eight_keys`] on RV32IM, as [`eight_rows`]: sixteen columns a step in assembly, per column
/// one query `LH` (at the column's place among the halves: bits 0 and 1 of its index swapped)
/// and eight each of `LB`, `MUL` and `ADD`, then nine pointer steps and the branch (410
/// instructions per 128 multiply-accumulates, 3.20 each); the columns after the last sixteen
/// by [`pass`].
#[cfg(target_arch = "riscv32")]
fn eight_keys(halves: &[i16], keys: [&[i8]; WIDE_ROWS], d_head: usize) -> [i32; WIDE_ROWS] {
    let body = d_head / STEP * STEP;
    let mut acc = [0i32; WIDE_ROWS];
    if body > 0 && halves.len() >= body && keys.iter().all(|k| k.len() >= body) {
        let [mut p0, mut p1, mut p2, mut p3, mut p4, mut p5, mut p6, mut p7] = keys.map(|r| r.as_ptr());
        let mut qp = halves.as_ptr();
        let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7] = acc;
        // SAFETY: each key's pointer reads the first `body` bytes of its slice (checked just
        // above), sixteen a step at offsets 0 to 15, then moves on by 16; the query's reads
        // halves 0 to 15 of each step (a permutation of them) of its first `body`, and `end`
        // is where it stops.
        unsafe {
            let end = qp.add(body);
            eight_sums_asm!(
                "lh {x}, 2*(((\\k) & ~3) | (((\\k) & 1) << 1) | (((\\k) >> 1) & 1))({xp})",
                "addi {xp}, {xp}, 32",
                qp,
                end,
                [p0, p1, p2, p3, p4, p5, p6, p7],
                [a0, a1, a2, a3, a4, a5, a6, a7]
            );
        }
        let _ = (qp, p0, p1, p2, p3, p4, p5, p6, p7);
        acc = [a0, a1, a2, a3, a4, a5, a6, a7];
    } else if body > 0 {
        let [acc] = pass::<WIDE_ROWS, 1, i16, true>(keys, [halves], d_head);
        return acc;
    }
    if body < d_head {
        let tail = keys.map(|k| &k[body..d_head]);
        let [rest] = pass::<WIDE_ROWS, 1, i16, true>(tail, [&halves[body..]], d_head - body);
        for (a, r) in acc.iter_mut().zip(rest) {
            *a = a.wrapping_add(r);
        }
    }
    acc
}

/// `acc[c] += Σ_t weights[t] · value_t[c]` for `c < acc.len()`, value `t` at
/// `values[t * stride..]` ([`portable::value_sums_i8`](crate::kernels::portable::value_sums_i8)):
/// `VALUE_COLS` (16) columns at a time with their sums in registers, each weight loaded once for
/// them, a weight of 0 skipping its value; the columns after the last whole block, and values
/// that overlap (a stride shorter than `acc`), by the portable code. The same sums (every
/// product and sum wraps, as there).
pub fn value_sums_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    use crate::kernels::portable;
    if stride < acc.len() {
        return portable::value_sums_i8(values, stride, weights, acc);
    }
    let Some((&last_weight, firsts)) = weights.split_last() else {
        return;
    };
    if acc.is_empty() {
        return;
    }
    // every value but the last a whole stride, the last as long as `acc`
    let (rows, last) = values.split_at(firsts.len() * stride);
    let last = &last[..acc.len()];
    let body = acc.len() / VALUE_COLS * VALUE_COLS;
    let (whole, rest) = acc.split_at_mut(body);
    for (b, acc) in whole.as_chunks_mut::<VALUE_COLS>().0.iter_mut().enumerate() {
        let columns = b * VALUE_COLS..(b + 1) * VALUE_COLS;
        let mut sums = *acc;
        let add = |sums: &mut [i32; VALUE_COLS], weight: i32, value: &[i8]| {
            for (sum, &v) in sums.iter_mut().zip(value) {
                *sum = sum.wrapping_add(weight.wrapping_mul(i32::from(v)));
                // the next column's load after this column's product (as `column`)
                core::hint::black_box(());
            }
        };
        // a weight of 0 adds nothing: its value is not read (the attention's probabilities
        // are mostly 0 where the scores are far apart)
        for (&weight, row) in firsts.iter().zip(rows.chunks_exact(stride)) {
            if weight != 0 {
                add(&mut sums, weight, &row[columns.clone()]);
            }
        }
        if last_weight != 0 {
            add(&mut sums, last_weight, &last[columns]);
        }
        *acc = sums;
    }
    if !rest.is_empty() {
        portable::value_sums_i8(&values[body..], stride, weights, rest);
    }
}

// ---- int4 rows ---------------------------------------------------------------------------------

// A packed int4 word holds a block of eight columns: byte `k` column `k` in its low nibble and
// column `k + 4` in its high one (`crate::weights`). Flipping every nibble's sign bit
// (`INT4_FLIP`) turns each value `q` into `q + 8`, in 0..=15; then `(word >> s) & INT4_PAIR`
// for `s` = 0, 8, 4, 12 holds columns (0, 2), (1, 3), (4, 6), (5, 7) in the two 16-bit halves,
// and taking `INT4_BIAS` (8 in each half) away leaves `P = q_a + 65536 q_b`. An input word
// prepared by `widen_input_i8` holds the same columns the other way round, `X = x_b + 65536 x_a`,
// so that
//
//   P · X = q_a x_b + 65536 (q_a x_a + q_b x_b) + 2^32 q_b x_a:
//
// one `MUL` gives two products' sum in its high half (the low half a product of no use, the
// last term gone past 32 bits). `q_a x_b` is in `-1016..=1024` and `q_a x_a + q_b x_b` in
// `-2032..=2048`, so a chunk of up to 16 `MUL`s (four blocks, 32 columns) adds up with the low
// halves' sum in `-16256..=16384` and the high halves' in `-32512..=32768`: starting
// from `INT4_START` (`2^15`, so that the low sum never borrows, less `256 · 65536`, so that the
// high sum fits a signed half), the chunk's sum is exactly `(acc >> 16) + 256`. The bias is taken
// away once per chunk, not per word: `Σ (P_t - INT4_BIAS) X_t = Σ P_t X_t - INT4_BIAS · Σ X_t`,
// the inputs' words being added up as they are loaded.
//
// Per block and row that is a `LW`, an `XOR`, three `SRLI`, four `AND`, four `MUL` and four
// `ADD` for eight multiply-accumulates; four rows share the four input words and their sum.

/// Rows per pass of [`row_sums_i4`].
const INT4_ROWS: usize = 4;

/// Blocks of eight columns per chunk: the most whose sums stay exact (see above).
const INT4_CHUNK_BLOCKS: usize = 4;

/// Flips each nibble's sign bit: `q` becomes `q + 8`.
const INT4_FLIP: u32 = 0x8888_8888;

/// Two nibbles, one at the bottom of each 16-bit half.
const INT4_PAIR: u32 = 0x000F_000F;

/// The bias of the flipped nibbles, in both halves.
const INT4_BIAS: u32 = 0x0008_0008;

/// Added to each chunk's sum as it comes out of the high half.
const INT4_OFFSET: i32 = 256;

/// A chunk's accumulator before its products: `2^15 - INT4_OFFSET · 65536`.
const INT4_START: u32 = ((1 << 15) - (INT4_OFFSET << 16)) as u32;

/// Prepares a quantized input `xq` for [`row_sums_i4`], once per input however many rows read
/// it: for each whole block `b` of eight columns, words `4b..4b + 4` hold the columns (2, 0),
/// (3, 1), (6, 4) and (7, 5) of the block as `x_lo + 65536 x_hi` (wrapping), the order in
/// which a packed word's pairs meet them. `words` holds at least `4 * (xq.len() / 8)` words
/// (`2 * xq.len().div_ceil(4)` are enough); blocks past its end are not prepared.
pub fn widen_input_i8(xq: &[i8], words: &mut [u32]) {
    let pair = |high: i8, low: i8| (i32::from(high) << 16).wrapping_add(i32::from(low)) as u32;
    for (x, out) in xq.as_chunks::<8>().0.iter().zip(words.as_chunks_mut::<4>().0) {
        *out = [
            pair(x[0], x[2]),
            pair(x[1], x[3]),
            pair(x[4], x[6]),
            pair(x[5], x[7]),
        ];
    }
}

/// One block of eight columns of `R` rows, `w[j]` row `j`'s packed word: `acc[j] += Σ_t P_t
/// X_t` with the nibbles flipped (not yet unbiased), and `sum += Σ_t X_t`.
#[inline(always)]
fn int4_block<const R: usize>(acc: &mut [u32; R], sum: &mut u32, x: &[u32; 4], w: [u32; R]) {
    *sum = sum
        .wrapping_add(x[0])
        .wrapping_add(x[1])
        .wrapping_add(x[2])
        .wrapping_add(x[3]);
    for (acc, w) in acc.iter_mut().zip(w) {
        let w = w ^ INT4_FLIP;
        *acc = acc
            .wrapping_add((w & INT4_PAIR).wrapping_mul(x[0]))
            .wrapping_add(((w >> 8) & INT4_PAIR).wrapping_mul(x[1]))
            .wrapping_add(((w >> 4) & INT4_PAIR).wrapping_mul(x[2]))
            .wrapping_add(((w >> 12) & INT4_PAIR).wrapping_mul(x[3]));
    }
    // the next block's loads after this block's products (as `column`)
    core::hint::black_box(());
}

/// `row_j · x` over one chunk of at most [`INT4_CHUNK_BLOCKS`] blocks, `rows[j]` row `j`'s
/// words of those blocks and `x` their inputs' words: exact (see above).
#[inline(always)]
fn int4_chunk<const R: usize>(rows: [&[u32]; R], x: &[[u32; 4]]) -> [i32; R] {
    let rows = rows.map(|row| &row[..x.len()]);
    let (mut acc, mut sum) = ([INT4_START; R], 0u32);
    for (b, x) in x.iter().enumerate() {
        int4_block(&mut acc, &mut sum, x, core::array::from_fn(|j| rows[j][b]));
    }
    let bias = sum.wrapping_mul(INT4_BIAS);
    acc.map(|acc| ((acc.wrapping_sub(bias) as i32) >> 16) + INT4_OFFSET)
}

/// The shape of an int4 product, as [`row_sums_i4`] takes it.
#[derive(Clone, Copy)]
struct Int4Shape {
    /// Columns.
    cols: usize,
    /// Whole blocks of eight columns.
    blocks: usize,
    /// Blocks per group (the group's columns over eight).
    group_blocks: usize,
    /// Groups per row (the last one may be partial).
    groups: usize,
}

/// The int4 sums of `R` rows (`rows[j]` row `j`'s words, `codes[j]` its groups' codes): for
/// each group, its whole blocks in chunks, times the group's multiplier, in i64; the columns of
/// a partial last block by the portable code, with the last group's multiplier.
#[inline(always)]
fn int4_rows<const R: usize>(
    rows: [&[u32]; R],
    codes: [&[u8]; R],
    shape: Int4Shape,
    xq: &[i8],
    x: &[[u32; 4]],
) -> [i64; R] {
    use crate::kernels::portable::{int4_multiplier, int4_range_sum};
    let mut totals = [0i64; R];
    for (g, x) in x[..shape.blocks].chunks(shape.group_blocks).enumerate() {
        let first = g * shape.group_blocks;
        let mut sums = [0i32; R];
        for (c, x) in x.chunks(INT4_CHUNK_BLOCKS).enumerate() {
            let start = first + c * INT4_CHUNK_BLOCKS;
            let chunk = int4_chunk(rows.map(|row| &row[start..start + x.len()]), x);
            for (sum, part) in sums.iter_mut().zip(chunk) {
                *sum = sum.wrapping_add(part);
            }
        }
        for ((total, sum), codes) in totals.iter_mut().zip(sums).zip(codes) {
            *total += i64::from(int4_multiplier(codes[g])) * i64::from(sum);
        }
    }
    if 8 * shape.blocks < shape.cols {
        // a partial last block
        let columns = 8 * shape.blocks..shape.cols;
        for ((total, row), codes) in totals.iter_mut().zip(rows).zip(codes) {
            let tail = int4_range_sum(bytemuck::cast_slice(row), xq, columns.clone());
            *total += i64::from(int4_multiplier(codes[shape.groups - 1])) * i64::from(tail);
        }
    }
    totals
}

/// `sums[r]` for the packed int4 rows of `values` and their groups' multiplier `codes`
/// ([`portable::row_sums_i4`](crate::kernels::portable::row_sums_i4)), `words` being `xq`
/// prepared by [`widen_input_i8`]: four rows per pass, two products a `MUL` (see above), the
/// last rows one at a time. Groups that are not a whole number of blocks, rows not at a
/// word-aligned address, or `words` too short for the input take the portable code. The same
/// sums.
pub fn row_sums_i4(values: &[u8], group: usize, codes: &[u8], xq: &[i8], words: &[u32], sums: &mut [i64]) {
    use crate::kernels::portable::{self, int4_groups, int4_row_bytes};
    let cols = xq.len();
    let blocks = cols / 8;
    if group == 0 || !group.is_multiple_of(8) || words.len() < 4 * blocks {
        return portable::row_sums_i4(values, group, codes, xq, sums);
    }
    let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
    let rows = sums.len();
    let Ok(values) = bytemuck::try_cast_slice::<u8, u32>(&values[..rows * row_bytes]) else {
        return portable::row_sums_i4(values, group, codes, xq, sums);
    };
    let codes = &codes[..rows * groups];
    let shape = Int4Shape {
        cols,
        blocks,
        group_blocks: group / 8,
        groups,
    };
    let x = &words.as_chunks::<4>().0[..blocks];
    let row_words = row_bytes / 4;
    let row = |r: usize| &values[r * row_words..(r + 1) * row_words];
    let codes_of = |r: usize| &codes[r * groups..(r + 1) * groups];
    let mut blocks_of_rows = sums.chunks_exact_mut(INT4_ROWS);
    for (b, out) in (&mut blocks_of_rows).enumerate() {
        let first = b * INT4_ROWS;
        let totals = int4_rows::<INT4_ROWS>(
            core::array::from_fn(|j| row(first + j)),
            core::array::from_fn(|j| codes_of(first + j)),
            shape,
            xq,
            x,
        );
        out.copy_from_slice(&totals);
    }
    let first = rows / INT4_ROWS * INT4_ROWS;
    for (r, sum) in blocks_of_rows.into_remainder().iter_mut().enumerate() {
        let [total] = int4_rows::<1>([row(first + r)], [codes_of(first + r)], shape, xq, x);
        *sum = total;
    }
}

#[cfg(test)]
mod tests {
    use super::{key_sums_i8, row_sums_i4, row_sums_i8, row_sums_pair_i8, value_sums_i8, widen_input_i8};
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
            vec![0, 1, 16, 17, 35]
        } else {
            vec![
                0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 47, 48, 64, 100, 128, 129, 255, 256, 512,
            ]
        }
    }

    fn row_counts() -> Vec<usize> {
        if cfg!(miri) {
            vec![0, 1, 4, 5]
        } else {
            // (16 and more: the sixteen-row passes of 128, 256 and 512 columns)
            (0..=13).chain([16, 17, 31, 32, 33]).collect()
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
        let cols = if cfg!(miri) { 20 } else { 1000 };
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
        let (rows, cols) = if cfg!(miri) { (5, 21) } else { (7, 37) };
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
    /// Packed int4 rows (`rows x cols`, each row in whole words, the matrix in `u32`s so that
    /// it starts word-aligned) with values in `-8..=7` (`-8` included, which the format allows),
    /// and a code per row and group.
    fn int4_matrix(rows: usize, cols: usize, group: usize, rng: &mut Rng) -> (Vec<u32>, Vec<u8>) {
        use crate::kernels::portable::{int4_groups, int4_pack_row, int4_row_bytes};
        let row_bytes = int4_row_bytes(cols);
        let mut packed = vec![0u32; rows * row_bytes / 4];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut packed);
        let fill = rng.next_u64() % 4;
        for out in bytes.chunks_exact_mut(row_bytes) {
            let row: Vec<i8> = (0..cols)
                .map(|_| match fill {
                    0 => -8,
                    1 => 7,
                    _ => (rng.next_u64() % 16) as i8 - 8,
                })
                .collect();
            int4_pack_row(&row, out);
        }
        let codes = (0..rows * int4_groups(cols, group))
            .map(|_| (rng.next_u64() >> 56) as u8)
            .collect();
        (packed, codes)
    }

    /// The int4 kernel's sums, the input prepared as the dispatch layer prepares it.
    fn int4_sums(values: &[u8], group: usize, codes: &[u8], xq: &[i8], rows: usize) -> Vec<i64> {
        let mut words = vec![0u32; 2 * xq.len().div_ceil(4)];
        widen_input_i8(xq, &mut words);
        let mut sums = vec![7i64; rows];
        row_sums_i4(values, group, codes, xq, &words, &mut sums);
        sums
    }

    fn portable_int4_sums(values: &[u8], group: usize, codes: &[u8], xq: &[i8], rows: usize) -> Vec<i64> {
        let mut sums = vec![-7i64; rows];
        portable::row_sums_i4(values, group, codes, xq, &mut sums);
        sums
    }

    #[test]
    fn int4_rows_equal_the_portable_sums() {
        let mut rng = Rng::new(14);
        let (groups, widths, row_counts): (&[usize], &[usize], &[usize]) = if cfg!(miri) {
            (&[8, 40], &[7, 8, 33, 72], &[0, 1, 4, 5])
        } else {
            (
                &[8, 16, 24, 32, 40, 64, 128, 256],
                &[1, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 100, 129, 136, 257],
                &[0, 1, 2, 3, 4, 5, 7, 8, 9],
            )
        };
        for &group in groups {
            for &cols in widths {
                for &rows in row_counts {
                    let (packed, codes) = int4_matrix(rows, cols, group, &mut rng);
                    let values: &[u8] = bytemuck::cast_slice(&packed);
                    let xq = match rng.next_u64() % 4 {
                        0 => vec![-128i8; cols],
                        1 => vec![127i8; cols],
                        _ => bytes(cols, &mut rng),
                    };
                    assert_eq!(
                        int4_sums(values, group, &codes, &xq, rows),
                        portable_int4_sums(values, group, &codes, &xq, rows),
                        "{rows} x {cols} in groups of {group}"
                    );
                }
            }
        }
    }

    #[test]
    fn int4_chunks_of_extreme_values_stay_exact() {
        // The edges of a chunk's sums: every product 1024 (-8 × -128: the high halves' sum
        // 32768, past a signed half without the offset), -1016 (-8 × 127) and ±889 (7 × 127,
        // 7 × -128 rounds the other way), in groups of one to several chunks.
        let mut rng = Rng::new(15);
        let groups: &[usize] = if cfg!(miri) { &[8, 32] } else { &[8, 32, 64, 256] };
        for &group in groups {
            let cols = if cfg!(miri) { group + 8 } else { 2 * group + 8 };
            for (q, x) in [(-8i8, -128i8), (-8, 127), (7, 127), (7, -128)] {
                let rows = 5;
                let row_bytes = crate::kernels::portable::int4_row_bytes(cols);
                let mut packed = vec![0u32; rows * row_bytes / 4];
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut packed);
                for out in bytes.chunks_exact_mut(row_bytes) {
                    crate::kernels::portable::int4_pack_row(&vec![q; cols], out);
                }
                let codes: Vec<u8> = (0..rows * cols.div_ceil(group))
                    .map(|_| (rng.next_u64() >> 56) as u8 | 0xf0)
                    .collect();
                let values: &[u8] = bytemuck::cast_slice(&packed);
                let xq = vec![x; cols];
                assert_eq!(
                    int4_sums(values, group, &codes, &xq, rows),
                    portable_int4_sums(values, group, &codes, &xq, rows),
                    "{q} x {x} in groups of {group}"
                );
            }
        }
    }

    #[test]
    fn int4_rows_read_the_prepared_words_and_fall_back_without_them() {
        let mut rng = Rng::new(16);
        let (rows, cols, group) = (6, 72, 32);
        let (packed, codes) = int4_matrix(rows, cols, group, &mut rng);
        let values: &[u8] = bytemuck::cast_slice(&packed);
        let xq = bytes(cols, &mut rng);
        let expected = portable_int4_sums(values, group, &codes, &xq, rows);
        // the kernel takes the input from its prepared words: zeros leave only the partial
        // block's columns (none here) and the nibbles' bias
        let mut sums = vec![0i64; rows];
        row_sums_i4(values, group, &codes, &xq, &[0; 36], &mut sums);
        assert_ne!(sums, expected, "the words were not read");
        // too few words, rows at an address that is not a word's, a group not of whole
        // blocks: the portable code
        row_sums_i4(values, group, &codes, &xq, &[0; 35], &mut sums);
        assert_eq!(sums, expected, "too few words");
        let mut shifted = vec![0u8; values.len() + 1];
        shifted[1..].copy_from_slice(values);
        let mut words = vec![0u32; 36];
        widen_input_i8(&xq, &mut words);
        row_sums_i4(&shifted[1..], group, &codes, &xq, &words, &mut sums);
        assert_eq!(sums, expected, "unaligned rows");
        let codes = vec![0x21u8; rows * cols.div_ceil(12)];
        row_sums_i4(values, 12, &codes, &xq, &words, &mut sums);
        assert_eq!(
            sums,
            portable_int4_sums(values, 12, &codes, &xq, rows),
            "groups of 12"
        );
    }
    /// Pseudo-random 32-bit words, a share of them with both halves at an extreme.
    fn words(count: usize, rng: &mut Rng) -> Vec<u32> {
        (0..count)
            .map(|_| match rng.next_u64() >> 60 {
                0 => 0x8000_8000,
                1 => 0x7fff_7fff,
                2 => 0x8001_7fff,
                _ => rng.next_u64() as u32,
            })
            .collect()
    }

    #[test]
    fn int8_key_sums_equal_the_portable_sums() {
        let mut rng = Rng::new(17);
        let (heads, counts): (Vec<usize>, &[usize]) = if cfg!(miri) {
            (vec![1, 4, 5, 17, 35], &[0, 1, 5])
        } else {
            (
                (1..=40).chain([64, 65, 128]).collect(),
                &[0, 1, 2, 3, 4, 5, 8, 9, 13],
            )
        };
        for d_head in heads {
            for &count in counts {
                for stride in [d_head, d_head + 3, 2 * d_head + 5] {
                    let keys = bytes(count.saturating_sub(1) * stride + d_head, &mut rng);
                    let query = words(2 * d_head.div_ceil(4), &mut rng);
                    let (mut fast, mut slow) = (vec![7i32; count], vec![-7i32; count]);
                    key_sums_i8(&keys, stride, d_head, &query, &mut fast);
                    portable::key_sums_i8(&keys, stride, d_head, &query, &mut slow);
                    assert_eq!(fast, slow, "{count} keys of {d_head} at {stride}");
                }
            }
        }
    }

    #[test]
    fn int8_value_sums_equal_the_portable_sums() {
        let mut rng = Rng::new(18);
        let (widths, counts): (Vec<usize>, &[usize]) = if cfg!(miri) {
            (vec![0, 5, 16, 17, 35], &[0, 1, 3])
        } else {
            (
                (0..=40).chain([64, 65, 128]).collect(),
                &[0, 1, 2, 3, 5, 8, 9, 64],
            )
        };
        for cols in widths {
            for &count in counts {
                // values closer together than a block of columns, at their width, and apart
                for stride in [cols.min(7), cols, cols + 3, 2 * cols + 5] {
                    let values = bytes(count.saturating_sub(1) * stride + cols, &mut rng);
                    let weights: Vec<i32> = words(count, &mut rng).iter().map(|&w| w as i16 as i32).collect();
                    let start: Vec<i32> = (0..cols).map(|_| rng.next_u64() as i32 >> 8).collect();
                    let (mut fast, mut slow) = (start.clone(), start);
                    value_sums_i8(&values, stride, &weights, &mut fast);
                    portable::value_sums_i8(&values, stride, &weights, &mut slow);
                    assert_eq!(fast, slow, "{count} values of {cols} at {stride}");
                }
            }
        }
    }
}
