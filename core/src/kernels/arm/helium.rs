//! Cortex-M kernels for Helium (the M-profile Vector Extension: Cortex-M55, M85; feature
//! `cortex-m-mve`): int8 and int4 rows sixteen columns an instruction, the int8 quantization of
//! an input and the scaling of the sums four values an instruction, and the attention's sums
//! over int8 memory.

use core::arch::global_asm;

use crate::kernels::Magnitudes;
extern "C" {
    /// Helium: for each of `blocks` blocks of four rows starting at `rows` (row `k` of block `b`
    /// at `rows + (4b + k) * stride`), `sums[4b + k] = sum over c < 16 * groups of
    /// row[c] * x[c]`, `groups >= 1` groups of 16 columns.
    fn txl_rows4_mve(
        rows: *const i8,
        stride: usize,
        x: *const i8,
        groups: usize,
        sums: *mut i32,
        blocks: usize,
    );
    /// [`txl_rows4_mve`] two groups a pass, `groups` even.
    fn txl_rows4x2_mve(
        rows: *const i8,
        stride: usize,
        x: *const i8,
        groups: usize,
        sums: *mut i32,
        blocks: usize,
    );
    /// [`txl_rows4_mve`] for rows of exactly 128 columns (eight groups) one after the other
    /// (`stride` 128): `sums[4b + k]` for `blocks >= 1` blocks.
    fn txl_rows4_c128_mve(rows: *const i8, x: *const i8, sums: *mut i32, blocks: usize);
    /// [`txl_rows4_c128_mve`] for rows of exactly 256 columns.
    fn txl_rows4_c256_mve(rows: *const i8, x: *const i8, sums: *mut i32, blocks: usize);
    /// Helium: the largest `|x[i]|` of `x[..n]`, `n >= 1` (`VMAXNMA`, so NaNs are ignored),
    /// as f32 bits.
    fn txl_max_abs_mve(x: *const f32, n: usize) -> u32;
    /// Helium: `out[i] = round(x[i] * inverse)` for `i < n`, `n >= 1`, rounded to nearest with
    /// ties away from zero (`VCVTA`), stored as the low byte (`VSTRB.32`); `inverse` as f32
    /// bits.
    fn txl_quantize_mve(x: *const f32, out: *mut i8, n: usize, inverse: u32);
    /// [`txl_max_abs_mve`] for `8 * octets` values (`octets >= 1`).
    fn txl_max_abs8_mve(x: *const f32, octets: usize) -> u32;
    /// [`txl_quantize_mve`] for `8 * octets` values (`octets >= 1`).
    fn txl_quantize8_mve(x: *const f32, out: *mut i8, octets: usize, inverse: u32);
}

// Both loops are tail-predicated (`DLSTP.32` / `LETP`): the last pass takes the 1 to 4 values
// left, the lanes beyond `n` neither loaded nor stored. The largest magnitude: per four values
// one `VLDRW` and one `VMAXNMA` (q0 = max(|q0|, |x|), lane by lane), then `VMAXNMAV` across q0.
// The quantization: per four values `VLDRW`, `VMUL` by the inverse, `VCVTA`, `VSTRB.32`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_max_abs_mve,\"ax\",%progbits",
    ".globl txl_max_abs_mve",
    ".type txl_max_abs_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_max_abs_mve:",
    "push {{r7, lr}}",
    "vmov.i32 q0, #0",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q1, [r0], #16",
    "vmaxnma.f32 q0, q1",
    "letp lr, 1b",
    "movs r0, #0",
    "vmaxnmav.f32 r0, q0",
    "pop {{r7, pc}}",
    ".size txl_max_abs_mve, . - txl_max_abs_mve",
    ".section .text.txl_quantize_mve,\"ax\",%progbits",
    ".globl txl_quantize_mve",
    ".type txl_quantize_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_quantize_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vmul.f32 q0, q0, r3",
    "vcvta.s32.f32 q0, q0",
    "vstrb.32 q0, [r1], #4",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_quantize_mve, . - txl_quantize_mve",
    // the same two loops eight values a pass, for a multiple of eight values (no predication)
    ".section .text.txl_max_abs8_mve,\"ax\",%progbits",
    ".globl txl_max_abs8_mve",
    ".type txl_max_abs8_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_max_abs8_mve:",
    "push {{r7, lr}}",
    "vmov.i32 q0, #0",
    "dls lr, r1",
    "1:",
    "vldrw.u32 q1, [r0], #16",
    "vmaxnma.f32 q0, q1",
    "vldrw.u32 q1, [r0], #16",
    "vmaxnma.f32 q0, q1",
    "le lr, 1b",
    "movs r0, #0",
    "vmaxnmav.f32 r0, q0",
    "pop {{r7, pc}}",
    ".size txl_max_abs8_mve, . - txl_max_abs8_mve",
    ".section .text.txl_quantize8_mve,\"ax\",%progbits",
    ".globl txl_quantize8_mve",
    ".type txl_quantize8_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_quantize8_mve:",
    "push {{r7, lr}}",
    "dls lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vmul.f32 q0, q0, r3",
    "vcvta.s32.f32 q0, q0",
    "vstrb.32 q0, [r1], #4",
    "vldrw.u32 q0, [r0], #16",
    "vmul.f32 q0, q0, r3",
    "vcvta.s32.f32 q0, q0",
    "vstrb.32 q0, [r1], #4",
    "le lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_quantize8_mve, . - txl_quantize8_mve",
    ".cpu cortex-m4",
);

/// The smallest largest magnitude the Helium quantization takes; below it (or for a range
/// that is not finite) [`quantize_i8`] runs the portable code. Helium's floating point may
/// flush subnormal values to zero, where the portable code keeps them: with `max |x| >=
/// 2^-100` that changes nothing. A subnormal `|x| < 2^-126` cannot be the largest, and its
/// quotient `x * 127 / max |x| < 2^-126 * 2^107` rounds to 0 either way; a subnormal product
/// rounds to 0 either way too.
const SMALLEST_RANGE: f32 = f32::from_bits((127 - 100) << 23); // 2^-100

/// [`portable::quantize_i8`](crate::kernels::portable::quantize_i8) with Helium for an input
/// without activation scales (and as long as `out`): the largest magnitude and the quantization
/// four values an instruction. The same bits: the largest magnitude is the same value in any order (NaNs
/// ignored both ways), the product is one IEEE multiply either way, and `VCVTA` rounds to
/// nearest with ties away from zero, as the portable code's `libm::roundf` formula does (a
/// NaN becomes 0 both ways). Activation scales, and ranges where flushing could show
/// ([`SMALLEST_RANGE`]), take the portable code.
pub fn quantize_i8(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    let n = x.len();
    if act_scales.is_some() || n == 0 || out.len() != n {
        return crate::kernels::portable::quantize_i8(x, act_scales, out);
    }
    let octets = if n.is_multiple_of(8) { n / 8 } else { 0 };
    // SAFETY: `x` holds `n >= 1` values (`8 * octets` where `octets` is not 0); the kernels
    // read only those (tail-predicated) and use only q0 and q1 of the vector registers
    // (caller-saved under the AAPCS).
    let max_abs = f32::from_bits(unsafe {
        if octets > 0 {
            txl_max_abs8_mve(x.as_ptr(), octets)
        } else {
            txl_max_abs_mve(x.as_ptr(), n)
        }
    });
    if !(max_abs >= SMALLEST_RANGE && max_abs.is_finite()) {
        return crate::kernels::portable::quantize_i8(x, act_scales, out);
    }
    let inverse = 127.0 / max_abs;
    // SAFETY: `x` holds `n >= 1` values and `out` `n` bytes; the kernel reads and writes only
    // those (tail-predicated) and uses only q0 of the vector registers.
    unsafe {
        if octets > 0 {
            txl_quantize8_mve(x.as_ptr(), out.as_mut_ptr(), octets, inverse.to_bits())
        } else {
            txl_quantize_mve(x.as_ptr(), out.as_mut_ptr(), n, inverse.to_bits())
        }
    };
    max_abs / 127.0
}

// Per group of 16 columns: one VLDRB of the inputs (shared by the four rows), then per row one
// VLDRB of its weights and one VMLADAVA (16 products added to the row's sum), plus the loop's
// end (`LE`, a low-overhead loop): 10 instructions per 64 multiply-accumulates. VMLADAVA accumulates into
// even registers: r4, r6, r8, r10. Registers: r0, r5, r7, r9 the rows, r1 the inputs (the
// stride between blocks: rows 0 and 1 advance alike), r2 their start, r3 the groups, r11 the
// output, r12 the blocks left, lr the groups left, q0 the inputs, q1 a row's weights.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_rows4_mve,\"ax\",%progbits",
    ".globl txl_rows4_mve",
    ".type txl_rows4_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows4_mve:",
    "push {{r4-r11, lr}}",
    "ldr r11, [sp, #36]",
    "ldr r12, [sp, #40]",
    "cmp r12, #0",
    "beq 5f",
    "add r5, r0, r1",
    "4:",
    "sub r1, r5, r0",
    "add r7, r5, r1",
    "add r9, r7, r1",
    "mov r4, #0",
    "mov r6, #0",
    "mov r8, #0",
    "mov r10, #0",
    "mov r1, r2",
    "dls lr, r3",
    "1:",
    "vldrb.s8 q0, [r1], #16",
    "vldrb.s8 q1, [r0], #16",
    "vmladava.s8 r4, q1, q0",
    "vldrb.s8 q1, [r5], #16",
    "vmladava.s8 r6, q1, q0",
    "vldrb.s8 q1, [r7], #16",
    "vmladava.s8 r8, q1, q0",
    "vldrb.s8 q1, [r9], #16",
    "vmladava.s8 r10, q1, q0",
    "le lr, 1b",
    "strd r4, r6, [r11], #8",
    "strd r8, r10, [r11], #8",
    // the next block: row 0 at row 3's start plus the stride (rows 0 and 1 advanced alike)
    "sub r1, r5, r0",
    "add r0, r9, r1",
    "sub r0, r0, r3, lsl #4",
    "add r5, r0, r1",
    "subs r12, r12, #1",
    "bne 4b",
    "5:",
    "pop {{r4-r11, pc}}",
    ".size txl_rows4_mve, . - txl_rows4_mve",
    // `txl_rows4_mve` two groups a loop, for an even number of groups: the first group sets the
    // sums (VMLADAV), so none is zeroed, and the loop's end comes once per 128 products
    ".macro txl_rows4_mve_group op",
    "vldrb.s8 q0, [r1], #16",
    "vldrb.s8 q1, [r0], #16",
    "\\op\\().s8 r4, q1, q0",
    "vldrb.s8 q1, [r5], #16",
    "\\op\\().s8 r6, q1, q0",
    "vldrb.s8 q1, [r7], #16",
    "\\op\\().s8 r8, q1, q0",
    "vldrb.s8 q1, [r9], #16",
    "\\op\\().s8 r10, q1, q0",
    ".endm",
    ".section .text.txl_rows4x2_mve,\"ax\",%progbits",
    ".globl txl_rows4x2_mve",
    ".type txl_rows4x2_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows4x2_mve:",
    "push {{r4-r11, lr}}",
    "ldr r11, [sp, #36]",
    "ldr r12, [sp, #40]",
    "cmp r12, #0",
    "beq 5f",
    "add r5, r0, r1",
    "lsr r3, r3, #1",
    "sub r3, r3, #1", // the loop's passes: the pairs of groups after the first
    "4:",
    "sub r1, r5, r0",
    "add r7, r5, r1",
    "add r9, r7, r1",
    "mov r1, r2",
    "txl_rows4_mve_group vmladav",
    "txl_rows4_mve_group vmladava",
    "wls lr, r3, 2f",
    "1:",
    "txl_rows4_mve_group vmladava",
    "txl_rows4_mve_group vmladava",
    "le lr, 1b",
    "2:",
    "strd r4, r6, [r11], #8",
    "strd r8, r10, [r11], #8",
    // the next block: row 0 at row 3's start plus the stride (rows 0 and 1 advanced alike);
    // row 3 advanced by 32 bytes per pass and 32 more
    "sub r1, r5, r0",
    "add r0, r9, r1",
    "sub r0, r0, r3, lsl #5",
    "sub r0, r0, #32",
    "add r5, r0, r1",
    "subs r12, r12, #1",
    "bne 4b",
    "5:",
    "pop {{r4-r11, pc}}",
    ".size txl_rows4x2_mve, . - txl_rows4x2_mve",
    // `txl_rows4_c128_mve`: the inputs' last six groups stay in q2-q7 for the whole call, the
    // first two are loaded into q0 per block; the eight groups run without a loop, the first
    // setting the sums (VMLADAV). The rows follow one another, so row 3 ends where the next
    // block starts. Per block of four rows: 66 instructions for the 512 products, 4 to set the
    // rows' pointers, 2 stores and the loop's end: 73 (0.143 an instruction per product).
    // Registers: r11 the next block (row 3 when running), r5, r7, r9 rows 0-2, r1 the stride,
    // r2 the inputs, r3 the outputs, lr the blocks left, q1 a row's weights.
    ".macro txl_rows4_c128_row op, q",
    "vldrb.s8 q1, [r5], #16",
    "\\op\\().s8 r4, q1, \\q",
    "vldrb.s8 q1, [r7], #16",
    "\\op\\().s8 r6, q1, \\q",
    "vldrb.s8 q1, [r9], #16",
    "\\op\\().s8 r8, q1, \\q",
    "vldrb.s8 q1, [r11], #16",
    "\\op\\().s8 r10, q1, \\q",
    ".endm",
    ".section .text.txl_rows4_c128_mve,\"ax\",%progbits",
    ".globl txl_rows4_c128_mve",
    ".type txl_rows4_c128_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows4_c128_mve:",
    "push {{r4-r11, lr}}",
    "vpush {{d8-d15}}",
    "vldrb.s8 q2, [r1, #32]",
    "vldrb.s8 q3, [r1, #48]",
    "vldrb.s8 q4, [r1, #64]",
    "vldrb.s8 q5, [r1, #80]",
    "vldrb.s8 q6, [r1, #96]",
    "vldrb.s8 q7, [r1, #112]",
    "mov r11, r0",
    "mov r0, r2",
    "mov r2, r1",
    "mov r1, #128",
    "dls lr, r3",
    "1:",
    "mov r5, r11",
    "add r7, r11, r1",
    "add r9, r7, r1",
    "add r11, r9, r1",
    "vldrb.s8 q0, [r2]",
    "txl_rows4_c128_row vmladav, q0",
    "vldrb.s8 q0, [r2, #16]",
    "txl_rows4_c128_row vmladava, q0",
    "txl_rows4_c128_row vmladava, q2",
    "txl_rows4_c128_row vmladava, q3",
    "txl_rows4_c128_row vmladava, q4",
    "txl_rows4_c128_row vmladava, q5",
    "txl_rows4_c128_row vmladava, q6",
    "txl_rows4_c128_row vmladava, q7",
    "strd r4, r6, [r0], #8",
    "strd r8, r10, [r0], #8",
    "le lr, 1b",
    "vpop {{d8-d15}}",
    "pop {{r4-r11, pc}}",
    ".size txl_rows4_c128_mve, . - txl_rows4_c128_mve",
    // `txl_rows4_c256_mve`: the same for rows of 256 columns, the inputs' last six groups in
    // q2-q7 and the first ten loaded into q0 per block (r12 the inputs): 146 instructions per
    // block of 1024 products (0.143 an instruction per product).
    ".section .text.txl_rows4_c256_mve,\"ax\",%progbits",
    ".globl txl_rows4_c256_mve",
    ".type txl_rows4_c256_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows4_c256_mve:",
    "push {{r4-r11, lr}}",
    "vpush {{d8-d15}}",
    "add r12, r1, #160",
    "vldrb.s8 q2, [r12], #16",
    "vldrb.s8 q3, [r12], #16",
    "vldrb.s8 q4, [r12], #16",
    "vldrb.s8 q5, [r12], #16",
    "vldrb.s8 q6, [r12], #16",
    "vldrb.s8 q7, [r12]",
    "mov r11, r0",
    "mov r0, r2",
    "mov r2, r1",
    "mov r1, #256",
    "dls lr, r3",
    "1:",
    "mov r5, r11",
    "add r7, r11, r1",
    "add r9, r7, r1",
    "add r11, r9, r1",
    "mov r12, r2",
    "vldrb.s8 q0, [r12], #16",
    "txl_rows4_c128_row vmladav, q0",
    ".rept 9",
    "vldrb.s8 q0, [r12], #16",
    "txl_rows4_c128_row vmladava, q0",
    ".endr",
    "txl_rows4_c128_row vmladava, q2",
    "txl_rows4_c128_row vmladava, q3",
    "txl_rows4_c128_row vmladava, q4",
    "txl_rows4_c128_row vmladava, q5",
    "txl_rows4_c128_row vmladava, q6",
    "txl_rows4_c128_row vmladava, q7",
    "strd r4, r6, [r0], #8",
    "strd r8, r10, [r0], #8",
    "le lr, 1b",
    "vpop {{d8-d15}}",
    "pop {{r4-r11, pc}}",
    ".size txl_rows4_c256_mve, . - txl_rows4_c256_mve",
    // back to the core every other kernel here is assembled for
    ".cpu cortex-m4",
);

/// [`portable::row_sums_i8`](crate::kernels::portable::row_sums_i8) with Helium: four rows per
/// pass, 16 columns per instruction. Equal to the portable dot product of each row.
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    let rows = sums.len();
    let groups = cols / 16;
    let body = groups * 16;
    let values = &values[..rows * cols];
    let xq = &xq[..cols];
    let blocks = if groups > 0 { rows / 4 } else { 0 };
    if blocks > 0 && (cols == 128 || cols == 256) {
        let kernel = if cols == 128 {
            txl_rows4_c128_mve
        } else {
            txl_rows4_c256_mve
        };
        // SAFETY: `values` holds `4 * blocks <= rows` rows of `cols` bytes one after the other
        // and `xq` `cols` bytes: the kernel reads only those (byte loads), writes the first `4 *
        // blocks` of `sums`, and preserves the callee-saved registers (AAPCS: d8-d15 too).
        unsafe { kernel(values.as_ptr(), xq.as_ptr(), sums.as_mut_ptr(), blocks) };
    } else if blocks > 0 {
        let kernel = if groups.is_multiple_of(2) {
            txl_rows4x2_mve
        } else {
            txl_rows4_mve
        };
        // SAFETY: `values` holds `4 * blocks <= rows` rows of `cols >= 16 * groups` bytes at
        // stride `cols`, `xq` holds `cols`: the kernel reads only those (byte loads, no alignment
        // needed), writes the first `4 * blocks` of `sums`, and preserves the callee-saved
        // registers (AAPCS; of the vector registers it uses only q0 and q1).
        unsafe {
            kernel(
                values.as_ptr(),
                cols,
                xq.as_ptr(),
                groups,
                sums.as_mut_ptr(),
                blocks,
            )
        };
    }
    let done = 4 * blocks;
    for (r, sum) in sums.iter_mut().enumerate().skip(done) {
        *sum = crate::kernels::portable::dot_i8(&values[r * cols..(r + 1) * cols], xq);
    }
    if body < cols {
        for (sum, row) in sums[..done].iter_mut().zip(values.chunks_exact(cols)) {
            *sum += crate::kernels::portable::dot_i8(&row[body..], &xq[body..]);
        }
    }
}

