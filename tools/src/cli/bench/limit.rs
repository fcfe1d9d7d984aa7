//! The machine's limit, measured by `txl bench` itself: how many multiply-accumulates a second
//! the core's fastest f32 and int8 kernels do on this CPU when the weights are already in the
//! first-level cache (the f32 kernels for a segment's positions also on a block of rows in the
//! second-level cache, which they need to pay for copying their inputs). A forward pass reads
//! its weights from further away and does other work between the products (attention,
//! LayerNorm, the softmax), so its own rate over this limit says how far it is from what the
//! kernels can do: the percentage `txl bench` prints.

use std::time::{Duration, Instant};

use txl_core::{kernels, matrix};

/// Rows and columns of the probe's matrices: 16 KB of f32 weights (32 × 128), 16 KB of int8
/// (64 × 256), within any first-level data cache of 32 KB, with the demo model's widths.
const F32_SHAPE: (usize, usize) = (32, 128);
const INT8_SHAPE: (usize, usize) = (64, 256);

/// Rows of 512 columns for sixteen inputs (96 × 512, 192 KB of f32, within any second-level
/// cache of 256 KB or more): from this width the exact kernels take tiles of six rows against
/// four inputs, and both they and the fused kernels need this many rows to pay for copying the
/// inputs (sixteen inputs against 12 rows ran at 24 G exact and 17 G fused on the AVX2 VM,
/// against 96 rows at 33 G and 38 G).
const F32_LONG_SHAPE: (usize, usize) = (96, 512);

/// Each kernel is timed this many times, for at least [`SPAN`] each; the fastest counts (other
/// work on the machine can only slow a run down).
const REPEATS: usize = 3;
const SPAN: Duration = Duration::from_millis(15);

/// Multiply-accumulates a second of the fastest kernel of each kind.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// f32 weights: one input, or two, four or sixteen inputs per pass over the rows (a
    /// segment's positions).
    pub f32_macs_per_second: f64,
    /// int8 weights (W8A8): one input or two, the input already quantized.
    pub int8_macs_per_second: f64,
    /// int8 weights for a segment's positions, 64 a pass: the AMX tile kernel where the CPU
    /// and system have it, else the AVX-512 VNNI kernel of eight inputs at a time where the CPU
    /// has it, or [`Limits::int8_macs_per_second`] where that is more.
    pub int8_segments_macs_per_second: f64,
    /// f32 weights in the fused order (`--fast-f32`'s kernels): one input, four, or sixteen
    /// per pass (in the lanes of the inputs' registers), the last also on rows of 512 columns.
    pub fast_f32_macs_per_second: f64,
}

impl Limits {
    /// Runs the probe (about a third of a second).
    pub fn measure() -> Limits {
        let int8 = int8_limit();
        Limits {
            f32_macs_per_second: f32_limit(),
            int8_macs_per_second: int8,
            // the faster kernel for a segment: on the probe's short rows the pair kernel can
            // outrun the VNNI tiles
            int8_segments_macs_per_second: int8_tiles_limit().map_or(int8, |tiles| tiles.max(int8)),
            fast_f32_macs_per_second: fast_f32_limit(),
        }
    }
}

/// The fastest of `matvec_f32` and `matmul_f32` over two and four inputs, and over
/// sixteen on rows of 512 columns (tiles of six rows against four inputs with AVX and no
/// AVX-512F, whose own kernel takes three inputs or more).
fn f32_limit() -> f64 {
    let one = f32_rate(F32_SHAPE, 1, |weight, xs, ys| {
        kernels::matvec_f32(weight, xs[0], ys[0])
    });
    let several = |shape, inputs| f32_rate(shape, inputs, kernels::matmul_f32);
    // four inputs or more: a segment's positions several at a time
    one.max(several(F32_SHAPE, 2))
        .max(several(F32_SHAPE, 4))
        .max(several(F32_LONG_SHAPE, 16))
}

/// The fastest of `matmul_fma_rows` over one input, four and sixteen, and over sixteen on rows
/// of 512 columns.
fn fast_f32_limit() -> f64 {
    let rate = |shape, inputs| f32_rate(shape, inputs, kernels::matmul_fma_f32);
    rate(F32_SHAPE, 1)
        .max(rate(F32_SHAPE, 4))
        .max(rate(F32_SHAPE, 16))
        .max(rate(F32_LONG_SHAPE, 16))
}

/// The best rate of `kernel` over `inputs` inputs against f32 weights of `(rows, cols)`.
fn f32_rate(
    (rows, cols): (usize, usize),
    inputs: usize,
    kernel: impl Fn(&[f32], &[&[f32]], &mut [&mut [f32]]),
) -> f64 {
    let weight: Vec<f32> = (0..rows * cols).map(|i| small_value(i) as f32 / 64.0).collect();
    let xs: Vec<Vec<f32>> = (0..inputs)
        .map(|p| (0..cols).map(|i| small_value(i + 7 + p) as f32 / 32.0).collect())
        .collect();
    let mut ys = vec![vec![0.0f32; rows]; inputs];
    let x: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
    let mut y: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut y[..]).collect();
    best_rate(inputs * rows * cols, || {
        kernel(&weight, &x, &mut y);
        std::hint::black_box(&mut y);
    })
}

