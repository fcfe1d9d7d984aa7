//! The integer arithmetic's per-value passes on cores with the DSP extension and no Helium
//! (Cortex-M4, M7, M33), enabled by the `cortex-m-dsp` feature: one value a few instructions in
//! place of the scalar definition's general code, the same bits.
//!
//! `SMMULR` is the rounded high word of a signed 32 × 32-bit product, `⌊(a b + 2^31) / 2^32⌋`:
//! for a rescale `m · 2^-s` of a shift `s ≤ 32`, `SMMULR(x · 2^a, m · 2^(32 - s - a))` is
//! `round(x m / 2^s)` with halves rounded up, the exact rounding of the scalar definitions,
//! wherever both operands keep their bits.

use core::arch::global_asm;

/// `y[i] = apply(scales[i].to_bits(), y[i])` for each `i` (as many as the shorter of the two),
/// `apply` being `fixed_point::ScaledByBits::apply` of a rescale of mantissa `sm` and `k` in
/// `33..=254` (`ScaledByBits::row_parameters`): the usual row in the kernel, one `SMMULR`;
/// `apply` for the others.
pub fn scaled_by_bits(
    scales: &[f32],
    y: &mut [i32],
    (sm, k): (u32, i32),
    exponents: Option<(i32, i32)>,
    apply: impl Fn(u32, i32) -> i32,
) {
    let n = y.len().min(scales.len());
    let (scales, y) = (&scales[..n], &mut y[..n]);
    if n == 0 {
        return;
    }
    // SAFETY: `y` holds `n ≥ 1` values; the kernel reads those and restores the registers it
    // saves.
    let spread = unsafe { txl_magnitude_bits_dsp(y.as_ptr(), n) };
    // the largest shift `a ≤ 16` that every value keeps its bits under (`spread < 2^31`: one
    // leading zero at least)
    let a = (spread.leading_zeros() - 1).min(16) as i32;
    let c = 32 - k - a;
    let mut i = 0;
    // every row's `t = c + exponent - lz` (`lz` 0 or 1; a negative scale's exponent is
    // negative) in `0..=15`, as the exponents' bounds show: the rows without a check
    if let Some((low, high)) = exponents {
        if c + low > 0 && c + high <= 15 {
            // SAFETY: `scales` and `y` hold `n ≥ 1` values; the kernel reads those of both,
            // writes those of `y`, and restores the registers it saves.
            unsafe { txl_scaled_by_bits_bounded_dsp(scales.as_ptr().cast(), y.as_mut_ptr(), n, sm, c, a) };
            i = n;
        }
    }
    while i < n {
        // SAFETY: `i < n`, so `scales[i..]` and `y[i..]` hold `n - i ≥ 1` values; the kernel
        // reads those of both and writes those of `y` before the one it returns at, and
        // restores the registers it saves.
        let done = unsafe {
            txl_scaled_by_bits_dsp(scales[i..].as_ptr().cast(), y[i..].as_mut_ptr(), n - i, sm, c, a)
        };
        i += done;
        if i < n {
            y[i] = apply(scales[i].to_bits(), y[i]);
            i += 1;
        }
    }
}

extern "C" {
    /// The bitwise OR of `x[i] ^ (x[i] >> 31)` over `i < n` (`n ≥ 1`): `x[i] · 2^a` keeps its
    /// bits for every `i` where the OR is below `2^(31 - a)`.
    fn txl_magnitude_bits_dsp(x: *const i32, n: usize) -> u32;
    /// For `i < n` (`n ≥ 1`) in order: `y[i] = round(y[i] · m / 2^s)` for the rescale
    /// `m · 2^-s` that `ScaledByBits::apply` makes of `bits[i]` and the scale of mantissa `sm`
    /// (`c = 32 - k - a`, every `y[i] · 2^a` keeping its bits, `a ≤ 16`), while `s` is in
    /// `1..=32` and the value keeps its bits once shifted; returns the index of the first row
    /// it leaves (`n` for none), that row unchanged.
    fn txl_scaled_by_bits_dsp(bits: *const u32, y: *mut i32, n: usize, sm: u32, c: i32, a: i32) -> usize;
    /// [`txl_scaled_by_bits_dsp`] for `n` rows (`n ≥ 1`) whose `t` the caller has found all
    /// in `0..=15`, without a check.
    fn txl_scaled_by_bits_bounded_dsp(bits: *const u32, y: *mut i32, n: usize, sm: u32, c: i32, a: i32);
}

// The OR of `x ^ (x >> 31)`: eight values an `LDM`, two instructions a value.
global_asm!(
    ".syntax unified",
    ".thumb",
    // Module-level assembly does not see rustc's target features: name an Armv7E-M core, whose
    // instructions Armv8-M Mainline cores with the DSP extension run as well
    ".cpu cortex-m4",
    ".section .text.txl_magnitude_bits_dsp,\"ax\",%progbits",
    ".globl txl_magnitude_bits_dsp",
    ".type txl_magnitude_bits_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_magnitude_bits_dsp:",
    "push {{r4, r5, r6, r7, r8, r9}}",
    "movs r12, #0",
    "subs r1, r1, #8",
    "blo 2f",
    "1:",
    "ldm r0!, {{r2, r3, r4, r5, r6, r7, r8, r9}}",
    "eor r2, r2, r2, asr #31",
    "orr r12, r12, r2",
    "eor r3, r3, r3, asr #31",
    "orr r12, r12, r3",
    "eor r4, r4, r4, asr #31",
    "orr r12, r12, r4",
    "eor r5, r5, r5, asr #31",
    "orr r12, r12, r5",
    "eor r6, r6, r6, asr #31",
    "orr r12, r12, r6",
    "eor r7, r7, r7, asr #31",
    "orr r12, r12, r7",
    "eor r8, r8, r8, asr #31",
    "orr r12, r12, r8",
    "eor r9, r9, r9, asr #31",
    "orr r12, r12, r9",
    "subs r1, r1, #8",
    "bhs 1b",
    "2:",
    "adds r1, r1, #8",
    "beq 4f",
    "3:",
    "ldr r2, [r0], #4",
    "eor r2, r2, r2, asr #31",
    "orr r12, r12, r2",
    "subs r1, r1, #1",
    "bne 3b",
    "4:",
    "mov r0, r12",
    "pop {{r4, r5, r6, r7, r8, r9}}",
    "bx lr",
    ".size txl_magnitude_bits_dsp, . - txl_magnitude_bits_dsp",
);

