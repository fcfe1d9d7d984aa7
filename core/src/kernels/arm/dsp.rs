//! Cortex-M kernels for cores with the DSP extension (Armv7E-M: Cortex-M4, M7; Armv8-M Mainline
//! with DSP: M33, M55), enabled by the `cortex-m-dsp` feature.
//!
//! `SMLAD` multiplies two pairs of signed 16-bit halves and adds both products to an
//! accumulator in one instruction; `SXTB16` sign-extends bytes 0 and 2 (or, rotated, 1 and 3)
//! of a word into those halves. Integer sums are exact in any order, so these kernels give the
//! same bits as the portable ones (`Config::validate` bounds the widths so no sum overflows).

use core::arch::{asm, global_asm};

/// Whether the int8 rows 128 and 256 bytes apart take their kernels of fixed stride (the
/// `cortex-m-large-kernels` feature: about 2.5 KB more `.text`); else the kernels of any stride.
const LARGE_KERNELS: bool = cfg!(feature = "cortex-m-large-kernels");

/// Bytes 0 and 2 of `x`, sign-extended into the two 16-bit halves.
#[inline(always)]
fn sxtb16(x: u32) -> u32 {
    let out: u32;
    // SAFETY: SXTB16 only reads and writes registers (Armv7E-M / Armv8-M DSP, which the
    // `cortex-m-dsp` feature promises); no memory, stack or flags are touched.
    unsafe {
        asm!("sxtb16 {out}, {x}", out = lateout(reg) out, x = in(reg) x,
             options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// Bytes 1 and 3 of `x`, sign-extended into the two 16-bit halves.
#[inline(always)]
fn sxtb16_ror8(x: u32) -> u32 {
    let out: u32;
    // SAFETY: as for `sxtb16`: a register-only DSP instruction.
    unsafe {
        asm!("sxtb16 {out}, {x}, ror #8", out = lateout(reg) out, x = in(reg) x,
             options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// `acc + a.lo * b.lo + a.hi * b.hi` on signed 16-bit halves.
#[inline(always)]
fn smlad(a: u32, b: u32, acc: i32) -> i32 {
    let out: i32;
    // SAFETY: SMLAD only reads and writes registers; it may set the Q flag on overflow, which
    // nothing here reads (and the sums cannot overflow, see the module docs).
    unsafe {
        asm!("smlad {out}, {a}, {b}, {acc}", out = lateout(reg) out, a = in(reg) a, b = in(reg) b,
             acc = in(reg) acc, options(pure, nomem, nostack));
    }
    out
}

#[inline(always)]
fn word(bytes: &[i8]) -> u32 {
    u32::from_le_bytes([bytes[0] as u8, bytes[1] as u8, bytes[2] as u8, bytes[3] as u8])
}

/// Widens `xq` into `pairs` for [`row_sums_i8`] and [`row_sums_pair_i8`], once per input: for
/// columns `4g..4g + 4` (whole groups of four; the columns after them stay in `xq`), word `2g`
/// holds columns `4g` and `4g + 2`, word `2g + 1` columns `4g + 1` and `4g + 3`, as signed
/// 16-bit halves: the order `SXTB16` and `SXTB16 ROR #8` put a weight word's bytes in, so one
/// `SMLAD` pairs each weight with its input. `pairs` holds at least `2 * (xq.len() / 4)` words.
pub fn widen_input_i8(xq: &[i8], pairs: &mut [u32]) {
    for (group, out) in xq.chunks_exact(4).zip(pairs.chunks_exact_mut(2)) {
        let x = word(group);
        out[0] = sxtb16(x);
        out[1] = sxtb16_ror8(x);
    }
}

extern "C" {
    /// For each of `blocks` blocks of four rows starting at `rows` (row `k` of block `b` at
    /// `rows + (4b + k) * stride`): `sums[4b + k] = sum over c < 4 * groups of row[c] * x[c]`,
    /// with `x` widened by [`widen_input_i8`] into `pairs` (`2 * groups` words, `groups >= 1`).
    /// In assembly (below) for the register count: four sums, one pair of inputs, two weight
    /// words and four pointers stay in registers through the inner loop.
    fn txl_rows4_s8(
        rows: *const i8,
        stride: usize,
        pairs: *const u32,
        groups: usize,
        sums: *mut i32,
        blocks: usize,
    );
}

// Inner loop, per group of four columns: one LDRD for the inputs, then for each of the four
// rows one LDR, two SXTB16 and two SMLAD: 21 instructions per 16 multiply-accumulates, plus a
// compare and a branch per two groups. Registers there: r0/r12 rows 0/2 (rows 1/3 at +stride),
// r1 the stride, r2 the inputs, r3 their end, r4-r7 the sums, r8/r9 the input pair, r10/r11
// weight words, lr the widened weight. Between blocks the stack frame keeps the inputs' start,
// the step from one block's end to the next block's start, the output pointer and the blocks
// left.
global_asm!(
    ".syntax unified",
    ".thumb",
    // Module-level assembly does not see rustc's target features: name an Armv7E-M core, whose
    // instructions Armv8-M Mainline cores with the DSP extension run as well
    ".cpu cortex-m4",
    ".macro txl_rows4_group",
    "ldrd r8, r9, [r2], #8",
    "ldr r10, [r0, r1]",
    "ldr r11, [r0], #4",
    "sxtb16 lr, r11",
    "smlad r4, lr, r8, r4",
    "sxtb16 r11, r11, ror #8",
    "smlad r4, r11, r9, r4",
    "sxtb16 lr, r10",
    "smlad r5, lr, r8, r5",
    "sxtb16 r10, r10, ror #8",
    "smlad r5, r10, r9, r5",
    "ldr r10, [r12, r1]",
    "ldr r11, [r12], #4",
    "sxtb16 lr, r11",
    "smlad r6, lr, r8, r6",
    "sxtb16 r11, r11, ror #8",
    "smlad r6, r11, r9, r6",
    "sxtb16 lr, r10",
    "smlad r7, lr, r8, r7",
    "sxtb16 r10, r10, ror #8",
    "smlad r7, r10, r9, r7",
    ".endm",
    ".section .text.txl_rows4_s8,\"ax\",%progbits",
    ".globl txl_rows4_s8",
    ".type txl_rows4_s8,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows4_s8:",
    "push {{r4-r11, lr}}",
    "ldr r4, [sp, #36]", // sums
    "ldr r5, [sp, #40]", // blocks
    "lsl r6, r3, #2",
    "rsb r6, r6, r1, lsl #2", // 4 * stride - 4 * groups: one block's end to the next's start
    "add r3, r2, r3, lsl #3", // end of the inputs
    "sub sp, sp, #16",
    "strd r2, r6, [sp]",
    "strd r4, r5, [sp, #8]",
    "cmp r5, #0",
    "beq 5f",
    "4:",
    "add r12, r0, r1, lsl #1",
    "mov r4, #0",
    "mov r5, #0",
    "mov r6, #0",
    "mov r7, #0",
    // an odd number of groups: one group first
    "sub r8, r3, r2",
    "tst r8, #8",
    "beq 2f",
    "txl_rows4_group",
    "2:",
    "cmp r2, r3",
    "beq 3f",
    "1:",
    "txl_rows4_group",
    "txl_rows4_group",
    "cmp r2, r3",
    "bne 1b",
    "3:",
    "ldrd r2, r9, [sp]",
    "add r0, r0, r9",
    "ldrd r8, r9, [sp, #8]",
    "stmia r8!, {{r4-r7}}",
    "subs r9, r9, #1",
    "strd r8, r9, [sp, #8]",
    "bne 4b",
    "5:",
    "add sp, sp, #16",
    "pop {{r4-r11, pc}}",
    ".size txl_rows4_s8, . - txl_rows4_s8",
);

extern "C" {
    /// [`txl_rows4_s8`] for rows at a stride of 128 bytes, eight columns a step: for each of
    /// `blocks` blocks of four rows starting at `rows` (word-aligned), `sums[4b + k] = sum over
    /// c < 4 * groups of row[c] * x[c]`, `groups` a multiple of eight.
    fn txl_rows4x8_s8_128(rows: *const i8, pairs: *const u32, groups: usize, sums: *mut i32, blocks: usize);
    /// [`txl_rows4x8_s8_128`] for rows at a stride of 256 bytes.
    fn txl_rows4x8_s8_256(rows: *const i8, pairs: *const u32, groups: usize, sums: *mut i32, blocks: usize);
    /// [`txl_rows4x8_s8_128`] for rows of exactly 128 columns (`groups` 32) and `blocks >= 1`.
    fn txl_rows4x32_s8_128(rows: *const i8, pairs: *const u32, sums: *mut i32, blocks: usize);
    /// [`txl_rows4x8_s8_256`] for rows of exactly 256 columns (`groups` 64) and `blocks >= 1`.
    fn txl_rows4x64_s8_256(rows: *const i8, pairs: *const u32, sums: *mut i32, blocks: usize);
    /// [`txl_rows4x8_s8_128`] for rows of exactly 32 columns (`groups` 8: the keys of a head of
    /// 32 in a memory 128 wide) and `blocks >= 1`.
    fn txl_rows4x8_whole_s8_128(rows: *const i8, pairs: *const u32, sums: *mut i32, blocks: usize);
}

// The same products as `txl_rows4_s8`, with each row's eight columns loaded by one LDRD: for a
// stride the assembler knows, rows 1-3 are immediate offsets from row 0 (up to 1020 bytes), so
// one pointer serves the four rows and the registers hold two groups of inputs. Per eight
// columns: one LDM of the inputs, then per row one LDRD, four SXTB16 and four SMLAD (37
// instructions per 32 multiply-accumulates), plus a compare and a branch per 32 columns.
// Registers: r0 row 0, r1 the widened weight, r2 the inputs, r3 their end, r4-r7 the sums,
// r8-r11 the two groups' input pairs, r12/lr the row's two weight words. The frame keeps the
// inputs' start, the step from one block's end to the next block's start, the output pointer
// and the blocks left.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".macro txl_rows4x8_row acc",
    "sxtb16 r1, r12",
    "smlad \\acc, r1, r8, \\acc",
    "sxtb16 r12, r12, ror #8",
    "smlad \\acc, r12, r9, \\acc",
    "sxtb16 r1, lr",
    "smlad \\acc, r1, r10, \\acc",
    "sxtb16 lr, lr, ror #8",
    "smlad \\acc, lr, r11, \\acc",
    ".endm",
    ".macro txl_rows4x8_octet stride",
    "ldmia r2!, {{r8-r11}}",
    "ldrd r12, lr, [r0, #\\stride]",
    "txl_rows4x8_row r5",
    "ldrd r12, lr, [r0, #2 * \\stride]",
    "txl_rows4x8_row r6",
    "ldrd r12, lr, [r0, #3 * \\stride]",
    "txl_rows4x8_row r7",
    "ldrd r12, lr, [r0], #8",
    "txl_rows4x8_row r4",
    ".endm",
    ".macro txl_rows4x8_fn name, stride",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r4-r11, lr}}",
    "ldr r5, [sp, #36]", // blocks
    "sub sp, sp, #16",
    "mov r4, #4 * \\stride",
    "sub r4, r4, r2, lsl #2", // 4 * stride - 4 * groups: one block's end to the next's start
    "strd r1, r4, [sp]",
    "strd r3, r5, [sp, #8]",
    "add r3, r1, r2, lsl #3", // end of the inputs
    "mov r2, r1",
    "cmp r5, #0",
    "beq 5f",
    "4:",
    "mov r4, #0",
    "mov r5, #0",
    "mov r6, #0",
    "mov r7, #0",
    "1:",
    ".rept 4",
    "txl_rows4x8_octet \\stride",
    ".endr",
    "cmp r2, r3",
    "bne 1b",
    "ldrd r2, r9, [sp]",
    "add r0, r0, r9",
    "ldrd r8, r9, [sp, #8]",
    "stmia r8!, {{r4-r7}}",
    "subs r9, r9, #1",
    "strd r8, r9, [sp, #8]",
    "bne 4b",
    "5:",
    "add sp, sp, #16",
    "pop {{r4-r11, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_rows4x8_fn txl_rows4x8_s8_128, 128",
    "txl_rows4x8_fn txl_rows4x8_s8_256, 256",
    // `txl_rows4x32_s8_128`: rows of exactly 128 columns one after the other, the sixteen
    // octets of a block without a loop, the first setting the sums (SMUAD): 598 instructions
    // per block of 512 multiply-accumulates (`txl_rows4x64_s8_256`: 256 columns, 1190 per
    // 1024; `txl_rows4x8_whole_s8_128`: 32 columns at that stride, the keys of a head, 154 per
    // 128). Registers as above; r3 the output pointer, the frame the inputs' start and the
    // outputs' end.
    ".macro txl_rows4x8_row_first acc",
    "sxtb16 r1, r12",
    "smuad \\acc, r1, r8",
    "sxtb16 r12, r12, ror #8",
    "smlad \\acc, r12, r9, \\acc",
    "sxtb16 r1, lr",
    "smlad \\acc, r1, r10, \\acc",
    "sxtb16 lr, lr, ror #8",
    "smlad \\acc, lr, r11, \\acc",
    ".endm",
    ".macro txl_rows4_whole_fn name, stride, cols",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r1-r11, lr}}",
    "add r12, r2, r3, lsl #4", // the sums' end, in r3's slot; r3 the output pointer
    "str r12, [sp, #8]",
    "mov r3, r2",
    "4:",
    "ldr r2, [sp]",
    "ldmia r2!, {{r8-r11}}",
    "ldrd r12, lr, [r0, #\\stride]",
    "txl_rows4x8_row_first r5",
    "ldrd r12, lr, [r0, #2 * \\stride]",
    "txl_rows4x8_row_first r6",
    "ldrd r12, lr, [r0, #3 * \\stride]",
    "txl_rows4x8_row_first r7",
    "ldrd r12, lr, [r0], #8",
    "txl_rows4x8_row_first r4",
    ".rept \\cols / 8 - 1",
    "txl_rows4x8_octet \\stride",
    ".endr",
    "stmia r3!, {{r4-r7}}",
    "addw r0, r0, #4 * \\stride - \\cols",
    "ldr r1, [sp, #8]",
    "cmp r3, r1",
    "bne 4b",
    "pop {{r1-r11, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_rows4_whole_fn txl_rows4x32_s8_128, 128, 128",
    "txl_rows4_whole_fn txl_rows4x64_s8_256, 256, 256",
    "txl_rows4_whole_fn txl_rows4x8_whole_s8_128, 128, 32",
);

extern "C" {
    /// [`txl_rows4_s8`] for two positions at once, two rows per pass: for each of `blocks`
    /// blocks of two rows, `sums_a[2b + k] = row · x_a` and `sums_b[2b + k] = row · x_b`, with
    /// `x_a` and `x_b` widened by [`widen_input_i8`] into `pairs_a` and `pairs_b`. Each weight word
    /// is loaded and widened once for both positions.
    fn txl_rows2x2_s8(
        rows: *const i8,
        stride: usize,
        pairs_a: *const u32,
        pairs_b: *const u32,
        groups: usize,
        sums_a: *mut i32,
        sums_b: *mut i32,
        blocks: usize,
    );
    /// [`txl_rows2x2_s8`] for rows at a stride of 128 bytes, `groups` a multiple of four.
    fn txl_rows2x2_s8_128(
        rows: *const i8,
        pairs_a: *const u32,
        pairs_b: *const u32,
        groups: usize,
        sums_a: *mut i32,
        sums_b: *mut i32,
        blocks: usize,
    );
    /// [`txl_rows2x2_s8_128`] for rows at a stride of 256 bytes.
    fn txl_rows2x2_s8_256(
        rows: *const i8,
        pairs_a: *const u32,
        pairs_b: *const u32,
        groups: usize,
        sums_a: *mut i32,
        sums_b: *mut i32,
        blocks: usize,
    );
}

// Inner loop, per group of four columns: two LDRD (the inputs of both positions), then for each
// of the two rows one LDR, two SXTB16 and four SMLAD: 16 instructions per 16 multiply-
// accumulates, plus three per two groups for the loop (its end is kept on the stack).
// Registers there: r0 row 0 (row 1 at +stride), r1 the stride, r2/r3 the inputs of positions
// a/b, r4/r5 row 0's sums for a/b, r6/r7 row 1's, r8/r9 and r10/r11 the input pairs of a and b,
// r12 a weight word, lr its widened half. The frame keeps the inputs' starts, the step to the
// next block's rows, the inputs' end and the blocks left; the output pointers advance in the
// caller's argument slots.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".macro txl_rows2x2_group row1",
    "ldrd r8, r9, [r2], #8",
    "ldrd r10, r11, [r3], #8",
    "ldr r12, [r0, \\row1]",
    "sxtb16 lr, r12",
    "smlad r6, lr, r8, r6",
    "smlad r7, lr, r10, r7",
    "sxtb16 r12, r12, ror #8",
    "smlad r6, r12, r9, r6",
    "smlad r7, r12, r11, r7",
    "ldr r12, [r0], #4",
    "sxtb16 lr, r12",
    "smlad r4, lr, r8, r4",
    "smlad r5, lr, r10, r5",
    "sxtb16 r12, r12, ror #8",
    "smlad r4, r12, r9, r4",
    "smlad r5, r12, r11, r5",
    ".endm",
    ".section .text.txl_rows2x2_s8,\"ax\",%progbits",
    ".globl txl_rows2x2_s8",
    ".type txl_rows2x2_s8,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_rows2x2_s8:",
    "push {{r4-r11, lr}}",
    "sub sp, sp, #24",
    // arguments on the stack, above the 36 bytes pushed and the 24 of the frame:
    // [sp, #60] groups, [sp, #64] sums_a, [sp, #68] sums_b, [sp, #72] blocks
    "ldr r4, [sp, #60]",
    "lsl r5, r4, #2",
    "rsb r5, r5, r1, lsl #1", // 2 * stride - 4 * groups: one block's end to the next's start
    "add r6, r2, r4, lsl #3", // end of position a's inputs
    "strd r2, r3, [sp]",
    "strd r5, r6, [sp, #8]",
    "ldr r7, [sp, #72]",
    "str r7, [sp, #16]",
    "cmp r7, #0",
    "beq 5f",
    "4:",
    "mov r4, #0",
    "mov r5, #0",
    "mov r6, #0",
    "mov r7, #0",
    "ldr r12, [sp, #12]",
    // an odd number of groups: one group first
    "sub r8, r12, r2",
    "tst r8, #8",
    "beq 2f",
    "txl_rows2x2_group r1",
    "ldr r12, [sp, #12]",
    "2:",
    "cmp r2, r12",
    "beq 3f",
    "1:",
    "txl_rows2x2_group r1",
    "txl_rows2x2_group r1",
    "ldr r12, [sp, #12]",
    "cmp r2, r12",
    "bne 1b",
    "3:",
    "ldr r8, [sp, #64]",
    "strd r4, r6, [r8], #8",
    "str r8, [sp, #64]",
    "ldr r8, [sp, #68]",
    "strd r5, r7, [r8], #8",
    "str r8, [sp, #68]",
    "ldrd r2, r3, [sp]",
    "ldr r8, [sp, #8]",
    "add r0, r0, r8",
    "ldr r8, [sp, #16]",
    "subs r8, r8, #1",
    "str r8, [sp, #16]",
    "bne 4b",
    "5:",
    "add sp, sp, #24",
    "pop {{r4-r11, pc}}",
    ".size txl_rows2x2_s8, . - txl_rows2x2_s8",
    // For a stride the assembler knows: row 1 an immediate offset from row 0, so r1 holds the
    // inputs' end (no load of it per pass), and four groups a loop.
    ".macro txl_rows2x2_fn name, stride",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r4-r11, lr}}",
    "sub sp, sp, #16",
    // arguments on the stack, above the 36 bytes pushed and the 16 of the frame:
    // [sp, #52] sums_a, [sp, #56] sums_b, [sp, #60] blocks
    "ldr r4, [sp, #60]",
    "mov r5, #2 * \\stride",
    "sub r5, r5, r3, lsl #2", // 2 * stride - 4 * groups: one block's end to the next's start
    "strd r1, r2, [sp]",
    "strd r5, r4, [sp, #8]",
    "mov r5, r1",
    "add r1, r1, r3, lsl #3", // end of position a's inputs
    "mov r3, r2",
    "mov r2, r5",
    "cmp r4, #0",
    "beq 5f",
    "4:",
    "mov r4, #0",
    "mov r5, #0",
    "mov r6, #0",
    "mov r7, #0",
    "1:",
    ".rept 4",
    "txl_rows2x2_group #\\stride",
    ".endr",
    "cmp r2, r1",
    "bne 1b",
    "ldr r8, [sp, #52]",
    "strd r4, r6, [r8], #8",
    "str r8, [sp, #52]",
    "ldr r8, [sp, #56]",
    "strd r5, r7, [r8], #8",
    "str r8, [sp, #56]",
    "ldrd r2, r3, [sp]",
    "ldrd r8, r9, [sp, #8]",
    "add r0, r0, r8",
    "subs r9, r9, #1",
    "str r9, [sp, #12]",
    "bne 4b",
    "5:",
    "add sp, sp, #16",
    "pop {{r4-r11, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_rows2x2_fn txl_rows2x2_s8_128, 128",
    "txl_rows2x2_fn txl_rows2x2_s8_256, 256",
);

