//! Cortex-M kernels for Helium (the M-profile Vector Extension: Cortex-M55, M85; feature
//! `cortex-m-mve`): int8 rows sixteen columns an instruction.

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