// Per row, as `ScaledByBits::apply` makes it: the f32's 16-bit mantissa `g = (f + 2^23 + 2^7)
// >> 8` (`f` the 23 bits of its fraction), its product `p = g · sm` (`[2^30, 2^32)`), `lz` its
// leading zeros (0 or 1, `up = 1 - lz`), `m = ⌊(⌊p / 2^(16 - lz)⌋ + 1) / 2⌋`, and
// `v = 32 - s = biased + 32 - k - lz` (`biased` with the sign bit: a negative scale's `v` is
// 33 or more, a zero or subnormal one's negative, an infinite or NaN one's 32 or more).
//
// The mantissa in three instructions (`ADD`, `UBFX`, `MLA`) for four: `b = bits + 2^7`, its 15
// bits `q` from bit 8, `p' = q · sm + sm · 2^15` (`sm · 2^15` made once a call). Where `f + 2^7`
// stays below `2^23`, `q = (f + 2^7) >> 8` and `g = 2^15 + q`: `p' = p`, and `b`'s exponent
// field is the f32's. Where it carries (`f ≥ 2^23 - 2^7`), `g = 2^16` (the bits left below 2^23,
// under `2^7`, fall off the shift) while `q = 0` and the carry raises `b >> 23` by one: `p' =
// 2^15 · sm = p / 2` in `[2^30, 2^31)`, one leading zero more (`p` has none: `sm ≥ 2^15`), so
// `⌊p' / 2^(16 - lz - 1)⌋ = ⌊p / 2^(16 - lz)⌋` (the same `m`) and `biased + 1 - (lz + 1)` (the
// same `v`). `p'` stays in `[2^30, 2^32)` (`g ≤ 2^16 - 1` now). The carry out of the exponent
// field: an exponent of 255 (infinite, NaN) into the sign bit, `biased + 1 = 256`, the same `v`,
// 32 or more; a negative NaN of `f ≥ 2^23 - 2^7` wraps to `b < 2^7`, `biased = 0`, `v ≤ 32 -
// k - 1 < 0` where its own `v` was 33 or more: the row is the caller's either way.
//
// Two rows an iteration where both have `t0 = c - 1 + biased` in `0..=15` (one `ORR` of the two
// and one `CMP`), with `m · 2^t` as the bounded kernel below makes it, without `lz` (`t = t0 +
// 1 - lz` in `0..=16`): `SMMULR(x · 2^a, m · 2^t)` (`x · 2^a` keeps its bits for every row of
// the call; `m · 2^t ≤ 2^30`, or for `t = 16` (`lz = 0`, `p ≤ (2^16 - 1)^2`) `m ≤ 2^15 - 1` and
// `m · 2^16 < 2^31`) is `⌊(x m 2^v + 2^31) / 2^32⌋ = ⌊(x m + 2^(s-1)) / 2^s⌋`, the exact
// rounding, below `2^30` in magnitude, the value `apply` gives. 30 instructions the two rows
// (15 a row; 17 with `lz`), the checks once a pair and no check of the value. A pair with a
// row outside takes its first row the long way, each check in turn, `v = t + a` from `lz`: for
// `v` in `0..=15`, `SMMULR(x, m · 2^v)` (`m · 2^v ≤ 2^30`); for `v` in `16..=31`, where `x`
// keeps its bits shifted left by `b = v - 15`: `SMMULR(x · 2^b, m · 2^15)`; else the row is
// the caller's. Registers: r0 the bits, r1 the values, r2 the rows left (less 2 in the pairs'
// loop), r3 `sm`, r4-r5 the bits, then `t0`, r6 the check, r7 `sm · 2^15 + 2^15`, r8-r9
// `p + 2^15`, then `m · 2^t`, r10-r11 `u`, then the values, r12 `2^7 + (c - 1) · 2^23` (as
// below), lr `a`; `n` and `c = 32 - k - a` on the stack. The long way: r4 the bits (plus
// `2^7`), then the shifted value, r5 the value, r6 `p`, then `m`, r9 `lz`, then `b`, r8 a
// shift, then `v` and a check.
//
// Where the caller knows the scales' exponents to keep every row's `t` in `0..=15`
// (`txl_scaled_by_bits_bounded_dsp`: `c + low ≥ 1`, `c + high ≤ 15`), the rows take no
// check, and `m · 2^t` comes without `lz`: `p2 = p + 2^15` (the `MLA`'s addend `sm · 2^15 +
// 2^15`; below `2^32`, as `p ≤ (2^16 - 1) sm`), `u` its top bit, `m0 = ⌊(p2 + u · 2^15) /
// 2^16⌋` and `M = (m0 with bit 0 cleared where u = 1) · 2^t0` for `t0 = c - 1 + biased`. For
// `u = 0`, `p < 2^31` (`lz = 1`): `m0 = ⌊(p + 2^15) / 2^16⌋ = m` and `t0 = t`. For `u = 1`:
// `m0` less its bit 0 is `2 ⌊(p + 2^16) / 2^17⌋`; where `p ≥ 2^31` (`lz = 0`) that is `2m`
// and `t0 = t - 1`; where `p` is in `[2^31 - 2^15, 2^31)` (`lz = 1`, `m = 2^15`, `t0 = t`) it
// is `2 · 2^14 = m`: `M = m · 2^t` every time. `t0` is in `0..=15` (`t0 ≥ c + low - 1 ≥ 0`),
// `M ≤ 2^30`. `t0` comes with the rounding's `2^7` in one `ADD` of `2^7 + (c - 1) · 2^23` (made
// once a call) to the bits: the fraction's bits, which `UBFX` takes, are those of `bits + 2^7`,
// and `(bits + 2^7 + (c - 1) · 2^23) >> 23` is `biased + c - 1` modulo `2^9`, whose low byte
// (all that `LSL` of a register reads) is `t0`'s. 9 instructions a row's `m · 2^t`; four rows
// an iteration, the bits by one `LDM`, the values by two `LDRD`s (the registers hold four
// `m · 2^t` and two values at most) and one `STM`: 50 instructions the four, 12.5 a row
// (13.5 two at a time). Registers: r0 the bits, r1 the values, r2 the rows left (less 4 in the
// loop), r3 `sm`, r7 `sm · 2^15 + 2^15`, r12 `2^7 + (c - 1) · 2^23`, lr `a`, r4-r6 and
// r8-r11 the bits, `m · 2^t`, `u` and the values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_scaled_by_bits_dsp,\"ax\",%progbits",
    ".globl txl_scaled_by_bits_dsp",
    ".type txl_scaled_by_bits_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scaled_by_bits_dsp:",
    "push {{r2, r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "ldr r12, [sp, #40]",
    "ldr lr, [sp, #44]",
    "lsl r7, r3, #15",
    "add r7, r7, #32768", // sm · 2^15 + 2^15
    "sub r12, r12, #1",
    "lsl r12, r12, #23",
    "add r12, r12, #128", // 2^7 + (c - 1) · 2^23
    // two rows or more: a pair
    "1:",
    "subs r2, r2, #2",
    "blt 8f",
    "2:",
    "ldrd r4, r5, [r0], #8",
    "add r4, r4, r12",
    "add r5, r5, r12",
    "ubfx r8, r4, #8, #15",
    "ubfx r9, r5, #8, #15",
    "mla r8, r8, r3, r7", // p + 2^15
    "mla r9, r9, r3, r7",
    "lsr r4, r4, #23", // t0
    "lsr r5, r5, #23",
    "orr r6, r4, r5",
    "cmp r6, #15",
    "bhi 7f",
    "lsr r10, r8, #31", // u
    "lsr r11, r9, #31",
    "add r8, r8, r10, lsl #15",
    "add r9, r9, r11, lsl #15",
    "lsr r8, r8, #16",
    "lsr r9, r9, #16",
    "bic r8, r8, r10",
    "bic r9, r9, r11",
    "lsl r8, r8, r4", // m · 2^t
    "lsl r9, r9, r5",
    "ldrd r10, r11, [r1]",
    "lsl r10, r10, lr",
    "lsl r11, r11, lr",
    "smmulr r10, r10, r8",
    "smmulr r11, r11, r9",
    "strd r10, r11, [r1], #8",
    "subs r2, r2, #2",
    "bge 2b",
    // one row left, or none
    "8:",
    "adds r2, r2, #2",
    "beq 9f",
    "b 3f",
    // a row of the pair outside: the first the long way
    "7:",
    "sub r0, r0, #8",
    "adds r2, r2, #2",
    // one row the long way
    "3:",
    "ldr r4, [r0], #4",
    "ldr r5, [r1]",
    "add r4, r4, #128",
    "ubfx r6, r4, #8, #15",
    "mla r6, r6, r3, r7",
    "sub r6, r6, #32768", // p
    "clz r9, r6",         // lz
    "rsb r8, r9, #16",
    "lsr r6, r6, r8",
    "adds r6, r6, #1",
    "lsrs r6, r6, #1",   // m
    "ldr r8, [sp, #40]", // c
    "add r8, r8, lr",
    "add r8, r8, r4, lsr #23",
    "subs r8, r8, r9",  // v
    "subs r9, r8, #15", // b
    "ble 4f",
    // `v` in `16..=31`, a value that keeps its bits shifted by `b = v - 15`
    "cmp r9, #16",
    "bhi 9f",
    "lsl r4, r5, r9",
    "asr r8, r4, r9",
    "cmp r8, r5",
    "bne 9f",
    "lsl r6, r6, #15",
    "smmulr r5, r4, r6",
    "5:",
    "str r5, [r1], #4",
    "subs r2, r2, #1",
    "b 1b",
    // `v` below 16: in `0..=15`
    "4:",
    "cmp r8, #15",
    "bhi 9f",
    "lsl r6, r6, r8",
    "smmulr r5, r5, r6",
    "b 5b",
    // the row is the caller's (`r2` rows left), or none is left
    "9:",
    "ldr r0, [sp]",
    "sub r0, r0, r2",
    "add sp, #4",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size txl_scaled_by_bits_dsp, . - txl_scaled_by_bits_dsp",
    // `n ≥ 1` rows whose `t` the caller has found all in `0..=15`: without the check, and
    // `m · 2^t` without `lz` (above), 9 instructions a row's `m · 2^t`; four rows an iteration,
    // 50 instructions the four (12.5 a row), one at a time for the last 1 to 3 (16 a row)
    ".macro txl_rescale_bounded_row b, m, u",
    "add \\b, \\b, r12", // the bits + 2^7 + (c - 1) · 2^23
    "ubfx \\m, \\b, #8, #15",
    "mla \\m, \\m, r3, r7", // p + 2^15
    "lsr \\u, \\m, #31",    // u
    "add \\m, \\m, \\u, lsl #15",
    "lsr \\m, \\m, #16",
    "bic \\m, \\m, \\u",
    "lsr \\b, \\b, #23", // t0 in the low byte
    "lsl \\m, \\m, \\b", // m · 2^t
    ".endm",
    ".section .text.txl_scaled_by_bits_bounded_dsp,\"ax\",%progbits",
    ".globl txl_scaled_by_bits_bounded_dsp",
    ".type txl_scaled_by_bits_bounded_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scaled_by_bits_bounded_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "ldr r12, [sp, #36]",
    "ldr lr, [sp, #40]",
    "lsl r7, r3, #15",
    "add r7, r7, #32768", // sm · 2^15 + 2^15
    "sub r12, r12, #1",
    "lsl r12, r12, #23",
    "add r12, r12, #128", // 2^7 + (c - 1) · 2^23
    "subs r2, r2, #4",
    "blo 2f",
    "1:",
    "ldm r0!, {{r6, r8, r9, r10}}",
    "txl_rescale_bounded_row r6, r4, r11",
    "txl_rescale_bounded_row r8, r5, r11",
    "ldrd r6, r8, [r1]",
    "lsl r6, r6, lr",
    "lsl r8, r8, lr",
    "smmulr r4, r6, r4",
    "smmulr r5, r8, r5",
    "txl_rescale_bounded_row r9, r6, r11",
    "txl_rescale_bounded_row r10, r8, r11",
    "ldrd r9, r10, [r1, #8]",
    "lsl r9, r9, lr",
    "lsl r10, r10, lr",
    "smmulr r6, r9, r6",
    "smmulr r8, r10, r8",
    "stm r1!, {{r4, r5, r6, r8}}",
    "subs r2, r2, #4",
    "bhs 1b",
    // the last rows, one at a time
    "2:",
    "adds r2, r2, #4",
    "beq 4f",
    "3:",
    "ldr r6, [r0], #4",
    "txl_rescale_bounded_row r6, r4, r11",
    "ldr r5, [r1]",
    "lsl r5, r5, lr",
    "smmulr r5, r5, r4",
    "str r5, [r1], #4",
    "subs r2, r2, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size txl_scaled_by_bits_bounded_dsp, . - txl_scaled_by_bits_bounded_dsp",
);

/// `integer::attention_score_of_small` of each key in place (`scores[i]` its content sum,
/// `ce[i]` its power of two, `position[i]` and `pe[i]` the position sum's), for the rescale
/// `mantissa · 2^-(shift - e)`; returns the largest score. The usual key in the kernel, one
/// `SMMULR`; `slow(i, content)` (the scalar definition) for the others. As many keys as the
/// shortest slice; the same values.
pub fn scores(
    scores: &mut [i32],
    (ce, position, pe): (&[i32], &[i32], &[i32]),
    (mantissa, shift): (u32, i32),
    slow: impl Fn(usize, i32) -> i32,
) -> i32 {
    let n = scores.len().min(ce.len()).min(position.len()).min(pe.len());
    let scores = &mut scores[..n];
    // `m`, `32 - C` and the largest score so far
    let mut parameters = [mantissa as i32, 32i32.wrapping_sub(shift), i32::MIN];
    let mut i = 0;
    while i < n {
        // SAFETY: `i < n`, so the four slices hold `n - i ≥ 1` values from `i` on; the kernel
        // reads those of `ce`, `position` and `pe`, reads and writes those of `scores` before
        // the one it returns at, reads and writes the three parameters, and restores the
        // registers it saves.
        let done = unsafe {
            txl_scores_dsp(
                scores[i..].as_mut_ptr(),
                ce[i..].as_ptr(),
                position[i..].as_ptr(),
                pe[i..].as_ptr(),
                n - i,
                parameters.as_mut_ptr(),
            )
        };
        i += done;
        if i < n {
            scores[i] = slow(i, scores[i]);
            parameters[2] = parameters[2].max(scores[i]);
            i += 1;
        }
    }
    parameters[2]
}

extern "C" {
    /// For `i < n` (`n ≥ 1`) in order, with `e = min(ce[i], pe[i])`, `a = ce[i] - e`,
    /// `b = pe[i] - e`: while `a, b ≤ 3`, the shift `s = C - e` is in `1..=32` (`parameters[1]`
    /// is `32 - C`) and the sum `x = (scores[i] << a) + (position[i] << b)` keeps its bits
    /// shifted left by `max(0, 17 - s)`, `scores[i] = round(x m / 2^s)` (halves up,
    /// `m = parameters[0]`), `parameters[2]` the largest of them and itself; returns the index
    /// of the first key it leaves (`n` for none), that key unchanged.
    fn txl_scores_dsp(
        scores: *mut i32,
        ce: *const i32,
        position: *const i32,
        pe: *const i32,
        n: usize,
        parameters: *mut i32,
    ) -> usize;
}

// `attention_score_of_small`'s usual path: `d = ce - pe`; for `d ≥ 0`, `e = pe` and the content
// sum shifted left by `d`, else `e = ce` and the position sum by `-d` (at most 3: both sums
// are below `2^27` in magnitude, so their sum fits); then [`txl_scaled_by_bits_dsp`]'s exact
// rounding for `v = 32 - s = (32 - C) + e`, `m · 2^15` made once a call (and `m · 2^v` of it
// by a right shift where `v` is below 16). The usual key (`v` in `16..=31`): 25 instructions.
// Registers: r0-r3 the slices, r4 `ce`, then `e`, r5 `pe`, r6 the content sum, then the sum and
// the score, r7 the position sum, then the shifted sum, r8 `d`, then `a` and `m · 2^v`, r9
// `32 - C`, r10 `m · 2^15`, r11 the largest score, r12 `v`, lr the keys left; the count and the
// parameters' address on the stack.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_scores_dsp,\"ax\",%progbits",
    ".globl txl_scores_dsp",
    ".type txl_scores_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_scores_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "sub sp, #4",
    "ldr lr, [sp, #40]",
    "ldr r12, [sp, #44]",
    "ldr r10, [r12]",
    "ldr r9, [r12, #4]",
    "ldr r11, [r12, #8]",
    "lsl r10, r10, #15", // m · 2^15
    "str lr, [sp]",
    "1:",
    "ldr r4, [r1], #4",
    "ldr r5, [r3], #4",
    "ldr r6, [r0]",
    "ldr r7, [r2], #4",
    "subs r8, r4, r5",
    "blt 4f",
    // `ce ≥ pe`: `e = pe`, the content sum shifted
    "cmp r8, #3",
    "bhi 9f",
    "lsl r6, r6, r8",
    "add r6, r6, r7",
    "add r12, r9, r5", // v
    "5:",
    "subs r8, r12, #15", // a
    "ble 6f",
    // `v` in `16..=31`, a sum that keeps its bits shifted by `a = v - 15`
    "cmp r8, #16",
    "bhi 9f",
    "lsl r7, r6, r8",
    "asr r12, r7, r8",
    "cmp r12, r6",
    "bne 9f",
    "smmulr r6, r7, r10",
    "7:",
    "str r6, [r0], #4",
    "cmp r6, r11",
    "it gt",
    "movgt r11, r6",
    "subs lr, lr, #1",
    "bne 1b",
    "b 9f",
    // `ce < pe`: `e = ce`, the position sum shifted
    "4:",
    "rsb r8, r8, #0",
    "cmp r8, #3",
    "bhi 9f",
    "lsl r7, r7, r8",
    "add r6, r6, r7",
    "add r12, r9, r4", // v
    "b 5b",
    // `v` below 16: in `0..=15`
    "6:",
    "cmp r12, #15",
    "bhi 9f",
    "rsb r8, r12, #15",
    "lsr r8, r10, r8", // m · 2^v
    "smmulr r6, r6, r8",
    "b 7b",
    // the key is the caller's (`lr` keys left), or none is left
    "9:",
    "ldr r0, [sp]",
    "sub r0, r0, lr",
    "ldr r12, [sp, #44]",
    "str r11, [r12, #8]",
    "add sp, #4",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size txl_scores_dsp, . - txl_scores_dsp",
);

extern "C" {
    /// `out[k] = words[k · stride_bytes / 4] + add` for `k < n`.
    fn txl_gather_strided_dsp(out: *mut i32, words: *const u32, n: usize, stride_bytes: usize, add: i32);
    /// For `k < n`: `poss[k] = *(last.positions - k)` and `pes[k] = pe + *(last.exponents -
    /// k · row)` (`last` the first distance's, the position sums one word apart).
    fn txl_gather_positions_dsp(poss: *mut i32, pes: *mut i32, n: usize, last: *const PositionParameters);
}

/// What [`txl_gather_positions_dsp`] takes besides its outputs: the word before the first
/// distance's position sum, the first distance's exponent, `-row` and the power of two added to
/// the exponents.
#[repr(C)]
struct PositionParameters {
    positions: usize,
    exponents: *const u8,
    negative_row: isize,
    pe: i32,
}

// The strided words: four keys a pass, each one `LDR` (two at the base and one stride on, the
// base two strides on after them) and one `ADD` of the power of two, the two pairs stored by
// `STRD`: 14 instructions per four keys, then a key at a time. The positions: two keys a pass,
// their position sums by one `LDRD` (two distances, the pointer two words back), their
// exponents by two `LDRB` (the second at `-row`, the pointer `2 · row` back), two `ADD` of `pe`
// and two `STRD`: 10 instructions per two keys.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_gather_strided_dsp,\"ax\",%progbits",
    ".globl txl_gather_strided_dsp",
    ".type txl_gather_strided_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_gather_strided_dsp:",
    "push {{r4, r5, r6, r7, r8, lr}}",
    "ldr r4, [sp, #24]",
    "subs r2, r2, #4",
    "blt 2f",
    "1:",
    "ldr r5, [r1]",
    "ldr r6, [r1, r3]",
    "add r1, r1, r3, lsl #1",
    "ldr r7, [r1]",
    "ldr r8, [r1, r3]",
    "add r1, r1, r3, lsl #1",
    "add r5, r5, r4",
    "add r6, r6, r4",
    "add r7, r7, r4",
    "add r8, r8, r4",
    "strd r5, r6, [r0], #8",
    "strd r7, r8, [r0], #8",
    "subs r2, r2, #4",
    "bge 1b",
    "2:",
    "adds r2, r2, #4",
    "beq 4f",
    "3:",
    "ldr r5, [r1]",
    "add r1, r1, r3",
    "add r5, r5, r4",
    "str r5, [r0], #4",
    "subs r2, r2, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7, r8, pc}}",
    ".size txl_gather_strided_dsp, . - txl_gather_strided_dsp",
    ".section .text.txl_gather_positions_dsp,\"ax\",%progbits",
    ".globl txl_gather_positions_dsp",
    ".type txl_gather_positions_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_gather_positions_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, lr}}",
    "ldm r3, {{r3, r4, r5, r6}}",
    "subs r2, r2, #2",
    "blt 2f",
    "1:",
    "ldrd r8, r7, [r3], #-8",
    "ldrb r9, [r4]",
    "ldrb r12, [r4, r5]",
    "add r4, r4, r5, lsl #1",
    "add r9, r9, r6",
    "add r12, r12, r6",
    "strd r7, r8, [r0], #8",
    "strd r9, r12, [r1], #8",
    "subs r2, r2, #2",
    "bge 1b",
    "2:",
    "adds r2, r2, #2",
    "beq 3f",
    "ldr r7, [r3, #4]",
    "ldrb r9, [r4]",
    "add r9, r9, r6",
    "str r7, [r0]",
    "str r9, [r1]",
    "3:",
    "pop {{r4, r5, r6, r7, r8, r9, pc}}",
    ".size txl_gather_positions_dsp, . - txl_gather_positions_dsp",
);