/// [`row_sums_i8`] for two inputs at once: `sums[p][r] = values[r] · xq[p]` for `p` in 0, 1,
/// each weight loaded and widened once for both (`pairs[p]`: `xq[p]` by [`widen_input_i8`]).
pub fn row_sums_pair_i8(
    values: &[i8],
    cols: usize,
    xq: [&[i8]; 2],
    pairs: [&[u32]; 2],
    sums: [&mut [i32]; 2],
) {
    let [sums_a, sums_b] = sums;
    let [pairs_a, pairs_b] = pairs;
    let rows = sums_a.len().min(sums_b.len());
    let groups = cols / 4;
    let body = groups * 4;
    let (pairs_a, pairs_b) = (&pairs_a[..2 * groups], &pairs_b[..2 * groups]);
    let values = &values[..rows * cols];
    let blocks = rows / 2;
    type Fixed = unsafe extern "C" fn(*const i8, *const u32, *const u32, usize, *mut i32, *mut i32, usize);
    let fixed: Option<Fixed> = match cols {
        128 if LARGE_KERNELS => Some(txl_rows2x2_s8_128),
        256 if LARGE_KERNELS => Some(txl_rows2x2_s8_256),
        _ => None,
    };
    if let (Some(kernel), true, true) = (fixed, groups.is_multiple_of(4), blocks > 0) {
        // SAFETY: as below (`cols = 4 * groups` here), the kernel reading the same rows and
        // inputs and writing the same sums.
        unsafe {
            kernel(
                values.as_ptr(),
                pairs_a.as_ptr(),
                pairs_b.as_ptr(),
                groups,
                sums_a.as_mut_ptr(),
                sums_b.as_mut_ptr(),
                blocks,
            )
        };
    } else if groups > 0 && blocks > 0 {
        // SAFETY: `values` holds `2 * blocks <= rows` rows of `cols >= 4 * groups` bytes at
        // stride `cols`, `pairs_a` and `pairs_b` hold `2 * groups` words each: the kernel reads
        // only those and writes the first `2 * blocks` of `sums_a` and `sums_b`. It preserves
        // the callee-saved registers and the stack pointer (AAPCS).
        unsafe {
            txl_rows2x2_s8(
                values.as_ptr(),
                cols,
                pairs_a.as_ptr(),
                pairs_b.as_ptr(),
                groups,
                sums_a.as_mut_ptr(),
                sums_b.as_mut_ptr(),
                blocks,
            )
        };
    } else {
        sums_a[..2 * blocks].fill(0);
        sums_b[..2 * blocks].fill(0);
    }
    for r in 2 * blocks..rows {
        let row = &values[r * cols..r * cols + body];
        let (mut a, mut b) = (0i32, 0i32);
        for ((w, xa), xb) in row
            .chunks_exact(4)
            .zip(pairs_a.chunks_exact(2))
            .zip(pairs_b.chunks_exact(2))
        {
            let w = word(w);
            let (even, odd) = (sxtb16(w), sxtb16_ror8(w));
            a = smlad(odd, xa[1], smlad(even, xa[0], a));
            b = smlad(odd, xb[1], smlad(even, xb[0], b));
        }
        sums_a[r] = a;
        sums_b[r] = b;
    }
    if body < cols {
        for (r, row) in values.chunks_exact(cols).enumerate() {
            sums_a[r] += crate::kernels::portable::dot_i8(&row[body..], &xq[0][body..]);
            sums_b[r] += crate::kernels::portable::dot_i8(&row[body..], &xq[1][body..]);
        }
    }
}

