//! The integer attention's scores on cores with the DSP extension and no Helium (Cortex-M4,
//! M7, M33), enabled by the `cortex-m-dsp` feature: a run of keys read where they lie, the
//! keys' powers of two in the memory's ring (one word a slot, a stride apart) and the position
//! sums and their powers of two by distance, walked down a distance a key, with no gathered
//! copy of either; a key a `SMMULR`, the same bits as the scalar definition.

use core::arch::global_asm;

/// Keys a pass of [`scores`] takes beyond the farthest distance (its one position sum copied a
/// key on the stack).
const CLAMPED: usize = 16;

/// `integer::attention_score_of_small` of each key `k` of a row in place, `scores[k]` its
/// content sum: its power of two `ce + ring[a_k]` (the bits; `a_k` is `at` plus `k` times
/// `heads`, wrapping at the ring's end), its position sum `positions[d_k]` and that sum's power
/// of two `pe + exponents[d_k · row]`, `d_k = min(nearest - k, far)` (`far` the last distance of
/// `positions`), for the rescale `mantissa · 2^-(shift - e)`; returns the largest score. The
/// row in runs of keys read where they lie, none across the ring's end (at most two) nor
/// across `far` (the keys beyond it by [`CLAMPED`], their one position sum copied); the usual
/// key in the kernel, one `SMMULR`, `slow(k, content)` (the scalar definition) for the others.
/// The powers of two are those of sums (below `2^24` in magnitude, as every one the session
/// makes is). `None`, no score made, where the tables do not hold what the row reads.
pub fn scores(
    scores: &mut [i32],
    (ring, heads, at, ce): (&[f32], usize, usize, i32),
    (positions, exponents, row, pe): (&[i32], &[u8], usize, i32),
    nearest: usize,
    (mantissa, shift): (u32, i32),
    slow: impl Fn(usize, i32) -> i32,
) -> Option<i32> {
    let n = scores.len();
    let far = positions.len().checked_sub(1)?;
    if n == 0 {
        return Some(i32::MIN);
    }
    let held = heads > 0 && heads <= ring.len() && at < ring.len() && nearest + 1 >= n;
    if !held || far.saturating_mul(row) >= exponents.len() {
        return None;
    }
    // the ring's stride and the exponents' row in bytes, `ce - pe`, `(32 - C) + pe`, `m` and
    // the largest score so far
    let mut parameters = [
        4 * heads as i32,
        row as i32,
        ce.wrapping_sub(pe),
        32i32.wrapping_sub(shift).wrapping_add(pe),
        mantissa as i32,
        i32::MIN,
    ];
    let mut copies = [0i32; CLAMPED];
    // the next key, its ring index and its distance before the clamp
    let (mut k, mut at, mut distance) = (0, at, nearest);
    while k < n {
        // the keys up to the ring's end, and up to `far`
        let mut run = (ring.len() - at).div_ceil(heads).min(n - k);
        let (sums, bytes) = if distance > far {
            run = run.min(distance - far).min(CLAMPED);
            copies[..run].fill(positions[far]);
            parameters[1] = 0;
            (&copies[run - 1], &exponents[far * row])
        } else {
            parameters[1] = row as i32;
            (&positions[distance], &exponents[distance * row])
        };
        // SAFETY: `k < n` and `run ≤ n - k`, so `scores[k..]` holds the run's keys; the ring's
        // words at `at + i · heads` for `i < run` are below its end (`run` keys reach it at
        // most; `at` stays below it: `heads` is at most its length); beyond `far`,
        // `copies[run - 1 - i]` and `exponents[far · row]`, else `positions[distance - i]` and
        // `exponents[(distance - i) · row]` for `i < run`, all in bounds
        // (`distance + 1 = nearest + 1 - k ≥ n - k ≥ run`, `distance ≤ far`). The kernel (for
        // four heads and four bytes a distance, the same words and bytes addressed from the
        // scores' and position sums' addresses) reads those, reads and writes the values of
        // `scores` before the one it returns at, reads and writes the parameters, and restores
        // the registers it saves.
        let done = unsafe {
            let (scores, words) = (scores.as_mut_ptr().add(k), ring.as_ptr().add(at));
            if heads == 4 && parameters[1] == 4 {
                // (addresses alone, as the kernel takes them)
                let words = (words as usize).wrapping_sub((scores as usize).wrapping_mul(4));
                let bytes = (bytes as *const u8 as usize).wrapping_sub(sums as *const i32 as usize);
                txl_scores_run4_dsp(scores, words, sums, bytes, run, parameters.as_mut_ptr())
            } else {
                txl_scores_run_dsp(scores, words.cast(), sums, bytes, run, parameters.as_mut_ptr())
            }
        };
        // the key the kernel left (its scalar definition), or none
        let next = (done + 1).min(run);
        if done < run {
            scores[k + done] = slow(k + done, scores[k + done]);
            parameters[5] = parameters[5].max(scores[k + done]);
        }
        k += next;
        at += next * heads;
        if at >= ring.len() {
            at -= ring.len();
        }
        distance = distance.wrapping_sub(next); // (past the last key unused)
    }
    Some(parameters[5])
}

