//! `bench`: instructions per multiply-accumulate of each kernel on fixed shapes, so a kernel's
//! regression shows without a model.
//!
//! The shapes are the demo model's linear layers (d_model 128, d_inner 256, four heads of 32):
//! `W_qkv` (384 × 128), `o_net` (128 × 128), `W_1` (256 × 128), `W_2` (128 × 256). Weights and
//! inputs are pseudo-random (a fixed seed), in RAM. Each line reads
//! `bench kernel=K rows=R cols=C macs=M instructions=N instructions_per_mac=X`; the last line
//! gives each kernel's figure over all four shapes (`shape=all`), one product per shape and
//! position, as one token of the demo model computes them. `int8_matvec_pair` is the int8
//! product for two positions at once, as a segment runs it (its MACs count both positions).
//! `int8_rows` is the integer sums alone, as the integer arithmetic runs them (the input
//! already int8, the sums not scaled). `int4_matvec` is the int4 product (W4A8) with groups of
//! [`INT4_GROUP`] columns, the default of `txl quantize --dtype int4`.
//!
//! Before counting, `bench` checks the attention's integer kernels and the int4 product's
//! against the portable code on odd shapes (`bench check kernel=attention_int8 shapes=N ok`,
//! `bench check kernel=int4 shapes=N ok`), the integer row sums too (`kernel=int8_rows`), the
//! int8 quantization of an input and the scaling of the int8 sums bit for bit
//! (`kernel=quantize_i8`, `kernel=scale_sums_i8`), the f16 widening of the vectors on every
//! f16 (`bench check kernel=widen_f16 values=N ok`), and the attention's f32 products
//! (`kernel=attention_f32`), LayerNorm's sums and last step (`kernel=layer_norm`) and the
//! softmax's exponentials and their sum (`kernel=softmax_exps`), and `y += x` and ReLU
//! (`kernel=add_relu`); a mismatch fails the run.
//!
//! Then one head's attention over [`KEYS`] cached keys of the demo model (d_head 32, keys at a
//! stride of 128): the query · key products and the probability · value sum, `2 × 64 × 32`
//! MACs, with f32 memory (`attention_f32`) and with int8 memory (`attention_int8`: in integers,
//! the query and the probabilities quantized to 16 bits, scales included), each line
//! `bench kernel=K shape=head keys=64 d_head=32 macs=M instructions=N instructions_per_mac=X`.

use alloc::vec;
use alloc::vec::Vec;

use defmt::info;
use half::f16;
use txl_core::weights::{int4_groups, int4_pack_row, int4_row_bytes, Matrix, MatrixData};
use txl_core::{int8_attention, kernels, matrix};

use crate::counter::InstructionCounter;
use crate::Failure;

/// `(rows, cols)` of the demo model's linear layers.
const SHAPES: [(usize, usize); 4] = [(384, 128), (128, 128), (256, 128), (128, 256)];

/// Columns per group of the int4 product's multipliers.
const INT4_GROUP: usize = 32;

/// Times each product runs, for a steadier count.
const REPEATS: u64 = 4;

/// The kernels measured.
#[derive(Clone, Copy)]
enum Kernel {
    Int8,
    Int8Rows,
    Int8Pair,
    Int4,
    F16,
    F32,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Int8 => "int8_matvec",
            Kernel::Int8Rows => "int8_rows",
            Kernel::Int8Pair => "int8_matvec_pair",
            Kernel::Int4 => "int4_matvec",
            Kernel::F16 => "f16_matvec",
            Kernel::F32 => "f32_matvec",
        }
    }
}

/// Heap `bench` takes at most, with room for the allocator: the f16 check's 65 536 halves and
/// their f32 widening (393 212 bytes), more than the largest shape's weights in f32, f16, int8
/// and int4 with its vectors (about 377 000). A board with less (the `stm32f405`, whose 128 KiB
/// the arena mostly takes) refuses `bench`.
const HEAP_BYTES: usize = 400 << 10;

/// A small xorshift generator: the same weights on every run and board (and the integer
/// checks' values, `bench_integer`).
pub(crate) struct Numbers(pub(crate) u32);