/// `sums[r] = values[r] · xq` for each row `r < sums.len()` of `values (rows, cols)`: four rows
/// per pass over the inputs, `pairs` being `xq` widened by [`widen_input_i8`]. Equal to the portable
/// dot product of each row.
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], pairs: &[u32], sums: &mut [i32]) {
    let groups = cols / 4;
    let body = groups * 4;
    let values = &values[..sums.len() * cols];
    strided_row_sums(values, cols, groups, pairs, sums);
    if body < cols {
        for (sum, row) in sums.iter_mut().zip(values.chunks_exact(cols)) {
            *sum += crate::kernels::portable::dot_i8(&row[body..], &xq[body..]);
        }
    }
}

/// `sums[r] = Σ_c row_r[c] · x[c]` over the first `4 * groups` columns of row `r` (at
/// `rows[r * stride..]`), `x` in `pairs` as [`widen_input_i8`] lays it out (`2 * groups` words of
/// 16-bit halves: widened int8 inputs, or a 16-bit query): four rows per pass.
fn strided_row_sums(rows: &[i8], stride: usize, groups: usize, pairs: &[u32], sums: &mut [i32]) {
    let count = sums.len();
    let body = groups * 4;
    let pairs = &pairs[..2 * groups];
    let blocks = count / 4;
    if count > 0 {
        assert!((count - 1) * stride + body <= rows.len(), "rows out of bounds");
    }
    let fixed: Option<unsafe extern "C" fn(*const i8, *const u32, usize, *mut i32, usize)> = match stride {
        128 if LARGE_KERNELS => Some(txl_rows4x8_s8_128),
        256 if LARGE_KERNELS => Some(txl_rows4x8_s8_256),
        _ => None,
    };
    let aligned = (rows.as_ptr() as usize).is_multiple_of(4);
    let whole: Option<unsafe extern "C" fn(*const i8, *const u32, *mut i32, usize)> = match (stride, groups) {
        (128, 32) if LARGE_KERNELS => Some(txl_rows4x32_s8_128),
        (256, 64) if LARGE_KERNELS => Some(txl_rows4x64_s8_256),
        (128, 8) if LARGE_KERNELS => Some(txl_rows4x8_whole_s8_128),
        _ => None,
    };
    if let (Some(kernel), true, true) = (whole, aligned, blocks > 0) {
        // SAFETY: as below, the kernel reading the same rows and inputs (eight bytes at a time:
        // the rows are word-aligned, as `LDRD` needs) and writing the same sums.
        unsafe { kernel(rows.as_ptr(), pairs.as_ptr(), sums.as_mut_ptr(), blocks) };
    } else if let (Some(kernel), true, true, true) =
        (fixed, groups > 0 && groups.is_multiple_of(8), aligned, blocks > 0)
    {
        // SAFETY: as below, the kernel reading the same rows and inputs (eight bytes at a time:
        // the rows are word-aligned, as `LDRD` needs, since `rows` and the stride are) and
        // writing the same sums.
        unsafe { kernel(rows.as_ptr(), pairs.as_ptr(), groups, sums.as_mut_ptr(), blocks) };
    } else if groups > 0 && blocks > 0 {
        // SAFETY: `rows` holds `4 * blocks <= count` rows of at least `4 * groups` bytes at
        // `stride` (checked above) and `pairs` holds `2 * groups` words: the kernel reads only
        // those and writes the first `4 * blocks` of `sums`. It preserves the callee-saved
        // registers and the stack pointer (AAPCS); the stack arguments are read from the
        // caller's frame. Unaligned word loads are allowed on Armv7E-M and Armv8-M Mainline.
        unsafe {
            txl_rows4_s8(
                rows.as_ptr(),
                stride,
                pairs.as_ptr(),
                groups,
                sums.as_mut_ptr(),
                blocks,
            )
        };
    } else {
        sums[..4 * blocks].fill(0);
    }
    for (r, sum) in sums.iter_mut().enumerate().skip(4 * blocks) {
        let row = &rows[r * stride..r * stride + body];
        let mut acc = 0i32;
        for (w, x) in row.chunks_exact(4).zip(pairs.chunks_exact(2)) {
            let w = word(w);
            acc = smlad(sxtb16(w), x[0], acc);
            acc = smlad(sxtb16_ror8(w), x[1], acc);
        }
        *sum = acc;
    }
}

