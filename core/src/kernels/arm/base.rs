//! Kernels for the Cortex-M cores without the DSP extension (Armv7-M: Cortex-M3; Armv6-M:
//! Cortex-M0, M0+): int8 rows several at a time, each input byte loaded once for them, in
//! assembly (the firmware's `bench`, `int8_rows`: 2.25 instructions per multiply-accumulate on
//! the M3, six rows a pass at immediate offsets with `LDRSB.W` and `MLA` for rows of 128, 256
//! or 512 columns (`six_rows`), four with post-increment `LDRSB` for other widths; 3.36 on
//! Armv6-M, five rows a pass over an input widened to words in four sweeps (`sweep_passes`:
//! `LDM`, then register-offset `LDRSB`, `MULS` and `ADD`), the rows left over four a pass),
//! the int8 attention's key sums in assembly (five keys a pass on Armv6-M, as its rows; four
//! on Armv7-M), and its value sums with eight value columns in registers in Rust (four on
//! Armv6-M, in assembly, two values a loop step). Off Arm (the host's unit tests) the rows are
//! Rust too. Integer sums, exact: the portable kernels' bits.

use crate::kernels::portable;

/// Rows one pass of [`row_sums_i8`] takes.
const ROWS: usize = 4;

/// `sums[r] = values[r] · xq` in i32 for each row `r < sums.len()` of the row-major int8
/// `values (rows, cols)` ([`portable::row_sums_i8`](crate::kernels::portable::row_sums_i8):
/// over the first `min(cols, xq.len())` columns): on the Cortex-M3 six rows a pass for rows of
/// 128, 256 or 512 columns ([`wide_rows`]), else four rows a pass, each input byte loaded once
/// for them; the last rows one at a time. The same sums.
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    let xq = &xq[..cols.min(xq.len())];
    let n = xq.len();
    let done = wide_rows(values, cols, xq, sums);
    let (values, sums) = (&values[done * cols..], &mut sums[done..]);
    let whole = sums.len() / ROWS * ROWS;
    let (blocks, rest) = sums.split_at_mut(whole);
    for (b, out) in blocks.chunks_exact_mut(ROWS).enumerate() {
        let row = |k: usize| &values[(ROWS * b + k) * cols..][..n];
        out.copy_from_slice(&four_rows(xq, [row(0), row(1), row(2), row(3)]));
    }
    for (k, sum) in rest.iter_mut().enumerate() {
        let row = &values[(whole + k) * cols..][..n];
        *sum = dot_from(0, row, xq);
    }
}

// The Cortex-M3's loops are written out, one line per instruction (no `.rept` or `.irp`): the
// compiler sizes an `asm!` block by its lines, and a block longer than it thinks can push the
// function's constants out of a load's reach ("out of range pc-relative fixup value").

/// Column `$k` of a step of [`six_rows`] (Cortex-M3): the input value, then the six rows'.
#[cfg(all(target_arch = "arm", target_has_atomic = "ptr"))]
macro_rules! six_rows_column {
    ($k:literal) => {
        concat!(
            "ldrsb.w {x}, [{xp}, #",
            $k,
            "]\n",
            "ldrsb.w {w}, [{wp}, #(",
            $k,
            " + 0 * {cols})]\n",
            "mla {a0}, {w}, {x}, {a0}\n",
            "ldrsb.w {w}, [{wp}, #(",
            $k,
            " + 1 * {cols})]\n",
            "mla {a1}, {w}, {x}, {a1}\n",
            "ldrsb.w {w}, [{wp}, #(",
            $k,
            " + 2 * {cols})]\n",
            "mla {a2}, {w}, {x}, {a2}\n",
            "ldrsb.w {w}, [{wp}, #(",
            $k,
            " + 3 * {cols})]\n",
            "mla {a3}, {w}, {x}, {a3}\n",
            "ldrsb.w {w}, [{wp}, #(",
            $k,
            " + 4 * {cols})]\n",
            "mla {a4}, {w}, {x}, {a4}\n",
            "ldrsb.w {w}, [{wp}, #(",
            $k,
            " + 5 * {cols})]\n",
            "mla {a5}, {w}, {x}, {a5}\n",
        )
    };
}

/// Rows one pass of [`six_rows`] takes.
const WIDE_ROWS: usize = 6;

/// [`row_sums_i8`]'s rows six a pass for a width the Cortex-M3's kernel is built for (`COLS`:
/// 128, 256 or 512 columns, every row whole); returns how many rows it summed (whole passes, 0
/// for another width, and on Armv6-M, which has no such kernel), the caller sums the rest.
fn wide_rows(values: &[i8], cols: usize, x: &[i8], sums: &mut [i32]) -> usize {
    if cfg!(all(target_arch = "arm", not(target_has_atomic = "ptr"))) {
        return sweep_rows(values, cols, x, sums);
    }
    match (cols, x.len() == cols) {
        (128, true) => portable::row_passes(values, cols, sums, |rows| six_rows::<128>(x, rows)),
        (256, true) => portable::row_passes(values, cols, sums, |rows| six_rows::<256>(x, rows)),
        (512, true) => portable::row_passes(values, cols, sums, |rows| six_rows::<512>(x, rows)),
        // (off Arm the Armv6-M kernel's passes, for the tests)
        _ if cfg!(not(target_arch = "arm")) => sweep_rows(values, cols, x, sums),
        _ => 0,
    }
}

/// `row_k · x` for the six rows of `COLS` columns in `rows` (`x` `COLS` long): in Rust off the
/// Cortex-M3.
#[cfg(not(all(target_arch = "arm", target_has_atomic = "ptr")))]
fn six_rows<const COLS: usize>(x: &[i8], rows: &[i8]) -> [i32; WIDE_ROWS] {
    core::array::from_fn(|k| dot_from(0, &rows[k * COLS..(k + 1) * COLS], x))
}

