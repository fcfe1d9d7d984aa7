//! Cortex-M kernels for the single-precision FPU (target ABI `eabihf`): f32 and f16 rows four
//! at a time with `VMLA` (which rounds the product before it adds: the portable order's bits),
//! weighted rows, f16 widened by `VCVTB`/`VCVTT`.

use core::arch::global_asm;

/// Whether the attention's products take the kernels of eight columns a load
/// (`txl_dots4x8_f32`, `txl_axpys8_f32`; the `cortex-m-large-kernels` feature), else those of
/// four.
const LARGE_KERNELS: bool = cfg!(feature = "cortex-m-large-kernels");

use half::f16;
extern "C" {
    /// For the four rows `row_k = rows + k * stride` (f32, `stride` in bytes) and
    /// `groups >= 1` groups of four columns: `sums[4k + j] = sum over groups g of
    /// row_k[4g + j] * x[4g + j]`, each product rounded and then added (`VMLA`), group by
    /// group: the four partial sums of [`portable::dot_f32`](crate::kernels::portable::dot_f32), in its order.
    fn txl_rows4_f32(rows: *const f32, stride: usize, x: *const f32, groups: usize, sums: *mut f32);
    /// `out[e] += p[0] * row_0[e] + ... + p[3] * row_3[e]` for `e < 4 * groups`, each product
    /// rounded and added in that order (`VMLA`), with `row_k = rows + k * stride` (`stride` in
    /// bytes): four calls of the portable `out += p * row`, in their order, per element.
    fn txl_axpy4_f32(rows: *const f32, stride: usize, p: *const f32, out: *mut f32, groups: usize);
    /// [`txl_rows4_f32`] for f16 rows, each weight widened exactly by `VCVTB`/`VCVTT`: the
    /// partial sums of [`portable::dot_f16`](crate::kernels::portable::dot_f16). Rows must be 4-byte aligned.
    fn txl_rows4_f16(rows: *const f16, stride: usize, x: *const f32, groups: usize, sums: *mut f32);
}

// Per group of four columns: one VLDM for the inputs (shared by the four rows), then per row one
// VLDM of its weights and four VMLA (f16: four VCVT more). VMLA rounds the product before it
// adds, so it gives the bits of the portable kernel's separate multiply and add. Registers:
// r0, r4-r6 the rows, r1 the stride, r2 the inputs, r3 their end, s0-s15 the sums, s16-s19
// the inputs, s20-s23 the weights.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".macro txl_rows4_f32_row row, s0, s1, s2, s3",
    "vldmia \\row!, {{s20-s23}}",
    "vmla.f32 \\s0, s20, s16",
    "vmla.f32 \\s1, s21, s17",
    "vmla.f32 \\s2, s22, s18",
    "vmla.f32 \\s3, s23, s19",
    ".endm",
    ".macro txl_rows4_f16_row row, s0, s1, s2, s3",
    "vldmia \\row!, {{s20-s21}}",
    "vcvtb.f32.f16 s22, s20",
    "vmla.f32 \\s0, s22, s16",
    "vcvtt.f32.f16 s22, s20",
    "vmla.f32 \\s1, s22, s17",
    "vcvtb.f32.f16 s22, s21",
    "vmla.f32 \\s2, s22, s18",
    "vcvtt.f32.f16 s22, s21",
    "vmla.f32 \\s3, s22, s19",
    ".endm",
    ".macro txl_rows4_float name, row",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r4-r7, lr}}",
    "vpush {{s16-s23}}",
    "add r4, r0, r1",
    "add r5, r4, r1",
    "add r6, r5, r1",
    "add r3, r2, r3, lsl #4",
    "mov r7, #0",
    "vmov s0, s1, r7, r7",
    "vmov s2, s3, r7, r7",
    "vmov s4, s5, r7, r7",
    "vmov s6, s7, r7, r7",
    "vmov s8, s9, r7, r7",
    "vmov s10, s11, r7, r7",
    "vmov s12, s13, r7, r7",
    "vmov s14, s15, r7, r7",
    "1:",
    "vldmia r2!, {{s16-s19}}",
    "\\row r0, s0, s1, s2, s3",
    "\\row r4, s4, s5, s6, s7",
    "\\row r5, s8, s9, s10, s11",
    "\\row r6, s12, s13, s14, s15",
    "cmp r2, r3",
    "bne 1b",
    "ldr r7, [sp, #52]", // sums: above the 20 + 32 bytes pushed
    "vstmia r7, {{s0-s15}}",
    "vpop {{s16-s23}}",
    "pop {{r4-r7, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_rows4_float txl_rows4_f32, txl_rows4_f32_row",
    "txl_rows4_float txl_rows4_f16, txl_rows4_f16_row",
    // txl_axpy4_f32: r0 the first row, r1 the stride, r2 the four weights, r3 the output,
    // [sp] the groups of four elements. s16-s19 the weights, s0-s3 four outputs, s4-s7 a row's.
    ".section .text.txl_axpy4_f32,\"ax\",%progbits",
    ".globl txl_axpy4_f32",
    ".type txl_axpy4_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_axpy4_f32:",
    "push {{r4-r7, lr}}",
    "vpush {{s16-s23}}",
    "ldr r7, [sp, #52]",
    "vldmia r2, {{s16-s19}}",
    "add r4, r0, r1",
    "add r5, r4, r1",
    "add r6, r5, r1",
    "1:",
    "vldmia r3, {{s0-s3}}",
    "vldmia r0!, {{s4-s7}}",
    "vmla.f32 s0, s16, s4",
    "vmla.f32 s1, s16, s5",
    "vmla.f32 s2, s16, s6",
    "vmla.f32 s3, s16, s7",
    "vldmia r4!, {{s4-s7}}",
    "vmla.f32 s0, s17, s4",
    "vmla.f32 s1, s17, s5",
    "vmla.f32 s2, s17, s6",
    "vmla.f32 s3, s17, s7",
    "vldmia r5!, {{s4-s7}}",
    "vmla.f32 s0, s18, s4",
    "vmla.f32 s1, s18, s5",
    "vmla.f32 s2, s18, s6",
    "vmla.f32 s3, s18, s7",
    "vldmia r6!, {{s4-s7}}",
    "vmla.f32 s0, s19, s4",
    "vmla.f32 s1, s19, s5",
    "vmla.f32 s2, s19, s6",
    "vmla.f32 s3, s19, s7",
    "vstmia r3!, {{s0-s3}}",
    "subs r7, r7, #1",
    "bne 1b",
    "vpop {{s16-s23}}",
    "pop {{r4-r7, pc}}",
    ".size txl_axpy4_f32, . - txl_axpy4_f32",
);

/// `W (rows, cols) @ x (cols) -> y (rows)` for f32 weights, four rows per pass over `x`; the
/// bits of [`portable::matvec_f32`](crate::kernels::portable::matvec_f32) (each row summed in its order).
pub fn matvec_f32(weight: &[f32], x: &[f32], y: &mut [f32]) {
    let cols = x.len();
    let groups = cols / 4;
    let mut blocks = y.chunks_exact_mut(4);
    let mut done = 0;
    // zeroed once: the kernel overwrites all 16 for each block (and none when `groups` is 0)
    let mut sums = [0.0f32; 16];
    for (out, rows) in (&mut blocks).zip(weight.chunks_exact(4 * cols)) {
        if groups > 0 {
            // SAFETY: `rows` holds four rows of `cols >= 4 * groups` f32 at a stride of `cols`
            // f32, and `x` holds `cols`: the kernel reads only those, writes the 16 floats of
            // `sums`, and preserves the callee-saved registers (AAPCS, s16-s23 included).
            unsafe { txl_rows4_f32(rows.as_ptr(), 4 * cols, x.as_ptr(), groups, sums.as_mut_ptr()) };
        }
        finish_rows(out, &sums, rows.chunks_exact(cols), x, 4 * groups, |w| w);
        done += 4;
    }
    let rest = &mut y[done..];
    crate::kernels::portable::matvec_f32(&weight[done * cols..], x, rest);
}

/// `dst[i] = src[i]` widened exactly by the FPU (`VCVTB`/`VCVTT`), two elements a step; the
/// portable `f16_to_f32`'s bits for every number (NaNs come out quiet, as from the f16 weight
/// kernel). `src` not 4-byte aligned, and an odd last element, take the portable code.
pub fn widen_f16(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let pairs = if (src.as_ptr() as usize).is_multiple_of(4) {
        n / 2
    } else {
        0
    };
    if pairs > 0 {
        // SAFETY: `pairs` pairs of f16 from a 4-byte aligned `src` and `2 * pairs` f32 into
        // `dst`, both at least `2 * pairs` long (`n`); the routine touches nothing else.
        unsafe { txl_widen_f16_pairs(src.as_ptr(), dst.as_mut_ptr(), pairs) };
    }
    for (d, &s) in dst[2 * pairs..n].iter_mut().zip(&src[2 * pairs..n]) {
        *d = crate::kernels::portable::f16_to_f32(s);
    }
}

extern "C" {
    /// `dst[2k], dst[2k + 1]` = the two f16 of the word `src[k]`, widened, for `k < pairs`
    /// (`pairs >= 1`, `src` 4-byte aligned).
    fn txl_widen_f16_pairs(src: *const f16, dst: *mut f32, pairs: usize);
}

// txl_widen_f16_pairs: r0 the f16 words, r1 the f32 output, r2 the pairs; s0-s2 (caller-saved).
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".section .text.txl_widen_f16_pairs,\"ax\",%progbits",
    ".globl txl_widen_f16_pairs",
    ".type txl_widen_f16_pairs,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_widen_f16_pairs:",
    "1:",
    "vldmia r0!, {{s0}}",
    "vcvtb.f32.f16 s1, s0",
    "vcvtt.f32.f16 s2, s0",
    "vstmia r1!, {{s1-s2}}",
    "subs r2, r2, #1",
    "bne 1b",
    "bx lr",
    ".size txl_widen_f16_pairs, . - txl_widen_f16_pairs",
);

/// `W (rows, cols) @ x (cols) -> y (rows)` for f16 weights, four rows per pass over `x`, each
/// weight widened by the FPU; the bits of the portable `dot_f16` of each row. Falls back to it
/// for rows that are not 4-byte aligned.
pub fn matvec_f16(weight: &[f16], x: &[f32], y: &mut [f32]) {
    let cols = x.len();
    let groups = cols / 4;
    let aligned = cols.is_multiple_of(2) && (weight.as_ptr() as usize).is_multiple_of(4);
    let mut done = 0;
    if aligned {
        // zeroed once, as in `matvec_f32`
        let mut sums = [0.0f32; 16];
        for (out, rows) in y.chunks_exact_mut(4).zip(weight.chunks_exact(4 * cols)) {
            if groups > 0 {
                // SAFETY: as for `txl_rows4_f32`, with f16 rows: four rows of `cols` f16 at a
                // stride of `2 * cols` bytes, each 4-byte aligned (checked above).
                unsafe { txl_rows4_f16(rows.as_ptr(), 2 * cols, x.as_ptr(), groups, sums.as_mut_ptr()) };
            }
            finish_rows(
                out,
                &sums,
                rows.chunks_exact(cols),
                x,
                4 * groups,
                crate::kernels::portable::f16_to_f32,
            );
            done += 4;
        }
    }
    for (out, row) in y[done..].iter_mut().zip(weight[done * cols..].chunks_exact(cols)) {
        *out = crate::kernels::portable::dot_f16(row, x);
    }
}

