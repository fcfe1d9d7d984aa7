//! `bench`'s checks of the integer arithmetic's kernels (as this board runs them) against their
//! scalar definitions, bit for bit: the rescale of a linear layer's row sums by their rows'
//! scales (`kernel=scaled_by_bits`, `ScaledByBits::apply_each` against `ScaledByBits::apply`
//! value by value), the quantization of an input by a prepared rescale (`kernel=quantize_each`,
//! `PreparedRescale::quantize_each` against `PreparedRescale::apply` clamped to `±127`), and
//! with Helium or the DSP extension the activation scales' shifts of an input
//! (`kernel=act_shift`, against `integer::act_shift` and the largest magnitude), the scores'
//! exponentials (`kernel=exp_scores`, against `exp_neg(to_exp_input(..))` and their sum), and
//! with Helium the attention scores (`kernel=attention_scores`, against
//! `integer::attention_score_of_small`; with the DSP extension also of a row's keys read where
//! they lie, `kernel=attention_score_rows`), and LayerNorm of gains as slices
//! (`kernel=layer_norm_bits`, `integer::layer_norm_of_bit_slices` against
//! `integer::layer_norm_of_bits`), and with Helium or the DSP extension LayerNorm's sums
//! (`kernel=layer_norm_sums`: the sum, range and sum of squares against scalar loops) and the
//! query's words (`kernel=query_words`: the biased sums, their largest magnitude and the packed
//! halves against scalar loops), the attention's probabilities (`kernel=probabilities`, against
//! `Normalise::apply` and the shift by the values' powers of two), the attention's gathers
//! (`kernel=attention_gathers`: a ring's exponents and the position sums by distance against
//! scalar loops), the largest value exponent with a probability (`kernel=top_exponent`, against
//! a scalar loop), the attention output's shifts (`kernel=shift_sums`, against
//! `round_shift_i32` and a saturated shift left), the integer log-softmax (`kernel=log_softmax`,
//! against the scalar steps), and with Helium or the DSP extension the glue outside the
//! attention: the int8 memory's power-of-two quantization (`kernel=pow2_int8`), the
//! feed-forward's bias and ReLU, bias and residual, and the attention's residual
//! (`kernel=bias_passes`), the quantization of an input by a rescale's wide multiplier
//! (`kernel=quantize_wide`) and the output's biases in fixed point (`kernel=add_fixed`), each
//! against its scalar definition. A mismatch fails the run.

use alloc::vec::Vec;

use defmt::info;
use txl_core::fixed_point::{Rescale, Scale16, ScaledByBits};

use crate::bench::Numbers;
use crate::Failure;

/// The integer checks' values and row scales from `bench`'s generator.
impl Numbers {
    /// A value of a random bit length (`0..=31` bits and a sign), now and then an extreme one.
    fn value(&mut self) -> i32 {
        let r = self.next();
        match r % 16 {
            0 => [i32::MIN, i32::MAX, 0, -1, 1, 1 << 16, -(1 << 16), (1 << 16) - 1][(r >> 4) as usize % 8],
            _ => {
                let bits = (r >> 4) % 32;
                let v = (self.next() >> (31 - bits)) as i32;
                if r & 1 << 9 == 0 {
                    v
                } else {
                    v.wrapping_neg()
                }
            }
        }
    }

    /// A row scale's bits: mostly positive normal f32s near the usual magnitudes, some with a
    /// mantissa that rounds up, some zero, negative, subnormal, infinite or NaN.
    fn scale(&mut self) -> u32 {
        let r = self.next();
        let fraction = match r % 8 {
            0 => 0x7F_FF80 | (r >> 8) & 0x7F,
            1 => 0,
            _ => self.next() & 0x7F_FFFF,
        };
        match (r >> 3) % 32 {
            0 => 0,
            1 => 0x8000_0000 | (100 << 23) | fraction,
            2 => fraction,
            3 => (255 << 23) | fraction,
            _ => ((90 + (self.next() % 70)) << 23) | fraction,
        }
    }
}

/// Runs the checks, each logged as it passes.
pub fn run() -> Result<(), Failure> {
    let values = check_scaled_by_bits()?;
    info!("bench check kernel=scaled_by_bits values={=usize} ok", values);
    let values = check_layer_norm_bits()?;
    info!("bench check kernel=layer_norm_bits values={=usize} ok", values);
    let values = check_quantize_each()?;
    info!("bench check kernel=quantize_each values={=usize} ok", values);
    // (the kernels of the DSP extension and of Helium; none elsewhere)
    if let Some(values) = check_act_shift()? {
        info!("bench check kernel=act_shift values={=usize} ok", values);
    }
    if let Some(values) = check_attention_scores()? {
        info!("bench check kernel=attention_scores values={=usize} ok", values);
    }
    if let Some(values) = check_attention_score_rows()? {
        info!(
            "bench check kernel=attention_score_rows values={=usize} ok",
            values
        );
    }
    if let Some(values) = check_exp_scores()? {
        info!("bench check kernel=exp_scores values={=usize} ok", values);
    }
    if let Some(values) = check_layer_norm_sums()? {
        info!("bench check kernel=layer_norm_sums values={=usize} ok", values);
    }
    if let Some(values) = check_query_words()? {
        info!("bench check kernel=query_words values={=usize} ok", values);
    }
    if let Some(values) = check_probabilities()? {
        info!("bench check kernel=probabilities values={=usize} ok", values);
    }
    if let Some(values) = check_attention_gathers()? {
        info!("bench check kernel=attention_gathers values={=usize} ok", values);
    }
    if let Some(values) = check_top_exponent()? {
        info!("bench check kernel=top_exponent values={=usize} ok", values);
    }
    if let Some(values) = check_shift_sums()? {
        info!("bench check kernel=shift_sums values={=usize} ok", values);
    }
    if txl_core::kernels::INTEGER_PASSES {
        let values = check_log_softmax()?;
        info!("bench check kernel=log_softmax values={=usize} ok", values);
    }
    glue_checks()
}