/// [`six_rows`] on Armv7-M: the six sums in registers, the rows at immediate offsets
/// `j · COLS + k` from one pointer (`LDRSB.W`'s 12-bit offset: `COLS ≤ 680`), sixteen columns a
/// step; per column one input `LDRSB` and six each of `LDRSB` and `MLA`, then three pointer
/// and loop instructions per step (212 instructions per 96 multiply-accumulates, 2.21 each).
#[cfg(all(target_arch = "arm", target_has_atomic = "ptr"))]
fn six_rows<const COLS: usize>(x: &[i8], rows: &[i8]) -> [i32; WIDE_ROWS] {
    const { assert!(COLS.is_multiple_of(16) && COLS > 0 && 5 * COLS + 16 <= 4096) };
    if x.len() < COLS || rows.len() < WIDE_ROWS * COLS {
        return [0; WIDE_ROWS]; // (the callers pass whole rows)
    }
    let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5] = [0i32; WIDE_ROWS];
    let mut wp = rows.as_ptr();
    let mut xp = x.as_ptr();
    // SAFETY: `wp` reads bytes `j · COLS + k` (j < 6, k < COLS) of `rows`, `xp` the `COLS` bytes
    // of `x`, sixteen a step, each moving on by 16; `end` is where the input's pointer stops.
    unsafe {
        let end = xp.add(COLS);
        core::arch::asm!(
            "2:",
            six_rows_column!(0), six_rows_column!(1), six_rows_column!(2), six_rows_column!(3), six_rows_column!(4), six_rows_column!(5), six_rows_column!(6), six_rows_column!(7), six_rows_column!(8), six_rows_column!(9), six_rows_column!(10), six_rows_column!(11), six_rows_column!(12), six_rows_column!(13), six_rows_column!(14), six_rows_column!(15),
            "adds {xp}, #16",
            "adds {wp}, #16",
            "cmp {xp}, {end}",
            "bne 2b",
            xp = inout(reg) xp,
            wp = inout(reg) wp,
            a0 = inout(reg) a0,
            a1 = inout(reg) a1,
            a2 = inout(reg) a2,
            a3 = inout(reg) a3,
            a4 = inout(reg) a4,
            a5 = inout(reg) a5,
            end = in(reg) end,
            x = out(reg) _,
            w = out(reg) _,
            cols = const COLS,
            options(nostack, readonly),
        );
    }
    let _ = (xp, wp);
    [a0, a1, a2, a3, a4, a5]
}

/// Rows (or keys) one pass of the Armv6-M sweep kernel ([`sweep_passes`]) takes.
const SWEEP_ROWS: usize = 5;

/// The most columns one pass of [`sweep_passes`] takes (its input's chunk: 512 bytes of stack).
const SWEEP_COLS: usize = 128;

/// A chunk of `C` input values (`C` 32, 64 or 128) widened to words in sweep order: column `j`
/// at word `(j % 4) · C / 4 + j / 4`, so each of the four sweeps of [`sweep_passes`] reads one
/// column in four, its words in a row. Aligned to its length, so a sweep's end is where the
/// pointer's low bits are 0.
#[repr(C, align(128))]
struct SweepInput([i32; SWEEP_COLS]);

impl SweepInput {
    /// `x` (32, 64 or 128 values) into sweep order.
    fn fill<X: Copy + Into<i32>>(&mut self, x: &[X]) {
        let step = x.len() / 4;
        let (w0, rest) = self.0.split_at_mut(step);
        let (w1, rest) = rest.split_at_mut(step);
        let (w2, w3) = rest.split_at_mut(step);
        let columns = x.as_chunks::<4>().0.iter().zip(w0).zip(w1).zip(w2).zip(w3);
        for ((((q, w0), w1), w2), w3) in columns {
            [*w0, *w1, *w2, *w3] = q.map(Into::into);
        }
    }
}

/// [`SweepInput::fill`] for int8 inputs: on Armv6-M, where `x` is word-aligned, in assembly
/// (four columns a word by `LDM`, each byte sign-extended by `SXTB`, `LSLS` and `ASRS` and
/// stored into its sweep: 3.5 instructions a column, the compiler's loop 6).
fn fill_i8(input: &mut SweepInput, x: &[i8]) {
    #[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
    if (x.as_ptr() as usize).is_multiple_of(4) && x.len() >= 8 {
        let bytes = x.len() / 4 * 4; // (32, 64 or 128: a multiple of 8)
        let range = x[..bytes].as_ptr_range();
        // (a sweep's words: bytes / 4, as bytes: `bytes`)
        let sweep = bytes;
        // SAFETY: `LDM` reads the words of `x[..bytes]` (word-aligned, checked above), eight
        // bytes a step until `range.end`; column `4k + m` is stored at word `m · bytes / 4 + k`
        // of `input` (128 words, `bytes ≤ 128`); `r6` and `r7` are pushed and popped.
        unsafe {
            core::arch::asm!(
                "push {{r6, r7}}",
                "mov r7, r1",
                "2:",
                "ldm r0!, {{r1}}",
                "sxtb r6, r1",
                "str r6, [r2]",
                "lsls r6, r1, #16",
                "asrs r6, r6, #24",
                "str r6, [r2, r3]",
                "lsls r6, r1, #8",
                "asrs r6, r6, #24",
                "str r6, [r2, r4]",
                "asrs r6, r1, #24",
                "str r6, [r2, r5]",
                "ldm r0!, {{r1}}",
                "sxtb r6, r1",
                "str r6, [r2, #4]",
                "adds r2, #4",
                "lsls r6, r1, #16",
                "asrs r6, r6, #24",
                "str r6, [r2, r3]",
                "lsls r6, r1, #8",
                "asrs r6, r6, #24",
                "str r6, [r2, r4]",
                "asrs r6, r1, #24",
                "str r6, [r2, r5]",
                "adds r2, #4",
                "cmp r0, r7",
                "bne 2b",
                "pop {{r6, r7}}",
                inout("r0") range.start => _,
                inout("r1") range.end => _,
                inout("r2") input.0.as_mut_ptr() => _,
                inout("r3") sweep => _,
                inout("r4") 2 * sweep => _,
                inout("r5") 3 * sweep => _,
            );
        }
        return;
    }
    input.fill(x);
}