extern "C" {
    /// For each of `blocks` blocks of four rows (row `k` of block `b` at `rows + (4b + k) *
    /// stride`, `stride` in bytes) and `octets >= 1` groups of eight columns: `out[4b + k] =
    /// ((a0 + a1) + (a2 + a3)) + 0.0`, `a_j` the sum of `row[c] * x[c]` over the columns `c = j
    /// mod 4` in order (`VMLA`): [`portable::dot_f32`](crate::kernels::portable::dot_f32) of
    /// each row, its bits, for widths that are a multiple of eight.
    fn txl_dots4x8_f32(
        rows: *const f32,
        stride: usize,
        x: *const f32,
        octets: usize,
        out: *mut f32,
        blocks: usize,
    );
    /// [`txl_dots4x8_f32`] for rows of exactly 32 columns (`octets` 4), without a loop over
    /// them.
    fn txl_dots4x32_f32(
        rows: *const f32,
        stride: usize,
        x: *const f32,
        octets: usize,
        out: *mut f32,
        blocks: usize,
    );
    /// For each of `octets >= 1` groups of eight columns `e` and `quads >= 1` groups of four
    /// rows `k` in order (row `k` at `rows + k * stride`, `stride` in bytes): `out[e] += p[k] *
    /// row_k[e]` (`VMLA`), so each element's products are added in the portable loop's order;
    /// the eight sums stay in registers through all the rows.
    fn txl_axpys8_f32(
        rows: *const f32,
        stride: usize,
        p: *const f32,
        quads: usize,
        out: *mut f32,
        octets: usize,
    );
}

// `txl_dots4x8_f32`, per eight columns: one VLDM of eight inputs shared by the four rows, then
// per row one VLDM of eight weights and eight VMLA (37 instructions per 32 multiply-
// accumulates); per block the four sums added in the portable order and stored by one VSTM.
// `txl_dots4x32_f32` is the same for rows of four octets, unrolled: no compare and branch
// between them.
// The sums start from `+0.0` as the portable ones do, sixteen zeros by one VLDM a block (from
// `txl_dots_zeros`): a sum from `+0.0` is never `-0` (`+0 + -0` is `+0`), so the portable
// total's last addition of its empty tail, `+ 0.0`, changes no bits and is left out (173 -> 169
// instructions a block of four rows of 32).
// Registers: r0 and r4-r6 the rows, r1 the stride, r2 the inputs' start, r3 their end, r12 the
// inputs, lr the outputs, r7 the zeros, r8 the blocks left, r9 the step from a block's first
// row's end to the next block's first row; s0-s15 the sums (four per row), s16-s23 the inputs,
// s24-s31 the weights.
//
// `txl_axpys8_f32`, per row: one VLDM of eight values, eight VMLA into the sums and an ADD to
// the next row, and per four rows one VLDM of their weights (43 instructions per 32 multiply-
// accumulates with the loop). Registers: r0 the first row of the columns, r1 the stride, r2
// the weights' start, r3 their end, r4 the row, r12 the weights, lr the outputs, r5 the octets
// left; s0-s7 the sums, s8-s11 the weights, s16-s23 the values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".section .rodata.txl_dots_zeros,\"a\",%progbits",
    ".p2align 2",
    "txl_dots_zeros:",
    ".rept 16",
    ".word 0",
    ".endr",
    ".macro txl_dots4x8_row row, a0, a1, a2, a3",
    "vldmia \\row!, {{s24-s31}}",
    "vmla.f32 \\a0, s24, s16",
    "vmla.f32 \\a1, s25, s17",
    "vmla.f32 \\a2, s26, s18",
    "vmla.f32 \\a3, s27, s19",
    "vmla.f32 \\a0, s28, s20",
    "vmla.f32 \\a1, s29, s21",
    "vmla.f32 \\a2, s30, s22",
    "vmla.f32 \\a3, s31, s23",
    ".endm",
    // `out = (a0 + a1) + (a2 + a3)`; s24/s25 are free
    ".macro txl_dots4x8_total out, a0, a1, a2, a3",
    "vadd.f32 s24, \\a0, \\a1",
    "vadd.f32 s25, \\a2, \\a3",
    "vadd.f32 \\out, s24, s25",
    ".endm",
    // `whole`: rows of exactly four octets, the three after the first without a loop
    ".macro txl_dots4_fn name, whole",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r4-r9, lr}}",
    "vpush {{s16-s31}}",
    "ldr lr, [sp, #92]", // out: above the 28 + 64 bytes pushed
    "ldr r8, [sp, #96]", // blocks
    "lsl r9, r3, #5",
    "rsb r9, r9, r1, lsl #2", // 4 * stride - 32 * octets
    "add r3, r2, r3, lsl #5", // the inputs' end
    "movw r7, :lower16:txl_dots_zeros",
    "movt r7, :upper16:txl_dots_zeros",
    "cmp r8, #0",
    "beq 3f",
    "1:",
    "add r4, r0, r1",
    "add r5, r4, r1",
    "add r6, r5, r1",
    "mov r12, r2",
    "vldmia r7, {{s0-s15}}",
    ".if \\whole",
    ".rept 4",
    "vldmia r12!, {{s16-s23}}",
    "txl_dots4x8_row r0, s0, s1, s2, s3",
    "txl_dots4x8_row r4, s4, s5, s6, s7",
    "txl_dots4x8_row r5, s8, s9, s10, s11",
    "txl_dots4x8_row r6, s12, s13, s14, s15",
    ".endr",
    ".else",
    "2:",
    "vldmia r12!, {{s16-s23}}",
    "txl_dots4x8_row r0, s0, s1, s2, s3",
    "txl_dots4x8_row r4, s4, s5, s6, s7",
    "txl_dots4x8_row r5, s8, s9, s10, s11",
    "txl_dots4x8_row r6, s12, s13, s14, s15",
    "cmp r12, r3",
    "bne 2b",
    ".endif",
    "txl_dots4x8_total s16, s0, s1, s2, s3",
    "txl_dots4x8_total s17, s4, s5, s6, s7",
    "txl_dots4x8_total s18, s8, s9, s10, s11",
    "txl_dots4x8_total s19, s12, s13, s14, s15",
    "vstmia lr!, {{s16-s19}}",
    "add r0, r0, r9",
    "subs r8, r8, #1",
    "bne 1b",
    "3:",
    "vpop {{s16-s31}}",
    "pop {{r4-r9, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_dots4_fn txl_dots4x8_f32, 0",
    "txl_dots4_fn txl_dots4x32_f32, 1",
    ".macro txl_axpys8_row k",
    "vldmia r4, {{s16-s23}}",
    "add r4, r4, r1",
    "vmla.f32 s0, \\k, s16",
    "vmla.f32 s1, \\k, s17",
    "vmla.f32 s2, \\k, s18",
    "vmla.f32 s3, \\k, s19",
    "vmla.f32 s4, \\k, s20",
    "vmla.f32 s5, \\k, s21",
    "vmla.f32 s6, \\k, s22",
    "vmla.f32 s7, \\k, s23",
    ".endm",
    ".section .text.txl_axpys8_f32,\"ax\",%progbits",
    ".globl txl_axpys8_f32",
    ".type txl_axpys8_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_axpys8_f32:",
    "push {{r4, r5, r6, lr}}",
    "vpush {{s16-s23}}",
    "ldr lr, [sp, #48]",      // out: above the 16 + 32 bytes pushed
    "ldr r5, [sp, #52]",      // octets
    "add r3, r2, r3, lsl #4", // the weights' end
    "1:",
    "vldmia lr, {{s0-s7}}",
    "mov r4, r0",
    "mov r12, r2",
    "2:",
    "vldmia r12!, {{s8-s11}}",
    "txl_axpys8_row s8",
    "txl_axpys8_row s9",
    "txl_axpys8_row s10",
    "txl_axpys8_row s11",
    "cmp r12, r3",
    "bne 2b",
    "vstmia lr!, {{s0-s7}}",
    "add r0, r0, #32",
    "subs r5, r5, #1",
    "bne 1b",
    "vpop {{s16-s23}}",
    "pop {{r4, r5, r6, pc}}",
    ".size txl_axpys8_f32, . - txl_axpys8_f32",
);

/// `out[r] = x · rows[r * stride..][..x.len()]` for `r < out.len()`, four rows per pass; the
/// bits of the portable `dot(x, row)` for each.
pub fn dots_strided_f32(rows: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
    let n = x.len();
    let groups = n / 4;
    let mut done = 0;
    let blocks = out.len() / 4;
    if LARGE_KERNELS && n > 0 && n.is_multiple_of(8) && stride >= n && blocks > 0 {
        let octets = n / 8;
        let last_end = (4 * blocks - 1) * stride + n;
        assert!(last_end <= rows.len(), "rows out of bounds");
        // rows of 32 columns (a head of 32) take the kernel without the loop over the columns
        let kernel = if octets == 4 {
            txl_dots4x32_f32
        } else {
            txl_dots4x8_f32
        };
        // SAFETY: the kernel reads `4 * blocks` rows of `n = 8 * octets` f32 at a stride of
        // `stride` f32 (the last ends at `last_end`, inside `rows`, checked above) and the `n`
        // of `x`, writes the first `4 * blocks` of `out`, and preserves the callee-saved
        // registers and the stack pointer (AAPCS).
        unsafe {
            kernel(
                rows.as_ptr(),
                4 * stride,
                x.as_ptr(),
                octets,
                out.as_mut_ptr(),
                blocks,
            )
        };
        done = 4 * blocks;
    } else if groups > 0 && stride >= n {
        // once per call: the kernel overwrites all 16 for each block
        let mut sums = [0.0f32; 16];
        while done + 4 <= out.len() {
            let block = &rows[done * stride..(done + 3) * stride + n];
            // SAFETY: `block` holds four rows of `n >= 4 * groups` f32 at a stride of `stride`
            // f32 (the last ends at `3 * stride + n`), `x` holds `n`: the kernel reads only
            // those, writes the 16 floats of `sums`, and preserves the callee-saved registers.
            unsafe { txl_rows4_f32(block.as_ptr(), 4 * stride, x.as_ptr(), groups, sums.as_mut_ptr()) };
            let block_rows = (0..4).map(|k| &block[k * stride..k * stride + n]);
            finish_rows(&mut out[done..done + 4], &sums, block_rows, x, 4 * groups, |w| w);
            done += 4;
        }
    }
    for (r, o) in out.iter_mut().enumerate().skip(done) {
        *o = crate::kernels::portable::dot_f32(x, &rows[r * stride..r * stride + n]);
    }
}