extern "C" {
    /// Among `i < n` (`n ≥ 1`) of `e[i] >= threshold` (unsigned): the largest `ve[i]` (signed;
    /// `i32::MIN` for none) in the low word and the largest `e[i]` (unsigned) of the keys of
    /// that `ve` in the high word (0 for none).
    fn txl_top_exponent_dsp(e: *const i32, ve: *const i32, n: usize, threshold: u32) -> u64;
}

// Key by key: a key below the threshold or of a smaller `ve` is passed over (8 instructions
// with the loop's end), a larger `ve` takes both, the same `ve` raises the largest `e`
// (`IT HI`). Registers: r0 and r1 the slices, r2 the keys left, r3 the threshold, r4 `e`, r5
// `ve`, r6 the largest `ve`, r7 the largest `e` of it.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_top_exponent_dsp,\"ax\",%progbits",
    ".globl txl_top_exponent_dsp",
    ".type txl_top_exponent_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_top_exponent_dsp:",
    "push {{r4, r5, r6, r7}}",
    "mov.w r6, #0x80000000",
    "movs r7, #0",
    "1:",
    "ldr r4, [r0], #4",
    "ldr r5, [r1], #4",
    "cmp r4, r3",
    "blo 3f",
    "cmp r5, r6",
    "blt 3f",
    "bgt 2f",
    "cmp r4, r7",
    "it hi",
    "movhi r7, r4",
    "b 3f",
    "2:",
    "mov r6, r5",
    "mov r7, r4",
    "3:",
    "subs r2, r2, #1",
    "bne 1b",
    "mov r0, r6",
    "mov r1, r7",
    "pop {{r4, r5, r6, r7}}",
    "bx lr",
    ".size txl_top_exponent_dsp, . - txl_top_exponent_dsp",
);

/// Among the keys of `e[i] >= threshold` (as many as the shorter of the two; `e` unsigned): the
/// largest `ve[i]` and the largest `e[i]` of the keys of that `ve`; `None` for no key. A key at
/// a time.
pub fn top_exponent(e: &[i32], ve: &[i32], threshold: u32) -> Option<(i32, u32)> {
    let n = e.len().min(ve.len());
    if n == 0 {
        return None;
    }
    // SAFETY: `e` and `ve` hold `n ≥ 1` values; the kernel reads those and restores the
    // registers it saves.
    let found = unsafe { txl_top_exponent_dsp(e.as_ptr(), ve.as_ptr(), n, threshold) };
    let (top, largest) = (found as i32, (found >> 32) as u32);
    // (a largest `ve` of i32::MIN tells no key; a key of that exponent alone gives the same to
    // the caller, whose result is at least 0)
    (top != i32::MIN).then_some((top, largest))
}

/// `out[k] = words[k · stride].to_bits() + add` for each `k < out.len()`; at least one word of
/// `words` a key (the last at `(out.len() - 1) · stride`). Four keys a pass.
pub fn gather_strided(out: &mut [i32], words: &[f32], stride: usize, add: i32) {
    let n = out.len();
    if n == 0 {
        return;
    }
    assert!((n - 1) * stride < words.len(), "strided words out of bounds");
    // SAFETY: the kernel reads the words at `k · stride < words.len()` for `k < n` (checked
    // above) and writes the `n` values of `out` (word-aligned: `STRD`), and restores the
    // registers it saves.
    unsafe { txl_gather_strided_dsp(out.as_mut_ptr(), words.as_ptr().cast(), n, 4 * stride, add) }
}

/// For each `k < poss.len()` (and `pes.len()`, at most `distance + 1`), with
/// `d = distance - k` (`distance < positions.len()`): `poss[k] = positions[d]` and
/// `pes[k] = pe + exponents[d · row]` (`distance · row < exponents.len()`). Two keys a pass.
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
        // (an address alone: the word before `positions[distance]`, before the slice for 0)
        positions: (positions.as_ptr() as usize)
            .wrapping_add(4 * distance)
            .wrapping_sub(4),
        exponents: exponents[distance * row..].as_ptr(),
        negative_row: -(row as isize),
        pe,
    };
    // SAFETY: the kernel reads `positions[d]` and `exponents[d · row]` for the `n` distances
    // `d` from `distance` down to `distance + 1 - n >= 0` (all in bounds: checked above),
    // writes the first `n` values of `poss` and `pes` (word-aligned: `STRD`), and restores the
    // registers it saves.
    unsafe { txl_gather_positions_dsp(poss.as_mut_ptr(), pes.as_mut_ptr(), n, &parameters) }
}

/// [`act_shift`](crate::integer::act_shift)`(x[i], act[i], biased_top)` in place for each `i`
/// (as many as the shorter of the two); returns the largest magnitude after. The same values.
pub fn act_shift(x: &mut [i32], act: &[f32], biased_top: u32) -> u32 {
    let n = x.len().min(act.len());
    if n == 0 {
        return 0;
    }
    // SAFETY: `x` and `act` hold `n ≥ 1` values; the kernel reads those of both, writes those
    // of `x`, and restores the registers it saves.
    unsafe { txl_act_shift_dsp(x.as_mut_ptr(), act.as_ptr(), n, biased_top.wrapping_add(1)) }
}

extern "C" {
    /// For `i < n` (`n ≥ 1`): `x[i] = ((x[i] >> s) + 1) >> 1` (wrapping) for
    /// `s = top1 + 1 - (act[i]'s biased exponent, its sign bit included)` below 31 taken as
    /// unsigned, else 0; returns the largest `|x[i]|` after.
    fn txl_act_shift_dsp(x: *mut i32, act: *const f32, n: usize, top1: u32) -> u32;
}

// `act_shift`'s value for `s` in `1..=256` as one `SMMULR` by `M = 2^30 >> (s - 1)` (`LSR` of a
// register: `2^(31 - s)` for `s ≤ 31`, 0 beyond, the shift `s - 1 ≤ 255` read whole from the
// low byte): `SMMULR(x, 2^(31 - s)) = ⌊(x 2^(31 - s) + 2^31) / 2^32⌋ = ⌊(x + 2^s) / 2^(s+1)⌋`,
// which is `⌊(⌊x / 2^s⌋ + 1) / 2⌋` (no wrapping for `s ≥ 1`), and `⌊(x + 2^31) / 2^32⌋ = 0`
// for `s = 31` (`M = 1`), 0 for `M = 0`: the definition's 0 from `s = 31` on. `s - 1 = top1 -
// (bits >> 23)` in one `SUB` of a shifted register. Another `s` (0, or 257 and more as
// unsigned) takes the definition's steps.
//
// The largest magnitude from the smallest and the largest value (both from 0 on: `|y|` of
// each is at most the larger of `-min` and `max`, which are two of them or 0): a value within
// them passes by `SUB` of the smallest, `CMP` with the range `max - min` (unsigned: `y - min ≤
// max - min` is `min ≤ y ≤ max`) and `BHI`; one outside widens them out of line.
//
// Four values an iteration: the scales by one `LDM`, the values by two `LDRD`s (the registers
// hold the four `M` and two values at most) and the results by one `STM`, the four shifts
// checked by one `CMP` of their OR with 256 (a group with a shift outside `1..=256` takes the
// steps one by one): 35 instructions the four, 8.75 a value (10 two at a time); the last 1 to
// 3 values one at a time. Registers: r0 the values, r1 the scales, r2 the values left (less 4
// in the loop), r3 `top1`, r4-r7 the bits, then `s - 1`, `M` and the results, r8 and r9 the
// values, then the shifts' OR, a value less the smallest and the largest value, r10 the
// smallest, r11 the range, r12 `2^30`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // the value in `reg` into the smallest (r10) and the range (r11), the largest in r8
    ".macro txl_act_shift_widen reg",
    "add r8, r10, r11",
    "cmp \\reg, r10",
    "it lt",
    "movlt r10, \\reg",
    "cmp \\reg, r8",
    "it gt",
    "movgt r8, \\reg",
    "sub r11, r8, r10",
    ".endm",
    // the value in `reg` against the smallest and the range, widened out of line (`out`, which
    // comes back to `back`)
    ".macro txl_act_shift_within reg, out, back",
    "sub r8, \\reg, r10",
    "cmp r8, r11",
    "bhi \\out",
    "\\back:",
    ".endm",
    // the definition's steps for the value in `v`, `s - 1` in `s`
    ".macro txl_act_shift_steps v, s",
    "adds \\s, \\s, #1",
    "cmp \\s, #31",
    "ite lo",
    "asrlo \\v, \\v, \\s",
    "movhs \\v, #0",
    "adds \\v, \\v, #1",
    "asrs \\v, \\v, #1",
    ".endm",
    ".section .text.txl_act_shift_dsp,\"ax\",%progbits",
    ".globl txl_act_shift_dsp",
    ".type txl_act_shift_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_act_shift_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "movs r10, #0",
    "movs r11, #0",
    "mov r12, #0x40000000",
    "subs r2, r2, #4",
    "blt 8f",
    "1:",
    "ldm r1!, {{r4, r5, r6, r7}}",
    "sub r4, r3, r4, lsr #23",
    "sub r5, r3, r5, lsr #23",
    "sub r6, r3, r6, lsr #23",
    "sub r7, r3, r7, lsr #23",
    "orr r8, r4, r5",
    "orr r8, r8, r6",
    "orr r8, r8, r7",
    "cmp r8, #256",
    "bhs 5f",
    "lsr r4, r12, r4",
    "lsr r5, r12, r5",
    "lsr r6, r12, r6",
    "lsr r7, r12, r7",
    "ldrd r8, r9, [r0]",
    "smmulr r4, r8, r4",
    "smmulr r5, r9, r5",
    "ldrd r8, r9, [r0, #8]",
    "smmulr r6, r8, r6",
    "smmulr r7, r9, r7",
    "3:",
    "stm r0!, {{r4, r5, r6, r7}}",
    "txl_act_shift_within r4, 20f, 30",
    "txl_act_shift_within r5, 21f, 31",
    "txl_act_shift_within r6, 22f, 32",
    "txl_act_shift_within r7, 23f, 33",
    "subs r2, r2, #4",
    "bge 1b",
    // the last 1 to 3 values one at a time, or none
    "8:",
    "adds r2, r2, #4",
    "beq 9f",
    "2:",
    "ldr r4, [r1], #4",
    "ldr r5, [r0]",
    "sub r4, r3, r4, lsr #23",
    "cmp r4, #256",
    "bhs 10f",
    "lsr r4, r12, r4",
    "smmulr r5, r5, r4",
    "11:",
    "str r5, [r0], #4",
    "txl_act_shift_within r5, 24f, 34",
    "subs r2, r2, #1",
    "bne 2b",
    // the largest magnitude: `-min` (as unsigned) or `max`
    "9:",
    "add r8, r10, r11",
    "rsb r9, r10, #0",
    "cmp r9, r8",
    "it hi",
    "movhi r8, r9",
    "mov r0, r8",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "bx lr",
    // a shift outside `1..=256` in the four: each value the definition's steps
    "5:",
    "ldrd r8, r9, [r0]",
    "txl_act_shift_steps r8, r4",
    "txl_act_shift_steps r9, r5",
    "mov r4, r8",
    "mov r5, r9",
    "ldrd r8, r9, [r0, #8]",
    "txl_act_shift_steps r8, r6",
    "txl_act_shift_steps r9, r7",
    "mov r6, r8",
    "mov r7, r9",
    "b 3b",
    // a value outside the range
    "20:",
    "txl_act_shift_widen r4",
    "b 30b",
    "21:",
    "txl_act_shift_widen r5",
    "b 31b",
    "22:",
    "txl_act_shift_widen r6",
    "b 32b",
    "23:",
    "txl_act_shift_widen r7",
    "b 33b",
    "24:",
    "txl_act_shift_widen r5",
    "b 34b",
    // the last values' shift outside `1..=256`
    "10:",
    "txl_act_shift_steps r5, r4",
    "b 11b",
    ".size txl_act_shift_dsp, . - txl_act_shift_dsp",
);

/// `scores[i] = fixed_point::exp_neg(integer::to_exp_input(largest, scores[i], frac))` for each
/// score, `frac` in `0..=24`, `table` being `fixed_point::EXP2_TABLE`; returns their sum. The
/// same values.
pub fn exp_scores(scores: &mut [i32], largest: i32, frac: u32, table: &[u32; 257]) -> u64 {
    if scores.is_empty() {
        return 0;
    }
    let left = 24 - frac.min(24);
    let constants = [largest as u32, 1 << (29 - left), left + 1, table.as_ptr() as u32];
    // SAFETY: `scores` holds `n ≥ 1` values; the kernel reads and writes those, reads the four
    // constants and the table at indices below 257 (a fraction's top 8 bits, and one more),
    // and restores the registers it saves.
    unsafe { txl_exp_scores_dsp(scores.as_mut_ptr(), scores.len(), constants.as_ptr()) }
}

extern "C" {
    /// For `i < n` (`n ≥ 1`), `scores[i] = exp_neg(to_exp_input(largest, scores[i], 24 -
    /// left))` in place; returns their sum (64 bits). `constants` is `[largest, 2^(29 - left),
    /// left + 1, the table's address]`.
    fn txl_exp_scores_dsp(scores: *mut i32, n: usize, constants: *const u32) -> u64;
}