/// Query columns `start..start + c` (`start` a multiple of 4, `c` 32, 64 or 128) from `words`
/// ([`unpack_query`]'s layout) into sweep order: on Armv6-M, where the words are there, in
/// assembly (two words by `LDM`, their halves sign-extended by `SXTH` and `ASRS`: 3 instructions
/// a column), else unpacked through `query`.
fn fill_query(input: &mut SweepInput, words: &[u32], start: usize, query: &mut [i16]) {
    #[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
    if let Some(pairs) = words.get(start / 2..start / 2 + query.len() / 2) {
        let range = pairs.as_ptr_range();
        // (a sweep's words as bytes)
        let sweep = query.len();
        // SAFETY: `LDM` reads `pairs` (two words a step, `query.len() / 2` words: a multiple of
        // 2) until `range.end`; column `4k + m` is stored at word `m · query.len() / 4 + k` of
        // `input` (128 words, `query.len() ≤ 128`); `r6` and `r7` are pushed and popped.
        unsafe {
            core::arch::asm!(
                "push {{r6, r7}}",
                "mov lr, r1",
                "2:",
                "ldm r0!, {{r6, r7}}",
                "sxth r1, r6",
                "str r1, [r2]",
                "sxth r1, r7",
                "str r1, [r2, r3]",
                "asrs r1, r6, #16",
                "str r1, [r2, r4]",
                "asrs r1, r7, #16",
                "str r1, [r2, r5]",
                "adds r2, #4",
                "cmp r0, lr",
                "bne 2b",
                "pop {{r6, r7}}",
                inout("r0") range.start => _,
                inout("r1") range.end => _,
                inout("r2") input.0.as_mut_ptr() => _,
                inout("r3") sweep => _,
                inout("r4") 2 * sweep => _,
                inout("r5") 3 * sweep => _,
                out("lr") _,
            );
        }
        return;
    }
    unpack_query(words, start, query);
    input.fill(query);
}

/// Groups of [`SWEEP_ROWS`] rows [`sweep_passes`] takes of `rows` rows: as many as leave a
/// multiple of four rows (for the four-row passes after them) where that can be.
fn sweep_groups(rows: usize) -> usize {
    let most = rows / SWEEP_ROWS;
    let want = rows % 4; // groups ≡ rows (mod 4) leave a multiple of 4
    if most < want {
        return most;
    }
    most - (most - want) % 4
}

/// The chunk of columns [`sweep_passes`] takes from `left` (a multiple of 32): 128, 64 or 32.
fn sweep_cols(left: usize) -> usize {
    if left >= 128 {
        128
    } else if left >= 64 {
        64
    } else {
        32
    }
}

/// `out[k] += row_k[..C] · x` for the rows `k < out.len()` (a multiple of `R`, 4 or 5), row `k`
/// at `first + k · stride`, `x` the `C` columns in sweep order ([`SweepInput`]): in Rust off
/// Armv6-M (never run on Armv7-M, which has [`six_rows`]).
///
/// # Safety
/// Each row must have `C` readable bytes.
#[cfg(not(all(target_arch = "arm", not(target_has_atomic = "ptr"))))]
unsafe fn sweep_passes<const C: usize, const R: usize>(
    x: &SweepInput,
    first: *const i8,
    stride: usize,
    out: &mut [i32],
) {
    for (k, a) in out.iter_mut().enumerate() {
        // SAFETY: the caller's: `C` bytes from row `k`'s start.
        let row = unsafe { core::slice::from_raw_parts(first.wrapping_add(k * stride), C) };
        for (j, &w) in row.iter().enumerate() {
            *a = a.wrapping_add(w as i32 * x.0[j % 4 * (C / 4) + j / 4]);
        }
    }
}

/// One column of [`sweep_passes`]: the input word by `LDM` (its pointer `r0` moving on by 4,
/// which moves the rows' addresses `r2`–`r6` + `r0` on too), then the rows' `LDRSB`, `MULS` and
/// `ADD` into `r8`–`r12` (the fifth where `{five}`).
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
macro_rules! sweep_column {
    () => {
        concat!(
            "ldm r0!, {{r1}}\n",
            "ldrsb r7, [r2, r0]\n",
            "muls r7, r1, r7\n",
            "add r8, r7\n",
            "ldrsb r7, [r3, r0]\n",
            "muls r7, r1, r7\n",
            "add r9, r7\n",
            "ldrsb r7, [r4, r0]\n",
            "muls r7, r1, r7\n",
            "add r10, r7\n",
            "ldrsb r7, [r5, r0]\n",
            "muls r7, r1, r7\n",
            "add r11, r7\n",
            ".if {five}\n",
            "ldrsb r7, [r6, r0]\n",
            "muls r7, r1, r7\n",
            "add r12, r7\n",
            ".endif\n",
        )
    };
}