/// `sum a[i] * b[i]` in i32, eight products per four `SMLAD`s; equal to `portable::dot_i8`.
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let body = n / 8 * 8;
    let (mut even, mut odd) = (0i32, 0i32);
    for (ca, cb) in a[..body].chunks_exact(8).zip(b[..body].chunks_exact(8)) {
        let (a0, b0) = (word(&ca[..4]), word(&cb[..4]));
        let (a1, b1) = (word(&ca[4..]), word(&cb[4..]));
        even = smlad(sxtb16(a0), sxtb16(b0), even);
        odd = smlad(sxtb16_ror8(a0), sxtb16_ror8(b0), odd);
        even = smlad(sxtb16(a1), sxtb16(b1), even);
        odd = smlad(sxtb16_ror8(a1), sxtb16_ror8(b1), odd);
    }
    even + odd + crate::kernels::portable::dot_i8(&a[body..n], &b[body..n])
}

/// Attention's query · key sums over int8 keys: `sums[t] = Σ_c q[c] · key_t[c]` over the first
/// `4 * groups` columns of key `t` (at `keys[t * stride..]`), the 16-bit query widened into
/// `words` (`2 * groups`; see `int8_attention::QueryWords`): the int8 product's kernel, four
/// keys per pass.
pub fn key_sums_i8(keys: &[i8], stride: usize, groups: usize, words: &[u32], sums: &mut [i32]) {
    strided_row_sums(keys, stride, groups, words, sums);
}