// [`exp_neg`](crate::fixed_point::exp_neg) of each score, the same steps: the distance
// `largest - score` (a score at or above the largest: `t = 0`, `2^30`); a distance of
// `2^(29 - left)` or more (`t ≥ 2^29`, the saturated one too): 0; else
// `y = ⌊2t log2(e) / 2^32⌋` (`UMULL` of the distance shifted by `left + 1`), the table's two
// entries by one `LDRD`, the interpolation step `⌊(d b + 2^15) / 2^16⌋` (`d ≥ 0` the entries'
// difference, below `2^22`, `b` the fraction's low 16 bits) as the high word of
// `UMULL(d, b · 2^16)` plus its low word's top bit, and the rounding shift by `n = y / 2^24`
// as `⌊v / 2^n⌋` plus the last bit shifted out (`LSRS` leaves it in the carry, and a shift by
// 0 leaves the carry the `CMP` against `2^(29 - left)` cleared: no instruction between sets
// flags; `LSR` by 32 or more gives 0, as `exp_neg`'s `n > 31` does), the sum by `UMLAL` of
// the value by 1. The usual score: 22 instructions. Registers: r0 the scores, r1 the count, r2
// 1, r3 `largest`, r4 `2^(29 - left)`, r5 `left + 1`, r6 the table, r7 `log2(e)` in Q31, r8-r9
// the sum, r10 the distance, then `y`, r11 a product's low word, then `b · 2^16` and `n`, r12
// and lr the entries, the step and the value.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_exp_scores_dsp,\"ax\",%progbits",
    ".globl txl_exp_scores_dsp",
    ".type txl_exp_scores_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_exp_scores_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "sub sp, #4",
    "ldm r2, {{r3, r4, r5, r6}}",
    "movw r7, #:lower16:3098164009",
    "movt r7, #:upper16:3098164009",
    "movs r2, #1",
    "movs r8, #0",
    "movs r9, #0",
    "1:",
    "ldr r10, [r0]",
    "subs r10, r3, r10",
    "ble 5f",
    "cmp r10, r4",
    "bhs 6f",
    "lsl r10, r10, r5",
    "umull r11, r10, r10, r7", // y
    "ubfx r12, r10, #16, #8",  // the index
    "add r12, r6, r12, lsl #2",
    "ldrd r12, lr, [r12]",
    "sub lr, r12, lr",   // d
    "lsl r11, r10, #16", // b · 2^16
    "umull r11, lr, lr, r11",
    "add lr, lr, r11, lsr #31", // the step
    "sub r12, r12, lr",         // the value
    "lsr r11, r10, #24",        // n
    "lsrs r12, r12, r11",
    "adc r12, r12, #0",
    "2:",
    "str r12, [r0], #4",
    "umlal r8, r9, r12, r2",
    "subs r1, r1, #1",
    "bne 1b",
    "mov r0, r8",
    "mov r1, r9",
    "add sp, #4",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    // at or above the largest: `exp_neg(0) = 2^30`
    "5:",
    "mov.w r12, #1073741824",
    "b 2b",
    // `t ≥ 2^29`: 0
    "6:",
    "movs r12, #0",
    "b 2b",
    ".size txl_exp_scores_dsp, . - txl_exp_scores_dsp",
);

/// The integer LayerNorm's last step: `out[i] = finish(gains[i], apply(gains[i] & 0x7FFF_FFFF,
/// (x[i] << shift) - mean), biases[i])` for each `i` (as many as the shortest slice), `apply`
/// being `fixed_point::ScaledByBits::apply` of a rescale of mantissa `sm` and `k` in
/// `33..=254`, `finish` the sign and the saturating bias; every `(x[i] << shift) - mean` within
/// `i32`. The usual value in the kernel, one `SMMULR` and a `QADD`; the scalar steps for the
/// others. The same values.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    x: &[i32],
    gains: &[u32],
    biases: &[i32],
    out: &mut [i32],
    (shift, mean): (u32, i32),
    (sm, k): (u32, i32),
    exponents: Option<(i32, i32)>,
    apply: impl Fn(u32, i32) -> i32,
    finish: impl Fn(u32, i32, i32) -> i32,
) {
    let n = x.len().min(gains.len()).min(biases.len()).min(out.len());
    let (x, gains, biases, out) = (&x[..n], &gains[..n], &biases[..n], &mut out[..n]);
    // `sm`, `32 - k`, `2^shift` (`x << shift` as a product, the same low word) and `-mean`
    let parameters = [sm as i32, 32 - k, 1i32.wrapping_shl(shift), mean.wrapping_neg()];
    let mut i = 0;
    // every value's `v = exponent + 32 - k - lz` (`lz` 0 or 1) in `0..=15`, as the gains'
    // exponents show: the pairs without a check
    if let Some((low, high)) = exponents {
        let pairs = n / 2;
        if pairs > 0 && low + 31 - k >= 0 && high + 32 - k <= 15 {
            // SAFETY: the four slices hold `n ≥ 2 · pairs` values; the kernel reads the first
            // `2 · pairs` of `x`, `gains` and `biases`, writes those of `out`, reads the four
            // parameters, and restores the registers it saves.
            unsafe {
                txl_layer_norm_bounded_dsp(
                    x.as_ptr(),
                    gains.as_ptr(),
                    biases.as_ptr(),
                    out.as_mut_ptr(),
                    pairs,
                    parameters.as_ptr(),
                )
            };
            i = 2 * pairs;
        }
    }
    while i < n {
        // SAFETY: `i < n`, so the four slices hold `n - i ≥ 1` values from `i` on; the kernel
        // reads those of `x`, `gains` and `biases`, writes those of `out` before the one it
        // returns at, reads the four parameters, and restores the registers it saves.
        let done = unsafe {
            txl_layer_norm_dsp(
                x[i..].as_ptr(),
                gains[i..].as_ptr(),
                biases[i..].as_ptr(),
                out[i..].as_mut_ptr(),
                n - i,
                parameters.as_ptr(),
            )
        };
        i += done;
        if i < n {
            let deviation = (x[i] << shift) - mean;
            out[i] = finish(gains[i], apply(gains[i] & 0x7FFF_FFFF, deviation), biases[i]);
            i += 1;
        }
    }
}

extern "C" {
    /// For `i < n` (`n ≥ 1`) in order: `out[i] = QADD(±round(d m / 2^s), biases[i])` for the
    /// deviation `d = (x[i] << shift) - mean`, the rescale `m · 2^-s` that `ScaledByBits::apply`
    /// makes of `gains[i]`'s magnitude and the scale of mantissa `sm`, and the gain's sign,
    /// while `s` is in `1..=32` and the deviation keeps its bits once shifted; returns the
    /// index of the first value it leaves (`n` for none). `parameters` is `[sm, 32 - k,
    /// 2^shift, -mean]` (wrapping).
    fn txl_layer_norm_dsp(
        x: *const i32,
        gains: *const u32,
        biases: *const i32,
        out: *mut i32,
        n: usize,
        parameters: *const i32,
    ) -> usize;
    /// [`txl_layer_norm_dsp`] for `2 · pairs` values (`pairs ≥ 1`) whose `v` the caller has
    /// found all in `0..=15`, without a check.
    fn txl_layer_norm_bounded_dsp(
        x: *const i32,
        gains: *const u32,
        biases: *const i32,
        out: *mut i32,
        pairs: usize,
        parameters: *const i32,
    );
}

// [`txl_scaled_by_bits_dsp`]'s rescale of the deviation by the gain's magnitude (its biased
// exponent by `UBFX`, without the sign; the mantissa's product by `ADD` of `2^7`, `UBFX` and
// `MLA` with `sm · 2^15`, as there: a carry out of the fraction raises the exponent field by
// one and halves `p`, the same `m` and `v`, and an exponent field of 255, infinite or NaN,
// wraps to 0, a negative `v` where its own was 32 or more: the caller's either way), then the
// sign (`(y ^ s) - s` for `s` the gain's sign spread, exact: `|y| < 2^30`) and the bias by
// `QADD`, the saturating sum `finish` makes. The deviation `(x << shift) - mean` is one `MLA`
// of `x` by `2^shift` and `-mean` (the same low word). Two values an iteration, each straight
// through where its `v` is in `0..=15` (the usual value: LayerNorm's deviations are large and
// its outputs small), `SMMULR(d, m · 2^v)` (`m · 2^v ≤ 2^30`, any deviation): 23 instructions
// a value, 48 the two with the loop's. A value outside takes the long way, each check in
// turn: for `v` in `16..=31`, where the deviation keeps its bits shifted left by
// `a = v - 15`, `SMMULR(d · 2^a, m · 2^15)`; else the value is the caller's. Registers: r0
// the values, r1 the gains, r2 the biases, r3 the output, r4 the gain's bits, r5 `lz`, then
// the deviation and the result, r6 the bits plus `2^7`, then `v`, then `a`, r7 `p`, then `m`,
// r8 `32 - k`, r9 `sm`, r10 `2^shift`, r11 `-mean`, r12 `sm · 2^15` (in the long way the
// shifted deviation, then made again), lr the values left (less 2 in the pairs' loop); the
// count and the parameters' address on the stack. The bounded kernel: r5 `u`, then the
// deviation, r6 `v0`, r7 `p + 2^15`, then `m · 2^v`, r8 `2^7 + (31 - k) · 2^23`, r12
// `sm · 2^15 + 2^15`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // a value's gain and deviation: `m` in r7, `v` in r6 and the deviation in r5
    ".macro txl_layer_norm_value",
    "ldr r4, [r1], #4",
    "add r6, r4, #128",
    "ubfx r7, r6, #8, #15",
    "mla r7, r7, r9, r12", // p
    "ubfx r6, r6, #23, #8",
    "add r6, r6, r8",
    "clz r5, r7",     // lz
    "sub r6, r6, r5", // v
    "rsb r5, r5, #16",
    "lsr r7, r7, r5",
    "adds r7, r7, #1",
    "lsrs r7, r7, #1", // m
    "ldr r5, [r0], #4",
    "mla r5, r5, r10, r11", // the deviation
    ".endm",
    // the rescaled deviation in r5: its gain's sign, the bias, stored
    ".macro txl_layer_norm_finish",
    "eor r5, r5, r4, asr #31",
    "sub r5, r5, r4, asr #31",
    "ldr r6, [r2], #4",
    "qadd r5, r5, r6",
    "str r5, [r3], #4",
    ".endm",
    ".section .text.txl_layer_norm_dsp,\"ax\",%progbits",
    ".globl txl_layer_norm_dsp",
    ".type txl_layer_norm_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_layer_norm_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "sub sp, #4",
    "ldr lr, [sp, #40]",
    "ldr r12, [sp, #44]",
    "ldm r12, {{r8, r9, r10, r11}}",
    "mov r12, r8",
    "mov r8, r9",
    "mov r9, r12",
    "lsl r12, r9, #15",
    "str lr, [sp]",
    // two values or more: a pair
    "0:",
    "subs lr, lr, #2",
    "blt 8f",
    "1:",
    "txl_layer_norm_value",
    "cmp r6, #15",
    "bhi 6f",
    "lsl r7, r7, r6",
    "smmulr r5, r5, r7",
    "txl_layer_norm_finish",
    "txl_layer_norm_value",
    "cmp r6, #15",
    "bhi 7f",
    "lsl r7, r7, r6",
    "smmulr r5, r5, r7",
    "txl_layer_norm_finish",
    "subs lr, lr, #2",
    "bge 1b",
    // one value left, or none
    "8:",
    "adds lr, lr, #2",
    "bne 3f",
    "b 9f",
    // the first value of the pair outside its loads undone
    "6:",
    "sub r0, r0, #4",
    "sub r1, r1, #4",
    "adds lr, lr, #2",
    "b 3f",
    // the second
    "7:",
    "sub r0, r0, #4",
    "sub r1, r1, #4",
    "adds lr, lr, #1",
    // one value the long way
    "3:",
    "txl_layer_norm_value",
    "subs r6, r6, #15", // a
    "ble 4f",
    // `v` in `16..=31`, a deviation that keeps its bits shifted by `a = v - 15`
    "cmp r6, #16",
    "bhi 9f",
    "lsl r12, r5, r6",
    "asr r6, r12, r6",
    "cmp r6, r5",
    "bne 9f",
    "lsl r7, r7, #15",
    "smmulr r5, r12, r7",
    "lsl r12, r9, #15",
    "5:",
    "txl_layer_norm_finish",
    "subs lr, lr, #1",
    "b 0b",
    // `v` below 16: in `0..=15` (`a` in `-15..=0`)
    "4:",
    "adds r6, r6, #15",
    "bmi 9f",
    "lsl r7, r7, r6",
    "smmulr r5, r5, r7",
    "b 5b",
    // the value is the caller's (`lr` values left), or none is left
    "9:",
    "ldr r0, [sp]",
    "sub r0, r0, lr",
    "add sp, #4",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size txl_layer_norm_dsp, . - txl_layer_norm_dsp",
    // pairs of values whose `v` the caller has found all in `0..=15`, `m · 2^v` without `lz` as
    // in `txl_scaled_by_bits_bounded_dsp` (`v0 = biased + 31 - k` in `0..=15`: `low + 31 - k ≥
    // 0`, `high + 32 - k ≤ 15`), `v0` with the rounding's `2^7` in one `ADD` of `2^7 + (31 -
    // k) · 2^23` to the bits, as there (bits 23 to 30 of the sum, which `UBFX` takes, are
    // `biased + 31 - k` modulo `2^8`, `v0` itself): 18 instructions a value
    ".macro txl_layer_norm_bounded_value",
    "ldr r4, [r1], #4",
    "add r6, r4, r8",
    "ubfx r7, r6, #8, #15",
    "mla r7, r7, r9, r12",  // p + 2^15
    "ubfx r6, r6, #23, #8", // v0
    "lsr r5, r7, #31",      // u
    "add r7, r7, r5, lsl #15",
    "lsr r7, r7, #16",
    "bic r7, r7, r5",
    "lsl r7, r7, r6", // m · 2^v
    "ldr r5, [r0], #4",
    "mla r5, r5, r10, r11", // the deviation
    "smmulr r5, r5, r7",
    ".endm",
    ".section .text.txl_layer_norm_bounded_dsp,\"ax\",%progbits",
    ".globl txl_layer_norm_bounded_dsp",
    ".type txl_layer_norm_bounded_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_layer_norm_bounded_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "ldr lr, [sp, #36]",
    "ldr r12, [sp, #40]",
    "ldm r12, {{r8, r9, r10, r11}}",
    "mov r12, r8",
    "sub r8, r9, #1", // 31 - k
    "lsl r8, r8, #23",
    "add r8, r8, #128", // 2^7 + (31 - k) · 2^23
    "mov r9, r12",
    "lsl r12, r9, #15",
    "add r12, r12, #32768", // sm · 2^15 + 2^15
    "1:",
    "txl_layer_norm_bounded_value",
    "txl_layer_norm_finish",
    "txl_layer_norm_bounded_value",
    "txl_layer_norm_finish",
    "subs lr, lr, #1",
    "bne 1b",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size txl_layer_norm_bounded_dsp, . - txl_layer_norm_bounded_dsp",
);

