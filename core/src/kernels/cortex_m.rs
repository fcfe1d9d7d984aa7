//! Cortex-M kernels for cores with the DSP extension (Armv7E-M: Cortex-M4, M7; Armv8-M Mainline
//! with DSP: M33, M55), enabled by the `cortex-m-dsp` feature.
//!
//! `SMLAD` multiplies two pairs of signed 16-bit halves and adds both products to an
//! accumulator in one instruction; `SXTB16` sign-extends bytes 0 and 2 (or, rotated, 1 and 3)
//! of a word into those halves. Integer sums are exact in any order, so these kernels give the
//! same bits as the scalar ones (`Config::validate` bounds the widths so no sum overflows).

use core::arch::asm;

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

fn word(bytes: &[i8]) -> u32 {
    u32::from_le_bytes([bytes[0] as u8, bytes[1] as u8, bytes[2] as u8, bytes[3] as u8])
}

/// `sum a[i] * b[i]` in i32, eight products per four `SMLAD`s; equal to `scalar::dot_i8`.
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
    even + odd + super::scalar::dot_i8(&a[body..n], &b[body..n])
}