extern "C" {
    /// Helium: for each of `blocks` blocks of four keys starting at `keys` (key `k` of block `b`
    /// at `keys + (4b + k) * stride`), `sums[4b + k] = sum over c < 8 * groups of key[c] *
    /// query[c]`, the query 16-bit in column order, `groups >= 1` groups of 8 columns.
    fn txl_key_sums4_mve(
        keys: *const i8,
        stride: usize,
        query: *const i16,
        groups: usize,
        sums: *mut i32,
        blocks: usize,
    );
    /// Helium: `sum over c < 8 * groups of key[c] * query[c]` for one key, the query as for
    /// [`txl_key_sums4_mve`].
    fn txl_key_sum1_mve(key: *const i8, query: *const i16, groups: usize) -> i32;
    /// Helium: `acc[c] += sum over t < count of weights[t] * value_t[c]` for `c < 16`, value `t`
    /// at `values + t * stride`, `count >= 1`.
    fn txl_value_sums16_mve(
        values: *const i8,
        stride: usize,
        weights: *const i32,
        count: usize,
        acc: *mut i32,
    );
    /// [`txl_value_sums16_mve`] into zeros: `acc[c] = sum over t < count of weights[t] *
    /// value_t[c]` (the sixteen sums of `acc` written, none read).
    fn txl_value_sums16_zero_mve(
        values: *const i8,
        stride: usize,
        weights: *const i32,
        count: usize,
        acc: *mut i32,
    );
}

// The keys: txl_rows4_mve's loop with 16-bit lanes. Per group of 8 columns one VLDRH of the query
// (shared by the four keys), then per key one VLDRB.S16 of its bytes (widened) and one
// VMLADAVA.S16: 10 instructions per 32 multiply-accumulates (the first group's VMLADAV sets the
// sums, outside the loop); per block of four keys 11 more (the query's start, the loop's, two
// STRD, the four keys' step to the next block, the count). The values: sixteen columns' sums
// in q0-q3 over all the keys; per two keys one LDRD of their weights, per key four VLDRB.S32
// (four bytes widened each) and four VMLA by its weight, the steps to the next two keys (r0
// and r7) and the loop's end: 20 instructions per 32 multiply-accumulates.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_key_sums4_mve,\"ax\",%progbits",
    ".globl txl_key_sums4_mve",
    ".type txl_key_sums4_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_key_sums4_mve:",
    "push {{r4-r11, lr}}",
    "sub sp, #4",
    "ldr r11, [sp, #40]",
    "ldr r12, [sp, #44]",
    "cmp r12, #0",
    "beq 5f",
    // the groups after the first; the step from a key's last group to its next block
    // (`4 · stride - 8 · groups`) on the stack
    "sub r9, r3, #1",
    "lsl r4, r1, #2",
    "sub r4, r4, r3, lsl #3",
    "str r4, [sp]",
    "add r3, r0, r1",
    "add r5, r3, r1",
    "add r7, r5, r1",
    "4:",
    "mov r1, r2",
    // the first group sets the sums (`VMLADAV`), the others add to them
    "vldrh.u16 q0, [r1], #16",
    "vldrb.s16 q1, [r0], #8",
    "vmladav.s16 r4, q1, q0",
    "vldrb.s16 q1, [r3], #8",
    "vmladav.s16 r6, q1, q0",
    "vldrb.s16 q1, [r5], #8",
    "vmladav.s16 r8, q1, q0",
    "vldrb.s16 q1, [r7], #8",
    "vmladav.s16 r10, q1, q0",
    "wls lr, r9, 2f",
    "1:",
    "vldrh.u16 q0, [r1], #16",
    "vldrb.s16 q1, [r0], #8",
    "vmladava.s16 r4, q1, q0",
    "vldrb.s16 q1, [r3], #8",
    "vmladava.s16 r6, q1, q0",
    "vldrb.s16 q1, [r5], #8",
    "vmladava.s16 r8, q1, q0",
    "vldrb.s16 q1, [r7], #8",
    "vmladava.s16 r10, q1, q0",
    "le lr, 1b",
    "2:",
    "strd r4, r6, [r11], #8",
    "strd r8, r10, [r11], #8",
    // the next block: each key four strides on from its start
    "ldr r1, [sp]",
    "add r0, r0, r1",
    "add r3, r3, r1",
    "add r5, r5, r1",
    "add r7, r7, r1",
    "subs r12, r12, #1",
    "bne 4b",
    "5:",
    "add sp, #4",
    "pop {{r4-r11, pc}}",
    ".size txl_key_sums4_mve, . - txl_key_sums4_mve",
    // one key: the first group's VMLADAV, the others' VLDRH, VLDRB.S16 and VMLADAVA (4 with
    // the loop's end; 22 instructions for four groups, a block of four keys' pass 51)
    ".section .text.txl_key_sum1_mve,\"ax\",%progbits",
    ".globl txl_key_sum1_mve",
    ".type txl_key_sum1_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_key_sum1_mve:",
    "push {{r7, lr}}",
    "vldrh.u16 q0, [r1], #16",
    "vldrb.s16 q1, [r0], #8",
    "vmladav.s16 r12, q1, q0",
    "subs r2, r2, #1",
    "wls lr, r2, 2f",
    "1:",
    "vldrh.u16 q0, [r1], #16",
    "vldrb.s16 q1, [r0], #8",
    "vmladava.s16 r12, q1, q0",
    "le lr, 1b",
    "2:",
    "mov r0, r12",
    "pop {{r7, pc}}",
    ".size txl_key_sum1_mve, . - txl_key_sum1_mve",
    ".macro txl_value_sums16_key key, weight",
    "vldrb.s32 q4, [\\key]",
    "vmla.s32 q0, q4, \\weight",
    "vldrb.s32 q4, [\\key, #4]",
    "vmla.s32 q1, q4, \\weight",
    "vldrb.s32 q4, [\\key, #8]",
    "vmla.s32 q2, q4, \\weight",
    "vldrb.s32 q4, [\\key, #12]",
    "vmla.s32 q3, q4, \\weight",
    ".endm",
    ".section .text.txl_value_sums16_mve,\"ax\",%progbits",
    ".globl txl_value_sums16_zero_mve",
    ".type txl_value_sums16_zero_mve,%function",
    ".p2align 2",
    ".thumb_func",
    // the sums from zeros (four VMOV instead of four VLDRW), then as below
    "txl_value_sums16_zero_mve:",
    "push {{r4-r8, lr}}",
    "vpush {{d8, d9}}",
    "ldr r4, [sp, #40]",
    "vmov.i32 q0, #0",
    "vmov.i32 q1, #0",
    "vmov.i32 q2, #0",
    "vmov.i32 q3, #0",
    "b 6f",
    ".size txl_value_sums16_zero_mve, . - txl_value_sums16_zero_mve",
    ".globl txl_value_sums16_mve",
    ".type txl_value_sums16_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_value_sums16_mve:",
    "push {{r4-r8, lr}}",
    "vpush {{d8, d9}}",
    "ldr r4, [sp, #40]",
    "vldrw.u32 q0, [r4]",
    "vldrw.u32 q1, [r4, #16]",
    "vldrw.u32 q2, [r4, #32]",
    "vldrw.u32 q3, [r4, #48]",
    "6:",
    "add r7, r0, r1",
    "lsl r8, r1, #1",
    "tst r3, #1",
    "beq 5f",
    // an odd count: one key first
    "ldr r5, [r2], #4",
    "txl_value_sums16_key r0, r5",
    "add r0, r0, r1",
    "add r7, r7, r1",
    "5:",
    "lsrs r3, r3, #1",
    "wls lr, r3, 3f",
    "1:",
    "ldrd r5, r6, [r2], #8",
    "txl_value_sums16_key r0, r5",
    "txl_value_sums16_key r7, r6",
    "add r0, r0, r8",
    "add r7, r7, r8",
    "le lr, 1b",
    "3:",
    "vstrw.32 q0, [r4]",
    "vstrw.32 q1, [r4, #16]",
    "vstrw.32 q2, [r4, #32]",
    "vstrw.32 q3, [r4, #48]",
    "vpop {{d8, d9}}",
    "pop {{r4-r8, pc}}",
    ".size txl_value_sums16_mve, . - txl_value_sums16_mve",
    ".cpu cortex-m4",
);

extern "C" {
    /// Helium: `out[8g + j] = words' halves[8g + order[j]]` for `g < groups` (`groups >= 1`),
    /// `order` eight 16-bit indices: the query's words put back in column order.
    fn txl_query_order_mve(words: *const u32, out: *mut i16, groups: usize, order: *const u16);
}

/// The halves [`txl_query_order_mve`] gathers for columns 0 to 7 of a group: word `2g` holds
/// columns `4g` and `4g + 2`, word `2g + 1` columns `4g + 1` and `4g + 3`.
static QUERY_ORDER: [u16; 8] = [0, 2, 1, 3, 4, 6, 5, 7];

// Per eight columns one gather (`VLDRH` by the eight halves' indices), one `VSTRH` and the step
// to the next words: 4 instructions with the loop's end.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_query_order_mve,\"ax\",%progbits",
    ".globl txl_query_order_mve",
    ".type txl_query_order_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_query_order_mve:",
    "push {{r7, lr}}",
    "vldrh.u16 q1, [r3]",
    "dls lr, r2",
    "1:",
    "vldrh.u16 q0, [r0, q1, uxtw #1]",
    "vstrh.16 q0, [r1], #16",
    "adds r0, #16",
    "le lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_query_order_mve, . - txl_query_order_mve",
    ".cpu cortex-m4",
);

/// Widest query [`key_sums_i8`] takes with Helium (its column-order copy is on the stack).
const KEY_COLUMNS: usize = 256;

/// [`portable::key_sums_i8`](crate::kernels::portable::key_sums_i8) with Helium: four keys per
/// pass, eight columns an instruction (`VMLADAVA.S16` of the 16-bit query, put back in column
/// order once per call, against the key's bytes widened by `VLDRB.S16`). Three keys after the
/// whole blocks of four take one more pass of the kernel over the last four keys, one or two
/// (or fewer than four keys in all) the one-key kernel each; the columns after whole
/// groups of eight, and queries wider than [`KEY_COLUMNS`], take the portable code. Integer
/// sums (wrapping, as the portable code): the same sums.
pub fn key_sums_i8(keys: &[i8], stride: usize, d_head: usize, words: &[u32], sums: &mut [i32]) {
    use crate::kernels::portable;
    let groups = d_head / 8;
    let n = sums.len();
    if groups == 0 || d_head > KEY_COLUMNS || n == 0 {
        return portable::key_sums_i8(keys, stride, d_head, words, sums);
    }
    let cols = 8 * groups;
    // column order: word 2g holds columns 4g (low half) and 4g + 2 (high), word 2g + 1 columns
    // 4g + 1 and 4g + 3 (`portable::query_half`)
    // (only the `cols` the kernel reads are written: no clearing of the rest per call)
    let mut query = [core::mem::MaybeUninit::<i16>::uninit(); KEY_COLUMNS];
    assert!(words.len() >= cols / 2, "query words out of bounds");
    // SAFETY: `words` holds the `cols / 2` words (`4 · groups`) the kernel reads (checked
    // above), `query` the `cols = 8 · groups <= KEY_COLUMNS` halves it writes; it uses q0 and
    // q1 (caller-saved).
    unsafe {
        txl_query_order_mve(
            words.as_ptr(),
            query.as_mut_ptr().cast::<i16>(),
            groups,
            QUERY_ORDER.as_ptr(),
        )
    };
    let query = query.as_ptr().cast::<i16>();
    assert!((n - 1) * stride + d_head <= keys.len(), "keys out of bounds");
    let blocks = n / 4;
    let done = 4 * blocks;
    if blocks > 0 {
        // SAFETY: the kernel reads `cols <= d_head` bytes of each of the first `done <= n` keys
        // (at `t * stride`, inside `keys`: checked above), the `cols` query values (all written
        // above: `words` holds `cols / 2`, checked) and writes the first `done` sums; it preserves the callee-saved registers (AAPCS; of the vector
        // registers it uses only q0 and q1).
        unsafe { txl_key_sums4_mve(keys.as_ptr(), stride, query, groups, sums.as_mut_ptr(), blocks) };
    }
    // three keys after the blocks (and at least four keys): one more pass over the last four;
    // one or two (or fewer than four keys): a pass of the one-key kernel each
    if n - done == 3 && n >= 4 {
        let first = keys[(n - 4) * stride..].as_ptr();
        // SAFETY: as above, for the last four keys (from key `n - 4`) into `sums[n - 4..]`
        // (the sum before `done` written again, with the same value).
        unsafe { txl_key_sums4_mve(first, stride, query, groups, sums[n - 4..].as_mut_ptr(), 1) };
    } else {
        for (t, sum) in sums.iter_mut().enumerate().skip(done) {
            let key = keys[t * stride..].as_ptr();
            // SAFETY: as above, for key `t` (its `cols` bytes inside `keys`: checked above).
            *sum = unsafe { txl_key_sum1_mve(key, query, groups) };
        }
    }
    if cols < d_head {
        for (t, sum) in sums.iter_mut().enumerate() {
            portable::key_sums_columns(&keys[t * stride..t * stride + d_head], cols, words, sum);
        }
    }
}

/// [`portable::value_sums_i8`](crate::kernels::portable::value_sums_i8) with Helium: sixteen
/// columns per pass, their sums in four vector registers over all the keys (`VLDRB.S32` and
/// `VMLA` by the key's weight); the columns after whole groups of sixteen take the portable
/// code. Integer sums (wrapping, as the portable code): the same sums.
pub fn value_sums_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    value_sums16(values, stride, weights, acc, false);
}

/// [`value_sums_i8`] into zeros, `acc[c] = Σ_t weights[t] · value_t[c]`, for the whole groups
/// of sixteen columns (at least one key): the columns it set (the caller sets the rest), else
/// 0 with nothing written. The sums start from zeros in the kernel instead of a clearing pass
/// over `acc`.
pub fn value_sums_from_zero_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) -> usize {
    if weights.is_empty() {
        return 0;
    }
    let body = acc.len() / 16 * 16;
    value_sums16(values, stride, weights, &mut acc[..body], true);
    body
}

/// [`value_sums_i8`]'s passes, the kernel's sums from zeros where `zero` is set (from `acc`'s
/// sums otherwise).
#[inline(always)]
fn value_sums16(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32], zero: bool) {
    let count = weights.len();
    let body = if count > 0 { acc.len() / 16 * 16 } else { 0 };
    for (block, acc) in acc[..body].chunks_exact_mut(16).enumerate() {
        let first = 16 * block;
        assert!(
            (count - 1) * stride + first + 16 <= values.len(),
            "value rows out of bounds"
        );
        let kernel = if zero {
            txl_value_sums16_zero_mve
        } else {
            txl_value_sums16_mve
        };
        // SAFETY: the kernel reads sixteen bytes at `first + t * stride` for `t < count`, all
        // inside `values` (checked above), `count` weights and the sixteen sums of `acc` (the
        // zero variant none of them), and writes those sums; it saves q4 (d8, d9) and the
        // callee-saved core registers it uses (AAPCS).
        unsafe {
            kernel(
                values.as_ptr().add(first),
                stride,
                weights.as_ptr(),
                count,
                acc.as_mut_ptr(),
            )
        };
    }
    if body < acc.len() {
        let rest = values.get(body..).unwrap_or_default();
        crate::kernels::portable::value_sums_i8(rest, stride, weights, &mut acc[body..]);
    }
}

/// Every int4 group code's multiplier, for the kernel's table lookup.
static INT4_MULTIPLIERS: [i32; 256] = {
    let mut table = [0i32; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = crate::kernels::portable::int4_multiplier(code as u8);
        code += 1;
    }
    table
};

/// The arguments of [`txl_rows_i4_mve`] after the first four, read by offset in the assembly:
/// keep the order.
#[repr(C)]
struct Int4Pass {
    /// Codes per row.
    groups: usize,
    /// Chunks of 32 columns per group.
    chunks: usize,
    /// The whole groups each row runs here.
    full_groups: usize,
    /// Where the next pair's two i64 sums go.
    sums: *mut i64,
    /// Pairs of rows.
    pairs: usize,
    /// Bytes from the end of a pair's first row (as far as it ran) to the next pair's.
    skip: usize,
    /// Codes from the end of a pair's first row's (as far as it ran) to the next pair's.
    code_skip: usize,
    /// [`INT4_MULTIPLIERS`].
    multipliers: *const i32,
    /// The input's start.
    x: *const i8,
}

extern "C" {
    /// Helium: for each pair of packed int4 rows (the first at `rows`, the second `row_bytes`
    /// further), `sum over the first pass.full_groups groups g of multiplier(code[g]) *
    /// (row[g] · x[g])` into `pass.sums` (two i64 a pair), groups of `32 * pass.chunks`
    /// columns, the input 4-byte aligned.
    fn txl_rows_i4_mve(rows: *const u8, row_bytes: usize, codes: *const u8, pass: *mut Int4Pass);
    /// [`txl_rows_i4_mve`] for groups of 32 columns (`pass.chunks` 1): no loop over a group's
    /// chunks, its sums started by `VMLADAV`.
    fn txl_rows_i4_g32_mve(rows: *const u8, row_bytes: usize, codes: *const u8, pass: *mut Int4Pass);
}

// Per 32 columns of a pair of rows: the input's 32 bytes loaded once, split by VLD20/VLD21
// into the columns of the low nibbles (words 0, 2, 4, 6: columns 0-3 of each block of eight)
// and of the high ones (words 1, 3, 5, 7: columns 4-7); per row one VLDRB of 16 weight bytes,
// VSHL #4 (16 times the low nibble, signed) and VAND 0xF0 (16 times the high one), and two
// VMLADAVA: 13 instructions per 64 multiply-accumulates. Per group and row the code's
// multiplier from the table and SMLAL into the row's i64 sum (16 times too large: shifted back
// at the end of the pair, exactly). Registers: r0, r1 the rows, r2 the input, r3 the codes, r4 and r6 the
// groups' sums, r5 the codes per row, r7 the table, r8-r11 the i64 sums, r12 the groups left,
// lr the chunks left (then a scratch register), q4 the mask. For groups of 32 columns (the
// default of `txl quantize --dtype int4`) a second copy runs each group's one chunk without the
// loop, its sums started by VMLADAV: 12 instructions per 64 multiply-accumulates, and 8 more
// per group.
/// The start of [`txl_rows_i4_mve`] and [`txl_rows_i4_g32_mve`]: registers saved, the pass's
/// fields read, then per pair of rows the i64 sums cleared (label 4), and per group (label 2).
macro_rules! int4_pairs_start {
    () => {
        concat!(
            "push {{r4-r11, lr}}\n",
            "vpush {{d8, d9}}\n",
            "sub sp, sp, #8\n",
            "str r3, [sp]\n",
            "mov r3, r2\n",
            "vmov.i8 q4, #0xf0\n",
            "ldr r12, [sp]\n",
            "ldr r5, [r12, #0]\n",
            "ldr r7, [r12, #28]\n",
            "add r1, r0, r1\n",
            "4:\n",
            "ldr r12, [sp]\n",
            "ldr r2, [r12, #32]\n",
            "ldr r12, [r12, #8]\n",
            "movs r8, #0\n",
            "movs r9, #0\n",
            "movs r10, #0\n",
            "movs r11, #0\n",
            "2:\n",
        )
    };
}

/// The end of a group of [`txl_rows_i4_mve`] and [`txl_rows_i4_g32_mve`] (each row's sum times
/// its code's multiplier added to its i64 sum), of a pair of rows (the sums stored, the pointers
/// moved on) and of the function.
macro_rules! int4_pairs_end {
    () => {
        concat!(
            "ldrb lr, [r3, r5]\n",
            "ldr lr, [r7, lr, lsl #2]\n",
            "smlal r10, r11, r6, lr\n",
            "ldrb lr, [r3], #1\n",
            "ldr lr, [r7, lr, lsl #2]\n",
            "smlal r8, r9, r4, lr\n",
            "subs r12, r12, #1\n",
            "bne 2b\n",
            // the sums were 16 times too large: shift them back (exact)
            "lsrs r8, r8, #4\n",
            "orr r8, r8, r9, lsl #28\n",
            "asrs r9, r9, #4\n",
            "lsrs r10, r10, #4\n",
            "orr r10, r10, r11, lsl #28\n",
            "asrs r11, r11, #4\n",
            "ldr lr, [sp]\n",
            "ldr r12, [lr, #12]\n",
            "strd r8, r9, [r12], #8\n",
            "strd r10, r11, [r12], #8\n",
            "str r12, [lr, #12]\n",
            "ldr r12, [lr, #20]\n",
            "add r0, r0, r12\n",
            "add r1, r1, r12\n",
            "ldr r12, [lr, #24]\n",
            "add r3, r3, r12\n",
            "ldr r12, [lr, #16]\n",
            "subs r12, r12, #1\n",
            "str r12, [lr, #16]\n",
            "bne 4b\n",
            "add sp, sp, #8\n",
            "vpop {{d8, d9}}\n",
            "pop {{r4-r11, pc}}\n",
        )
    };
}

