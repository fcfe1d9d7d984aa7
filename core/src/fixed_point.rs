//! Fixed-point arithmetic for integer-only inference: every operation here uses integer
//! instructions alone (additions, shifts, 32- and 64-bit multiplications and divisions), so a
//! core without an FPU runs it without software floating point, and every core gives the same
//! bits. Rounding is spelled out in each function; nothing depends on the platform.
//!
//! A fixed-point number in format `Q(f)` is the integer `v` standing for the real `v · 2^-f`.
//!
//! | what | type | format | range |
//! |---|---|---|---|
//! | [`Multiplier`] | `mantissa: i32`, `shift: u8` | `mantissa · 2^-shift` | `0` or `[2^-32, 2^30)`, 31 significant bits |
//! | [`Scale16`] | `mantissa: u32`, `exponent: i32` | `mantissa · 2^exponent` | `0` or positive, 16 significant bits |
//! | [`Rescale`] | `mantissa: u32`, `shift: i32` | `mantissa · 2^-shift` | `0` or positive, 15 significant bits |
//! | [`exp_neg`] in | `u32` | `Q24` nats, `t ≥ 0` | `e^-t` for `t < 256` |
//! | [`exp_neg`] out | `u32` | `Q30` | `(0, 2^30]` |
//! | [`log2`] out | `i32` | `Q24` | `[0, 64)` for a `u64` argument |
//! | [`ln`] out | `i32` | `Q24` nats | `[0, 44.4)` |
//!
//! The two tables ([`EXP2_TABLE`], [`LOG2_TABLE`]) are constants of the code, not of a model:
//! 257 entries each, read with linear interpolation between neighbours; a test checks every
//! entry against `f64` math.

/// `log2(e)` in `Q31`.
pub const LOG2_E_Q31: u32 = 3_098_164_009;
/// `ln(2)` in `Q31`.
pub const LN_2_Q31: u32 = 1_488_522_236;
/// Largest shift of a [`Multiplier`].
pub const MAX_SHIFT: u8 = 62;
/// The most fraction bits the activations of integer arithmetic may have (`Q30`).
pub const MAX_FRAC: u32 = 30;

/// A non-negative real number `mantissa · 2^-shift` with 31 significant bits, the way gemmlowp
/// and TensorFlow Lite requantize: [`Multiplier::apply`] multiplies an `i32` by it with one
/// 32 × 32 → 64-bit product and a rounding shift. A normalised multiplier has its mantissa in
/// `[2^30, 2^31)`; zero is mantissa 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Multiplier {
    /// The significant bits, `0..2^31`.
    pub mantissa: i32,
    /// The power of two it is divided by, `0..=MAX_SHIFT`.
    pub shift: u8,
}

impl Multiplier {
    /// Zero: [`Multiplier::apply`] gives 0.
    pub const ZERO: Multiplier = Multiplier {
        mantissa: 0,
        shift: 0,
    };

    /// One.
    pub const ONE: Multiplier = Multiplier {
        mantissa: 1 << 30,
        shift: 30,
    };

    /// Whether the fields are in range: a mantissa in `0..2^31` (not negative) and a shift of at
    /// most [`MAX_SHIFT`]. Every multiplier this module makes is; an image's are checked with it.
    pub const fn is_valid(self) -> bool {
        self.mantissa >= 0 && self.shift <= MAX_SHIFT
    }

    /// The multiplier nearest `value` (round half up), normalised; `None` if `value` is negative,
    /// not finite or at least `2^30`. Values below `2^-32` keep fewer significant bits (`shift`
    /// stops at [`MAX_SHIFT`]), and below `2^-63` become zero. For the quantizer, on the host.
    pub fn from_f64(value: f64) -> Option<Multiplier> {
        if !(value >= 0.0 && value < (1u64 << 30) as f64) {
            return None;
        }
        if value == 0.0 {
            return Some(Multiplier::ZERO);
        }
        // the shift that brings value · 2^shift into [2^30, 2^31), at most MAX_SHIFT
        let mut shift = 0u8;
        let mut scaled = value;
        while scaled < (1u64 << 30) as f64 && shift < MAX_SHIFT {
            scaled *= 2.0;
            shift += 1;
        }
        while scaled >= (1u64 << 31) as f64 {
            // only for values in [2^30, ...), refused above; kept for clarity of the invariant
            scaled /= 2.0;
            shift = shift.checked_sub(1)?;
        }
        let mut mantissa = libm::floor(scaled + 0.5) as u64;
        if mantissa == 0 {
            return Some(Multiplier::ZERO);
        }
        if mantissa == 1 << 31 {
            // rounded up to the next power of two
            if shift == 0 {
                return None;
            }
            mantissa >>= 1;
            shift -= 1;
        }
        Some(Multiplier {
            mantissa: mantissa as i32,
            shift,
        })
    }

    /// The real value, for reports and tests.
    pub fn to_f64(self) -> f64 {
        self.mantissa as f64 / (1u64 << self.shift) as f64
    }

    /// `num / den` rounded down to 31 significant bits, normalised, in integers alone (one
    /// 64-bit division); zero if `num` is 0 or the quotient is below `2^-62`, `None` if `den` is
    /// 0 or the quotient is at least `2^31`.
    pub fn from_ratio(num: u64, den: u64) -> Option<Multiplier> {
        if den == 0 {
            return None;
        }
        if num == 0 {
            return Some(Multiplier::ZERO);
        }
        // keep 32 significant bits of the divisor (rounded up: at most 33 bits, a relative
        // error below 2^-31), so that the dividend, shifted to 31 more bits than the divisor,
        // fits 64 bits
        let den_bits = 64 - den.leading_zeros() as i32;
        let drop = (den_bits - 32).max(0);
        // rounded up, so the quotient never exceeds num / den
        let den = (den >> drop) + u64::from(den & ((1u64 << drop) - 1) != 0);
        let den_bits = 64 - den.leading_zeros() as i32;
        let num_bits = 64 - num.leading_zeros() as i32;
        let mut k = 31 + den_bits - num_bits;
        // (num << k) is in [2^(30 + den_bits), 2^(31 + den_bits)) and den in
        // [2^(den_bits - 1), 2^den_bits): the quotient is in (2^30, 2^32), one halving from
        // [2^30, 2^31)
        let mut quotient = shifted_quotient(num, den, k);
        if quotient >= 1 << 31 {
            k -= 1;
            quotient = shifted_quotient(num, den, k);
        }
        // num / den = quotient · 2^-k / 2^drop
        let mut shift = k + drop;
        if shift < 0 {
            return None;
        }
        let mut quotient = quotient as i64;
        // the halvings past the largest shift as one shift (the same value)
        if shift > MAX_SHIFT as i32 {
            quotient = quotient
                .checked_shr((shift - MAX_SHIFT as i32) as u32)
                .unwrap_or(0);
            shift = MAX_SHIFT as i32;
        }
        Some(Multiplier {
            mantissa: quotient as i32,
            shift: shift as u8,
        })
    }

    /// `round(x · self)`, halves rounded up (toward +∞), saturated to the `i32` range: one
    /// 64-bit product and an arithmetic shift.
    #[inline]
    pub fn apply(self, x: i32) -> i32 {
        saturate(self.apply_wide(x))
    }

    /// `round(x · self)`, halves rounded up, in 64 bits (no saturation: `|x · mantissa| < 2^62`).
    #[inline]
    pub fn apply_wide(self, x: i32) -> i64 {
        let product = x as i64 * self.mantissa as i64;
        if self.shift == 0 {
            return product;
        }
        (product + (1i64 << (self.shift - 1))) >> self.shift
    }

    /// The product of two multipliers, rounded down to 31 significant bits; `None` if it is at
    /// least `2^31`.
    #[inline]
    pub fn times(self, other: Multiplier) -> Option<Multiplier> {
        let product = self.mantissa as u64 * other.mantissa as u64; // < 2^62
        let shift = self.shift as i32 + other.shift as i32;
        if self.mantissa >= 1 << 30 && other.mantissa >= 1 << 30 {
            // two normalised mantissas: the product has 61 or 62 bits, so
            // `from_ratio_pow2` keeps its top 31 (no count of leading zeros); the same result
            let drop = 30 + (product >> 61) as i32;
            let shift = shift - drop;
            if (0..=MAX_SHIFT as i32).contains(&shift) {
                return Some(Multiplier {
                    mantissa: (product >> drop) as i32,
                    shift: shift as u8,
                });
            }
        }
        Multiplier::from_ratio_pow2(product, shift)
    }

    /// `self · 2^exponent`, exactly while the shift stays in `0..=MAX_SHIFT`; below that
    /// (a value under `2^-32`) the mantissa loses low bits, and `None` if it is at least `2^31`.
    pub fn times_pow2(self, exponent: i32) -> Option<Multiplier> {
        Multiplier::from_ratio_pow2(self.mantissa as u64, self.shift as i32 - exponent)
    }

    /// `value · 2^-shift` as a multiplier, rounded down to 31 significant bits.
    #[inline]
    fn from_ratio_pow2(value: u64, shift: i32) -> Option<Multiplier> {
        if value == 0 {
            return Some(Multiplier::ZERO);
        }
        let bits = 64 - value.leading_zeros() as i32;
        let (mut mantissa, mut shift) = if bits > 31 {
            (value >> (bits - 31), shift - (bits - 31))
        } else {
            (value << (31 - bits), shift + (31 - bits))
        };
        if shift < 0 {
            return None;
        }
        // the halvings past the largest shift as one shift (the same value)
        if shift > MAX_SHIFT as i32 {
            mantissa = mantissa
                .checked_shr((shift - MAX_SHIFT as i32) as u32)
                .unwrap_or(0);
            shift = MAX_SHIFT as i32;
        }
        Some(Multiplier {
            mantissa: mantissa as i32,
            shift: shift as u8,
        })
    }
}

/// A positive real `mantissa · 2^exponent` with 16 significant bits (`mantissa` in
/// `[2^15, 2^16)`), or zero (`mantissa` 0): the scales of a linear layer's rows and inputs in
/// the integer arithmetic. Two of them multiply into a [`Rescale`] with one 16 × 16 → 32-bit
/// product ([`Scale16::times`]), so each output row costs no 64-bit arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Scale16 {
    /// The significant bits, `[2^15, 2^16)`, or 0.
    pub mantissa: u32,
    /// The power of two it is multiplied by.
    pub exponent: i32,
}

impl Scale16 {
    /// Zero.
    pub const ZERO: Scale16 = Scale16 {
        mantissa: 0,
        exponent: 0,
    };