extern "C" {
    /// `acc[c] += Σ_t weights[t] · value_t[c]` for the four columns `c < 4`, value `t` at
    /// `values + t * stride` (`count >= 1` keys; weights 16-bit in i32 words).
    fn txl_value_sums4_s8(values: *const i8, stride: usize, weights: *const i32, count: usize, acc: *mut i32);
}

// Per two keys: one LDRD of their weights, one LDR of each key's four bytes, four SXTB16 and
// eight SMLABB/SMLATB (one per product) and an ADD to the next pair of keys; a compare and a
// branch per two pairs: 17 instructions per 8 multiply-accumulates. Registers: r0 the values,
// r1 the stride, r2 the weights, r3 their end, r4-r7 the sums of columns 0-3, r8/r11 the two
// weights, r9/r12 the two keys' bytes (then columns 0 and 2), r10/lr columns 1 and 3.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".macro txl_value_sums4_pair",
    "ldrd r8, r11, [r2], #8",
    "ldr r9, [r0]",
    "ldr r12, [r0, r1]",
    "add r0, r0, r1, lsl #1",
    "sxtb16 r10, r9, ror #8",
    "sxtb16 r9, r9",
    "sxtb16 lr, r12, ror #8",
    "sxtb16 r12, r12",
    "smlabb r4, r9, r8, r4",
    "smlatb r6, r9, r8, r6",
    "smlabb r5, r10, r8, r5",
    "smlatb r7, r10, r8, r7",
    "smlabb r4, r12, r11, r4",
    "smlatb r6, r12, r11, r6",
    "smlabb r5, lr, r11, r5",
    "smlatb r7, lr, r11, r7",
    ".endm",
    ".section .text.txl_value_sums4_s8,\"ax\",%progbits",
    ".globl txl_value_sums4_s8",
    ".type txl_value_sums4_s8,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_value_sums4_s8:",
    "push {{r4-r11, lr}}",
    "ldr r12, [sp, #36]",
    "ldm r12, {{r4-r7}}",
    "tst r3, #1",
    "add r3, r2, r3, lsl #2",
    "beq 2f",
    // an odd count: one key first
    "ldr r8, [r2], #4",
    "ldr r9, [r0]",
    "add r0, r0, r1",
    "sxtb16 r10, r9, ror #8",
    "sxtb16 r9, r9",
    "smlabb r4, r9, r8, r4",
    "smlatb r6, r9, r8, r6",
    "smlabb r5, r10, r8, r5",
    "smlatb r7, r10, r8, r7",
    "2:",
    // an odd number of pairs left: one pair first, then two pairs a pass
    "sub r12, r3, r2",
    "tst r12, #8",
    "beq 5f",
    "txl_value_sums4_pair",
    "5:",
    "cmp r2, r3",
    "beq 3f",
    "1:",
    "txl_value_sums4_pair",
    "txl_value_sums4_pair",
    "cmp r2, r3",
    "bne 1b",
    "3:",
    "ldr r12, [sp, #36]",
    "stm r12, {{r4-r7}}",
    "pop {{r4-r11, pc}}",
    ".size txl_value_sums4_s8, . - txl_value_sums4_s8",
);

extern "C" {
    /// [`txl_value_sums4_s8`] for `8 * passes` columns of values at a stride of 128 bytes, eight
    /// a pass: `acc[c] += Σ_t weights[t] · value_t[c]` for `c < 8 * passes` (`passes >= 1`),
    /// value `t` at `values + 128 t` (`count >= 1` keys; weights 16-bit in i32 words).
    fn txl_value_sums8_s8_128(
        values: *const i8,
        weights: *const i32,
        count: usize,
        acc: *mut i32,
        passes: usize,
    );
    /// [`txl_value_sums8_s8_128`] for values at a stride of 256 bytes.
    fn txl_value_sums8_s8_256(
        values: *const i8,
        weights: *const i32,
        count: usize,
        acc: *mut i32,
        passes: usize,
    );
    /// [`txl_value_sums8_s8_128`] from zeros: `acc[c] = Σ_t weights[t] · value_t[c]` (the sums
    /// only written).
    fn txl_value_sums8_zero_s8_128(
        values: *const i8,
        weights: *const i32,
        count: usize,
        acc: *mut i32,
        passes: usize,
    );
    /// [`txl_value_sums8_zero_s8_128`] for values at a stride of 256 bytes.
    fn txl_value_sums8_zero_s8_256(
        values: *const i8,
        weights: *const i32,
        count: usize,
        acc: *mut i32,
        passes: usize,
    );
}