/// `(Σ x, min x, max x)` of `x` (`None` for none), the sum exact in 64 bits.
pub fn sum_range(x: &[i32]) -> Option<(i64, i32, i32)> {
    if x.is_empty() {
        return None;
    }
    let mut out = [0i32; 4];
    // SAFETY: `x` holds `n ≥ 1` values; the kernel reads those, writes the four words of
    // `out`, and restores the registers it saves.
    unsafe { txl_sum_range_dsp(x.as_ptr(), x.len(), out.as_mut_ptr()) };
    let sum = (out[1] as i64) << 32 | out[0] as u32 as i64;
    Some((sum, out[2], out[3]))
}

/// `Σ c²` of `c = round(((v << shift) - mean) / 2^s)` (halves up) over `v` in `x`, for `s` in
/// `2..=31`, every `(v << shift) - mean` within `i32` and every `|c| ≤ 2^15`.
pub fn squares(x: &[i32], shift: u32, mean: i32, s: u32) -> u64 {
    if x.is_empty() {
        return 0;
    }
    // `2^shift` (`v << shift` as a product, the same low word), `-mean` and `2^(32 - s)`
    let parameters = [
        1i32.wrapping_shl(shift),
        mean.wrapping_neg(),
        1 << (32 - s.clamp(2, 31)),
    ];
    // SAFETY: `x` holds `n ≥ 1` values; the kernel reads those and the three parameters, and
    // restores the registers it saves.
    unsafe { txl_squares_dsp(x.as_ptr(), x.len(), parameters.as_ptr()) }
}

extern "C" {
    /// For `n ≥ 1` values at `x`: `out = [Σ's low word, Σ's high word, min, max]`.
    fn txl_sum_range_dsp(x: *const i32, n: usize, out: *mut i32);
    /// `Σ c²` (64 bits) over `n ≥ 1` values `v` at `x` of `c = SMMULR((v << shift) - mean, M)`,
    /// `parameters` being `[2^shift, -mean, M]` (wrapping).
    fn txl_squares_dsp(x: *const i32, n: usize, parameters: *const i32) -> u64;
}

// The sum: `SMLAL` of each value by 1 into the 64-bit sum. The range: a value within the
// smallest and the largest so far passes by `SUB` of the smallest, `CMP` with the range `max -
// min` (unsigned: `v - min ≤ max - min` is `min ≤ v ≤ max`) and `BLS` over the widening, which
// (a value outside) takes the value as the smallest where it is below it and as the largest
// where it is above it: 4 instructions a value, four values an `LDM`. Registers: r0 the values,
// r1 the values left (less 4 in the loop of four), r2 the output, r3 1, r4-r7 the values, r8-r9
// the sum, r10 the smallest, r11 the range, r12 a value less the smallest, lr the largest.
//
// The squares: `c = SMMULR(d, 2^(32 - s)) = ⌊(d + 2^(s-1)) / 2^s⌋` (`2^(32 - s) ≤ 2^30`), the
// exact rounding of the deviation `d = (v << shift) - mean` (one `MLA` of `v` by `2^shift`
// and `-mean`: the same low word), and `SMLAL` of `c · c` into the 64-bit sum. 3 instructions
// a value, four values an `LDM`. Registers: r0 the values, r1 the values left (less 4), r2
// `2^shift`, r3 `-mean`, r4-r7 the values, r8-r9 the sum, r12 `2^(32 - s)`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // a value in `reg`: its sum into r9:r8 (`SMLAL` by r3 = 1), the smallest into r10 and
    // the range into r11 where it is outside them
    ".macro txl_sum_range_value reg",
    "smlal r8, r9, \\reg, r3",
    "sub r12, \\reg, r10",
    "cmp r12, r11",
    "bls .Ltxl_sum_range_within\\@",
    "add lr, r10, r11",
    "cmp \\reg, r10",
    "it lt",
    "movlt r10, \\reg",
    "cmp \\reg, lr",
    "it gt",
    "movgt lr, \\reg",
    "sub r11, lr, r10",
    ".Ltxl_sum_range_within\\@:",
    ".endm",
    // a value in `reg`: its deviation `v · r2 + r3` rounded by `SMMULR` with r12, its square
    // into r9:r8
    ".macro txl_square_value reg",
    "mla \\reg, \\reg, r2, r3",
    "smmulr \\reg, \\reg, r12",
    "smlal r8, r9, \\reg, \\reg",
    ".endm",
    ".section .text.txl_sum_range_dsp,\"ax\",%progbits",
    ".globl txl_sum_range_dsp",
    ".type txl_sum_range_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_sum_range_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "ldr r10, [r0]",
    "movs r11, #0",
    "movs r3, #1",
    "movs r8, #0",
    "movs r9, #0",
    "subs r1, r1, #4",
    "blo 2f",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7}}",
    "txl_sum_range_value r4",
    "txl_sum_range_value r5",
    "txl_sum_range_value r6",
    "txl_sum_range_value r7",
    "subs r1, r1, #4",
    "bhs 1b",
    "2:",
    "adds r1, r1, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r0], #4",
    "txl_sum_range_value r4",
    "subs r1, r1, #1",
    "bne 3b",
    "4:",
    "add r11, r10, r11",
    "stm r2, {{r8, r9, r10, r11}}",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size txl_sum_range_dsp, . - txl_sum_range_dsp",
    ".section .text.txl_squares_dsp,\"ax\",%progbits",
    ".globl txl_squares_dsp",
    ".type txl_squares_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_squares_dsp:",
    "push {{r4, r5, r6, r7, r8, r9}}",
    "ldr r12, [r2, #8]",
    "ldr r3, [r2, #4]",
    "ldr r2, [r2]",
    "movs r8, #0",
    "movs r9, #0",
    "subs r1, r1, #4",
    "blo 2f",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7}}",
    "txl_square_value r4",
    "txl_square_value r5",
    "txl_square_value r6",
    "txl_square_value r7",
    "subs r1, r1, #4",
    "bhs 1b",
    "2:",
    "adds r1, r1, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r0], #4",
    "txl_square_value r4",
    "subs r1, r1, #1",
    "bne 3b",
    "4:",
    "mov r0, r8",
    "mov r1, r9",
    "pop {{r4, r5, r6, r7, r8, r9}}",
    "bx lr",
    ".size txl_squares_dsp, . - txl_squares_dsp",
);

/// `qb[i] = q[i].saturating_add(b[i])` for each `i` (as many as the shortest); returns the
/// largest `|qb[i]|` (0 for none).
pub fn query_sums(q: &[i32], b: &[i32], qb: &mut [i32]) -> u32 {
    let n = q.len().min(b.len()).min(qb.len());
    if n == 0 {
        return 0;
    }
    // SAFETY: the three slices hold `n ≥ 1` values; the kernel reads those of `q` and `b`,
    // writes those of `qb`, and restores the registers it saves.
    unsafe { txl_query_sums_dsp(q.as_ptr(), b.as_ptr(), qb.as_mut_ptr(), n) }
}

/// The words of the first `8 · octets` values of `qb` (`octets ≤ qb.len() / 8`, `words` at
/// least `4 · octets` long) as the query's layout keeps them: columns `4g` and `4g + 2` in word
/// `2g`, `4g + 1` and `4g + 3` in word `2g + 1`, each the low half of `round(v / 2^e)`
/// (halves up; `v` itself for `e = 0`), `e ≤ 31`.
pub fn query_pack(qb: &[i32], words: &mut [u32], octets: usize, e: u32) {
    let octets = octets.min(qb.len() / 8).min(words.len() / 4);
    if octets == 0 {
        return;
    }
    let e = e.min(31);
    // SAFETY: `qb` holds `8 · octets` values and `words` `4 · octets`; the kernel reads those
    // and writes these, and restores the registers it saves.
    unsafe { txl_query_pack_dsp(qb.as_ptr(), words.as_mut_ptr(), octets, e) }
}

extern "C" {
    /// `qb[i] = QADD(q[i], b[i])` for `i < n` (`n ≥ 1`); returns the largest `|qb[i]|`.
    fn txl_query_sums_dsp(q: *const i32, b: *const i32, qb: *mut i32, n: usize) -> u32;
    /// For each of `octets ≥ 1` groups of eight values `v` at `qb`, four words: the low halves
    /// of `round(v / 2^e)` (halves up, `e ≤ 31`) of columns `4g, 4g + 2` in word `2g` and
    /// `4g + 1, 4g + 3` in word `2g + 1` (low half first).
    fn txl_query_pack_dsp(qb: *const i32, words: *mut u32, octets: usize, e: u32);
}

// The sums: `QADD`, and the largest magnitude as the larger of `-min` (as `u32`: `2^31` for
// `i32::MIN`) and `max`, the smallest and the largest sum from 0 on: a sum within them passes
// by `SUB` of the smallest, `CMP` with the range `max - min` (unsigned) and `BLS` over the
// widening, which takes it as the smallest or the largest. Four columns two `LDM`s, four
// `QADD`s, an `STM` and three instructions a column, 21 with the loop's two. Registers: r0-r2
// the slices, r3 the columns left (less 4 in the loop of four), r4-r7 the sums, r8-r11 the
// biases, then r8 a sum less the smallest and r9 the largest sum, r12 the smallest, lr the
// range.
//
// The words: for `e ≥ 2`, `round(v / 2^e) = SMMULR(v, 2^(32 - e))` (`2^(32 - e) ≤ 2^30`),
// then `PKHBT` of columns `4g, 4g + 2` and `4g + 1, 4g + 3`: eight columns an `LDM`, eight
// `SMMULR`s, four `PKHBT`s and an `STM`, 16 instructions with the loop's two. For `e` 0 or 1,
// `(v + e) >> e`, whose low half is the rounded value's (the bits it takes, `e..e + 16`, are
// below the sum's carry out): an `ADD` and an `ASR` in place of the `SMMULR`. Registers: r0
// the values, r1 the words, r2 the groups left, r3 `e`, then `2^(32 - e)`, r4-r11 the columns.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // a sum in `reg` against the smallest (r12) and the range (lr), both widened where it is
    // outside them (the largest in r9)
    ".macro txl_query_value reg",
    "sub r8, \\reg, r12",
    "cmp r8, lr",
    "bls .Ltxl_query_within\\@",
    "add r9, r12, lr",
    "cmp \\reg, r12",
    "it lt",
    "movlt r12, \\reg",
    "cmp \\reg, r9",
    "it gt",
    "movgt r9, \\reg",
    "sub lr, r9, r12",
    ".Ltxl_query_within\\@:",
    ".endm",
    ".section .text.txl_query_sums_dsp,\"ax\",%progbits",
    ".globl txl_query_sums_dsp",
    ".type txl_query_sums_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_query_sums_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    "movs r12, #0",
    "mov lr, #0",
    "subs r3, r3, #4",
    "blo 2f",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7}}",
    "ldm r1!, {{r8, r9, r10, r11}}",
    "qadd r4, r4, r8",
    "qadd r5, r5, r9",
    "qadd r6, r6, r10",
    "qadd r7, r7, r11",
    "stm r2!, {{r4, r5, r6, r7}}",
    "txl_query_value r4",
    "txl_query_value r5",
    "txl_query_value r6",
    "txl_query_value r7",
    "subs r3, r3, #4",
    "bhs 1b",
    "2:",
    "adds r3, r3, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r0], #4",
    "ldr r8, [r1], #4",
    "qadd r4, r4, r8",
    "str r4, [r2], #4",
    "txl_query_value r4",
    "subs r3, r3, #1",
    "bne 3b",
    // the largest magnitude: `-min` (as unsigned) or `max`
    "4:",
    "add r9, r12, lr",
    "rsb r12, r12, #0",
    "cmp r12, r9",
    "it hi",
    "movhi r9, r12",
    "mov r0, r9",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size txl_query_sums_dsp, . - txl_query_sums_dsp",
    ".section .text.txl_query_pack_dsp,\"ax\",%progbits",
    ".globl txl_query_pack_dsp",
    ".type txl_query_pack_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_query_pack_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "cmp r3, #2",
    "blo 5f",
    "rsb r3, r3, #32",
    "movs r12, #1",
    "lsl r3, r12, r3",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "smmulr r4, r4, r3",
    "smmulr r5, r5, r3",
    "smmulr r6, r6, r3",
    "smmulr r7, r7, r3",
    "smmulr r8, r8, r3",
    "smmulr r9, r9, r3",
    "smmulr r10, r10, r3",
    "smmulr r11, r11, r3",
    "pkhbt r4, r4, r6, lsl #16",
    "pkhbt r5, r5, r7, lsl #16",
    "pkhbt r8, r8, r10, lsl #16",
    "pkhbt r9, r9, r11, lsl #16",
    "stm r1!, {{r4, r5, r8, r9}}",
    "subs r2, r2, #1",
    "bne 1b",
    "b 9f",
    // `e` 0 or 1
    "5:",
    "ldm r0!, {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "add r4, r4, r3",
    "asr r4, r4, r3",
    "add r5, r5, r3",
    "asr r5, r5, r3",
    "add r6, r6, r3",
    "asr r6, r6, r3",
    "add r7, r7, r3",
    "asr r7, r7, r3",
    "add r8, r8, r3",
    "asr r8, r8, r3",
    "add r9, r9, r3",
    "asr r9, r9, r3",
    "add r10, r10, r3",
    "asr r10, r10, r3",
    "add r11, r11, r3",
    "asr r11, r11, r3",
    "pkhbt r4, r4, r6, lsl #16",
    "pkhbt r5, r5, r7, lsl #16",
    "pkhbt r8, r8, r10, lsl #16",
    "pkhbt r9, r9, r11, lsl #16",
    "stm r1!, {{r4, r5, r8, r9}}",
    "subs r2, r2, #1",
    "bne 5b",
    "9:",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "bx lr",
    ".size txl_query_pack_dsp, . - txl_query_pack_dsp",
);