/// `out[k] += row_k[..C] · x` on Armv6-M for the rows `k < out.len()` (a multiple of `R`, 4 or
/// 5, at least one pass), row `k` at `first + k · stride`, `x` the `C` columns (32, 64 or 128)
/// in sweep order ([`SweepInput`]), `R` rows a pass, all in assembly. A pass
/// takes four sweeps, sweep `m` over columns `m, m + 4, …`: the input's words loaded by `LDM`
/// with write-back, whose pointer is also the register offset of the five rows' `LDRSB` (each
/// row's start minus the input's, less 4 and `C − 1` a sweep), so a column is the one `LDM`
/// and per row `LDRSB`, `MULS` and `ADD`: 16 instructions for five multiply-accumulates,
/// 32 columns a loop step for 128 (16 for 64, eight for 32; a sweep ends where the pointer's
/// low `log2 C` bits are 0, `x` being aligned to 128 bytes), the rows' registers moved back
/// between sweeps. The low registers: the pointer, the input, the five rows, the product; the
/// sums in `r8`–`r12`, loaded from `out` and stored back (`LDM`, `STM`); the pass's constants
/// on the stack, `r6` and `r7` pushed and popped.
///
/// # Safety
/// Each row must have `C` readable bytes.
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
unsafe fn sweep_passes<const C: usize, const R: usize>(
    x: &SweepInput,
    first: *const i8,
    stride: usize,
    out: &mut [i32],
) {
    const { assert!((C == 32 || C == 64 || C == 128) && (R == 4 || R == 5)) };
    let xp = x.0.as_ptr();
    let out = out.as_chunks_mut::<R>().0;
    if out.is_empty() {
        return;
    }
    let range = out.as_mut_ptr_range();
    // the pointer after the `LDM` of column `4k + m`'s word is `xp + 4(m·C/4 + k) + 4`
    let base = (first as usize).wrapping_sub(xp as usize + 4);
    // SAFETY: pass `g` reads and writes `out[g]` and, in sweep `m`, words `m·C/4..(m + 1)·C/4`
    // of `x` and the bytes `m, m + 4, …, C − 4 + m` of its five rows, each at
    // `row + 4k + m` (the row's register `row − xp − 4 − m(C − 1)` plus the pointer
    // `xp + mC + 4k + 4`); the stack: `[sp]` `x`, `[sp, #4]` the next pass's sums, `[sp, #8]`
    // its first row's register, `[sp, #12]` the stride, `[sp, #16]` the end of `out`,
    // `[sp, #20]` `R` strides, `[sp, #24]` the end of `x` (also in `lr`); popped at the end
    // with `r6`, `r7`.
    unsafe {
        core::arch::asm!(
            "push {{r6, r7}}",
            "movs r7, #{words}",
            "lsls r7, r7, #4",
            "add r7, r0",
            "push {{r0, r1, r2, r3, r4, r5, r7}}",
            "mov lr, r7",
            "5:",
            // the five sums from `out`, the rows' registers, `x` and its end
            ".if {five}",
            "ldm r1!, {{r3, r4, r5, r6, r7}}",
            ".else",
            "ldm r1!, {{r3, r4, r5, r6}}",
            ".endif",
            "str r1, [sp, #4]",
            "mov r8, r3",
            "mov r9, r4",
            "mov r10, r5",
            "mov r11, r6",
            ".if {five}",
            "mov r12, r7",
            ".endif",
            "ldr r7, [sp, #12]",
            "adds r3, r2, r7",
            "adds r4, r3, r7",
            "adds r5, r4, r7",
            ".if {five}",
            "adds r6, r5, r7",
            ".endif",
            "ldr r0, [sp]",
            "2:",
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            // (16 columns a step for 64 or 128)
            ".if {wide}",
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            ".endif",
            // (32 for 128)
            ".if {widest}",
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            sweep_column!(),
            ".endif",
            // (a sweep of 32 columns is one step)
            ".if {wide}",
            "lsls r7, r0, #{shift}",
            "beq 3f",
            "b 2b",
            "3:",
            ".endif",
            "cmp r0, lr",
            "beq 4f",
            "subs r2, #{back}",
            "subs r3, #{back}",
            "subs r4, #{back}",
            "subs r5, #{back}",
            ".if {five}",
            "subs r6, #{back}",
            ".endif",
            "b 2b",
            "4:",
            // the sums into `out`, the next pass's first row
            "mov r1, r8",
            "mov r2, r9",
            "mov r3, r10",
            "mov r4, r11",
            "ldr r0, [sp, #4]",
            "subs r0, #{bytes}",
            ".if {five}",
            "mov r5, r12",
            "stm r0!, {{r1, r2, r3, r4, r5}}",
            ".else",
            "stm r0!, {{r1, r2, r3, r4}}",
            ".endif",
            "ldr r2, [sp, #8]",
            "ldr r3, [sp, #20]",
            "adds r2, r2, r3",
            "str r2, [sp, #8]",
            "mov r1, r0",
            "ldr r3, [sp, #16]",
            "cmp r0, r3",
            "beq 6f",
            "b 5b",
            "6:",
            "add sp, #28",
            "pop {{r6, r7}}",
            inout("r0") xp => _,
            inout("r1") range.start => _,
            inout("r2") base => _,
            inout("r3") stride => _,
            inout("r4") range.end => _,
            inout("r5") R * stride => _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            out("r12") _,
            out("lr") _,
            words = const C / 4,
            five = const (R == 5) as usize,
            bytes = const 4 * R,
            wide = const (C >= 64) as usize,
            widest = const (C >= 128) as usize,
            shift = const 32 - C.trailing_zeros(),
            back = const C - 1,
        );
    }
}

/// [`sweep_passes`] for a chunk of `c` columns (32, 64 or 128).
///
/// # Safety
/// As [`sweep_passes`]: each row must have `c` readable bytes.
unsafe fn sweep_chunk_passes<const R: usize>(
    c: usize,
    x: &SweepInput,
    first: *const i8,
    stride: usize,
    out: &mut [i32],
) {
    // SAFETY: the caller's.
    unsafe {
        match c {
            128 => sweep_passes::<128, R>(x, first, stride, out),
            64 => sweep_passes::<64, R>(x, first, stride, out),
            _ => sweep_passes::<32, R>(x, first, stride, out),
        }
    }
}

/// [`sweep_passes`] for the first `five` rows (a multiple of 5) five a pass and the rest of
/// `out` (a multiple of 4) four a pass.
///
/// # Safety
/// As [`sweep_passes`]: each row must have `c` readable bytes.
unsafe fn sweep_chunk(
    c: usize,
    x: &SweepInput,
    first: *const i8,
    stride: usize,
    out: &mut [i32],
    five: usize,
) {
    let (out5, out4) = out.split_at_mut(five);
    // SAFETY: the caller's.
    unsafe {
        if !out5.is_empty() {
            sweep_chunk_passes::<SWEEP_ROWS>(c, x, first, stride, out5);
        }
        if !out4.is_empty() {
            sweep_chunk_passes::<4>(c, x, first.wrapping_add(five * stride), stride, out4);
        }
    }
}