global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_rows_i4_mve,\"ax\",%progbits",
    ".globl txl_rows_i4_mve",
    ".type txl_rows_i4_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows_i4_mve:",
    int4_pairs_start!(),
    "movs r4, #0",
    "movs r6, #0",
    "ldr lr, [sp]",
    "ldr lr, [lr, #4]",
    "dls lr, lr",
    "1:",
    "vld20.32 {{q0, q1}}, [r2]",
    "vld21.32 {{q0, q1}}, [r2]!",
    "vldrb.u8 q2, [r0], #16",
    "vshl.i8 q3, q2, #4",
    "vand q2, q2, q4",
    "vmladava.s8 r4, q3, q0",
    "vmladava.s8 r4, q2, q1",
    "vldrb.u8 q2, [r1], #16",
    "vshl.i8 q3, q2, #4",
    "vand q2, q2, q4",
    "vmladava.s8 r6, q3, q0",
    "vmladava.s8 r6, q2, q1",
    "le lr, 1b",
    int4_pairs_end!(),
    ".size txl_rows_i4_mve, . - txl_rows_i4_mve",
    ".section .text.txl_rows_i4_g32_mve,\"ax\",%progbits",
    ".globl txl_rows_i4_g32_mve",
    ".type txl_rows_i4_g32_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows_i4_g32_mve:",
    int4_pairs_start!(),
    "vld20.32 {{q0, q1}}, [r2]",
    "vld21.32 {{q0, q1}}, [r2]!",
    "vldrb.u8 q2, [r0], #16",
    "vshl.i8 q3, q2, #4",
    "vand q2, q2, q4",
    "vmladav.s8 r4, q3, q0",
    "vmladava.s8 r4, q2, q1",
    "vldrb.u8 q2, [r1], #16",
    "vshl.i8 q3, q2, #4",
    "vand q2, q2, q4",
    "vmladav.s8 r6, q3, q0",
    "vmladava.s8 r6, q2, q1",
    int4_pairs_end!(),
    ".size txl_rows_i4_g32_mve, . - txl_rows_i4_g32_mve",
    ".cpu cortex-m4",
);

/// The arguments of [`txl_rows_i4_g32_pairs_mve`] after the first three, read by offset in the
/// assembly: keep the order.
#[repr(C)]
struct Int4Pairs {
    /// Codes (groups of 32 columns) per row, even.
    groups: usize,
    /// Pairs of rows, at least one.
    pairs: usize,
    /// Where the first pair's two i64 sums go.
    sums: *mut i64,
    /// [`INT4_MULTIPLIERS`].
    multipliers: *const i32,
    /// Passes of the loop over each pair's groups after its first two: `(groups - 2) / 2`.
    loops: usize,
}

extern "C" {
    /// [`txl_rows_i4_g32_mve`] for rows of whole groups of 32 columns (`pass.groups` even, the
    /// rows `16 * pass.groups` bytes one after the other, their codes too): for each pair of
    /// rows from `rows`, `sum over groups g of multiplier(code[g]) * (row[g] · x[g])` into
    /// `pass.sums` (two i64 a pair), the input 4-byte aligned.
    fn txl_rows_i4_g32_pairs_mve(rows: *const u8, x: *const i8, codes: *const u8, pass: *const Int4Pairs);
    /// [`txl_rows_i4_g32_pairs_mve`] for rows of exactly four groups (128 columns).
    fn txl_rows_i4_g32x4_pairs_mve(rows: *const u8, x: *const i8, codes: *const u8, pass: *const Int4Pairs);
}

// `txl_rows_i4_g32_pairs_mve`: `txl_rows_i4_g32_mve`'s products, two groups a pass with the
// first two of each pair of rows out of the loop (their i64 sums started by SMULL rather than
// cleared), and the next pair's pointers found from the last (the rows and codes follow one
// another; the input steps back by the groups' 32 bytes each): 18 instructions per group and
// pair of rows, 20 more per pair with the sums' shift and stores (92 for 128 columns, against
// 107). Registers as there, with r5 the codes per row, r12 the scratch register and lr the
// passes left; the frame holds the output pointer, the pairs left and the passes per pair.
macro_rules! int4_g32_group {
    ($mul:literal) => {
        concat!(
            "vld20.32 {{q0, q1}}, [r2]\n",
            "vld21.32 {{q0, q1}}, [r2]!\n",
            int4_g32_group!($mul, "q0", "q1"),
        )
    };
    ($mul:literal, $low:literal, $high:literal) => {
        concat!(
            "vldrb.u8 q2, [r0], #16\n",
            "vshl.i8 q3, q2, #4\n",
            "vand q2, q2, q4\n",
            "vmladav.s8 r4, q3, ",
            $low,
            "\n",
            "vmladava.s8 r4, q2, ",
            $high,
            "\n",
            "vldrb.u8 q2, [r1], #16\n",
            "vshl.i8 q3, q2, #4\n",
            "vand q2, q2, q4\n",
            "vmladav.s8 r6, q3, ",
            $low,
            "\n",
            "vmladava.s8 r6, q2, ",
            $high,
            "\n",
            "ldrb r12, [r3, r5]\n",
            "ldr r12, [r7, r12, lsl #2]\n",
            $mul,
            " r10, r11, r6, r12\n",
            "ldrb r12, [r3], #1\n",
            "ldr r12, [r7, r12, lsl #2]\n",
            $mul,
            " r8, r9, r4, r12\n",
        )
    };
}

global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_rows_i4_g32_pairs_mve,\"ax\",%progbits",
    ".globl txl_rows_i4_g32_pairs_mve",
    ".type txl_rows_i4_g32_pairs_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows_i4_g32_pairs_mve:",
    "push {{r4-r11, lr}}",
    "vpush {{d8, d9}}",
    "sub sp, sp, #16",
    "ldr r5, [r3, #0]",
    "ldr r12, [r3, #4]",
    "ldr lr, [r3, #8]",
    "ldr r7, [r3, #12]",
    "ldr r4, [r3, #16]",
    "strd lr, r12, [sp]",
    "str r4, [sp, #8]",
    "mov r3, r2",
    "mov r2, r1",
    "add r1, r0, r5, lsl #4",
    "vmov.i8 q4, #0xf0",
    "4:",
    int4_g32_group!("smull"),
    int4_g32_group!("smlal"),
    "ldr lr, [sp, #8]",
    "wls lr, lr, 3f",
    "2:",
    int4_g32_group!("smlal"),
    int4_g32_group!("smlal"),
    "le lr, 2b",
    "3:",
    // the sums were 16 times too large: shift them back (exact)
    "lsrs r8, r8, #4",
    "orr r8, r8, r9, lsl #28",
    "asrs r9, r9, #4",
    "lsrs r10, r10, #4",
    "orr r10, r10, r11, lsl #28",
    "asrs r11, r11, #4",
    // the next pair: its first row where the last pair's second ended, its codes after the
    // second row's, the input back at its start
    "sub r12, r1, r0",
    "mov r0, r1",
    "add r1, r1, r12",
    "add r3, r3, r5",
    "sub r2, r2, r5, lsl #5",
    "ldrd r12, lr, [sp]",
    "strd r8, r9, [r12], #8",
    "strd r10, r11, [r12], #8",
    "subs lr, lr, #1",
    "strd r12, lr, [sp]",
    "bne 4b",
    "add sp, sp, #16",
    "vpop {{d8, d9}}",
    "pop {{r4-r11, pc}}",
    ".size txl_rows_i4_g32_pairs_mve, . - txl_rows_i4_g32_pairs_mve",
    // `txl_rows_i4_g32x4_pairs_mve`: the same for rows of exactly four groups (128 columns),
    // without the loop, the input's first group held split in q5 and q6 and its second group's
    // low columns in q7 (its high ones on the stack, one VLDRW a pair): 86 instructions a pair.
    ".section .text.txl_rows_i4_g32x4_pairs_mve,\"ax\",%progbits",
    ".globl txl_rows_i4_g32x4_pairs_mve",
    ".type txl_rows_i4_g32x4_pairs_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows_i4_g32x4_pairs_mve:",
    "push {{r4-r11, lr}}",
    "vpush {{d8-d15}}",
    "sub sp, sp, #32",
    "ldr r5, [r3, #0]",
    "ldr r12, [r3, #4]",
    "ldr lr, [r3, #8]",
    "ldr r7, [r3, #12]",
    "strd lr, r12, [sp]",
    "mov r3, r2",
    "vld20.32 {{q5, q6}}, [r1]",
    "vld21.32 {{q5, q6}}, [r1]!",
    "vld20.32 {{q0, q1}}, [r1]",
    "vld21.32 {{q0, q1}}, [r1]!",
    "vmov q7, q0",
    "vstrw.32 q1, [sp, #16]",
    "mov r2, r1",
    "add r1, r0, #64",
    "vmov.i8 q4, #0xf0",
    "4:",
    int4_g32_group!("smull", "q5", "q6"),
    "vldrw.u32 q1, [sp, #16]",
    int4_g32_group!("smlal", "q7", "q1"),
    int4_g32_group!("smlal"),
    int4_g32_group!("smlal"),
    "lsrs r8, r8, #4",
    "orr r8, r8, r9, lsl #28",
    "asrs r9, r9, #4",
    "lsrs r10, r10, #4",
    "orr r10, r10, r11, lsl #28",
    "asrs r11, r11, #4",
    "mov r0, r1",
    "add r1, r1, #64",
    "add r3, r3, r5",
    "sub r2, r2, #64",
    "ldrd r12, lr, [sp]",
    "strd r8, r9, [r12], #8",
    "strd r10, r11, [r12], #8",
    "subs lr, lr, #1",
    "strd r12, lr, [sp]",
    "bne 4b",
    "add sp, sp, #32",
    "vpop {{d8-d15}}",
    "pop {{r4-r11, pc}}",
    ".size txl_rows_i4_g32x4_pairs_mve, . - txl_rows_i4_g32x4_pairs_mve",
    ".cpu cortex-m4",
);

/// Largest group the Helium int4 kernel takes: a group's sum, 16 times too large, stays exact
/// in i32 (`16 * 8 * 128 * 4096 = 2^26`).
const INT4_MAX_GROUP: usize = 4096;

/// [`portable::row_sums_i4`](crate::kernels::portable::row_sums_i4) with Helium, for groups of
/// a multiple of 32 columns (up to [`INT4_MAX_GROUP`]) and an input at a 4-byte boundary: two
/// rows per pass, 32 columns per chunk, sixteen products an instruction; the columns after the
/// whole groups take the portable code. Returns false, with nothing written, for other shapes.
/// Integer sums: the same sums.
pub fn row_sums_i4(values: &[u8], group: usize, codes: &[u8], xq: &[i8], sums: &mut [i64]) -> bool {
    use crate::kernels::portable::{int4_groups, int4_multiplier, int4_range_sum, int4_row_bytes};
    let cols = xq.len();
    let rows = sums.len();
    let aligned = (xq.as_ptr() as usize).is_multiple_of(4);
    if group == 32 && cols >= 64 && cols.is_multiple_of(64) && rows >= 2 && rows.is_multiple_of(2) && aligned
    {
        // the common shape first, with the least set-up: whole pairs of rows of an even number
        // of whole groups of 32 columns
        let (groups, row_bytes) = (cols / 32, cols / 2);
        let (values, codes) = (&values[..rows * row_bytes], &codes[..rows * groups]);
        let pairs = Int4Pairs {
            groups,
            pairs: rows / 2,
            sums: sums.as_mut_ptr(),
            multipliers: INT4_MULTIPLIERS.as_ptr(),
            loops: (groups - 2) / 2,
        };
        let kernel = if groups == 4 {
            txl_rows_i4_g32x4_pairs_mve
        } else {
            txl_rows_i4_g32_pairs_mve
        };
        // SAFETY: as for the same kernels below, with `even = rows`.
        unsafe { kernel(values.as_ptr(), xq.as_ptr(), codes.as_ptr(), &pairs) };
        return true;
    }
    let full_groups = cols.checked_div(group).unwrap_or(0);
    if full_groups == 0 || !group.is_multiple_of(32) || group > INT4_MAX_GROUP || !aligned {
        return false;
    }
    let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
    let (values, codes) = (&values[..rows * row_bytes], &codes[..rows * groups]);
    let consumed = full_groups * group / 2;
    let even = rows / 2 * 2;
    let mut pass = Int4Pass {
        groups,
        chunks: group / 32,
        full_groups,
        sums: sums.as_mut_ptr(),
        pairs: even / 2,
        skip: 2 * row_bytes - consumed,
        code_skip: 2 * groups - full_groups,
        multipliers: INT4_MULTIPLIERS.as_ptr(),
        x: xq.as_ptr(),
    };
    let kernel = if group == 32 {
        txl_rows_i4_g32_mve
    } else {
        txl_rows_i4_mve
    };
    if even > 0 && group == 32 && full_groups == groups && groups.is_multiple_of(2) {
        let pairs = Int4Pairs {
            groups,
            pairs: even / 2,
            sums: sums.as_mut_ptr(),
            multipliers: INT4_MULTIPLIERS.as_ptr(),
            loops: (groups - 2) / 2,
        };
        let kernel = if groups == 4 {
            txl_rows_i4_g32x4_pairs_mve
        } else {
            txl_rows_i4_g32_pairs_mve
        };
        // SAFETY: the rows are `row_bytes = 16 * groups` bytes (whole groups of 32 columns),
        // one after the other: each pair reads its two rows (inside `values`, `even <= rows`),
        // their `groups` codes each (inside `codes`), all `cols = 32 * groups` columns of `xq`
        // (4-byte aligned, checked above) and the table, and writes its two sums of `sums`; the
        // kernels preserve the callee-saved registers (AAPCS: d8-d15 too) and the stack
        // pointer.
        unsafe { kernel(values.as_ptr(), xq.as_ptr(), codes.as_ptr(), &pairs) };
    } else if even > 0 {
        // SAFETY: each pair reads `consumed` bytes of its two rows (inside `values`: `rows *
        // row_bytes` bytes, sliced above), `full_groups` codes of each (inside `codes`), the
        // first `full_groups * group <= cols` columns of `xq` (4-byte aligned, checked above),
        // the table, and writes two sums of `sums` per pair (`even <= rows`); it preserves the
        // callee-saved registers (AAPCS: q4 through d8 and d9) and the stack pointer.
        unsafe { kernel(values.as_ptr(), row_bytes, codes.as_ptr(), &mut pass) };
    }
    if even < rows {
        // the last row alone, read twice (the second row zero bytes and codes further)
        let mut alone = [0i64; 2];
        pass.groups = 0;
        pass.pairs = 1;
        pass.sums = alone.as_mut_ptr();
        let (row, row_codes) = (&values[even * row_bytes..], &codes[even * groups..]);
        // SAFETY: as above, for one row read twice and two sums of `alone`.
        unsafe { kernel(row.as_ptr(), 0, row_codes.as_ptr(), &mut pass) };
        sums[even] = alone[0];
    }
    if full_groups == groups {
        return true;
    }
    for (r, sum) in sums.iter_mut().enumerate() {
        let row = &values[r * row_bytes..(r + 1) * row_bytes];
        for g in full_groups..groups {
            let part = int4_range_sum(row, xq, g * group..cols.min((g + 1) * group));
            *sum += int4_multiplier(codes[r * groups + g]) as i64 * part as i64;
        }
    }
    true
}

extern "C" {
    /// Helium: the smallest and the largest of `2 * bits` (each f32's bits without the sign) of
    /// `scales[..n]`, `n >= 1`, packed: smallest in the low word, largest in the high one.
    fn txl_scale_range_mve(scales: *const f32, n: usize) -> u64;
    /// Helium: `y[r] = (y[r] as i32) as f32 * (scales[r] * x_scale)` for `r < n`, `n >= 1`,
    /// `x_scale` as f32 bits.
    fn txl_scale_sums_mve(y: *mut f32, scales: *const f32, n: usize, x_scale: u32);
}

// Both tail-predicated. The range: per four scales one VLDRW, one VSHL (the sign out), VMIN and
// VMAX (unsigned), then VMINV and VMAXV across. The scaling: per four rows two VLDRW, VCVT (to
// nearest, as `as f32`), two VMUL (the row's scale times the input's first, as the portable
// code), one VSTRW.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_scale_range_mve,\"ax\",%progbits",
    ".globl txl_scale_range_mve",
    ".type txl_scale_range_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scale_range_mve:",
    "push {{r7, lr}}",
    "vmvn.i32 q0, #0",
    "vmov.i32 q1, #0",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q2, [r0], #16",
    "vshl.i32 q2, q2, #1",
    "vmin.u32 q0, q0, q2",
    "vmax.u32 q1, q1, q2",
    "letp lr, 1b",
    "mov r0, #-1",
    "vminv.u32 r0, q0",
    "movs r1, #0",
    "vmaxv.u32 r1, q1",
    "pop {{r7, pc}}",
    ".size txl_scale_range_mve, . - txl_scale_range_mve",
    ".section .text.txl_scale_sums_mve,\"ax\",%progbits",
    ".globl txl_scale_sums_mve",
    ".type txl_scale_sums_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scale_sums_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vldrw.u32 q1, [r1], #16",
    "vcvt.f32.s32 q0, q0",
    "vmul.f32 q1, q1, r3",
    "vmul.f32 q0, q0, q1",
    "vstrw.32 q0, [r0], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_scale_sums_mve, . - txl_scale_sums_mve",
    ".cpu cortex-m4",
);

/// [`portable::scale_sums_i8`](crate::kernels::portable::scale_sums_i8) with Helium, four rows
/// an instruction, where no value on the way can be subnormal (Helium's floating point may
/// flush subnormals to zero): the input's scale and every row's scale normal and finite, and
/// the smallest row scale times the input's scale normal too (then every product of a scale and
/// the input's scale is, and every output is zero or at least that large). Returns false, with
/// nothing written, otherwise (the portable code then runs). The same bits: the same
/// conversion and the same two IEEE multiplies per row, in the same order.
pub fn scale_sums_i8(y: &mut [f32], row_scales: &[f32], x_scale: f32) -> bool {
    let n = y.len().min(row_scales.len());
    if n == 0 || !(x_scale.is_normal()) {
        return n == 0;
    }
    // SAFETY: `row_scales` holds `n >= 1` floats; the kernel reads only those
    // (tail-predicated) and uses q0-q2 (caller-saved).
    let range = unsafe { txl_scale_range_mve(row_scales.as_ptr(), n) };
    let (smallest, largest) = (range as u32, (range >> 32) as u32);
    let smallest_scale = f32::from_bits(smallest >> 1);
    let normal = smallest >= f32::MIN_POSITIVE.to_bits() << 1 && largest < f32::INFINITY.to_bits() << 1;
    if !(normal && (smallest_scale * x_scale.abs()).is_normal()) {
        return false;
    }
    // SAFETY: `y` and `row_scales` hold `n >= 1` floats; the kernel reads those and writes
    // those of `y` (tail-predicated), and uses q0 and q1 (caller-saved).
    unsafe { txl_scale_sums_mve(y.as_mut_ptr(), row_scales.as_ptr(), n, x_scale.to_bits()) };
    true
}

