//! Helium kernels (Cortex-M55, M85; feature `cortex-m-mve`) for the integer image's per-value
//! glue outside the attention: the int8 memory's power-of-two quantization of a head's keys and
//! values, the feed-forward's bias with the ReLU and its bias with the residual, and the output
//! layer's `f32` biases in fixed point. Four values an instruction, the same bits as the scalar
//! definitions.

use core::arch::global_asm;

extern "C" {
    /// Helium: the largest `|x[i]|` for `i < n` (`n >= 1`) as `u32` (`VMAXAV`).
    fn txl_pow2_largest_mve(x: *const i32, n: usize) -> u32;
    /// Helium: `out[i] = round(x[i] / 2^e)` (halves up; `VRSHL` by `negative_e = -e`, `e` in
    /// `0..=31`) cut to its low byte (`VSTRB.32`) for `i < n` (`n >= 1`).
    fn txl_pow2_shift_mve(x: *const i32, out: *mut i8, n: usize, negative_e: i32);
    /// Helium: `v[i] = max(QADD(v[i], b[i]), 0)` for `i < n` (`n >= 1`).
    fn txl_bias_relu_mve(v: *mut i32, b: *const i32, n: usize);
    /// Helium: `y[i] = QADD(y[i], x[i])` for `i < n` (`n >= 1`).
    fn txl_add_saturating_mve(y: *mut i32, x: *const i32, n: usize);
    /// Helium: `h[i] = QADD(h[i], QADD(o[i], b[i]))` for `i < n` (`n >= 1`).
    fn txl_add_sums_mve(h: *mut i32, o: *const i32, b: *const i32, n: usize);
    /// Helium: for `i < n` (`n >= 1`), `y[i] = QADD(y[i], f)`, `f` the fixed-point value of the
    /// `f32` of bits `bits[i]` where its shift right `right = c - exponent` is at least 1 (`c`
    /// being `150 - frac`); the others left as they were. Returns the largest `-right` (at least
    /// 0 where some value was left).
    fn txl_add_fixed_mve(y: *mut i32, bits: *const u32, n: usize, c: i32) -> i32;
}

// The largest magnitude: per four values `VLDRW` and `VMAXAV` (the magnitude of `i32::MIN`
// being `2^31`, as `unsigned_abs` gives). The quantization: per four values `VLDRW`, `VRSHL` by
// `-e` (the rounding in the lane's wider precision: `⌊(x + 2^(e-1)) / 2^e⌋`, which is
// `⌊(⌊x / 2^(e-1)⌋ + 1) / 2⌋`; `x` itself for `e = 0`) and `VSTRB.32` of the low bytes.
// The feed-forward's passes: per four values two `VLDRW`, `VQADD`, `VMAX` with zero, `VSTRW`;
// three `VLDRW`, two `VQADD`, `VSTRW`; the residual alone: two `VLDRW`, `VQADD`, `VSTRW`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_pow2_largest_mve,\"ax\",%progbits",
    ".globl txl_pow2_largest_mve",
    ".type txl_pow2_largest_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_pow2_largest_mve:",
    "push {{r7, lr}}",
    "movs r2, #0",
    "dlstp.32 lr, r1",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vmaxav.s32 r2, q0",
    "letp lr, 1b",
    "mov r0, r2",
    "pop {{r7, pc}}",
    ".size txl_pow2_largest_mve, . - txl_pow2_largest_mve",
    ".section .text.txl_pow2_shift_mve,\"ax\",%progbits",
    ".globl txl_pow2_shift_mve",
    ".type txl_pow2_shift_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_pow2_shift_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vrshl.s32 q0, r3",
    "vstrb.32 q0, [r1], #4",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_pow2_shift_mve, . - txl_pow2_shift_mve",
    ".section .text.txl_bias_relu_mve,\"ax\",%progbits",
    ".globl txl_bias_relu_mve",
    ".type txl_bias_relu_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_bias_relu_mve:",
    "push {{r7, lr}}",
    "vmov.i32 q2, #0",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vldrw.u32 q1, [r1], #16",
    "vqadd.s32 q0, q0, q1",
    "vmax.s32 q0, q0, q2",
    "vstrw.32 q0, [r0], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_bias_relu_mve, . - txl_bias_relu_mve",
    ".section .text.txl_add_sums_mve,\"ax\",%progbits",
    ".globl txl_add_sums_mve",
    ".type txl_add_sums_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_add_sums_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r3",
    "1:",
    "vldrw.u32 q0, [r1], #16",
    "vldrw.u32 q1, [r2], #16",
    "vqadd.s32 q0, q0, q1",
    "vldrw.u32 q1, [r0]",
    "vqadd.s32 q0, q1, q0",
    "vstrw.32 q0, [r0], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_add_sums_mve, . - txl_add_sums_mve",
    ".section .text.txl_add_saturating_mve,\"ax\",%progbits",
    ".globl txl_add_saturating_mve",
    ".type txl_add_saturating_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_add_saturating_mve:",
    "push {{r7, lr}}",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r0]",
    "vldrw.u32 q1, [r1], #16",
    "vqadd.s32 q0, q0, q1",
    "vstrw.32 q0, [r0], #16",
    "letp lr, 1b",
    "pop {{r7, pc}}",
    ".size txl_add_saturating_mve, . - txl_add_saturating_mve",
    ".cpu cortex-m4",
);