/// [`row_sums_i8`]'s rows five a pass on Armv6-M ([`sweep_passes`], the input's columns up to
/// the last multiple of 32 in chunks of up to [`SWEEP_COLS`], the rest in Rust): returns how
/// many rows it summed ([`sweep_groups`] passes, then four rows a pass; 0 for fewer than 32
/// columns), the caller sums the rest.
fn sweep_rows(values: &[i8], cols: usize, x: &[i8], sums: &mut [i32]) -> usize {
    let n = x.len();
    let body = n / 32 * 32;
    let five = SWEEP_ROWS * sweep_groups(sums.len());
    let done = five + (sums.len() - five) / 4 * 4;
    if body == 0 || done == 0 {
        return 0;
    }
    let values = &values[..(done - 1) * cols + n];
    let sums = &mut sums[..done];
    sums.fill(0);
    let mut input = SweepInput([0; SWEEP_COLS]);
    let mut start = 0;
    while start < body {
        let c = sweep_cols(body - start);
        fill_i8(&mut input, &x[start..start + c]);
        // SAFETY: row `k < done` has its `n ≥ start + c` bytes at `k · cols` in `values`
        // (sliced just above).
        unsafe { sweep_chunk(c, &input, values[start..].as_ptr(), cols, sums, five) };
        start += c;
    }
    if body < n {
        for (r, sum) in sums.iter_mut().enumerate() {
            *sum = dot_from(*sum, &values[r * cols + body..r * cols + n], &x[body..]);
        }
    }
    done
}

/// [`key_sums_i8`]'s keys five a pass on Armv6-M (and off Arm, for the tests), as
/// [`sweep_rows`]: the query's columns up to the last multiple of 32 unpacked in chunks of up
/// to [`SWEEP_COLS`], the rest in Rust; returns how many keys it summed.
fn sweep_keys(keys: &[i8], stride: usize, d_head: usize, words: &[u32], sums: &mut [i32]) -> usize {
    let body = d_head / 32 * 32;
    let five = SWEEP_ROWS * sweep_groups(sums.len());
    let done = five + (sums.len() - five) / 4 * 4;
    if body == 0 || done == 0 {
        return 0;
    }
    let keys = &keys[..(done - 1) * stride + d_head];
    let sums = &mut sums[..done];
    sums.fill(0);
    let mut input = SweepInput([0; SWEEP_COLS]);
    let mut query = [0i16; SWEEP_COLS];
    let mut start = 0;
    while start < body {
        let c = sweep_cols(body - start);
        fill_query(&mut input, words, start, &mut query[..c]);
        // SAFETY: key `t < done` has its `d_head ≥ start + c` bytes at `t · stride` in `keys`
        // (sliced just above).
        unsafe { sweep_chunk(c, &input, keys[start..].as_ptr(), stride, sums, five) };
        start += c;
    }
    if body < d_head {
        let query = &mut query[..d_head - body];
        unpack_query(words, body, query);
        for (t, sum) in sums.iter_mut().enumerate() {
            *sum = dot_from(*sum, &keys[t * stride + body..][..d_head - body], query);
        }
    }
    done
}

/// Query values [`key_sums_i8`] unpacks at a time.
const QUERY_CHUNK: usize = 64;

/// `sums[t] = query · key_t` for `t < sums.len()`, key `t` the first `d_head` bytes at
/// `keys[t * stride..]`, the 16-bit query widened into `words`
/// ([`portable::key_sums_i8`]): the query unpacked into column order (up to [`QUERY_CHUNK`]
/// values at a time), then four keys a pass in assembly ([`four_keys`]), each query value
/// loaded once for them; the last keys by the portable code. The same sums.
pub fn key_sums_i8(keys: &[i8], stride: usize, d_head: usize, words: &[u32], sums: &mut [i32]) {
    let done = if cfg!(all(target_arch = "arm", target_has_atomic = "ptr")) {
        0
    } else {
        sweep_keys(keys, stride, d_head, words, sums)
    };
    let (keys, sums) = (keys.get(done * stride..).unwrap_or(&[]), &mut sums[done..]);
    let whole = sums.len() / ROWS * ROWS;
    let (blocks, rest) = sums.split_at_mut(whole);
    let mut query = [0i16; QUERY_CHUNK];
    for start in (0..d_head).step_by(QUERY_CHUNK) {
        let n = QUERY_CHUNK.min(d_head - start);
        let query = &mut query[..n];
        unpack_query(words, start, query);
        for (b, out) in blocks.chunks_exact_mut(ROWS).enumerate() {
            let key = |k: usize| &keys[(ROWS * b + k) * stride + start..][..n];
            let acc = four_keys(query, [key(0), key(1), key(2), key(3)]);
            if start == 0 {
                out.copy_from_slice(&acc);
            } else {
                for (o, a) in out.iter_mut().zip(acc) {
                    *o = o.wrapping_add(a);
                }
            }
        }
    }
    if !rest.is_empty() {
        portable::key_sums_i8(&keys[whole * stride..], stride, d_head, words, rest);
    }
}

/// Query columns `start..start + query.len()` (`start` a multiple of 4) from `words` into
/// column order: column `c` is word `2(c / 4) + (c & 1)`, its high half for `c & 2`; a column
/// past the words is 0.
fn unpack_query(words: &[u32], start: usize, query: &mut [i16]) {
    let groups = query.len() / 4;
    let first = start / 4 * 2;
    // whole groups of four columns from two words each, where the words are there
    let done = match words.get(first..first + 2 * groups) {
        Some(pairs) => {
            for (q, w) in query
                .as_chunks_mut::<4>()
                .0
                .iter_mut()
                .zip(pairs.as_chunks::<2>().0)
            {
                *q = [w[0] as i16, w[1] as i16, (w[0] >> 16) as i16, (w[1] >> 16) as i16];
            }
            4 * groups
        }
        None => 0,
    };
    for (c, q) in (start..).zip(query.iter_mut()).skip(done) {
        let word = words.get(2 * (c / 4) + (c & 1)).copied().unwrap_or(0);
        *q = (if c & 2 != 0 { word >> 16 } else { word }) as u16 as i16;
    }
}