#[cfg(target_abi = "eabihf")]
/// [`txl_softmax_exps_mve`]'s constants, in the order it loads them into r3-r12: the range of
/// bits of `x = v - max` it takes (the lowest, `-1.5 ln 2` less one step, and the span up to
/// `-87.3365`, as the FPU kernel), `libm::expf`'s `1 / ln 2`, `ln 2`'s high and low parts, the
/// polynomial's coefficients `P2` and `P1`, 2, 1 (its bits are also `127 << 23`) and `-1/2`.
static EXP_CONSTANTS: [u32; 10] = {
    use crate::kernels::fast_math::expf::{INV_LN2, LN2_HI, LN2_LO, P1, P2};
    [
        0xbf85_1593,
        0xc2ae_ac50 - 0xbf85_1593,
        INV_LN2.to_bits(),
        LN2_HI.to_bits(),
        LN2_LO.to_bits(),
        P2.to_bits(),
        P1.to_bits(),
        0x4000_0000,
        0x3f80_0000,
        0xbf00_0000,
    ]
};

extern "C" {
    /// Helium: for each of up to `fours >= 1` groups of four values from `at`, while all four
    /// `x = v - state[0]` lie on `libm::expf`'s main path (as the FPU kernel
    /// `txl_softmax_exps_f32` takes them): `v = expf(x)` in place, each added to `state[1]` in
    /// order. Returns where it stopped: after the last group, or at the first group with a value
    /// off that path (left as it was).
    fn txl_softmax_exps_mve(at: *mut f32, fours: usize, state: *mut f32, constants: *const u32) -> *mut f32;
}

// `libm::expf`'s main path four values an instruction, the same operations as the FPU kernel
// (each product rounded before it is added: separate VMUL and VADD, never fused), so the same
// bits; Helium has no vector division, so the four quotients are scalar VDIVs on the lanes (s4-s7
// are q1's). `2 - c` is taken as `-(c - 2)` and the quotient's sign carried through (`r c / (c
// - 2) + lo = -(r c / (2 - c) - lo)`, then `hi - that`), exact: rounding to nearest is
// symmetric, and a zero's sign is lost in the `+ 1` that follows. On this path every value on
// the way is zero or normal (`x` at least `1.5 ln 2` in magnitude, `r` zero or at least 2^-43,
// `2^k` normal and the result above 2^-126), so Helium's flushing of subnormals changes nothing.
// The range check on the bits of `x` (VSUB, VCMP into the predicate, VMRS, CBNZ) sends a group
// with a value off the path back to the caller. 36 instructions per four values with the sum
// (in order, on the lanes) and the loop. Registers: r0 the values, r1 the largest, r2 the
// predicate, r3-r12 the constants, lr the groups left; q0 `x` then `r`, q1 `k` (float), `r²`,
// then the quotients and the result, q2 `k` then `2^k`, q3 `hi`, q4 `lo`, q5 the polynomial, s24
// the sum.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_softmax_exps_mve,\"ax\",%progbits",
    ".globl txl_softmax_exps_mve",
    ".type txl_softmax_exps_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_softmax_exps_mve:",
    "push {{r2, r4-r11, lr}}",
    "vpush {{d8-d13}}",
    "dls lr, r1",
    "ldr r1, [r2]",
    "vldr s24, [r2, #4]",
    "ldm r3, {{r3-r12}}",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vsub.f32 q0, q0, r1",
    "vsub.i32 q1, q0, r3",
    "vcmp.u32 cs, q1, r4",
    "vmrs r2, p0",
    "cbnz r2, 2f",
    "vmul.f32 q1, q0, r5",
    "vadd.f32 q1, q1, r12", // x / ln 2 - 1/2
    "vcvt.s32.f32 q2, q1",  // k, toward zero
    "vcvt.f32.s32 q1, q2",
    "vmul.f32 q3, q1, r6",
    "vsub.f32 q3, q0, q3", // hi
    "vmul.f32 q4, q1, r7", // lo
    "vsub.f32 q0, q3, q4", // r
    "vmul.f32 q1, q0, q0",
    "vmul.f32 q5, q1, r8",
    "vadd.f32 q5, q5, r9", // P1 + r² P2
    "vmul.f32 q5, q1, q5",
    "vsub.f32 q5, q0, q5",  // c
    "vmul.f32 q1, q0, q5",  // r c
    "vsub.f32 q5, q5, r10", // c - 2
    "vdiv.f32 s4, s4, s20",
    "vdiv.f32 s5, s5, s21",
    "vdiv.f32 s6, s6, s22",
    "vdiv.f32 s7, s7, s23",
    "vadd.f32 q1, q1, q4",  // -(r c / (2 - c) - lo)
    "vsub.f32 q1, q3, q1",  // hi + (r c / (2 - c) - lo)
    "vadd.f32 q1, q1, r11", // y
    "vshl.i32 q2, q2, #23",
    "vadd.i32 q2, q2, r11", // 2^k
    "vmul.f32 q1, q1, q2",
    "vstrw.32 q1, [r0], #16",
    "vadd.f32 s24, s24, s4",
    "vadd.f32 s24, s24, s5",
    "vadd.f32 s24, s24, s6",
    "vadd.f32 s24, s24, s7",
    "le lr, 1b",
    "2:",
    "ldr r2, [sp, #48]",
    "vstr s24, [r2, #4]",
    "vpop {{d8-d13}}",
    "pop {{r2, r4-r11, pc}}",
    ".size txl_softmax_exps_mve, . - txl_softmax_exps_mve",
    ".cpu cortex-m4",
);

/// [`portable::softmax_exps_sum_f32`](crate::kernels::portable::softmax_exps_sum_f32) with
/// Helium: four values an instruction on `libm::expf`'s main path; a group of four with a value
/// off it (the largest values, within `1.5 ln 2` of the maximum, those near underflow, NaNs and
/// infinities) and the last values after whole groups take the FPU kernel, one at a time. The
/// same bits.
#[cfg(target_abi = "eabihf")]
pub fn softmax_exps_sum_f32(values: &mut [f32], max: f32, sum: f32) -> f32 {
    let fpu = crate::kernels::arm::fpu::softmax_exps_sum_f32;
    let n = values.len();
    let mut state = [max, sum];
    let mut at = 0;
    while n - at >= 4 {
        let start = values.as_mut_ptr();
        // SAFETY: `at + 4 * fours <= n`: the kernel reads and writes only those values, reads
        // the ten constants and the two floats of `state` (writing the second), and preserves
        // the callee-saved registers (AAPCS: d8-d13 too).
        let stop = unsafe {
            txl_softmax_exps_mve(
                start.add(at),
                (n - at) / 4,
                state.as_mut_ptr(),
                EXP_CONSTANTS.as_ptr(),
            )
        };
        at = (stop as usize - start as usize) / 4;
        if n - at < 4 {
            break;
        }
        state[1] = fpu(&mut values[at..at + 4], max, state[1]);
        at += 4;
    }
    fpu(&mut values[at..], max, state[1])
}

extern "C" {
    /// Helium: `x[i] = max(x[i], 0)` for `i < n` (`n >= 1`), on the bits as
    /// [`portable::relu`](crate::kernels::portable::relu): a value stays if its bits are in
    /// `1..=0x7f80_0000` (positive, up to infinity), else it becomes `+0.0`.
    fn txl_relu_mve(x: *mut f32, n: usize);
}

// Tail-predicated, integers only (no floating point, so nothing is flushed): per four values
// one VLDRW, the bits less one (VSUB), an unsigned compare with `0x7f80_0000` into the
// predicate (zeros, negative values and NaNs reach it), VPSEL of zero where it holds, one
// VSTRW: 6 instructions per four values with the loop.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_relu_mve,\"ax\",%progbits",
    ".globl txl_relu_mve",
    ".type txl_relu_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_relu_mve:",
    "push {{r7, lr}}",
    "movs r2, #1",
    "mov r3, #0x7f800000",
    "vmov.i32 q2, #0",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vsub.i32 q1, q0, r2",
    "vcmp.u32 cs, q1, r3",
    "vpsel q0, q2, q0",
    "vstrw.32 q0, [r0], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_relu_mve, . - txl_relu_mve",
    ".cpu cortex-m4",
);

/// [`portable::relu`](crate::kernels::portable::relu) with Helium, four values an instruction
/// on the bits. The same bits.
pub fn relu(x: &mut [f32]) {
    if !x.is_empty() {
        // SAFETY: `x` holds `n >= 1` values; the kernel reads and writes only those
        // (tail-predicated) and uses q0-q2 (caller-saved).
        unsafe { txl_relu_mve(x.as_mut_ptr(), x.len()) };
    }
}

/// The FPSCR's cumulative flags that show Helium's floating point may have given other bits
/// than the FPU's IEEE arithmetic: an invalid operation (IOC, bit 0), a result flushed to zero
/// (UFC, bit 3) or a subnormal input flushed (IDC, bit 7).
const FLUSH_FLAGS: u32 = 0x89;

extern "C" {
    /// Helium: for each of `blocks >= 1` blocks of four rows (row `k` of block `b` at `rows +
    /// (4b + k) * stride`, `stride` in bytes) and `quads >= 1` groups of four columns: `out[4b +
    /// k] = ((a0 + a1) + (a2 + a3)) + 0.0`, `a_j` the sum of `row[c] * x[c]` over the columns
    /// `c = j mod 4` in order, each product rounded before it is added (VMUL, VADD). The FPSCR's
    /// cumulative flags are cleared first; returns them at the end (bits 0-4 and 7 of the
    /// FPSCR) with bit 31 set if an output is a NaN.
    fn txl_dots4_mve(
        rows: *const f32,
        stride: usize,
        x: *const f32,
        quads: usize,
        out: *mut f32,
        blocks: usize,
    ) -> u32;
}

// The four partial sums of `portable::dot_f32` are a vector's four lanes: per four columns one
// VLDRW of the inputs shared by the four rows, then per row one VLDRW, VMUL and VADD (13
// instructions per 16 multiply-accumulates); the first four columns set the sums by VMUL (a
// zero's sign then may differ, which the total's `+ 0.0` makes `+0`, as in the FPU kernel
// `txl_dots4x8_f32`). Each row's total by four scalar VADD on its lanes, in the portable order.
// Registers: r0, r4-r6 the rows, r1 the stride, r2 the inputs, r3 the groups after the first,
// r7 the outputs, r8 the blocks left, r9 the step from row 0's end to the next block's, r10
// the NaN lanes seen, r11 a scratch register, r12 the inputs, lr the groups left; q0-q3 the
// sums, q4 the inputs (zero at the end), q5 a row's values then the totals.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".macro txl_dots4_mve_row row, acc, first",
    "vldrw.u32 q5, [\\row], #16",
    ".ifc \\first, first",
    "vmul.f32 \\acc, q5, q4",
    ".else",
    "vmul.f32 q5, q5, q4",
    "vadd.f32 \\acc, \\acc, q5",
    ".endif",
    ".endm",
    ".macro txl_dots4_mve_total out, a0, a1, a2, a3",
    "vadd.f32 \\a0, \\a0, \\a1",
    "vadd.f32 \\a2, \\a2, \\a3",
    "vadd.f32 \\a0, \\a0, \\a2",
    "vadd.f32 \\out, \\a0, s16",
    ".endm",
    ".section .text.txl_dots4_mve,\"ax\",%progbits",
    ".globl txl_dots4_mve",
    ".type txl_dots4_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_dots4_mve:",
    "push {{r4-r11, lr}}",
    "vpush {{d8-d11}}",
    "ldr r7, [sp, #68]", // out: above the 36 + 32 bytes pushed
    "ldr r8, [sp, #72]", // blocks
    "vmrs r11, fpscr",
    "bic r11, r11, #0x9f",
    "vmsr fpscr, r11",
    "lsl r9, r3, #4",
    "rsb r9, r9, r1, lsl #2", // 4 * stride - 16 * quads
    "sub r3, r3, #1",
    "mov r10, #0",
    "1:",
    "add r4, r0, r1",
    "add r5, r4, r1",
    "add r6, r5, r1",
    "mov r12, r2",
    "vldrw.u32 q4, [r12], #16",
    "txl_dots4_mve_row r0, q0, first",
    "txl_dots4_mve_row r4, q1, first",
    "txl_dots4_mve_row r5, q2, first",
    "txl_dots4_mve_row r6, q3, first",
    "wls lr, r3, 3f",
    "2:",
    "vldrw.u32 q4, [r12], #16",
    "txl_dots4_mve_row r0, q0, next",
    "txl_dots4_mve_row r4, q1, next",
    "txl_dots4_mve_row r5, q2, next",
    "txl_dots4_mve_row r6, q3, next",
    "le lr, 2b",
    "3:",
    "vmov.i32 q4, #0",
    "txl_dots4_mve_total s20, s0, s1, s2, s3",
    "txl_dots4_mve_total s21, s4, s5, s6, s7",
    "txl_dots4_mve_total s22, s8, s9, s10, s11",
    "txl_dots4_mve_total s23, s12, s13, s14, s15",
    "vstrw.32 q5, [r7], #16",
    "vcmp.f32 ne, q5, q5",
    "vmrs r11, p0",
    "orr r10, r10, r11",
    "add r0, r0, r9",
    "subs r8, r8, #1",
    "bne 1b",
    "vmrs r0, fpscr",
    "and r0, r0, #0x9f", // the cumulative flags alone (not a comparison's NZCV)
    "cmp r10, #0",
    "it ne",
    "orrne r0, r0, #0x80000000",
    "vpop {{d8-d11}}",
    "pop {{r4-r11, pc}}",
    ".size txl_dots4_mve, . - txl_dots4_mve",
    ".cpu cortex-m4",
);

/// [`portable::dots_strided_f32`](crate::kernels::portable::dots_strided_f32) with Helium: four
/// rows a pass, four columns an instruction, each row's four partial sums in a vector's lanes
/// (the portable order). Helium's floating point flushes subnormal values to zero and gives
/// the default NaN: where its cumulative flags show an invalid operation or a flush, the FPU
/// kernel computes the whole call again, and a row whose output is a NaN (from a NaN in its row
/// or in `x`) again alone, so the bits are always the portable code's. The one to three rows
/// after the whole blocks of four take the kernel over the last four rows (the FPU kernel where
/// that does not run clean). Widths that are not a multiple of four take the FPU kernel.
#[cfg(target_abi = "eabihf")]
pub fn dots_strided_f32(rows: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
    let fpu = crate::kernels::arm::fpu::dots_strided_f32;
    let n = x.len();
    let blocks = out.len() / 4;
    if n == 0 || !n.is_multiple_of(4) || stride < n || blocks == 0 {
        return fpu(rows, stride, x, out);
    }
    let last_end = (4 * blocks - 1) * stride + n;
    assert!(last_end <= rows.len(), "rows out of bounds");
    // SAFETY: the kernel reads `4 * blocks` rows of `n` f32 at a stride of `stride` f32 (the
    // last ends at `last_end`, inside `rows`, checked above) and the `n` of `x`, writes the
    // first `4 * blocks` of `out`, and preserves the callee-saved registers (AAPCS: d8-d11 too).
    let status = unsafe {
        txl_dots4_mve(
            rows.as_ptr(),
            4 * stride,
            x.as_ptr(),
            n / 4,
            out.as_mut_ptr(),
            blocks,
        )
    };
    if status & FLUSH_FLAGS != 0 {
        return fpu(rows, stride, x, out);
    }
    let done = 4 * blocks;
    if status & 1 << 31 != 0 {
        // a NaN output is Helium's default NaN (an invalid operation would have shown in the
        // flags): the FPU's for that row alone, whose bits do not depend on the other rows
        for (r, y) in out[..done].iter_mut().enumerate() {
            if y.is_nan() {
                fpu(
                    &rows[r * stride..r * stride + n],
                    stride,
                    x,
                    core::slice::from_mut(y),
                );
            }
        }
    }
    if done < out.len() {
        // the one to three rows left: the last four rows again (each row's bits are its own),
        // where that runs clean; else the FPU kernel
        let first = out.len() - 4;
        if first >= 1 && (first + 3) * stride + n <= rows.len() {
            let mut last = [0.0f32; 4];
            // SAFETY: as above, for the four rows from row `first` (the last ends inside `rows`,
            // checked) into `last`.
            let status = unsafe {
                txl_dots4_mve(
                    rows[first * stride..].as_ptr(),
                    4 * stride,
                    x.as_ptr(),
                    n / 4,
                    last.as_mut_ptr(),
                    1,
                )
            };
            if status & (FLUSH_FLAGS | 1 << 31) == 0 {
                let left = out.len() - done;
                out[done..].copy_from_slice(&last[4 - left..]);
                return;
            }
        }
        fpu(&rows[done * stride..], stride, x, &mut out[done..]);
    }
}

extern "C" {
    /// Helium: for `4 * groups` values (`groups >= 1`), `round(x[i] * inverse)` as
    /// `int8_attention` rounds (`trunc(y + copysign(0.5, y))` clamped to ±32767), the values
    /// of columns `4g..4g + 4` stored as 16-bit halves in the order of
    /// [`crate::int8_attention::QueryWords`]: columns `4g` and `4g + 2` in word `2g`, `4g + 1`
    /// and `4g + 3` in word `2g + 1`.
    fn txl_query_halves_mve(x: *const f32, words: *mut u32, groups: usize, inverse: u32);
    /// Helium: the largest of the bits of `|x[i]|` (sign cleared) for `i < n`, `n >= 1`, as
    /// unsigned integers.
    fn txl_magnitude_bits_mve(x: *const f32, n: usize) -> u32;
}

// Per four values: `VLDRW`, a subnormal value made +0 (`VAND` of the exponent, `VPT`, `VMOVT`),
// `VMUL` by the inverse, the sign (`VAND`) made ±0.5 (`VORR`), `VADD`, the clamp (`VMAXNM`,
// `VMINNM`), `VCVT` toward zero, and a half each at byte offsets 0, 4, 2, 6 (`VSTRH.32`
// scattered). Registers: q2 the sign bit, q3 and q4 -32767 and 32767, q5 the offsets, q6 the
// exponent bits.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_query_halves_mve,\"ax\",%progbits",
    ".globl txl_query_halves_mve",
    ".type txl_query_halves_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_query_halves_mve:",
    "push {{r7, lr}}",
    "vpush {{d8, d9, d10, d11, d12, d13}}",
    "vmov.i32 q6, #0x7f000000",
    "vorr.i32 q6, #0x00800000",
    "vmov.i32 q2, #0x80000000",
    "movw r12, #0xfe00",
    "movt r12, #0xc6ff",
    "vdup.32 q3, r12",
    "movt r12, #0x46ff",
    "vdup.32 q4, r12",
    "movs r12, #0",
    "vmov.32 q5[0], r12",
    "movs r12, #4",
    "vmov.32 q5[1], r12",
    "movs r12, #2",
    "vmov.32 q5[2], r12",
    "movs r12, #6",
    "vmov.32 q5[3], r12",
    "dls lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vand q1, q0, q6",
    "vpt.i32 eq, q1, zr",
    "vmovt.i32 q0, #0",
    "vmul.f32 q0, q0, r3",
    "vand q1, q0, q2",
    "vorr.i32 q1, #0x3f000000",
    "vadd.f32 q0, q0, q1",
    "vmaxnm.f32 q0, q0, q3",
    "vminnm.f32 q0, q0, q4",
    "vcvt.s32.f32 q0, q0",
    "vstrh.32 q0, [r1, q5]",
    "adds r1, #8",
    "le lr, 1b",
    "vpop {{d8, d9, d10, d11, d12, d13}}",
    "pop {{r7, pc}}",
    ".size txl_query_halves_mve, . - txl_query_halves_mve",
    ".section .text.txl_magnitude_bits_mve,\"ax\",%progbits",
    ".globl txl_magnitude_bits_mve",
    ".type txl_magnitude_bits_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_magnitude_bits_mve:",
    "push {{r7, lr}}",
    "vmov.i32 q0, #0",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q1, [r0], #16",
    "vbic.i32 q1, #0x80000000",
    "vmax.u32 q0, q0, q1",
    "letp lr, 1b",
    "movs r0, #0",
    "vmaxv.u32 r0, q0",
    "pop {{r7, pc}}",
    ".size txl_magnitude_bits_mve, . - txl_magnitude_bits_mve",
    ".cpu cortex-m4",
);