extern "C" {
    /// For `i < n` (`n ≥ 1`) in order, with `k = ring[i · S]` (`S = parameters[0]` bytes),
    /// `p = positions[-i]`, `b = exponents[-i · R]` (`R = parameters[1]` bytes: the position
    /// tables walked down from the first key's),
    /// `d = k + parameters[2] - b` (the key's power of two less the position sum's), and
    /// `v = parameters[3] + b + min(d, 0)` (`32 - C + e`, `e` the smaller power of two): while
    /// `|d| ≤ 3`, `v` is in `0..=31` and the sum `x = (scores[i] << max(d, 0)) +
    /// (p << max(-d, 0))` keeps its bits shifted left by `max(0, v - 15)`,
    /// `scores[i] = round(x m / 2^(32 - v))` (halves up, `m = parameters[4]`), `parameters[5]`
    /// the largest of them and itself; returns the index of the first key it leaves (`n` for
    /// none), that key unchanged.
    fn txl_scores_run_dsp(
        scores: *mut i32,
        ring: *const i32,
        positions: *const i32,
        exponents: *const u8,
        n: usize,
        parameters: *mut i32,
    ) -> usize;

    /// [`txl_scores_run_dsp`] for four heads (`S` 16 bytes, `R` 4), the ring's word and the
    /// exponent byte of key `i` addressed from its score's and position sum's addresses: the
    /// ring's at `ring + 4 · scores` (`scores` the key's address; `ring` as an address alone:
    /// the first key's word less four times the first score's address, wrapping) and the byte
    /// at `exponents + positions` (the first key's byte less the first position sum's address).
    /// `parameters[0]` and `[1]` unread.
    fn txl_scores_run4_dsp(
        scores: *mut i32,
        ring: usize,
        positions: *const i32,
        exponents: usize,
        n: usize,
        parameters: *mut i32,
    ) -> usize;
}