impl Numbers {
    pub(crate) fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }

    /// Uniform in `[-1, 1)`.
    fn float(&mut self) -> f32 {
        (self.next() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
}

/// Runs every kernel on every shape and prints the counts, after checking the attention's
/// integer kernels against the portable code.
pub fn run(counter: &InstructionCounter) -> Result<(), Failure> {
    let free = crate::heap_free();
    if free < HEAP_BYTES {
        return Err(Failure::BenchHeapTooSmall {
            needed: HEAP_BYTES,
            free,
        });
    }
    let shapes = check_int8_attention()?;
    info!("bench check kernel=attention_int8 shapes={=usize} ok", shapes);
    let shapes = check_int4()?;
    info!("bench check kernel=int4 shapes={=usize} ok", shapes);
    let shapes = check_int8_rows()?;
    info!("bench check kernel=int8_rows shapes={=usize} ok", shapes);
    let inputs = check_quantize_i8()?;
    info!("bench check kernel=quantize_i8 inputs={=usize} ok", inputs);
    let outputs = check_scale_sums_i8()?;
    info!("bench check kernel=scale_sums_i8 outputs={=usize} ok", outputs);
    let values = check_widen_f16()?;
    info!("bench check kernel=widen_f16 values={=usize} ok", values);
    let shapes = check_attention_f32()?;
    info!("bench check kernel=attention_f32 shapes={=usize} ok", shapes);
    let shapes = check_layer_norm()?;
    info!("bench check kernel=layer_norm shapes={=usize} ok", shapes);
    let values = check_softmax_exps()?;
    info!("bench check kernel=softmax_exps values={=usize} ok", values);
    let values = check_add_relu()?;
    info!("bench check kernel=add_relu values={=usize} ok", values);
    for kernel in [
        Kernel::Int8,
        Kernel::Int8Rows,
        Kernel::Int8Pair,
        Kernel::Int4,
        Kernel::F16,
        Kernel::F32,
    ] {
        let (mut all_macs, mut all_instructions) = (0u64, 0u64);
        for (rows, cols) in SHAPES {
            let instructions = measure(kernel, rows, cols, counter);
            let positions = if matches!(kernel, Kernel::Int8Pair) { 2 } else { 1 };
            let macs = (positions * rows * cols) as u64;
            report(kernel.name(), "", rows, cols, macs, instructions);
            all_macs += macs;
            all_instructions += instructions;
        }
        report(kernel.name(), "all", 0, 0, all_macs, all_instructions);
    }
    for memory in [AttentionMemory::F32, AttentionMemory::Int8] {
        let instructions = measure_attention(memory, counter);
        let macs = (2 * KEYS * D_HEAD) as u64;
        info!(
            "bench kernel={=str} shape=head keys={=usize} d_head={=usize} macs={=u64} instructions={=u64} instructions_per_mac={=f32}",
            memory.name(),
            KEYS,
            D_HEAD,
            macs,
            instructions,
            instructions as f32 / macs as f32
        );
    }
    crate::stack::report();
    crate::bench_integer::run()?;
    Ok(())
}

/// The attention's integer kernels (as this board runs them) against the portable sums, on
/// shapes the demo model does not have: heads of 1 to 13 columns (partial groups of four and
/// eight), 16, 32 and 48 (whole groups of eight and sixteen), 33 and 80 (the query unpacked in
/// two parts), odd and even key counts (partial blocks of four keys), keys at an odd stride
/// (unaligned rows); then the key and value sums at strides of 128 and 256 bytes. Returns the
/// number of shapes checked.
fn check_int8_attention() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x0bad_5eed);
    let mut shapes = 0;
    for d_head in (1..=13).chain([16, 32, 33, 48, 80]) {
        for count in [1usize, 2, 3, 4, 7, 8, 9, 17] {
            let stride = 2 * d_head + 3;
            let keys: Vec<i8> = (0..(count - 1) * stride + d_head)
                .map(|_| (numbers.next() % 255) as i32 as i8 - 127)
                .collect();
            let query: Vec<f32> = (0..d_head).map(|_| numbers.float()).collect();
            let mut words = vec![0u32; int8_attention::query_words(d_head)];
            let q = int8_attention::QueryWords::quantize(&query, &mut words)
                .ok_or(Failure::KernelMismatch("the query quantization"))?;
            check_query_halves(&query, &mut numbers)?;
            let (mut fast, mut portable) = (vec![0i32; count], vec![0i32; count]);
            kernels::key_sums_i8(&keys, stride, d_head, q.words, &mut fast);
            kernels::portable::key_sums_i8(&keys, stride, d_head, q.words, &mut portable);
            if fast != portable {
                return Err(Failure::KernelMismatch("key_sums"));
            }
            let weights: Vec<i32> = (0..count)
                .map(|_| (numbers.next() % 65535) as i32 - 32767)
                .collect();
            let (mut fast, mut portable) = (vec![7i32; d_head], vec![7i32; d_head]);
            kernels::value_sums_i8(&keys, stride, &weights, &mut fast);
            kernels::portable::value_sums_i8(&keys, stride, &weights, &mut portable);
            if fast != portable {
                return Err(Failure::KernelMismatch("value_sums"));
            }
            check_key_scores(count, &mut numbers)?;
            check_round_weights(count, &mut numbers)?;
            check_value_weights(count, &mut numbers)?;
            check_scaled_sums(d_head, &mut numbers)?;
            shapes += 1;
        }
    }
    // key and value rows as the memory lays them out, 128 and 256 bytes apart from a word-
    // aligned start (kernels of their own on the DSP), for heads of whole and partial groups of
    // eight columns
    for stride in [128usize, 256] {
        for d_head in [4usize, 8, 12, 32, 44] {
            for count in [1usize, 2, 3, 5, 6, 7, 63, 64, 65] {
                let storage: Vec<i8> = (0..(count - 1) * stride + d_head + 3)
                    .map(|_| (numbers.next() % 256) as u8 as i8)
                    .collect();
                let at = storage.as_ptr().align_offset(4);
                let values = &storage[at..at + (count - 1) * stride + d_head];
                let query: Vec<f32> = (0..d_head).map(|_| numbers.float()).collect();
                let mut words = vec![0u32; int8_attention::query_words(d_head)];
                let q = int8_attention::QueryWords::quantize(&query, &mut words)
                    .ok_or(Failure::KernelMismatch("the query quantization"))?;
                let (mut fast, mut portable) = (vec![3i32; count], vec![3i32; count]);
                kernels::key_sums_i8(values, stride, d_head, q.words, &mut fast);
                kernels::portable::key_sums_i8(values, stride, d_head, q.words, &mut portable);
                if fast != portable {
                    return Err(Failure::KernelMismatch("key_sums"));
                }
                let weights: Vec<i32> = (0..count)
                    .map(|_| (numbers.next() % 65535) as i32 - 32767)
                    .collect();
                let (mut fast, mut portable) = (vec![-5i32; d_head], vec![-5i32; d_head]);
                kernels::value_sums_i8(values, stride, &weights, &mut fast);
                kernels::portable::value_sums_i8(values, stride, &weights, &mut portable);
                if fast != portable {
                    return Err(Failure::KernelMismatch("value_sums"));
                }
                // into zeros, whatever the sums held
                let (mut fast, mut portable) = (vec![-5i32; d_head], vec![0i32; d_head]);
                kernels::value_sums_from_zero_i8(values, stride, &weights, &mut fast);
                kernels::portable::value_sums_i8(values, stride, &weights, &mut portable);
                if fast != portable {
                    return Err(Failure::KernelMismatch("value_sums"));
                }
                shapes += 1;
            }
        }
    }
    Ok(shapes)
}