extern "C" {
    /// Helium: for `4 * groups` values (`groups >= 1`) in place, the f32 `w[i]` (its bits)
    /// replaced by the i32 `round(w[i] * inverse)` as `int8_attention` rounds it
    /// (`trunc(y + copysign(0.5, y))` clamped to ±32767).
    fn txl_round_weights_mve(w: *mut u32, groups: usize, inverse: u32);
}

// [`txl_query_halves_mve`]'s rounding in place: per four values `VLDRW`, a subnormal value
// made +0 (`VAND` of the exponent, `VPT`, `VMOVT`), `VMUL` by the inverse, the sign (`VAND`)
// made ±0.5 (`VORR`), `VADD`, the clamp (`VMAXNM`, `VMINNM`), `VCVT` toward zero and `VSTRW`:
// 12 instructions per four weights with the loop's end. Registers: q2 the sign bit, q3 and q4
// -32767 and 32767, q5 the exponent bits.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_round_weights_mve,\"ax\",%progbits",
    ".globl txl_round_weights_mve",
    ".type txl_round_weights_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_round_weights_mve:",
    "push {{r7, lr}}",
    "vpush {{d8, d9, d10, d11}}",
    "vmov.i32 q5, #0x7f000000",
    "vorr.i32 q5, #0x00800000",
    "vmov.i32 q2, #0x80000000",
    "movw r12, #0xfe00",
    "movt r12, #0xc6ff",
    "vdup.32 q3, r12",
    "movt r12, #0x46ff",
    "vdup.32 q4, r12",
    "dls lr, r1",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vand q1, q0, q5",
    "vpt.i32 eq, q1, zr",
    "vmovt.i32 q0, #0",
    "vmul.f32 q0, q0, r2",
    "vand q1, q0, q2",
    "vorr.i32 q1, #0x3f000000",
    "vadd.f32 q0, q0, q1",
    "vmaxnm.f32 q0, q0, q3",
    "vminnm.f32 q0, q0, q4",
    "vcvt.s32.f32 q0, q0",
    "vstrw.32 q0, [r0], #16",
    "le lr, 1b",
    "vpop {{d8, d9, d10, d11}}",
    "pop {{r7, pc}}",
    ".size txl_round_weights_mve, . - txl_round_weights_mve",
    ".cpu cortex-m4",
);

/// The int8 attention's 16-bit probability weights in place (`int8_attention::ProbabilityWords`'s
/// rounding of the f32 weights, their bits in `w`, by `inverse`), four an instruction over the
/// whole groups of four: returns how many of the first weights it rounded, 0 where
/// [`rounds_as_the_fpu`] does not hold (the rest are the caller's). Every weight finite.
pub fn round_weights(w: &mut [i32], inverse: f32) -> usize {
    let groups = w.len() / 4;
    if groups == 0 || !rounds_as_the_fpu(inverse) {
        return 0;
    }
    // SAFETY: reads and writes the first `4 * groups` words of `w`, in bounds; q4-q5
    // (callee-saved) are saved and restored.
    unsafe { txl_round_weights_mve(w.as_mut_ptr().cast(), groups, inverse.to_bits()) };
    4 * groups
}

/// The fields of [`txl_key_scores_mve`], read by offset in the assembly: keep the order.
#[repr(C)]
struct KeyScores {
    /// The sums in (i32), the scores out.
    out: *mut f32,
    /// Key 0's scale.
    scales: *const f32,
    /// Bytes from a key's scale to the scale four keys on.
    scales_step: usize,
    /// The lowest of the first four keys' terms.
    terms: *const f32,
    /// Bytes from the first four keys' lowest term to the next four's (0 or negative).
    terms_step: isize,
    /// Groups of four keys, at least 1.
    quads: usize,
    /// The query's step, f32 bits.
    step: u32,
    /// The scores' scale, f32 bits.
    scale: u32,
    /// Byte offsets of the four keys' scales from the first's.
    scale_offsets: [u32; 4],
    /// Byte offsets of the four keys' terms from the lowest.
    term_offsets: [u32; 4],
    /// The largest score so far of each lane, in and out.
    max: [f32; 4],
}

extern "C" {
    /// Helium: for `4 * quads` keys, `out[k] = (sum_k as f32 * step * key_scale_k + term_k) *
    /// scale` (`sum_k` the i32 in `out[k]`, each product and sum rounded in that order) and
    /// each lane's largest score by `VMAXNM`. The FPSCR's cumulative flags are cleared first;
    /// returns them at the end (bits 0-4 and 7 of the FPSCR) with bit 31 set if a score is a
    /// NaN.
    fn txl_key_scores_mve(args: *mut KeyScores) -> u32;
}

// Per four keys: `VLDRW` of the sums, `VCVT` to f32, `VMUL` by the step, the four keys' scales
// gathered (`VLDRW` by q5's offsets), `VMUL`, their terms gathered (by q6's offsets), `VADD`,
// `VMUL` by the scale, `VSTRW`, `VMAXNM` into the lanes' largest (q4) and a `VADD` into q7, whose
// lanes are NaN at the end if a score was; the two pointers moved on: 14 instructions per four
// keys with the loop's end. Registers: r0 the fields, r1 the scores, r2 the scales, r3 their
// step, r4 the terms, r5 their step, r7 the query's step, r12 the scale.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_key_scores_mve,\"ax\",%progbits",
    ".globl txl_key_scores_mve",
    ".type txl_key_scores_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_key_scores_mve:",
    "push {{r4-r7, lr}}",
    "vpush {{d8-d15}}",
    "ldrd r1, r2, [r0]",
    "ldrd r3, r4, [r0, #8]",
    "ldrd r5, r6, [r0, #16]",
    "ldrd r7, r12, [r0, #24]",
    "vldrw.u32 q5, [r0, #32]",
    "vldrw.u32 q6, [r0, #48]",
    "vldrw.u32 q4, [r0, #64]",
    "vmov.i32 q7, #0",
    "vmrs lr, fpscr",
    "bic lr, lr, #0x9f",
    "vmsr fpscr, lr",
    "dls lr, r6",
    "1:",
    "vldrw.u32 q0, [r1]",
    "vcvt.f32.s32 q0, q0",
    "vmul.f32 q0, q0, r7",
    "vldrw.u32 q1, [r2, q5]",
    "add r2, r2, r3",
    "vmul.f32 q0, q0, q1",
    "vldrw.u32 q2, [r4, q6]",
    "add r4, r4, r5",
    "vadd.f32 q0, q0, q2",
    "vmul.f32 q0, q0, r12",
    "vstrw.32 q0, [r1], #16",
    "vmaxnm.f32 q4, q4, q0",
    "vadd.f32 q7, q7, q0",
    "le lr, 1b",
    "vstrw.32 q4, [r0, #64]",
    "vcmp.f32 ne, q7, q7",
    "vmrs r1, p0",
    "vmrs r0, fpscr",
    "and r0, r0, #0x9f", // the cumulative flags alone (not a comparison's NZCV)
    "cmp r1, #0",
    "it ne",
    "orrne r0, r0, #0x80000000",
    "vpop {{d8-d15}}",
    "pop {{r4-r7, pc}}",
    ".size txl_key_scores_mve, . - txl_key_scores_mve",
    ".cpu cortex-m4",
);

/// [`portable::key_scores_i8`](crate::kernels::portable::key_scores_i8) with Helium over the
/// whole groups of four keys, the keys after them portable. `None` where Helium's floating
/// point may have given other bits than the FPU's (its flags show an invalid operation or a
/// flush, or a score is a NaN, which Helium makes the default NaN): then `out` holds neither
/// the sums nor the scores, and the caller computes them again. The same bits otherwise: the
/// same IEEE operations in the same order for each key; the largest as `VMAXNM` finds it, which
/// differs from the portable one only in which of two zeros it gives.
pub fn key_scores_i8(
    out: &mut [f32],
    key_scales: &[f32],
    heads: usize,
    terms: &[f32],
    (step, scale): (f32, f32),
    max: f32,
) -> Option<f32> {
    use crate::kernels::portable;
    let n = out.len();
    let quads = n / 4;
    let constant = terms.len() == 1;
    if quads == 0 || heads == 0 || !(constant || terms.len() == n) {
        return Some(portable::key_scores_i8(
            out,
            key_scales,
            heads,
            terms,
            (step, scale),
            max,
        ));
    }
    assert!((n - 1) * heads < key_scales.len(), "key scales out of bounds");
    let done = 4 * quads;
    let h = 4 * heads as u32;
    let (terms_from, term_offsets, terms_step) = if constant {
        (terms.as_ptr(), [0; 4], 0)
    } else {
        // keys 4q..4q + 4 take terms[n - 1 - 4q], ..., terms[n - 4 - 4q]
        (terms[n - 4..].as_ptr(), [12, 8, 4, 0], -16)
    };
    let mut args = KeyScores {
        out: out.as_mut_ptr(),
        scales: key_scales.as_ptr(),
        scales_step: 4 * h as usize,
        terms: terms_from,
        terms_step,
        quads,
        step: step.to_bits(),
        scale: scale.to_bits(),
        scale_offsets: [0, h, 2 * h, 3 * h],
        term_offsets,
        max: [max; 4],
    };
    // SAFETY: the kernel reads and writes the first `done <= n` values of `out`, reads the
    // scales of keys `k < done` at `k * heads` (inside `key_scales`: checked above) and their
    // terms (`terms[0]`, or `terms[n - 1 - k]`, `terms.len() == n`), and preserves the
    // callee-saved registers (AAPCS: d8-d15 too).
    let status = unsafe { txl_key_scores_mve(&mut args) };
    if status & (FLUSH_FLAGS | 1 << 31) != 0 {
        return None;
    }
    let max = args.max.into_iter().fold(max, |a, b| if b > a { b } else { a });
    if done == n {
        return Some(max);
    }
    let (terms, rest_scales) = (
        if constant { terms } else { &terms[..n - done] },
        &key_scales[done * heads..],
    );
    Some(portable::key_scores_i8(
        &mut out[done..],
        rest_scales,
        heads,
        terms,
        (step, scale),
        max,
    ))
}

/// The fields of [`txl_value_weights_mve`], read by offset in the assembly: keep the order.
#[repr(C)]
struct ValueWeights {
    /// The exponentials in.
    e: *const f32,
    /// The weights out.
    w: *mut f32,
    /// Key 0's value scale.
    scales: *const f32,
    /// Bytes from a key's scale to the scale four keys on.
    scales_step: usize,
    /// Groups of four keys, at least 1.
    quads: usize,
    /// The softmax's inverse sum, f32 bits.
    inverse: u32,
    /// The largest magnitude so far, in and out.
    max: f32,
    /// The magnitudes' sum so far, in and out.
    sum: f32,
    /// Byte offsets of the four keys' scales from the first's.
    scale_offsets: [u32; 4],
}

extern "C" {
    /// Helium: for `4 * quads` keys, `w[k] = e[k] * inverse * scale_k` (each product rounded,
    /// in that order), the largest `|w[k]|` and `max` by `VMAXNM`, and `|w[k]|` added to `sum`
    /// one at a time in the keys' order with the FPU's scalar `VADD`. The FPSCR's cumulative
    /// flags are cleared first; returns them at the end (bits 0-4 and 7 of the FPSCR).
    fn txl_value_weights_mve(args: *mut ValueWeights) -> u32;
}

// Per four keys: `VLDRW` of the exponentials, `VMUL` by the inverse, the four keys' scales
// gathered (`VLDRW` by q5's offsets, the pointer moved on), `VMUL`, `VSTRW` of the weights,
// `VABS`, `VMAXNM` into the lanes' largest (q4) and four scalar `VADD` into the sum (s28): 13
// instructions per four keys with the loop's end. Registers: r0 the fields, r1 the
// exponentials, r2 the weights, r3 the scales, r4 their step, r6 the inverse, r7 the largest.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_value_weights_mve,\"ax\",%progbits",
    ".globl txl_value_weights_mve",
    ".type txl_value_weights_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_value_weights_mve:",
    "push {{r4-r7, lr}}",
    "vpush {{d8-d15}}",
    "ldrd r1, r2, [r0]",
    "ldrd r3, r4, [r0, #8]",
    "ldrd r5, r6, [r0, #16]",
    "ldr r7, [r0, #24]",
    "vldr s28, [r0, #28]",
    "vdup.32 q4, r7",
    "vldrw.u32 q5, [r0, #32]",
    "vmrs lr, fpscr",
    "bic lr, lr, #0x9f",
    "vmsr fpscr, lr",
    "dls lr, r5",
    "1:",
    "vldrw.u32 q0, [r1], #16",
    "vmul.f32 q0, q0, r6",
    "vldrw.u32 q1, [r3, q5]",
    "add r3, r3, r4",
    "vmul.f32 q0, q0, q1",
    "vstrw.32 q0, [r2], #16",
    "vabs.f32 q0, q0",
    "vmaxnm.f32 q4, q4, q0",
    "vadd.f32 s28, s28, s0",
    "vadd.f32 s28, s28, s1",
    "vadd.f32 s28, s28, s2",
    "vadd.f32 s28, s28, s3",
    "le lr, 1b",
    "vmaxnmv.f32 r7, q4",
    "str r7, [r0, #24]",
    "vstr s28, [r0, #28]",
    "vmrs r0, fpscr",
    "and r0, r0, #0x9f", // the cumulative flags alone (not a comparison's NZCV)
    "vpop {{d8-d15}}",
    "pop {{r4-r7, pc}}",
    ".size txl_value_weights_mve, . - txl_value_weights_mve",
    ".cpu cortex-m4",
);

/// [`portable::value_weights`](crate::kernels::portable::value_weights) with Helium over the
/// whole groups of four keys, the keys after them portable. False where Helium's floating
/// point may have given other bits than the FPU's (its flags show an invalid operation or a
/// flush): then `w` is unspecified and `magnitudes` as it was. The same bits otherwise: the
/// same two IEEE multiplies per key, the sum added by the FPU in the same order, and the
/// largest of magnitudes (never -0) the same value in any order (NaNs ignored both ways).
pub fn value_weights(
    e: &[f32],
    inverse: f32,
    (key_scales, heads): (&[f32], usize),
    w: &mut [f32],
    magnitudes: &mut Magnitudes,
) -> bool {
    use crate::kernels::portable;
    let n = e.len().min(w.len());
    let quads = n / 4;
    if quads == 0 || heads == 0 {
        portable::value_weights(e, inverse, (key_scales, heads), w, magnitudes);
        return true;
    }
    assert!((n - 1) * heads < key_scales.len(), "value scales out of bounds");
    let done = 4 * quads;
    let h = 4 * heads as u32;
    let mut args = ValueWeights {
        e: e.as_ptr(),
        w: w.as_mut_ptr(),
        scales: key_scales.as_ptr(),
        scales_step: 4 * h as usize,
        quads,
        inverse: inverse.to_bits(),
        max: magnitudes.max,
        sum: magnitudes.sum,
        scale_offsets: [0, h, 2 * h, 3 * h],
    };
    // SAFETY: the kernel reads the first `done <= n` values of `e` and the scales of keys `k <
    // done` at `k * heads` (inside `key_scales`: checked above), writes the first `done` of
    // `w`, and preserves the callee-saved registers (AAPCS: d8-d15 too).
    let status = unsafe { txl_value_weights_mve(&mut args) };
    if status & FLUSH_FLAGS != 0 {
        return false;
    }
    (magnitudes.max, magnitudes.sum) = (args.max, args.sum);
    if done == n {
        return true;
    }
    let rest = (&key_scales[done * heads..], heads);
    portable::value_weights(&e[done..n], inverse, rest, &mut w[done..n], magnitudes);
    true
}

extern "C" {
    /// Helium: `out[c] = 0.0 + sums[c] as f32 * step` for `4 * quads` columns (`quads >= 1`),
    /// each product rounded; `step` as f32 bits. The FPSCR's cumulative flags are cleared first;
    /// returns them at the end (bits 0-4 and 7 of the FPSCR).
    fn txl_scaled_sums_mve(sums: *const i32, out: *mut f32, quads: usize, step: u32) -> u32;
}

// Per four columns: `VLDRW`, `VCVT` to f32, `VMUL` by the step, `VADD` to +0 (q2; a -0 product
// becomes +0, as the portable sum) and `VSTRW`: 6 instructions with the loop's end.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_scaled_sums_mve,\"ax\",%progbits",
    ".globl txl_scaled_sums_mve",
    ".type txl_scaled_sums_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scaled_sums_mve:",
    "push {{r7, lr}}",
    "vmrs r12, fpscr",
    "bic r12, r12, #0x9f",
    "vmsr fpscr, r12",
    "vmov.i32 q2, #0",
    "dls lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vcvt.f32.s32 q0, q0",
    "vmul.f32 q0, q0, r3",
    "vadd.f32 q0, q2, q0",
    "vstrw.32 q0, [r1], #16",
    "le lr, 1b",
    "vmrs r0, fpscr",
    "and r0, r0, #0x9f",
    "pop {{r7, pc}}",
    ".size txl_scaled_sums_mve, . - txl_scaled_sums_mve",
    ".cpu cortex-m4",
);

/// [`portable::scaled_sums_i32`](crate::kernels::portable::scaled_sums_i32) with Helium, four
/// columns an instruction over the whole groups of four, the rest portable; where Helium's
/// flags show a flush (a subnormal product) or an invalid operation, the portable code again for
/// all. The same bits: the same conversion, IEEE multiply and addition.
pub fn scaled_sums_i32(sums: &[i32], step: f32, out: &mut [f32]) {
    use crate::kernels::portable;
    let n = sums.len().min(out.len());
    let quads = n / 4;
    if quads == 0 {
        return portable::scaled_sums_i32(sums, step, out);
    }
    // SAFETY: reads the first `4 * quads <= n` sums and writes as many outputs, both in bounds;
    // uses q0 and q2 (caller-saved).
    let status = unsafe { txl_scaled_sums_mve(sums.as_ptr(), out.as_mut_ptr(), quads, step.to_bits()) };
    if status & FLUSH_FLAGS != 0 {
        return portable::scaled_sums_i32(sums, step, out);
    }
    let done = 4 * quads;
    portable::scaled_sums_i32(&sums[done..n], step, &mut out[done..n]);
}

/// Whether Helium's floating point gives the bits of the FPU's for `round(v * inverse)` of any
/// finite `v` (`int8_attention`'s 16-bit rounding): `inverse` zero, or at least 1 and below 1e30
/// (2⁹⁹·⁷). A subnormal `v` (made +0 by the kernel, so nothing is flushed) then rounds to zero
/// as the FPU rounds it (its product is below 2⁻¹²⁶ · 2¹⁰⁰, far below a half), and a normal
/// `v` times an inverse of at least 1 is normal (no product is flushed).
fn rounds_as_the_fpu(inverse: f32) -> bool {
    inverse == 0.0 || (1.0..1.0e30).contains(&inverse)
}

/// The query's 16-bit words of `int8_attention::QueryWords::quantize` from `query`, four
/// columns an instruction: `words[..query.len() / 2]` written. Returns false, with nothing
/// written, where the columns are not whole groups of four or [`rounds_as_the_fpu`] does not
/// hold; every value finite.
pub fn query_halves(query: &[f32], words: &mut [u32], inverse: f32) -> bool {
    let groups = query.len() / 4;
    if groups == 0 || 4 * groups != query.len() || words.len() < 2 * groups || !rounds_as_the_fpu(inverse) {
        return false;
    }
    // SAFETY: reads `4 * groups` values and writes the halves of `2 * groups` words, both in
    // bounds; q4-q6 (callee-saved) are saved and restored.
    unsafe { txl_query_halves_mve(query.as_ptr(), words.as_mut_ptr(), groups, inverse.to_bits()) };
    true
}

/// The largest of the bits of `|v|` (the sign cleared) over `values`, as unsigned integers
/// (which order as the magnitudes do, a NaN's above infinity's), four an instruction: integer
/// operations only, so nothing is flushed. Zero for no values.
pub fn magnitude_bits(values: &[f32]) -> u32 {
    if values.is_empty() {
        return 0;
    }
    // SAFETY: reads the `n >= 1` values of `values` (tail-predicated) and uses q0-q1
    // (caller-saved).
    unsafe { txl_magnitude_bits_mve(values.as_ptr(), values.len()) }
}

