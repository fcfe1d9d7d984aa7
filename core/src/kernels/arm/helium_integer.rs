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
    /// Helium: an embedding row's columns, `out[i] = round(q[i] · m_i / 2^s_i)` for `i < n`
    /// (`n >= 1`), `m_i · 2^-s_i` the product of the row's multiplier (mantissa `mantissa` in
    /// `[2^30, 2^31)`, shift `shift`) and the column's activation scale of bits `bits[i]`, as
    /// [`embedding_columns`] defines them; `c` is `shift + 95`. Returns 0 where every column's
    /// scale and shift are the usual ones (else another value, the row's values unspecified).
    fn txl_embedding_mve(
        bits: *const u32,
        q: *const i8,
        out: *mut i32,
        n: usize,
        mantissa: u32,
        c: i32,
    ) -> u32;
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

// An embedding row's columns, per four: the activation scales' biased exponents `e` (`VSHR` by
// 23, the sign bit kept: a negative scale's is 256 or more), their mantissas `(2^23 + f) · 2^7`
// (`VSHL` by 9, `VSHR` by 2, `VORR` of `2^30`), the product with the row's mantissa `M` as its
// two words (`VMULH.U32`, `VMUL.I32`; below `2^62`), its top bit `top` as `-top` (the high word
// shifted left by 2, `VSHR.S32` by 31), `m = ⌊product / 2^(30 + top)⌋` (`VSRI` of the low
// word's top two bits, `VSHL` by `-top`), and `t = 32 - s = e + top - c` (`c = shift + 95`).
// For `t ≥ 0`: `VRMULH(q · 2^t, m) = ⌊(q m 2^t + 2^31) / 2^32⌋ = ⌊(q m + 2^(s-1)) / 2^s⌋`
// (`|q · 2^t| ≤ 2^31` for `t ≤ 24`); for `t < 0`: `VMULH(q, m) = ⌊q m / 2^32⌋` then `VRSHL` by
// `t`, the same rounding (`2^(s-1)` is a multiple of `2^32`); `VPSEL` of the two by `t < 0`.
// The usual column: `e - 95` within `0..=61` and `t + 15` within `0..=39` (`s` in `8..=47`),
// each outside as a nonzero `VQSUB.U32`, whose `VMAXV` the kernel returns. 31 instructions the
// four. Registers: r0 the bits, r1 the int8 values, r2 `out`, r3 0, r4 95, r5 `c`, r6 the
// largest of the checks, r7 61, r8 15, r12 39; q0 the bits, then `⌊q m / 2^32⌋`, q1 `q`, q2
// `e`, then a check, q3 the mantissas, the low word, then `q · 2^t`, q4 `M`, q5 the high
// word, then `m`, q6 `t`, q7 `-top`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m55",
    ".section .text.txl_embedding_mve,\"ax\",%progbits",
    ".globl txl_embedding_mve",
    ".type txl_embedding_mve,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_embedding_mve:",
    "push {{r4, r5, r6, r7, r8, lr}}",
    "vpush {{d8-d15}}",
    "ldr r4, [sp, #88]",
    "ldr r5, [sp, #92]",
    "vdup.32 q4, r4",
    "movs r4, #95",
    "movs r6, #0",
    "movs r7, #61",
    "mov r8, #15",
    "movs r12, #39",
    "dlstp.32 lr, r3",
    "movs r3, #0",
    "1:",
    "vldrw.u32 q0, [r0], #16",
    "vldrb.s32 q1, [r1], #4",
    "vshr.u32 q2, q0, #23",
    "vshl.i32 q3, q0, #9",
    "vshr.u32 q3, q3, #2",
    "vorr.i32 q3, #0x40000000",
    "vmulh.u32 q5, q3, q4",
    "vmul.i32 q3, q3, q4",
    "vshl.i32 q5, q5, #2",
    "vshr.s32 q7, q5, #31", // -top
    "vsri.32 q5, q3, #30",
    "vshl.u32 q5, q5, q7", // m
    "vsub.i32 q6, q2, r5",
    "vsub.i32 q6, q6, q7", // t
    "vshl.s32 q3, q1, q6",
    "vrmulh.s32 q3, q3, q5",
    "vmulh.s32 q0, q1, q5",
    "vrshl.s32 q0, q0, q6",
    "vcmp.s32 lt, q6, r3",
    "vpsel q3, q0, q3",
    "vstrw.32 q3, [r2], #16",
    "vsub.i32 q2, q2, r4",
    "vqsub.u32 q2, q2, r7",
    "vadd.i32 q6, q6, r8",
    "vqsub.u32 q6, q6, r12",
    "vorr q2, q2, q6",
    "vmaxv.u32 r6, q2",
    "letp lr, 1b",
    "mov r0, r6",
    "vpop {{d8-d15}}",
    "pop {{r4, r5, r6, r7, r8, pc}}",
    ".size txl_embedding_mve, . - txl_embedding_mve",
    ".cpu cortex-m4",
);

/// [`embedding_columns_i32`](crate::kernels::embedding_columns_i32) four columns an
/// instruction, as that function defines it.
pub fn embedding_columns(act: &[f32], q: &[i8], out: &mut [i32], (mantissa, shift): (u32, u32)) -> bool {
    let n = act.len().min(q.len()).min(out.len());
    if n == 0 {
        return true;
    }
    if !(1 << 30..1 << 31).contains(&mantissa) || shift > 64 {
        return false;
    }
    // SAFETY: the three slices hold `n >= 1` values; the kernel reads those of `act` and `q`,
    // writes those of `out` (tail-predicated), uses q0-q3 (caller-saved) and restores q4-q7.
    let checks = unsafe {
        txl_embedding_mve(
            act.as_ptr().cast(),
            q.as_ptr(),
            out.as_mut_ptr(),
            n,
            mantissa,
            shift as i32 + 95,
        )
    };
    checks == 0
}

/// The largest `|x[i]|` (`i32::MIN`'s being `2^31`), four values an instruction; 0 for none.
pub fn largest_magnitude(x: &[i32]) -> u32 {
    if x.is_empty() {
        return 0;
    }
    // SAFETY: `x` holds `len >= 1` values; the kernel reads those (tail-predicated) and uses q0
    // (caller-saved).
    unsafe { txl_pow2_largest_mve(x.as_ptr(), x.len()) }
}

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