    /// `value` rounded (halves up) to 16 significant bits, from its bits; zero for zero, a
    /// subnormal (below `2^-126`), a negative value, infinity or NaN (an integer image's scales
    /// are none of those: `Image::parse`).
    #[inline]
    pub fn of_f32(value: f32) -> Scale16 {
        let bits = value.to_bits();
        let exponent = (bits >> 23) & 0xFF;
        if bits >> 31 != 0 || exponent == 0 || exponent == 0xFF {
            return Scale16::ZERO;
        }
        // (2^23 + fraction) · 2^(exponent - 150), rounded at bit 8
        let rounded = ((1 << 23 | bits & 0x7F_FFFF) + 0x80) >> 8; // [2^15, 2^16]
        let carry = rounded >> 16;
        Scale16 {
            mantissa: rounded >> carry,
            exponent: exponent as i32 - 142 + carry as i32,
        }
    }

    /// One.
    pub const ONE: Scale16 = Scale16 {
        mantissa: 1 << 15,
        exponent: -15,
    };

    /// `self · 2^exponent`.
    #[inline]
    pub fn times_pow2(self, exponent: i32) -> Scale16 {
        Scale16 {
            mantissa: self.mantissa,
            exponent: self.exponent + exponent,
        }
    }

    /// `self · other` rounded (halves up) to 16 significant bits.
    pub fn product(self, other: Scale16) -> Scale16 {
        Scale16::of_wide(
            self.mantissa as u64 * other.mantissa as u64,
            self.exponent + other.exponent,
        )
    }

    /// `value · 2^exponent` rounded (halves up) to 16 significant bits.
    pub fn of_wide(value: u64, exponent: i32) -> Scale16 {
        if value == 0 {
            return Scale16::ZERO;
        }
        let bits = 64 - value.leading_zeros() as i32;
        if bits <= 16 {
            return Scale16 {
                mantissa: (value << (16 - bits)) as u32,
                exponent: exponent - (16 - bits),
            };
        }
        let drop = bits - 16;
        let rounded = (value >> (drop - 1)).div_ceil(2) as u32; // [2^15, 2^16]
        let carry = rounded >> 16;
        Scale16 {
            mantissa: rounded >> carry,
            exponent: exponent + drop + carry as i32,
        }
    }

    /// A multiplier's value rounded to 16 significant bits.
    pub fn of_multiplier(m: Multiplier) -> Scale16 {
        Scale16::of_wide(m.mantissa.max(0) as u64, -(m.shift as i32))
    }

    /// `self · other` as a [`Rescale`]: the 32-bit product of the mantissas rounded (halves up)
    /// to 15 significant bits.
    #[inline]
    pub fn times(self, other: Scale16) -> Rescale {
        let product = self.mantissa * other.mantissa; // [2^30, 2^32) or 0
        if product == 0 {
            return Rescale::ZERO;
        }
        let drop = 16 + (product >> 31) as i32;
        // below 2^32: product ≤ (2^16 - 1)^2
        let mantissa = (product + (1 << (drop - 1))) >> drop; // [2^14, 2^15]
        Rescale {
            mantissa,
            shift: -(self.exponent + other.exponent + drop),
        }
    }

    /// `self` as a [`Rescale`], rounded (halves up) to 15 significant bits.
    #[inline]
    pub fn rescale(self) -> Rescale {
        Rescale {
            mantissa: (self.mantissa + 1) >> 1,
            shift: -(self.exponent + 1),
        }
    }
}

/// [`Rescale::apply`]'s 32-bit path for a shift in `17..=46` with its constants prepared once,
/// for a loop that applies one rescale to many values ([`Rescale::prepared`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreparedRescale {
    mantissa: u32,
    round: i32,
    shift: u32,
    /// With a 32 × 32 → 64-bit product: `mantissa · 2^(32 - s)` for the rescale's shift
    /// `s ≤ 32` (at most `2^30`), else `mantissa`.
    wide: i32,
    /// `0` for `s ≤ 32`, else `s - 32`, and `2^(s - 33)` to round.
    wide_shift: u32,
    wide_round: i32,
}

impl PreparedRescale {
    /// [`Rescale::apply`] of `x`, the same bits. Where the core has a 32 × 32 → 64-bit
    /// product, from its two words `P = x · wide`: `⌊(x m + 2^(s-1)) / 2^s⌋` is
    /// `⌊(P + 2^31) / 2^32⌋ = high + (low ≥ 2^31)` for `s ≤ 32`, and
    /// `⌊(high + 2^(s-33)) / 2^(s-32)⌋` above.
    #[inline]
    pub fn apply(self, x: i32) -> i32 {
        if WIDE_MULTIPLY {
            let product = x as i64 * self.wide as i64;
            let (high, low) = ((product >> 32) as i32, product as u32);
            return if self.wide_shift == 0 {
                high + (low >> 31) as i32
            } else {
                (high + self.wide_round) >> self.wide_shift
            };
        }
        let high = (x >> 16) * self.mantissa as i32 + self.round;
        let low = ((x as u32 & 0xFFFF) * self.mantissa) >> 16;
        (high + low as i32) >> self.shift
    }

    /// `out[i] = self.apply(x[i]).clamp(-127, 127)` for each `i` (as many as the shorter of
    /// the two), every `|x[i]|` at most `largest`: an input quantized to int8, the loop chosen
    /// once for the rescale's form. The rescale is monotonic, so where `±largest` give values
    /// within `±127` no value needs the clamp.
    #[inline]
    pub fn quantize_each(self, x: &[i32], out: &mut [i8], largest: u32) {
        // a kernel's, where there is one for this form (the clamp changes no value where none
        // needs it)
        if self.wide_shift == 0 && crate::kernels::quantize_wide_i32(x, out, self.wide) {
            return;
        }
        let bounded = largest <= i32::MAX as u32 && {
            let largest = largest as i32;
            self.apply(-largest) >= -127 && self.apply(largest) <= 127
        };
        if bounded {
            return self.quantize_each_with(x, out, |y| y as i8);
        }
        self.quantize_each_with(x, out, |y| y.clamp(-127, 127) as i8);
    }

    /// [`PreparedRescale::quantize_each`] by a kernel that also writes `widened` as
    /// [`crate::kernels::widen_input_i8`] makes it of `out`, in one pass: whether it ran (else
    /// nothing written).
    #[inline]
    pub fn quantize_widened(self, x: &[i32], out: &mut [i8], widened: &mut [u32]) -> bool {
        self.wide_shift == 0 && crate::kernels::quantize_widen_i32(x, out, widened, self.wide)
    }

    #[inline(always)]
    fn quantize_each_with(self, x: &[i32], out: &mut [i8], clamp: impl Fn(i32) -> i8) {
        if WIDE_MULTIPLY && self.wide_shift == 0 {
            let wide = self.wide as i64;
            for (q, &v) in out.iter_mut().zip(x) {
                let product = v as i64 * wide;
                *q = clamp((product >> 32) as i32 + ((product as u32) >> 31) as i32);
            }
        } else if WIDE_MULTIPLY {
            let (wide, round, shift) = (self.wide as i64, self.wide_round, self.wide_shift);
            for (q, &v) in out.iter_mut().zip(x) {
                *q = clamp((((v as i64 * wide) >> 32) as i32 + round) >> shift);
            }
        } else {
            for (q, &v) in out.iter_mut().zip(x) {
                *q = clamp(self.apply(v));
            }
        }
    }
}

/// Whether the target multiplies 32 × 32 → 64 bits in one instruction or two (`SMULL`, RV32M's
/// `MUL` and `MULH`, 64-bit cores): [`ScaledByBits::apply`] then takes one such product. Not on
/// Armv6-M, where it is a library call.
const WIDE_MULTIPLY: bool = !cfg!(all(target_arch = "arm", not(target_has_atomic = "ptr")));

/// Whether the target divides 32-bit integers in one instruction (`UDIV` on Armv7-M and
/// Armv8-M, RV32M's `DIVU`, 64-bit cores): not on Armv6-M, where it is a library call.
pub(crate) const HARDWARE_DIVIDE: bool = !cfg!(all(target_arch = "arm", not(target_has_atomic = "ptr")));

/// `a · b` as `u64`. Where the core has no 32 × 32 → 64-bit product (Armv6-M: a call to the
/// general 64 × 64-bit `__aeabi_lmul`), four 16 × 16-bit products added in line; the same value.
#[inline(always)]
pub fn mul_wide_u32(a: u32, b: u32) -> u64 {
    if WIDE_MULTIPLY {
        a as u64 * b as u64
    } else {
        mul_wide_u32_by_halves(a, b)
    }
}

/// [`mul_wide_u32`] from the 16-bit halves.
#[inline(always)]
fn mul_wide_u32_by_halves(a: u32, b: u32) -> u64 {
    let (ah, al, bh, bl) = (a >> 16, a & 0xFFFF, b >> 16, b & 0xFFFF);
    let middle = (ah * bl) as u64 + (al * bh) as u64; // below 2^33
    (((ah * bh) as u64) << 32) + (middle << 16) + (al * bl) as u64
}

/// A [`Scale16`] that multiplies many `f32` scales read from their bits, each product applied to
/// one value at once: [`ScaledByBits::apply`]`(bits, x)` is
/// `Scale16::of_f32(f32::from_bits(bits)).times(scale).apply(x)`, the same bits, with the usual
/// case (a positive normal `f32`, a rescale of [`Rescale::apply`]'s 32-bit paths) in
/// straight-line 32-bit arithmetic: a linear layer's rows rescaled by their scales times the
/// input's step, a LayerNorm's gains times `1 / σ`.
#[derive(Clone, Copy, Debug)]
pub struct ScaledByBits {
    scale: Scale16,
    /// `142 - scale.exponent`: the rescale's shift is this less the `f32`'s biased exponent and
    /// the bits dropped from the mantissas' product.
    base: i32,
}

impl ScaledByBits {
    /// For `scale`.
    pub fn new(scale: Scale16) -> ScaledByBits {
        let normal = (1 << 15..1 << 16).contains(&scale.mantissa);
        ScaledByBits {
            scale,
            // (a scale of another mantissa, zero: a shift no product takes, so every value
            // takes the general path)
            base: if normal {
                142 - scale.exponent
            } else {
                i32::MIN / 2
            },
        }
    }