/// `x[i] = x[i].saturating_sub(a).saturating_sub(b)` for each value.
pub fn sub_sub(x: &mut [i32], a: i32, b: i32) {
    if x.is_empty() {
        return;
    }
    // SAFETY: `x` holds `n ≥ 1` values; the kernel reads and writes those, and restores the
    // registers it saves.
    unsafe { txl_sub_sub_dsp(x.as_mut_ptr(), x.len(), a, b) }
}

extern "C" {
    /// `x[i] = QSUB(QSUB(x[i], a), b)` for `i < n` (`n ≥ 1`).
    fn txl_sub_sub_dsp(x: *mut i32, n: usize, a: i32, b: i32);
}

// Two `QSUB`s a value, four values an `LDM` and an `STM`: 12 instructions the four with the
// loop's two. Registers: r0 the values, r1 the values left (less 4 in the loop of four), r2
// `a`, r3 `b`, r4-r7 the values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_sub_sub_dsp,\"ax\",%progbits",
    ".globl txl_sub_sub_dsp",
    ".type txl_sub_sub_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_sub_sub_dsp:",
    "push {{r4, r5, r6, r7}}",
    "subs r1, r1, #4",
    "blo 2f",
    "1:",
    "ldm r0, {{r4, r5, r6, r7}}",
    "qsub r4, r4, r2",
    "qsub r5, r5, r2",
    "qsub r6, r6, r2",
    "qsub r7, r7, r2",
    "qsub r4, r4, r3",
    "qsub r5, r5, r3",
    "qsub r6, r6, r3",
    "qsub r7, r7, r3",
    "stm r0!, {{r4, r5, r6, r7}}",
    "subs r1, r1, #4",
    "bhs 1b",
    "2:",
    "adds r1, r1, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r0]",
    "qsub r4, r4, r2",
    "qsub r4, r4, r3",
    "str r4, [r0], #4",
    "subs r1, r1, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7}}",
    "bx lr",
    ".size txl_sub_sub_dsp, . - txl_sub_sub_dsp",
);

/// `dst[i] = src[i]`, as many as the shorter of the two: eight values an `LDM` and an `STM`.
pub fn copy(dst: &mut [i32], src: &[i32]) {
    let n = dst.len().min(src.len());
    if n == 0 {
        return;
    }
    // SAFETY: `dst` and `src` hold `n ≥ 1` values (two slices: no overlap); the kernel reads
    // those, writes these, and restores the registers it saves.
    unsafe { txl_copy_dsp(dst.as_mut_ptr(), src.as_ptr(), n) }
}

extern "C" {
    /// `dst[i] = src[i]` for `i < n` (`n ≥ 1`).
    fn txl_copy_dsp(dst: *mut i32, src: *const i32, n: usize);
}

// Eight values an `LDM` and an `STM`: 4 instructions the eight with the loop's two (the
// compiler's `memcpy` takes 26), then one value a pass. Registers: r0 `dst`, r1 `src`, r2 the
// values left (less 8 in the loop of eight), r3-r9 and r12 the values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_copy_dsp,\"ax\",%progbits",
    ".globl txl_copy_dsp",
    ".type txl_copy_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_copy_dsp:",
    "push {{r4, r5, r6, r7, r8, r9}}",
    "subs r2, r2, #8",
    "blo 2f",
    "1:",
    "ldm r1!, {{r3, r4, r5, r6, r7, r8, r9, r12}}",
    "stm r0!, {{r3, r4, r5, r6, r7, r8, r9, r12}}",
    "subs r2, r2, #8",
    "bhs 1b",
    "2:",
    "adds r2, r2, #8",
    "beq 4f",
    "3:",
    "ldr r3, [r1], #4",
    "str r3, [r0], #4",
    "subs r2, r2, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7, r8, r9}}",
    "bx lr",
    ".size txl_copy_dsp, . - txl_copy_dsp",
);

/// For each key (as many as the shorter slice): `p[i]` (its `e_j`, `0..=2^30`) becomes its
/// probability `min(round(⌊e m / 2^32⌋ / 2^t), 32767)` (`t ≥ 1`) shifted right by
/// `min(max(e_max - ve[i], 0), 16)`, rounded, or 0 where `e_j < 2^14`. The same values.
pub fn probabilities(p: &mut [i32], ve: &[i32], (m, t): (u32, u32), e_max: i32) {
    let n = p.len().min(ve.len());
    if n == 0 {
        return;
    }
    let constants = [m as i32, t.clamp(1, 64) as i32, e_max];
    // SAFETY: `p` and `ve` hold `n ≥ 1` values; the kernel reads those, writes those of `p`,
    // reads the three constants, and restores the registers it saves.
    unsafe { txl_probabilities_dsp(p.as_mut_ptr(), ve.as_ptr(), n, constants.as_ptr()) }
}

extern "C" {
    /// For `i < n` (`n ≥ 1`), the probability of `e = p[i]` in place: `min(round(⌊e m / 2^32⌋
    /// / 2^t), 32767)` (halves up) divided by `2^min(max(e_max - ve[i], 0), 16)`, rounded
    /// (halves up), or 0 where `e < 2^14`. `constants` is `[m, t, e_max]`.
    fn txl_probabilities_dsp(p: *mut i32, ve: *const i32, n: usize, constants: *const i32);
}

// Per key: `⌊e m / 2^32⌋` (`UMULL`, below `2^29`), its rounding shift by `t ≥ 1` as `LSRS`
// (the last bit shifted out in the carry) and `ADCS` of that bit (which clears the carry: no
// carry out), `USAT` to 15 bits (the `min` with 32767); the shift `e_max - ve` clamped to
// `0..=31` by `USAT` (a shift of 16 or more leaves 0 of a probability below `2^15`, as 16
// does), the rounding shift by it as `LSRS` and `ADC` (a shift of 0 keeps the carry clear:
// `USAT` and `SUB` set no carry). 15 instructions a key. Registers: r0 the probabilities, r1
// the values' powers of two, r2 `m`, r3 `t`, r4 `e`, then the probability, r5 the power of
// two, then the shift, r6 a product's low word, r12 `e_max`, lr the keys left.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_probabilities_dsp,\"ax\",%progbits",
    ".globl txl_probabilities_dsp",
    ".type txl_probabilities_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_probabilities_dsp:",
    "push {{r4, r5, r6, lr}}",
    "mov lr, r2",
    "ldr r12, [r3, #8]",
    "ldr r2, [r3]",
    "ldr r3, [r3, #4]",
    "1:",
    "ldr r4, [r0]",
    "ldr r5, [r1], #4",
    "cmp r4, #16384",
    "blt 5f",
    "umull r6, r4, r4, r2",
    "lsrs r4, r4, r3",
    "adcs r4, r4, #0",
    "usat r4, #15, r4",
    "sub r5, r12, r5",
    "usat r5, #5, r5",
    "lsrs r4, r4, r5",
    "adc r4, r4, #0",
    "2:",
    "str r4, [r0], #4",
    "subs lr, lr, #1",
    "bne 1b",
    "pop {{r4, r5, r6, pc}}",
    // `e < 2^14`: no probability
    "5:",
    "movs r4, #0",
    "b 2b",
    ".size txl_probabilities_dsp, . - txl_probabilities_dsp",
);

/// The power-of-two quantization of `x` into `out` (as many as the shorter): `e =
/// exponent(largest |x[i]|)` (clamped to `0..=31`), then `out[i] = round(x[i] / 2^e)` (halves
/// up, as `⌊(⌊x / 2^(e-1)⌋ + 1) / 2⌋`; `x[i]` for `e = 0`) cut to its low byte. Returns `e`.
pub fn pow2_int8(x: &[i32], out: &mut [i8], exponent: impl Fn(u32) -> i32) -> i32 {
    let n = x.len().min(out.len());
    if n == 0 {
        return exponent(0).clamp(0, 31);
    }
    // SAFETY: `x` holds `n ≥ 1` values; the kernel reads those and restores the registers it
    // saves.
    let largest = unsafe { txl_pow2_largest_dsp(x.as_ptr(), n) };
    let e = exponent(largest).clamp(0, 31);
    // SAFETY: `x` and `out` hold `n ≥ 1` values; the kernel reads those of `x`, writes those of
    // `out`, and restores the registers it saves.
    unsafe { txl_pow2_shift_dsp(x.as_ptr(), out.as_mut_ptr(), n, e) };
    e
}

/// `v[i] = v[i].saturating_add(b[i]).max(0)` for each `i` (as many as the shorter).
pub fn bias_relu(v: &mut [i32], b: &[i32]) {
    let n = v.len().min(b.len());
    if n == 0 {
        return;
    }
    // SAFETY: `v` and `b` hold `n ≥ 1` values; the kernel reads those, writes those of `v`,
    // and restores the registers it saves.
    unsafe { txl_bias_relu_dsp(v.as_mut_ptr(), b.as_ptr(), n) }
}

/// `h[i] = h[i].saturating_add(o[i].saturating_add(b[i]))` for each `i` (as many as the
/// shortest).
pub fn add_sums(h: &mut [i32], o: &[i32], b: &[i32]) {
    let n = h.len().min(o.len()).min(b.len());
    if n == 0 {
        return;
    }
    // SAFETY: the three slices hold `n ≥ 1` values; the kernel reads those, writes those of
    // `h`, and restores the registers it saves.
    unsafe { txl_add_sums_dsp(h.as_mut_ptr(), o.as_ptr(), b.as_ptr(), n) }
}

/// `out[i] = round(x[i] · wide / 2^32).clamp(-127, 127)` for each `i` (as many as the shorter
/// of the two), rounded halves up: `fixed_point::PreparedRescale`'s quantization for a shift of
/// at most 32, a `SMMULR` a value.
pub fn quantize_wide(x: &[i32], out: &mut [i8], wide: i32) {
    let n = x.len().min(out.len());
    if n == 0 {
        return;
    }
    // SAFETY: `x` and `out` hold `n ≥ 1` values; the kernel reads those of `x`, writes those
    // of `out` (a word four bytes, at any alignment), and restores the registers it saves.
    unsafe { txl_quantize_wide_dsp(x.as_ptr(), out.as_mut_ptr(), n, wide) }
}

/// [`quantize_wide`] that also writes `widened` as [`dsp::widen_input_i8`](super::dsp::widen_input_i8)
/// makes it of the bytes (whole groups of four; the same words), for the row sums: false, nothing
/// written, where `widened` is too short for them.
pub fn quantize_widen(x: &[i32], out: &mut [i8], widened: &mut [u32], wide: i32) -> bool {
    let n = x.len().min(out.len());
    if widened.len() < 2 * (n / 4) {
        return false;
    }
    if n == 0 {
        return true;
    }
    // SAFETY: `x` and `out` hold `n ≥ 1` values and `widened` `2 · ⌊n / 4⌋` words at least
    // (aligned); the kernel reads those of `x`, writes those of `out` (a word four bytes, at
    // any alignment) and those words, and restores the registers it saves.
    unsafe { txl_quantize_widen_dsp(x.as_ptr(), out.as_mut_ptr(), n, wide, widened.as_mut_ptr()) };
    true
}

extern "C" {
    /// The largest `|x[i]|` for `i < n` (`n ≥ 1`) as `u32`.
    fn txl_pow2_largest_dsp(x: *const i32, n: usize) -> u32;
    /// `out[i] = ⌊(⌊x[i] / 2^(e-1)⌋ + 1) / 2⌋` (`x[i]` for `e = 0`), `e ≤ 31`, cut to its low
    /// byte, for `i < n` (`n ≥ 1`).
    fn txl_pow2_shift_dsp(x: *const i32, out: *mut i8, n: usize, e: i32);
    /// `v[i] = USAT(QADD(v[i], b[i]), 31)` (the `max` with 0) for `i < n` (`n ≥ 1`).
    fn txl_bias_relu_dsp(v: *mut i32, b: *const i32, n: usize);
    /// `h[i] = QADD(h[i], QADD(o[i], b[i]))` for `i < n` (`n ≥ 1`).
    fn txl_add_sums_dsp(h: *mut i32, o: *const i32, b: *const i32, n: usize);
    /// `out[i] = max(SSAT(SMMULR(x[i], wide), 8), -127)` for `i < n` (`n ≥ 1`).
    fn txl_quantize_wide_dsp(x: *const i32, out: *mut i8, n: usize, wide: i32);
    /// [`txl_quantize_wide_dsp`], and for each whole group of four values `g`: `widened[2g]`
    /// the bytes `4g` and `4g + 2`, `widened[2g + 1]` the bytes `4g + 1` and `4g + 3`, as
    /// signed 16-bit halves.
    fn txl_quantize_widen_dsp(x: *const i32, out: *mut i8, n: usize, wide: i32, widened: *mut u32);
}