/// `[r0 · x, r1 · x, r2 · x, r3 · x]` for four int8 rows as long as the input `x` (int8 for a
/// linear layer's rows, 16-bit for a query against four keys), each input value loaded once for
/// the four: in Rust off Arm.
#[cfg(not(target_arch = "arm"))]
fn four_dots<X: Copy + Into<i32>>(x: &[X], rows: [&[i8]; ROWS]) -> [i32; ROWS] {
    rows.map(|row| dot_from(0, row, x))
}

/// `acc + row · x` in i32, wrapping.
fn dot_from<X: Copy + Into<i32>>(acc: i32, row: &[i8], x: &[X]) -> i32 {
    row.iter()
        .zip(x)
        .fold(acc, |acc, (&w, &x)| acc.wrapping_add(w as i32 * x.into()))
}

/// Defines [`four_dots`] for Armv7-M (Cortex-M3; `target_has_atomic`, which Armv6-M lacks,
/// tells them apart) for inputs of type `$x` loaded by `$load` (with post-increment): eight
/// columns a pass, per column the input's load and per row `LDRSB` with post-increment and
/// `MLA`, 9 instructions per column for the four rows; the columns after the last eight in Rust.
/// Written out one line per instruction (above).
#[cfg(all(target_arch = "arm", target_has_atomic = "ptr"))]
macro_rules! armv7m_four_dots {
    ($name:ident, $x:ty, $load:literal) => {
        fn $name(x: &[$x], rows: [&[i8]; ROWS]) -> [i32; ROWS] {
            let n = x.len();
            let body = n / 8 * 8;
            let mut acc = [0i32; ROWS];
            if body > 0 {
                let [mut p0, mut p1, mut p2, mut p3] = rows.map(|r| r.as_ptr());
                let mut xp = x.as_ptr();
                let [mut a0, mut a1, mut a2, mut a3] = acc;
                // SAFETY: every pointer reads the first `body` values of its slice (each at least
                // `n` long), one a load; `end` is one past the last input value read.
                unsafe {
                    let end = xp.add(body);
                    core::arch::asm!(
                        "2:",
                        armv7m_column!($load), armv7m_column!($load),
                        armv7m_column!($load), armv7m_column!($load),
                        armv7m_column!($load), armv7m_column!($load),
                        armv7m_column!($load), armv7m_column!($load),
                        "cmp {xp}, {end}",
                        "bne 2b",
                        xp = inout(reg) xp,
                        p0 = inout(reg) p0,
                        p1 = inout(reg) p1,
                        p2 = inout(reg) p2,
                        p3 = inout(reg) p3,
                        a0 = inout(reg) a0,
                        a1 = inout(reg) a1,
                        a2 = inout(reg) a2,
                        a3 = inout(reg) a3,
                        end = in(reg) end,
                        x = out(reg) _,
                        w = out(reg) _,
                        options(nostack, readonly),
                    );
                }
                let _ = (xp, p0, p1, p2, p3);
                acc = [a0, a1, a2, a3];
            }
            for (a, row) in acc.iter_mut().zip(rows) {
                *a = dot_from(*a, &row[body..n], &x[body..]);
            }
            acc
        }
    };
}

/// One column of [`armv7m_four_dots`]: the input's `$load`, then the four rows'.
#[cfg(all(target_arch = "arm", target_has_atomic = "ptr"))]
macro_rules! armv7m_column {
    ($load:literal) => {
        concat!(
            $load,
            "\n",
            "ldrsb {w}, [{p0}], #1\n",
            "mla {a0}, {w}, {x}, {a0}\n",
            "ldrsb {w}, [{p1}], #1\n",
            "mla {a1}, {w}, {x}, {a1}\n",
            "ldrsb {w}, [{p2}], #1\n",
            "mla {a2}, {w}, {x}, {a2}\n",
            "ldrsb {w}, [{p3}], #1\n",
            "mla {a3}, {w}, {x}, {a3}\n",
        )
    };
}

/// Defines [`four_dots`] for Armv6-M (Cortex-M0, M0+) for inputs of type `$x`, column `r0` of
/// the input (an index counting up to zero) loaded into `r6` by `$load`: `LDRSB` takes a
/// register offset alone and `MULS` low registers, so the one index serves the input and the
/// four rows (low registers `r0`–`r7`, `r6` and `r7` saved and restored on the stack: the
/// compiler keeps them for itself), the sums in high registers (`r8`–`r11`): 15 instructions per
/// column for int8 inputs, 16 for 16-bit ones (the byte offset twice the index: `LSLS`); four
/// columns a pass with one branch where the length is a multiple of 4 (14.25 and 15.25).
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
macro_rules! armv6m_four_dots {
    ($name:ident, $x:ty, $($load:literal),+) => {
        fn $name(x: &[$x], rows: [&[i8]; ROWS]) -> [i32; ROWS] {
            let n = x.len();
            if n == 0 {
                return [0; ROWS];
            }
            let [e0, e1, e2, e3] = rows.map(|r| r[..n].as_ptr_range().end);
            let end = x.as_ptr_range().end;
            if n % 4 == 0 {
                // four columns a pass: one branch for them
                // SAFETY: as below; `n` is a multiple of 4, so the index reaches 0 at the end
                // of a pass.
                return unsafe {
                    armv6m_dots_asm!(
                        n,
                        end,
                        [e0, e1, e2, e3],
                        armv6m_column!($($load),+),
                        armv6m_column!($($load),+),
                        armv6m_column!($($load),+),
                        armv6m_column!($($load),+),
                    )
                };
            }
            // SAFETY: the index runs from -n to -1, so each load reads a value of its slice
            // (each `n` long, ending at its `end`); r6 and r7 are pushed before use and popped
            // after.
            unsafe { armv6m_dots_asm!(n, end, [e0, e1, e2, e3], armv6m_column!($($load),+),) }
        }
    };
}