// The fixed-point biases, per four: the exponent (`VSHL` by 1, `VSHR` by 24), `-right` its
// difference with `c` (`VSUB`), `VCMP` of it below zero (the lanes stored), `VMAXV` of it (the
// value returned), `VMAX` with -32 (a shift right of 32 gives 0, as any of 25 or more does: the
// 24-bit mantissa's rounded quotient), the mantissa with its leading one (`VSHL`, `VSHR` by 9,
// `VORR`; a subnormal's `right` is at least 25, so its value is 0 either way), `VRSHL` by
// `-right` (halves up: the magnitude halves away from zero), the sign by `VSHR` by 31, `VEOR`
// and `VSUB`, `VQADD` to `y`, and the predicated `VSTRW`: 18 instructions the four. Registers:
// r0 `y`, r1 the bits, r2 the count, r3 `c`, r4 the largest `-right`, q0 the bits, q1 `y`, q2
// `-right`, then the sign, q3 the magnitude, q4 -32.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_add_fixed_mve,\"ax\",%progbits",
    ".globl txl_add_fixed_mve",
    ".type txl_add_fixed_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_add_fixed_mve:",
    "push {{r4, lr}}",
    "vpush {{d8, d9}}",
    "mov r4, #0x80000000",
    "movs r12, #0",
    "vmvn.i32 q4, #31",
    "dlstp.32 lr, r2",
    "1:",
    "vldrw.u32 q0, [r1], #16",
    "vshl.i32 q2, q0, #1",
    "vshr.u32 q2, q2, #24",
    "vsub.i32 q2, q2, r3",
    "vcmp.s32 lt, q2, r12",
    "vmaxv.s32 r4, q2",
    "vmax.s32 q2, q2, q4",
    "vshl.i32 q3, q0, #9",
    "vshr.u32 q3, q3, #9",
    "vorr.i32 q3, #0x800000",
    "vrshl.u32 q3, q3, q2",
    "vshr.s32 q2, q0, #31",
    "veor q3, q3, q2",
    "vsub.i32 q3, q3, q2",
    "vldrw.u32 q1, [r0]",
    "vqadd.s32 q1, q1, q3",
    "vpst",
    "vstrwt.32 q1, [r0]",
    "adds r0, #16",
    "letp lr, 1b",
    "mov r0, r4",
    "vpop {{d8, d9}}",
    "pop {{r4, pc}}",
    ".size txl_add_fixed_mve, . - txl_add_fixed_mve",
    ".cpu cortex-m4",
);