/// `integer::layer_norm_of_bit_slices` against `integer::layer_norm_of_bits` (the general
/// loop) on rows of 1 to 300 values of several magnitudes (fraction bits 8 to 20), gains of
/// both signs (some zero, subnormal or huge), biases near the saturation now and then; half the
/// rows with gains within a factor of 16 (a layer's), given to
/// `integer::layer_norm_of_bounded_slices` with their exponents' bounds (exact, or wider).
fn check_layer_norm_bits() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x1a7e_4011);
    let mut checked = 0;
    for row in 0..60u32 {
        let n = 1 + (numbers.next() % 300) as usize;
        let frac = 8 + row % 13;
        let bits = 4 + numbers.next() % 26;
        let x: Vec<i32> = (0..n).map(|_| (numbers.next() as i32) >> (31 - bits)).collect();
        let narrow = row % 2 == 0;
        let gains: Vec<u32> = (0..n)
            .map(|_| {
                let r = numbers.next();
                let sign = r & 0x8000_0000;
                match r % 16 {
                    _ if narrow => sign | ((120 + (r >> 4) % 4) << 23) | (numbers.next() & 0x7F_FFFF),
                    0 => sign,
                    1 => sign | (r >> 9) & 0x7F_FFFF,
                    2 => sign | (200 << 23) | (r >> 9) & 0x7F_FFFF,
                    _ => sign | ((110 + (r >> 4) % 30) << 23) | (numbers.next() & 0x7F_FFFF),
                }
            })
            .collect();
        let biases: Vec<i32> = (0..n)
            .map(|_| match numbers.next() % 16 {
                0 => i32::MAX - (numbers.next() % 8) as i32,
                1 => i32::MIN + (numbers.next() % 8) as i32,
                _ => (numbers.next() as i32) >> (31 - bits),
            })
            .collect();
        let epsilon = [0u64, 1, 1 << 20][row as usize % 3];
        let (mut got, mut want) = (alloc::vec![0i32; n], alloc::vec![0i32; n]);
        if narrow {
            let exponent = |b: &u32| ((b & 0x7FFF_FFFF) >> 23) as i32;
            let low = gains.iter().map(exponent).min().unwrap_or(0);
            let high = gains.iter().map(exponent).max().unwrap_or(0);
            let wider = (row % 4 == 2) as i32;
            let gains = (&gains[..], Some((low - wider, high + wider)));
            txl_core::integer::layer_norm_of_bounded_slices(&x, gains, &biases, epsilon, frac, &mut got);
        } else {
            txl_core::integer::layer_norm_of_bit_slices(&x, &gains, &biases, epsilon, frac, &mut got);
        }
        txl_core::integer::layer_norm_of_bits(&x, |i| gains[i], |i| biases[i], epsilon, frac, &mut want);
        if got != want {
            return Err(Failure::KernelMismatch("layer_norm_bits"));
        }
        checked += n;
    }
    Ok(checked)
}

/// `PreparedRescale::quantize_each` against `PreparedRescale::apply` clamped to `±127`, for
/// rescales of every shift it takes (`17..=46`) and mantissas at the edges, lengths of 0 to
/// 70, values of every bit length (`largest` their largest magnitude, as the callers give it).
fn check_quantize_each() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x0dd_ba11);
    let mut checked = 0;
    for shift in 17..=46 {
        for mantissa in [1u32 << 14, (1 << 14) + 3, 0x5A82, (1 << 15) - 1, 1 << 15] {
            let Some(prepared) = (Rescale { mantissa, shift }).prepared() else {
                return Err(Failure::KernelMismatch("quantize_each"));
            };
            let n = (numbers.next() % 71) as usize;
            let x: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
            let largest = x.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
            let mut out = alloc::vec![0x55u8 as i8; n];
            prepared.quantize_each(&x, &mut out, largest);
            if x.iter()
                .zip(&out)
                .any(|(&v, &q)| q as i32 != prepared.apply(v).clamp(-127, 127))
            {
                return Err(Failure::KernelMismatch("quantize_each"));
            }
            checked += n;
        }
    }
    Ok(checked)
}

/// The kernels' `act_shift` (Helium's, the DSP extension's) against `integer::act_shift` value
/// by value and the largest magnitude after, for activation scales of powers of two below, at
/// and above the top one (shifts of 0 to past 31, negative and other scales among them),
/// lengths of 0 to 70. `None` where the board has no kernel.
fn check_act_shift() -> Result<Option<usize>, Failure> {
    let mut numbers = Numbers(0x0ac7_5eed);
    let mut checked = 0;
    for biased_top in [0u32, 1, 60, 127, 200, 252, 253, 254, 255] {
        for _ in 0..8 {
            let n = (numbers.next() % 71) as usize;
            let act: Vec<f32> = (0..n)
                .map(|_| {
                    let r = numbers.next();
                    let biased = biased_top.wrapping_sub(r % 40).wrapping_add(3) & 0x1FF;
                    let fraction = if r & 1 << 7 == 0 { 0 } else { (r >> 9) & 0x7F_FFFF };
                    f32::from_bits(biased << 23 | fraction)
                })
                .collect();
            let x: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
            let mut got = x.clone();
            let Some(largest) = txl_core::kernels::act_shifts_i32(&mut got, &act, biased_top) else {
                return Ok(None);
            };
            let want: Vec<i32> = x
                .iter()
                .zip(&act)
                .map(|(&v, &a)| txl_core::integer::act_shift(v, a, biased_top))
                .collect();
            let want_largest = want.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
            if got != want || largest != want_largest {
                return Err(Failure::KernelMismatch("act_shift"));
            }
            checked += n;
        }
    }
    Ok(Some(checked))
}