// Two keys a pass, eight columns, with `SMLAD` taking both keys' products of a column: their two
// weights packed into one word (PKHBT), and per four columns the two keys' words repacked by
// PKHBT/PKHTB into the bytes (u1 u0 t1 t0) and (u3 u2 t3 t2), whose SXTB16 and SXTB16 ROR 8
// pair each column of key `t` with the same column of key `u`. Per two keys: one LDRD and one
// PKHBT for the weights, then per four columns two LDR, two PKH, four SXTB16 and four SMLAD,
// and an ADD to the next two keys (27 instructions per 16 multiply-accumulates, against 32 four
// columns a pass); a load, a compare and a branch per four passes. The stride is the assembler's:
// the second key's words are immediate offsets. At a stride of 128 bytes the first words' loads
// move to the next two keys (post-indexed) and the second words' are offsets back from there,
// which leaves the ADD out (26 instructions). An odd count takes one key first (SMLABB and
// SMLATB), the flags of the count's low two bits set before (nothing in between sets them),
// then two pairs where the keys left are not a multiple of eight.
// Registers: r0 the values, r2 the weights, r4-r11 the sums of columns 0-7, r3 the packed
// weights, r1/r12/lr the keys' words. The frame keeps the weights' end, the sums' address, the
// weights' start, the count, and the values' and the passes left of the eight columns after.
// The `_zero_` kernels load the eight sums of each pass from `txl_value_zeros` instead of the
// sums' words (a MOVW and a MOVT for their LDR), which spares the caller the sums' clearing.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // the products of the words of key `t` (r12) and key `u` (lr)
    ".macro txl_value_sums8_words a0, a1, a2, a3",
    "pkhbt r1, r12, lr, lsl #16", // (u1 u0 t1 t0)
    "pkhtb lr, lr, r12, asr #16", // (u3 u2 t3 t2)
    "sxtb16 r12, r1",
    "smlad \\a0, r12, r3, \\a0",
    "sxtb16 r1, r1, ror #8",
    "smlad \\a1, r1, r3, \\a1",
    "sxtb16 r12, lr",
    "smlad \\a2, r12, r3, \\a2",
    "sxtb16 lr, lr, ror #8",
    "smlad \\a3, lr, r3, \\a3",
    ".endm",
    ".macro txl_value_sums8_quad stride, offset, a0, a1, a2, a3",
    "ldr r12, [r0, #\\offset]",
    "ldr lr, [r0, #\\stride + \\offset]",
    "txl_value_sums8_words \\a0, \\a1, \\a2, \\a3",
    ".endm",
    ".macro txl_value_sums8_pair stride",
    "ldrd r3, lr, [r2], #8",
    "pkhbt r3, r3, lr, lsl #16", // (w_u w_t)
    ".if \\stride <= 128",
    // the first words of both keys post-indexed, which moves to the next two keys, and the
    // second words back from there (offsets down to -255 bytes)
    "ldr r12, [r0], #\\stride",
    "ldr lr, [r0], #\\stride",
    "txl_value_sums8_words r4, r5, r6, r7",
    "ldr r12, [r0, #4 - 2 * \\stride]",
    "ldr lr, [r0, #4 - \\stride]",
    "txl_value_sums8_words r8, r9, r10, r11",
    ".else",
    "txl_value_sums8_quad \\stride, 0, r4, r5, r6, r7",
    "txl_value_sums8_quad \\stride, 4, r8, r9, r10, r11",
    "add r0, r0, #2 * \\stride",
    ".endif",
    ".endm",
    ".macro txl_value_sums8_single offset, a0, a1, a2, a3",
    "ldr r12, [r0, #\\offset]",
    "sxtb16 r1, r12",
    "sxtb16 r12, r12, ror #8",
    "smlabb \\a0, r1, r3, \\a0",
    "smlatb \\a2, r1, r3, \\a2",
    "smlabb \\a1, r12, r3, \\a1",
    "smlatb \\a3, r12, r3, \\a3",
    ".endm",
    ".section .rodata.txl_value_zeros,\"a\",%progbits",
    ".p2align 2",
    "txl_value_zeros:",
    ".rept 8",
    ".word 0",
    ".endr",
    ".macro txl_value_sums8_fn name, stride, zero",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r4-r11, lr}}",
    "sub sp, sp, #24",
    "add r12, r1, r2, lsl #2", // the weights' end
    "strd r12, r3, [sp]",
    "strd r1, r2, [sp, #8]",
    "ldr r12, [sp, #60]", // the passes of eight columns: above the 36 bytes pushed and the frame
    "strd r0, r12, [sp, #16]",
    "0:", // eight columns
    ".if \\zero",
    "movw r3, :lower16:txl_value_zeros",
    "movt r3, :upper16:txl_value_zeros",
    ".else",
    "ldr r3, [sp, #4]",
    ".endif",
    "ldm r3, {{r4-r11}}",
    "ldr r12, [sp, #12]",
    "lsls r12, r12, #31", // N: an odd count; C: an odd number of pairs
    "ldr r2, [sp, #8]",
    "bpl 2f",
    "ldr r3, [r2], #4",
    "txl_value_sums8_single 0, r4, r5, r6, r7",
    "txl_value_sums8_single 4, r8, r9, r10, r11",
    "add r0, r0, #\\stride",
    "2:",
    "bcc 3f",
    "txl_value_sums8_pair \\stride",
    "3:",
    // the keys left a multiple of four: two pairs first where they are not of eight
    "ldr r1, [sp]",
    "sub r12, r1, r2",
    "tst r12, #16",
    "beq 5f",
    "txl_value_sums8_pair \\stride",
    "txl_value_sums8_pair \\stride",
    "5:",
    "ldr r1, [sp]",
    "cmp r2, r1",
    "beq 4f",
    "1:",
    ".rept 4",
    "txl_value_sums8_pair \\stride",
    ".endr",
    "ldr r1, [sp]",
    "cmp r2, r1",
    "bne 1b",
    "4:",
    "ldr r3, [sp, #4]",
    "stmia r3!, {{r4-r11}}",
    "str r3, [sp, #4]",
    "ldrd r0, r12, [sp, #16]",
    "add r0, r0, #8",
    "subs r12, r12, #1",
    "strd r0, r12, [sp, #16]",
    "bne 0b",
    "add sp, sp, #24",
    "pop {{r4-r11, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_value_sums8_fn txl_value_sums8_s8_128, 128, 0",
    "txl_value_sums8_fn txl_value_sums8_s8_256, 256, 0",
    "txl_value_sums8_fn txl_value_sums8_zero_s8_128, 128, 1",
    "txl_value_sums8_fn txl_value_sums8_zero_s8_256, 256, 1",
);

/// [`value_sums_i8`] into zeros, `acc[c] = Σ_t weights[t] · value_t[c]`, where the eight-column
/// kernels take the values (128 or 256 bytes apart, at least one key and eight columns): the
/// columns it set (a multiple of eight; the caller sets the rest), else 0 with nothing written.
pub fn value_sums_from_zero_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) -> usize {
    let count = weights.len();
    type Eights = unsafe extern "C" fn(*const i8, *const i32, usize, *mut i32, usize);
    let eights: Option<Eights> = match stride {
        128 => Some(txl_value_sums8_zero_s8_128),
        256 => Some(txl_value_sums8_zero_s8_256),
        _ => None,
    };
    let passes = acc.len() / 8;
    let (Some(kernel), true, true) = (eights, passes > 0, count > 0) else {
        return 0;
    };
    let last_end = (count - 1) * stride + 8 * passes;
    assert!(last_end <= values.len(), "value rows out of bounds");
    // SAFETY: as in `value_sums_i8`: the kernel reads the words at `c + t * stride` for
    // `c < 8 * passes` and `t < count`, all inside `values` (checked above), and `count`
    // weights, and writes the first `8 * passes` sums of `acc` (reading none of them); it
    // preserves the callee-saved registers and the stack pointer (AAPCS).
    unsafe { kernel(values.as_ptr(), weights.as_ptr(), count, acc.as_mut_ptr(), passes) };
    8 * passes
}

/// Attention's probability · value sums over int8 values: `acc[c] += Σ_t weights[t] ·
/// value_t[c]` for the first `4 * (acc.len() / 4)` columns (value `t` at `values[t * stride..]`,
/// weights 16-bit), with their sums in registers: eight columns and two keys a pass for values
/// 128 or 256 bytes apart, else four columns a pass.
pub fn value_sums_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    let count = weights.len();
    if count == 0 {
        return;
    }
    type Eights = unsafe extern "C" fn(*const i8, *const i32, usize, *mut i32, usize);
    let eights: Option<Eights> = match stride {
        128 => Some(txl_value_sums8_s8_128),
        256 => Some(txl_value_sums8_s8_256),
        _ => None,
    };
    let mut first = 0;
    let passes = acc.len() / 8;
    if let (Some(kernel), true) = (eights, passes > 0) {
        let last_end = (count - 1) * stride + 8 * passes;
        assert!(last_end <= values.len(), "value rows out of bounds");
        // SAFETY: the kernel reads the words at `c + t * stride` for `c < 8 * passes` and
        // `t < count` (the stride its own), all inside `values` (checked above), `count`
        // weights and the first `8 * passes` sums of `acc`, and writes those sums; it preserves
        // the callee-saved registers and the stack pointer (AAPCS). Unaligned word loads are
        // allowed on Armv7E-M and Armv8-M Mainline.
        unsafe { kernel(values.as_ptr(), weights.as_ptr(), count, acc.as_mut_ptr(), passes) };
        first = 8 * passes;
    }
    for acc in acc[first..].chunks_exact_mut(4) {
        let last_end = (count - 1) * stride + first + 4;
        assert!(last_end <= values.len(), "value rows out of bounds");
        // SAFETY: the kernel reads four bytes at `first + t * stride` for `t < count`, all inside
        // `values` (checked above), `count` weights and the four sums of `acc`, and writes those
        // four sums; it preserves the callee-saved registers and the stack pointer (AAPCS).
        // Unaligned word loads are allowed on Armv7E-M and Armv8-M Mainline.
        unsafe {
            txl_value_sums4_s8(
                values.as_ptr().add(first),
                stride,
                weights.as_ptr(),
                count,
                acc.as_mut_ptr(),
            )
        };
        first += 4;
    }
}