extern "C" {
    /// Helium: [`ScaledByBits::apply`](crate::fixed_point::ScaledByBits::apply) of each row
    /// sum `y[i]` by its row scale's bits `bits[i]`, for `i < n` (`n >= 1`), four rows an
    /// instruction, where a lane takes the fast path below: its result stored in place, the
    /// lanes that do not (left as they were) told by `fast`, one predicate (`P0`, four bits a
    /// lane) per four rows. `mantissa` is the scale's 16-bit mantissa `sm`, `offset` is
    /// `31 - k` for [`ScaledByBits::apply_each`]'s `k = base - 17`.
    fn txl_scaled_by_bits_mve(
        bits: *const u32,
        y: *mut i32,
        n: usize,
        mantissa: u32,
        offset: i32,
        fast: *mut u16,
    );
}

// Per four rows, as `ScaledByBits::apply` makes it: the f32's 16-bit mantissa
// `round(f / 2^8) + 2^15` (`f` the 23 bits of the fraction: `VSHL` by 9, then `VRSHR` by 17,
// whose rounding addition does not overflow), its product `p` with `sm`, `m = round(p / 2^(16 +
// up))` (`VRSHL` by `-(16 + up)`, `-up` being `p`'s sign spread by `VSHR.S32`), and
// `v = biased + up + 31 - k = 32 - s` for the rescale's shift `s`. A lane whose `v` is below 32
// (`s` in `1..=32`, a positive normal f32) and whose value keeps its bits once shifted left by
// `a = max(0, v - 15)` (`VQSHL` against `VSHL`) takes
// `VRMULH(x · 2^a, m · 2^(v - a)) = ⌊(x m 2^v + 2^31) / 2^32⌋ = ⌊(x m + 2^(s-1)) / 2^s⌋`, the
// exact rounding (`m · 2^(v - a) ≤ 2^30`), which always fits. Registers: r0 the bits, r1 the
// values, r3 `sm`, r4 `2^15`, r5 16, r6 15, r7 32, r8 `31 - k`, r12 the predicates; q0 the
// bits, then the values, q1 `p`, `m`, then `m · 2^(v - a)`, q2 `-up` then `a`, q3 `v`, then
// the shifted value and the result. `txl_scaled_by_bits_bounded_mve` takes the same steps
// (`txl_rescale_multipliers_mve` makes both kernels' multipliers) without the checks, for a
// call whose rows the caller has found all in range: 19 instructions a block of four rows,
// against 28 and the predicates' scan.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    // four rows' bits at r0 (q0): `m · 2^(v - a)` in q1, `a` in q2, `v` in q3
    ".macro txl_rescale_multipliers_mve",
    "vldrw.u32 q0, [r0], #16",
    "vshl.i32 q1, q0, #9",
    "vrshr.u32 q1, q1, #17",
    "vadd.i32 q1, q1, r4",
    "vmul.i32 q1, q1, r3",  // p
    "vshr.s32 q2, q1, #31", // -up
    "vsub.i32 q3, q2, r5",  // -(16 + up)
    "vrshl.u32 q1, q1, q3", // m
    "vshr.u32 q3, q0, #23",
    "vsub.i32 q3, q3, q2",
    "vadd.i32 q3, q3, r8",  // v
    "vqsub.u32 q2, q3, r6", // a
    "vsub.i32 q0, q3, q2",  // v - a
    "vshl.u32 q1, q1, q0",  // m · 2^(v - a)
    ".endm",
    ".section .text.txl_scaled_by_bits_mve,\"ax\",%progbits",
    ".globl txl_scaled_by_bits_mve",
    ".type txl_scaled_by_bits_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scaled_by_bits_mve:",
    "push {{r4, r5, r6, r7, r8, lr}}",
    "ldr r8, [sp, #24]",
    "ldr r12, [sp, #28]",
    "mov.w r4, #32768",
    "movs r5, #16",
    "movs r6, #15",
    "movs r7, #32",
    "dlstp.32 lr, r2",
    "1:",
    "txl_rescale_multipliers_mve",
    "vcmp.u32 cs, q3, r7", // v ≥ 32: the slow path
    "vldrw.u32 q0, [r1]",
    "vshl.s32 q3, q0, q2",
    "vqshl.s32 q0, q0, q2",
    "vpnot",
    "vpst",
    "vcmpt.i32 eq, q0, q3",
    "vrmulh.s32 q3, q3, q1",
    "vpst",
    "vstrwt.32 q3, [r1]",
    "adds r1, #16",
    "vmrs r2, p0",
    "strh r2, [r12], #2",
    "letp lr, 1b",
    "pop {{r4, r5, r6, r7, r8, pc}}",
    ".size txl_scaled_by_bits_mve, . - txl_scaled_by_bits_mve",
    ".section .text.txl_scaled_by_bits_bounded_mve,\"ax\",%progbits",
    ".globl txl_scaled_by_bits_bounded_mve",
    ".type txl_scaled_by_bits_bounded_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scaled_by_bits_bounded_mve:",
    "push {{r4, r5, r6, r8, lr}}",
    "ldr r8, [sp, #20]",
    "mov.w r4, #32768",
    "movs r5, #16",
    "movs r6, #15",
    "dlstp.32 lr, r2",
    "1:",
    "txl_rescale_multipliers_mve",
    "vldrw.u32 q0, [r1]",
    "vshl.s32 q3, q0, q2",
    "vrmulh.s32 q3, q3, q1",
    "vstrw.32 q3, [r1], #16",
    "letp lr, 1b",
    "pop {{r4, r5, r6, r8, pc}}",
    ".size txl_scaled_by_bits_bounded_mve, . - txl_scaled_by_bits_bounded_mve",
    ".cpu cortex-m4",
);

/// `f(i)` for each value among the first `n` that a kernel left to the scalar code: those whose
/// lane is clear in `fast`, one `VPR.P0` predicate a block of four values (four bits a lane, as
/// `VMRS` of `p0` gives it).
#[inline(always)]
fn each_lane_left(fast: &[u16], n: usize, mut f: impl FnMut(usize)) {
    for (block, &mask) in fast.iter().enumerate().take(n.div_ceil(4)) {
        if mask == 0xFFFF {
            continue;
        }
        for lane in 0..4 {
            let i = 4 * block + lane;
            if i < n && mask >> (4 * lane) & 1 == 0 {
                f(i);
            }
        }
    }
}

/// `y[i] = apply(scales[i].to_bits(), y[i])` for each `i` (as many as the shorter of the two),
/// [`ScaledByBits::apply_each`](crate::fixed_point::ScaledByBits::apply_each)'s loop for
/// `k = base - 17` in `33..=254` and the scale's mantissa `sm`: Helium four rows an
/// instruction where the exact rounding `round(x m / 2^s)` comes from one `VRMULH` (every
/// row of a shift `s` in `17..=32`, and those of a smaller shift whose value is below
/// `2^(14 + s)` in magnitude), `apply` (the scalar definition) for the others. The same bits.
pub fn scaled_by_bits(
    scales: &[f32],
    y: &mut [i32],
    (sm, k): (u32, i32),
    exponents: Option<(i32, i32)>,
    apply: impl Fn(u32, i32) -> i32,
) {
    const CHUNK: usize = 64;
    let n = y.len().min(scales.len());
    let (scales, y) = (&scales[..n], &mut y[..n]);
    if n == 0 {
        return;
    }
    // every row on the fast path, as one pass over the bits and the values finds (the values
    // alone where the caller knows the bits' exponents): no predicates, no lanes left to the
    // scalar code
    let (low, high, largest) = match exponents {
        Some((low, high)) => (low, high, super::helium_integer::largest_magnitude(y)),
        None => {
            // SAFETY: `scales` and `y` hold the same `n >= 1` values; the kernel reads those
            // of both (tail-predicated) and uses q0-q1 (caller-saved).
            let RowsBounds { low, high, largest } =
                unsafe { txl_rows_bounds_mve(scales.as_ptr().cast(), y.as_ptr(), n) };
            (low >> 23, high >> 23, largest)
        }
    };
    // `v = biased + up + 31 - k` within `0..32` for `up` 0 or 1 (a negative scale's bits are
    // negative as `i32`, and so is its exponent), and each value keeps its bits shifted left
    // by the largest `a`
    if low >= k - 31 && high < k {
        let a = high + 17 - k; // the largest `v - 15`
        if a <= 0 || (a <= 16 && largest < 1 << (31 - a)) {
            // SAFETY: `scales` and `y` hold the same `n >= 1` values; the kernel reads those of
            // both and writes those of `y` (tail-predicated), and uses q0-q3 (caller-saved).
            unsafe { txl_scaled_by_bits_bounded_mve(scales.as_ptr().cast(), y.as_mut_ptr(), n, sm, 31 - k) };
            return;
        }
    }
    let mut fast = [0u16; CHUNK / 4];
    for (scales, y) in scales.chunks(CHUNK).zip(y.chunks_mut(CHUNK)) {
        // SAFETY: `scales` and `y` hold the same `1..=64` values; the kernel reads those and
        // writes those of `y` (tail-predicated), one predicate a block of four into `fast`
        // (16 of them), and uses q0-q3 (caller-saved).
        unsafe {
            txl_scaled_by_bits_mve(
                scales.as_ptr().cast(),
                y.as_mut_ptr(),
                y.len(),
                sm,
                31 - k,
                fast.as_mut_ptr(),
            )
        };
        each_lane_left(&fast, y.len(), |i| y[i] = apply(scales[i].to_bits(), y[i]));
    }
}

/// What [`txl_rows_bounds_mve`] finds: the smallest and the largest row scale's bits as `i32`,
/// and the largest magnitude of the values.
#[repr(C)]
struct RowsBounds {
    low: i32,
    high: i32,
    largest: u32,
}

extern "C" {
    /// Helium: [`RowsBounds`] over `i < n` (`n >= 1`), four rows an instruction.
    fn txl_rows_bounds_mve(bits: *const u32, y: *const i32, n: usize) -> RowsBounds;
    /// Helium: [`txl_scaled_by_bits_mve`]'s fast path for every row `i < n` (`n >= 1`), which
    /// the caller has found to hold for all of them: `v` in `0..32` and each value keeping its
    /// bits shifted left by `a`.
    fn txl_scaled_by_bits_bounded_mve(bits: *const u32, y: *mut i32, n: usize, mantissa: u32, offset: i32);
}

// The bounds: `VMINV`/`VMAXV` of the bits as signed values, `VMAXAV` of the values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_rows_bounds_mve,\"ax\",%progbits",
    ".globl txl_rows_bounds_mve",
    ".type txl_rows_bounds_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows_bounds_mve:",
    "push {{r4, r5, r6, lr}}",
    "mvn r4, #0x80000000",
    "mov.w r5, #0x80000000",
    "movs r6, #0",
    "dlstp.32 lr, r3",
    "1:",
    "vldrw.u32 q0, [r1], #16",
    "vminv.s32 r4, q0",
    "vmaxv.s32 r5, q0",
    "vldrw.u32 q1, [r2], #16",
    "vmaxav.s32 r6, q1",
    "letp lr, 1b",
    "stm r0, {{r4, r5, r6}}",
    "pop {{r4, r5, r6, pc}}",
    ".size txl_rows_bounds_mve, . - txl_rows_bounds_mve",
    ".cpu cortex-m4",
);

extern "C" {
    /// Helium: `x[i] = round(x[i] / 2^(s_i + 1))` with `s_i = top2 - (a[i]'s biased exponent,
    /// its sign bit included)` taken as unsigned and at most 31 (then the value is 0), for
    /// `i < n` (`n >= 1`), four values an instruction; returns the largest `|x[i]|` after.
    fn txl_act_shift_mve(x: *mut i32, act: *const f32, n: usize, top2: u32) -> u32;
    /// Helium: `out[i] = round(x[i] · wide / 2^32)` clamped to `±127`, for `i < n` (`n >= 1`),
    /// four values an instruction (`VRMULH`).
    fn txl_quantize_rmulh_mve(x: *const i32, out: *mut i8, n: usize, wide: i32);
}

// The shift: `VRSHL` by `-(min(s, 31) + 1)` rounds halves up as `((x >> s) + 1) >> 1` does, and
// gives 0 for a shift of 32 (`round(x / 2^32)` of an `i32`); the largest magnitude by `VMAXAV`.
// The quantization: `VRMULH` is `⌊(x · wide + 2^31) / 2^32⌋`, then `VMIN`/`VMAX` and `VSTRB.32`.
// Registers: q2 `top2`, q3 31 (then 127), q4 -127 is not needed: `VMAX` against `-127` in q2.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_act_shift_mve,\"ax\",%progbits",
    ".globl txl_act_shift_mve",
    ".type txl_act_shift_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_act_shift_mve:",
    "push {{r7, lr}}",
    "vdup.32 q2, r3",
    "vmov.i32 q3, #31",
    "movs r3, #0",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q1, [r1], #16",
    "vldrw.u32 q0, [r0]",
    "vshr.u32 q1, q1, #23",
    "vsub.i32 q1, q2, q1",
    "vmin.u32 q1, q1, q3",
    "vmvn q1, q1",
    "vrshl.s32 q0, q0, q1",
    "vstrw.32 q0, [r0], #16",
    "vmaxav.s32 r3, q0",
    "letp lr, 1b",
    "mov r0, r3",
    "pop {{r7, pc}}",
    ".size txl_act_shift_mve, . - txl_act_shift_mve",
    ".section .text.txl_quantize_rmulh_mve,\"ax\",%progbits",
    ".globl txl_quantize_rmulh_mve",
    ".type txl_quantize_rmulh_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_quantize_rmulh_mve:",
    "push {{r7, lr}}",
    "vdup.32 q1, r3",
    "vmov.i32 q2, #127",
    "vmvn.i32 q3, #126",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vrmulh.s32 q0, q0, q1",
    "vmin.s32 q0, q0, q2",
    "vmax.s32 q0, q0, q3",
    "vstrb.32 q0, [r1], #4",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_quantize_rmulh_mve, . - txl_quantize_rmulh_mve",
    ".cpu cortex-m4",
);

/// [`act_shift`](crate::integer::act_shift)`(x[i], act[i], biased_top)` in place for each `i`
/// (as many as the shorter of the two), four values an instruction; returns the largest
/// magnitude after (0 for none). The same values.
pub fn act_shift(x: &mut [i32], act: &[f32], biased_top: u32) -> u32 {
    let n = x.len().min(act.len());
    if n == 0 {
        return 0;
    }
    // SAFETY: `x` and `act` hold `n >= 1` values; the kernel reads those and writes those of
    // `x` (tail-predicated), and uses q0-q3 (caller-saved).
    unsafe { txl_act_shift_mve(x.as_mut_ptr(), act.as_ptr(), n, biased_top.wrapping_add(2)) }
}

/// `out[i] = round(x[i] · wide / 2^32).clamp(-127, 127)` for each `i` (as many as the shorter
/// of the two), rounded halves up: [`PreparedRescale`](crate::fixed_point::PreparedRescale)'s
/// quantization for a shift of at most 32, four values an instruction.
pub fn quantize_rmulh(x: &[i32], out: &mut [i8], wide: i32) {
    let n = x.len().min(out.len());
    if n == 0 {
        return;
    }
    // SAFETY: `x` and `out` hold `n >= 1` values; the kernel reads those of `x` and writes
    // those of `out` (tail-predicated), and uses q0-q3 (caller-saved).
    unsafe { txl_quantize_rmulh_mve(x.as_ptr(), out.as_mut_ptr(), n, wide) }
}

/// What [`txl_layer_norm_mve`] takes besides its slices: the rescale's `sm` and `31 - k` (as
/// [`txl_scaled_by_bits_mve`]), the deviations' shift `k` and mean, and where the predicates go.
#[repr(C)]
struct LayerNormParameters {
    mantissa: u32,
    offset: i32,
    shift: u32,
    mean: i32,
    fast: *mut u16,
}

extern "C" {
    /// Helium: LayerNorm's last step for `i < n` (`n >= 1`), four values an instruction:
    /// `out[i] = ±apply(|gain[i]|, (x[i] << shift) - mean)` (the gain's sign) plus `bias[i]`,
    /// saturated, where the rescale takes [`txl_scaled_by_bits_mve`]'s path (as its
    /// predicates in `fast` tell; `out[i]` is not written for the others).
    fn txl_layer_norm_mve(
        x: *const i32,
        gains: *const u32,
        biases: *const i32,
        out: *mut i32,
        n: usize,
        parameters: *const LayerNormParameters,
    );
    /// Helium: [`txl_layer_norm_mve`]'s path for every value `i < n` (`n >= 1`), which the
    /// caller has found to hold for all of them: each gain's `v` in `0..32` and each deviation
    /// keeping its bits shifted left by the largest `a`; no predicates (`fast` unused).
    fn txl_layer_norm_bounded_mve(
        x: *const i32,
        gains: *const u32,
        biases: *const i32,
        out: *mut i32,
        n: usize,
        parameters: *const LayerNormParameters,
    );
}

// [`txl_scaled_by_bits_mve`]'s rescale of the deviation `(x << shift) - mean` by the gain's
// magnitude (its biased exponent from the bits shifted left by one; the mantissa's bits are
// the same), then the gain's sign (`(y ^ s) - s`, `s` the sign spread: the rescaled value is
// below 2^30 in magnitude, so negating it cannot overflow) and `VQADD` of the bias (saturated
// as `i32::saturating_add`). Registers: r0-r3 the slices, r4 the predicate, r5 `sm`, r6
// `31 - k`, r7 the shift, r8 the mean, r9 the predicates, r10 16, r11 15, r12 `2^15`, lr the
// values left; q0 the gains, q1 `p`, `m`, then `m · 2^(v - a)`, q2 `-up` then `a`, q3 `v`
// then the deviations, q4 the shifted deviation and the result, q5 its saturated shift, the
// sign, then the biases, q7 32.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    // the two kernels' common steps: the set-up, a block's gains (`m`, `a` in q2, `v` in
    // q3), its shifted deviations (q4) and its results (q4, before the store)
    ".macro txl_layer_norm_setup_mve",
    "push {{r4-r12, lr}}",
    "vpush {{d8-d15}}",
    "ldr r4, [sp, #104]",
    "ldr r5, [sp, #108]",
    "ldm r5, {{r5-r9}}",
    "movs r10, #16",
    "movs r11, #15",
    "mov.w r12, #32768",
    ".endm",
    ".macro txl_layer_norm_gains_mve",
    "vldrw.u32 q0, [r1], #16",
    "vshl.i32 q1, q0, #9",
    "vrshr.u32 q1, q1, #17",
    "vadd.i32 q1, q1, r12",
    "vmul.i32 q1, q1, r5",  // p
    "vshr.s32 q2, q1, #31", // -up
    "vsub.i32 q3, q2, r10", // -(16 + up)
    "vrshl.u32 q1, q1, q3", // m
    "vshl.i32 q3, q0, #1",
    "vshr.u32 q3, q3, #24",
    "vsub.i32 q3, q3, q2",
    "vadd.i32 q3, q3, r6",   // v
    "vqsub.u32 q2, q3, r11", // a
    ".endm",
    ".macro txl_layer_norm_deviations_mve",
    "vsub.i32 q3, q3, q2", // v - a
    "vshl.u32 q1, q1, q3", // m · 2^(v - a)
    "vldrw.u32 q3, [r0], #16",
    "vshl.s32 q3, r7",
    "vsub.i32 q3, q3, r8", // the deviations
    "vshl.s32 q4, q3, q2",
    ".endm",
    ".macro txl_layer_norm_results_mve",
    "vrmulh.s32 q4, q4, q1",
    "vshr.s32 q5, q0, #31",
    "veor q4, q4, q5",
    "vsub.i32 q4, q4, q5",
    "vldrw.u32 q5, [r2], #16",
    "vqadd.s32 q4, q4, q5",
    ".endm",
    ".section .text.txl_layer_norm_mve,\"ax\",%progbits",
    ".globl txl_layer_norm_mve",
    ".type txl_layer_norm_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_layer_norm_mve:",
    "txl_layer_norm_setup_mve",
    "vmov.i32 q7, #32",
    "dlstp.32 lr, r4",
    "1:",
    "txl_layer_norm_gains_mve",
    "vcmp.u32 cs, q3, q7", // v ≥ 32: the slow path
    "txl_layer_norm_deviations_mve",
    "vqshl.s32 q5, q3, q2",
    "vpnot",
    "vpst",
    "vcmpt.i32 eq, q4, q5",
    "txl_layer_norm_results_mve",
    "vpst",
    "vstrwt.32 q4, [r3]",
    "adds r3, #16",
    "vmrs r4, p0",
    "strh r4, [r9], #2",
    "letp lr, 1b",
    "vpop {{d8-d15}}",
    "pop {{r4-r12, pc}}",
    ".size txl_layer_norm_mve, . - txl_layer_norm_mve",
    // the same steps without the checks: 27 instructions the four values, against 38
    ".section .text.txl_layer_norm_bounded_mve,\"ax\",%progbits",
    ".globl txl_layer_norm_bounded_mve",
    ".type txl_layer_norm_bounded_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_layer_norm_bounded_mve:",
    "txl_layer_norm_setup_mve",
    "dlstp.32 lr, r4",
    "1:",
    "txl_layer_norm_gains_mve",
    "txl_layer_norm_deviations_mve",
    "txl_layer_norm_results_mve",
    "vstrw.32 q4, [r3], #16",
    "letp lr, 1b",
    "vpop {{d8-d15}}",
    "pop {{r4-r12, pc}}",
    ".size txl_layer_norm_bounded_mve, . - txl_layer_norm_bounded_mve",
    ".cpu cortex-m4",
);