/// `txl_scores_run_dsp`'s code under the name `$name`, the key's exponent (r4) and its position
/// sum's exponent byte (r5) loaded by `$load` (the ring's and the bytes' pointers stepped
/// there where they are pointers).
macro_rules! scores_run_kernel {
    ($name:literal, $($load:literal),+) => {
        global_asm!(
            ".syntax unified",
            ".thumb",
            ".cpu cortex-m4",
            concat!(".section .text.", $name, ",\"ax\",%progbits"),
            concat!(".globl ", $name),
            concat!(".type ", $name, ",%function"),
            ".p2align 2",
            ".thumb_func",
            concat!($name, ":"),
            "push {{r4, r5, r6, r7, r8, r9, r10, r11, lr}}",
            "ldr lr, [sp, #36]",
            "ldr r12, [sp, #40]",
            "ldr r7, [r12]",
            "ldr r8, [r12, #4]",
            "ldr r9, [r12, #12]",
            "ldr r10, [r12, #16]",
            "ldr r11, [r12, #20]",
            "ldr r12, [r12, #8]",
            "lsl r10, r10, #15", // m · 2^15
            "1:",
            $($load,)+
            "add r4, r4, r12",
            "subs r4, r4, r5", // d
            "add r5, r5, r9",  // v for `d ≥ 0`
            "blt 4f",
            // `d ≥ 0`: `e = pe + b`, the content sum shifted
            "cmp r4, #3",
            "bhi 9f",
            "ldr r6, [r0]",
            "lsl r6, r6, r4",
            "ldr r4, [r2], #-4",
            "add r6, r6, r4",
            "5:",
            "subs r4, r5, #15", // a
            "ble 6f",
            // `v` in `16..=31`, a sum that keeps its bits shifted by `a = v - 15`
            "cmp r4, #16",
            "bhi 9f",
            "lsl r5, r6, r4",
            "asr r4, r5, r4",
            "cmp r4, r6",
            "bne 9f",
            "smmulr r6, r5, r10",
            "7:",
            "str r6, [r0], #4",
            "cmp r6, r11",
            "it gt",
            "movgt r11, r6",
            "subs lr, lr, #1",
            "bne 1b",
            "b 9f",
            // `d < 0`: `e = ce + k`, the position sum shifted
            "4:",
            "add r5, r5, r4", // v
            "rsb r4, r4, #0",
            "cmp r4, #3",
            "bhi 9f",
            "ldr r6, [r2], #-4",
            "lsl r6, r6, r4",
            "ldr r4, [r0]",
            "add r6, r6, r4",
            "b 5b",
            // `v` below 16: in `0..=15`
            "6:",
            "cmp r5, #15",
            "bhi 9f",
            "rsb r4, r5, #15",
            "lsr r4, r10, r4", // m · 2^v
            "smmulr r6, r6, r4",
            "b 7b",
            // the key is the caller's (`lr` keys left), or none is left
            "9:",
            "ldr r0, [sp, #36]",
            "sub r0, r0, lr",
            "ldr r12, [sp, #40]",
            "str r11, [r12, #20]",
            "pop {{r4, r5, r6, r7, r8, r9, r10, r11, pc}}",
            concat!(".size ", $name, ", . - ", $name),
        );
    };
}

// `attention_score_of_small`'s usual path as `dsp_integer`'s `txl_scores_dsp` takes it, the
// key's operands read where they lie: the ring's exponent a `LDR` and an `ADD` of the stride,
// the position sum a `LDR` walking down, its exponent a `LDRB` and a `SUB` of the row, and
// `d = (k + (ce - pe)) - b` (`e = pe + b` for `d ≥ 0`, else `ce + k`, so
// `v = (32 - C + pe) + b`, plus `d` for `d < 0`). The usual key (`0 ≤ d ≤ 3`, `v` in
// `16..=31`): 28 instructions (29 with the `IT`), the gathers' copies and their loads gone.
// Registers: r0 the scores, r1 the ring, r2 the position sums, r3 their exponents, r4 the
// key's exponent, then `d`, the shift and the shifted sum shifted back, r5 the exponent byte,
// then `v` and the shifted sum, r6 the content sum, then the sum and the score, r7 the stride,
// r8 the row, r9 `32 - C + pe`, r10 `m · 2^15`, r11 the largest score, r12 `ce - pe`, lr the
// keys left; the count and the parameters' address on the stack.
scores_run_kernel!(
    "txl_scores_run_dsp",
    "ldr r4, [r1]",
    "ldrb r5, [r3]",
    "add r1, r1, r7",
    "sub r3, r3, r8"
);

// Four heads: the ring's word at `r1 + 4 · r0` (16 bytes a key as the scores' 4) and the byte
// at `r3 + r2` (4 bytes a key down as the position sums'), no pointer of their own to step:
// the usual key in 26 instructions (27 with the `IT`).
scores_run_kernel!(
    "txl_scores_run4_dsp",
    "ldr r4, [r1, r0, lsl #2]",
    "ldrb r5, [r3, r2]"
);