/// `kernels::query_halves` (where it runs) against the FPU's rounding of each `query[c] *
/// inverse` (halves away from zero, clamped to ±32767) at a few inverses, with some columns
/// made subnormal, exact halves, the float just below a half, or large enough to clamp; and
/// `kernels::magnitude_bits` against the largest of the magnitudes' bits, with and without a
/// NaN.
fn check_query_halves(query: &[f32], numbers: &mut Numbers) -> Result<(), Failure> {
    let mut query = query.to_vec();
    for v in query.iter_mut() {
        match numbers.next() % 8 {
            0 => *v = f32::from_bits(numbers.next() & 0x807f_ffff), // subnormal or zero
            1 => *v = (numbers.next() % 64) as f32 * 0.5 - 16.0,    // halves at an inverse of 1
            2 => *v *= 1.0e5,                                       // clamped
            3 => *v = f32::from_bits(0x3eff_ffff | (numbers.next() & 0x8000_0000)), // ±(0.5 - 2^-25)
            _ => {}
        }
    }
    for nan_at in [None, Some(query.len() - 1), Some(0)] {
        let mut values = query.clone();
        if let Some(c) = nan_at {
            values[c] = f32::from_bits(0xffc0_0001);
        }
        let largest = values
            .iter()
            .map(|v| v.to_bits() & 0x7fff_ffff)
            .max()
            .unwrap_or(0);
        if kernels::magnitude_bits(&values) != largest {
            return Err(Failure::KernelMismatch("magnitude_bits"));
        }
    }
    let words = int8_attention::query_words(query.len());
    for inverse in [0.0f32, 1.0, 1.5, 32767.0, 3.0e7, 9.0e29] {
        let mut fast = vec![0x5a5a_5a5au32; words];
        if !kernels::query_halves(&query, &mut fast, inverse) {
            continue;
        }
        for (c, &v) in query.iter().enumerate() {
            let y = v * inverse;
            let expected = ((y + 0.5f32.copysign(y)) as i32).clamp(-32767, 32767);
            let word = fast[c / 4 * 2 + c % 2];
            let got = (word >> (16 * (c % 4 / 2))) as u16 as i16 as i32;
            if got != expected {
                return Err(Failure::KernelMismatch("query_halves"));
            }
        }
    }
    Ok(())
}

/// `kernels::key_scores_i8` against the portable scores of `count` keys, over 1 and 3 heads,
/// with one term for all and one per key, and a NaN term or subnormal products now and then
/// (where the kernel refuses them, nothing to compare).
fn check_key_scores(count: usize, numbers: &mut Numbers) -> Result<(), Failure> {
    for heads in [1usize, 3] {
        for constant in [true, false] {
            let sums: Vec<f32> = (0..count)
                .map(|_| f32::from_bits((numbers.next() >> 10).wrapping_sub(1 << 21)))
                .collect();
            let tiny = numbers.next().is_multiple_of(4);
            let key_scales: Vec<f32> = (0..(count - 1) * heads + 1)
                .map(|_| (numbers.float() + 1.5) * if tiny { 1.0e-40 } else { 0.01 })
                .collect();
            let mut terms: Vec<f32> = (0..if constant { 1 } else { count })
                .map(|_| numbers.float())
                .collect();
            if numbers.next().is_multiple_of(8) {
                terms[0] = f32::NAN;
            }
            let steps = (numbers.float().abs() * 1.0e-4, 0.17);
            let start = numbers.float();
            let (mut fast, mut portable) = (sums.clone(), sums.clone());
            let largest = kernels::key_scores_i8(&mut fast, &key_scales, heads, &terms, steps, start);
            let expected =
                kernels::portable::key_scores_i8(&mut portable, &key_scales, heads, &terms, steps, start);
            let Some(largest) = largest else {
                continue;
            };
            let same = fast
                .iter()
                .zip(&portable)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            if !same || largest != expected {
                return Err(Failure::KernelMismatch("key_scores"));
            }
        }
    }
    Ok(())
}

/// `kernels::value_weights` against the portable weights and magnitudes of `count` keys, over 1
/// and 3 heads, from a running largest and sum, with a subnormal exponential now and then
/// (where the kernel refuses it, nothing to compare).
fn check_value_weights(count: usize, numbers: &mut Numbers) -> Result<(), Failure> {
    for heads in [1usize, 3] {
        let e: Vec<f32> = (0..count)
            .map(|_| match numbers.next() % 16 {
                0 => f32::from_bits(numbers.next() & 0x007f_ffff), // subnormal or zero
                _ => numbers.float().abs(),
            })
            .collect();
        let key_scales: Vec<f32> = (0..(count - 1) * heads + 1)
            .map(|_| (numbers.float() + 1.5) * 0.01)
            .collect();
        let inverse = 1.0 / (numbers.float().abs() * count as f32 + 1.0);
        let start = kernels::Magnitudes {
            max: numbers.float().abs() * 1.0e-3,
            sum: numbers.float().abs(),
        };
        let (mut fast, mut portable) = (vec![0.0f32; count], vec![0.0f32; count]);
        let (mut fast_magnitudes, mut portable_magnitudes) = (start, start);
        let scales = (&key_scales[..], heads);
        if !kernels::value_weights(&e, inverse, scales, &mut fast, &mut fast_magnitudes) {
            continue;
        }
        kernels::portable::value_weights(&e, inverse, scales, &mut portable, &mut portable_magnitudes);
        let same = fast
            .iter()
            .zip(&portable)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        let (a, b) = (fast_magnitudes, portable_magnitudes);
        if !same || a.max.to_bits() != b.max.to_bits() || a.sum.to_bits() != b.sum.to_bits() {
            return Err(Failure::KernelMismatch("value_weights"));
        }
    }
    Ok(())
}