/// LayerNorm's last step with Helium, four values an instruction: for each `i` (as many as
/// the shortest), `out[i] = finish(gains[i], scaled, biases[i])` of
/// `scaled = apply(gains[i] & 0x7FFF_FFFF, (x[i] << shift) - mean)`, `apply` the scalar
/// [`ScaledByBits::apply`](crate::fixed_point::ScaledByBits::apply) of a rescale of `sm` and
/// `k` in `33..=254` (as [`scaled_by_bits`]), `finish` the sign and the bias, saturated
/// (`±scaled` then `saturating_add`). Every `(x[i] << shift) - mean` must not overflow.
/// `bounds`: the smallest and largest biased exponent of the gains' magnitudes and the largest
/// deviation's magnitude, where the caller knows them: a row they show all on the fast path
/// takes one kernel without checks. The same bits.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    x: &[i32],
    gains: &[u32],
    biases: &[i32],
    out: &mut [i32],
    (shift, mean): (u32, i32),
    (sm, k): (u32, i32),
    bounds: Option<((i32, i32), u32)>,
    apply: impl Fn(u32, i32) -> i32,
    finish: impl Fn(u32, i32, i32) -> i32,
) {
    const CHUNK: usize = 64;
    let n = x.len().min(gains.len()).min(biases.len()).min(out.len());
    // every value on the fast path, as the gains' exponents (`low..=high`) and the largest
    // deviation tell: `v = exponent + up + 31 - k` within `0..32` for `up` 0 or 1, and each
    // deviation keeping its bits shifted left by the largest `a = v - 15`
    if let Some(((low, high), largest)) = bounds {
        let a = (high + 17 - k).max(0);
        if n > 0 && low + 31 - k >= 0 && high + 32 - k < 32 && a <= 16 && largest < 1 << (31 - a) {
            let parameters = LayerNormParameters {
                mantissa: sm,
                offset: 31 - k,
                shift,
                mean,
                fast: core::ptr::null_mut(),
            };
            // SAFETY: the four slices hold at least `n >= 1` values; the kernel reads those of
            // `x`, `gains` and `biases`, writes those of `out` (tail-predicated), and saves the
            // q4-q7 it uses.
            unsafe {
                txl_layer_norm_bounded_mve(
                    x.as_ptr(),
                    gains.as_ptr(),
                    biases.as_ptr(),
                    out.as_mut_ptr(),
                    n,
                    &parameters,
                )
            };
            return;
        }
    }
    let mut fast = [0u16; CHUNK / 4];
    for start in (0..n).step_by(CHUNK) {
        let end = n.min(start + CHUNK);
        let (x, gains, biases, out) = (
            &x[start..end],
            &gains[start..end],
            &biases[start..end],
            &mut out[start..end],
        );
        let parameters = LayerNormParameters {
            mantissa: sm,
            offset: 31 - k,
            shift,
            mean,
            fast: fast.as_mut_ptr(),
        };
        // SAFETY: the four slices hold the same `1..=64` values; the kernel reads those of
        // `x`, `gains` and `biases`, writes those of `out` (tail-predicated) and one predicate
        // a block of four into `fast` (16 of them), and saves the q4-q7 it uses.
        unsafe {
            txl_layer_norm_mve(
                x.as_ptr(),
                gains.as_ptr(),
                biases.as_ptr(),
                out.as_mut_ptr(),
                out.len(),
                &parameters,
            )
        };
        each_lane_left(&fast, out.len(), |i| {
            let scaled = apply(gains[i] & 0x7FFF_FFFF, (x[i] << shift).wrapping_sub(mean));
            out[i] = finish(gains[i], scaled, biases[i]);
        });
    }
}

extern "C" {
    /// Helium: for `x[..n]` (`n >= 1`), `out = [smallest, sum's low word, sum's high word,
    /// largest]` (the sum exact in 64 bits, `VADDLVA`; `VMINV`, `VMAXV`).
    fn txl_sum_range_mve(x: *const i32, n: usize, out: *mut i32);
    /// Helium: `Σ c²` over `x[..n]` (`n >= 1`) of `c = round((x << shift) - mean) / 2^s)`
    /// (halves up, `VRSHL` by `-s`), in 64 bits (`VMLALDAVA`); `negative_s` is `-s`.
    fn txl_squares_mve(x: *const i32, n: usize, shift: u32, mean: i32, negative_s: i32) -> u64;
}

global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_sum_range_mve,\"ax\",%progbits",
    ".globl txl_sum_range_mve",
    ".type txl_sum_range_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_sum_range_mve:",
    "push {{r4, r5, r6, lr}}",
    "movs r4, #0",
    "movs r5, #0",
    "ldr r3, [r0]",
    "mov r6, r3",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vaddlva.s32 r4, r5, q0",
    "vminv.s32 r3, q0",
    "vmaxv.s32 r6, q0",
    "letp lr, 1b",
    "stm r2, {{r3, r4, r5, r6}}",
    "pop {{r4, r5, r6, pc}}",
    ".size txl_sum_range_mve, . - txl_sum_range_mve",
    ".section .text.txl_squares_mve,\"ax\",%progbits",
    ".globl txl_squares_mve",
    ".type txl_squares_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_squares_mve:",
    "push {{r4, r5, r7, lr}}",
    "ldr r12, [sp, #16]",
    "movs r4, #0",
    "movs r5, #0",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vshl.s32 q0, r2",
    "vsub.i32 q0, q0, r3",
    "vrshl.s32 q0, r12",
    "vmlaldava.s32 r4, r5, q0, q0",
    "letp lr, 1b",
    "mov r0, r4",
    "mov r1, r5",
    "pop {{r4, r5, r7, pc}}",
    ".size txl_squares_mve, . - txl_squares_mve",
    ".cpu cortex-m4",
);

/// `(Σ x, min x, max x)` of `x` (`None` for none), the sum exact in 64 bits; four values an
/// instruction.
pub fn sum_range(x: &[i32]) -> Option<(i64, i32, i32)> {
    if x.is_empty() {
        return None;
    }
    let mut out = [0i32; 4];
    // SAFETY: `x` holds `n >= 1` values; the kernel reads those (tail-predicated), writes the
    // four words of `out`, and uses q0 (caller-saved).
    unsafe { txl_sum_range_mve(x.as_ptr(), x.len(), out.as_mut_ptr()) };
    let sum = (out[2] as i64) << 32 | out[1] as u32 as i64;
    Some((sum, out[0], out[3]))
}

/// `Σ c²` of `c = round(((v << shift) - mean) / 2^s)` (halves up) over `v` in `x`, for
/// `s` in `1..=31` and every `(v << shift) - mean` within `i32` and every `|c| ≤ 2^15`; four
/// values an instruction.
pub fn squares(x: &[i32], shift: u32, mean: i32, s: u32) -> u64 {
    if x.is_empty() {
        return 0;
    }
    // SAFETY: `x` holds `n >= 1` values; the kernel reads those (tail-predicated) and uses q0
    // (caller-saved).
    unsafe { txl_squares_mve(x.as_ptr(), x.len(), shift, mean, -(s as i32)) }
}

extern "C" {
    /// Helium: `qb[i] = q[i].saturating_add(b[i])` (`VQADD`) for `i < n` (`n >= 1`); returns
    /// the largest `|qb[i]|` (`VMAXAV`).
    fn txl_query_sums_mve(q: *const i32, b: *const i32, qb: *mut i32, n: usize) -> u32;
    /// Helium: for each of `octets >= 1` groups of eight values `v` at `qb`, four words: the
    /// low halves of `round(v / 2^e)` (halves up, `VRSHL` by `negative_e = -e`) of columns
    /// `4g, 4g + 2` in word `2g` and `4g + 1, 4g + 3` in word `2g + 1` (low half first).
    /// `offsets` is `[0, 1, 4, 5, 2, 3, 6, 7]`.
    fn txl_query_pack_mve(
        qb: *const i32,
        words: *mut u32,
        octets: usize,
        negative_e: i32,
        offsets: *const u32,
    );
}

/// The columns [`txl_query_pack_mve`] gathers: the low halves' (first four), the high halves'.
static QUERY_OFFSETS: [u32; 8] = [0, 1, 4, 5, 2, 3, 6, 7];

// The sums: per four columns `VLDRW` twice, `VQADD`, `VSTRW`, `VMAXAV`. The words: per eight
// columns two gathers (`VLDRW` with the offsets: columns 0, 1, 4, 5 and 2, 3, 6, 7), two
// `VRSHL`, `VMOVNT` (the second's low halves into the first's high ones) and `VSTRW`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_query_sums_mve,\"ax\",%progbits",
    ".globl txl_query_sums_mve",
    ".type txl_query_sums_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_query_sums_mve:",
    "push {{r4, lr}}",
    "movs r4, #0",
    "dlstp.32 lr, r3",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vldrw.u32 q1, [r1], #16",
    "vqadd.s32 q0, q0, q1",
    "vstrw.32 q0, [r2], #16",
    "vmaxav.s32 r4, q0",
    "letp lr, 1b",
    "mov r0, r4",
    "pop {{r4, pc}}",
    ".size txl_query_sums_mve, . - txl_query_sums_mve",
    ".section .text.txl_query_pack_mve,\"ax\",%progbits",
    ".globl txl_query_pack_mve",
    ".type txl_query_pack_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_query_pack_mve:",
    "push {{r7, lr}}",
    "ldr r12, [sp, #8]",
    "vldrw.u32 q2, [r12]",
    "vldrw.u32 q3, [r12, #16]",
    "dls lr, r2",
    "1:",
    "vldrw.u32 q0, [r0, q2, uxtw #2]",
    "vldrw.u32 q1, [r0, q3, uxtw #2]",
    "adds r0, #32",
    "vrshl.s32 q0, r3",
    "vrshl.s32 q1, r3",
    "vmovnt.i32 q0, q1",
    "vstrw.32 q0, [r1], #16",
    "le lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_query_pack_mve, . - txl_query_pack_mve",
    ".cpu cortex-m4",
);

/// `qb[i] = q[i].saturating_add(b[i])` for each `i` (as many as the shortest); returns the
/// largest `|qb[i]|` (0 for none). Four columns an instruction.
pub fn query_sums(q: &[i32], b: &[i32], qb: &mut [i32]) -> u32 {
    let n = q.len().min(b.len()).min(qb.len());
    if n == 0 {
        return 0;
    }
    // SAFETY: the three slices hold `n >= 1` values; the kernel reads those of `q` and `b`
    // and writes those of `qb` (tail-predicated), and uses q0 and q1 (caller-saved).
    unsafe { txl_query_sums_mve(q.as_ptr(), b.as_ptr(), qb.as_mut_ptr(), n) }
}

/// The words of the first `8 · octets` values of `qb` (`octets ≤ qb.len() / 8`, `words` at
/// least `4 · octets` long) as the query's layout keeps them: columns `4g` and `4g + 2` in word
/// `2g`, `4g + 1` and `4g + 3` in word `2g + 1`, each the low half of `round(v / 2^e)`
/// (halves up; `v` itself for `e = 0`), `e ≤ 31`. Eight columns an instruction.
pub fn query_pack(qb: &[i32], words: &mut [u32], octets: usize, e: u32) {
    let octets = octets.min(qb.len() / 8).min(words.len() / 4);
    if octets == 0 {
        return;
    }
    // SAFETY: `qb` holds `8 · octets` values and `words` `4 · octets`; the kernel reads those
    // (gathered at offsets below 8 from each group's start) and writes these, and uses q0-q3
    // (caller-saved).
    unsafe {
        txl_query_pack_mve(
            qb.as_ptr(),
            words.as_mut_ptr(),
            octets,
            -(e.min(31) as i32),
            QUERY_OFFSETS.as_ptr(),
        )
    }
}

extern "C" {
    /// Helium: for `i < n` (`n >= 1`), the probability of `e = p[i]` in place:
    /// `min(round(⌊e m / 2^32⌋ / 2^t), 32767)` (`VMULH`, `VRSHL` by `negative_t = -t`, `t ≥ 1`)
    /// divided by `2^min(max(e_max - ve[i], 0), 16)`, rounded (`VRSHL`), or 0 where
    /// `e < 2^14`.
    fn txl_probabilities_mve(p: *mut i32, ve: *const i32, n: usize, constants: *const i32);
}

// Per four keys: `VMULH` (the product's high word), `VRSHL`, `VMIN` against 32767, the shift
// `-min(max(e_max - ve, 0), 16)` by `VSUB`, `VMIN`, `VMAX`, then `VRSHL` by it, and `VPSEL` of
// 0 where `e < 2^14` (`VCMP` into the predicate). Registers: r0 the values, r1 the exponents,
// r3 `m`, r4 `-t`, r5 `e_max`, r6 `2^14`; q3 `m`, q4 32767, q6 0, q7 -16.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_probabilities_mve,\"ax\",%progbits",
    ".globl txl_probabilities_mve",
    ".type txl_probabilities_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_probabilities_mve:",
    "push {{r4, r5, r6, lr}}",
    "vpush {{d8-d15}}",
    "ldm r3, {{r3, r4, r5}}",
    "mov.w r6, #16384",
    "vdup.32 q3, r3",
    "vmov.i32 q4, #0x7fff",
    "vmov.i32 q6, #0",
    "vmvn.i32 q7, #15",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vldrw.u32 q1, [r1], #16",
    "vmulh.u32 q2, q0, q3",
    "vrshl.u32 q2, r4",
    "vmin.u32 q2, q2, q4",
    "vsub.i32 q1, q1, r5",
    "vmin.s32 q1, q1, q6",
    "vmax.s32 q1, q1, q7",
    "vrshl.s32 q2, q2, q1",
    "vcmp.u32 cs, q0, r6",
    "vpsel q2, q2, q6",
    "vstrw.32 q2, [r0], #16",
    "letp lr, 1b",
    "vpop {{d8-d15}}",
    "pop {{r4, r5, r6, pc}}",
    ".size txl_probabilities_mve, . - txl_probabilities_mve",
    ".cpu cortex-m4",
);

/// For each key (as many as the shorter of the two): `p[i]` (its `e_j`, `0..=2^30`) becomes
/// its probability `min(round(⌊e m / 2^32⌋ / 2^t), 32767)` shifted right by
/// `min(max(e_max - ve[i], 0), 16)`, rounded (halves up), or 0 where `e_j < 2^14`; `m` below
/// `2^31`, `t` in `1..=64`. Four keys an instruction.
pub fn probabilities(p: &mut [i32], ve: &[i32], (m, t): (u32, u32), e_max: i32) {
    let n = p.len().min(ve.len());
    if n == 0 {
        return;
    }
    let constants = [m as i32, -(t.min(64) as i32), e_max];
    // SAFETY: `p` and `ve` hold `n >= 1` values; the kernel reads those, writes those of `p`
    // (tail-predicated) and reads the three constants, and saves the q4-q7 it uses.
    unsafe { txl_probabilities_mve(p.as_mut_ptr(), ve.as_ptr(), n, constants.as_ptr()) }
}

extern "C" {
    /// Helium: for `i < n` (`n >= 1`), `scores[i] = exp_neg(to_exp_input(largest, scores[i],
    /// 24 - left))` in place; returns their sum (64 bits). `constants` is `[largest, left,
    /// the table's address]`.
    fn txl_exp_scores_mve(scores: *mut i32, n: usize, constants: *const u32) -> u64;
}

// [`exp_neg`](crate::fixed_point::exp_neg) four values an instruction, the same steps: the
// distance `largest - min(v, largest)` shifted left by `left` saturated (`VQSHL.U32`: the
// `u32::MAX` of `to_exp_input`), then at most `2^29` (`exp_neg` gives 0 from there on, and
// `2^29` leads to `n = 46` below, which gives 0 too); `y = ⌊2t log2(e) / 2^32⌋` (`VMULH`),
// `n = y / 2^24`, the fraction's table entries by two gathers (indices below 256 whatever the
// value), the interpolation in 32-bit lanes as the scalar code, and the rounding shift by `n`
// (`VRSHL` by `-n`: 0 for `n ≥ 32`, as `exp_neg`'s `n > 31` gives, the value being at most
// `2^30`); the sum by `VADDLVA`. Registers: r0 the values, r2 `left`, r4 and r5 the table and
// the table one entry on, r6-r7 the sum; q5 `log2(e)` in Q31, q6 `2^29`, q7 `largest`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_exp_scores_mve,\"ax\",%progbits",
    ".globl txl_exp_scores_mve",
    ".type txl_exp_scores_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_exp_scores_mve:",
    "push {{r4, r5, r6, r7, lr}}",
    "sub sp, #4",
    "vpush {{d8-d15}}",
    "ldm r2, {{r3, r4, r5}}",
    "vdup.32 q7, r3",
    "mov r2, r4",
    "mov r4, r5",
    "adds r5, #4",
    "movw r3, #:lower16:3098164009",
    "movt r3, #:upper16:3098164009",
    "vdup.32 q5, r3",
    "mov.w r3, #536870912",
    "vdup.32 q6, r3",
    "movs r6, #0",
    "movs r7, #0",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vmin.s32 q0, q0, q7",
    "vsub.i32 q0, q7, q0",
    "vqshl.u32 q0, r2",
    "vmin.u32 q0, q0, q6",
    "vshl.i32 q0, q0, #1",
    "vmulh.u32 q0, q0, q5", // y
    "vshr.u32 q1, q0, #24", // n
    "vbic.i32 q0, #0xff000000",
    "vshr.u32 q2, q0, #16", // the index
    "vldrw.u32 q3, [r4, q2, uxtw #2]",
    "vldrw.u32 q4, [r5, q2, uxtw #2]",
    "vmovlb.u16 q2, q0",   // between
    "vsub.i32 q4, q3, q4", // the difference
    "vshr.u32 q0, q4, #16",
    "vmul.i32 q0, q0, q2",
    "vshl.i32 q4, q4, #16",
    "vshr.u32 q4, q4, #16",
    "vmul.i32 q4, q4, q2",
    "vrshr.u32 q4, q4, #16",
    "vadd.i32 q0, q0, q4", // the step
    "vsub.i32 q3, q3, q0", // the value
    "vneg.s32 q1, q1",
    "vrshl.u32 q3, q3, q1",
    "vstrw.32 q3, [r0], #16",
    "vaddlva.u32 r6, r7, q3",
    "letp lr, 1b",
    "mov r0, r6",
    "mov r1, r7",
    "vpop {{d8-d15}}",
    "add sp, #4",
    "pop {{r4, r5, r6, r7, pc}}",
    ".size txl_exp_scores_mve, . - txl_exp_scores_mve",
    ".cpu cortex-m4",
);