/// `out += p[k] * rows[k * stride..][..out.len()]` for `k < p.len()` in order, four rows per
/// pass; per element the products are added in the portable loop's order, so the bits are its.
pub fn axpys_strided_f32(rows: &[f32], stride: usize, p: &[f32], out: &mut [f32]) {
    let n = out.len();
    let groups = n / 4;
    let body = 4 * groups;
    let mut done = 0;
    let quads = p.len() / 4;
    if LARGE_KERNELS && n > 0 && n.is_multiple_of(8) && stride >= n && quads > 0 {
        let last_end = (4 * quads - 1) * stride + n;
        assert!(last_end <= rows.len(), "rows out of bounds");
        // SAFETY: the kernel reads `4 * quads` rows of `n` f32 at a stride of `stride` f32 (the
        // last ends at `last_end`, inside `rows`, checked above) and their `4 * quads` weights
        // of `p`, reads and writes the `n` floats of `out`, and preserves the callee-saved
        // registers and the stack pointer (AAPCS).
        unsafe {
            txl_axpys8_f32(
                rows.as_ptr(),
                4 * stride,
                p.as_ptr(),
                quads,
                out.as_mut_ptr(),
                n / 8,
            )
        };
        done = 4 * quads;
    } else if groups > 0 && stride >= n {
        while done + 4 <= p.len() {
            let block = &rows[done * stride..(done + 3) * stride + n];
            // SAFETY: `block` holds four rows of `n >= 4 * groups` f32 at a stride of `stride`
            // f32, `p[done..done + 4]` four weights and `out` `n` floats: the kernel reads only
            // those, writes the first `4 * groups` of `out`, and preserves the callee-saved
            // registers.
            unsafe {
                txl_axpy4_f32(
                    block.as_ptr(),
                    4 * stride,
                    p[done..done + 4].as_ptr(),
                    out.as_mut_ptr(),
                    groups,
                )
            };
            for (k, &weight) in p[done..done + 4].iter().enumerate() {
                for (o, v) in out[body..]
                    .iter_mut()
                    .zip(&block[k * stride + body..k * stride + n])
                {
                    *o += weight * v;
                }
            }
            done += 4;
        }
    }
    for (k, &weight) in p.iter().enumerate().skip(done) {
        for (o, v) in out.iter_mut().zip(&rows[k * stride..k * stride + n]) {
            *o += weight * v;
        }
    }
}

/// Each row's total from the kernel's four partial sums and the columns after `body`, in the
/// portable kernels' order: `(a0 + a1) + (a2 + a3) + tail`.
#[inline(always)]
fn finish_rows<'w, T: Copy + 'w>(
    out: &mut [f32],
    sums: &[f32; 16],
    rows: impl Iterator<Item = &'w [T]>,
    x: &[f32],
    body: usize,
    widen: impl Fn(T) -> f32,
) {
    for ((y, partial), row) in out.iter_mut().zip(sums.chunks_exact(4)).zip(rows) {
        let mut tail = 0.0;
        for (w, v) in row[body..].iter().zip(&x[body..]) {
            tail += widen(*w) * v;
        }
        *y = (partial[0] + partial[1]) + (partial[2] + partial[3]) + tail;
    }
}

extern "C" {
    /// The largest of `bits << 1` over the `4 * fours` values at `x` (`fours >= 1`): twice the
    /// bits of the largest magnitude, or more than `0xff00_0000` (infinity's) if one is a NaN.
    fn txl_max_doubled_bits(x: *const f32, fours: usize) -> u32;
    /// `out[i] = round(x[i] * inverse)` for `i < 4 * fours` (`fours >= 1`), rounding half away
    /// from zero as `libm::roundf` does, for products of magnitude below 128 (`inverse` as
    /// bits).
    fn txl_quantize4_f32(x: *const f32, out: *mut i8, fours: usize, inverse: u32);
    /// [`txl_quantize4_f32`] with the bytes also widened as `dsp::widen_input_i8` lays them out:
    /// for `g < groups` (`groups >= 1`), `q_k = round(x[4g + k] * inverse)` (half away from zero,
    /// products of magnitude below 128, `inverse` as bits), `out[4g + k] = q_k`, `pairs[2g] =
    /// q_0 | q_2 << 16` and `pairs[2g + 1] = q_1 | q_3 << 16` (signed 16-bit halves).
    fn txl_quantize_widen4_f32(x: *const f32, out: *mut i8, groups: usize, inverse: u32, pairs: *mut u32);
}

// `txl_max_doubled_bits`, per eight values: one LDM, then per value a compare with the value
// shifted left by one (the sign out) and a conditional shift into the largest (3.375
// instructions a value with the loop; an odd number of fours takes four first). Registers: r0
// the values, r1 the passes left, r2-r9 eight values, r12 the largest.
//
// `txl_quantize4_f32`, per four values: one VLDM, four VMUL by the inverse, four VCVT to fixed
// point with one fraction bit, `t = trunc(2y)` (exact), and `y` rounded half away from zero
// from them two at a time in the halves of a word, as `txl_quantize_widen4_f32` below
// (`libm::roundf`'s `trunc(y + copysign(0.5 - EPSILON / 4, y))` for every `|y| < 128`); the
// four bytes then from the halves by two UXTB16 and an ORR, and one STR: 22 instructions per
// four values with the loop (eight a pass; an odd number of fours takes four first). Registers: r0 the values, r1 the outputs, r2 the groups left, s8
// the inverse, s0-s3 the products, r4-r7 the integers, r8 `0x0001_0001`.
//
// `txl_quantize_widen4_f32`, per four values (`txl_rounded_pairs_four`, which
// `txl_quantize4_f32` shares): one VLDM, four VMUL by the inverse and four VCVT to fixed point
// with one fraction bit, `t = trunc(2y)` (exact); two VMOV to the core registers and two PKHBT
// put the four `t` in the halves of the two words as the pairs lay them out (`|t| < 256`); then
// in both halves at once `round(y) = (t + b) >> 1` (SHADD16), `b` 1 where `t >= 0` (its sign
// bit cleared from `0x0001_0001` by a BIC): `floor((trunc(2y) + 1) / 2)` for `y >= 0` and
// `floor(trunc(2y) / 2)` below, `y` rounded half away from zero, as `libm::roundf` gives it.
// One STRD of the pairs, and the bytes from them by two UXTB16, an ORR and an STR: 23
// instructions per four values with the loop (eight a pass; an odd number of fours takes four
// first), against 27 and the widening's pass. Registers: r0 the values, r1 the bytes, r2 the
// groups left, r12 the pairs, r8 `0x0001_0001`, s8 the inverse, s0-s3 the products, r4-r7 the
// integers.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".macro txl_larger_doubled value",
    "cmp r12, \\value, lsl #1",
    "it lo",
    "lsllo r12, \\value, #1",
    ".endm",
    ".section .text.txl_max_doubled_bits,\"ax\",%progbits",
    ".globl txl_max_doubled_bits",
    ".type txl_max_doubled_bits,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_max_doubled_bits:",
    "push {{r4-r9}}",
    "mov r12, #0",
    "lsrs r1, r1, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "ldmia r0!, {{r4-r7}}",
    "txl_larger_doubled r4",
    "txl_larger_doubled r5",
    "txl_larger_doubled r6",
    "txl_larger_doubled r7",
    "2:",
    "cmp r1, #0",
    "beq 3f",
    "1:",
    "ldmia r0!, {{r2-r9}}",
    "txl_larger_doubled r2",
    "txl_larger_doubled r3",
    "txl_larger_doubled r4",
    "txl_larger_doubled r5",
    "txl_larger_doubled r6",
    "txl_larger_doubled r7",
    "txl_larger_doubled r8",
    "txl_larger_doubled r9",
    "subs r1, r1, #1",
    "bne 1b",
    "3:",
    "mov r0, r12",
    "pop {{r4-r9}}",
    "bx lr",
    ".size txl_max_doubled_bits, . - txl_max_doubled_bits",
    ".macro txl_rounded_pairs_four",
    "vldmia r0!, {{s0-s3}}",
    "vmul.f32 s0, s0, s8",
    "vmul.f32 s1, s1, s8",
    "vmul.f32 s2, s2, s8",
    "vmul.f32 s3, s3, s8",
    "vcvt.s32.f32 s0, s0, #1",
    "vcvt.s32.f32 s1, s1, #1",
    "vcvt.s32.f32 s2, s2, #1",
    "vcvt.s32.f32 s3, s3, #1",
    "vmov r4, r5, s0, s1",
    "vmov r6, r7, s2, s3",
    "pkhbt r4, r4, r6, lsl #16", // (t2 t0)
    "pkhbt r5, r5, r7, lsl #16", // (t3 t1)
    "bic r6, r8, r4, lsr #15",
    "bic r7, r8, r5, lsr #15",
    "shadd16 r4, r4, r6", // (q2 q0)
    "shadd16 r5, r5, r7", // (q3 q1)
    ".endm",
    ".macro txl_quantize_four",
    "txl_rounded_pairs_four",
    "uxtb16 r4, r4",
    "uxtb16 r5, r5",
    "orr r4, r4, r5, lsl #8",
    "str r4, [r1], #4",
    ".endm",
    ".section .text.txl_quantize4_f32,\"ax\",%progbits",
    ".globl txl_quantize4_f32",
    ".type txl_quantize4_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_quantize4_f32:",
    "push {{r4-r8}}",
    "vmov s8, r3",
    "mov r8, #0x00010001",
    "lsrs r2, r2, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "txl_quantize_four",
    "2:",
    "cmp r2, #0",
    "beq 3f",
    "1:",
    "txl_quantize_four",
    "txl_quantize_four",
    "subs r2, r2, #1",
    "bne 1b",
    "3:",
    "pop {{r4-r8}}",
    "bx lr",
    ".size txl_quantize4_f32, . - txl_quantize4_f32",
    ".macro txl_quantize_widen_four",
    "txl_rounded_pairs_four",
    "strd r4, r5, [r12], #8",
    "uxtb16 r6, r4",
    "uxtb16 r7, r5",
    "orr r6, r6, r7, lsl #8",
    "str r6, [r1], #4",
    ".endm",
    ".section .text.txl_quantize_widen4_f32,\"ax\",%progbits",
    ".globl txl_quantize_widen4_f32",
    ".type txl_quantize_widen4_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_quantize_widen4_f32:",
    "push {{r4-r8, lr}}",
    "ldr r12, [sp, #24]", // pairs: above the 24 bytes pushed
    "vmov s8, r3",
    "mov r8, #0x00010001",
    "lsrs r2, r2, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "txl_quantize_widen_four",
    "2:",
    "cmp r2, #0",
    "beq 3f",
    "1:",
    "txl_quantize_widen_four",
    "txl_quantize_widen_four",
    "subs r2, r2, #1",
    "bne 1b",
    "3:",
    "pop {{r4-r8, pc}}",
    ".size txl_quantize_widen4_f32, . - txl_quantize_widen4_f32",
);

