//! Cortex-M kernels for Helium (the M-profile Vector Extension: Cortex-M55, M85; feature
//! `cortex-m-mve`): int8 rows sixteen columns an instruction, and the int8 quantization of an
//! input four values an instruction.

use core::arch::global_asm;
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
    /// Helium: the largest `|x[i]|` of `x[..n]`, `n >= 1` (`VMAXNMA`, so NaNs are ignored),
    /// as f32 bits.
    fn txl_max_abs_mve(x: *const f32, n: usize) -> u32;
    /// Helium: `out[i] = round(x[i] * inverse)` for `i < n`, `n >= 1`, rounded to nearest with
    /// ties away from zero (`VCVTA`), stored as the low byte (`VSTRB.32`); `inverse` as f32
    /// bits.
    fn txl_quantize_mve(x: *const f32, out: *mut i8, n: usize, inverse: u32);
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
    ".cpu cortex-m4",
);

/// The smallest largest magnitude the Helium quantization takes; below it (or for a range
/// that is not finite) [`quantize_i8`] runs the portable code. Helium's floating point may
/// flush subnormal values to zero, where the portable code keeps them: with `max |x| >=
/// 2^-100` that changes nothing. A subnormal `|x| < 2^-126` cannot be the largest, and its
/// quotient `x * 127 / max |x| < 2^-126 * 2^107` rounds to 0 either way; a subnormal product
/// rounds to 0 either way too.
const SMALLEST_RANGE: f32 = 7.888_609e-31; // 2^-100

/// [`portable::quantize_i8`](crate::kernels::portable::quantize_i8) with Helium for an input
/// without activation scales (and as long as `out`): the largest magnitude and the quantization four values an
/// instruction. The same bits: the largest magnitude is the same value in any order (NaNs
/// ignored both ways), the product is one IEEE multiply either way, and `VCVTA` rounds to
/// nearest with ties away from zero, as the portable code's `libm::roundf` formula does (a
/// NaN becomes 0 both ways). Activation scales, and ranges where flushing could show
/// ([`SMALLEST_RANGE`]), take the portable code.
pub fn quantize_i8(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    let n = x.len();
    if act_scales.is_some() || n == 0 || out.len() != n {
        return crate::kernels::portable::quantize_i8(x, act_scales, out);
    }
    // SAFETY: `x` holds `n >= 1` values; the kernel reads only those (tail-predicated) and
    // uses only q0 and q1 of the vector registers (caller-saved under the AAPCS).
    let max_abs = f32::from_bits(unsafe { txl_max_abs_mve(x.as_ptr(), n) });
    if !(max_abs >= SMALLEST_RANGE && max_abs.is_finite()) {
        return crate::kernels::portable::quantize_i8(x, act_scales, out);
    }
    let inverse = 127.0 / max_abs;
    // SAFETY: `x` holds `n >= 1` values and `out` `n` bytes; the kernel reads and writes only
    // those (tail-predicated) and uses only q0 of the vector registers.
    unsafe { txl_quantize_mve(x.as_ptr(), out.as_mut_ptr(), n, inverse.to_bits()) };
    max_abs / 127.0
}

// Per group of 16 columns: one VLDRB of the inputs (shared by the four rows), then per row one
// VLDRB of its weights and one VMLADAVA (16 products added to the row's sum), plus the loop's
// decrement and branch: 11 instructions per 64 multiply-accumulates. VMLADAVA accumulates into
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
    "mov lr, r3",
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
    "subs lr, lr, #1",
    "bne 1b",
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
    if blocks > 0 {
        // SAFETY: `values` holds `4 * blocks <= rows` rows of `cols >= 16 * groups` bytes at
        // stride `cols`, `xq` holds `cols`: the kernel reads only those (byte loads, no alignment
        // needed), writes the first `4 * blocks` of `sums`, and preserves the callee-saved
        // registers (AAPCS; of the vector registers it uses only q0 and q1).
        unsafe {
            txl_rows4_mve(
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