    /// `Scale16::of_f32(f32::from_bits(bits)).times(scale).apply(x)` (a positive normal `f32`,
    /// and a shift that takes one of [`Rescale::apply`]'s 32-bit paths, in line). The `f32`'s 16-bit
    /// mantissa is taken as rounded, `[2^15, 2^16]`, without bringing `2^16` back to `2^15`:
    /// the product of `2^16` and the scale's mantissa drops one bit more, so the rescale is the
    /// same (and stays below `2^32`: the scale's mantissa is below `2^16`).
    #[inline(always)]
    pub fn apply(self, bits: u32, x: i32) -> i32 {
        let biased = bits >> 23; // with the sign bit: 256 or more
        let mantissa = ((bits & 0x7F_FFFF | 0x80_0000) + 0x80) >> 8; // [2^15, 2^16]
        let product = mantissa.wrapping_mul(self.scale.mantissa); // [2^30, 2^32)
        let up = product >> 31;
        let shift = self.base - biased as i32 - 16 - up as i32;
        if biased.wrapping_sub(1) < 254 {
            // product / 2^(16 + up), rounded halves up, in [2^14, 2^15]; then `Rescale::apply`'s
            // two 32-bit paths
            let m = ((product >> (15 + up)) + 1) >> 1;
            if WIDE_MULTIPLY && (1..=31).contains(&shift) {
                // one 32 × 32 → 64-bit product, rounded and shifted as two words: the exact
                // `round(x m / 2^shift)` wherever it fits 32 bits, as the 32-bit paths give it
                let wide = x as i64 * m as i64 + (1u32 << (shift - 1)) as i64; // below 2^47 in magnitude
                let (low, high) = (wide as u32, (wide >> 32) as i32);
                let y = ((low >> shift) | ((high as u32) << (32 - shift))) as i32;
                // it fits where the bits above the result's are copies of its sign
                if high >> (shift - 1) == y >> 31 {
                    return y;
                }
                return self.general(bits, x);
            }
            let (high, low) = ((x >> 16) * m as i32, (x as u32 & 0xFFFF) * m);
            if (17..=46).contains(&shift) {
                return (high + (1 << (shift - 17)) + (low >> 16) as i32) >> (shift - 16);
            }
            if (1..=16).contains(&shift) && high.unsigned_abs() < 1 << (14 + shift) {
                return (high << (16 - shift)) + ((low + (1 << (shift - 1))) >> shift) as i32;
            }
        }
        self.general(bits, x)
    }

    #[cold]
    #[inline(never)]
    fn general(self, bits: u32, x: i32) -> i32 {
        Scale16::of_f32(f32::from_bits(bits)).times(self.scale).apply(x)
    }

    /// The scale's mantissa `sm` and `k = base - 17` where `k` is in `33..=254`, as
    /// [`ScaledByBits::apply_each`]'s loop over the usual rows takes them (a kernel's too).
    #[inline]
    pub fn row_parameters(self) -> Option<(u32, i32)> {
        let k = self.base - 17;
        (33..=254).contains(&k).then_some((self.scale.mantissa, k))
    }

    /// [`ScaledByBits::apply`] out of line, for the rows [`ScaledByBits::apply_each`] leaves.
    #[cold]
    #[inline(never)]
    pub(crate) fn apply_out_of_line(self, bits: u32, x: i32) -> i32 {
        self.apply(bits, x)
    }

    /// `f(i, fast, self.apply(bits(i), x(i)))` for each `i < n`, for values `x` of any
    /// magnitude ([`ScaledByBits::apply_each_of`] of those items).
    #[inline(always)]
    pub fn apply_each_with(
        self,
        n: usize,
        bits: impl Fn(usize) -> u32,
        x: impl Fn(usize) -> i32,
        f: impl FnMut(usize, bool, i32),
    ) {
        self.apply_each_of((0..n).map(|i| (bits(i), x(i), i)), f);
    }

    /// `f(item, fast, self.apply(bits, x))` for each `(bits, x, item)`, for values `x` of any
    /// magnitude: where the core has a 32 × 32 → 64-bit product, the usual value (a positive
    /// normal `f32` whose rescale `m · 2^-shift` has a shift in `17..=32`, which its exponent
    /// alone tells once the exponents it allows are all normal) takes one 32-bit product for
    /// the mantissas and one 64-bit product `P = x · m · 2^(32 - shift)`
    /// (`m · 2^(32 - shift) ≤ 2^30`): `round(x m / 2^shift) = high + (low ≥ 2^31)`, the exact
    /// rounding, which fits (`|x m / 2^shift| ≤ 2^29`) as [`ScaledByBits::apply`] gives it.
    /// Others, and every value on a core without that product, take [`ScaledByBits::apply`].
    /// `fast` tells which: the value's magnitude is at most `2^29` where it is `true`.
    #[inline(always)]
    pub fn apply_each_of<T>(
        self,
        items: impl Iterator<Item = (u32, i32, T)>,
        mut f: impl FnMut(T, bool, i32),
    ) {
        // `shift - 17 = t = k - biased - up` with `k = base - 33`: `biased` in
        // `[k - 16, k]` for `t` in `0..16` must be within `1..=254`
        let k = self.base - 33;
        if !WIDE_MULTIPLY || !(17..=254).contains(&k) {
            for (b, v, item) in items {
                f(item, false, self.apply(b, v));
            }
            return;
        }
        let sm = self.scale.mantissa;
        for (b, v, item) in items {
            let (m, up) = rescale_mantissa(b, sm);
            let t = k.wrapping_sub((b >> 23) as i32).wrapping_sub(up) as u32;
            if t < 16 {
                let wide = v as i64 * (m << (15 - t)) as i64;
                f(item, true, (wide >> 32) as i32 + ((wide as u32) >> 31) as i32);
            } else {
                f(item, false, self.apply_out_of_line(b, v));
            }
        }
    }

    /// `y[k] = self.apply(scales[k].to_bits(), y[k])` for each `k` (as many as the shorter of
    /// the two): a linear layer's row sums rescaled by their rows' scales times the input's step.
    /// The usual row in 32-bit arithmetic alone, one product for the two mantissas and one for
    /// the value: a rescale `m · 2^-shift` of a shift in `1..=32` (which its `f32`'s exponent
    /// alone tells, `shift - 1 = base - 17 - biased - up`, once the exponents it allows are
    /// normal ones) on a value `|x| ≤ 2^16`, so that `x m` (`m ≤ 2^15`) fits an `i32` and
    /// `round(x m / 2^shift) = ⌊(⌊x m / 2^(shift - 1)⌋ + 1) / 2⌋`, the same value as
    /// [`ScaledByBits::apply`]'s exact rounding (which fits: `|x m| ≤ 2^31`). Other rows take
    /// [`ScaledByBits::apply`].
    #[inline]
    pub fn apply_each(self, scales: &[f32], y: &mut [i32]) {
        self.apply_each_bounded(scales, y, None)
    }

    /// [`ScaledByBits::apply_each`] where `exponents`, if given, holds the smallest and the
    /// largest biased exponent (the sign bit included: `(bits as i32) >> 23`) among the scales,
    /// or bounds around them: a kernel then needs no pass over the scales to find them. The
    /// same bits.
    pub fn apply_each_bounded(self, scales: &[f32], y: &mut [i32], exponents: Option<(i32, i32)>) {
        // the exponents of the shifts in 1..=32 (`up` 0 or 1) all those of positive normal
        // `f32`s: a negative, subnormal, infinite or NaN scale gives `shift - 1` outside
        // `0..32` (a negative one's `biased` has the sign bit: 256 or more, and `k ≤ 254`)
        let Some((sm, k)) = self.row_parameters() else {
            for (y, &s) in y.iter_mut().zip(scales) {
                *y = self.apply(s.to_bits(), *y);
            }
            return;
        };
        // a kernel's where there is one: the same bits
        let apply = |bits, x| self.apply_out_of_line(bits, x);
        if crate::kernels::scaled_by_bits_i32(scales, y, (sm, k), exponents, apply) {
            return;
        }
        for (y, &s) in y.iter_mut().zip(scales) {
            let (bits, x) = (s.to_bits(), *y);
            let (m, up) = rescale_mantissa_clz(bits, sm);
            let shift1 = k.wrapping_sub((bits >> 23) as i32).wrapping_sub(up) as u32;
            *y = if shift1 < 32 && (x as u32).wrapping_add(1 << 16) < 1 << 17 {
                ((x.wrapping_mul(m as i32) >> shift1) + 1) >> 1
            } else if WIDE_MULTIPLY && shift1 < 32 {
                // a larger value: the same rounding of the 64-bit product (`|x m| < 2^46`),
                // where it fits
                let wide = (((x as i64 * m as i64) >> shift1) + 1) >> 1;
                if wide == wide as i32 as i64 {
                    wide as i32
                } else {
                    self.apply_out_of_line(bits, x)
                }
            } else {
                self.apply_out_of_line(bits, x)
            };
        }
    }
}

/// [`rescale_mantissa`] with a count of leading zeros where the core has one in an instruction
/// (the DSP extension's cores: `CLZ`), the same values: the product is `2^30` or more, so
/// its leading zeros are `1 - up`, and `m = ⌊(⌊p / 2^(16 - lz)⌋ + 1) / 2⌋`.
#[inline(always)]
fn rescale_mantissa_clz(bits: u32, sm: u32) -> (u32, i32) {
    if !cfg!(all(feature = "cortex-m-dsp", target_arch = "arm")) {
        return rescale_mantissa(bits, sm);
    }
    let mantissa = ((bits & 0x7F_FFFF) + 0x80_0080) >> 8; // [2^15, 2^16]
    let product = mantissa.wrapping_mul(sm); // [2^30, 2^32)
    let lz = product.leading_zeros(); // 0 or 1
    (((product >> (16 - lz)) + 1) >> 1, 1 - lz as i32)
}

/// As [`ScaledByBits::apply`] makes them: an `f32`'s 16-bit mantissa (from its bits, rounded,
/// `[2^15, 2^16]`) times the scale's mantissa `sm` (`[2^15, 2^16)`), that product rounded to
/// `m` in `[2^14, 2^15]`, and `up`, 1 where the product has 32 bits (its rounding then drops
/// one bit more). A branch on `up` rather than a shift by it: fewer instructions.
#[inline(always)]
fn rescale_mantissa(bits: u32, sm: u32) -> (u32, i32) {
    let mantissa = ((bits & 0x7F_FFFF) + 0x80_0080) >> 8; // [2^15, 2^16]
    let product = mantissa.wrapping_mul(sm); // [2^30, 2^32)
    if (product as i32) < 0 {
        (((product >> 16) + 1) >> 1, 1)
    } else {
        (((product >> 15) + 1) >> 1, 0)
    }
}

/// Multiplication by a positive real `mantissa · 2^-shift` with 15 significant bits (`mantissa`
/// at most `2^15`), or by zero: [`Rescale::apply`] needs two 32-bit products, no 64-bit one,
/// for a shift in `17..=46` (a core without a 32 × 32 → 64-bit multiply, such as the Cortex-M0+,
/// pays for none), and is exact: `round(x · mantissa / 2^shift)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Rescale {
    /// The significant bits, at most `2^15`.
    pub mantissa: u32,
    /// The power of two it is divided by (negative: multiplied).
    pub shift: i32,
}

impl Rescale {
    /// Zero.
    pub const ZERO: Rescale = Rescale {
        mantissa: 0,
        shift: 0,
    };