/// The largest magnitude of `x` and `127` over it, where the FPU's quantization takes `x`: not
/// for a NaN (its bits are above infinity's, and then the magnitude is NaN), no range or a
/// subnormal one (whose inverse is infinite).
#[inline]
fn int8_range(x: &[f32]) -> Option<(f32, f32)> {
    int8_range_of(magnitude_bits(x))
}

/// [`int8_range`] given the largest magnitude's bits.
#[inline]
fn int8_range_of(magnitude: u32) -> Option<(f32, f32)> {
    let max_abs = f32::from_bits(magnitude);
    let inverse = 127.0 / max_abs;
    (max_abs > 0.0 && max_abs.is_finite() && inverse.is_finite()).then_some((max_abs, inverse))
}

/// `y` rounded half away from zero (`libm::roundf(y) as i32`) for `|y| < 128`, the integer
/// `txl_quantize4_f32` gives, as `trunc(2y) - trunc(y)`.
#[inline(always)]
fn round_small(y: f32) -> i32 {
    (y * 2.0) as i32 - y as i32
}

/// [`portable::quantize_i8`](crate::kernels::portable::quantize_i8) with the FPU: the largest
/// magnitude from the values' bits (four a pass), then four values a pass scaled, rounded and
/// stored. Inputs with activation scales, a NaN, no range or a subnormal one take the portable
/// code. The same bits.
pub fn quantize_i8(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    let n = x.len();
    let fours = n / 4;
    if act_scales.is_some() || out.len() != n || fours == 0 {
        return crate::kernels::portable::quantize_i8(x, act_scales, out);
    }
    let body = 4 * fours;
    let Some((max_abs, inverse)) = int8_range(x) else {
        return crate::kernels::portable::quantize_i8(x, act_scales, out);
    };
    // SAFETY: `x` and `out` hold `4 * fours` values and bytes, all the kernel reads and writes;
    // it uses s0-s8 (caller-saved) and preserves the callee-saved core registers.
    unsafe { txl_quantize4_f32(x.as_ptr(), out.as_mut_ptr(), fours, inverse.to_bits()) };
    for (o, &v) in out[body..].iter_mut().zip(&x[body..]) {
        *o = round_small(v * inverse) as i8;
    }
    max_abs / 127.0
}

/// [`quantize_i8`] and the DSP kernels' widening of its bytes (`dsp::widen_input_i8`: the
/// whole groups of four into `pairs`) in one pass: the same bytes, words and scale. `None`,
/// with nothing written, where [`quantize_i8`] would not take its kernel (activation scales, a
/// NaN, no range or a subnormal one, fewer than four values) or `pairs` is short. `magnitude`,
/// where given, is [`magnitude_bits`] of `x`, which is then not scanned for it.
pub fn quantize_widen_i8(
    x: &[f32],
    act_scales: Option<&[f32]>,
    magnitude: Option<u32>,
    out: &mut [i8],
    pairs: &mut [u32],
) -> Option<f32> {
    let n = x.len();
    let fours = n / 4;
    if act_scales.is_some() || out.len() != n || fours == 0 || pairs.len() < 2 * fours {
        return None;
    }
    let body = 4 * fours;
    let (max_abs, inverse) = int8_range_of(magnitude.unwrap_or_else(|| magnitude_bits(x)))?;
    // SAFETY: `x` and `out` hold `4 * fours` values and bytes and `pairs` `2 * fours` words,
    // all the kernel reads and writes; it uses s0-s8 (caller-saved) and preserves the
    // callee-saved core registers.
    unsafe {
        txl_quantize_widen4_f32(
            x.as_ptr(),
            out.as_mut_ptr(),
            fours,
            inverse.to_bits(),
            pairs.as_mut_ptr(),
        )
    };
    for (o, &v) in out[body..].iter_mut().zip(&x[body..]) {
        *o = round_small(v * inverse) as i8;
    }
    Some(max_abs / 127.0)
}

/// The largest of the bits of `|v|` (the sign cleared) over `values`, as unsigned integers (a
/// NaN's above infinity's): [`txl_max_doubled_bits`] four values a pass, the rest here. Zero for
/// no values.
pub fn magnitude_bits(values: &[f32]) -> u32 {
    let fours = values.len() / 4;
    let mut doubled = 0;
    if fours > 0 {
        // SAFETY: `values` holds `4 * fours` values, all the kernel reads; it preserves the
        // callee-saved registers.
        doubled = unsafe { txl_max_doubled_bits(values.as_ptr(), fours) };
    }
    for v in &values[4 * fours..] {
        doubled = doubled.max(v.to_bits() << 1);
    }
    doubled >> 1
}

extern "C" {
    /// For each of `groups >= 1` groups of four values `y = query[4g + k] * inverse`:
    /// `words[2g] = h0 | h2 << 16` and `words[2g + 1] = h1 | h3 << 16`, `h_k` the 16 bits of
    /// `y_k + copysign(0.5, y_k)` truncated and clamped to ±32767 (`inverse` as bits).
    fn txl_query_halves_f32(query: *const f32, words: *mut u32, groups: usize, inverse: u32);
    /// For `t < 4 * fours` (`fours >= 1`): `w[t]` (f32 bits) becomes the i32 `|y| + 0.5`
    /// truncated, saturated at 32767 and signed as `y = w[t] * inverse` (`inverse` as bits).
    fn txl_round_halves_f32(w: *mut f32, fours: usize, inverse: u32);
}

// Per four values: one VLDM, four VMUL by the inverse, then each magnitude `|y| + 0.5` (VABS,
// VADD: the same float as `|y + copysign(0.5, y)|`, the rounding being symmetric) converted to
// 16-bit fixed point with no fraction bits (VCVT: toward zero, saturated at 32767, which is
// the clamp), the sign put back in the core registers by `(m ^ s) - s`, `s` the product's sign
// (its bits shifted right by 31), and two PKHBT pack the halves: 33 instructions per four values
// with the loop (eight a pass; an odd number of fours takes four first). Registers: r0 the values, r1 the words, r2 the groups left, s8 the inverse, s9
// 0.5, s0-s3 the products, s4-s7 the magnitudes, r3-r7 and r12 the integers.
//
// `txl_round_halves_f32`: the same rounding, each weight stored as an i32 in its place (31
// instructions per four with the loop, eight a pass). Registers: r0 the weights, r1 the passes
// left, r2/r3 two products' bits, r4-r7 the integers; s0-s9 as above.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    // the magnitudes s4-s7 of the products s0-s3 (the values times s8), rounded as above
    ".macro txl_rounded_magnitudes4",
    "vmul.f32 s0, s0, s8",
    "vmul.f32 s1, s1, s8",
    "vmul.f32 s2, s2, s8",
    "vmul.f32 s3, s3, s8",
    "vabs.f32 s4, s0",
    "vabs.f32 s5, s1",
    "vabs.f32 s6, s2",
    "vabs.f32 s7, s3",
    "vadd.f32 s4, s4, s9",
    "vadd.f32 s5, s5, s9",
    "vadd.f32 s6, s6, s9",
    "vadd.f32 s7, s7, s9",
    "vcvt.s16.f32 s4, s4, #0",
    "vcvt.s16.f32 s5, s5, #0",
    "vcvt.s16.f32 s6, s6, #0",
    "vcvt.s16.f32 s7, s7, #0",
    ".endm",
    ".macro txl_signed value, product",
    "eor \\value, \\value, \\product, asr #31",
    "sub \\value, \\value, \\product, asr #31",
    ".endm",
    ".macro txl_query_halves_four",
    "vldmia r0!, {{s0-s3}}",
    "txl_rounded_magnitudes4",
    "vmov r4, r5, s0, s1",
    "vmov r6, r7, s4, s5",
    "txl_signed r6, r4",
    "txl_signed r7, r5",
    "vmov r4, r5, s2, s3",
    "vmov r12, r3, s6, s7",
    "txl_signed r12, r4",
    "txl_signed r3, r5",
    "pkhbt r6, r6, r12, lsl #16",
    "pkhbt r7, r7, r3, lsl #16",
    "strd r6, r7, [r1], #8",
    ".endm",
    ".section .text.txl_query_halves_f32,\"ax\",%progbits",
    ".globl txl_query_halves_f32",
    ".type txl_query_halves_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_query_halves_f32:",
    "push {{r4-r7}}",
    "vmov s8, r3",
    "vmov.f32 s9, #0.5",
    "lsrs r2, r2, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "txl_query_halves_four",
    "2:",
    "cmp r2, #0",
    "beq 3f",
    "1:",
    "txl_query_halves_four",
    "txl_query_halves_four",
    "subs r2, r2, #1",
    "bne 1b",
    "3:",
    "pop {{r4-r7}}",
    "bx lr",
    ".size txl_query_halves_f32, . - txl_query_halves_f32",
    ".macro txl_round_halves_four",
    "vldmia r0, {{s0-s3}}",
    "txl_rounded_magnitudes4",
    "vmov r2, r3, s0, s1",
    "vmov r4, r5, s4, s5",
    "txl_signed r4, r2",
    "txl_signed r5, r3",
    "vmov r2, r3, s2, s3",
    "vmov r6, r7, s6, s7",
    "txl_signed r6, r2",
    "txl_signed r7, r3",
    "stmia r0!, {{r4-r7}}",
    ".endm",
    ".section .text.txl_round_halves_f32,\"ax\",%progbits",
    ".globl txl_round_halves_f32",
    ".type txl_round_halves_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_round_halves_f32:",
    "push {{r4-r7}}",
    "vmov s8, r2",
    "vmov.f32 s9, #0.5",
    "lsrs r1, r1, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "txl_round_halves_four",
    "2:",
    "cmp r1, #0",
    "beq 3f",
    "1:",
    "txl_round_halves_four",
    "txl_round_halves_four",
    "subs r1, r1, #1",
    "bne 1b",
    "3:",
    "pop {{r4-r7}}",
    "bx lr",
    ".size txl_round_halves_f32, . - txl_round_halves_f32",
);

/// The int8 attention's 16-bit query words (`int8_attention::QueryWords::quantize`'s rounding,
/// clamp and order) with the FPU, four values a pass, for whole groups of four: false, with
/// nothing written, otherwise.
pub fn query_halves(query: &[f32], words: &mut [u32], inverse: f32) -> bool {
    let groups = query.len() / 4;
    if groups == 0 || 4 * groups != query.len() || words.len() < 2 * groups {
        return false;
    }
    // SAFETY: reads `4 * groups` values and writes `2 * groups` words, both in bounds; uses
    // s0-s9 (caller-saved) and preserves the callee-saved core registers.
    unsafe { txl_query_halves_f32(query.as_ptr(), words.as_mut_ptr(), groups, inverse.to_bits()) };
    true
}