/// The assembly of [`armv6m_four_dots`]: the four sums (`r8`–`r11`) set to 0, the loop `$body`
/// (its columns move the index `r0` from `-n` on, the last sets the flags) until the index is 0,
/// the sums returned; `r6` and `r7` pushed before and popped after. Unsafe: the rows' ends `$ends`
/// and the input's `$end` must each have `n` values before them.
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
macro_rules! armv6m_dots_asm {
    ($n:expr, $end:expr, [$e0:expr, $e1:expr, $e2:expr, $e3:expr], $($body:tt)+) => {{
        let (a0, a1, a2, a3): (i32, i32, i32, i32);
        core::arch::asm!(
            "push {{r6, r7}}",
            "movs r6, #0",
            "mov r8, r6",
            "mov r9, r6",
            "mov r10, r6",
            "mov r11, r6",
            "2:",
            $($body)+
            "bne 2b",
            "pop {{r6, r7}}",
            "mov r2, r8",
            "mov r3, r9",
            "mov r4, r10",
            "mov r5, r11",
            inout("r0") -($n as isize) => _,
            in("r1") $end,
            inout("r2") $e0 => a0,
            inout("r3") $e1 => a1,
            inout("r4") $e2 => a2,
            inout("r5") $e3 => a3,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            options(readonly),
        );
        [a0, a1, a2, a3]
    }};
}

/// One column of [`armv6m_four_dots`]: the input's load, the four rows' `LDRSB`, `MULS` and
/// `ADD`, then the index's step (its flags for the loop's branch).
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
macro_rules! armv6m_column {
    ($($load:literal),+) => {
        concat!(
            $($load, "\n",)+
            "ldrsb r7, [r2, r0]\n",
            "muls r7, r6, r7\n",
            "add r8, r7\n",
            "ldrsb r7, [r3, r0]\n",
            "muls r7, r6, r7\n",
            "add r9, r7\n",
            "ldrsb r7, [r4, r0]\n",
            "muls r7, r6, r7\n",
            "add r10, r7\n",
            "ldrsb r7, [r5, r0]\n",
            "muls r7, r6, r7\n",
            "add r11, r7\n",
            "adds r0, #1\n",
        )
    };
}

#[cfg(all(target_arch = "arm", target_has_atomic = "ptr"))]
armv7m_four_dots!(four_dots_i8, i8, "ldrsb {x}, [{xp}], #1");
#[cfg(all(target_arch = "arm", target_has_atomic = "ptr"))]
armv7m_four_dots!(four_dots_i16, i16, "ldrsh {x}, [{xp}], #2");
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
armv6m_four_dots!(four_dots_i8, i8, "ldrsb r6, [r1, r0]");
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
armv6m_four_dots!(four_dots_i16, i16, "lsls r7, r0, #1", "ldrsh r6, [r1, r7]");

/// The int8 rows' [`four_dots`].
#[inline(always)]
fn four_rows(x: &[i8], rows: [&[i8]; ROWS]) -> [i32; ROWS] {
    #[cfg(target_arch = "arm")]
    return four_dots_i8(x, rows);
    #[cfg(not(target_arch = "arm"))]
    four_dots(x, rows)
}

/// The keys' [`four_dots`] for a 16-bit query.
#[inline(always)]
fn four_keys(q: &[i16], keys: [&[i8]; ROWS]) -> [i32; ROWS] {
    #[cfg(target_arch = "arm")]
    return four_dots_i16(q, keys);
    #[cfg(not(target_arch = "arm"))]
    four_dots(q, keys)
}

/// Value columns one pass of [`value_sums_i8`] keeps in registers: eight on Armv7-M (each value
/// byte an `LDRSB.W` at an immediate offset), four on Armv6-M (fewer registers).
const VALUE_COLS: usize = if cfg!(all(target_arch = "arm", not(target_has_atomic = "ptr"))) {
    4
} else {
    8
};

/// One value of [`value_pairs`]: the weight by `LDM` (its pointer `r1` moving on by 4), the
/// four columns' `LDRSB` (register offsets 0–3 in `r4`–`r7` from the value's start `r0`), `MULS`
/// and `ADD` into `r9`–`r12`, then the next value (`r0` plus the stride, `r8`).
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
macro_rules! value_column {
    () => {
        concat!(
            "ldm r1!, {{r2}}\n",
            "ldrsb r3, [r0, r4]\n",
            "muls r3, r2, r3\n",
            "add r9, r3\n",
            "ldrsb r3, [r0, r5]\n",
            "muls r3, r2, r3\n",
            "add r10, r3\n",
            "ldrsb r3, [r0, r6]\n",
            "muls r3, r2, r3\n",
            "add r11, r3\n",
            "ldrsb r3, [r0, r7]\n",
            "muls r3, r2, r3\n",
            "add r12, r3\n",
            "add r0, r8\n",
        )
    };
}

/// `sums[c] += Σ_t weights[t] · value_t[c]` for the four columns `c` of the values from `at`
/// (value `t` at `at + t · stride`), `weights` an even count (at least 2), on Armv6-M: two
/// values a loop step, per value the weight's `LDM` and the stride's `ADD`, per column
/// `LDRSB`, `MULS` and `ADD` (14 instructions for four multiply-accumulates); the sums in
/// `r9`–`r12`, loaded and stored by `LDM` and `STM`, `r6` and `r7` pushed and popped.
///
/// # Safety
/// Each of the `weights.len()` values must have four readable bytes.
#[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
unsafe fn value_pairs(at: *const i8, stride: usize, weights: &[i32], sums: &mut [i32; VALUE_COLS]) {
    let range = weights.as_ptr_range();
    // SAFETY: the loop reads the weights from `range.start` to `range.end` (an even count, at
    // least 2, so it ends there) and value `t`'s four bytes at `at + t · stride`; `sums` is
    // read and written whole; `r6` and `r7` are pushed and popped.
    unsafe {
        core::arch::asm!(
            "push {{r6, r7}}",
            "mov r8, r3",
            "mov lr, r4",
            "push {{r2}}",
            "ldm r2!, {{r3, r4, r5, r6}}",
            "mov r9, r3",
            "mov r10, r4",
            "mov r11, r5",
            "mov r12, r6",
            "movs r4, #0",
            "movs r5, #1",
            "movs r6, #2",
            "movs r7, #3",
            "2:",
            value_column!(),
            value_column!(),
            "cmp r1, lr",
            "bne 2b",
            "pop {{r2}}",
            "mov r3, r9",
            "mov r4, r10",
            "mov r5, r11",
            "mov r1, r12",
            "str r3, [r2]",
            "str r4, [r2, #4]",
            "str r5, [r2, #8]",
            "str r1, [r2, #12]",
            "pop {{r6, r7}}",
            inout("r0") at => _,
            inout("r1") range.start => _,
            inout("r2") sums.as_mut_ptr() => _,
            inout("r3") stride => _,
            inout("r4") range.end => _,
            out("r5") _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            out("r12") _,
            out("lr") _,
        );
    }
}