    /// The 32-bit path of [`Rescale::apply`] prepared, for a shift in `17..=46`.
    #[inline]
    pub fn prepared(self) -> Option<PreparedRescale> {
        (17..=46).contains(&self.shift).then(|| {
            let narrow = self.shift <= 32;
            PreparedRescale {
                mantissa: self.mantissa,
                round: 1 << (self.shift - 17),
                shift: (self.shift - 16) as u32,
                wide: if narrow {
                    (self.mantissa << (32 - self.shift)) as i32
                } else {
                    self.mantissa as i32
                },
                wide_shift: if narrow { 0 } else { (self.shift - 32) as u32 },
                wide_round: if narrow { 0 } else { 1 << (self.shift - 33) },
            }
        })
    }

    /// `self · 2^exponent`.
    #[inline]
    pub fn times_pow2(self, exponent: i32) -> Rescale {
        Rescale {
            mantissa: self.mantissa,
            shift: self.shift - exponent,
        }
    }

    /// `round(x · mantissa / 2^shift)`, halves up, saturated to `i32`. With `x = h · 2^16 + l`
    /// (`l` the low 16 bits, unsigned; `|h m| ≤ 2^30`, `l m < 2^31`), in 32-bit arithmetic:
    /// for a shift in `17..=46`,
    /// `⌊(x m + 2^(s-1)) / 2^s⌋ = ⌊(h m + 2^(s-17) + ⌊l m / 2^16⌋) / 2^(s-16)⌋`; for a shift in
    /// `1..=16` and `|h m| < 2^(14+s)` (a result below `2^30`),
    /// `h m · 2^(16-s) + ⌊(l m + 2^(s-1)) / 2^s⌋`. Other cases take one 64-bit product.
    /// The two 32-bit paths in line, the 64-bit one out of line.
    #[inline(always)]
    pub fn apply(self, x: i32) -> i32 {
        let s = self.shift;
        let m = self.mantissa;
        if WIDE_MULTIPLY && (1..=16).contains(&s) {
            // one 32 × 32 → 64-bit product (`|x m| ≤ 2^46`): `⌊(⌊x m / 2^(s-1)⌋ + 1) / 2⌋`,
            // the exact rounding, where it fits (as the 32-bit path's condition, `|h m| <
            // 2^(14+s)`, implies; elsewhere the 64-bit path saturates it)
            // as two words: `⌊(P + 2^(s-1)) / 2^s⌋` (the same value), which fits where the bits
            // above its 32 are copies of its sign
            let product = x as i64 * m as i64; // below 2^46 in magnitude
            let (low, high) = (product as u32, (product >> 32) as i32);
            let rounded = low.wrapping_add(1 << (s - 1));
            let high = high + (rounded < low) as i32;
            let y = ((rounded >> s) | ((high as u32) << (32 - s))) as i32;
            if high >> (s - 1) == y >> 31 {
                return y;
            }
            return self.apply_wide(x);
        }
        let (high, low) = (
            (x >> 16).wrapping_mul(m as i32),
            (x as u32 & 0xFFFF).wrapping_mul(m),
        );
        if (17..=46).contains(&s) {
            // `PreparedRescale::apply`
            return (high + (1 << (s - 17)) + (low >> 16) as i32) >> (s - 16);
        }
        if (1..=16).contains(&s) && high.unsigned_abs() < 1 << (14 + s) {
            return (high << (16 - s)) + ((low + (1 << (s - 1))) >> s) as i32;
        }
        self.apply_wide(x)
    }

    #[cold]
    #[inline(never)]
    fn apply_wide(self, x: i32) -> i32 {
        saturate(round_shift(x as i64 * self.mantissa as i64, self.shift))
    }
}

/// `(num << k) / den`, for `k` that keeps `num << k` within 64 bits (or `num >> -k`).
fn shifted_quotient(num: u64, den: u64, k: i32) -> u64 {
    if k >= 0 {
        (num << k) / den
    } else {
        (num >> -k) / den
    }
}

/// `v · 2^-shift` for `|v| < 2^62`: rounded to nearest (halves up) for `shift > 0` (0 from
/// `shift = 63` on), exact for `shift ≤ 0` (a left shift, saturating at the `i64` range).
#[inline]
pub fn round_shift(v: i64, shift: i32) -> i64 {
    if shift > 62 {
        0
    } else if shift > 0 {
        (v + (1i64 << (shift - 1))) >> shift
    } else {
        let left = (-shift).min(63) as u32;
        match v.checked_shl(left) {
            Some(shifted) if shifted >> left == v => shifted,
            _ if v < 0 => i64::MIN,
            _ => i64::MAX,
        }
    }
}

/// [`round_shift`] of an `i32` by `0..=31`, in 32-bit arithmetic: `⌊v / 2^shift⌋` plus bit
/// `shift - 1` of `v` (the same halves rounded up), so no sum can overflow.
#[inline]
pub fn round_shift_i32(v: i32, shift: u32) -> i32 {
    if shift == 0 {
        v
    } else {
        (v >> shift) + ((v >> (shift - 1)) & 1)
    }
}

/// `x` clamped to the `i32` range.
#[inline]
pub fn saturate(x: i64) -> i32 {
    x.clamp(i32::MIN as i64, i32::MAX as i64) as i32
}