/// The arguments of [`txl_int8_scores_f32`] past the first four, read by offset: keep the order.
#[repr(C)]
struct ScoresPass {
    /// The first key's term.
    term: *const f32,
    /// Bytes from one key's term to the next's: 0 (the same term) or -4 (backwards; the kernel
    /// reads only whether it is 0).
    term_step: isize,
    /// The query's step.
    step: f32,
    /// The scores' scale.
    scale: f32,
    /// The largest score so far (in and out).
    max: f32,
}

extern "C" {
    /// For `t < n` (`n >= 1`): `w[t] = e[t] * inverse * scale_t`, `scale_t` at `scales + t *
    /// stride` (bytes); `state` holds the bits of the inverse, of the largest magnitude (raised
    /// to each `|w[t]|` above it, so never to a NaN) and of the magnitudes' sum, to which each
    /// `|w[t]|` is added in order.
    fn txl_value_weights_f32(
        e: *const f32,
        w: *mut f32,
        n: usize,
        scales: *const f32,
        stride: usize,
        state: *mut u32,
    );
    /// For `t < n` (`n >= 1`): `out[t] = ((sum as f32 * step) * key_scale + term) * scale`,
    /// `sum` the i32 bits of `out[t]`, `key_scale` at `key_scales + t * stride` (bytes), `term`
    /// at `pass.term + t * pass.term_step`; `pass.max` raised to each score above it.
    fn txl_int8_scores_f32(
        out: *mut f32,
        n: usize,
        key_scales: *const f32,
        stride: usize,
        pass: *mut ScoresPass,
    );
}

// The int8 attention's driver loops, two keys a pass (an odd count takes one first; the ring's
// values and scales are strided).
//
// `txl_value_weights_f32`: one VLDM of the exponential and one VLDR of its scale (the scale's
// pointer moved by an ADD), two VMUL (the portable order), VABS, the magnitude added to the sum
// (VADD), VCMP, VMRS and a conditional VMOV for the largest, one VSTM: 13 instructions a key
// with the loop. Registers: r0 the exponentials, r1 the weights, r2 the pairs of keys left, r3
// the scales, r4 the stride, r12 the state; s8 the inverse, s9 the sum, s10 the largest.
//
// `txl_int8_scores_f32`: VLDR of the sum and VCVT (round to nearest, as `as f32`), VMUL by the
// step, VLDR of the key's scale (its pointer moved by an ADD) and VLDMDB of the term (none where
// every key takes the same, kept in s11), VMUL, VADD, VMUL by the scale, VSTM, and VCMP, VMRS and
// a conditional VMOV for the largest: 15 instructions a key with the loop (14 with one term).
// Registers: r0 the scores, r1 the pairs of keys left, r2 the scales, r3 the stride, r4 the
// term, r5 its step, r12 the pass; s8 the step, s9 the scale, s10 the largest.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".macro txl_value_weight",
    "vldmia r0!, {{s0}}",
    "vldr s1, [r3]",
    "add r3, r3, r4",
    "vmul.f32 s0, s0, s8",
    "vmul.f32 s0, s0, s1",
    "vabs.f32 s2, s0",
    "vstmia r1!, {{s0}}",
    "vadd.f32 s9, s9, s2",
    "vcmp.f32 s2, s10",
    "vmrs APSR_nzcv, fpscr",
    "it gt",
    "vmovgt.f32 s10, s2",
    ".endm",
    // `term`: `back`, each key's term the one before the last key's (VLDMDB), or `same`, s11
    ".macro txl_int8_score term",
    "vldr s0, [r0]",
    "vcvt.f32.s32 s0, s0",
    "vldr s1, [r2]",
    "add r2, r2, r3",
    "vmul.f32 s0, s0, s8",
    ".ifc \\term, back",
    "vldmdb r4!, {{s2}}",
    "vmul.f32 s0, s0, s1",
    "vadd.f32 s0, s0, s2",
    ".else",
    "vmul.f32 s0, s0, s1",
    "vadd.f32 s0, s0, s11",
    ".endif",
    "vmul.f32 s0, s0, s9",
    "vstmia r0!, {{s0}}",
    "vcmp.f32 s0, s10",
    "vmrs APSR_nzcv, fpscr",
    "it gt",
    "vmovgt.f32 s10, s0",
    ".endm",
    ".section .text.txl_value_weights_f32,\"ax\",%progbits",
    ".globl txl_value_weights_f32",
    ".type txl_value_weights_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_value_weights_f32:",
    "push {{r4, lr}}",
    "ldrd r4, r12, [sp, #8]",
    "vldr s8, [r12]",
    "vldr s10, [r12, #4]",
    "vldr s9, [r12, #8]",
    "lsrs r2, r2, #1", // the pairs of keys; C: an odd count
    "bcc 2f",
    "txl_value_weight",
    "2:",
    "cmp r2, #0",
    "beq 3f",
    "1:",
    "txl_value_weight",
    "txl_value_weight",
    "subs r2, r2, #1",
    "bne 1b",
    "3:",
    "vstr s10, [r12, #4]",
    "vstr s9, [r12, #8]",
    "pop {{r4, pc}}",
    ".size txl_value_weights_f32, . - txl_value_weights_f32",
    ".section .text.txl_int8_scores_f32,\"ax\",%progbits",
    ".globl txl_int8_scores_f32",
    ".type txl_int8_scores_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_int8_scores_f32:",
    "push {{r4, r5, lr}}",
    "ldr r12, [sp, #12]",
    "ldrd r4, r5, [r12]",
    "vldr s8, [r12, #8]",
    "vldr s9, [r12, #12]",
    "vldr s10, [r12, #16]",
    "cmp r5, #0",
    "bne 5f",
    // one term for every key, in s11
    "vldr s11, [r4]",
    "lsrs r1, r1, #1", // the pairs of keys; C: an odd count
    "bcc 2f",
    "txl_int8_score same",
    "2:",
    "cmp r1, #0",
    "beq 3f",
    "1:",
    "txl_int8_score same",
    "txl_int8_score same",
    "subs r1, r1, #1",
    "bne 1b",
    "b 3f",
    // the terms backwards from the first key's, which VLDMDB takes from one past it
    "5:",
    "add r4, r4, #4",
    "lsrs r1, r1, #1",
    "bcc 6f",
    "txl_int8_score back",
    "6:",
    "cmp r1, #0",
    "beq 3f",
    "4:",
    "txl_int8_score back",
    "txl_int8_score back",
    "subs r1, r1, #1",
    "bne 4b",
    "3:",
    "vstr s10, [r12, #16]",
    "pop {{r4, r5, pc}}",
    ".size txl_int8_scores_f32, . - txl_int8_scores_f32",
);

/// [`portable::value_weights`](crate::kernels::portable::value_weights) with the FPU, one key
/// a pass. The same bits.
pub fn value_weights(
    e: &[f32],
    inverse: f32,
    (key_scales, heads): (&[f32], usize),
    w: &mut [f32],
    magnitudes: &mut crate::kernels::Magnitudes,
) {
    let n = e.len().min(w.len());
    if n == 0 {
        return;
    }
    let stride = heads.max(1);
    assert!((n - 1) * stride < key_scales.len(), "key scales out of bounds");
    let mut state = [
        inverse.to_bits(),
        magnitudes.max.to_bits(),
        magnitudes.sum.to_bits(),
    ];
    // SAFETY: reads `n >= 1` values of `e`, writes `n` of `w` (both at least that long), reads
    // the scales at `t * stride` for `t < n` (inside `key_scales`, checked above) and reads and
    // writes the three words of `state`; uses s0-s2 and s8-s10 (caller-saved) and preserves the
    // callee-saved core registers.
    unsafe {
        txl_value_weights_f32(
            e.as_ptr(),
            w.as_mut_ptr(),
            n,
            key_scales.as_ptr(),
            4 * stride,
            state.as_mut_ptr(),
        )
    };
    magnitudes.max = f32::from_bits(state[1]);
    magnitudes.sum = f32::from_bits(state[2]);
}

extern "C" {
    /// `out[c] = sums[c] as f32 * step` for `c < 8 * octets` (`octets >= 1`, `step` as bits).
    fn txl_scaled_sums8_f32(sums: *const i32, out: *mut f32, octets: usize, step: u32);
}

// Per eight sums: one VLDM, eight VCVT (round to nearest, as `as f32`), eight VMUL by the step,
// one VSTM: 20 instructions with the loop. Registers: r0 the sums, r1 the outputs, r2 the
// passes left, s8 the step, s0-s7 the values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".macro txl_scaled_sum value",
    "vcvt.f32.s32 \\value, \\value",
    "vmul.f32 \\value, \\value, s8",
    ".endm",
    ".section .text.txl_scaled_sums8_f32,\"ax\",%progbits",
    ".globl txl_scaled_sums8_f32",
    ".type txl_scaled_sums8_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scaled_sums8_f32:",
    "vmov s8, r3",
    "1:",
    "vldmia r0!, {{s0-s7}}",
    "txl_scaled_sum s0",
    "txl_scaled_sum s1",
    "txl_scaled_sum s2",
    "txl_scaled_sum s3",
    "txl_scaled_sum s4",
    "txl_scaled_sum s5",
    "txl_scaled_sum s6",
    "txl_scaled_sum s7",
    "vstmia r1!, {{s0-s7}}",
    "subs r2, r2, #1",
    "bne 1b",
    "bx lr",
    ".size txl_scaled_sums8_f32, . - txl_scaled_sums8_f32",
);

/// [`portable::scaled_sums_i32`](crate::kernels::portable::scaled_sums_i32) eight sums a pass
/// for a positive step: then no product is `-0` (a zero sum gives `+0`, any other at least the
/// step in magnitude), so adding it to `+0.0` changes nothing and the kernel leaves the
/// addition out. Other steps, and the sums after the last eight, take the portable code. The
/// same bits.
pub fn scaled_sums_i32(sums: &[i32], step: f32, out: &mut [f32]) {
    let n = sums.len().min(out.len());
    let octets = if step > 0.0 { n / 8 } else { 0 };
    if octets > 0 {
        // SAFETY: `sums` and `out` hold the `8 * octets` values the kernel reads and writes; it
        // uses s0-s8 (caller-saved) only.
        unsafe { txl_scaled_sums8_f32(sums.as_ptr(), out.as_mut_ptr(), octets, step.to_bits()) };
    }
    crate::kernels::portable::scaled_sums_i32(&sums[8 * octets..n], step, &mut out[8 * octets..n]);
}

/// The 16-bit probability weights in place (`int8_attention::ProbabilityWords`'s rounding) with
/// the FPU, four a pass: returns how many of the first weights it rounded, the rest the
/// caller's.
pub fn round_weights(w: &mut [i32], inverse: f32) -> usize {
    let fours = w.len() / 4;
    if fours > 0 {
        // SAFETY: reads and writes the `4 * fours` words of `w`; uses s0-s9 (caller-saved) and
        // preserves the callee-saved core registers.
        unsafe { txl_round_halves_f32(w.as_mut_ptr().cast(), fours, inverse.to_bits()) };
    }
    4 * fours
}