// The largest magnitude: the larger of `-min` (as `u32`: `|i32::MIN|` is `2^31`) and `max`,
// the smallest and the largest value from 0 on (every `|x|` is at most the larger of the two,
// which are values or 0). A value within them passes by `SUB` of the smallest, `CMP` with the
// range `max - min` (unsigned: `x - min ≤ max - min` is `min ≤ x ≤ max`) and `BLS` over the
// widening, which takes it as the smallest or the largest; four values an `LDM`: 15
// instructions the four with the loop's two. Registers: r0 the values, r1 the values left
// (less 4 in the loop of four), r2 the smallest, r3 a value less the smallest, then the
// largest magnitude, r4-r7 the values, r12 the range, lr the largest value.
//
// The quantization: per value `ASR` by `max(e - 1, 0)`, `ADD` and `ASR` of `e > 0`, and the
// bytes of four values into a word by three `BFI`s: 19 instructions the four with the `LDM`, the
// `STR` and the loop's two (one `STRB` a value for the last ones). Registers: r0 the values, r1
// the bytes, r2 the values left, r3 `e > 0`, r12 `max(e - 1, 0)`, r4-r7 the values.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // a value in `reg` against the smallest (r2) and the range (r12), both widened where it is
    // outside them (the largest in lr)
    ".macro txl_largest_value reg",
    "sub r3, \\reg, r2",
    "cmp r3, r12",
    "bls .Ltxl_largest_within\\@",
    "add lr, r2, r12",
    "cmp \\reg, r2",
    "it lt",
    "movlt r2, \\reg",
    "cmp \\reg, lr",
    "it gt",
    "movgt lr, \\reg",
    "sub r12, lr, r2",
    ".Ltxl_largest_within\\@:",
    ".endm",
    ".section .text.txl_pow2_largest_dsp,\"ax\",%progbits",
    ".globl txl_pow2_largest_dsp",
    ".type txl_pow2_largest_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_pow2_largest_dsp:",
    "push {{r4, r5, r6, r7, lr}}",
    "movs r2, #0",
    "movs r12, #0",
    "subs r1, r1, #4",
    "blo 2f",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7}}",
    "txl_largest_value r4",
    "txl_largest_value r5",
    "txl_largest_value r6",
    "txl_largest_value r7",
    "subs r1, r1, #4",
    "bhs 1b",
    "2:",
    "adds r1, r1, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r0], #4",
    "txl_largest_value r4",
    "subs r1, r1, #1",
    "bne 3b",
    // the largest magnitude: `-min` (as unsigned) or `max`
    "4:",
    "add r3, r2, r12",
    "rsb r2, r2, #0",
    "cmp r2, r3",
    "it hi",
    "movhi r3, r2",
    "mov r0, r3",
    "pop {{r4, r5, r6, r7, pc}}",
    ".size txl_pow2_largest_dsp, . - txl_pow2_largest_dsp",
    ".section .text.txl_pow2_shift_dsp,\"ax\",%progbits",
    ".globl txl_pow2_shift_dsp",
    ".type txl_pow2_shift_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_pow2_shift_dsp:",
    "push {{r4, r5, r6, r7}}",
    "subs r12, r3, #1",
    "it lo",
    "movlo r12, #0",
    "cmp r3, #0",
    "it ne",
    "movne r3, #1",
    "subs r2, r2, #4",
    "blo 2f",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7}}",
    "asr r4, r4, r12",
    "add r4, r4, r3",
    "asr r4, r4, r3",
    "asr r5, r5, r12",
    "add r5, r5, r3",
    "asr r5, r5, r3",
    "asr r6, r6, r12",
    "add r6, r6, r3",
    "asr r6, r6, r3",
    "asr r7, r7, r12",
    "add r7, r7, r3",
    "asr r7, r7, r3",
    "bfi r4, r5, #8, #8",
    "bfi r4, r6, #16, #8",
    "bfi r4, r7, #24, #8",
    "str r4, [r1], #4",
    "subs r2, r2, #4",
    "bhs 1b",
    "2:",
    "adds r2, r2, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r0], #4",
    "asr r4, r4, r12",
    "add r4, r4, r3",
    "asr r4, r4, r3",
    "strb r4, [r1], #1",
    "subs r2, r2, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7}}",
    "bx lr",
    ".size txl_pow2_shift_dsp, . - txl_pow2_shift_dsp",
);

// The bias and the ReLU: per value `QADD` and `USAT` to 31 bits (0 for a negative sum, the sum
// itself otherwise); five values two `LDM`s and an `STM` (as many as the registers hold): 15
// instructions the five with the loop's two, 3 a value (3.25 four at a time); the last 1 to 4
// one at a time. Registers: r0 the values, r1 the biases, r2 the values left (less 5 in the
// loop), r3-r7 the values, r8-r12 the biases.
//
// The bias and the residual: per value two `QADD`s; four values three `LDM`s and an `STM`: 14
// instructions the four with the loop's two. Registers: r0 `h`, r1 `o`, r2 the biases, r3 the
// values left, r4-r7 `o` then its sums, r8-r11 the biases then `h`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_bias_relu_dsp,\"ax\",%progbits",
    ".globl txl_bias_relu_dsp",
    ".type txl_bias_relu_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_bias_relu_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "subs r2, r2, #5",
    "blo 2f",
    "1:",
    "ldm r0, {{r3, r4, r5, r6, r7}}",
    "ldm r1!, {{r8, r9, r10, r11, r12}}",
    "qadd r3, r3, r8",
    "qadd r4, r4, r9",
    "qadd r5, r5, r10",
    "qadd r6, r6, r11",
    "qadd r7, r7, r12",
    "usat r3, #31, r3",
    "usat r4, #31, r4",
    "usat r5, #31, r5",
    "usat r6, #31, r6",
    "usat r7, #31, r7",
    "stm r0!, {{r3, r4, r5, r6, r7}}",
    "subs r2, r2, #5",
    "bhs 1b",
    "2:",
    "adds r2, r2, #5",
    "beq 4f",
    "3:",
    "ldr r4, [r0]",
    "ldr r8, [r1], #4",
    "qadd r4, r4, r8",
    "usat r4, #31, r4",
    "str r4, [r0], #4",
    "subs r2, r2, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "bx lr",
    ".size txl_bias_relu_dsp, . - txl_bias_relu_dsp",
    ".section .text.txl_add_sums_dsp,\"ax\",%progbits",
    ".globl txl_add_sums_dsp",
    ".type txl_add_sums_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_add_sums_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "subs r3, r3, #4",
    "blo 2f",
    "1:",
    "ldm r1!, {{r4, r5, r6, r7}}",
    "ldm r2!, {{r8, r9, r10, r11}}",
    "qadd r4, r4, r8",
    "qadd r5, r5, r9",
    "qadd r6, r6, r10",
    "qadd r7, r7, r11",
    "ldm r0, {{r8, r9, r10, r11}}",
    "qadd r8, r8, r4",
    "qadd r9, r9, r5",
    "qadd r10, r10, r6",
    "qadd r11, r11, r7",
    "stm r0!, {{r8, r9, r10, r11}}",
    "subs r3, r3, #4",
    "bhs 1b",
    "2:",
    "adds r3, r3, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r1], #4",
    "ldr r8, [r2], #4",
    "qadd r4, r4, r8",
    "ldr r8, [r0]",
    "qadd r8, r8, r4",
    "str r8, [r0], #4",
    "subs r3, r3, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "bx lr",
    ".size txl_add_sums_dsp, . - txl_add_sums_dsp",
);

// Per value `SMMULR` (the rounded high word, halves up: `⌊(x w + 2^31) / 2^32⌋`) and `SSAT` to
// 8 bits (`-128..=127`); four values' bytes into a word by three `BFI`s, then the clamp of the
// bytes at -127 by `SSUB8` against `0x81818181` (its GE flags: the bytes at least -127) and
// `SEL`. Eight values an iteration, one `LDM` and two `STR`s (a word at any alignment; `STRD`
// and `STM` want it aligned): 31 instructions the eight with the loop's two, 3.875 a value
// (17 the four, 4.25 a value, four at a time); four more once where 4 to 7 are left, and for
// the last ones `CMN`, `IT`, `MVNLT` and a `STRB` a value. `txl_quantize_widen_dsp` also
// writes each word of four bytes widened for the row sums, two `SXTB16` and one `STRD` (37
// instructions the eight, 4.625 a value, where widening them apart takes 1.75 a value more).
// Registers: r0 the values, r1 the bytes, r2 the values left (less 8 in the loop), r3 `wide`,
// r4-r11 the values, r12 `0x81818181`, lr the widened words.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // the bytes of the four values in `a`, `b`, `c`, `d` into `a`, `b` a scratch register
    ".macro txl_quantize_wide_word a, b, c, d",
    "ssat \\a, #8, \\a",
    "ssat \\b, #8, \\b",
    "ssat \\c, #8, \\c",
    "ssat \\d, #8, \\d",
    "bfi \\a, \\b, #8, #8",
    "bfi \\a, \\c, #16, #8",
    "bfi \\a, \\d, #24, #8",
    "ssub8 \\b, \\a, r12",
    "sel \\a, \\a, r12",
    ".endm",
    // the four values' word in `a` also widened, as `dsp::widen_input_i8` makes it: its bytes 0
    // and 2, then 1 and 3, as 16-bit halves (`SXTB16`), two words to `lr`
    ".macro txl_quantize_widen_pair widen, a, b, c",
    ".if \\widen",
    "sxtb16 \\b, \\a",
    "sxtb16 \\c, \\a, ror #8",
    "strd \\b, \\c, [lr], #8",
    ".endif",
    ".endm",
    ".macro txl_quantize_wide_fn name, widen",
    ".section .text.\\name,\"ax\",%progbits",
    ".globl \\name",
    ".type \\name,%function",
    ".p2align 2",
    ".thumb_func",
    "\\name:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
    ".if \\widen",
    "ldr lr, [sp, #36]",
    ".endif",
    "mov r12, #0x81818181",
    "subs r2, r2, #8",
    "blo 2f",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "smmulr r4, r4, r3",
    "smmulr r5, r5, r3",
    "smmulr r6, r6, r3",
    "smmulr r7, r7, r3",
    "smmulr r8, r8, r3",
    "smmulr r9, r9, r3",
    "smmulr r10, r10, r3",
    "smmulr r11, r11, r3",
    "txl_quantize_wide_word r4, r5, r6, r7",
    "txl_quantize_wide_word r8, r9, r10, r11",
    "txl_quantize_widen_pair \\widen, r4, r5, r6",
    "txl_quantize_widen_pair \\widen, r8, r9, r10",
    "str r4, [r1], #4",
    "str r8, [r1], #4",
    "subs r2, r2, #8",
    "bhs 1b",
    // four more where 4 to 7 are left
    "2:",
    "adds r2, r2, #8",
    "beq 4f",
    "cmp r2, #4",
    "blo 3f",
    "ldm r0!, {{r4, r5, r6, r7}}",
    "smmulr r4, r4, r3",
    "smmulr r5, r5, r3",
    "smmulr r6, r6, r3",
    "smmulr r7, r7, r3",
    "txl_quantize_wide_word r4, r5, r6, r7",
    "txl_quantize_widen_pair \\widen, r4, r5, r6",
    "str r4, [r1], #4",
    "subs r2, r2, #4",
    "beq 4f",
    "3:",
    "ldr r4, [r0], #4",
    "smmulr r4, r4, r3",
    "ssat r4, #8, r4",
    "cmn r4, #127",
    "it lt",
    "mvnlt r4, #126",
    "strb r4, [r1], #1",
    "subs r2, r2, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
    ".size \\name, . - \\name",
    ".endm",
    "txl_quantize_wide_fn txl_quantize_wide_dsp, 0",
    "txl_quantize_wide_fn txl_quantize_widen_dsp, 1",
);

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
    // SAFETY: `y` and `b` hold `n ≥ 1` values; the kernel reads those, writes those of `y`, and
    // restores the registers it saves.
    let left = unsafe { txl_add_fixed_dsp(y.as_mut_ptr(), b.as_ptr().cast(), n, c - 1) };
    if left != 0 {
        for (y, b) in y[..n].iter_mut().zip(&b[..n]) {
            let bits = b.to_bits();
            if c - (((bits >> 23) & 0xFF) as i32) < 1 {
                *y = y.saturating_add(rare(bits));
            }
        }
    }
}

extern "C" {
    /// For `i < n` (`n ≥ 1`), `y[i] = QADD(y[i], f)`, `f` the fixed-point value of the `f32` of
    /// bits `bits[i]` where its shift right `right = c - exponent` is at least 1 (`c1` being
    /// `c - 1 = 149 - frac`); the others left as they were. Returns whether some were left.
    fn txl_add_fixed_dsp(y: *mut i32, bits: *const u32, n: usize, c1: i32) -> u32;
}

// Per value: the exponent by `UBFX`, `right - 1` by `SUBS` from `c - 1` (negative: a value
// left, out of line, its addend 0), the 24-bit mantissa (`UBFX` of the fraction, `ORR` of its
// leading one), `LSR` by `right - 1` (`⌊mantissa / 2^(right - 1)⌋`; 0 for `right ≥ 25`, as the
// rounded quotient is: zeros and subnormals), `ADDS` of 1 and `LSR` by 1 (the rounding: halves
// of the magnitude up, away from zero), the sign by `EOR` and `SUB`, `QADD` to `y`: 11
// instructions a value. Two values an iteration (`LDRD` of the bits and of `y`, `STRD`): 27
// instructions the two with the loop's, 13.5 a value (18 one at a time, with a `CMP` of
// `right + 7` with 8 and the mantissa from bit 31); the last one alone. Registers: r0 `y`, r1
// the bits, r2 the values left (less 2 in the loop), r3 `c - 1`, r4 and r8 the bits, r5 and r9
// `right - 1`, r6 and r10 the magnitudes, then the values, r7 and r11 `y`, r12 whether some
// value was left.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    // the value of the bits in `b` into `v` (`r` a scratch register), or to `out` where it is
    // left (which comes back to `back`, the value 0)
    ".macro txl_add_fixed_value b, r, v, out, back",
    "ubfx \\r, \\b, #23, #8",
    "subs \\r, r3, \\r", // right - 1
    "blt \\out",
    "ubfx \\v, \\b, #0, #23",
    "orr \\v, \\v, #0x800000",
    "lsr \\v, \\v, \\r",
    "adds \\v, \\v, #1",
    "lsr \\v, \\v, #1",
    "eor \\v, \\v, \\b, asr #31",
    "sub \\v, \\v, \\b, asr #31",
    "\\back:",
    ".endm",
    ".section .text.txl_add_fixed_dsp,\"ax\",%progbits",
    ".globl txl_add_fixed_dsp",
    ".type txl_add_fixed_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_add_fixed_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "movs r12, #0",
    "subs r2, r2, #2",
    "blt 8f",
    "1:",
    "ldrd r4, r8, [r1], #8",
    "txl_add_fixed_value r4, r5, r6, 20f, 30",
    "txl_add_fixed_value r8, r9, r10, 21f, 31",
    "ldrd r7, r11, [r0]",
    "qadd r7, r7, r6",
    "qadd r11, r11, r10",
    "strd r7, r11, [r0], #8",
    "subs r2, r2, #2",
    "bge 1b",
    // the last value, or none
    "8:",
    "adds r2, r2, #2",
    "beq 9f",
    "ldr r4, [r1]",
    "txl_add_fixed_value r4, r5, r6, 22f, 32",
    "ldr r7, [r0]",
    "qadd r7, r7, r6",
    "str r7, [r0]",
    "9:",
    "mov r0, r12",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "bx lr",
    // a value left: 0 added
    "20:",
    "movs r12, #1",
    "movs r6, #0",
    "b 30b",
    "21:",
    "movs r12, #1",
    "movs r10, #0",
    "b 31b",
    "22:",
    "movs r12, #1",
    "movs r6, #0",
    "b 32b",
    ".size txl_add_fixed_dsp, . - txl_add_fixed_dsp",
);