/// `ScaledByBits::apply_each` against `ScaledByBits::apply` for many steps (their mantissas at
/// and near the edges, their exponents across the fast paths' shifts and past them), row
/// counts of 0 to 137 (whole and partial blocks of four, more than one pass of the kernel's),
/// values and scales from [`Numbers`], half the calls' scales positive, normal and within a
/// factor of 8 (one matrix's rows), half the calls' values (at random) shifted right by 0 to
/// 30 bits (calls whose values all keep their bits under larger shifts), a third of the calls
/// with the scales' exponents bounded (`apply_each_bounded`: the exact bounds, or one wider).
/// Returns the number of values checked.
fn check_scaled_by_bits() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x5ca1_ed00);
    let mut checked = 0;
    for exponent in -60..=40 {
        for mantissa in [1u32 << 15, (1 << 15) + 1, 0xB504, 0xFFFF, 0] {
            let step = Scale16 { mantissa, exponent };
            let scaled = ScaledByBits::new(step);
            let n = (numbers.next() % 138) as usize;
            // half the calls with positive normal scales within a factor of 8 (a matrix's rows,
            // which the kernels may take without a check a row)
            let bits: Vec<u32> = match numbers.next() % 2 {
                0 => (0..n).map(|_| numbers.scale()).collect(),
                _ => {
                    let low = 90 + numbers.next() % 70;
                    (0..n)
                        .map(|_| (low + numbers.next() % 3) << 23 | numbers.next() & 0x7F_FFFF)
                        .collect()
                }
            };
            let scales: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
            let narrow = match numbers.next() % 2 {
                0 => 0,
                _ => numbers.next() % 31,
            };
            let values: Vec<i32> = (0..n).map(|_| numbers.value() >> narrow).collect();
            let mut y = values.clone();
            // a third of the calls with bounds on the scales' exponents (as a layer's matrix
            // keeps them: the smallest and largest, or bounds one wider around them)
            let exponent_of = |b: &u32| (*b as i32) >> 23;
            let (low, high) = (
                bits.iter().map(exponent_of).min(),
                bits.iter().map(exponent_of).max(),
            );
            match (numbers.next() % 3, low, high) {
                (0, Some(low), Some(high)) => scaled.apply_each_bounded(&scales, &mut y, Some((low, high))),
                (1, Some(low), Some(high)) => {
                    scaled.apply_each_bounded(&scales, &mut y, Some((low - 1, high + 1)))
                }
                _ => scaled.apply_each(&scales, &mut y),
            }
            for ((&b, &x), &got) in bits.iter().zip(&values).zip(&y) {
                if got != scaled.apply(b, x) {
                    return Err(Failure::KernelMismatch("scaled_by_bits"));
                }
            }
            checked += n;
        }
    }
    Ok(checked)
}