/// The power-of-two quantization of `x` into `out` (as many as the shorter): `e =
/// exponent(largest |x[i]|)` (clamped to `0..=31`), then `out[i] = round(x[i] / 2^e)` (halves
/// up; `x[i]` for `e = 0`) cut to its low byte. Returns `e`.
pub fn pow2_int8(x: &[i32], out: &mut [i8], exponent: impl Fn(u32) -> i32) -> i32 {
    let n = x.len().min(out.len());
    if n == 0 {
        return exponent(0).clamp(0, 31);
    }
    // SAFETY: `x` holds `n >= 1` values; the kernel reads those (tail-predicated) and uses q0
    // (caller-saved).
    let largest = unsafe { txl_pow2_largest_mve(x.as_ptr(), n) };
    let e = exponent(largest).clamp(0, 31);
    // SAFETY: `x` and `out` hold `n >= 1` values; the kernel reads those of `x` and writes those
    // of `out` (tail-predicated), and uses q0 (caller-saved).
    unsafe { txl_pow2_shift_mve(x.as_ptr(), out.as_mut_ptr(), n, -e) };
    e
}

/// `v[i] = v[i].saturating_add(b[i]).max(0)` for each `i` (as many as the shorter).
pub fn bias_relu(v: &mut [i32], b: &[i32]) {
    let n = v.len().min(b.len());
    if n == 0 {
        return;
    }
    // SAFETY: `v` and `b` hold `n >= 1` values; the kernel reads those, writes those of `v`
    // (tail-predicated), and uses q0-q2 (caller-saved).
    unsafe { txl_bias_relu_mve(v.as_mut_ptr(), b.as_ptr(), n) }
}

/// `h[i] = h[i].saturating_add(o[i].saturating_add(b[i]))` for each `i` (as many as the
/// shortest).
pub fn add_sums(h: &mut [i32], o: &[i32], b: &[i32]) {
    let n = h.len().min(o.len()).min(b.len());
    if n == 0 {
        return;
    }
    // SAFETY: the three slices hold `n >= 1` values; the kernel reads those, writes those of
    // `h` (tail-predicated), and uses q0 and q1 (caller-saved).
    unsafe { txl_add_sums_mve(h.as_mut_ptr(), o.as_ptr(), b.as_ptr(), n) }
}

/// `y[i] = y[i].saturating_add(x[i])` for each `i` (as many as the shorter).
pub fn add_saturating(y: &mut [i32], x: &[i32]) {
    let n = y.len().min(x.len());
    if n == 0 {
        return;
    }
    // SAFETY: `y` and `x` hold `n >= 1` values; the kernel reads those, writes those of `y`
    // (tail-predicated), and uses q0 and q1 (caller-saved).
    unsafe { txl_add_saturating_mve(y.as_mut_ptr(), x.as_ptr(), n) }
}

/// `y[i] = y[i].saturating_add(fixed(b[i]))` for each `i` (as many as the shorter), `fixed`
/// being `fixed_point::fixed_of_f32(_, frac)` (`frac ≤ 100`): the usual values (a shift right of
/// the mantissa, `150 - exponent - frac ≥ 1`: zeros and subnormals too) in the kernel, `rare` of
/// the bits for the others.
pub fn add_fixed(y: &mut [i32], b: &[f32], frac: u32, rare: impl Fn(u32) -> i32) {
    let n = y.len().min(b.len());
    if n == 0 {
        return;
    }
    let c = 150 - frac.min(100) as i32;
    // SAFETY: `y` and `b` hold `n >= 1` values; the kernel reads those, writes those of `y`
    // (tail-predicated), uses q0-q3 (caller-saved) and restores q4.
    let left = unsafe { txl_add_fixed_mve(y.as_mut_ptr(), b.as_ptr().cast(), n, c) };
    if left >= 0 {
        for (y, b) in y[..n].iter_mut().zip(&b[..n]) {
            let bits = b.to_bits();
            if c - (((bits >> 23) & 0xFF) as i32) < 1 {
                *y = y.saturating_add(rare(bits));
            }
        }
    }
}