/// [`portable::key_scores_i8`](crate::kernels::portable::key_scores_i8) with the FPU, one key a
/// pass. The same bits.
pub fn key_scores_i8(
    out: &mut [f32],
    key_scales: &[f32],
    heads: usize,
    terms: &[f32],
    (step, scale): (f32, f32),
    max: f32,
) -> f32 {
    let n = out.len();
    if n == 0 {
        return max;
    }
    let stride = heads.max(1);
    assert!((n - 1) * stride < key_scales.len(), "key scales out of bounds");
    // one term for every key, or key `t` taking `terms[n - 1 - t]`
    let (term, term_step) = match terms {
        [term] => (term as *const f32, 0),
        _ => (&terms[n - 1] as *const f32, -4),
    };
    let mut pass = ScoresPass {
        term,
        term_step,
        step,
        scale,
        max,
    };
    // SAFETY: reads and writes the `n >= 1` scores of `out`; reads the key scales at `t * stride`
    // for `t < n` (inside `key_scales`, checked above) and the terms: the one, or the `n` from
    // `terms[n - 1]` backwards (indexing checked it is there); reads and writes `pass`; uses
    // s0-s2 and s8-s10 (caller-saved) and preserves the callee-saved core registers.
    unsafe { txl_int8_scores_f32(out.as_mut_ptr(), n, key_scales.as_ptr(), 4 * stride, &mut pass) };
    pass.max
}

extern "C" {
    /// The bits of `Σ x` over the `8 * octets` values at `x` (`octets >= 1`), added in order
    /// from `-0.0`.
    fn txl_sum_f32(x: *const f32, octets: usize) -> u32;
    /// The bits of `Σ (x - mean)²` over the `8 * octets` values at `x` (`octets >= 1`), added
    /// in order from `-0.0` (`mean` as bits).
    fn txl_squared_deviations_f32(x: *const f32, octets: usize, mean: u32) -> u32;
    /// `x = (x - moments[0]) * moments[1] * gain + bias` for the `8 * octets` values at `x`
    /// (`octets >= 1`).
    fn txl_normalize_f32(x: *mut f32, octets: usize, gain: *const f32, bias: *const f32, moments: *const f32);
}

// LayerNorm, eight values a pass: `txl_sum_f32` one VLDM and eight VADD in order (11
// instructions per eight with the loop), `txl_squared_deviations_f32` one VLDM, eight VSUB and
// eight VMLA (which rounds the square before it adds, as the portable code), and
// `txl_normalize_f32` three VLDM (values, gains, biases), eight VSUB, eight VMUL by `1 / std`,
// eight VMLA (`bias + t * gain`: the portable `t * gain + bias`, addition being commutative)
// and one VSTM. Registers: s0 the sum, s1 the mean, s8-s15 the values; for the last,
// s16-s23 the values, s24-s31 the gains, s0-s7 the biases, s8/s9 the mean and `1 / std`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".section .text.txl_sum_f32,\"ax\",%progbits",
    ".globl txl_sum_f32",
    ".type txl_sum_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_sum_f32:",
    "mov r2, #0x80000000",
    "vmov s0, r2",
    "1:",
    "vldmia r0!, {{s8-s15}}",
    "vadd.f32 s0, s0, s8",
    "vadd.f32 s0, s0, s9",
    "vadd.f32 s0, s0, s10",
    "vadd.f32 s0, s0, s11",
    "vadd.f32 s0, s0, s12",
    "vadd.f32 s0, s0, s13",
    "vadd.f32 s0, s0, s14",
    "vadd.f32 s0, s0, s15",
    "subs r1, r1, #1",
    "bne 1b",
    "vmov r0, s0",
    "bx lr",
    ".size txl_sum_f32, . - txl_sum_f32",
    ".macro txl_square_dev value",
    "vsub.f32 \\value, \\value, s1",
    "vmla.f32 s0, \\value, \\value",
    ".endm",
    ".section .text.txl_squared_deviations_f32,\"ax\",%progbits",
    ".globl txl_squared_deviations_f32",
    ".type txl_squared_deviations_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_squared_deviations_f32:",
    "mov r3, #0x80000000",
    "vmov s0, r3",
    "vmov s1, r2",
    "1:",
    "vldmia r0!, {{s8-s15}}",
    "txl_square_dev s8",
    "txl_square_dev s9",
    "txl_square_dev s10",
    "txl_square_dev s11",
    "txl_square_dev s12",
    "txl_square_dev s13",
    "txl_square_dev s14",
    "txl_square_dev s15",
    "subs r1, r1, #1",
    "bne 1b",
    "vmov r0, s0",
    "bx lr",
    ".size txl_squared_deviations_f32, . - txl_squared_deviations_f32",
    ".macro txl_normalize_one value, gain, bias",
    "vsub.f32 \\value, \\value, s8",
    "vmul.f32 \\value, \\value, s9",
    "vmla.f32 \\bias, \\value, \\gain",
    ".endm",
    ".section .text.txl_normalize_f32,\"ax\",%progbits",
    ".globl txl_normalize_f32",
    ".type txl_normalize_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_normalize_f32:",
    "ldr r12, [sp]", // moments
    "vpush {{s16-s31}}",
    "vldmia r12, {{s8-s9}}",
    "1:",
    "vldmia r0, {{s16-s23}}",
    "vldmia r2!, {{s24-s31}}",
    "vldmia r3!, {{s0-s7}}",
    "txl_normalize_one s16, s24, s0",
    "txl_normalize_one s17, s25, s1",
    "txl_normalize_one s18, s26, s2",
    "txl_normalize_one s19, s27, s3",
    "txl_normalize_one s20, s28, s4",
    "txl_normalize_one s21, s29, s5",
    "txl_normalize_one s22, s30, s6",
    "txl_normalize_one s23, s31, s7",
    "vstmia r0!, {{s0-s7}}",
    "subs r1, r1, #1",
    "bne 1b",
    "vpop {{s16-s31}}",
    "bx lr",
    ".size txl_normalize_f32, . - txl_normalize_f32",
);

/// [`portable::sum_f32`](crate::kernels::portable::sum_f32), eight values a pass: the same
/// additions in the same order.
pub fn sum_f32(x: &[f32]) -> f32 {
    let octets = x.len() / 8;
    if octets == 0 {
        return crate::kernels::portable::sum_f32(x);
    }
    // SAFETY: `x` holds the `8 * octets` values the kernel reads; it uses s0 and s8-s15
    // (caller-saved) only.
    let sum = f32::from_bits(unsafe { txl_sum_f32(x.as_ptr(), octets) });
    x[8 * octets..].iter().fold(sum, |sum, v| sum + v)
}

/// [`portable::squared_deviations_f32`](crate::kernels::portable::squared_deviations_f32),
/// eight values a pass: the same operations in the same order.
pub fn squared_deviations_f32(x: &[f32], mean: f32) -> f32 {
    let octets = x.len() / 8;
    if octets == 0 {
        return crate::kernels::portable::squared_deviations_f32(x, mean);
    }
    // SAFETY: `x` holds the `8 * octets` values the kernel reads; it uses s0, s1 and s8-s15
    // (caller-saved) only.
    let sum = f32::from_bits(unsafe { txl_squared_deviations_f32(x.as_ptr(), octets, mean.to_bits()) });
    x[8 * octets..]
        .iter()
        .fold(sum, |sum, v| sum + (v - mean) * (v - mean))
}

/// [`portable::normalize_f32`](crate::kernels::portable::normalize_f32), eight values a pass.
/// The same bits.
pub fn normalize_f32(x: &mut [f32], moments: (f32, f32), gain: &[f32], bias: &[f32]) {
    let n = x.len().min(gain.len()).min(bias.len());
    let octets = n / 8;
    if octets > 0 {
        let moments = [moments.0, moments.1];
        // SAFETY: `x`, `gain` and `bias` hold the `8 * octets` values the kernel reads (and,
        // for `x`, writes), `moments` two floats; it preserves s16-s31 and the core registers
        // the AAPCS saves.
        unsafe {
            txl_normalize_f32(
                x.as_mut_ptr(),
                octets,
                gain.as_ptr(),
                bias.as_ptr(),
                moments.as_ptr(),
            )
        };
    }
    let body = 8 * octets;
    crate::kernels::portable::normalize_f32(&mut x[body..n], moments, &gain[body..n], &bias[body..n]);
}

/// Where [`txl_softmax_exps_f32`] is in its values, read and written by offset in the
/// assembly: keep the order.
#[repr(C)]
struct Exps {
    /// The next value.
    at: *mut f32,
    /// The end of the values.
    end: *mut f32,
    /// The softmax's largest value, taken from each.
    max: f32,
    /// The sum so far.
    sum: f32,
}

/// `libm::expf`'s constants for [`txl_softmax_exps_f32`], in the order it loads them: `1 /
/// ln 2`, `-1/2`, `ln 2`'s high and low parts, the polynomial's two coefficients, 2 and 1; then
/// 127, the exponent's bias.
static EXP_CONSTANTS: [f32; 9] = {
    use crate::kernels::fast_math::expf::{INV_LN2, LN2_HI, LN2_LO, P1, P2};
    [INV_LN2, -0.5, LN2_HI, LN2_LO, P1, P2, 2.0, 1.0, 127.0]
};

extern "C" {
    /// From `state.at` towards `state.end`: `v = expf(v - max)` in place, each added to
    /// `state.sum` in order, while `x = v - max` is negative with `1.5 ln 2 < |x| < 87.3365`
    /// (`libm::expf`'s path that rounds `x / ln 2` and scales by a normal power of two) or zero
    /// (`expf` 1); stops at the end or at the first other value, leaving `state.at` there.
    fn txl_softmax_exps_f32(state: *mut Exps, constants: *const f32);
}