/// The fastest of `row_sums_i8` and `row_sums_pair_i8`.
fn int8_limit() -> f64 {
    let (rows, cols) = INT8_SHAPE;
    let values: Vec<i8> = (0..rows * cols).map(small_value).collect();
    let x0: Vec<i8> = (0..cols).map(|i| small_value(i + 7)).collect();
    let x1: Vec<i8> = (0..cols).map(|i| small_value(i + 11)).collect();
    let mut scratch0 = vec![0u32; matrix::scratch_words(cols)];
    let mut scratch1 = vec![0u32; matrix::scratch_words(cols)];
    let (xq0, widened0) = matrix::split_scratch(&mut scratch0, cols);
    let (xq1, widened1) = matrix::split_scratch(&mut scratch1, cols);
    xq0.copy_from_slice(&x0);
    xq1.copy_from_slice(&x1);
    kernels::widen_input_i8(xq0, widened0);
    kernels::widen_input_i8(xq1, widened1);
    let (mut s0, mut s1) = (vec![0i32; rows], vec![0i32; rows]);
    let one = best_rate(rows * cols, || {
        kernels::row_sums_i8(&values, cols, xq0, widened0, &mut s0);
        std::hint::black_box(&mut s0);
    });
    let two = best_rate(2 * rows * cols, || {
        kernels::row_sums_pair_i8(
            &values,
            cols,
            [xq0, xq1],
            [widened0, widened1],
            [&mut s0, &mut s1],
        );
        std::hint::black_box((&mut s0, &mut s1));
    });
    one.max(two)
}

/// The int8 tile kernel (AMX) over 64 inputs, or else the grouped kernel (AVX-512 VNNI) over
/// them in groups of eight, if this machine can run either.
fn int8_tiles_limit() -> Option<f64> {
    const INPUTS: usize = 64;
    let (rows, cols) = INT8_SHAPE;
    let values: Vec<i8> = (0..rows * cols).map(small_value).collect();
    let xs: Vec<Vec<i8>> = (0..INPUTS)
        .map(|p| (0..cols).map(|i| small_value(i + 7 + p)).collect())
        .collect();
    let xq: Vec<&[i8]> = xs.iter().map(|x| &x[..]).collect();
    if kernels::has_row_sums_tiles_i8() {
        let mut out = vec![vec![0i32; rows]; INPUTS];
        return Some(best_rate(INPUTS * rows * cols, || {
            let mut sums: Vec<&mut [i32]> = out.iter_mut().map(|s| &mut s[..]).collect();
            kernels::row_sums_tiles_i8(&values, cols, &xq, [&mut sums]);
            std::hint::black_box(&mut sums);
        }));
    }
    let inputs = kernels::group_inputs_i8(cols, INPUTS, |p| (xq[p], 1.0))?;
    let grouped = INPUTS / kernels::GROUP_INPUTS * kernels::GROUP_INPUTS;
    let row_scales = vec![1.0f32; rows];
    let mut out = vec![vec![0.0f32; rows]; INPUTS];
    Some(best_rate(grouped * rows * cols, || {
        let mut outs: Vec<&mut [f32]> = out.iter_mut().map(|s| &mut s[..]).collect();
        kernels::row_sums_groups_i8(
            &values,
            cols,
            &row_scales,
            &inputs,
            INPUTS,
            &mut outs,
            &(0..rows),
            &[],
        );
        std::hint::black_box(&mut outs);
    }))
}

/// A value in -64..=63 that varies with `i` (the kernels' speed does not depend on it).
fn small_value(i: usize) -> i8 {
    ((i.wrapping_mul(2_654_435_761) >> 7) % 128) as i8 - 64
}

/// The best multiply-accumulates a second of `step` (`macs` each) over [`REPEATS`] timings.
fn best_rate(macs: usize, mut step: impl FnMut()) -> f64 {
    step(); // warm the caches
    let mut best = 0.0f64;
    for _ in 0..REPEATS {
        let started = Instant::now();
        let mut steps = 0u64;
        while started.elapsed() < SPAN {
            for _ in 0..64 {
                step();
            }
            steps += 64;
        }
        let rate = (steps * macs as u64) as f64 / started.elapsed().as_secs_f64();
        best = best.max(rate);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_measures_a_positive_rate_for_each_kind() {
        let limits = Limits::measure();
        assert!(limits.f32_macs_per_second > 0.0 && limits.f32_macs_per_second.is_finite());
        assert!(limits.int8_macs_per_second > 0.0 && limits.int8_macs_per_second.is_finite());
        assert!(limits.int8_segments_macs_per_second >= limits.int8_macs_per_second);
        assert!(limits.fast_f32_macs_per_second > 0.0 && limits.fast_f32_macs_per_second.is_finite());
    }
}