/// `acc[c] += Σ_t weights[t] · value_t[c]` for `c < acc.len()`, value `t` at
/// `values[t * stride..]` ([`portable::value_sums_i8`]): [`VALUE_COLS`] columns at a time, their
/// sums in registers through every value, each weight loaded once for them, no bounds check
/// per value, a weight of 0 skipping its value (on Armv6-M the one after the pairs); the last
/// columns, and values that overlap (a stride shorter than `acc`), by the portable code. The
/// same sums (every product and sum wraps, as there).
pub fn value_sums_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    let n = weights.len();
    if n == 0 || acc.is_empty() {
        return;
    }
    if stride < acc.len() || values.len() < (n - 1) * stride + acc.len() {
        return portable::value_sums_i8(values, stride, weights, acc);
    }
    let whole = acc.len() / VALUE_COLS * VALUE_COLS;
    let (blocks, rest) = acc.split_at_mut(whole);
    for (g, out) in blocks.chunks_exact_mut(VALUE_COLS).enumerate() {
        let mut sums = [0i32; VALUE_COLS];
        sums.copy_from_slice(out);
        let mut at = values[g * VALUE_COLS..].as_ptr();
        // (Armv6-M: the values two at a time in assembly, the last of an odd count below)
        #[cfg(all(target_arch = "arm", not(target_has_atomic = "ptr")))]
        let weights = {
            let pairs = n / 2 * 2;
            if pairs > 0 {
                // SAFETY: as below, for the first `pairs` values.
                unsafe { value_pairs(at, stride, &weights[..pairs], &mut sums) };
                at = at.wrapping_add(pairs * stride);
            }
            &weights[pairs..]
        };
        for &w in weights {
            // a weight of 0 adds nothing: its value is not read (the attention's probabilities
            // are mostly 0 where the scores are far apart)
            if w != 0 {
                // SAFETY: value `t` (`t < n`) has `acc.len()` bytes from `t * stride` in
                // `values` (checked above), so columns `g · VALUE_COLS..(g + 1) · VALUE_COLS`
                // are there; `at` moves on by `stride` after each value, past the slice only
                // after the last.
                let v = unsafe { &*(at as *const [i8; VALUE_COLS]) };
                for (s, &v) in sums.iter_mut().zip(v) {
                    *s = s.wrapping_add(w.wrapping_mul(v as i32));
                }
            }
            at = at.wrapping_add(stride);
        }
        out.copy_from_slice(&sums);
    }
    if !rest.is_empty() {
        portable::value_sums_i8(&values[whole..], stride, weights, rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn row_sums_are_the_portable_sums() {
        let mut rng = Rng::new(5);
        // (the Cortex-M3's six-row passes: 128, 256 and 512 columns)
        for (rows, cols) in [
            (1, 1),
            (3, 7),
            (4, 16),
            (9, 33),
            (17, 128),
            (8, 0),
            (12, 256),
            (13, 512),
            // (Armv6-M's five-row passes: chunks of 128, 64 and 32 columns, and the rest)
            (24, 96),
            (13, 200),
            (10, 64),
            (23, 289),
        ] {
            let values: Vec<i8> = (0..rows * cols).map(|_| rng.next_u64() as i8).collect();
            let xq: Vec<i8> = (0..cols).map(|_| (rng.next_u64() as i8).max(-127)).collect();
            let mut ours = vec![0; rows];
            let mut theirs = vec![0; rows];
            row_sums_i8(&values, cols, &xq, &mut ours);
            portable::row_sums_i8(&values, cols, &xq, &mut theirs);
            assert_eq!(ours, theirs, "{rows} × {cols}");
        }
    }

    #[test]
    fn attention_sums_are_the_portable_sums() {
        let mut rng = Rng::new(6);
        // the last key as long as its head alone, as the memory hands its rows out
        for (keys, d_head, stride) in [
            (1usize, 4usize, 4usize),
            (5, 6, 9),
            (8, 32, 128),
            (13, 17, 40),
            (4, 3, 3),
            // (a query unpacked in two parts)
            (9, 80, 96),
            // (Armv6-M's five-key passes)
            (14, 32, 32),
            (11, 100, 130),
            (21, 224, 224),
        ] {
            let values: Vec<i8> = (0..keys * stride + d_head)
                .map(|_| rng.next_u64() as i8)
                .collect();
            let words: Vec<u32> = (0..2 * d_head.div_ceil(4))
                .map(|_| rng.next_u64() as u32)
                .collect();
            let (mut ours, mut theirs) = (vec![0; keys], vec![0; keys]);
            key_sums_i8(&values, stride, d_head, &words, &mut ours);
            portable::key_sums_i8(&values, stride, d_head, &words, &mut theirs);
            assert_eq!(ours, theirs, "keys {keys} × {d_head}");
            let weights: Vec<i32> = (0..keys).map(|_| (rng.next_u64() % 32768) as i32).collect();
            let (mut ours, mut theirs) = (vec![7; d_head], vec![7; d_head]);
            value_sums_i8(&values, stride, &weights, &mut ours);
            portable::value_sums_i8(&values, stride, &weights, &mut theirs);
            assert_eq!(ours, theirs, "values {keys} × {d_head}");
        }
    }
}