// `libm::expf` on that path, step for step (each product rounded before it is added, as VMLA
// and VMLS do): `k = trunc(x / ln 2 - 1/2)`, `hi = x - k ln2_hi`, `lo = k ln2_lo`, `r = hi -
// lo`, `c = r - r² (P1 + r² P2)`, `y = 1 + ((r c / (2 - c) - lo) + hi)`, times `2^k` (`k` is
// at least -126 there, so one VMUL by a normal power of two, as `scalbnf` then does). `hi`
// takes the place of `x` (VMLS into it), and `2^k` comes from `k` in the FPU: `k + 127` (exact)
// converted to fixed point with 23 fraction bits is `(k + 127) << 23`, the bits of `2^k`. 31
// instructions a value with the loop, the range check and the sum, against about 44 compiled.
// Registers: r0 the state, r1 the value, r2 the end, r3 the lowest bits taken and r12 the span
// of them, r4/r5 the bits of `x`; s16-s24 the constants, s25 the largest value, s26 the sum,
// s0-s10 the steps.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".section .text.txl_softmax_exps_f32,\"ax\",%progbits",
    ".globl txl_softmax_exps_f32",
    ".type txl_softmax_exps_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_softmax_exps_f32:",
    "push {{r4, r5}}",
    "vpush {{s16-s26}}",
    "vldmia r1, {{s16-s24}}",
    "ldrd r1, r2, [r0]",
    "vldr s25, [r0, #8]",
    "vldr s26, [r0, #12]",
    "movw r3, #0x1593", // 0xbf851593: just below -1.5 ln 2
    "movt r3, #0xbf85",
    "movw r12, #0x96bd", // 0xc2aeac50 - 0xbf851593: up to -87.3365 (not included)
    "movt r12, #0x0329",
    "cmp r1, r2",
    "beq 2f",
    "1:",
    "vldr s0, [r1]",
    "vsub.f32 s0, s0, s25",
    "vmov r4, s0",
    "sub r5, r4, r3",
    "cmp r5, r12",
    "bhs 3f",
    "vmov.f32 s1, s17",
    "vmla.f32 s1, s0, s16", // x / ln 2 - 1/2
    "vcvt.s32.f32 s1, s1",  // k, toward zero
    "vcvt.f32.s32 s1, s1",
    "vmls.f32 s0, s1, s18", // hi
    "vmul.f32 s3, s1, s19", // lo
    "vadd.f32 s10, s1, s24",
    "vcvt.u32.f32 s10, s10, #23", // 2^k
    "vsub.f32 s4, s0, s3",        // r
    "vmul.f32 s5, s4, s4",
    "vmov.f32 s6, s20",
    "vmla.f32 s6, s5, s21", // P1 + r² P2
    "vmov.f32 s7, s4",
    "vmls.f32 s7, s5, s6", // c
    "vsub.f32 s8, s22, s7",
    "vmul.f32 s9, s4, s7",
    "vdiv.f32 s9, s9, s8",
    "vsub.f32 s9, s9, s3",
    "vadd.f32 s9, s9, s0",
    "vadd.f32 s9, s9, s23", // y
    "vmul.f32 s9, s9, s10",
    "4:",
    "vstmia r1!, {{s9}}",
    "vadd.f32 s26, s26, s9",
    "cmp r1, r2",
    "bne 1b",
    "2:",
    "str r1, [r0]",
    "vstr s26, [r0, #12]",
    "vpop {{s16-s26}}",
    "pop {{r4, r5}}",
    "bx lr",
    // `x` zero (the largest value itself): `expf` is `1 + x`, 1
    "3:",
    "lsls r5, r4, #1",
    "bne 2b",
    "vmov.f32 s9, #1.0",
    "b 4b",
    ".size txl_softmax_exps_f32, . - txl_softmax_exps_f32",
);

/// [`portable::softmax_exps_sum_f32`](crate::kernels::portable::softmax_exps_sum_f32) with the
/// FPU: the values on `libm::expf`'s main path and the zeros (the maximum itself) in the kernel
/// above, the others (the values within `1.5 ln 2` of the maximum, and those near underflow) by
/// `libm::expf`. The same bits.
pub fn softmax_exps_sum_f32(values: &mut [f32], max: f32, sum: f32) -> f32 {
    let mut state = Exps {
        at: values.as_mut_ptr(),
        end: values.as_mut_ptr_range().end,
        max,
        sum,
    };
    loop {
        // SAFETY: `state.at..state.end` lies in `values` (the kernel moves `at` towards `end`
        // and no further); the kernel reads and writes only those values, reads the nine
        // constants, and preserves s16-s31 and the callee-saved core registers.
        unsafe { txl_softmax_exps_f32(&mut state, EXP_CONSTANTS.as_ptr()) };
        if state.at == state.end {
            return state.sum;
        }
        // SAFETY: `state.at` is before `state.end`, so it points at one of `values`.
        let value = unsafe { &mut *state.at };
        *value = libm::expf(*value - max);
        state.sum += *value;
        // SAFETY: one past a value of `values` is at most its end.
        state.at = unsafe { state.at.add(1) };
    }
}

extern "C" {
    /// `y[r] = (y[r]'s bits as an i32) as f32 * (scales[r] * x_scale)` for `r < 4 * fours`
    /// (`fours >= 1`, `x_scale` as bits).
    fn txl_scale_sums4_f32(y: *mut f32, scales: *const f32, fours: usize, x_scale: u32);
    /// [`txl_scale_sums4_f32`], then `y[r] += bias[r]` in the same pass.
    fn txl_scale_sums_bias4_f32(
        y: *mut f32,
        scales: *const f32,
        fours: usize,
        x_scale: u32,
        bias: *const f32,
    );
    /// `h[r] += sums[r]` scaled as [`txl_scale_sums4_f32`] scales them (`sums` only read;
    /// `bias` not read).
    fn txl_scale_sums_add4_f32(
        sums: *const f32,
        scales: *const f32,
        fours: usize,
        x_scale: u32,
        bias: *const f32,
        h: *mut f32,
    );
    /// [`txl_scale_sums_add4_f32`] with `bias[r]` added to each scaled sum before it is added
    /// to `h[r]`.
    fn txl_scale_sums_bias_add4_f32(
        sums: *const f32,
        scales: *const f32,
        fours: usize,
        x_scale: u32,
        bias: *const f32,
        h: *mut f32,
    );
}

// Eight sums a pass: one VLDM of the sums (i32 bits), one of the row scales, eight VMUL (the
// row's scale times the input's, as the portable code), eight VCVT and eight VMUL, one VSTM: 29
// instructions per eight rows with the loop; an odd number of fours takes four first.
// Registers: r0 the sums, r1 the scales, r2 the passes left, s16 the input's scale, s0-s7 the
// sums, s8-s15 the scales.
//
// `txl_scale_sums_bias4_f32` adds the biases to the scaled sums before the VSTM: one VLDM of
// eight biases (into s8-s15, the products with the scales spent) and eight VADD (`y + bias`, in
// that order, as `add_assign` after the scaling): 38 instructions per eight rows, against 29
// and the 13 of `txl_add_f32`'s pass. r12 the biases.
//
// `txl_scale_sums_add4_f32` and `txl_scale_sums_bias_add4_f32` add the scaled sums (and biases)
// to a residual instead of storing them: one VLDM of eight of it into s8-s15, eight VADD (`h +
// y`, as `add_assign(h, y)`) and its VSTM (38 and 47 instructions per eight rows, against 29, 38
// and the residual's pass). r3 the residual. The four are one macro's,
// `txl_scale_sums_fn name, bias, residual`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".macro txl_scale_sum sum, scale",
    "vmul.f32 \\scale, \\scale, s16",
    "vcvt.f32.s32 \\sum, \\sum",
    "vmul.f32 \\sum, \\sum, \\scale",
    ".endm",
    // four or eight scaled sums in s0..: their rows' biases added where `bias` (through s8..),
    // then added to the residual at r3 (through s8..) where `residual`, else stored over the
    // sums
    ".macro txl_scale_sums_finish bias, residual, last",
    ".if \\bias",
    "vldmia r12!, {{s8-\\last}}",
    "vadd.f32 s0, s0, s8",
    "vadd.f32 s1, s1, s9",
    "vadd.f32 s2, s2, s10",
    "vadd.f32 s3, s3, s11",
    ".ifc \\last, s15",
    "vadd.f32 s4, s4, s12",
    "vadd.f32 s5, s5, s13",
    "vadd.f32 s6, s6, s14",
    "vadd.f32 s7, s7, s15",
    ".endif",
    ".endif",
    ".if \\residual",
    "vldmia r3, {{s8-\\last}}",
    "vadd.f32 s8, s8, s0",
    "vadd.f32 s9, s9, s1",
    "vadd.f32 s10, s10, s2",
    "vadd.f32 s11, s11, s3",
    ".ifc \\last, s15",
    "vadd.f32 s12, s12, s4",
    "vadd.f32 s13, s13, s5",
    "vadd.f32 s14, s14, s6",
    "vadd.f32 s15, s15, s7",
    "vstmia r3!, {{s8-s15}}",
    ".else",
    "vstmia r3!, {{s8-s11}}",
    ".endif",
    ".else",
    ".ifc \\last, s15",
    "vstmia r0!, {{s0-s7}}",
    ".else",
    "vstmia r0!, {{s0-s3}}",
    ".endif",
    ".endif",
    ".endm",
    // the sums read (and passed) at r0: kept where the scaled ones are stored over them
    ".macro txl_scale_sums_load residual, last",
    ".if \\residual",
    "vldmia r0!, {{s0-\\last}}",
    ".else",
    "vldmia r0, {{s0-\\last}}",
    ".endif",
    ".endm",
    ".macro txl_scale_sums_fn name, bias, residual",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "vpush {{s16}}",
    "vmov s16, r3",
    ".if \\bias || \\residual",
    "ldr r12, [sp, #4]", // the biases: the fifth argument, above the 4 bytes pushed
    ".endif",
    ".if \\residual",
    "ldr r3, [sp, #8]", // the residual: the sixth
    ".endif",
    "lsrs r2, r2, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "txl_scale_sums_load \\residual, s3",
    "vldmia r1!, {{s4-s7}}",
    "txl_scale_sum s0, s4",
    "txl_scale_sum s1, s5",
    "txl_scale_sum s2, s6",
    "txl_scale_sum s3, s7",
    "txl_scale_sums_finish \\bias, \\residual, s11",
    "2:",
    "cmp r2, #0",
    "beq 3f",
    "1:",
    "txl_scale_sums_load \\residual, s7",
    "vldmia r1!, {{s8-s15}}",
    "txl_scale_sum s0, s8",
    "txl_scale_sum s1, s9",
    "txl_scale_sum s2, s10",
    "txl_scale_sum s3, s11",
    "txl_scale_sum s4, s12",
    "txl_scale_sum s5, s13",
    "txl_scale_sum s6, s14",
    "txl_scale_sum s7, s15",
    "txl_scale_sums_finish \\bias, \\residual, s15",
    "subs r2, r2, #1",
    "bne 1b",
    "3:",
    "vpop {{s16}}",
    "bx lr",
    ".size \\name, . - \\name",
    ".endm",
    "txl_scale_sums_fn txl_scale_sums4_f32, 0, 0",
    "txl_scale_sums_fn txl_scale_sums_bias4_f32, 1, 0",
    "txl_scale_sums_fn txl_scale_sums_add4_f32, 0, 1",
    "txl_scale_sums_fn txl_scale_sums_bias_add4_f32, 1, 1",
);