// int4 weights (W4A8). A packed word holds eight columns, byte `k` column `k` in its low nibble
// and column `k + 4` in its high one (`crate::weights`). Masking the word with `0xF000F000`
// after a shift of 12, 4, 8 or 0 bits leaves two nibbles alone at the top of the two 16-bit
// halves, each half then `4096 * q` exactly (a signed 16-bit value): columns (0, 2), (1, 3),
// (4, 6) and (5, 7), the pairs `widen_input_i8` lays out for columns 0..4 and 4..8. So one AND
// (with a shifted register) and one `SMLAD` take two columns, and a group's sum comes out times
// 4096: exact in i32 while `|sum| < 2^19`, which a group of up to 256 columns guarantees
// (`|q * x| <= 8 * 128`); an `ASR #12` gives the group's sum and `SMLAL` adds it, times the
// group's multiplier, to the row's i64 sum.

/// Largest group [`row_sums_i4`] runs in the DSP kernel (see above); larger groups take the
/// portable code.
const INT4_MAX_GROUP: usize = 256;

/// Every code's multiplier, for the kernel's table lookup.
static INT4_MULTIPLIERS: [i32; 256] = {
    let mut table = [0i32; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = crate::kernels::portable::int4_multiplier(code as u8);
        code += 1;
    }
    table
};

/// The arguments of the int4 kernels, read by offset in the assembly: keep the order.
#[repr(C)]
struct Int4Pass {
    /// The first pair's row 0, at its first group; row 1 at `rows + stride`.
    rows: *const u8,
    /// Bytes from one row to the next (0 reads row 0 twice, for one pair).
    stride: usize,
    /// The widened inputs of the first group's columns.
    pairs: *const u32,
    /// The end of the last group's widened inputs.
    pairs_end: *const u32,
    /// Bytes of widened inputs per group: 16 per block of eight columns.
    group_bytes: usize,
    /// The first pair's row 0's code of the first group; row 1's at `codes + codes_stride`.
    codes: *const u8,
    /// Codes from one row to the next.
    codes_stride: usize,
    /// The pairs' rows' sums, two per pair.
    sums: *mut i64,
    /// [`INT4_MULTIPLIERS`].
    multipliers: *const i32,
    /// Pairs of rows (at least one).
    count: usize,
}

extern "C" {
    /// For `pass.count` pairs of rows (pair `p`: rows `2p` and `2p + 1` at `pass.stride`) and
    /// the groups of whole blocks `pass` describes (at least one group of at least one block):
    /// `sums[r] = sum over groups g of multiplier(code_r[g]) * (row_r[g] · x[g])`, one block
    /// of eight columns per pass of the inner loop.
    fn txl_int4_rows2(pass: *const Int4Pass);
    /// [`txl_int4_rows2`] two blocks per pass of the inner loop: for groups of an even number
    /// of blocks.
    fn txl_int4_rows2_x2(pass: *const Int4Pass);
}

// Inner loop, per block of eight columns: two LDRD for the four input pairs, then for each of
// the two rows one LDR, four AND and four SMLAD: 20 instructions per 16 multiply-accumulates,
// plus a compare and a branch per `unroll` blocks. Registers there: r0 row 0 (row 1 at +r1), r1
// the stride, r2 the inputs, r3 the group's end, r4/r5 the group sums of rows 0/1, r6-r9 the
// input pairs, r10 the weight word, r11 the masked word, r12 the mask, lr the codes. Per group:
// the two `ASR`s, two codes and their multipliers from the table, two `SMLAL` into the i64 sums
// kept in the frame. Frame: [sp] table, [sp+4] codes stride, [sp+8] inputs' end, [sp+12] group
// bytes, [sp+16] the output, [sp+20] the pair's rows, [sp+24] and [sp+32] its sums, [sp+40] its
// codes, [sp+44] the inputs' start, [sp+48] the pairs left.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".macro txl_int4_row acc",
    "and r11, r12, r10, lsl #12",
    "smlad \\acc, r11, r6, \\acc",
    "and r11, r12, r10, lsl #4",
    "smlad \\acc, r11, r7, \\acc",
    "and r11, r12, r10, lsl #8",
    "smlad \\acc, r11, r8, \\acc",
    "and r11, r10, r12",
    "smlad \\acc, r11, r9, \\acc",
    ".endm",
    ".macro txl_int4_block",
    "ldrd r6, r7, [r2], #8",
    "ldrd r8, r9, [r2], #8",
    "ldr r10, [r0, r1]",
    "txl_int4_row r5",
    "ldr r10, [r0], #4",
    "txl_int4_row r4",
    ".endm",
    ".macro txl_int4_fn name, unroll",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r4-r11, lr}}",
    "sub sp, sp, #56",
    "ldr r1, [r0, #32]", // multipliers
    "ldr r2, [r0, #24]", // codes stride
    "strd r1, r2, [sp]",
    "ldrd r1, r2, [r0, #12]", // inputs' end, group bytes
    "strd r1, r2, [sp, #8]",
    "ldr r1, [r0, #28]", // sums
    "ldr r2, [r0]",      // rows
    "strd r1, r2, [sp, #16]",
    "ldr r1, [r0, #20]", // codes
    "ldr r2, [r0, #8]",  // inputs
    "strd r1, r2, [sp, #40]",
    "ldr r1, [r0, #36]", // pairs of rows
    "str r1, [sp, #48]",
    "ldr r1, [r0, #4]", // stride
    "mov r12, #0xf000f000",
    "0:", // a pair of rows
    "movs r4, #0",
    "movs r5, #0",
    "strd r4, r5, [sp, #24]",
    "strd r4, r5, [sp, #32]",
    "ldr r0, [sp, #20]",
    "ldr lr, [sp, #40]",
    "ldr r2, [sp, #44]",
    "1:", // a group
    "ldr r3, [sp, #12]",
    "add r3, r3, r2",
    "2:", // `unroll` blocks
    ".rept \\unroll",
    "txl_int4_block",
    ".endr",
    "cmp r2, r3",
    "bne 2b",
    "asr r4, r4, #12",
    "asr r5, r5, #12",
    "ldrd r6, r7, [sp]",
    "ldrb r8, [lr, r7]",
    "ldrb r9, [lr], #1",
    "ldr r8, [r6, r8, lsl #2]",
    "ldr r9, [r6, r9, lsl #2]",
    "ldrd r10, r11, [sp, #24]",
    "smlal r10, r11, r4, r9",
    "strd r10, r11, [sp, #24]",
    "ldrd r10, r11, [sp, #32]",
    "smlal r10, r11, r5, r8",
    "strd r10, r11, [sp, #32]",
    "movs r4, #0",
    "movs r5, #0",
    "ldr r3, [sp, #8]",
    "cmp r2, r3",
    "bne 1b",
    "ldr r3, [sp, #16]", // the pair's sums out, then on to the next pair
    "ldrd r6, r7, [sp, #24]",
    "strd r6, r7, [r3], #8",
    "ldrd r6, r7, [sp, #32]",
    "strd r6, r7, [r3], #8",
    "ldr r0, [sp, #20]",
    "add r0, r0, r1, lsl #1",
    "strd r3, r0, [sp, #16]",
    "ldr r7, [sp, #4]",
    "ldr r6, [sp, #40]",
    "add r6, r6, r7, lsl #1",
    "str r6, [sp, #40]",
    "ldr r6, [sp, #48]",
    "subs r6, r6, #1",
    "str r6, [sp, #48]",
    "bne 0b",
    "add sp, sp, #56",
    "pop {{r4-r11, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_int4_fn txl_int4_rows2, 1",
    "txl_int4_fn txl_int4_rows2_x2, 2",
);