/// `kernels::scaled_sums_i32` against the portable scaling of `n` sums at a few steps, the
/// smallest making subnormal products (which the kernel leaves to the portable code).
fn check_scaled_sums(n: usize, numbers: &mut Numbers) -> Result<(), Failure> {
    let sums: Vec<i32> = (0..n)
        .map(|_| match numbers.next() % 8 {
            0 => 0,
            _ => (numbers.next() >> 4) as i32 - (1 << 27),
        })
        .collect();
    for step in [1.0f32, 3.1e-7, 1.0e-40, -2.5e-3] {
        let (mut fast, mut portable) = (vec![7.0f32; n], vec![7.0f32; n]);
        kernels::scaled_sums_i32(&sums, step, &mut fast);
        kernels::portable::scaled_sums_i32(&sums, step, &mut portable);
        if fast
            .iter()
            .zip(&portable)
            .any(|(a, b)| a.to_bits() != b.to_bits())
        {
            return Err(Failure::KernelMismatch("scaled_sums"));
        }
    }
    Ok(())
}

/// `kernels::round_weights` (where it runs) against the FPU's rounding of each `w[t] * inverse`
/// (halves away from zero, clamped to ±32767) at a few inverses, with some weights subnormal,
/// exact halves, or large enough to clamp.
fn check_round_weights(count: usize, numbers: &mut Numbers) -> Result<(), Failure> {
    let w: Vec<f32> = (0..count)
        .map(|_| match numbers.next() % 8 {
            0 => f32::from_bits(numbers.next() & 0x807f_ffff), // subnormal or zero
            1 => (numbers.next() % 64) as f32 * 0.5 - 16.0,    // halves at an inverse of 1
            2 => numbers.float() * 1.0e5,                      // clamped
            _ => numbers.float(),
        })
        .collect();
    for inverse in [0.0f32, 1.0, 1.5, 32767.0, 3.0e7, 9.0e29] {
        let mut fast: Vec<i32> = w.iter().map(|v| v.to_bits() as i32).collect();
        let done = kernels::round_weights(&mut fast, inverse);
        for (&got, &v) in fast[..done].iter().zip(&w) {
            let y = v * inverse;
            let expected = ((y + 0.5f32.copysign(y)) as i32).clamp(-32767, 32767);
            if got != expected {
                return Err(Failure::KernelMismatch("round_weights"));
            }
        }
    }
    Ok(())
}

/// An int4 matrix of `rows x cols` with pseudo-random values in `-8..=7` (`-8` included, which
/// the quantizer never writes but the format allows) and codes in `0..=255`, packed: the values
/// and the codes.
fn int4_matrix(numbers: &mut Numbers, rows: usize, cols: usize, group: usize) -> (Vec<u8>, Vec<u8>) {
    let row_bytes = int4_row_bytes(cols);
    let mut packed = vec![0u8; rows * row_bytes];
    let mut row = vec![0i8; cols];
    for out in packed.chunks_exact_mut(row_bytes) {
        for v in row.iter_mut() {
            *v = (numbers.next() % 16) as i8 - 8;
        }
        int4_pack_row(&row, out);
    }
    let codes = (0..rows * int4_groups(cols, group))
        .map(|_| (numbers.next() >> 24) as u8)
        .collect();
    (packed, codes)
}

/// The integer row sums (as this board runs them: `kernels::row_sums_i8`, and
/// `kernels::row_sums_pair_i8` for two inputs) against the portable ones, on word-aligned rows of 0 to 512 columns (partial passes of sixteen, eight and four;
/// strides of 128 and 256 bytes) and row counts off the kernels' blocks, inputs down to `-127` against weights down to `-128`. Returns the
/// number of shapes checked.
fn check_int8_rows() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x5eed_1e55);
    let mut shapes = 0;
    for cols in [0usize, 1, 7, 8, 9, 15, 16, 17, 33, 128, 131, 256, 512] {
        for rows in [1usize, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33] {
            // word-aligned rows (the kernels for strides of 128 and 256 bytes take only those)
            let storage: Vec<i8> = (0..rows * cols + 3)
                .map(|_| (numbers.next() >> 24) as u8 as i8)
                .collect();
            let at = storage.as_ptr().align_offset(4);
            let values = &storage[at..at + rows * cols];
            // the extremes too: -128 weights times -127 inputs
            let xq: Vec<i8> = (0..cols)
                .map(|c| match c % 5 {
                    0 => -127,
                    _ => ((numbers.next() >> 24) as u8 as i8).max(-127),
                })
                .collect();
            let mut widened = vec![0u32; matrix::scratch_words(cols)];
            kernels::widen_input_i8(&xq, &mut widened);
            let (mut fast, mut portable) = (vec![7i32; rows], vec![-7i32; rows]);
            kernels::row_sums_i8(values, cols, &xq, &widened, &mut fast);
            kernels::portable::row_sums_i8(values, cols, &xq, &mut portable);
            shapes += 1;
            if fast != portable {
                return Err(Failure::KernelMismatch("int8_row_sums"));
            }
            // two inputs at once (a segment's pairs of positions): the second the first reversed
            let xq_b: Vec<i8> = xq.iter().rev().copied().collect();
            let mut widened_b = vec![0u32; matrix::scratch_words(cols)];
            kernels::widen_input_i8(&xq_b, &mut widened_b);
            let (mut fast_a, mut fast_b) = (vec![7i32; rows], vec![7i32; rows]);
            kernels::row_sums_pair_i8(
                values,
                cols,
                [&xq, &xq_b],
                [&widened, &widened_b],
                [&mut fast_a, &mut fast_b],
            );
            let mut portable_b = vec![-7i32; rows];
            kernels::portable::row_sums_i8(values, cols, &xq_b, &mut portable_b);
            if fast_a != portable || fast_b != portable_b {
                return Err(Failure::KernelMismatch("int8_row_sums_pair"));
            }
        }
    }
    Ok(shapes)
}