/// [`portable::scale_sums_i8`](crate::kernels::portable::scale_sums_i8) four rows a pass: the
/// same operations, the same bits.
pub fn scale_sums_i8(y: &mut [f32], row_scales: &[f32], x_scale: f32) {
    let n = y.len().min(row_scales.len());
    let fours = n / 4;
    if fours > 0 {
        // SAFETY: `y` and `row_scales` hold the `4 * fours` values the kernel reads (and, for
        // `y`, writes); it uses s0-s15 (caller-saved) and preserves s16.
        unsafe { txl_scale_sums4_f32(y.as_mut_ptr(), row_scales.as_ptr(), fours, x_scale.to_bits()) };
    }
    crate::kernels::portable::scale_sums_i8(&mut y[4 * fours..n], &row_scales[4 * fours..n], x_scale);
}

/// `h += y` ([`add_assign`]) for `y` = `sums` scaled by [`scale_sums_i8`] (and `bias` then
/// added to it, where given), four rows a pass in one, `sums` only read: the same operations,
/// the same bits.
pub fn scale_sums_add_i8(
    sums: &[f32],
    row_scales: &[f32],
    x_scale: f32,
    bias: Option<&[f32]>,
    h: &mut [f32],
) {
    let n = h
        .len()
        .min(sums.len())
        .min(row_scales.len())
        .min(bias.map_or(usize::MAX, <[f32]>::len));
    let fours = n / 4;
    if fours > 0 {
        type Kernel = unsafe extern "C" fn(*const f32, *const f32, usize, u32, *const f32, *mut f32);
        let (kernel, bias_at): (Kernel, *const f32) = match bias {
            Some(bias) => (txl_scale_sums_bias_add4_f32, bias.as_ptr()),
            None => (txl_scale_sums_add4_f32, core::ptr::null()),
        };
        // SAFETY: `sums`, `row_scales`, `h` and `bias` (where given; the other kernel reads
        // none) hold the `4 * fours` values the kernel reads (and, for `h`, writes); it uses
        // s0-s15 (caller-saved) and preserves s16.
        unsafe {
            kernel(
                sums.as_ptr(),
                row_scales.as_ptr(),
                fours,
                x_scale.to_bits(),
                bias_at,
                h.as_mut_ptr(),
            )
        };
    }
    for r in 4 * fours..n {
        let mut y = [sums[r]];
        crate::kernels::portable::scale_sums_i8(&mut y, &row_scales[r..r + 1], x_scale);
        if let Some(bias) = bias {
            y[0] += bias[r];
        }
        h[r] += y[0];
    }
}

/// [`scale_sums_i8`], then `y += bias` ([`add_assign`]), four rows a pass in one: the same
/// operations, the same bits.
pub fn scale_sums_bias_i8(y: &mut [f32], row_scales: &[f32], x_scale: f32, bias: &[f32]) {
    let n = y.len().min(row_scales.len()).min(bias.len());
    let fours = n / 4;
    if fours > 0 {
        // SAFETY: `y`, `row_scales` and `bias` hold the `4 * fours` values the kernel reads
        // (and, for `y`, writes); it uses s0-s15 (caller-saved) and preserves s16.
        unsafe {
            txl_scale_sums_bias4_f32(
                y.as_mut_ptr(),
                row_scales.as_ptr(),
                fours,
                x_scale.to_bits(),
                bias.as_ptr(),
            )
        };
    }
    let (y, bias) = (&mut y[4 * fours..n], &bias[4 * fours..n]);
    crate::kernels::portable::scale_sums_i8(y, &row_scales[4 * fours..n], x_scale);
    crate::kernels::portable::add_assign(y, bias);
}

extern "C" {
    /// `out[i] = a[i] + b[i]` for `i < 8 * octets` (`octets >= 1`; `out` may be `a`).
    fn txl_add_f32(out: *mut f32, a: *const f32, b: *const f32, octets: usize);
    /// `x[i] = max(x[i], 0)` for `i < 4 * fours` (`fours >= 1`), on the bits: a value stays if
    /// its bits are in `1..=0x7f80_0000` (positive, up to infinity), else it becomes `+0.0`.
    fn txl_relu_f32(x: *mut f32, fours: usize);
    /// `x[i] = max(x[i], 0)` for `i < 4 * fours` (`fours >= 1`) on the bits as a signed
    /// integer (USAT: a negative one becomes `+0.0`, the others stay, a NaN with its sign
    /// cleared too), and the largest of the bits it leaves.
    fn txl_relu_largest_f32(x: *mut f32, fours: usize) -> u32;
}

// `txl_add_f32`: two VLDM, eight VADD (`a + b`, in that order) and one VSTM per eight values
// (`add_assign` its `y = y + x`). `txl_relu_f32`: one LDM, per value `SUB #1`, an unsigned compare with `0x7f80_0000`
// and a conditional move of zero (zeros, negative values and NaNs fail it), one STM; eight
// values a pass (an odd number of fours takes four first). `txl_relu_largest_f32`: one LDM, per
// value a USAT to 31 bits (the sign: negative bits become zero), a compare with the largest and
// a conditional move into it, one STM: 4.5 instructions a value with the loop, against 4.5 for
// `txl_relu_f32` and 3.375 for the scan of `txl_max_doubled_bits` the quantization would take
// after it. Registers: r0 the values, r1 the passes left, r2 the largest, r4-r7 four values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".fpu fpv4-sp-d16",
    ".section .text.txl_add_f32,\"ax\",%progbits",
    ".globl txl_add_f32",
    ".type txl_add_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_add_f32:",
    "1:",
    "vldmia r1!, {{s0-s7}}",
    "vldmia r2!, {{s8-s15}}",
    "vadd.f32 s0, s0, s8",
    "vadd.f32 s1, s1, s9",
    "vadd.f32 s2, s2, s10",
    "vadd.f32 s3, s3, s11",
    "vadd.f32 s4, s4, s12",
    "vadd.f32 s5, s5, s13",
    "vadd.f32 s6, s6, s14",
    "vadd.f32 s7, s7, s15",
    "vstmia r0!, {{s0-s7}}",
    "subs r3, r3, #1",
    "bne 1b",
    "bx lr",
    ".size txl_add_f32, . - txl_add_f32",
    ".macro txl_relu_one value",
    "sub r12, \\value, #1",
    "cmp r12, #0x7f800000",
    "it hs",
    "movhs \\value, #0",
    ".endm",
    ".macro txl_relu_four",
    "ldm r0, {{r4-r7}}",
    "txl_relu_one r4",
    "txl_relu_one r5",
    "txl_relu_one r6",
    "txl_relu_one r7",
    "stmia r0!, {{r4-r7}}",
    ".endm",
    ".section .text.txl_relu_f32,\"ax\",%progbits",
    ".globl txl_relu_f32",
    ".type txl_relu_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_relu_f32:",
    "push {{r4-r7}}",
    "lsrs r1, r1, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "txl_relu_four",
    "2:",
    "cmp r1, #0",
    "beq 3f",
    "1:",
    "txl_relu_four",
    "txl_relu_four",
    "subs r1, r1, #1",
    "bne 1b",
    "3:",
    "pop {{r4-r7}}",
    "bx lr",
    ".size txl_relu_f32, . - txl_relu_f32",
    ".macro txl_relu_larger value",
    "usat \\value, #31, \\value",
    "cmp r2, \\value",
    "it lo",
    "movlo r2, \\value",
    ".endm",
    ".macro txl_relu_larger_four",
    "ldm r0, {{r4-r7}}",
    "txl_relu_larger r4",
    "txl_relu_larger r5",
    "txl_relu_larger r6",
    "txl_relu_larger r7",
    "stmia r0!, {{r4-r7}}",
    ".endm",
    ".section .text.txl_relu_largest_f32,\"ax\",%progbits",
    ".globl txl_relu_largest_f32",
    ".type txl_relu_largest_f32,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_relu_largest_f32:",
    "push {{r4-r7}}",
    "mov r2, #0",
    "lsrs r1, r1, #1", // the eights; C: an odd number of fours
    "bcc 2f",
    "txl_relu_larger_four",
    "2:",
    "cmp r1, #0",
    "beq 3f",
    "1:",
    "txl_relu_larger_four",
    "txl_relu_larger_four",
    "subs r1, r1, #1",
    "bne 1b",
    "3:",
    "mov r0, r2",
    "pop {{r4-r7}}",
    "bx lr",
    ".size txl_relu_largest_f32, . - txl_relu_largest_f32",
);

/// [`portable::add_assign`](crate::kernels::portable::add_assign), eight values a pass.
pub fn add_assign(y: &mut [f32], x: &[f32]) {
    let n = y.len().min(x.len());
    let octets = n / 8;
    if octets > 0 {
        let y = y.as_mut_ptr();
        // SAFETY: `y` and `x` hold the `8 * octets` values the kernel reads (and, for `y`,
        // writes: each eight after it has read them); it uses s0-s15 (caller-saved) only.
        unsafe { txl_add_f32(y, y, x.as_ptr(), octets) };
    }
    crate::kernels::portable::add_assign(&mut y[8 * octets..n], &x[8 * octets..n]);
}

/// [`portable::add_f32`](crate::kernels::portable::add_f32), eight values a pass.
pub fn add_f32(out: &mut [f32], a: &[f32], b: &[f32]) {
    let n = out.len().min(a.len()).min(b.len());
    let octets = n / 8;
    if octets > 0 {
        // SAFETY: `a` and `b` hold the `8 * octets` values the kernel reads and `out` those it
        // writes; it uses s0-s15 (caller-saved) only.
        unsafe { txl_add_f32(out.as_mut_ptr(), a.as_ptr(), b.as_ptr(), octets) };
    }
    let rest = 8 * octets..n;
    crate::kernels::portable::add_f32(&mut out[rest.clone()], &a[rest.clone()], &b[rest]);
}

/// [`portable::relu`](crate::kernels::portable::relu) on the bits, four values a pass.
pub fn relu(x: &mut [f32]) {
    let fours = x.len() / 4;
    if fours > 0 {
        // SAFETY: `x` holds the `4 * fours` values the kernel reads and writes; it preserves
        // the callee-saved registers.
        unsafe { txl_relu_f32(x.as_mut_ptr(), fours) };
    }
    crate::kernels::portable::relu(&mut x[4 * fours..]);
}

/// [`relu`] and the largest bits it leaves, [`magnitude_bits`] of its outputs, in one pass:
/// `None` where a value was a NaN (the kernel's USAT keeps one whose sign is clear; [`relu`]
/// then makes it zero, as the portable code does, and the quantization finds the largest
/// itself). The same bits as [`relu`].
pub fn relu_magnitude_bits(x: &mut [f32]) -> Option<u32> {
    let fours = x.len() / 4;
    let mut largest = 0;
    if fours > 0 {
        // SAFETY: `x` holds the `4 * fours` values the kernel reads and writes; it preserves
        // the callee-saved registers.
        largest = unsafe { txl_relu_largest_f32(x.as_mut_ptr(), fours) };
    }
    let rest = &mut x[4 * fours..];
    crate::kernels::portable::relu(rest);
    for v in rest.iter() {
        largest = largest.max(v.to_bits());
    }
    if largest > f32::INFINITY.to_bits() {
        relu(x);
        return None;
    }
    Some(largest)
}