/// `y[i] = y[i].saturating_add(x[i])` for each `i` (as many as the shorter).
pub fn add_saturating(y: &mut [i32], x: &[i32]) {
    let n = y.len().min(x.len());
    if n == 0 {
        return;
    }
    // SAFETY: `y` and `x` hold `n ≥ 1` values; the kernel reads those, writes those of `y`, and
    // restores the registers it saves.
    unsafe { txl_add_saturating_dsp(y.as_mut_ptr(), x.as_ptr(), n) }
}

extern "C" {
    /// `y[i] = QADD(y[i], x[i])` for `i < n` (`n ≥ 1`).
    fn txl_add_saturating_dsp(y: *mut i32, x: *const i32, n: usize);
}

// Per value a `QADD`; five values two `LDM`s and an `STM` (as many as the registers hold): 10
// instructions the five with the loop's two, 2 a value (2.25 four at a time); the last 1 to 4
// one at a time. Registers: r0 `y`, r1 `x`, r2 the values left (less 5 in the loop), r3-r7
// `y`, r8-r12 `x`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_add_saturating_dsp,\"ax\",%progbits",
    ".globl txl_add_saturating_dsp",
    ".type txl_add_saturating_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_add_saturating_dsp:",
    "push {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "subs r2, r2, #5",
    "blo 2f",
    "1:",
    "ldm r0, {{r3, r4, r5, r6, r7}}",
    "ldm r1!, {{r8, r9, r10, r11, r12}}",
    "qadd r3, r3, r8",
    "qadd r4, r4, r9",
    "qadd r5, r5, r10",
    "qadd r6, r6, r11",
    "qadd r7, r7, r12",
    "stm r0!, {{r3, r4, r5, r6, r7}}",
    "subs r2, r2, #5",
    "bhs 1b",
    "2:",
    "adds r2, r2, #5",
    "beq 4f",
    "3:",
    "ldr r4, [r0]",
    "ldr r8, [r1], #4",
    "qadd r4, r4, r8",
    "str r4, [r0], #4",
    "subs r2, r2, #1",
    "bne 3b",
    "4:",
    "pop {{r4, r5, r6, r7, r8, r9, r10, r11}}",
    "bx lr",
    ".size txl_add_saturating_dsp, . - txl_add_saturating_dsp",
);

/// [`embedding_columns_i32`](crate::kernels::embedding_columns_i32) one column at a time, as
/// that function defines it.
pub fn embedding_columns(act: &[f32], q: &[i8], out: &mut [i32], (mantissa, shift): (u32, u32)) -> bool {
    let n = act.len().min(q.len()).min(out.len());
    if n == 0 {
        return true;
    }
    if !(1 << 30..1 << 31).contains(&mantissa) || shift > 64 {
        return false;
    }
    // SAFETY: the three slices hold `n ≥ 1` values; the kernel reads those of `act` and `q`,
    // writes those of `out` (up to the first column it refuses), and restores the registers it
    // saves.
    let refused = unsafe {
        txl_embedding_dsp(
            act.as_ptr().cast(),
            q.as_ptr(),
            out.as_mut_ptr(),
            n,
            mantissa << 1,
            shift as i32 + 95,
        )
    };
    refused == 0
}

extern "C" {
    /// For `i < n` (`n ≥ 1`): `out[i]` of `bits[i]` and `q[i]` as [`embedding_columns`] makes
    /// it, `mantissa2` being the row's mantissa times 2 and `c` its shift plus 95; returns 0
    /// where every column took the usual path, else nonzero at the first column that does not.
    fn txl_embedding_dsp(
        bits: *const u32,
        q: *const i8,
        out: *mut i32,
        n: usize,
        mantissa2: u32,
        c: i32,
    ) -> u32;
}

// A column: its exponent's check by `SUB` of `95 · 2^23` from the bits and an unsigned `CMP`
// with `62 · 2^23` (a positive scale of biased exponent `95..=156`; a negative one's bits are
// `2^31` or more), the mantissas' product as `UMULL` of `2A = (2^23 + f) · 2^8` and `2M`
// (both below `2^32`): the high word `h = ⌊4P / 2^32⌋ = ⌊P / 2^30⌋` of `P = A M` in `[2^60,
// 2^62)`, `top = h >> 31` (`P`'s bit 61) and `m = ⌊P / 2^(30 + top)⌋ = h >> top` (`LSR` by a
// register), `t = 32 - s = e + top - c` (`c = shift + 95`). For `t` in `0..=24` (`s` in
// `8..=32`): `SMMULR(q · 2^t, m) = ⌊(q m 2^t + 2^31) / 2^32⌋ = ⌊(q m + 2^(s-1)) / 2^s⌋`, the
// exact rounding (`|q · 2^t| ≤ 2^31`: `q · 2^t` keeps its bits, `m < 2^31`); for `t` in
// `-15..=-1` (`s` in `33..=47`): `⌊(⌊q m / 2^32⌋ + 2^(s-33)) / 2^(s-32)⌋` (`SMMUL`, then `ASR`
// by `s - 33`, `ADD` of 1, `ASR` by 1: `2^(s-1)` is a multiple of `2^32`), the same value. A
// column of another exponent or `t` ends the kernel (nonzero returned). The usual column: 20
// instructions with the loop's two. Registers: r0 the bits, r1 the int8 values, r2 `out`, r3
// `2M`, r4 the bits, r5 `q`, then the value, r6 a check, then `2A`, r7 the low word, then
// `top` and `t`, r8 `h`, then `m`, r12 `c`, lr the columns left.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_embedding_dsp,\"ax\",%progbits",
    ".globl txl_embedding_dsp",
    ".type txl_embedding_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_embedding_dsp:",
    "push {{r4, r5, r6, r7, r8, lr}}",
    "mov lr, r3",
    "ldr r3, [sp, #24]",
    "ldr r12, [sp, #28]",
    "1:",
    "ldr r4, [r0], #4",
    "ldrsb r5, [r1], #1",
    "sub r6, r4, #0x2F800000", // the bits less 95 · 2^23
    "cmp r6, #0x1F000000",     // 62 · 2^23
    "bhs 9f",
    "lsl r6, r4, #8",
    "orr r6, r6, #0x80000000", // 2A
    "umull r7, r8, r6, r3",
    "lsr r7, r8, #31", // top
    "lsr r8, r8, r7",  // m
    "add r7, r7, r4, lsr #23",
    "subs r7, r7, r12", // t
    "blt 4f",
    "cmp r7, #24",
    "bhi 9f",
    "lsl r5, r5, r7",
    "smmulr r5, r5, r8",
    "2:",
    "str r5, [r2], #4",
    "subs lr, lr, #1",
    "bne 1b",
    "movs r0, #0",
    "pop {{r4, r5, r6, r7, r8, pc}}",
    // `t` below 0: `s - 33 = -t - 1` in `0..=14`
    "4:",
    "cmn r7, #15",
    "blt 9f",
    "smmul r5, r5, r8",
    "mvn r7, r7", // -t - 1
    "asr r5, r5, r7",
    "adds r5, r5, #1",
    "asrs r5, r5, #1",
    "b 2b",
    // a column off the usual path
    "9:",
    "movs r0, #1",
    "pop {{r4, r5, r6, r7, r8, pc}}",
    ".size txl_embedding_dsp, . - txl_embedding_dsp",
);

/// The attention output's shift by the values' powers of two: `out[i] = sums[i] << amount`
/// saturated to the `i32` range for `amount` in `1..=31`, `round_shift_i32(sums[i], -amount)`
/// for `amount` in `-31..=0`, as many as the shorter slice. Four values an `LDM` and an `STM`;
/// a group of four with a value the shift left saturates, and the last 1 to 3 values, by the
/// scalar definition. The same values.
pub fn shift_sums(sums: &[i32], out: &mut [i32], amount: i32) {
    let n = sums.len().min(out.len());
    let (sums, out) = (&sums[..n], &mut out[..n]);
    let shift = amount.unsigned_abs().min(31);
    let groups = n / 4;
    let mut i = 0;
    if amount > 0 {
        while i / 4 < groups {
            // SAFETY: `i / 4 < groups`, so both slices hold `4 · (groups - i / 4)` values from
            // `i` on; the kernel reads and writes at most those, and restores the registers it
            // saves.
            let left = unsafe {
                txl_shift_left_dsp(sums[i..].as_ptr(), out[i..].as_mut_ptr(), groups - i / 4, shift)
            };
            i = 4 * (groups - left);
            if left > 0 {
                // the group with a saturated value
                for k in i..i + 4 {
                    out[k] = shift_left_saturated(sums[k], shift);
                }
                i += 4;
            }
        }
        for k in i..n {
            out[k] = shift_left_saturated(sums[k], shift);
        }
        return;
    }
    if groups > 0 {
        if shift == 0 {
            out[..4 * groups].copy_from_slice(&sums[..4 * groups]);
        } else {
            // SAFETY: both slices hold `4 · groups ≥ 4` values; the kernel reads and writes
            // those, and restores the registers it saves.
            unsafe { txl_shift_right_dsp(sums.as_ptr(), out.as_mut_ptr(), groups, shift - 1) };
        }
        i = 4 * groups;
    }
    for k in i..n {
        // `round_shift_i32`: the value shifted, plus the last bit shifted out
        out[k] = match shift {
            0 => sums[k],
            s => (sums[k] >> s) + ((sums[k] >> (s - 1)) & 1),
        };
    }
}

/// `x << shift` saturated to the `i32` range.
fn shift_left_saturated(x: i32, shift: u32) -> i32 {
    let y = x << shift;
    if y >> shift == x {
        y
    } else if x < 0 {
        i32::MIN
    } else {
        i32::MAX
    }
}

extern "C" {
    /// For groups of four values (`groups ≥ 1`) in order, while each value of the group keeps
    /// its bits shifted left by `shift` (`1..=31`): `out[i] = sums[i] << shift`. Returns the
    /// groups it leaves (0 for none), the first of them unread.
    fn txl_shift_left_dsp(sums: *const i32, out: *mut i32, groups: usize, shift: u32) -> usize;
    /// `out[i] = (sums[i] >> (s1 + 1)) + ((sums[i] >> s1) & 1)` (`round_shift_i32` by
    /// `s1 + 1`, `s1` in `0..=30`) for `i < 4 · groups` (`groups ≥ 1`).
    fn txl_shift_right_dsp(sums: *const i32, out: *mut i32, groups: usize, s1: u32);
}

// Left: a value keeps its bits shifted by `s` where `x ^ (x >> 31)` (`x`, or `-x - 1` for a
// negative one) is below `2^(31 - s)`; the four's bitwise OR is below that power of two where
// each is, one `CMP` for the group: one `LDM`, seven `EOR`/`ORR`, the check, four `LSL`, one
// `STM` and the loop's two, 17 instructions the four (the scalar loop takes 31). Right: the
// rounding shift as `ASR` by `s - 1`, then bit 0 plus the value shifted one more (`AND`, `ADD`
// with `ASR #1`; no sum that can overflow), 16 instructions the four. Registers: r0 the sums,
// r1 the output, r2 the groups left, r3 the shift (`s - 1` right), r4-r7 the values, r8 and r9
// the magnitudes, then a value's bit, r12 `2^(31 - s)`.
global_asm!(
    ".syntax unified",
    ".thumb",
    ".cpu cortex-m4",
    ".section .text.txl_shift_left_dsp,\"ax\",%progbits",
    ".globl txl_shift_left_dsp",
    ".type txl_shift_left_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_shift_left_dsp:",
    "push {{r4, r5, r6, r7, r8, r9}}",
    "rsb r12, r3, #31",
    "movs r4, #1",
    "lsl r12, r4, r12", // 2^(31 - s)
    "1:",
    "ldm r0, {{r4, r5, r6, r7}}",
    "eor r8, r4, r4, asr #31",
    "eor r9, r5, r5, asr #31",
    "orr r8, r8, r9",
    "eor r9, r6, r6, asr #31",
    "orr r8, r8, r9",
    "eor r9, r7, r7, asr #31",
    "orr r8, r8, r9",
    "cmp r8, r12",
    "bhs 2f",
    "lsl r4, r4, r3",
    "lsl r5, r5, r3",
    "lsl r6, r6, r3",
    "lsl r7, r7, r3",
    "stm r1!, {{r4, r5, r6, r7}}",
    "adds r0, r0, #16",
    "subs r2, r2, #1",
    "bne 1b",
    "2:",
    "mov r0, r2",
    "pop {{r4, r5, r6, r7, r8, r9}}",
    "bx lr",
    ".size txl_shift_left_dsp, . - txl_shift_left_dsp",
    ".section .text.txl_shift_right_dsp,\"ax\",%progbits",
    ".globl txl_shift_right_dsp",
    ".type txl_shift_right_dsp,%function",
    ".p2align 2",
    ".thumb_func",
    "txl_shift_right_dsp:",
    "push {{r4, r5, r6, r7, r8}}",
    "1:",
    "ldm r0!, {{r4, r5, r6, r7}}",
    "asr r4, r4, r3",
    "and r8, r4, #1",
    "add r4, r8, r4, asr #1",
    "asr r5, r5, r3",
    "and r8, r5, #1",
    "add r5, r8, r5, asr #1",
    "asr r6, r6, r3",
    "and r8, r6, #1",
    "add r6, r8, r6, asr #1",
    "asr r7, r7, r3",
    "and r8, r7, #1",
    "add r7, r8, r7, asr #1",
    "stm r1!, {{r4, r5, r6, r7}}",
    "subs r2, r2, #1",
    "bne 1b",
    "pop {{r4, r5, r6, r7, r8}}",
    "bx lr",
    ".size txl_shift_right_dsp, . - txl_shift_right_dsp",
);