/// The int8 quantization of an input (as this board runs it: `kernels::quantize_i8`, and
/// `kernels::quantize_widen_i8` with its widened words) against the portable one, scale and
/// bytes (and those bytes widened by `kernels::widen_input_i8`), on 1 to 17, 128 and 131
/// values: pseudo-random inputs, exact ties (a range of 127, so `k + 0.5` quantizes to `k + 0.5` before rounding), NaNs,
/// subnormals, ranges at and below the smallest the fast kernels take, and no range at all.
/// Returns the inputs checked.
fn check_quantize_i8() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x0dd5_ca1e);
    let mut inputs = 0;
    for n in (1usize..=17).chain([128, 131]) {
        for kind in 0..8 {
            let x: Vec<f32> = (0..n)
                .map(|i| match kind {
                    0 => numbers.float() * 3.0,
                    // ties: 127 the range, every other value k + 0.5
                    1 if i == 0 => -127.0,
                    1 => ((numbers.next() % 254) as f32 - 127.0) + if i % 2 == 0 { 0.5 } else { 0.0 },
                    2 if i % 3 == 1 => f32::NAN,
                    2 => numbers.float(),
                    // subnormals beside a normal range of 2^-100 and of 2^-110
                    3 | 4 if i == n / 2 => [7.888_609e-31, 7.70372e-34][kind - 3] * numbers.float().signum(),
                    3 | 4 => f32::from_bits(numbers.next() >> 9) * numbers.float().signum(),
                    // subnormals alone
                    5 => f32::from_bits(numbers.next() >> 9),
                    6 => 0.0,
                    _ => numbers.float() * 1e-20,
                })
                .collect();
            let (mut fast, mut portable) = (vec![7i8; n], vec![-7i8; n]);
            let fast_scale = kernels::quantize_i8(&x, None, &mut fast);
            let portable_scale = kernels::portable::quantize_i8(&x, None, &mut portable);
            inputs += 1;
            if fast != portable || fast_scale.to_bits() != portable_scale.to_bits() {
                return Err(Failure::KernelMismatch("quantize_i8"));
            }
            // quantized and widened in one pass, against the portable bytes widened
            let (mut fused, mut words, mut want) =
                (vec![5i8; n], vec![1u32; n / 2 + 2], vec![1u32; n / 2 + 2]);
            let fused_scale = kernels::quantize_widen_i8(&x, None, None, &mut fused, &mut words);
            kernels::widen_input_i8(&portable, &mut want);
            if fused != portable || fused_scale.to_bits() != portable_scale.to_bits() || words != want {
                return Err(Failure::KernelMismatch("quantize_widen_i8"));
            }
            // given the largest magnitude's bits, as a ReLU finds them
            let magnitude = kernels::portable::magnitude_bits(&x);
            let given_scale = kernels::quantize_widen_i8(&x, None, Some(magnitude), &mut fused, &mut words);
            if fused != portable || given_scale.to_bits() != portable_scale.to_bits() || words != want {
                return Err(Failure::KernelMismatch("quantize_widen_i8"));
            }
        }
    }
    Ok(inputs)
}

/// The int8 product's scaling of its sums (as this board runs it: `kernels::scale_sums_i8`,
/// and `kernels::scale_sums_bias_i8` and `kernels::scale_sums_add_i8` with biases and a
/// residual added) against the portable one, bit for bit, on 1 to 9, 13 and 131 rows: sums up to `±2^31`, scales
/// of the usual size, and lists with a zero, subnormal, infinite or NaN scale, and input scales
/// whose products with the row scales are subnormal. Returns the lists checked.
fn check_scale_sums_i8() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x5ca1_ab1e);
    let mut lists = 0;
    for n in (1usize..=9).chain([13, 131]) {
        for kind in 0..6 {
            let sums: Vec<f32> = (0..n).map(|_| f32::from_bits(numbers.next())).collect();
            let mut scales: Vec<f32> = (0..n).map(|_| numbers.float().abs() * 1e-2 + 1e-4).collect();
            let odd = [0.0, 1e-40, f32::INFINITY, f32::NAN];
            if (1..5).contains(&kind) {
                scales[n / 2] = odd[kind - 1];
            }
            let x_scale = if kind == 5 {
                1e-36
            } else {
                numbers.float().abs() * 0.1 + 1e-3
            };
            let (mut fast, mut portable) = (sums.clone(), sums.clone());
            kernels::scale_sums_i8(&mut fast, &scales, x_scale);
            kernels::portable::scale_sums_i8(&mut portable, &scales, x_scale);
            lists += 1;
            let differ = |a: &[f32], b: &[f32]| a.iter().zip(b).any(|(a, b)| a.to_bits() != b.to_bits());
            if differ(&fast, &portable) {
                return Err(Failure::KernelMismatch("scale_sums_i8"));
            }
            // with biases added in the same pass, and added to a residual: against the
            // portable scaling, then additions
            let bias: Vec<f32> = (0..n).map(|_| numbers.float()).collect();
            let residual: Vec<f32> = (0..n).map(|_| numbers.float() * 4.0).collect();
            let mut with_bias = portable.clone();
            kernels::portable::add_assign(&mut with_bias, &bias);
            let mut fast = sums.clone();
            kernels::scale_sums_bias_i8(&mut fast, &scales, x_scale, &bias);
            if differ(&fast, &with_bias) {
                return Err(Failure::KernelMismatch("scale_sums_i8"));
            }
            for (bias, scaled) in [(None, &portable), (Some(&bias[..]), &with_bias)] {
                let (mut fast, mut sums) = (residual.clone(), sums.clone());
                kernels::scale_sums_add_i8(&mut sums, &scales, x_scale, bias, &mut fast);
                let mut want = residual.clone();
                kernels::portable::add_assign(&mut want, scaled);
                if differ(&fast, &want) {
                    return Err(Failure::KernelMismatch("scale_sums_i8"));
                }
            }
        }
    }
    Ok(lists)
}