/// The kernels' `sum_range` and `squares` (Helium's, the DSP extension's) against scalar loops,
/// on rows of 1 to 200 values of 4 to 31 bits (the sum in 64 bits, exact), and the squares at
/// shifts and means that keep every deviation within `i32` and every rounded one within
/// `±2^15` (the DSP extension's for shifts of 2 or more). `None` where the board has no kernel.
fn check_layer_norm_sums() -> Result<Option<usize>, Failure> {
    use txl_core::kernels::{squares_i32 as squares, sum_range_i32 as sum_range};
    let mut numbers = Numbers(0x5e_5a11);
    let mut checked = 0;
    for _ in 0..60 {
        let n = 1 + (numbers.next() % 200) as usize;
        let bits = 4 + numbers.next() % 28;
        let x: Vec<i32> = (0..n).map(|_| (numbers.next() as i32) >> (31 - bits)).collect();
        let want = (
            x.iter().map(|&v| v as i64).sum::<i64>(),
            *x.iter().min().unwrap_or(&0),
            *x.iter().max().unwrap_or(&0),
        );
        match sum_range(&x) {
            None => return Ok(None),
            Some(got) if got != want => return Err(Failure::KernelMismatch("layer_norm_sums")),
            Some(_) => {}
        }
        let k = 30u32.saturating_sub(bits).min(16);
        let mean = (want.0 << k) / n as i64;
        let mean = mean as i32;
        let largest = x
            .iter()
            .map(|&v| ((v << k) - mean).unsigned_abs())
            .max()
            .unwrap_or(0);
        let s = (32 - largest.leading_zeros()).saturating_sub(15).max(1);
        let scalar: u64 = x
            .iter()
            .map(|&v| {
                let c = (((((v << k) - mean) >> (s - 1)) + 1) >> 1) as i64;
                (c * c) as u64
            })
            .sum();
        // (the DSP extension's kernel takes shifts of 2 or more)
        let got = squares(&x, k, mean, s);
        if got != Some(scalar) && (cfg!(feature = "mve") || s >= 2 || got.is_some()) {
            return Err(Failure::KernelMismatch("layer_norm_sums"));
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The kernels' `query_sums` and `query_pack` (Helium's, the DSP extension's) against scalar
/// loops: heads of 1 to 80 columns, sums that saturate now and then, shifts of 0 to 31. `None`
/// where the board has no kernel.
fn check_query_words() -> Result<Option<usize>, Failure> {
    use txl_core::kernels::{query_pack_i32 as query_pack, query_sums_i32 as query_sums};
    let mut numbers = Numbers(0x0e11_0a57);
    let mut checked = 0;
    for e in 0..32u32 {
        let n = 1 + (numbers.next() % 80) as usize;
        let q: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let b: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let mut qb = alloc::vec![0i32; n];
        let Some(largest) = query_sums(&q, &b, &mut qb) else {
            return Ok(None);
        };
        let want: Vec<i32> = q.iter().zip(&b).map(|(&q, &b)| q.saturating_add(b)).collect();
        let want_largest = want.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
        if qb != want || largest != want_largest {
            return Err(Failure::KernelMismatch("query_words"));
        }
        // values whose rounded shift fits 16 bits
        let qb: Vec<i32> = qb.iter().map(|&v| v >> (15 - e.min(15))).collect();
        let octets = n / 8;
        let mut words = alloc::vec![0u32; 4 * octets];
        if query_pack(&qb, &mut words, e) != octets {
            return Err(Failure::KernelMismatch("query_words"));
        }
        let half = |v: i32| {
            let r = if e == 0 { v } else { ((v >> (e - 1)) + 1) >> 1 };
            r as i16 as u16 as u32
        };
        for (g, w) in words.chunks(2).enumerate() {
            let c = &qb[4 * g..4 * g + 4];
            if w[0] != half(c[0]) | half(c[2]) << 16 || w[1] != half(c[1]) | half(c[3]) << 16 {
                return Err(Failure::KernelMismatch("query_words"));
            }
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The kernels' `probabilities` (Helium's, the DSP extension's) against `Normalise::apply` (of
/// sums from `2^30` to `2^45`) and the rounded shift by `min(max(e_max - ve, 0), 16)`, for
/// `e_j` of every magnitude up to `2^30` (some below `2^14`, some at the largest) and exponents
/// around `e_max`. `None` where the board has no kernel.
fn check_probabilities() -> Result<Option<usize>, Failure> {
    use txl_core::integer::Normalise;
    let mut numbers = Numbers(0x9b0b_ab1e);
    let mut checked = 0;
    for round in 0..64u32 {
        let sum = (1u64 << 30) + ((numbers.next() as u64) << (round % 16));
        let normalise = Normalise::of_sum(sum);
        let Some(high) = normalise.high_word() else {
            continue;
        };
        let n = 1 + (numbers.next() % 90) as usize;
        let e: Vec<i32> = (0..n)
            .map(|_| match numbers.next() % 8 {
                0 => 1 << 30,
                1 => (numbers.next() % (1 << 14)) as i32,
                _ => (numbers.next() >> (2 + numbers.next() % 16)) as i32,
            })
            .collect();
        let ve: Vec<i32> = (0..n).map(|_| (numbers.next() % 24) as i32).collect();
        let e_max = (numbers.next() % 24) as i32;
        let mut got = e.clone();
        if !txl_core::kernels::probabilities_i32(&mut got, &ve, high, e_max) {
            return Ok(None);
        }
        for ((&e, &ve), &got) in e.iter().zip(&ve).zip(&got) {
            let want = if e < 1 << 14 {
                0
            } else {
                let p = normalise.apply(e);
                let shift = (e_max - ve).clamp(0, 16) as u32;
                (((p << 1) >> shift) + 1) >> 1
            };
            if got != want {
                return Err(Failure::KernelMismatch("probabilities"));
            }
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The kernels' gathers of the attention (Helium's, the DSP extension's) against scalar loops: the exponents of a
/// ring (`exponents_strided`: one word of `stride` a key, plus a power of two) and the position
/// sums with their exponents by distance, from a distance down (`positions`), for 1 to 90 keys,
/// strides and rows of 1 to 40. `None` where the board has no kernel.
fn check_attention_gathers() -> Result<Option<usize>, Failure> {
    let mut numbers = Numbers(0x6a74_e125);
    let mut checked = 0;
    for _ in 0..48 {
        let n = 1 + (numbers.next() % 90) as usize;
        let stride = 1 + (numbers.next() % 40) as usize;
        let add = numbers.value() >> 8;
        let words: Vec<f32> = (0..(n - 1) * stride + 1 + (numbers.next() % 3) as usize)
            .map(|_| f32::from_bits(numbers.next()))
            .collect();
        let mut got = alloc::vec![0i32; n];
        if !txl_core::kernels::exponents_strided_i32(&mut got, &words, stride, add) {
            return Ok(None);
        }
        let want: Vec<i32> = (0..n)
            .map(|k| (words[k * stride].to_bits() as i32).wrapping_add(add))
            .collect();
        if got != want {
            return Err(Failure::KernelMismatch("attention_gathers"));
        }
        let row = 1 + (numbers.next() % 40) as usize;
        let distance = n - 1 + (numbers.next() % 20) as usize;
        let positions: Vec<i32> = (0..=distance + (numbers.next() % 3) as usize)
            .map(|_| numbers.value())
            .collect();
        let exponents: Vec<u8> = (0..distance * row + 1).map(|_| numbers.next() as u8).collect();
        let pe = (numbers.next() % 64) as i32 - 32;
        let (mut poss, mut pes) = (alloc::vec![0i32; n], alloc::vec![0i32; n]);
        if !txl_core::kernels::positions_i32(
            (&mut poss, &mut pes),
            (&positions, &exponents, row),
            distance,
            pe,
        ) {
            return Err(Failure::KernelMismatch("attention_gathers"));
        }
        for k in 0..n {
            let d = distance - k;
            if poss[k] != positions[d] || pes[k] != pe + exponents[d * row] as i32 {
                return Err(Failure::KernelMismatch("attention_gathers"));
            }
        }
        checked += 2 * n;
    }
    Ok(Some(checked))
}

/// The kernels' `top_exponent` (Helium's, the DSP extension's) against a scalar loop: the largest value exponent
/// (at least 0) among the keys of `e_j ≥ 2^14` with a probability (`Normalise::apply` of sums
/// from `2^30` to `2^45`), for `e_j` of every magnitude up to `2^30` and exponents of 0 to 23
/// (now and then negative or 32 and more). `None` where the board has no kernel.
fn check_top_exponent() -> Result<Option<usize>, Failure> {
    use txl_core::integer::Normalise;
    let mut numbers = Numbers(0x70be_c0de);
    let mut checked = 0;
    for round in 0..64u32 {
        let sum = (1u64 << 30) + ((numbers.next() as u64) << (round % 16));
        let normalise = Normalise::of_sum(sum);
        let n = 1 + (numbers.next() % 90) as usize;
        let e: Vec<i32> = (0..n)
            .map(|_| match numbers.next() % 8 {
                0 => 1 << 30,
                1 => (numbers.next() % (1 << 14)) as i32,
                _ => (numbers.next() >> (2 + numbers.next() % 30)) as i32,
            })
            .collect();
        let ve: Vec<i32> = (0..n)
            .map(|_| match numbers.next() % 32 {
                0 => -3,
                1 => 40,
                _ => (numbers.next() % 24) as i32,
            })
            .collect();
        let has = |e: u32| normalise.apply(e as i32) > 0;
        let Some(got) = txl_core::kernels::top_exponent_i32(&e, &ve, has) else {
            return Ok(None);
        };
        let want = e
            .iter()
            .zip(&ve)
            .filter(|&(&e, _)| e >= 1 << 14 && normalise.apply(e) > 0)
            .map(|(_, &ve)| ve)
            .max()
            .unwrap_or(0)
            .max(0);
        if got != want {
            return Err(Failure::KernelMismatch("top_exponent"));
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The kernels' `shift_sums` (Helium's, the DSP extension's) against the attention output's scalar shifts: rounded
/// right by 0 to 31 (`round_shift_i32`), left by 1 to 31 saturated, of values of every bit
/// length. `None` where the board has no kernel.
fn check_shift_sums() -> Result<Option<usize>, Failure> {
    use txl_core::fixed_point::round_shift_i32;
    let mut numbers = Numbers(0x5b1f_7500);
    let mut checked = 0;
    for amount in -31..=31i32 {
        let n = 1 + (numbers.next() % 40) as usize;
        let sums: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let mut got = alloc::vec![0i32; n];
        if !txl_core::kernels::shift_sums_i32(&sums, &mut got, amount) {
            return Ok(None);
        }
        for (&sum, &got) in sums.iter().zip(&got) {
            let want = if amount <= 0 {
                round_shift_i32(sum, amount.unsigned_abs())
            } else {
                let y = sum << amount;
                if y >> amount == sum {
                    y
                } else if sum < 0 {
                    i32::MIN
                } else {
                    i32::MAX
                }
            };
            if got != want {
                return Err(Failure::KernelMismatch("shift_sums"));
            }
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The kernels' `exp_scores` (Helium's, the DSP extension's) against
/// `exp_neg(to_exp_input(largest, v, frac))` value by value and their sum, for fractions of 0
/// to 24 bits, scores at, near and far below the largest (the saturated distance too) and a
/// few above it. `None` where the board has no kernel.
fn check_exp_scores() -> Result<Option<usize>, Failure> {
    use txl_core::fixed_point::exp_neg;
    use txl_core::integer::to_exp_input;
    let mut numbers = Numbers(0x0e4b_5c0e);
    let mut checked = 0;
    for round in 0..75u32 {
        let frac = round % 25;
        let n = 1 + (numbers.next() % 100) as usize;
        let largest = numbers.value();
        let scores: Vec<i32> = (0..n)
            .map(|_| match numbers.next() % 16 {
                0 => largest,
                1 => largest.wrapping_add(1 + (numbers.next() % 5) as i32),
                2 => i32::MIN,
                _ => largest.saturating_sub((numbers.next() >> (numbers.next() % 32)) as i32),
            })
            .collect();
        let mut got = scores.clone();
        let table = &txl_core::fixed_point::EXP2_TABLE;
        let Some(sum) = txl_core::kernels::exp_scores_i32(&mut got, largest, frac, table) else {
            return Ok(None);
        };
        let want: Vec<i32> = scores
            .iter()
            .map(|&v| exp_neg(to_exp_input(largest, v, frac)) as i32)
            .collect();
        let want_sum: u64 = want.iter().map(|&e| e as u64).sum();
        if got != want || sum != want_sum {
            return Err(Failure::KernelMismatch("exp_scores"));
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// `integer::log_softmax` (the kernels' where the fraction has at most 24 bits) against its
/// scalar steps (the largest value, the sum of `exp_neg(to_exp_input(..))`, `ln` of it less
/// `30 ln 2` in `Q(frac)`, each value less both, clamped), on rows of 1 to 300 values (more
/// than one copy of 64), some far below the largest (saturating the difference), fractions 8
/// to 30.
fn check_log_softmax() -> Result<usize, Failure> {
    use txl_core::fixed_point::{exp_neg, ln, round_shift, LN_2_Q31};
    use txl_core::integer::{log_softmax, to_exp_input};
    let mut numbers = Numbers(0x1095_0f7a);
    let mut checked = 0;
    for round in 0..40u32 {
        let frac = 8 + round % 23;
        let n = 1 + (numbers.next() % 300) as usize;
        let x: Vec<i32> = (0..n)
            .map(|_| match numbers.next() % 32 {
                0 => i32::MIN,
                _ => (numbers.next() as i32) >> (4 + numbers.next() % 20),
            })
            .collect();
        let largest = *x.iter().max().unwrap_or(&0);
        let sum: u64 = x
            .iter()
            .map(|&v| exp_neg(to_exp_input(largest, v, frac)) as u64)
            .sum();
        let ln_sum = round_shift(ln(sum) as i64 - ((30 * LN_2_Q31 as i64) >> 7), 24 - frac as i32);
        let want: Vec<i32> = x
            .iter()
            .map(|&v| (v as i64 - largest as i64 - ln_sum).clamp(i32::MIN as i64, i32::MAX as i64) as i32)
            .collect();
        let mut got = x.clone();
        log_softmax(&mut got, frac);
        if got != want {
            return Err(Failure::KernelMismatch("log_softmax"));
        }
        checked += n;
    }
    Ok(checked)
}

/// The kernels' `scores` (Helium's, the DSP extension's) against
/// `integer::attention_score_of_small` key by key and the largest score, for sums below `2^27`
/// in magnitude, powers of two a few apart (and now and then far apart), fractions 8 to 24 and
/// rescales across the shifts of the fast path and past them. `None` where the board has no
/// kernel.
fn check_attention_scores() -> Result<Option<usize>, Failure> {
    use txl_core::fixed_point::Rescale;
    use txl_core::integer::{attention_score_of_small, SCORE_FRAC};
    let mut numbers = Numbers(0x5c0e_5a77);
    let mut checked = 0;
    for round in 0..80u32 {
        let frac = 8 + round % 17;
        let inv = Rescale {
            mantissa: (1 << 14) + numbers.next() % (1 << 14),
            shift: 10 + (numbers.next() % 40) as i32,
        };
        let n = 1 + (numbers.next() % 64) as usize;
        let small = |numbers: &mut Numbers| (numbers.next() as i32) >> (5 + numbers.next() % 26);
        let base = (numbers.next() % 40) as i32 - 20;
        let exponent = |numbers: &mut Numbers| match numbers.next() % 16 {
            0 => base + 9,
            _ => base + (numbers.next() % 5) as i32,
        };
        let content: Vec<i32> = (0..n).map(|_| small(&mut numbers)).collect();
        let ce: Vec<i32> = (0..n).map(|_| exponent(&mut numbers)).collect();
        let position: Vec<i32> = (0..n).map(|_| small(&mut numbers)).collect();
        let pe: Vec<i32> = (0..n).map(|_| exponent(&mut numbers)).collect();
        let want: Vec<i32> = (0..n)
            .map(|i| attention_score_of_small(inv, frac, (content[i], ce[i]), (position[i], pe[i])))
            .collect();
        let mut got = content.clone();
        let shift = inv.shift - SCORE_FRAC as i32 + 2 * frac as i32;
        let slow = |i: usize, c: i32| attention_score_of_small(inv, frac, (c, ce[i]), (position[i], pe[i]));
        let largest = txl_core::kernels::attention_scores_i32(
            &mut got,
            (&ce, &position, &pe),
            (inv.mantissa, shift),
            slow,
        );
        let Some(largest) = largest else {
            return Ok(None);
        };
        if got != want || largest != *want.iter().max().unwrap_or(&i32::MIN) {
            return Err(Failure::KernelMismatch("attention_scores"));
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The DSP extension's scores of a row's keys where they lie (`attention_scores_row_i32`)
/// against `integer::attention_score_of_small` key by key and the largest score: a ring of key
/// exponents (a word a slot, `heads` apart) entered anywhere, so that most rows wrap around its
/// end, position sums and their exponent bytes (`row` apart; four heads, four bytes, a third of
/// the rows) by distance, the farthest one
/// standing for every distance beyond it (a third of the rows, up to 40 keys), sums below
/// `2^27` in magnitude, powers of two a few apart (and now and then far apart: the slow keys),
/// fractions 8 to 24 and rescales across the shifts of the fast path and past them. `None`
/// where the board has no kernel.
fn check_attention_score_rows() -> Result<Option<usize>, Failure> {
    use txl_core::fixed_point::Rescale;
    use txl_core::integer::{attention_score_of_small, SCORE_FRAC};
    let mut numbers = Numbers(0x2a71_5c0e);
    let mut checked = 0;
    for round in 0..60u32 {
        let frac = 8 + round % 17;
        let inv = Rescale {
            mantissa: (1 << 14) + numbers.next() % (1 << 14),
            shift: 10 + (numbers.next() % 40) as i32,
        };
        let shift = inv.shift - SCORE_FRAC as i32 + 2 * frac as i32;
        let small = |numbers: &mut Numbers| (numbers.next() as i32) >> (5 + numbers.next() % 26);
        let exponent = |numbers: &mut Numbers| match numbers.next() % 16 {
            0 => 9,
            _ => numbers.next() % 5,
        };
        let ce = (numbers.next() % 40) as i32 - 20;
        let pe = ce + (numbers.next() % 5) as i32 - 2;
        // (four heads a third of the rows: their own kernel)
        let (heads, row) = match round % 3 {
            0 => (4, 4),
            _ => (1 + (numbers.next() % 6) as usize, (numbers.next() % 9) as usize),
        };
        let capacity = 1 + (numbers.next() % 70) as usize;
        let ring: Vec<f32> = (0..capacity * heads)
            .map(|_| f32::from_bits(exponent(&mut numbers)))
            .collect();
        let at = (numbers.next() as usize) % ring.len();
        let n = 1 + (numbers.next() as usize) % capacity;
        let nearest = n - 1 + (numbers.next() % 8) as usize;
        let far = match numbers.next() % 3 {
            0 => (numbers.next() as usize) % (nearest + 1),
            _ => nearest + (numbers.next() % 3) as usize,
        };
        let positions: Vec<i32> = (0..=far).map(|_| small(&mut numbers)).collect();
        let exponents: Vec<u8> = (0..far * row + 1).map(|_| exponent(&mut numbers) as u8).collect();
        let content: Vec<i32> = (0..n).map(|_| small(&mut numbers)).collect();
        let score = |k: usize, c: i32| {
            let key = ce + ring[(at + k * heads) % ring.len()].to_bits() as i32;
            let d = (nearest - k).min(far);
            attention_score_of_small(
                inv,
                frac,
                (c, key),
                (positions[d], pe + exponents[d * row] as i32),
            )
        };
        let want: Vec<i32> = (0..n).map(|k| score(k, content[k])).collect();
        let mut got = content.clone();
        let Some(largest) = txl_core::kernels::attention_scores_row_i32(
            &mut got,
            (&ring, heads, at, ce),
            (&positions, &exponents, row, pe),
            nearest,
            (inv.mantissa, shift),
            score,
        ) else {
            return Ok(None);
        };
        if got != want || largest != *want.iter().max().unwrap_or(&i32::MIN) {
            return Err(Failure::KernelMismatch("attention_score_rows"));
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The checks of the glue's kernels, each logged as it passes (none where the board has no
/// kernel).
fn glue_checks() -> Result<(), Failure> {
    if let Some(values) = check_pow2_int8()? {
        info!("bench check kernel=pow2_int8 values={=usize} ok", values);
    }
    if let Some(values) = check_bias_passes()? {
        info!("bench check kernel=bias_passes values={=usize} ok", values);
    }
    if let Some(values) = check_quantize_wide()? {
        info!("bench check kernel=quantize_wide values={=usize} ok", values);
    }
    if let Some(values) = check_add_fixed()? {
        info!("bench check kernel=add_fixed values={=usize} ok", values);
    }
    if let Some(values) = check_embedding_columns()? {
        info!("bench check kernel=embedding_columns values={=usize} ok", values);
    }
    Ok(())
}

/// The kernels' `embedding_columns_i32` (Helium's, the DSP extension's) against `Multiplier::times` of the row's
/// multiplier and the column's (`multiplier_of_f32`) applied to the int8 value, for row
/// multipliers of every shift and columns of every exponent; a row the kernel refuses (some
/// column outside its usual path) must hold one such column. `None` where the board has no
/// kernel.
fn check_embedding_columns() -> Result<Option<usize>, Failure> {
    use txl_core::fixed_point::{multiplier_of_f32, Multiplier};
    let mut numbers = Numbers(0x3b0e_77a1);
    let mut checked = 0;
    let mut refused = 0;
    for round in 0..300u32 {
        let n = 1 + (numbers.next() % 70) as usize;
        let scale = Multiplier {
            mantissa: ((1 << 30) | (numbers.next() & 0x3FFF_FFFF)) as i32,
            shift: (numbers.next() % 63) as u8,
        };
        let act: Vec<f32> = (0..n)
            .map(|_| {
                let r = numbers.next();
                // a usual column: its exponent in `95..=156` and `s` in `9..=47`
                let (low, high) = (
                    (scale.shift as u32).max(38) - 29,
                    (scale.shift as u32 + 32).min(47),
                );
                let usual = 127 + scale.shift as u32 - (low + (r >> 8) % (high + 1 - low));
                let exponent = match (round % 4, r % 64) {
                    // a row of usual columns, or one with a rare column among them
                    (0, 0) => r >> 8 & 0xFF,
                    (0, _) | (1, _) => usual,
                    _ => 60 + (r >> 8) % 130,
                };
                let sign = if round % 4 == 0 && r % 64 == 1 { 1 << 31 } else { 0 };
                f32::from_bits(sign | exponent << 23 | (numbers.next() & 0x7F_FFFF))
            })
            .collect();
        let q: Vec<i8> = (0..n)
            .map(|i| match i % 5 {
                0 => -128,
                1 => 127,
                _ => numbers.next() as i8,
            })
            .collect();
        let want: Vec<i32> = act
            .iter()
            .zip(&q)
            .map(|(&a, &q)| {
                let column = multiplier_of_f32(a).and_then(|m| scale.times(m));
                column.map_or(i32::MIN, |m| m.apply(q as i32))
            })
            .collect();
        let mut got = alloc::vec![0x5555_5555; n + 1];
        let multiplier = (scale.mantissa as u32, scale.shift as u32);
        if txl_core::kernels::embedding_columns_i32(&act, &q, &mut got[..n], multiplier) {
            if got[..n] != want[..] || got[n] != 0x5555_5555 {
                return Err(Failure::KernelMismatch("embedding_columns"));
            }
            checked += n;
        } else if txl_core::kernels::INTEGER_PASSES {
            // a refused row holds a column off the usual path: not every exponent usual and
            // positive, or a shift that may leave `8..=47` (`s` is one less where the mantissas'
            // product reaches `2^61`)
            let usual = act.iter().all(|a| {
                let bits = a.to_bits();
                let e = (bits >> 23) as i32;
                let s = scale.shift as i32 + 127 - e;
                (95..=156).contains(&e) && (9..=47).contains(&s)
            });
            if usual {
                return Err(Failure::KernelMismatch("embedding_columns"));
            }
            refused += 1;
        } else {
            return Ok(None);
        }
    }
    if refused == 0 {
        return Err(Failure::KernelMismatch("embedding_columns"));
    }
    Ok(Some(checked))
}

/// The kernels' `pow2_int8` (Helium's, the DSP extension's) against `integer::pow2_exponent`
/// and `Memory::write_pow2`'s rounding shift, on rows of 1 to 70 values of every bit length
/// (extremes among them), the bytes at every alignment. `None` where the board has no kernel.
fn check_pow2_int8() -> Result<Option<usize>, Failure> {
    use txl_core::integer::{pow2_exponent, pow2_exponent_of};
    let mut numbers = Numbers(0x9047_2e11);
    let mut checked = 0;
    for round in 0..200usize {
        let n = 1 + (numbers.next() % 70) as usize;
        let bits = numbers.next() % 33;
        let x: Vec<i32> = (0..n)
            .map(|_| match bits {
                32 => numbers.value(),
                _ => (numbers.next() as i32) >> (32 - bits.max(1)),
            })
            .collect();
        let e = pow2_exponent(&x, 127);
        let want: Vec<i8> = x
            .iter()
            .map(|&v| match e {
                0 => v as i8,
                _ => (((v >> (e - 1)) + 1) >> 1) as i8,
            })
            .collect();
        let offset = round % 4;
        let mut bytes = alloc::vec![0x55u8 as i8; n + 4];
        let got = &mut bytes[offset..offset + n];
        let Some(got_e) = txl_core::kernels::pow2_int8_i32(&x, got, |m| pow2_exponent_of(m as u64, 127))
        else {
            return Ok(None);
        };
        if got_e != e || got[..] != want[..] || bytes[offset + n] != 0x55 {
            return Err(Failure::KernelMismatch("pow2_int8"));
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The kernels' `bias_relu`, `add_sums` and `add_saturating` (Helium's, the DSP extension's)
/// against the saturating sums and the `max` with 0, on 1 to 70 values of every bit length (extremes among
/// them: the sums saturate). `None` where the board has no kernel.
fn check_bias_passes() -> Result<Option<usize>, Failure> {
    let mut numbers = Numbers(0x0b1a_5ed5);
    let mut checked = 0;
    for _ in 0..100 {
        let n = 1 + (numbers.next() % 70) as usize;
        let v: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let o: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let b: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let mut got = v.clone();
        if !txl_core::kernels::bias_relu_i32(&mut got, &b) {
            return Ok(None);
        }
        let want: Vec<i32> = v
            .iter()
            .zip(&b)
            .map(|(&v, &b)| v.saturating_add(b).max(0))
            .collect();
        if got != want {
            return Err(Failure::KernelMismatch("bias_relu"));
        }
        let mut got = v.clone();
        if !txl_core::kernels::add_sums_i32(&mut got, &o, &b) {
            return Err(Failure::KernelMismatch("add_sums"));
        }
        let want: Vec<i32> = (0..n)
            .map(|i| v[i].saturating_add(o[i].saturating_add(b[i])))
            .collect();
        if got != want {
            return Err(Failure::KernelMismatch("add_sums"));
        }
        let mut got = v.clone();
        let want: Vec<i32> = v.iter().zip(&o).map(|(&v, &o)| v.saturating_add(o)).collect();
        if !txl_core::kernels::add_saturating_i32(&mut got, &o) || got != want {
            return Err(Failure::KernelMismatch("add_saturating"));
        }
        checked += 3 * n;
    }
    Ok(Some(checked))
}

/// The kernels' `quantize_wide_i32` (Helium's, the DSP extension's) against the rounded high
/// word clamped to `±127`, for multipliers up to `2^30` (small, large, at the edges), values of
/// every bit length (extremes among them), the bytes at every alignment; and the DSP
/// extension's `quantize_widen_i32`, the same bytes and the words `widen_input_i8` makes of them.
/// `None` where the board has no kernel.
fn check_quantize_wide() -> Result<Option<usize>, Failure> {
    let mut numbers = Numbers(0x7a1d_e0f1);
    let mut checked = 0;
    for round in 0..200usize {
        let n = 1 + (numbers.next() % 70) as usize;
        let wide = match round % 8 {
            0 => 1 << 30,
            1 => 1 + (numbers.next() % 64) as i32,
            _ => (numbers.next() >> (2 + numbers.next() % 24)) as i32,
        };
        let x: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let want: Vec<i8> = x
            .iter()
            .map(|&v| {
                let product = v as i64 * wide as i64;
                ((product >> 32) as i32 + ((product as u32) >> 31) as i32).clamp(-127, 127) as i8
            })
            .collect();
        let offset = round % 4;
        let mut bytes = alloc::vec![0x55u8 as i8; n + 4];
        let got = &mut bytes[offset..offset + n];
        if !txl_core::kernels::quantize_wide_i32(&x, got, wide) {
            return Ok(None);
        }
        if got[..] != want[..] || bytes[offset + n] != 0x55 {
            return Err(Failure::KernelMismatch("quantize_wide"));
        }
        // and, where a kernel widens them in the same pass, the words `widen_input_i8` makes
        // of them, none written past them
        let words = 2 * (n / 4);
        let mut widened = alloc::vec![0x5555_5555u32; words + 1];
        let mut want_widened = alloc::vec![0u32; words];
        txl_core::kernels::widen_input_i8(&want, &mut want_widened);
        let mut bytes = alloc::vec![0x55u8 as i8; n + 4];
        let got = &mut bytes[offset..offset + n];
        if txl_core::kernels::quantize_widen_i32(&x, got, &mut widened[..words], wide) {
            let widen_differs = widened[..words] != want_widened[..] || widened[words] != 0x5555_5555;
            if got[..] != want[..] || bytes[offset + n] != 0x55 || widen_differs {
                return Err(Failure::KernelMismatch("quantize_widen"));
            }
        }
        checked += n;
    }
    Ok(Some(checked))
}

/// The kernels' `add_fixed_f32` (Helium's, the DSP extension's) against `fixed_of_f32` added saturating, for biases
/// of every exponent (zeros, subnormals, infinities, NaNs and values past `2^31` among them),
/// fractions 0 to 30. `None` where the board has no kernel.
fn check_add_fixed() -> Result<Option<usize>, Failure> {
    use txl_core::fixed_point::fixed_of_f32;
    let mut numbers = Numbers(0x0f1e_d0b5);
    let mut checked = 0;
    for round in 0..200u32 {
        let frac = round % 31;
        let n = 1 + (numbers.next() % 70) as usize;
        let b: Vec<f32> = (0..n)
            .map(|_| {
                let r = numbers.next();
                let sign = r & 0x8000_0000;
                let fraction = numbers.next() & 0x7F_FFFF;
                f32::from_bits(match r % 16 {
                    0 => sign,
                    1 => sign | fraction,
                    2 => sign | (255 << 23) | fraction,
                    3 => sign | (255 << 23),
                    4 => sign | ((150 - frac + (r >> 4) % 12) << 23) | fraction,
                    5 => sign | ((150 - frac - 25 + (r >> 4) % 3) << 23) | fraction,
                    _ => sign | ((100 + (r >> 4) % 40) << 23) | fraction,
                })
            })
            .collect();
        let y: Vec<i32> = (0..n).map(|_| numbers.value()).collect();
        let mut got = y.clone();
        if !txl_core::kernels::add_fixed_f32(&mut got, &b, frac, |bits| {
            fixed_of_f32(f32::from_bits(bits), frac)
        }) {
            return Ok(None);
        }
        let want: Vec<i32> = y
            .iter()
            .zip(&b)
            .map(|(&y, &b)| y.saturating_add(fixed_of_f32(b, frac)))
            .collect();
        if got != want {
            return Err(Failure::KernelMismatch("add_fixed"));
        }
        checked += n;
    }
    Ok(Some(checked))
}