/// `floor(sqrt(v))`, exactly, by the digit-by-digit method (no multiplication or division).
pub fn isqrt(v: u64) -> u32 {
    let mut remainder = v;
    let mut root = 0u64;
    let mut bit = 1u64 << 62;
    while bit > remainder {
        bit >>= 2;
    }
    while bit != 0 {
        if remainder >= root + bit {
            remainder -= root + bit;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    root as u32
}

/// The f32 of an f16's bits, in integers alone (every f16 is exact in f32; subnormals are
/// renormalised by a shift, where a float conversion would take an FPU or a soft-float call).
pub fn f32_of_f16(half: u16) -> f32 {
    let sign = (half as u32 & 0x8000) << 16;
    let (exponent, mantissa) = ((half >> 10) & 0x1F, half as u32 & 0x3FF);
    let bits = match (exponent, mantissa) {
        (0, 0) => 0,
        (0, m) => {
            // m · 2^-24: the leading one moved to bit 10, the exponent lowered with it
            let shift = m.leading_zeros() - 21;
            ((113 - shift) << 23) | ((m << shift) & 0x3FF) << 13
        }
        (0x1F, m) => 0xFF << 23 | m << 13,
        (e, m) => (e as u32 + 112) << 23 | m << 13,
    };
    f32::from_bits(sign | bits)
}

/// `sqrt(n)` as a [`Multiplier`]: `isqrt(n · 4^h) / 2^h` with `h` as large as fits 64 bits
/// (`None` for a root of `2^31` or more, which a `u32` cannot reach).
pub fn sqrt_multiplier(n: u32) -> Option<Multiplier> {
    let n = n as u64;
    let half = (n.leading_zeros().max(1) - 1) / 2;
    Multiplier::from_ratio(isqrt(n << (2 * half)) as u64, 1 << half)
}

/// `1 / sqrt(n)` as a [`Multiplier`]: `2^h / isqrt(n · 4^h)` with `h` as large as fits 64 bits
/// (`None` for `n = 0`).
pub fn inverse_sqrt_multiplier(n: u32) -> Option<Multiplier> {
    let n = n as u64;
    let half = (n.leading_zeros().max(1) - 1) / 2;
    Multiplier::from_ratio(1 << half, isqrt(n << (2 * half)) as u64)
}

/// `e^-t` in `Q30` for `t ≥ 0` in `Q24` nats: `t · log2(e)` in `Q24` (rounded down) split into
/// an integer part `n` and a fraction `φ`, `2^-φ` from [`EXP2_TABLE`] with linear interpolation
/// on the fraction's low 16 bits (rounded to nearest), then shifted right by `n` (rounded to
/// nearest, halves up). `exp_neg(0)` is exactly `2^30`; the result is 0 from `t ≈ 21.5` on
/// (`e^-t < 2^-31`). Relative error below `2^-19` (interpolation and rounding), checked by test.
pub fn exp_neg(t: u32) -> u32 {
    // from t = 2^29 on, y passes 32 · 2^24 (log2(e) > 1): 0 without the product
    if t >= 1 << 29 {
        return 0;
    }
    // `⌊t log2(e) / 2^31⌋ = ⌊2t log2(e) / 2^32⌋` (`2t < 2^30`): the product's high word
    let y = mul_wide_u32(t << 1, LOG2_E_Q31) >> 32; // Q24, < 2^30
    let n = y >> 24;
    if n > 31 {
        return 0;
    }
    let fraction = (y & 0xFF_FFFF) as u32;
    let index = (fraction >> 16) as usize;
    let between = fraction & 0xFFFF;
    let (high, low) = (EXP2_TABLE[index], EXP2_TABLE[index + 1]);
    // round((high - low) · between / 2^16) in 32 bits: the difference's high and low halves
    // (`(h · 2^16 + l) b + 2^15 >> 16 = h b + (l b + 2^15 >> 16)`; h b < 2^22, l b < 2^32)
    let difference = high - low;
    let step = (difference >> 16) * between + (((difference & 0xFFFF) * between + (1 << 15)) >> 16);
    let value = high - step;
    if n == 0 {
        value
    } else {
        (value + (1 << (n - 1))) >> n
    }
}

/// `log2(v)` in `Q24` for `v ≥ 1` (0 for `v = 0`, which has none): the position of the leading
/// one plus `log2` of the following bits from [`LOG2_TABLE`] with linear interpolation on 24
/// more bits, rounded to nearest. Error below `2^-18`, checked by test.
pub fn log2(v: u64) -> i32 {
    if v == 0 {
        return 0;
    }
    let top = 63 - v.leading_zeros();
    let normal = v << (63 - top); // the leading one at bit 63
    let index = ((normal >> 55) & 0xFF) as usize;
    let between = (normal >> 31) & 0xFF_FFFF;
    let (low, high) = (LOG2_TABLE[index], LOG2_TABLE[index + 1]);
    let fraction = low as u64 + (((high - low) as u64 * between + (1 << 23)) >> 24); // Q30
    ((top as i64) << 24) as i32 + ((fraction + (1 << 5)) >> 6) as i32
}

/// `ln(v)` in `Q24` nats for `v ≥ 1` ([`log2`] times `ln 2`, rounded to nearest).
pub fn ln(v: u64) -> i32 {
    ((log2(v) as i64 * LN_2_Q31 as i64 + (1 << 30)) >> 31) as i32
}

/// The `f32` nearest `v · 2^-frac_bits` (ties to even), built from its bits with integer
/// operations alone: how fixed-point results become `f32` for printing without software
/// floating point. Equals `(v as f64 / 2^frac_bits) as f32` for every `v` and `frac_bits ≤ 100`.
pub fn to_f32(v: i32, frac_bits: u32) -> f32 {
    if v == 0 {
        return 0.0;
    }
    let sign = if v < 0 { 1u32 << 31 } else { 0 };
    let magnitude = v.unsigned_abs();
    let top = 31 - magnitude.leading_zeros(); // magnitude in [2^top, 2^(top + 1))
    let mut exponent = top as i32 - frac_bits as i32 + 127;
    let mut mantissa = if top > 23 {
        let drop = top - 23;
        let kept = magnitude >> drop;
        let rest = magnitude & ((1 << drop) - 1);
        let half = 1 << (drop - 1);
        if rest > half || (rest == half && kept & 1 == 1) {
            kept + 1
        } else {
            kept
        }
    } else {
        magnitude << (23 - top)
    };
    if mantissa == 1 << 24 {
        mantissa >>= 1;
        exponent += 1;
    }
    // frac_bits ≤ 100 keeps the exponent normal: top - 100 + 127 ≥ 27
    f32::from_bits(sign | (exponent as u32) << 23 | (mantissa & 0x7F_FFFF))
}

/// The multiplier that equals `value` exactly, from its bits (integer operations alone): an
/// `f32` is a 24-bit mantissa times a power of two, so the image's f32 scales serve as
/// multipliers on a core without an FPU. Equal to [`Multiplier::from_f64`] of the same value:
/// `None` for a negative value (but `-0.0`), infinity, NaN or one of at least `2^30`; zero for
/// one below `2^-63`, and rounded (halves up) to a shift of [`MAX_SHIFT`] below `2^-32`.
#[inline]
pub fn multiplier_of_f32(value: f32) -> Option<Multiplier> {
    let bits = value.to_bits();
    let (exponent, fraction) = ((bits >> 23) & 0xFF, bits & 0x7F_FFFF);
    // negative and not -0: an unsigned comparison of the bits (LLVM turns a test of the bits
    // below the sign for zero into a float comparison, a call on a core without an FPU)
    if exponent == 0xFF || bits > 1 << 31 {
        return None;
    }
    if exponent == 0 {
        return Some(Multiplier::ZERO); // zero or subnormal: below 2^-126
    }
    // value = (2^23 + fraction) · 2^(exponent - 150) = mantissa · 2^-(157 - exponent)
    let mantissa = ((1u32 << 23 | fraction) as i64) << 7;
    let shift = 157 - exponent as i32;
    if shift < 1 {
        return None;
    }
    if shift <= MAX_SHIFT as i32 {
        return Some(Multiplier {
            mantissa: mantissa as i32,
            shift: shift as u8,
        });
    }
    let mantissa = round_shift(mantissa, shift - MAX_SHIFT as i32);
    if mantissa == 0 {
        return Some(Multiplier::ZERO);
    }
    if mantissa == 1 << 31 {
        // rounded up to the next power of two
        return Some(Multiplier {
            mantissa: 1 << 30,
            shift: MAX_SHIFT - 1,
        });
    }
    Some(Multiplier {
        mantissa: mantissa as i32,
        shift: MAX_SHIFT,
    })
}

/// `round(value · 2^frac)`, halves away from zero, saturated to `i64`, from the bits of `value`
/// (integer operations alone); NaN gives 0, infinities saturate.
pub fn fixed_of_f32_wide(value: f32, frac: u32) -> i64 {
    let bits = value.to_bits();
    let (negative, exponent, fraction) = (bits >> 31 != 0, (bits >> 23) & 0xFF, bits & 0x7F_FFFF);
    if exponent == 0xFF && fraction != 0 {
        return 0;
    }
    let magnitude: i64 = if exponent == 0xFF {
        i64::MAX
    } else {
        // |value| = m · 2^(e - 150), m 24 bits (subnormals: no leading one, e = 1)
        let (m, e) = if exponent == 0 {
            (fraction as i64, 1)
        } else {
            ((1 << 23 | fraction) as i64, exponent as i32)
        };
        let e = e - 150 + frac as i32;
        if e >= 0 {
            if e > 39 {
                i64::MAX
            } else {
                m << e
            }
        } else if e < -25 {
            0
        } else {
            (m + (1 << (-e - 1))) >> -e
        }
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// [`fixed_of_f32_wide`] saturated to `i32`: in 32-bit arithmetic where the value's 24-bit
/// mantissa is shifted right (most values: a core without 64-bit shifts pays for none), else
/// by [`fixed_of_f32_wide`] (out of line: the usual path is a dozen instructions, in line
/// in the loops that convert a vector).
#[inline(always)]
pub fn fixed_of_f32(value: f32, frac: u32) -> i32 {
    let bits = value.to_bits();
    let exponent = (bits >> 23) & 0xFF;
    // |value| · 2^frac = (2^23 + fraction) · 2^-right
    let right = 150 - exponent as i32 - frac as i32;
    if exponent != 0 && (1..=24).contains(&right) {
        let m = 1 << 23 | bits & 0x7F_FFFF;
        let magnitude = ((m + (1 << (right - 1))) >> right) as i32; // below 2^24
        let sign = bits as i32 >> 31; // 0 or -1
        return (magnitude ^ sign) - sign;
    }
    fixed_of_f32_rare(value, frac)
}

#[cold]
#[inline(never)]
fn fixed_of_f32_rare(value: f32, frac: u32) -> i32 {
    saturate(fixed_of_f32_wide(value, frac))
}

/// `log2(10000)` in `Q56`.
const LOG2_10000_Q56: u64 = 957_480_584_338_323_632;
/// `log2(2π)` in `Q56`.
const LOG2_TWO_PI_Q56: u64 = 191_060_431_690_653_558;

/// `2^(-2^-i)` in `Q62` for `i` in `1..=32`, rounded to nearest (a test checks each entry).
pub const HALVING_POWERS: [u64; 32] = [
    3260954456333195553,
    3877950241171266237,
    4228934724888366668,
    4416165660797809419,
    4512867096753504463,
    4562008997483360349,
    4586780255215411731,
    4599216278082138665,
    4605446927862164404,
    4608565417332308035,
    4610125453837388245,
    4610905670110601999,
    4611295827762151833,
    4611490918967884501,
    4611588467665893036,
    4611637242788701951,
    4611661630543559956,
    4611673824469352645,
    4611679921444339948,
    4611682969934856344,
    4611684494180870228,
    4611685256304066092,
    4611685637365711255,
    4611685827896545643,
    4611685923161965790,
    4611685970794676601,
    4611685994611032191,
    4611686006519210032,
    4611686012473298964,
    4611686015450343433,
    4611686016938865668,
    4611686017683126786,
];

/// The frequency of the position embeddings' pair `k` of `d_model` (`k < d_model / 2`),
/// `10000^(-2k / d_model)` radians per position, in turns per position as [`sin_turns`] takes
/// them (`2^-32` turns), in integers alone: `2^(32 - y)` for `y = 2k / d_model · log2(10000) +
/// log2(2π)` in `Q56`, the power of the fraction's top 32 bits as a product of
/// [`HALVING_POWERS`] in `Q62`, rounded to nearest. Within one unit of the exact value (the
/// relative error of PyTorch's f32 `inv_freq` is `2^-24`), checked by test.
pub fn position_frequency(k: usize, d_model: usize) -> u32 {
    let (two_k, d) = (2 * k as u64, d_model.max(1) as u64);
    let y = (LOG2_10000_Q56 / d) * two_k + (LOG2_10000_Q56 % d) * two_k / d + LOG2_TWO_PI_Q56;
    let (whole, fraction) = ((y >> 56) as i32, (y >> 24) as u32);
    let mut power = 1u64 << 62;
    for (i, &factor) in HALVING_POWERS.iter().enumerate() {
        if fraction & (1 << (31 - i)) != 0 {
            power = ((power as u128 * factor as u128) >> 62) as u64;
        }
    }
    // 2^(32 - whole) · power / 2^62
    round_shift(power as i64, 30 + whole).clamp(0, u32::MAX as i64) as u32
}

/// `sin(2π · phase / 2^32)` in `Q30`: the phase in turns as a `u32`, so `d · f` wraps around
/// exactly (a position `d` times a frequency in turns, [`turns`]). A quarter wave from
/// [`SIN_TABLE`] with linear interpolation on 16 more bits, mirrored; error below `5e-6`,
/// checked by test.
pub fn sin_turns(phase: u32) -> i32 {
    const QUARTER: u32 = 1 << 30;
    let within = phase & (QUARTER - 1);
    let quadrant = phase >> 30;
    // the distance into the quarter wave, mirrored in quadrants 1 and 3
    let x = if quadrant & 1 == 0 {
        within
    } else {
        QUARTER - within
    };
    let index = (x >> 22) as usize;
    let value = if index >= 256 {
        SIN_TABLE[256]
    } else {
        let between = ((x >> 6) & 0xFFFF) as u64;
        let (low, high) = (SIN_TABLE[index], SIN_TABLE[index + 1]);
        low + (((high - low) as u64 * between + (1 << 15)) >> 16) as u32
    } as i32;
    if quadrant >= 2 {
        -value
    } else {
        value
    }
}

/// `cos(2π · phase / 2^32)` in `Q30`: [`sin_turns`] a quarter turn on.
pub fn cos_turns(phase: u32) -> i32 {
    sin_turns(phase.wrapping_add(1 << 30))
}

/// A frequency in radians per step as turns per step in `2^-32` units, rounded to nearest: what
/// [`sin_turns`] takes, multiplied (wrapping) by the step. For the quantizer, on the host.
pub fn turns(radians: f64) -> u32 {
    let turns = radians / (2.0 * core::f64::consts::PI);
    let fraction = turns - libm::floor(turns);
    (libm::round(fraction * 4_294_967_296.0) as u64 & 0xFFFF_FFFF) as u32
}

/// `2^(30 - i/256)`, rounded to nearest, for `i` in `0..=256`: `2^-φ` in `Q30` for fractions `φ`
/// in steps of `1/256` (generated by `round(2 ** (30 - i / 256))`; a test checks each entry).
pub const EXP2_TABLE: [u32; 257] = [
    1073741824, 1070838486, 1067942999, 1065055341, 1062175491, 1059303428, 1056439131, 1053582579,
    1050733751, 1047892626, 1045059183, 1042233401, 1039415261, 1036604740, 1033801819, 1031006477,
    1028218693, 1025438448, 1022665720, 1019900489, 1017142735, 1014392438, 1011649578, 1008914134,
    1006186087, 1003465416, 1000752102, 998046124, 995347464, 992656100, 989972014, 987295185, 984625594,
    981963222, 979308048, 976660054, 974019220, 971385527, 968758955, 966139485, 963527098, 960921775,
    958323496, 955732243, 953147997, 950570738, 948000448, 945437108, 942880699, 940331203, 937788600,
    935252872, 932724001, 930201967, 927686753, 925178340, 922676710, 920181844, 917693724, 915212331,
    912737649, 910269657, 907808339, 905353676, 902905651, 900464244, 898029440, 895601218, 893179563,
    890764456, 888355878, 885953814, 883558244, 881169153, 878786521, 876410331, 874040567, 871677210,
    869320244, 866969651, 864625413, 862287515, 859955938, 857630665, 855311680, 852998965, 850692504,
    848392279, 846098274, 843810471, 841528855, 839253408, 836984114, 834720956, 832463917, 830212982,
    827968132, 825729353, 823496627, 821269938, 819049271, 816834607, 814625932, 812423229, 810226483,
    808035676, 805850792, 803671817, 801498734, 799331526, 797170178, 795014675, 792865000, 790721137,
    788583072, 786450787, 784324269, 782203500, 780088465, 777979150, 775875538, 773777614, 771685363,
    769598769, 767517817, 765442492, 763372778, 761308661, 759250125, 757197155, 755149737, 753107854,
    751071493, 749040637, 747015274, 744995386, 742980960, 740971982, 738968435, 736970306, 734977579,
    732990241, 731008277, 729031671, 727060411, 725094480, 723133865, 721178552, 719228525, 717283772,
    715344277, 713410026, 711481005, 709557200, 707638598, 705725183, 703816941, 701913860, 700015924,
    698123120, 696235434, 694352853, 692475362, 690602947, 688735596, 686873293, 685016026, 683163781,
    681316545, 679474303, 677637043, 675804750, 673977412, 672155015, 670337545, 668524990, 666717336,
    664914570, 663116678, 661323648, 659535466, 657752119, 655973594, 654199878, 652430958, 650666822,
    648907455, 647152846, 645402981, 643657847, 641917433, 640181724, 638450708, 636724373, 635002706,
    633285695, 631573326, 629865587, 628162466, 626463950, 624770026, 623080683, 621395908, 619715688,
    618040012, 616368866, 614702239, 613040119, 611382493, 609729349, 608080675, 606436459, 604796689,
    603161352, 601530438, 599903933, 598281827, 596664106, 595050760, 593441776, 591837143, 590236848,
    588640881, 587049229, 585461881, 583878825, 582300049, 580725543, 579155293, 577589290, 576027521,
    574469975, 572916640, 571367506, 569822560, 568281792, 566745190, 565212742, 563684439, 562160268,
    560640218, 559124278, 557612438, 556104685, 554601009, 553101399, 551605844, 550114332, 548626854,
    547143398, 545663953, 544188508, 542717053, 541249576, 539786068, 538326517, 536870912,
];

/// `log2(1 + i/256)` in `Q30`, rounded to nearest, for `i` in `0..=256` (a test checks each entry).
pub const LOG2_TABLE: [u32; 257] = [
    0, 6039314, 12055174, 18047761, 24017256, 29963836, 35887675, 41788947, 47667823, 53524472, 59359063,
    65171760, 70962728, 76732128, 82480119, 88206862, 93912511, 99597222, 105261148, 110904440, 116527248,
    122129721, 127712004, 133274244, 138816582, 144339162, 149842124, 155325606, 160789745, 166234679,
    171660541, 177067464, 182455581, 187825021, 193175914, 198508388, 203822568, 209118580, 214396548,
    219656594, 224898839, 230123404, 235330407, 240519966, 245692198, 250847218, 255985140, 261106077,
    266210141, 271297442, 276368092, 281422197, 286459867, 291481207, 296486323, 301475319, 306448299,
    311405366, 316346620, 321272163, 326182095, 331076513, 335955515, 340819199, 345667660, 350500993,
    355319292, 360122651, 364911162, 369684916, 374444004, 379188517, 383918542, 388634168, 393335482,
    398022572, 402695523, 407354420, 411999347, 416630388, 421247625, 425851141, 430441017, 435017334,
    439580170, 444129607, 448665721, 453188592, 457698295, 462194908, 466678506, 471149164, 475606957,
    480051959, 484484242, 488903880, 493310944, 497705506, 502087636, 506457405, 510814882, 515160136,
    519493235, 523814248, 528123241, 532420281, 536705435, 540978767, 545240343, 549490228, 553728485,
    557955178, 562170370, 566374123, 570566499, 574747559, 578917365, 583075977, 587223455, 591359858,
    595485245, 599599675, 603703206, 607795895, 611877800, 615948977, 620009483, 624059373, 628098702,
    632127527, 636145900, 640153876, 644151509, 648138853, 652115959, 656082880, 660039669, 663986377,
    667923055, 671849754, 675766525, 679673418, 683570481, 687457766, 691335320, 695203192, 699061430,
    702910083, 706749198, 710578822, 714399001, 718209783, 722011213, 725803337, 729586201, 733359850,
    737124328, 740879680, 744625951, 748363183, 752091421, 755810707, 759521085, 763222597, 766915285,
    770599192, 774274358, 777940826, 781598637, 785247830, 788888448, 792520529, 796144114, 799759243,
    803365955, 806964289, 810554283, 814135978, 817709409, 821274617, 824831638, 828380510, 831921271,
    835453956, 838978604, 842495250, 846003931, 849504683, 852997541, 856482542, 859959719, 863429109,
    866890747, 870344666, 873790901, 877229486, 880660455, 884083842, 887499680, 890908003, 894308843,
    897702233, 901088206, 904466794, 907838029, 911201944, 914558569, 917907937, 921250079, 924585025,
    927912807, 931233456, 934547002, 937853475, 941152905, 944445323, 947730758, 951009239, 954280797,
    957545460, 960803257, 964054218, 967298370, 970535742, 973766362, 976990259, 980207461, 983417995,
    986621888, 989819169, 993009864, 996194001, 999371606, 1002542707, 1005707329, 1008865499, 1012017244,
    1015162589, 1018301561, 1021434185, 1024560487, 1027680492, 1030794226, 1033901713, 1037002979,
    1040098049, 1043186948, 1046269699, 1049346328, 1052416858, 1055481314, 1058539720, 1061592099,
    1064638476, 1067678873, 1070713315, 1073741824,
];

/// `sin(π/2 · i/256)` in `Q30`, rounded to nearest, for `i` in `0..=256` (a test checks each entry).
pub const SIN_TABLE: [u32; 257] = [
    0, 6588356, 13176464, 19764076, 26350943, 32936819, 39521455, 46104602, 52686014, 59265442, 65842639,
    72417357, 78989349, 85558366, 92124163, 98686491, 105245103, 111799753, 118350194, 124896179, 131437462,
    137973796, 144504935, 151030634, 157550647, 164064728, 170572633, 177074115, 183568930, 190056834,
    196537583, 203010932, 209476638, 215934457, 222384147, 228825464, 235258165, 241682010, 248096755,
    254502159, 260897982, 267283981, 273659918, 280025552, 286380643, 292724951, 299058239, 305380268,
    311690799, 317989595, 324276419, 330551034, 336813204, 343062693, 349299266, 355522689, 361732726,
    367929144, 374111709, 380280190, 386434353, 392573967, 398698801, 404808624, 410903207, 416982319,
    423045732, 429093217, 435124548, 441139496, 447137835, 453119340, 459083786, 465030947, 470960600,
    476872522, 482766489, 488642281, 494499676, 500338453, 506158392, 511959275, 517740883, 523502998,
    529245404, 534967884, 540670223, 546352205, 552013618, 557654248, 563273883, 568872310, 574449320,
    580004702, 585538248, 591049748, 596538995, 602005783, 607449906, 612871159, 618269338, 623644239,
    628995660, 634323400, 639627258, 644907034, 650162530, 655393548, 660599890, 665781362, 670937767,
    676068911, 681174602, 686254647, 691308855, 696337036, 701339000, 706314559, 711263525, 716185713,
    721080937, 725949013, 730789757, 735602987, 740388522, 745146182, 749875788, 754577161, 759250125,
    763894504, 768510122, 773096806, 777654384, 782182683, 786681534, 791150767, 795590213, 799999706,
    804379079, 808728167, 813046808, 817334838, 821592095, 825818421, 830013654, 834177638, 838310216,
    842411232, 846480531, 850517961, 854523370, 858496606, 862437520, 866345964, 870221790, 874064853,
    877875009, 881652112, 885396022, 889106597, 892783698, 896427186, 900036924, 903612776, 907154608,
    910662286, 914135678, 917574653, 920979082, 924348837, 927683790, 930983817, 934248793, 937478595,
    940673101, 943832191, 946955747, 950043650, 953095785, 956112036, 959092290, 962036435, 964944360,
    967815955, 970651112, 973449725, 976211688, 978936898, 981625251, 984276646, 986890984, 989468165,
    992008094, 994510675, 996975812, 999403415, 1001793390, 1004145648, 1006460100, 1008736660, 1010975242,
    1013175761, 1015338134, 1017462281, 1019548121, 1021595575, 1023604567, 1025575020, 1027506862,
    1029400018, 1031254418, 1033069992, 1034846671, 1036584389, 1038283080, 1039942680, 1041563127,
    1043144360, 1044686319, 1046188946, 1047652185, 1049075980, 1050460278, 1051805027, 1053110176,
    1054375676, 1055601479, 1056787540, 1057933813, 1059040255, 1060106826, 1061133483, 1062120190,
    1063066909, 1063973603, 1064840240, 1065666786, 1066453210, 1067199483, 1067905576, 1068571464,
    1069197120, 1069782521, 1070327646, 1070832474, 1071296985, 1071721163, 1072104991, 1072448455,
    1072751542, 1073014240, 1073236540, 1073418433, 1073559913, 1073660973, 1073721611, 1073741824,
];

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn f32_of_f16_is_the_conversion() {
        for bits in 0..=u16::MAX {
            let expected = half::f16::from_bits(bits).to_f32();
            let ours = super::f32_of_f16(bits);
            assert!(
                ours.to_bits() == expected.to_bits() || (ours.is_nan() && expected.is_nan()),
                "{bits:#06x}: {ours} against {expected}"
            );
        }
    }

    use super::*;
    use crate::rng::Rng;

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn wide_products_by_halves_are_the_products() {
        let mut rng = Rng::new(31);
        let edges = [0, 1, 0xFFFF, 0x1_0000, 0x7FFF_FFFF, 0x8000_0000, u32::MAX];
        for &a in &edges {
            for &b in &edges {
                assert_eq!(mul_wide_u32_by_halves(a, b), a as u64 * b as u64, "{a} {b}");
            }
        }
        for _ in 0..100_000 {
            let (a, b) = (rng.next_u64() as u32, rng.next_u64() as u32);
            assert_eq!(mul_wide_u32_by_halves(a, b), a as u64 * b as u64, "{a} {b}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn the_tables_hold_what_they_say() {
        for (i, &entry) in EXP2_TABLE.iter().enumerate() {
            let exact = libm::exp2(30.0 - i as f64 / 256.0);
            assert!(
                (entry as f64 - exact).abs() <= 0.5 + 1e-6,
                "EXP2_TABLE[{i}] = {entry}, 2^(30 - i/256) = {exact}"
            );
        }
        for (i, &entry) in LOG2_TABLE.iter().enumerate() {
            let exact = libm::log2(1.0 + i as f64 / 256.0) * (1u64 << 30) as f64;
            assert!(
                (entry as f64 - exact).abs() <= 0.5 + 1e-6,
                "LOG2_TABLE[{i}] = {entry}, exact {exact}"
            );
        }
        for (i, &entry) in SIN_TABLE.iter().enumerate() {
            let exact = libm::sin(i as f64 / 256.0 * core::f64::consts::FRAC_PI_2) * (1u64 << 30) as f64;
            assert!(
                (entry as f64 - exact).abs() <= 0.5 + 1e-6,
                "SIN_TABLE[{i}] = {entry}, exact {exact}"
            );
        }
        assert!((LOG2_E_Q31 as f64 / (1u64 << 31) as f64 - core::f64::consts::LOG2_E).abs() < 1e-9);
        assert!((LN_2_Q31 as f64 / (1u64 << 31) as f64 - core::f64::consts::LN_2).abs() < 1e-9);
    }

    /// Random reals spread over many octaves in `[2^-40, 2^29)`.
    fn spread(rng: &mut Rng) -> f64 {
        libm::exp2(rng.unit_f64() * 69.0 - 40.0)
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn multipliers_from_reals_are_the_nearest() {
        let mut rng = Rng::new(1);
        for _ in 0..20_000 {
            let value = spread(&mut rng);
            let m = Multiplier::from_f64(value).unwrap();
            assert!(m.is_valid());
            let step = libm::exp2(-(m.shift as f64));
            assert!(
                (m.to_f64() - value).abs() <= step * 0.5 * (1.0 + 1e-9),
                "{value}: {m:?}"
            );
            if m.shift < MAX_SHIFT {
                assert!(
                    (1 << 30..=i32::MAX).contains(&m.mantissa),
                    "{value}: not normalised: {m:?}"
                );
            }
        }
        assert_eq!(Multiplier::from_f64(0.0), Some(Multiplier::ZERO));
        assert_eq!(Multiplier::from_f64(1.0), Some(Multiplier::ONE));
        for bad in [-1e-30, f64::NAN, f64::INFINITY, (1u64 << 30) as f64] {
            assert_eq!(Multiplier::from_f64(bad), None, "{bad}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn applying_a_multiplier_rounds_the_exact_product() {
        let mut rng = Rng::new(2);
        for _ in 0..50_000 {
            let m = Multiplier::from_f64(spread(&mut rng)).unwrap();
            let x = rng.next_u64() as i32 >> rng.below(31);
            // exact: x · mantissa / 2^shift in i128, halves up
            let exact = x as i128 * m.mantissa as i128;
            let expected = if m.shift == 0 {
                exact
            } else {
                (exact + (1i128 << (m.shift - 1))).div_euclid(1i128 << m.shift)
            };
            let expected = expected.clamp(i32::MIN as i128, i32::MAX as i128) as i32;
            assert_eq!(m.apply(x), expected, "{x} · {m:?}");
            // and the real product, within half a step
            let real = x as f64 * m.to_f64();
            if real.abs() < 2e9 {
                assert!(
                    (m.apply(x) as f64 - real).abs() <= 0.5 + 1e-6,
                    "{x} · {m:?} = {real}"
                );
            }
        }
        assert_eq!(Multiplier::ONE.apply(i32::MIN), i32::MIN);
        assert_eq!(Multiplier::from_f64(4.0).unwrap().apply(i32::MAX / 2), i32::MAX);
        assert_eq!(Multiplier::ZERO.apply(12345), 0);
        let half = Multiplier::from_f64(0.5).unwrap();
        assert_eq!(
            [half.apply(3), half.apply(-3), half.apply(1), half.apply(-1)],
            [2, -1, 1, 0]
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn ratios_round_down_to_31_bits() {
        let mut rng = Rng::new(3);
        for _ in 0..50_000 {
            let num = rng.next_u64() >> rng.below(64);
            let den = (rng.next_u64() >> rng.below(64)).max(1);
            let exact = num as f64 / den as f64;
            match Multiplier::from_ratio(num, den) {
                None => assert!(exact >= (1u64 << 31) as f64 * (1.0 - 1e-9), "{num}/{den}"),
                Some(m) => {
                    assert!(m.is_valid(), "{num}/{den}: {m:?}");
                    let got = m.to_f64();
                    if exact < libm::exp2(-62.0) {
                        assert!(got <= exact, "{num}/{den}: {got} > {exact}");
                        continue;
                    }
                    if num != 0 && m.shift < MAX_SHIFT {
                        assert!((1 << 30..=i32::MAX).contains(&m.mantissa), "{num}/{den}: {m:?}");
                    }
                    // rounded down, by less than 2^-29 relative (the divisor's dropped bits
                    // and the quotient's)
                    let ulp = libm::exp2(-(m.shift as f64));
                    assert!(got <= exact * (1.0 + 1e-12), "{num}/{den}: {got} > {exact}");
                    assert!(
                        exact - got <= exact * libm::exp2(-29.0) + ulp,
                        "{num}/{den}: {got} vs {exact}"
                    );
                }
            }
        }
        assert_eq!(Multiplier::from_ratio(1, 0), None);
        assert_eq!(Multiplier::from_ratio(0, 7), Some(Multiplier::ZERO));
        assert_eq!(Multiplier::from_ratio(3, 3), Some(Multiplier::ONE));
        assert_eq!(Multiplier::from_ratio(1 << 40, 1 << 9), None);
        // a divisor whose kept bits round up to the next power of two
        for (num, den) in [
            (u64::MAX, u64::MAX),
            (1 << 20, u64::MAX),
            (u64::MAX >> 1, u64::MAX),
            (u64::MAX, (1 << 33) - 1),
        ] {
            let got = Multiplier::from_ratio(num, den).unwrap().to_f64();
            let exact = num as f64 / den as f64;
            assert!(
                got <= exact && exact - got <= exact * libm::exp2(-29.0),
                "{num}/{den}: {got} vs {exact}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn rounding_shifts_in_32_bits_are_the_wide_ones() {
        let mut rng = Rng::new(14);
        for i in 0..20_000u32 {
            let v = match i {
                0 => i32::MIN,
                1 => i32::MAX,
                _ => (rng.next_u64() as i32) >> (i % 31),
            };
            for shift in 0..32 {
                assert_eq!(
                    round_shift_i32(v, shift) as i64,
                    round_shift(v as i64, shift as i32)
                );
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn sixteen_bit_scales_round_their_values() {
        let value = |s: Scale16| s.mantissa as f64 * 2f64.powi(s.exponent);
        let mut rng = Rng::new(11);
        for _ in 0..20_000 {
            let x = spread(&mut rng) as f32;
            let s = Scale16::of_f32(x);
            assert!((1 << 15..1 << 16).contains(&s.mantissa), "{x}: {s:?}");
            let ulp = 2f64.powi(s.exponent);
            assert!((value(s) - x as f64).abs() <= ulp / 2.0, "{x}: {s:?}");
            let wide = Scale16::of_multiplier(multiplier_of_f32(x).unwrap());
            assert_eq!(wide, s, "{x}");
        }
        // rounding up to the next power of two
        let s = Scale16::of_f32(f32::from_bits(0x3FFF_FFFF));
        assert_eq!((s.mantissa, s.exponent), (1 << 15, -14));
        for x in [0.0f32, -1.0, f32::INFINITY, f32::NAN, 1e-40] {
            assert_eq!(Scale16::of_f32(x), Scale16::ZERO, "{x}");
        }
        let small = Scale16::of_wide(3, 5);
        assert_eq!((small.mantissa, small.exponent), (3 << 14, -9));
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn rescales_round_the_exact_product() {
        let mut rng = Rng::new(12);
        for i in 0..200_000u32 {
            let a = Scale16::of_f32(spread(&mut rng) as f32);
            let b = Scale16::of_f32(spread(&mut rng) as f32);
            let r = a.times(b);
            assert!((1 << 14..=1 << 15).contains(&r.mantissa), "{r:?}");
            // the 15-bit product is within half a unit of its last place
            let exact = a.mantissa as f64 * b.mantissa as f64 * 2f64.powi(a.exponent + b.exponent);
            let got = r.mantissa as f64 * 2f64.powi(-r.shift);
            assert!((got - exact).abs() <= 2f64.powi(-r.shift) / 2.0);
            let r = Rescale {
                mantissa: r.mantissa,
                shift: (i % 70) as i32 - 10,
            };
            let bits = rng.next_u64() % 32;
            let x = (rng.next_u64() as i32) >> bits;
            for x in [x, i32::MIN, i32::MAX, -1, 0, 1 << 16, -(1 << 16)] {
                let exact = (x as i128 * r.mantissa as i128) as f64 / 2f64.powi(r.shift);
                let want = (exact + 0.5).floor().clamp(i32::MIN as f64, i32::MAX as f64) as i32;
                assert_eq!(r.apply(x), want, "{x} {r:?}");
            }
        }
        let top = Rescale {
            mantissa: 1 << 15,
            shift: 17,
        };
        assert_eq!(top.apply(i32::MIN), -(1 << 29));
        assert_eq!(top.apply(i32::MAX), 1 << 29);
        assert_eq!(Rescale::ZERO.apply(12345), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn products_of_multipliers() {
        let mut rng = Rng::new(4);
        for _ in 0..20_000 {
            let (a, b) = (spread(&mut rng) / 1e6, spread(&mut rng) / 1e6);
            let (ma, mb) = (Multiplier::from_f64(a).unwrap(), Multiplier::from_f64(b).unwrap());
            let exact = ma.to_f64() * mb.to_f64();
            let product = ma.times(mb);
            if exact >= (1u64 << 31) as f64 {
                assert_eq!(product, None);
                continue;
            }
            let got = product.unwrap().to_f64();
            let ulp = libm::exp2(-(MAX_SHIFT as f64));
            assert!(
                got <= exact && exact - got <= exact * libm::exp2(-29.0) + ulp,
                "{a} · {b}: {got} vs {exact}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn powers_of_two_move_the_shift() {
        let m = Multiplier::from_f64(0.75).unwrap();
        assert_eq!(m.times_pow2(3).unwrap().to_f64(), 6.0);
        assert_eq!(m.times_pow2(-40).unwrap().to_f64(), 0.75 * libm::exp2(-40.0));
        assert_eq!(m.times_pow2(30).unwrap().to_f64(), 0.75 * libm::exp2(30.0));
        assert_eq!(m.times_pow2(31).unwrap().mantissa, 3 << 29);
        assert_eq!(m.times_pow2(32), None);
        assert_eq!(Multiplier::ZERO.times_pow2(100), Some(Multiplier::ZERO));
        let tiny = m.times_pow2(-70).unwrap();
        assert!(tiny.is_valid() && tiny.to_f64() <= 0.75 * libm::exp2(-70.0));
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn integer_square_roots_are_exact() {
        let mut rng = Rng::new(5);
        let check = |v: u64| {
            let r = isqrt(v) as u128;
            assert!(
                r * r <= v as u128 && (r + 1) * (r + 1) > v as u128,
                "isqrt({v}) = {r}"
            );
        };
        for v in (0..1000).chain([
            u64::MAX,
            u64::MAX - 1,
            1 << 62,
            (1 << 62) - 1,
            u32::MAX as u64 * u32::MAX as u64,
        ]) {
            check(v);
        }
        for _ in 0..50_000 {
            check(rng.next_u64() >> rng.below(64));
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn exponentials_in_32_bits_equal_the_64_bit_steps() {
        // the 64-bit form of every step
        let wide = |t: u32| {
            let y = (t as u64 * LOG2_E_Q31 as u64) >> 31;
            let n = y >> 24;
            if n > 31 {
                return 0;
            }
            let fraction = (y & 0xFF_FFFF) as u32;
            let index = (fraction >> 16) as usize;
            let between = (fraction & 0xFFFF) as u64;
            let (high, low) = (EXP2_TABLE[index], EXP2_TABLE[index + 1]);
            let value = high - (((high - low) as u64 * between + (1 << 15)) >> 16) as u32;
            if n == 0 {
                value
            } else {
                (value + (1 << (n - 1))) >> n
            }
        };
        let mut rng = Rng::new(60);
        for i in 0..300_000u32 {
            let t = match i % 3 {
                0 => i * 1797,
                1 => (rng.next_u64() >> 32) as u32,
                _ => (rng.next_u64() >> 35) as u32 + (1 << 28),
            };
            assert_eq!(exp_neg(t), wide(t), "{t}");
        }
        for t in [0, 1, (1 << 29) - 1, 1 << 29, u32::MAX] {
            assert_eq!(exp_neg(t), wide(t), "{t}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn exponentials_are_close() {
        let mut rng = Rng::new(6);
        assert_eq!(exp_neg(0), 1 << 30);
        let mut worst = 0.0f64;
        for i in 0..200_000u32 {
            let t = if i < 100_000 {
                i * 3001
            } else {
                (rng.next_u64() >> 32) as u32
            };
            let exact = libm::exp(-(t as f64) / (1u64 << 24) as f64) * (1u64 << 30) as f64;
            let got = exp_neg(t) as f64;
            let error = (got - exact).abs();
            // relative error below 2^-19, and at most one unit in the last place near zero
            assert!(
                error <= exact * libm::exp2(-19.0) + 1.0,
                "exp(-{t} / 2^24): {got} vs {exact}"
            );
            if exact > 1e6 {
                worst = worst.max(error / exact);
            }
        }
        assert!(worst > 0.0 && worst < libm::exp2(-19.0), "{worst}");
        assert_eq!(exp_neg(u32::MAX), 0);
        // monotone
        let mut last = u32::MAX;
        for t in (0..(40u32 << 24)).step_by(4099) {
            let e = exp_neg(t);
            assert!(e <= last, "exp_neg({t}) = {e} > {last}");
            last = e;
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn logarithms_are_close() {
        let mut rng = Rng::new(7);
        let q24 = (1u64 << 24) as f64;
        let check = |v: u64| {
            let exact = libm::log2(v as f64);
            let got = log2(v) as f64 / q24;
            assert!(
                (got - exact).abs() < libm::exp2(-18.0),
                "log2({v}): {got} vs {exact}"
            );
            let exact = libm::log(v as f64);
            let got = ln(v) as f64 / q24;
            assert!(
                (got - exact).abs() < libm::exp2(-18.0),
                "ln({v}): {got} vs {exact}"
            );
        };
        for v in (1..5000).chain([u64::MAX, 1 << 63, (1 << 40) + 12345]) {
            check(v);
        }
        for _ in 0..50_000 {
            check((rng.next_u64() >> rng.below(64)).max(1));
        }
        assert_eq!(log2(1), 0);
        assert_eq!(log2(1 << 40), 40 << 24);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn multipliers_from_f32_bits_are_exact() {
        let mut rng = Rng::new(12);
        for _ in 0..100_000 {
            let value = f32::from_bits(rng.next_u64() as u32 & 0x7FFF_FFFF);
            assert_eq!(
                multiplier_of_f32(value),
                Multiplier::from_f64(value as f64),
                "{value:e}"
            );
        }
        for value in [
            0.0f32,
            -0.0,
            1.0,
            0.5,
            1e-30,
            2.3e-10,
            5.42e-20,
            f32::MIN_POSITIVE,
            1e-45,
            1073741823.0,
            1073741824.0,
            6e8,
        ] {
            assert_eq!(
                multiplier_of_f32(value),
                Multiplier::from_f64(value as f64),
                "{value:e}"
            );
        }
        for bad in [-1.0f32, -1e-40, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(multiplier_of_f32(bad), None, "{bad}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn fixed_point_from_f32_bits_rounds_like_f64() {
        let mut rng = Rng::new(13);
        for _ in 0..200_000 {
            let value = f32::from_bits(rng.next_u64() as u32);
            let frac = rng.below(62) as u32;
            let expected = if value.is_nan() {
                0
            } else {
                let exact = libm::round(value as f64 * libm::exp2(frac as f64));
                if exact >= i64::MAX as f64 {
                    i64::MAX
                } else if exact <= -(i64::MAX as f64) {
                    -i64::MAX
                } else {
                    exact as i64
                }
            };
            assert_eq!(fixed_of_f32_wide(value, frac), expected, "{value:e} · 2^{frac}");
            assert_eq!(fixed_of_f32(value, frac), saturate(expected));
        }
        assert_eq!(
            [
                fixed_of_f32(0.5, 0),
                fixed_of_f32(-0.5, 0),
                fixed_of_f32(1.5, 0),
                fixed_of_f32(-2.5, 0)
            ],
            [1, -1, 2, -3]
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn position_frequencies_are_within_a_unit() {
        for (i, &entry) in HALVING_POWERS.iter().enumerate() {
            let exact = libm::exp2(62.0 - libm::exp2(-(i as f64 + 1.0)));
            assert!(
                (entry as f64 - exact).abs() <= exact * 1e-15 + 1.0,
                "HALVING_POWERS[{i}]"
            );
        }
        for d_model in [2, 16, 24, 96, 128, 410, 1024, 4096] {
            for k in 0..d_model / 2 {
                let radians = libm::pow(10000.0, -(2.0 * k as f64) / d_model as f64);
                let exact = radians / (2.0 * core::f64::consts::PI) * 4_294_967_296.0;
                let got = position_frequency(k, d_model) as f64;
                assert!((got - exact).abs() <= 1.0, "k {k} of {d_model}: {got} vs {exact}");
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn sines_and_cosines_are_close() {
        let mut rng = Rng::new(9);
        let q30 = (1u64 << 30) as f64;
        let check = |phase: u32| {
            let angle = phase as f64 / 4_294_967_296.0 * 2.0 * core::f64::consts::PI;
            let (sin, cos) = (sin_turns(phase) as f64 / q30, cos_turns(phase) as f64 / q30);
            assert!((sin - libm::sin(angle)).abs() < 5e-6, "sin of {phase}: {sin}");
            assert!((cos - libm::cos(angle)).abs() < 5e-6, "cos of {phase}: {cos}");
        };
        for phase in [
            0,
            1,
            1 << 30,
            (1 << 30) - 1,
            1 << 31,
            3 << 30,
            u32::MAX,
            (1 << 30) + 1,
        ] {
            check(phase);
        }
        for _ in 0..100_000 {
            check(rng.next_u64() as u32);
        }
        assert_eq!(
            [
                sin_turns(0),
                sin_turns(1 << 30),
                sin_turns(1 << 31),
                sin_turns(3 << 30)
            ],
            [0, 1 << 30, 0, -(1 << 30)]
        );
        // a position times a frequency wraps to the angle the reals give
        let f = turns(0.3);
        for d in [0u32, 1, 7, 1000, 100_000] {
            let angle = d as f64 * 0.3;
            let sin = sin_turns(f.wrapping_mul(d)) as f64 / q30;
            assert!(
                (sin - libm::sin(angle)).abs() < 1e-5 + d as f64 * 1.5e-9,
                "sin({angle}) = {sin}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn fixed_point_to_f32_rounds_like_the_fpu() {
        let mut rng = Rng::new(8);
        let check = |v: i32, frac_bits: u32| {
            let expected = (v as f64 / libm::exp2(frac_bits as f64)) as f32;
            let got = to_f32(v, frac_bits);
            assert_eq!(
                got.to_bits(),
                expected.to_bits(),
                "{v} / 2^{frac_bits}: {got} vs {expected}"
            );
        };
        for frac_bits in [0, 1, 16, 24, 31, 60, 100] {
            for v in [
                0,
                1,
                -1,
                i32::MAX,
                i32::MIN,
                i32::MIN + 1,
                (1 << 24) + 1,
                (1 << 24) + 3,
                (1 << 25) + 2,
                (1 << 25) + 6,
                -(1 << 24) - 1,
                0x7FFF_FFC0,
                0x7FFF_FFBF,
            ] {
                check(v, frac_bits);
            }
        }
        for _ in 0..200_000 {
            let v = rng.next_u64() as i32 >> rng.below(32);
            check(v, rng.below(64) as u32);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn scales_read_from_bits_rescale_as_scale16_does() {
        let mut rng = Rng::new(77);
        let mut fast = 0;
        for case in 0..200_000u32 {
            // steps of every exponent a session makes, and zero
            let step = if case % 997 == 0 {
                Scale16::ZERO
            } else {
                Scale16::of_wide(1 + rng.next_u64() % (1 << 40), rng.below(80) as i32 - 70)
            };
            // usual scales, mantissas that round up to 2^16, signs, zero, subnormals, infinities
            let bits = match case % 6 {
                0 => (rng.next_u64() as u32 & 0x807F_FFFF) | (rng.below(256) as u32) << 23,
                1 => (rng.next_u64() as u32 & 0x7F_FFFF) | 0x7F_FF80 | (100 + rng.below(40) as u32) << 23,
                2 => [0, 0x8000_0000, 1, 0x7F80_0000, 0x7FC0_0000, 0xFF80_0000][rng.below(6) as usize],
                _ => (rng.next_u64() as u32 & 0x7F_FFFF) | (100 + rng.below(40) as u32) << 23,
            };
            let x = match case % 5 {
                0 => [0, 1, -1, i32::MAX, i32::MIN, 65535, -65536][rng.below(7) as usize],
                _ => rng.next_u64() as i32 >> rng.below(32),
            };
            let want = Scale16::of_f32(f32::from_bits(bits)).times(step).apply(x);
            assert_eq!(
                ScaledByBits::new(step).apply(bits, x),
                want,
                "{bits:#x} {step:?} {x}"
            );
            let r = Scale16::of_f32(f32::from_bits(bits)).times(step);
            fast += (1..=46).contains(&r.shift) as u32;
        }
        // most cases took the straight-line path
        assert!(fast > 40_000, "{fast}");
    }
}