/// The int4 product's sums (as this board runs them: `kernels::row_sums_i4`) against the
/// portable ones, on shapes with odd rows, columns that end in a partial block or group, groups
/// of 8 to 128 columns, inputs at both ends of the int8 range and in between; then the extreme
/// sums (every weight `-8`, every input `-128`) in groups of 128 and 256 columns. Returns the
/// number of shapes checked.
fn check_int4() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x1234_4321);
    let mut shapes = 0;
    let mut check = |values: &[u8], group: usize, codes: &[u8], xq: &[i8], rows: usize| {
        let mut widened = vec![0u32; matrix::scratch_words(xq.len())];
        kernels::widen_input_i8(xq, &mut widened);
        let (mut fast, mut portable) = (vec![7i64; rows], vec![-7i64; rows]);
        kernels::row_sums_i4(values, group, codes, xq, &widened, &mut fast);
        kernels::portable::row_sums_i4(values, group, codes, xq, &mut portable);
        shapes += 1;
        if fast == portable {
            Ok(())
        } else {
            Err(Failure::KernelMismatch("int4_row_sums"))
        }
    };
    for group in [8usize, 16, 32, 64, 128] {
        for cols in [1usize, 7, 8, 9, 15, 24, 31, 33, 63, 64, 100, 129, 136, 257] {
            for rows in [1usize, 2, 3, 5, 8] {
                let (values, codes) = int4_matrix(&mut numbers, rows, cols, group);
                let inputs = numbers.next() % 4;
                let xq: Vec<i8> = (0..cols)
                    .map(|_| match inputs {
                        0 => -128,
                        1 => 127,
                        _ => (numbers.next() >> 24) as u8 as i8,
                    })
                    .collect();
                check(&values, group, &codes, &xq, rows)?;
            }
        }
    }
    for group in [128usize, 256] {
        let (cols, rows) = (2 * group + 8, 3);
        let row_bytes = int4_row_bytes(cols);
        let mut values = vec![0u8; rows * row_bytes];
        let weights = vec![-8i8; cols];
        for out in values.chunks_exact_mut(row_bytes) {
            int4_pack_row(&weights, out);
        }
        let codes = vec![0xffu8; rows * int4_groups(cols, group)];
        check(&values, group, &codes, &vec![-128i8; cols], rows)?;
    }
    Ok(shapes)
}

/// The f16 widening of the image's vectors (as this board runs it: `VCVTB`/`VCVTT` on the
/// Arm boards with an FPU) against the portable conversion, for every one of the 65,536 f16
/// bit patterns from a 4-byte aligned start, and again from the second (an unaligned start,
/// whose first element the kernel leaves to the portable code, and an odd count). NaNs must
/// stay NaNs (`VCVT` quiets a signalling one); every other value must keep its bits. Returns
/// the values checked.
fn check_widen_f16() -> Result<usize, Failure> {
    let halves: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    let mut checked = 0;
    for start in [0usize, 1] {
        let src = &halves[start..];
        let mut wide = vec![0.0f32; src.len()];
        kernels::widen_f16(src, &mut wide);
        for (&half, &got) in src.iter().zip(&wide) {
            let expected = kernels::portable::f16_to_f32(half);
            let same = got.to_bits() == expected.to_bits() || (got.is_nan() && expected.is_nan());
            if !same {
                return Err(Failure::KernelMismatch("widen_f16"));
            }
        }
        checked += src.len();
    }
    Ok(checked)
}