/// `sums[2p + k] =` the int4 sums of row `2p + k` (at `rows[(2p + k) * stride..]`, `stride` 0
/// for one row read twice into two sums) over `groups` groups of `blocks` whole blocks of eight
/// columns each, `pairs` the widened inputs of those columns, `codes` row 0's codes of those
/// groups (row `r`'s at `codes[r * codes_stride..]`), for `sums.len() / 2` pairs of rows.
fn int4_pairs(
    rows: &[u8],
    stride: usize,
    pairs: &[u32],
    (groups, blocks): (usize, usize),
    codes: &[u8],
    codes_stride: usize,
    sums: &mut [i64],
) {
    let count = sums.len() / 2;
    if groups == 0 || blocks == 0 || count == 0 {
        return sums.fill(0);
    }
    let last = 2 * count - 1;
    assert!(
        last * stride + 4 * groups * blocks <= rows.len()
            && 4 * groups * blocks <= pairs.len()
            && last * codes_stride + groups <= codes.len(),
        "int4 rows out of bounds"
    );
    let pass = Int4Pass {
        rows: rows.as_ptr(),
        stride,
        pairs: pairs.as_ptr(),
        pairs_end: pairs[4 * groups * blocks..].as_ptr(),
        group_bytes: 16 * blocks,
        codes: codes.as_ptr(),
        codes_stride,
        sums: sums.as_mut_ptr(),
        multipliers: INT4_MULTIPLIERS.as_ptr(),
        count,
    };
    // SAFETY: checked just above: each of the `2 * count` rows holds the `4 * groups * blocks`
    // bytes read (a word at a time, unaligned loads being allowed on Armv7E-M and Armv8-M
    // Mainline), `pairs` the `4 * groups * blocks` words read (word-aligned, as `LDRD` needs),
    // each row's codes the `groups` bytes read; every code indexes the 256-entry table; `sums`
    // holds the `2 * count` i64s written. The kernels preserve the callee-saved
    // registers and the stack pointer (AAPCS).
    unsafe {
        if blocks % 2 == 0 {
            txl_int4_rows2_x2(&pass)
        } else {
            txl_int4_rows2(&pass)
        }
    };
}

/// [`portable::row_sums_i4`](crate::kernels::portable::row_sums_i4) with the DSP extension, two rows per
/// pass, `pairs` being `xq` widened by [`widen_input_i8`]: the columns in whole blocks of eight
/// run in the kernels above, a partial last block in the portable code. Groups of more than
/// 256 columns (`INT4_MAX_GROUP`; or not a multiple of 8) take the portable code. The same sums.
pub fn row_sums_i4(values: &[u8], group: usize, codes: &[u8], xq: &[i8], pairs: &[u32], sums: &mut [i64]) {
    use crate::kernels::portable::{int4_groups, int4_multiplier, int4_row_bytes};
    if group == 0 || !group.is_multiple_of(8) || group > INT4_MAX_GROUP {
        return crate::kernels::portable::row_sums_i4(values, group, codes, xq, sums);
    }
    let cols = xq.len();
    let rows = sums.len();
    let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
    let (values, codes) = (&values[..rows * row_bytes], &codes[..rows * groups]);
    let blocks = cols / 8;
    let full_groups = 8 * blocks / group; // the groups of whole blocks only
    let body = full_groups * group;
    let rest_blocks = blocks - body / 8; // the last group's whole blocks, if it is partial
    let pairs = &pairs[..4 * blocks];
    let whole = (full_groups, group / 8);
    let even = rows / 2 * 2;
    int4_pairs(values, row_bytes, pairs, whole, codes, groups, &mut sums[..even]);
    if even < rows {
        // the last row alone, read twice
        let (values, codes) = (&values[even * row_bytes..], &codes[even * groups..]);
        let mut alone = [0i64; 2];
        int4_pairs(values, 0, pairs, whole, codes, 0, &mut alone);
        sums[even] = alone[0];
    }
    if rest_blocks > 0 {
        // the whole blocks of a partial last group
        let (values, pairs, codes) = (&values[body / 2..], &pairs[body / 2..], &codes[full_groups..]);
        for (r, sum) in sums.iter_mut().enumerate() {
            let mut rest = [0i64; 2];
            let (values, codes) = (&values[r * row_bytes..], &codes[r * groups..]);
            int4_pairs(values, 0, pairs, (1, rest_blocks), codes, 0, &mut rest);
            *sum += rest[0];
        }
    }
    if 8 * blocks < cols {
        // a partial last block
        for (r, sum) in sums.iter_mut().enumerate() {
            let row = &values[r * row_bytes..(r + 1) * row_bytes];
            let tail = crate::kernels::portable::int4_range_sum(row, xq, 8 * blocks..cols);
            *sum += int4_multiplier(codes[(r + 1) * groups - 1]) as i64 * tail as i64;
        }
    }
}

/// Columns [`row_sums_i4_widening`] widens on the stack; wider inputs take the portable code.
const INT4_WIDEN_COLS: usize = 512;

/// [`row_sums_i4`] for an input not yet widened (the Helium build's inputs are not): widens
/// `xq` on the stack first (into uninitialized words: zeroing the buffer on every call cost the
/// demo model about 10% more instructions a token).
pub fn row_sums_i4_widening(values: &[u8], group: usize, codes: &[u8], xq: &[i8], sums: &mut [i64]) {
    if xq.len() > INT4_WIDEN_COLS {
        return crate::kernels::portable::row_sums_i4(values, group, codes, xq, sums);
    }
    let mut space = core::mem::MaybeUninit::<[u32; INT4_WIDEN_COLS / 2]>::uninit();
    let base = space.as_mut_ptr().cast::<u32>();
    let words = 2 * (xq.len() / 4);
    for (g, x) in xq.chunks_exact(4).enumerate() {
        let x = word(x);
        // SAFETY: `2 * g + 1 < words <= INT4_WIDEN_COLS / 2`, inside `space`; `write` does not
        // read the uninitialized word it replaces.
        unsafe {
            base.add(2 * g).write(sxtb16(x));
            base.add(2 * g + 1).write(sxtb16_ror8(x));
        }
    }
    // SAFETY: the loop above wrote the first `words` words of `space` (the widening of every
    // whole group of four columns), which the slice covers and nothing else.
    let pairs = unsafe { core::slice::from_raw_parts(base, words) };
    row_sums_i4(values, group, codes, xq, pairs, sums);
}