/// `scores[i] = exp_neg(to_exp_input(largest, scores[i], frac))` for each score, `frac` in
/// `0..=24`, `table` being `exp_neg`'s table of `2^-φ`; returns their sum. Four scores an
/// instruction, the same values.
pub fn exp_scores(scores: &mut [i32], largest: i32, frac: u32, table: &[u32; 257]) -> u64 {
    if scores.is_empty() {
        return 0;
    }
    let constants = [largest as u32, 24 - frac.min(24), table.as_ptr() as u32];
    // SAFETY: `scores` holds `n >= 1` values; the kernel reads and writes those
    // (tail-predicated), reads the three constants and the table at indices below 257 (the
    // gathers' indices are a fraction's top 8 bits, and one more), and saves the q4-q7 it
    // uses.
    unsafe { txl_exp_scores_mve(scores.as_mut_ptr(), scores.len(), constants.as_ptr()) }
}

extern "C" {
    /// Helium: `x[i] = x[i].saturating_sub(a).saturating_sub(b)` (`VQSUB` twice) for `i < n`
    /// (`n >= 1`).
    fn txl_sub_sub_mve(x: *mut i32, n: usize, a: i32, b: i32);
}

global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_sub_sub_mve,\"ax\",%progbits",
    ".globl txl_sub_sub_mve",
    ".type txl_sub_sub_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_sub_sub_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vqsub.s32 q0, q0, r2",
    "vqsub.s32 q0, q0, r3",
    "vstrw.32 q0, [r0], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_sub_sub_mve, . - txl_sub_sub_mve",
    ".cpu cortex-m4",
);

/// `x[i] = x[i].saturating_sub(a).saturating_sub(b)` for each value; four values an
/// instruction.
pub fn sub_sub(x: &mut [i32], a: i32, b: i32) {
    if x.is_empty() {
        return;
    }
    // SAFETY: `x` holds `n >= 1` values; the kernel reads and writes those (tail-predicated)
    // and uses q0 (caller-saved).
    unsafe { txl_sub_sub_mve(x.as_mut_ptr(), x.len(), a, b) }
}

/// What [`txl_scores_mve`] takes besides its slices: the rescale's mantissa, `32 - C` for the
/// rescale's shift `C - e`, and where the predicates go.
#[repr(C)]
struct ScoreParameters {
    mantissa: u32,
    offset: i32,
    fast: *mut u16,
}

extern "C" {
    /// Helium: for `i < n` (`n >= 1`), with `e = min(ce[i], pe[i])`, `a = ce[i] - e`,
    /// `b = pe[i] - e`: where `a, b ≤ 3`, the shift `s = C - e` is in `1..=32` and the sum
    /// `x = (scores[i] << a) + (position[i] << b)` keeps its bits shifted left by
    /// `max(0, 17 - s)`, `scores[i] = round(x m / 2^s)` (halves up); the lanes that take that
    /// path told by `fast`, one predicate a block of four (the others left as they were).
    /// Returns the largest of those lanes' scores (`i32::MIN` for none) in the low word, and
    /// the predicates ANDed together in the high word.
    fn txl_scores_mve(
        scores: *mut i32,
        ce: *const i32,
        position: *const i32,
        pe: *const i32,
        n: usize,
        parameters: *const ScoreParameters,
    ) -> u64;
}

// `attention_score_of_small`'s usual path, four keys an instruction: the sums shifted by their
// exponents' differences (`VSHL` by vector), then [`txl_scaled_by_bits_mve`]'s exact rounding
// `VRMULH(x · 2^a', m · 2^(v - a'))` for `v = 32 - s`, `a' = max(0, v - 15)`. The predicate:
// `a | b ≤ 3` (`VCMP`, `VPNOT`), then `v < 32` and the shifted sum's bits kept (`VCMPT` in
// `VPST` blocks); the fast lanes' largest score by `VMAXV` under the same predicate as their
// store. Registers: r0-r3 the slices, r4 3, r6 `32 - C`, r7 15, r8 the count, r9 the
// predicates, r10 a predicate, r11 the largest score, r12 the predicates ANDed; q0 `ce` then `a`, then `a'`, q1 `pe` then `b`, then `v - a'`, then
// `m · 2^(v - a')`, q2 `e` then `v`, q3 `a | b`, then the sum, q4 the position, the shifted
// sum and the result, q5 the sum shifted with saturation, q6 32, q7 `m`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_scores_mve,\"ax\",%progbits",
    ".globl txl_scores_mve",
    ".type txl_scores_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scores_mve:",
    "push {{r4-r11, lr}}",
    "vpush {{d8-d15}}",
    "ldr r4, [sp, #100]",
    "ldr r5, [sp, #104]",
    "mov.w r11, #0x80000000",
    "movw r12, #0xffff",
    "ldm r5, {{r5, r6, r9}}",
    "vdup.32 q7, r5",
    "vmov.i32 q6, #32",
    "movs r7, #15",
    "mov r8, r4",
    "movs r4, #3",
    "dlstp.32 lr, r8",
    "1:",
    "vldrw.u32 q0, [r1], #16",
    "vldrw.u32 q1, [r3], #16",
    "vmin.s32 q2, q0, q1", // e
    "vsub.i32 q0, q0, q2", // a
    "vsub.i32 q1, q1, q2", // b
    "vorr q3, q0, q1",
    "vcmp.u32 hi, q3, r4", // a | b > 3: the slow path
    "vadd.i32 q2, q2, r6", // v
    "vldrw.u32 q3, [r0]",
    "vshl.s32 q3, q3, q0",
    "vldrw.u32 q4, [r2], #16",
    "vshl.s32 q4, q4, q1",
    "vadd.i32 q3, q3, q4",  // the sum
    "vqsub.u32 q0, q2, r7", // a'
    "vsub.i32 q1, q2, q0",  // v - a'
    "vshl.u32 q1, q7, q1",  // m · 2^(v - a')
    "vshl.s32 q4, q3, q0",
    "vqshl.s32 q5, q3, q0",
    "vpnot",
    "vpst",
    "vcmpt.u32 hi, q6, q2",
    "vpst",
    "vcmpt.i32 eq, q4, q5",
    "vrmulh.s32 q4, q4, q1",
    "vpstt",
    "vstrwt.32 q4, [r0]",
    "vmaxvt.s32 r11, q4",
    "adds r0, #16",
    "vmrs r10, p0",
    "strh r10, [r9], #2",
    "and r12, r12, r10",
    "letp lr, 1b",
    "mov r0, r11",
    "mov r1, r12",
    "vpop {{d8-d15}}",
    "pop {{r4-r11, pc}}",
    ".size txl_scores_mve, . - txl_scores_mve",
    ".cpu cortex-m4",
);

/// [`attention_score_of_small`](crate::integer::attention_score_of_small) of each key
/// (`scores[i]` its content sum, `ce[i]` its power of two, `position[i]` and `pe[i]` the
/// position sum's) in place, for the rescale `inv_sqrt_d_head · 2^-(C - e)` (`C` the rescale's
/// shift at `e = 0`); returns the largest score. Helium four keys an instruction where the
/// rescale's exact rounding comes from one `VRMULH`, `slow(i)` (the scalar definition) for the
/// others. At most 64 keys (as many as the shortest); the same values.
pub fn scores(
    scores: &mut [i32],
    (ce, position, pe): (&[i32], &[i32], &[i32]),
    (mantissa, shift): (u32, i32),
    slow: impl Fn(usize, i32) -> i32,
) -> i32 {
    let n = scores
        .len()
        .min(ce.len())
        .min(position.len())
        .min(pe.len())
        .min(64);
    let scores = &mut scores[..n];
    if n == 0 {
        return i32::MIN;
    }
    let mut fast = [0u16; 16];
    let parameters = ScoreParameters {
        mantissa,
        offset: 32i32.wrapping_sub(shift),
        fast: fast.as_mut_ptr(),
    };
    // SAFETY: the four slices hold `1..=64` values; the kernel reads those of `ce`,
    // `position` and `pe`, reads and writes those of `scores` (tail-predicated), writes one
    // predicate a block of four into `fast` (16 of them), and saves the q4-q7 and r4-r11 it
    // uses.
    let result = unsafe {
        txl_scores_mve(
            scores.as_mut_ptr(),
            ce.as_ptr(),
            position.as_ptr(),
            pe.as_ptr(),
            n,
            &parameters,
        )
    };
    let mut largest = result as i32;
    // (every lane's predicate set, the tail's too: no lane left)
    if (result >> 32) as u16 != 0xFFFF {
        each_lane_left(&fast, n, |i| {
            scores[i] = slow(i, scores[i]);
            largest = largest.max(scores[i]);
        });
    }
    largest
}

extern "C" {
    /// Helium: `out[k] = words[k · stride_bytes / 4] + add` for `k < n` (`n >= 1`; byte
    /// offsets `k · stride_bytes` below 2^32).
    fn txl_gather_strided_mve(out: *mut i32, words: *const u32, n: usize, stride_bytes: usize, add: i32);
}

/// What [`txl_gather_positions_mve`] takes besides its outputs: the position sums and the
/// position keys' exponents (a row of `row` bytes a distance), the first distance and the power
/// of two added to the exponents.
#[repr(C)]
struct PositionParameters {
    positions: *const i32,
    exponents: *const u8,
    row: usize,
    distance: usize,
    pe: i32,
}

extern "C" {
    /// Helium: for `k < n` (`n >= 1`, `n <= distance + 1`), with `d = distance - k`:
    /// `poss[k] = positions[d]`, `pes[k] = pe + exponents[d · row]`.
    fn txl_gather_positions_mve(
        poss: *mut i32,
        pes: *mut i32,
        n: usize,
        parameters: *const PositionParameters,
    );
}

// The strided words: per four keys one gather (`VLDRW` by byte offsets `k · stride`, the
// offsets from `VIDUP` times the stride), `VADD` of the power of two, `VSTRW` and the offsets'
// step: 5 instructions with the loop's end. The positions: per four keys one word gather (byte
// offsets `4d`) and one byte gather (`d · row`), each offset vector one `VSUB` a step, `VADD` of
// `pe` and two `VSTRW`: 8 instructions with the loop's end. Tail-predicated: the lanes past the
// last key read nothing.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_gather_strided_mve,\"ax\",%progbits",
    ".globl txl_gather_strided_mve",
    ".type txl_gather_strided_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_gather_strided_mve:",
    "push {{r4, lr}}",
    "ldr r4, [sp, #8]",
    "movs r12, #0",
    "vidup.u32 q0, r12, #1",
    "vmul.i32 q0, q0, r3",
    "lsls r3, r3, #2",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q1, [r1, q0]",
    "vadd.i32 q1, q1, r4",
    "vstrw.32 q1, [r0], #16",
    "vadd.i32 q0, q0, r3",
    "letp lr, 1b",
    "pop {{r4, pc}}",
    ".size txl_gather_strided_mve, . - txl_gather_strided_mve",
    ".section .text.txl_gather_positions_mve,\"ax\",%progbits",
    ".globl txl_gather_positions_mve",
    ".type txl_gather_positions_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_gather_positions_mve:",
    "push {{r4, r5, r6, r7, lr}}",
    "ldm r3, {{r3, r4, r5, r6, r7}}",
    "movs r12, #0",
    "vidup.u32 q0, r12, #1",
    "vdup.32 q1, r6",
    "vsub.i32 q1, q1, q0", // d
    "vshl.i32 q2, q1, #2", // 4d
    "vmul.i32 q3, q1, r5", // d · row
    "lsls r5, r5, #2",
    "movs r6, #16",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r3, q2]",
    "vldrb.u32 q1, [r4, q3]",
    "vstrw.32 q0, [r0], #16",
    "vadd.i32 q1, q1, r7",
    "vstrw.32 q1, [r1], #16",
    "vsub.i32 q2, q2, r6",
    "vsub.i32 q3, q3, r5",
    "letp lr, 1b",
    "pop {{r4, r5, r6, r7, pc}}",
    ".size txl_gather_positions_mve, . - txl_gather_positions_mve",
    ".cpu cortex-m4",
);

/// `out[k] = words[k · stride].to_bits() + add` for each `k < out.len()`; at least one word of
/// `words` a key (the last at `(out.len() - 1) · stride`). Four keys an instruction.
pub fn gather_strided(out: &mut [i32], words: &[f32], stride: usize, add: i32) {
    let n = out.len();
    if n == 0 {
        return;
    }
    assert!((n - 1) * stride < words.len(), "strided words out of bounds");
    // SAFETY: the kernel reads the words at `k · stride < words.len()` for `k < n` (checked
    // above; the byte offsets below 2^32, `words` being in memory) and writes the `n` values
    // of `out` (tail-predicated), and uses q0 and q1 (caller-saved).
    unsafe { txl_gather_strided_mve(out.as_mut_ptr(), words.as_ptr().cast(), n, 4 * stride, add) }
}

/// For each `k < poss.len()` (and `pes.len()`, at most `distance + 1`), with
/// `d = distance - k` (`distance < positions.len()`): `poss[k] = positions[d]` and
/// `pes[k] = pe + exponents[d · row]` (`distance · row < exponents.len()`). Four keys an
/// instruction.
pub fn gather_positions(
    (poss, pes): (&mut [i32], &mut [i32]),
    (positions, exponents, row): (&[i32], &[u8], usize),
    distance: usize,
    pe: i32,
) {
    let n = poss.len().min(pes.len());
    if n == 0 {
        return;
    }
    assert!(
        n <= distance + 1 && distance < positions.len() && distance * row < exponents.len(),
        "positions out of bounds"
    );
    let parameters = PositionParameters {
        positions: positions.as_ptr(),
        exponents: exponents.as_ptr(),
        row,
        distance,
        pe,
    };
    // SAFETY: the kernel reads `positions[d]` and `exponents[d · row]` for the `n` distances
    // `d` from `distance` down to `distance + 1 - n >= 0` (all in bounds: checked above), writes
    // the first `n` values of `poss` and `pes` (tail-predicated), and uses q0-q3
    // (caller-saved).
    unsafe { txl_gather_positions_mve(poss.as_mut_ptr(), pes.as_mut_ptr(), n, &parameters) }
}

extern "C" {
    /// Helium: among `i < n` (`n >= 1`) of `e[i] >= threshold` (unsigned), the largest `ve[i]`
    /// (signed; `i32::MIN` for none) in the low word and the largest `e[i]` (unsigned) of the
    /// keys of that `ve` in the high word (0 for none).
    fn txl_top_exponent_mve(e: *const i32, ve: *const i32, n: usize, threshold: u32) -> u64;
}

// One pass, each lane keeping the largest `ve` it saw among the keys from the threshold on (q2)
// and the largest `e` among its keys of that `ve` (q3). Per four keys: two `VLDRW`; the keys of a
// larger `ve` (`VPT` of the threshold, `VCMPT`) take both lanes (`VPSEL` twice); then the keys of
// the lane's `ve` (the same test for equality) raise its `e` (`VMAXT`): 11 instructions with the
// loop's end. After the loop the largest `ve` of the lanes (`VMAXV`), then the largest `e` of the
// lanes of that `ve` (`VMAXVT`).
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_top_exponent_mve,\"ax\",%progbits",
    ".globl txl_top_exponent_mve",
    ".type txl_top_exponent_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_top_exponent_mve:",
    "push {{r7, lr}}",
    "mov.w r12, #0x80000000",
    "vdup.32 q2, r12",
    "vmov.i32 q3, #0",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vldrw.u32 q1, [r1], #16",
    "vpt.u32 cs, q0, r3",
    "vcmpt.s32 gt, q1, q2",
    "vpsel q2, q1, q2",
    "vpsel q3, q0, q3",
    "vpt.u32 cs, q0, r3",
    "vcmpt.i32 eq, q1, q2",
    "vpst",
    "vmaxt.u32 q3, q3, q0",
    "letp lr, 1b",
    "vmaxv.s32 r12, q2",
    "movs r1, #0",
    "vpt.i32 eq, q2, r12",
    "vmaxvt.u32 r1, q3",
    "mov r0, r12",
    "pop {{r7, pc}}",
    ".size txl_top_exponent_mve, . - txl_top_exponent_mve",
    ".cpu cortex-m4",
);

/// Among the keys of `e[i] >= threshold` (as many as the shorter of the two; `e` unsigned): the
/// largest `ve[i]` and the largest `e[i]` of the keys of that `ve`; `None` for no key. Four keys
/// an instruction, one pass.
pub fn top_exponent(e: &[i32], ve: &[i32], threshold: u32) -> Option<(i32, u32)> {
    let n = e.len().min(ve.len());
    if n == 0 {
        return None;
    }
    // SAFETY: `e` and `ve` hold `n >= 1` values; the kernel reads those (tail-predicated) and
    // uses q0-q3 (caller-saved).
    let found = unsafe { txl_top_exponent_mve(e.as_ptr(), ve.as_ptr(), n, threshold) };
    let (top, largest) = (found as i32, (found >> 32) as u32);
    // (a largest `ve` of i32::MIN tells no key; a key of that exponent alone gives the same to
    // the caller, whose result is at least 0)
    (top != i32::MIN).then_some((top, largest))
}

extern "C" {
    /// Helium: `out[i] = sums[i]` shifted left by `amount` with saturation, or right by
    /// `-amount` rounded (halves up) where it is negative (`VQRSHL`), for `i < n` (`n >= 1`).
    fn txl_shift_sums_mve(sums: *const i32, out: *mut i32, n: usize, amount: i32);
}

// Per four values `VLDRW`, `VQRSHL` by the amount, `VSTRW`: 4 instructions with the loop's end.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_shift_sums_mve,\"ax\",%progbits",
    ".globl txl_shift_sums_mve",
    ".type txl_shift_sums_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_shift_sums_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vqrshl.s32 q0, r3",
    "vstrw.32 q0, [r1], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_shift_sums_mve, . - txl_shift_sums_mve",
    ".cpu cortex-m4",
);

/// `out[i] = round_shift_i32(sums[i], -amount)` for `amount` in `-31..=0`, `sums[i] << amount`
/// saturated to the `i32` range for `amount` in `1..=31` (as many as the shorter of the two).
/// Four values an instruction.
pub fn shift_sums(sums: &[i32], out: &mut [i32], amount: i32) {
    let n = sums.len().min(out.len());
    if n == 0 {
        return;
    }
    // SAFETY: `sums` and `out` hold `n >= 1` values; the kernel reads those and writes these
    // (tail-predicated), and uses q0 (caller-saved).
    unsafe { txl_shift_sums_mve(sums.as_ptr(), out.as_mut_ptr(), n, amount.clamp(-31, 31)) }
}

extern "C" {
    /// Helium: `dst[i] = src[i]` for `i < n` (`n >= 1`).
    fn txl_copy_mve(dst: *mut i32, src: *const i32, n: usize);
}

// Per four values one `VLDRW` and one `VSTRW`: 3 instructions with the loop's end (the
// compiler's `memcpy` takes 13 for four words).
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_copy_mve,\"ax\",%progbits",
    ".globl txl_copy_mve",
    ".type txl_copy_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_copy_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r1], #16",
    "vstrw.32 q0, [r0], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_copy_mve, . - txl_copy_mve",
    ".cpu cortex-m4",
);

/// `dst[i] = src[i]`, as many as the shorter of the two: four values an instruction.
pub fn copy(dst: &mut [i32], src: &[i32]) {
    let n = dst.len().min(src.len());
    if n == 0 {
        return;
    }
    // SAFETY: `dst` and `src` hold `n >= 1` values (two slices: no overlap); the kernel reads
    // those and writes these (tail-predicated), and uses q0 (caller-saved).
    unsafe { txl_copy_mve(dst.as_mut_ptr(), src.as_ptr(), n) }
}