/// The attention's f32 kernels (`dots_strided_f32`, `axpys_strided_f32`, as this board runs
/// them) against the portable code, bit for bit: widths of 1 to 40 and 64 columns (partial and
/// whole groups of four and eight), 1 to 9 keys (partial blocks of four), rows at the width's
/// stride and at a longer one, with zeros, negative zeros, large values and tiny ones (whose
/// products are subnormal, or flushed to zero by Helium) among the numbers. Returns the number
/// of shapes checked.
fn check_attention_f32() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x5eed_f32a);
    let mut checked = 0;
    let widths = (1..=40).chain([64]);
    for width in widths {
        for count in 1..=9usize {
            for stride in [width, width + 3] {
                let len = (count - 1) * stride + width;
                let value = |numbers: &mut Numbers| match numbers.next() % 16 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => numbers.float() * 1.0e30,
                    3 => numbers.float() * 1.0e-30,
                    _ => numbers.float(),
                };
                let rows: Vec<f32> = (0..len).map(|_| value(&mut numbers)).collect();
                let x: Vec<f32> = (0..width).map(|_| value(&mut numbers)).collect();
                let p: Vec<f32> = (0..count).map(|_| value(&mut numbers)).collect();
                let (mut got, mut want) = (vec![0.0f32; count], vec![0.0f32; count]);
                kernels::dots_strided_f32(&rows, stride, &x, &mut got);
                kernels::portable::dots_strided_f32(&rows, stride, &x, &mut want);
                let start: Vec<f32> = (0..width).map(|_| value(&mut numbers)).collect();
                let (mut got_sum, mut want_sum) = (start.clone(), start);
                kernels::axpys_strided_f32(&rows, stride, &p, &mut got_sum);
                kernels::portable::axpys_strided_f32(&rows, stride, &p, &mut want_sum);
                let same = |a: &[f32], b: &[f32]| {
                    a.iter()
                        .zip(b)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
                };
                if !same(&got, &want) || !same(&got_sum, &want_sum) {
                    return Err(Failure::KernelMismatch("attention_f32"));
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// LayerNorm's two sums and its last step (`kernels::sum_f32`, `squared_deviations_f32`,
/// `normalize_f32`, as this board runs them) against the portable code, bit for bit, on 0 to
/// 40 and 128 values (partial and whole groups of eight), with zeros of both signs and large
/// values among them. Returns the number of shapes checked.
fn check_layer_norm() -> Result<usize, Failure> {
    let mut numbers = Numbers(0x1a7e_5eed);
    let mut checked = 0;
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    for len in (0..=40).chain([128]) {
        for round in 0..3 {
            let mut value = || match (numbers.next() % 16, round) {
                (_, 0) => -0.0,
                (0, _) => 0.0,
                (1, _) => -0.0,
                (2, 2) => numbers.float() * 1.0e38,
                _ => numbers.float() * 4.0,
            };
            let x: Vec<f32> = (0..len).map(|_| value()).collect();
            let gain: Vec<f32> = (0..len).map(|_| value()).collect();
            let bias: Vec<f32> = (0..len).map(|_| value()).collect();
            let sum = kernels::sum_f32(&x);
            let mean = sum / len.max(1) as f32;
            let squares = kernels::squared_deviations_f32(&x, mean);
            let moments = (mean, 1.0 / (squares + 1.0e-5));
            let (mut got, mut want) = (x.clone(), x.clone());
            kernels::normalize_f32(&mut got, moments, &gain, &bias);
            kernels::portable::normalize_f32(&mut want, moments, &gain, &bias);
            if !same(sum, kernels::portable::sum_f32(&x))
                || !same(squares, kernels::portable::squared_deviations_f32(&x, mean))
                || !got.iter().zip(&want).all(|(&a, &b)| same(a, b))
            {
                return Err(Failure::KernelMismatch("layer_norm"));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// The softmax's exponentials and their sum (`kernels::softmax_exps_sum_f32`, as this board
/// runs it) against the portable code, bit for bit: every 49 999th f32 from 0 down to -110 (the
/// kernel's path, the paths around it, underflow), each bound of `libm::expf`'s paths and the
/// f32 on either side of it, infinities and a NaN, taken from a largest value of 0 and of 3.5,
/// in runs of 1 to 64 values. Returns the number of values checked.
fn check_softmax_exps() -> Result<usize, Failure> {
    use txl_core::kernels::fast_math::expf::{HALF_LN2, THREE_HALVES_LN2, TINY, UNDERFLOW};
    let mut inputs: Vec<f32> = Vec::new();
    let mut bits = (-0.0f32).to_bits();
    while f32::from_bits(bits) >= -110.0 {
        inputs.push(f32::from_bits(bits));
        bits += 49_999;
    }
    for bound in [TINY, HALF_LN2, THREE_HALVES_LN2, 0x42ae_ac50, UNDERFLOW] {
        for near in [bound - 1, bound, bound + 1] {
            inputs.push(-f32::from_bits(near));
            inputs.push(f32::from_bits(near));
        }
    }
    inputs.extend([0.0, f32::NEG_INFINITY, f32::INFINITY, f32::NAN]);
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let mut checked = 0;
    for max in [0.0f32, 3.5] {
        for (run, chunk) in inputs.chunks(64).enumerate() {
            let chunk = &chunk[..chunk.len().min(1 + run % 64)];
            let values: Vec<f32> = chunk.iter().map(|&x| x + max).collect();
            let (mut got, mut want) = (values.clone(), values);
            let got_sum = kernels::softmax_exps_sum_f32(&mut got, max, 0.25);
            let want_sum = kernels::portable::softmax_exps_sum_f32(&mut want, max, 0.25);
            if !same(got_sum, want_sum) || !got.iter().zip(&want).all(|(&a, &b)| same(a, b)) {
                return Err(Failure::KernelMismatch("softmax_exps"));
            }
            checked += chunk.len();
        }
    }
    Ok(checked)
}

/// `kernels::add_assign`, `kernels::add_f32`, `kernels::relu` and `kernels::relu_magnitude_bits` (as this board
/// runs them; the largest bits, where given, those of the outputs) against the portable code,
/// bit for bit, on 0 to 40 values (partial and whole groups of four and eight): zeros of
/// both signs, subnormals, infinities and NaNs of both signs among random values. Returns the
/// number of values checked.
fn check_add_relu() -> Result<usize, Failure> {
    let mut numbers = Numbers(0xadd_5eed);
    let special = [
        0.0,
        -0.0,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
    ];
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let mut checked = 0;
    for len in 0..=40usize {
        let value = |numbers: &mut Numbers| match numbers.next() % 4 {
            0 => special[numbers.next() as usize % special.len()],
            _ => numbers.float(),
        };
        let y: Vec<f32> = (0..len).map(|_| value(&mut numbers)).collect();
        let x: Vec<f32> = (0..len).map(|_| value(&mut numbers)).collect();
        let (mut got, mut want) = (y.clone(), y.clone());
        kernels::add_assign(&mut got, &x);
        kernels::portable::add_assign(&mut want, &x);
        // the sum into a third slice: the bits of the sum in place
        let mut got_into = vec![7.0f32; len];
        kernels::add_f32(&mut got_into, &y, &x);
        if !got_into.iter().zip(&want).all(|(&a, &b)| same(a, b)) {
            return Err(Failure::KernelMismatch("add_relu"));
        }
        let (mut got_relu, mut want_relu, mut got_largest) = (y.clone(), y.clone(), y);
        kernels::relu(&mut got_relu);
        kernels::portable::relu(&mut want_relu);
        let largest = kernels::relu_magnitude_bits(&mut got_largest);
        let bits_same = |got: &[f32]| {
            got.iter()
                .zip(&want_relu)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        };
        let largest_same = largest.is_none_or(|bits| bits == kernels::portable::magnitude_bits(&want_relu));
        let relu_same = bits_same(&got_relu) && bits_same(&got_largest) && largest_same;
        if !relu_same || !got.iter().zip(&want).all(|(&a, &b)| same(a, b)) {
            return Err(Failure::KernelMismatch("add_relu"));
        }
        checked += len;
    }
    Ok(checked)
}

/// Cached keys one head attends to.
const KEYS: usize = 64;
/// Width of one head.
const D_HEAD: usize = 32;
/// Elements from one cached key to the next (the four heads of a position).
const KEY_STRIDE: usize = 128;

/// How the benchmarked attention's keys and values are stored.
#[derive(Clone, Copy)]
enum AttentionMemory {
    F32,
    Int8,
}

impl AttentionMemory {
    fn name(self) -> &'static str {
        match self {
            AttentionMemory::F32 => "attention_f32",
            AttentionMemory::Int8 => "attention_int8",
        }
    }
}

/// Instructions of one head's products over [`KEYS`] keys (the average of [`REPEATS`] runs).
fn measure_attention(memory: AttentionMemory, counter: &InstructionCounter) -> u64 {
    let mut numbers = Numbers(0x9e37_79b9);
    let cached = (KEYS - 1) * KEY_STRIDE + D_HEAD;
    let keys: Vec<f32> = (0..cached).map(|_| numbers.float()).collect();
    let values: Vec<f32> = (0..cached).map(|_| numbers.float()).collect();
    let query: Vec<f32> = (0..D_HEAD).map(|_| numbers.float()).collect();
    let probabilities: Vec<f32> = (0..KEYS).map(|_| (numbers.float() + 1.0) / KEYS as f32).collect();
    let quantize = |x: &[f32]| -> Vec<i8> { x.iter().map(|&v| (v * 127.0) as i8).collect() };
    let (keys8, values8) = (quantize(&keys), quantize(&values));
    let scales = vec![1.0 / 127.0; KEYS];
    let mut scores = vec![0.0f32; KEYS];
    let mut p = probabilities.clone();
    let mut out = vec![0.0f32; D_HEAD];
    let mut scratch = vec![0u32; int8_attention::scratch_words(D_HEAD)];
    let mut acc = vec![0i32; D_HEAD];
    let start = counter.read();
    for _ in 0..REPEATS {
        match memory {
            AttentionMemory::F32 => {
                kernels::dots_strided_f32(&keys, KEY_STRIDE, &query, &mut scores);
                kernels::axpys_strided_f32(&values, KEY_STRIDE, &probabilities, &mut out);
            }
            AttentionMemory::Int8 => {
                p.copy_from_slice(&probabilities);
                if let Some(q) = int8_attention::QueryWords::quantize(&query, &mut scratch) {
                    int8_attention::key_dots(
                        &keys8,
                        KEY_STRIDE,
                        D_HEAD,
                        scales.iter().copied(),
                        &q,
                        &mut scores,
                    );
                }
                for (w, &scale) in p.iter_mut().zip(&scales) {
                    *w *= scale;
                }
                if let Some(w) = int8_attention::ProbabilityWords::quantize_in_place(&mut p) {
                    acc.fill(0);
                    int8_attention::value_sums(&values8, KEY_STRIDE, w.weights, &mut acc);
                    for (o, &sum) in out.iter_mut().zip(acc.iter()) {
                        *o += sum as f32 * w.step;
                    }
                }
            }
        }
    }
    let spent = counter.since(start);
    core::hint::black_box((&scores, &out));
    spent.instructions() / REPEATS
}

fn report(kernel: &str, shape: &str, rows: usize, cols: usize, macs: u64, instructions: u64) {
    let per_mac = instructions as f32 / macs as f32;
    if shape.is_empty() {
        info!(
            "bench kernel={=str} rows={=usize} cols={=usize} macs={=u64} instructions={=u64} instructions_per_mac={=f32}",
            kernel, rows, cols, macs, instructions, per_mac
        );
    } else {
        info!(
            "bench kernel={=str} shape={=str} macs={=u64} instructions={=u64} instructions_per_mac={=f32}",
            kernel, shape, macs, instructions, per_mac
        );
    }
}

/// Instructions of one `(rows, cols)` product with `kernel`'s weights (the average of
/// [`REPEATS`] runs).
fn measure(kernel: Kernel, rows: usize, cols: usize, counter: &InstructionCounter) -> u64 {
    let mut numbers = Numbers(0x2545_f491 ^ (rows * 31 + cols) as u32);
    let x: Vec<f32> = (0..cols).map(|_| numbers.float()).collect();
    let x2: Vec<f32> = (0..cols).map(|_| numbers.float()).collect();
    let mut y = vec![0.0f32; rows];
    let mut y2 = vec![0.0f32; rows];
    let mut scratch = vec![0u32; 2 * matrix::scratch_words(cols)];
    let weights: Vec<f32> = (0..rows * cols).map(|_| numbers.float()).collect();
    let halves: Vec<f16> = weights.iter().map(|&w| f16::from_f32(w)).collect();
    let values: Vec<i8> = weights.iter().map(|&w| (w * 127.0) as i8).collect();
    let row_scales = vec![1.0 / 127.0; rows];
    let (packed, codes) = int4_matrix(&mut numbers, rows, cols, INT4_GROUP);
    let data = match kernel {
        Kernel::Int4 => MatrixData::Int4 {
            values: &packed,
            scale: 1.0 / (7.0 * 16.0),
            codes: &codes,
            group: INT4_GROUP,
        },
        Kernel::Int8 | Kernel::Int8Rows | Kernel::Int8Pair => MatrixData::Int8 {
            values: &values,
            row_scales: &row_scales,
            act_scales: None,
        },
        Kernel::F16 => MatrixData::F16(&halves),
        Kernel::F32 => MatrixData::F32(&weights),
    };
    let weight = Matrix { rows, cols, data };
    let xq: Vec<i8> = x.iter().map(|&v| (v * 127.0) as i8).collect();
    let mut widened = vec![0u32; matrix::scratch_words(cols)];
    let mut sums = vec![0i32; rows];
    let start = counter.read();
    for _ in 0..REPEATS {
        match kernel {
            Kernel::Int8Rows => {
                kernels::widen_input_i8(&xq, &mut widened);
                kernels::row_sums_i8(&values, cols, &xq, &widened, &mut sums);
            }
            Kernel::Int8Pair => matrix::matvec_pair(&weight, [&x, &x2], [&mut y, &mut y2], &mut scratch),
            _ => matrix::matvec(&weight, &x, &mut y, &mut scratch),
        }
    }
    let spent = counter.since(start);
    core::hint::black_box((&y, &y2, &sums));
    spent.instructions() / REPEATS
}
