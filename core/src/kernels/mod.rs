//! Numeric kernels, by operation: this module is the one dispatch layer. Each operation is one
//! function named `<operation>_<dtype>` (the dtype of the stored operand: weights or cached
//! rows), which runs the fastest kernel this build and CPU have and otherwise the portable one
//! of the same name in [`portable`]. Every kernel gives the portable kernel's bits.
//!
//! Kernels are chosen at compile time for Cortex-M (features `cortex-m-dsp` and
//! `cortex-m-mve`, target ABI `eabihf` for the FPU), aarch64 (NEON) and RISC-V (RV32, by
//! `target_arch = "riscv32"`), and at run time on x86-64 and for aarch64's `SDOT` (feature
//! `std`; [`features`] is the one probe).
//!
//! | operation | x86-64 (`std`) | Cortex-M | aarch64 | RISC-V |
//! |---|---|---|---|---|
//! | [`dot_f32`] | | | | |
//! | [`dot_f16`] | F16C `avx::dot_f16` | | | |
//! | [`dot_i8`] | AVX2 `avx::dot_i8` | DSP `dsp::dot_i8` | | |
//! | [`matvec_f32`], [`dots_strided_f32`] | AVX `avx::dots_strided` | FPU `fpu::matvec_f32`, `fpu::dots_strided_f32` | NEON `neon::dots_strided_each_f32` | |
//! | [`matvec_f16`], [`dots_strided_f16`] | AVX+F16C `avx::dots_strided` | FPU `fpu::matvec_f16` (matvec) | | |
//! | [`matmul_f32`], [`matmul_f16`], [`dots_strided_each_f32`], [`dots_strided_each_f16`] | AVX-512F `avx512::dots_strided_each`, AVX `avx::dots_strided_each` (blocks of six rows: `avx_blocks`) | one input at a time | NEON `neon::dots_strided_each_f32` (f32) | |
//! | [`matmul_fma_f32`] | AVX2+FMA `fma::matmul_fma_f32` | | NEON `neon::matmul_fma_f32` | |
//! | [`axpys_strided_f32`], [`axpys_strided_f16`] | AVX `avx::axpys_strided` | FPU `fpu::axpys_strided_f32` (f32) | NEON `neon::axpys_strided_f32` (f32) | |
//! | [`axpys_strided_each_f32`] | AVX-512F `avx512::axpys_strided_each_f32` | | | |
//! | [`quantize_i8`] | AVX `avx::quantize_i8` | Helium `helium::quantize_i8`, FPU `fpu::quantize_i8` | | |
//! | [`quantize_widen_i8`] | | FPU `fpu::quantize_widen_i8` (with DSP, not Helium) | | |
//! | [`scale_sums_i8`] | | Helium `helium::scale_sums_i8`, FPU `fpu::scale_sums_i8` | | |
//! | [`widen_input_i8`] | | DSP `dsp::widen_input_i8` | | RV32IM `rv32::widen_input_i8` |
//! | [`row_sums_i8`] | VNNI `vnni::{evex,vex}::row_sums_i8`, AVX2 `avx::row_sums_i8` | Helium `helium::row_sums_i8`, DSP `dsp::row_sums_i8`, without DSP `base::row_sums_i8` | SDOT `neon::row_sums_i8_sdot`, `neon::row_sums_i8_smull` | RV32IM `rv32::row_sums_i8` |
//! | [`row_sums_pair_i8`] | VNNI `vnni::{evex,vex}::row_sums_pair_i8`, AVX2 `avx::row_sums_pair_i8` | DSP `dsp::row_sums_pair_i8` | | RV32IM `rv32::row_sums_pair_i8` |
//! | [`row_sums_groups_i8`] | AVX-512 VNNI `vnni_panel::scaled_rows_in_groups` | | | |
//! | [`row_sums_tiles_i8`] | AMX `amx::row_sums_tiles_i8` | | | |
//! | [`row_sums_i4`] | VNNI `vnni::{evex,vex}::row_sums_i4`, AVX2 `avx::row_sums_i4` | Helium `helium::row_sums_i4` (groups of a multiple of 32 columns; else `dsp::row_sums_i4_widening`), DSP `dsp::row_sums_i4` | | RV32IM `rv32::row_sums_i4` |
//! | [`vecmat_sums_i8`], [`vecmat_sums_each_i8`] | AVX-512BW, AVX2 (the portable code compiled for them) | | | |
//! | [`key_sums_i8`], [`value_sums_i8`], [`value_sums_from_zero_i8`] | AVX2 `avx::{key,value}_sums_i8` | Helium `helium::{key,value}_sums_i8`, `helium::value_sums_from_zero_i8`, DSP `dsp::{key,value}_sums_i8`, without DSP `base::{key,value}_sums_i8` | | RV32IM `rv32::{key,value}_sums_i8` |
//! | [`magnitude_bits`], [`query_halves`] | | Helium `helium::{magnitude_bits, query_halves}`, FPU `fpu::{magnitude_bits, query_halves}` | | |
//! | [`key_scores_i8`], [`value_weights`], [`round_weights`] | | Helium `helium::{key_scores_i8, value_weights, round_weights}`, FPU `fpu::{key_scores_i8, value_weights, round_weights}` | | |
//! | [`scaled_sums_i32`] | | Helium `helium::scaled_sums_i32`, FPU `fpu::scaled_sums_i32` | | |
//! | [`key_sums_each_i8`], [`value_sums_each_i8`], [`magnitudes_each_f32`] | AVX-512BW `avx512_attention` | | | |
//! | [`layer_norm_sums_f32`] | AVX-512F `avx512::layer_norm_sums_f32` | | | |
//! | [`softmax_exps_f32`] | AVX-512F `avx512::softmax_exps_f32`, AVX2 `avx::softmax_exp8` (not `fast-math`) | | | |
//! | [`softmax_exps_sum_f32`] | | FPU `fpu::softmax_exps_sum_f32` (not `fast-math`) | | |
//! | [`sum_f32`], [`squared_deviations_f32`], [`normalize_f32`] | | FPU `fpu::{sum_f32, squared_deviations_f32, normalize_f32}` | | |
//! | [`add_assign`], [`add_f32`], [`relu`] | | FPU builds `fpu::{add_assign, add_f32, relu}` | | |
//! | [`relu_magnitude_bits`], [`scale_sums_bias_i8`], [`scale_sums_add_i8`] | | FPU `fpu::{relu_magnitude_bits, scale_sums_bias_i8, scale_sums_add_i8}` (not Helium) | | |
//! | [`widen_f16`] | | FPU `fpu::widen_f16` | | |
//! | the integer arithmetic's per-value passes: [`act_shifts_i32`], [`quantize_wide_i32`], [`scaled_by_bits_i32`], [`layer_norm_i32`], [`sum_range_i32`], [`squares_i32`], [`query_sums_i32`], [`query_pack_i32`], [`attention_scores_i32`], [`attention_scores_row_i32`], [`exp_scores_i32`], [`probabilities_i32`], [`exponents_strided_i32`], [`positions_i32`], [`top_exponent_i32`], [`shift_sums_i32`], [`subtract_twice_i32`], [`copy_i32`] | | Helium `helium::{act_shift, quantize_rmulh, scaled_by_bits, layer_norm, sum_range, squares, query_sums, query_pack, scores, exp_scores, probabilities, gather_strided, gather_positions, top_exponent, shift_sums, sub_sub, copy}`, DSP without Helium `dsp_integer::{act_shift, scaled_by_bits, layer_norm, sum_range, squares, query_sums, query_pack, scores, exp_scores, probabilities, gather_strided, gather_positions, top_exponent, shift_sums, sub_sub, copy}`, `dsp_scores::scores` | | |
//! | the integer image's glue outside the attention: [`pow2_int8_i32`], [`bias_relu_i32`], [`add_sums_i32`], [`add_saturating_i32`], [`add_fixed_f32`], [`embedding_columns_i32`] | | Helium `helium_integer::{pow2_int8, bias_relu, add_sums, add_saturating, add_fixed, embedding_columns}`, DSP without Helium `dsp_integer::{pow2_int8, bias_relu, add_sums, add_saturating, add_fixed, embedding_columns}` (and `dsp_integer::{quantize_wide, quantize_widen}` for [`quantize_wide_i32`], [`quantize_widen_i32`]) | | |
//!
//! An empty cell runs the portable kernel (for the integer passes: the caller's own scalar
//! definition, [`INTEGER_PASSES`]). The folders: [`portable`] (the reference),
//! `x86_64/`, `arm/` (`base.rs`, `dsp.rs`, `dsp_integer.rs`, `fpu.rs`, `helium.rs`,
//! `helium_integer.rs`), `aarch64/`, `riscv/` (`rv32.rs`);
//! `docs/ARCHITECTURE.md` says how to add an instruction set.
//!
//! Each kernel states its shapes: `W (rows, cols) @ x (cols) -> y (rows)`. Slices are taken
//! at the lengths the shapes say; callers pass buffers of exactly those lengths.

pub mod fast_math;
pub mod features;
pub mod portable;

#[cfg(any(feature = "cortex-m-dsp", target_arch = "arm", test))]
pub mod arm;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod x86_64;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;

#[cfg(any(target_arch = "riscv32", test))]
pub mod riscv;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
use features::{
    has_amx_int8, has_avx2, has_avx2_fma, has_avx512_vnni, has_avx512bw, has_avx512f, has_avx_f16c,
    has_avx_vnni, has_f16c, has_vnni_512, splits_512_bit_operations,
};
#[cfg(all(feature = "std", target_arch = "x86_64"))]
use x86_64::{amx, avx, avx512, avx512_attention, fma, vnni, vnni_panel};

#[cfg(feature = "cortex-m-dsp")]
use arm::dsp;
#[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
use arm::dsp_integer;
#[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
use arm::fpu;
#[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
use arm::helium;
#[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
use arm::helium_integer;

#[cfg(target_arch = "aarch64")]
use aarch64::neon;

#[cfg(target_arch = "riscv32")]
use riscv::rv32;

pub use portable::{
    argmax, f16_to_f32, i64_to_f32, max, scale, Magnitudes, LAYER_NORM_ROWS, SIDE_BY_SIDE, VECMAT_INPUTS,
};

/// `y += x` ([`portable::add_assign`]): eight values a pass with the FPU of the `cortex-m-dsp`
/// cores. The same bits.
#[inline]
pub fn add_assign(y: &mut [f32], x: &[f32]) {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf"
    ))]
    return fpu::add_assign(y, x);
    #[allow(unreachable_code)]
    portable::add_assign(y, x)
}

/// `out = a + b` ([`portable::add_f32`]): eight values a pass with the FPU of the
/// `cortex-m-dsp` cores. The same bits as [`add_assign`] of a copy of `a`.
#[inline]
pub fn add_f32(out: &mut [f32], a: &[f32], b: &[f32]) {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf"
    ))]
    return fpu::add_f32(out, a, b);
    #[allow(unreachable_code)]
    portable::add_f32(out, a, b)
}

/// In place `max(x, 0)` ([`portable::relu`]): four values a pass on the bits with the
/// `cortex-m-dsp` cores' FPU builds. The same bits.
#[inline]
pub fn relu(x: &mut [f32]) {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf"
    ))]
    {
        #[cfg(feature = "cortex-m-mve")]
        return helium::relu(x);
        #[allow(unreachable_code)]
        return fpu::relu(x);
    }
    #[allow(unreachable_code)]
    portable::relu(x)
}

/// [`relu`], and where its kernel finds them in the same pass, the largest bits it leaves
/// ([`magnitude_bits`] of the outputs, which [`quantize_widen_i8`] takes): the FPU builds of
/// the `cortex-m-dsp` cores other than Helium's, and not after a NaN. `None` elsewhere. The
/// same bits as [`relu`].
#[inline]
pub fn relu_magnitude_bits(x: &mut [f32]) -> Option<u32> {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::relu_magnitude_bits(x);
    #[allow(unreachable_code)]
    {
        relu(x);
        None
    }
}

/// Most positions one pass of the linear layers takes (the matrix layer's inputs): 128 with the
/// `std` feature (a host, where a large model's weights come from memory once per pass), 16
/// without (a device's stack holds a few arrays of this many slices).
pub const MAX_POSITIONS_PER_PASS: usize = if cfg!(feature = "std") { 128 } else { 16 };

/// Asks the caches for the share `share` of `parts` equal shares of `items`' bytes (whole
/// 64-byte lines), so that weights read later do not wait for memory; nothing where the target
/// has no prefetch this crate uses. It reads nothing into the program.
#[inline]
pub fn prefetch_share<T>(items: &[T], share: core::ops::Range<usize>, parts: usize) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    x86_64::prefetch::share_into::<T, 1>(items, share, parts);
    #[cfg(not(all(feature = "std", target_arch = "x86_64")))]
    let _ = (items, share, parts);
}

// ---- f32 and f16 rows -------------------------------------------------------------------------

/// Sum of `a[i] * b[i]` over the shorter of the two, in four interleaved f32 accumulators
/// ([`portable::dot_f32`]; the faster kernels sum rows in its order).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    portable::dot_f32(a, b)
}

/// `sum a[i] * b[i]` for `a` and `b` of one length, f16 weights widened to f32: F16C on x86-64
/// with the `std` feature when the CPU has it, else the portable widening. Same bits.
#[inline]
pub fn dot_f16(a: &[half::f16], b: &[f32]) -> f32 {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_f16c() {
        // SAFETY: the CPU has F16C, checked just above.
        return unsafe { avx::dot_f16(a, b) };
    }
    portable::dot_f16(a, b)
}

/// `W (rows, cols) @ x (cols) -> y (rows)` for f32 weights, `rows = y.len()`: four rows per
/// pass with the `cortex-m-dsp` feature on a core with an FPU (`eabihf`), sixteen with AVX on
/// x86-64 (`std` feature, chosen at run time), eight with NEON on aarch64, else one. Same bits
/// every way.
#[inline]
pub fn matvec_f32(weight: &[f32], x: &[f32], y: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { avx::dots_strided(weight, x.len(), x, y) };
    }
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    return fpu::matvec_f32(weight, x, y);
    #[cfg(target_arch = "aarch64")]
    return neon::dots_strided_each_f32(weight, x.len(), &[x], &mut [y]);
    #[allow(unreachable_code)]
    portable::matvec_f32(weight, x, y)
}

/// [`matvec_f32`] for f16 weights, widened exactly (by the FPU with `cortex-m-dsp`, by F16C on
/// x86-64, sixteen rows per pass).
#[inline]
pub fn matvec_f16(weight: &[half::f16], x: &[f32], y: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { avx::dots_strided(weight, x.len(), x, y) };
    }
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    return fpu::matvec_f16(weight, x, y);
    #[allow(unreachable_code)]
    portable::matvec_f16(weight, x, y)
}

/// `out[r] = x · rows[r * stride..][..x.len()]` for `r < out.len()` (f32 rows at a stride: the
/// cached keys of one head): four rows per pass with `cortex-m-dsp` on an FPU, sixteen with AVX
/// on x86-64, eight with NEON on aarch64, else one. The bits of [`dot_f32`]`(x, row)` for each
/// row.
#[inline]
pub fn dots_strided_f32(rows: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { avx::dots_strided(rows, stride, x, out) };
    }
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve", target_abi = "eabihf"))]
    return helium::dots_strided_f32(rows, stride, x, out);
    #[cfg(all(
        feature = "cortex-m-dsp",
        not(feature = "cortex-m-mve"),
        target_abi = "eabihf"
    ))]
    return fpu::dots_strided_f32(rows, stride, x, out);
    #[cfg(target_arch = "aarch64")]
    return neon::dots_strided_each_f32(rows, stride, &[x], &mut [out]);
    #[allow(unreachable_code)]
    portable::dots_strided_f32(rows, stride, x, out)
}

/// [`dots_strided_f32`] for f16 rows (the cached keys of one head in f16 memory): `out[r] =
/// dot_f16(rows[r * stride..][..x.len()], x)`, sixteen rows per pass with AVX and F16C on
/// x86-64, else one. The same bits.
#[inline]
pub fn dots_strided_f16(rows: &[half::f16], stride: usize, x: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { avx::dots_strided(rows, stride, x, out) };
    }
    portable::dots_strided_f16(rows, stride, x, out)
}

/// The x86-64 kernels of [`dots_strided_each_f32`] for f32 or f16 rows: AVX-512F for three
/// inputs or more, else AVX with F16C; `false`, with nothing written, on a CPU with neither.
/// Where the CPU splits 512-bit operations in two ([`features::splits_512_bit_operations`]),
/// the AVX blocks of six rows take the shapes they apply to. Every kernel gives the same bits.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[inline]
fn dots_each_x86<T: x86_64::row_element::RowElement>(
    rows: &[T],
    stride: usize,
    xs: &[&[f32]],
    outs: &mut [&mut [f32]],
) -> bool {
    let blocks_first = || {
        let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
        avx::takes_blocks(xs.len().min(outs.len()), cols) && splits_512_bit_operations()
    };
    if xs.len() > 2 && has_avx512f() && !blocks_first() {
        // SAFETY: the CPU has AVX-512F and F16C, checked just above.
        unsafe { avx512::dots_strided_each(rows, stride, xs, outs) };
        return true;
    }
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        unsafe { avx::dots_strided_each(rows, stride, xs, outs) };
        return true;
    }
    false
}

/// [`dots_strided_f32`] for several inputs of one length (the queries of one head against its
/// cached keys): `outs[p][r] = xs[p] · rows[r * stride..][..cols]`, `cols` the shortest input's
/// length, for the rows of the shortest output. With AVX-512F on x86-64 and three inputs or
/// more, sixteen rows a pass (four a register) against four inputs; with AVX (NEON on aarch64)
/// each block of rows is read once for all the inputs; else one call per input. The bits of one
/// [`dots_strided_f32`] per input.
#[inline]
pub fn dots_strided_each_f32(rows: &[f32], stride: usize, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if dots_each_x86(rows, stride, xs, outs) {
        return;
    }
    #[cfg(target_arch = "aarch64")]
    return neon::dots_strided_each_f32(rows, stride, xs, outs);
    #[allow(unreachable_code)]
    for (x, out) in xs.iter().zip(outs.iter_mut()) {
        dots_strided_f32(rows, stride, x, out);
    }
}

/// [`dots_strided_each_f32`] for f16 rows (the queries of one head against its keys in f16
/// memory): `outs[p][r] = dot_f16(rows[r * stride..][..cols], xs[p])`, widened exactly; the
/// same kernels as for f32 rows (with AVX, four inputs or more widen each block of rows once
/// for all of them), else one [`dots_strided_f16`] per input. The bits of one
/// [`dots_strided_f16`] per input.
#[inline]
pub fn dots_strided_each_f16(rows: &[half::f16], stride: usize, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if dots_each_x86(rows, stride, xs, outs) {
        return;
    }
    for (x, out) in xs.iter().zip(outs.iter_mut()) {
        dots_strided_f16(rows, stride, x, out);
    }
}

/// [`matvec_f32`] for several inputs, `ys[p] = W xs[p]` (`W (rows, cols)`, `cols` the inputs'
/// length, `rows` the outputs'): with AVX-512F on x86-64 and three inputs or more, sixteen rows
/// a pass (four a register) against four inputs; else with AVX on x86-64 (NEON on aarch64) each
/// block of eight weight rows is read once for all the inputs (with AVX, four inputs or more on
/// rows of 512 columns or more take blocks of six rows); the same bits as one call per input.
#[inline]
pub fn matmul_f32(weight: &[f32], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    #[cfg(any(all(feature = "std", target_arch = "x86_64"), target_arch = "aarch64"))]
    return dots_strided_each_f32(weight, xs.first().map_or(0, |x| x.len()), xs, ys);
    #[allow(unreachable_code)]
    for (x, y) in xs.iter().zip(ys.iter_mut()) {
        matvec_f32(weight, x, y);
    }
}

/// [`matmul_f32`] for f16 weights, widened exactly (by F16C on x86-64, four weights a step, in
/// the AVX-512F kernel for three inputs or more).
#[inline]
pub fn matmul_f16(weight: &[half::f16], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if dots_each_x86(weight, xs.first().map_or(0, |x| x.len()), xs, ys) {
        return;
    }
    for (x, y) in xs.iter().zip(ys.iter_mut()) {
        matvec_f16(weight, x, y);
    }
}

/// `ys[p] = W xs[p]` for f32 weights `W (rows, cols)` (`rows` the shortest output's length,
/// `cols` the shortest input's), each sum in the fused order
/// ([`portable::dot_fma_f32`]'s bits, opt-in with `Model::set_fast_f32`): with AVX2 and FMA
/// on x86-64 (AVX-512 CPUs included) eight inputs or rows a register, each weight or input
/// broadcast; with NEON on aarch64 four inputs a register; else the portable loop.
#[inline]
pub fn matmul_fma_f32(weight: &[f32], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx2_fma() {
        let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
        // SAFETY: the CPU has AVX2 and FMA, checked just above.
        return unsafe { fma::matmul_fma_f32(weight, cols, xs, ys) };
    }
    #[cfg(target_arch = "aarch64")]
    {
        let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
        return neon::matmul_fma_f32(weight, cols, xs, ys);
    }
    #[allow(unreachable_code)]
    portable::matmul_fma_f32(weight, xs, ys)
}

/// [`matmul_fma_f32`] for one input.
#[inline]
pub fn matvec_fma_f32(weight: &[f32], x: &[f32], y: &mut [f32]) {
    matmul_fma_f32(weight, &[x], &mut [y]);
}

/// `out += p[k] * rows[k * stride..][..out.len()]` for each `k < p.len()` in order (the cached
/// values of one head, weighted): four rows per pass with `cortex-m-dsp` on an FPU, eight
/// elements a register with AVX on x86-64, four with NEON on aarch64, else one. Per element the
/// products are added in `k` order every way: the same bits.
#[inline]
pub fn axpys_strided_f32(rows: &[f32], stride: usize, p: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { avx::axpys_strided(rows, stride, p, out) };
    }
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    return fpu::axpys_strided_f32(rows, stride, p, out);
    #[cfg(target_arch = "aarch64")]
    return neon::axpys_strided_f32(rows, stride, p, out);
    #[allow(unreachable_code)]
    portable::axpys_strided_f32(rows, stride, p, out)
}

/// [`axpys_strided_f32`] for f16 rows (the cached values of one head in f16 memory): `out +=
/// p[k] * widen(rows[k * stride..][..out.len()])` for each `k` in order, eight elements a
/// register with AVX and F16C on x86-64, else one. The same bits.
#[inline]
pub fn axpys_strided_f16(rows: &[half::f16], stride: usize, p: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { avx::axpys_strided(rows, stride, p, out) };
    }
    portable::axpys_strided_f16(rows, stride, p, out)
}

/// [`axpys_strided_f32`] for several weight lists of one length (the queries of one head, each
/// weighting the same cached values): `outs[q] += ps[q][k] * rows[k * stride..][..n]` for each
/// `k` in order, `n` the shortest output's length, `k` below the shortest list's. With
/// AVX-512F on x86-64, four lists a pass share each loaded row; else one call per list. The
/// bits of one [`axpys_strided_f32`] per list.
#[inline]
pub fn axpys_strided_each_f32(rows: &[f32], stride: usize, ps: &[&[f32]], outs: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if ps.len() > 1 && has_avx512f() {
        // SAFETY: the CPU has AVX-512F, checked just above.
        return unsafe { avx512::axpys_strided_each_f32(rows, stride, ps, outs) };
    }
    for (p, out) in ps.iter().zip(outs.iter_mut()) {
        axpys_strided_f32(rows, stride, p, out);
    }
}

/// `dst = src` widened exactly to f32: by the FPU (`VCVTB`/`VCVTT`) with `cortex-m-dsp`, in
/// integers ([`portable::f16_to_f32`]) elsewhere; the same bits.
#[inline]
pub fn widen_f16(src: &[half::f16], dst: &mut [f32]) {
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    return fpu::widen_f16(src, dst);
    #[allow(unreachable_code)]
    portable::widen_f16(src, dst)
}

// ---- int8 and int4 rows -----------------------------------------------------------------------

/// `sum a[i] * b[i]` in i32: the Cortex-M DSP kernel with the `cortex-m-dsp` feature, AVX2 on
/// x86-64 with the `std` feature when the CPU has it, else the portable one. All give the same
/// bits.
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(feature = "cortex-m-dsp")]
    return dsp::dot_i8(a, b);
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { avx::dot_i8(a, b) };
    }
    #[allow(unreachable_code)]
    portable::dot_i8(a, b)
}

/// The input of an int8 product quantized to int8 (`out`), returning its scale
/// ([`portable::quantize_i8`]): eight columns a step with AVX on x86-64 (`std` feature, chosen
/// at run time), four with Helium (`cortex-m-mve`, inputs without activation scales), four a
/// pass with the FPU of the other `cortex-m-dsp` cores. The same bits.
#[inline]
pub fn quantize_i8(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { avx::quantize_i8(x, act_scales, out) };
    }
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::quantize_i8(x, act_scales, out);
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::quantize_i8(x, act_scales, out);
    #[allow(unreachable_code)]
    portable::quantize_i8(x, act_scales, out)
}

/// [`quantize_i8`] into `xq`, then [`widen_input_i8`] of `xq` into `widened`: one pass over
/// the values with the FPU of the other `cortex-m-dsp` cores than Helium's (`cortex-m-large-
/// kernels`), where [`quantize_i8`] takes its kernel. The same bytes, words and scale.
/// `magnitude`, where known, is [`magnitude_bits`] of `x` (as [`relu_magnitude_bits`] gives
/// it): that kernel then takes it for its scan of `x`.
#[inline]
pub fn quantize_widen_i8(
    x: &[f32],
    act_scales: Option<&[f32]>,
    magnitude: Option<u32>,
    xq: &mut [i8],
    widened: &mut [u32],
) -> f32 {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    if let Some(scale) = fpu::quantize_widen_i8(x, act_scales, magnitude, xq, widened) {
        return scale;
    }
    let _ = magnitude;
    let scale = quantize_i8(x, act_scales, xq);
    widen_input_i8(xq, widened);
    scale
}

/// `y[r] = (y[r]'s bits as an i32 sum) as f32 * (row_scales[r] * x_scale)`, an int8 product's
/// sums scaled into its outputs ([`portable::scale_sums_i8`]): four rows an instruction with
/// Helium (`cortex-m-mve`, where no subnormal can arise), four a pass with the FPU of the other
/// `cortex-m-dsp` cores. The same bits.
#[inline]
pub fn scale_sums_i8(y: &mut [f32], row_scales: &[f32], x_scale: f32) {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    if helium::scale_sums_i8(y, row_scales, x_scale) {
        return;
    }
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::scale_sums_i8(y, row_scales, x_scale);
    #[allow(unreachable_code)]
    portable::scale_sums_i8(y, row_scales, x_scale)
}

/// Whether a lone position's matrix products take their own path (`matrix::matvec_bias_known`,
/// `matrix::matvec_residual_known`: its bias and residual in the pass that scales the sums,
/// where [`scale_sums_bias_i8`] and [`scale_sums_add_i8`] have kernels): every build but the
/// `cortex-m-dsp` ones for size (without `cortex-m-large-kernels`), which keep one path for any
/// number of positions.
pub const LONE_POSITION_PASSES: bool = !cfg!(all(
    feature = "cortex-m-dsp",
    not(feature = "cortex-m-large-kernels")
));

/// [`scale_sums_i8`], then `y += bias` ([`add_assign`]): in one pass with the FPU of the
/// `cortex-m-dsp` cores other than Helium's. The same bits.
#[inline]
pub fn scale_sums_bias_i8(y: &mut [f32], row_scales: &[f32], x_scale: f32, bias: &[f32]) {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::scale_sums_bias_i8(y, row_scales, x_scale, bias);
    #[allow(unreachable_code)]
    {
        scale_sums_i8(y, row_scales, x_scale);
        add_assign(y, bias);
    }
}

/// `h += y` ([`add_assign`]) for `y` the sums in `sums` scaled by [`scale_sums_i8`] and
/// `bias`, where given, added to them ([`scale_sums_bias_i8`]): in one pass that leaves `sums`
/// as they are with the FPU of the `cortex-m-dsp` cores other than Helium's, elsewhere `sums`
/// scaled in place first. The same bits in `h`.
#[inline]
pub fn scale_sums_add_i8(
    sums: &mut [f32],
    row_scales: &[f32],
    x_scale: f32,
    bias: Option<&[f32]>,
    h: &mut [f32],
) {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::scale_sums_add_i8(sums, row_scales, x_scale, bias, h);
    #[allow(unreachable_code)]
    {
        match bias {
            Some(bias) => scale_sums_bias_i8(sums, row_scales, x_scale, bias),
            None => scale_sums_i8(sums, row_scales, x_scale),
        }
        add_assign(h, sums);
    }
}

/// Prepares a quantized input `xq` for [`row_sums_i8`] and [`row_sums_i4`], once per input
/// however many rows read it: the DSP kernels take it widened to 16-bit pairs in `widened` (at
/// least `2 * xq.len().div_ceil(4)` words), the RV32 int4 kernel as pairs of columns in the
/// order its products meet them (as many words); the other kernels read `xq` itself.
#[inline]
pub fn widen_input_i8(xq: &[i8], widened: &mut [u32]) {
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    dsp::widen_input_i8(xq, widened);
    #[cfg(target_arch = "riscv32")]
    rv32::widen_input_i8(xq, widened);
    #[cfg(not(any(
        all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")),
        target_arch = "riscv32"
    )))]
    let _ = (xq, widened);
}

/// `sums[r] = values[r] · xq` in i32 for each row `r < sums.len()` of the row-major int8
/// `values (rows, cols)`, `widened` being `xq` prepared by [`widen_input_i8`]: Helium with the
/// `cortex-m-mve` and `cortex-m-dsp` features (16 columns an instruction), else four rows per
/// pass with the `cortex-m-dsp` feature, and without it on the other Arm cores (Cortex-M3,
/// Armv6-M: `LDRSB` and `MLA`), with `VPDPBUSD` (AVX-512 VNNI or AVX-VNNI, 32 columns an
/// instruction) or else AVX2 on x86-64 (`std` feature, when the CPU has it), on aarch64 `SDOT`
/// (when the CPU has it and the `std` feature can tell) or else `SMULL`, four rows per pass on
/// RV32 (`riscv32`), else the portable dot product. All give the same sums.
#[inline]
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], widened: &[u32], sums: &mut [i32]) {
    let _ = widened; // (read by the DSP kernels only)
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if has_avx512_vnni() {
            // SAFETY: the CPU has AVX-512 VNNI (with VL) and AVX2, checked just above.
            return unsafe { vnni::evex::row_sums_i8(values, cols, xq, sums) };
        }
        if has_avx_vnni() {
            // SAFETY: the CPU has AVX-VNNI and AVX2, checked just above.
            return unsafe { vnni::vex::row_sums_i8(values, cols, xq, sums) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { avx::row_sums_i8(values, cols, xq, sums) };
        }
    }
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::row_sums_i8(values, cols, xq, sums);
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return dsp::row_sums_i8(values, cols, xq, widened, sums);
    #[cfg(all(target_arch = "aarch64", feature = "std"))]
    if features::has_dotprod() {
        // SAFETY: the CPU has the dot-product extension, checked just above.
        return unsafe { neon::row_sums_i8_sdot(values, cols, xq, sums) };
    }
    #[cfg(target_arch = "aarch64")]
    return neon::row_sums_i8_smull(values, cols, xq, sums);
    #[cfg(target_arch = "riscv32")]
    return rv32::row_sums_i8(values, cols, xq, sums);
    #[cfg(all(target_arch = "arm", not(feature = "cortex-m-dsp")))]
    return arm::base::row_sums_i8(values, cols, xq, sums);
    #[allow(unreachable_code)]
    portable::row_sums_i8(values, cols, xq, sums)
}

/// [`row_sums_i8`] for two inputs at once, `sums[p][r] = values[r] · xq[p]`: with the
/// `cortex-m-dsp` feature, with VNNI or AVX2 on x86-64, and on RV32 (three rows per pass),
/// each weight is loaded (and widened or sign-flipped) once for both (Helium needs no widening
/// and runs each input on its own).
#[inline]
pub fn row_sums_pair_i8(
    values: &[i8],
    cols: usize,
    xq: [&[i8]; 2],
    widened: [&[u32]; 2],
    sums: [&mut [i32]; 2],
) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if has_avx512_vnni() {
            // SAFETY: the CPU has AVX-512 VNNI (with VL) and AVX2, checked just above.
            return unsafe { vnni::evex::row_sums_pair_i8(values, cols, xq, sums) };
        }
        if has_avx_vnni() {
            // SAFETY: the CPU has AVX-VNNI and AVX2, checked just above.
            return unsafe { vnni::vex::row_sums_pair_i8(values, cols, xq, sums) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { avx::row_sums_pair_i8(values, cols, xq, sums) };
        }
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return dsp::row_sums_pair_i8(values, cols, xq, widened, sums);
    #[cfg(target_arch = "riscv32")]
    {
        let _ = widened; // (the RISC-V kernel reads `xq` itself)
        return rv32::row_sums_pair_i8(values, cols, xq, sums);
    }
    #[allow(unreachable_code)]
    for ((x, widened), sums) in xq.into_iter().zip(widened).zip(sums) {
        row_sums_i8(values, cols, x, widened, sums);
    }
}

/// Whether [`row_sums_tiles_i8`] has a kernel on this CPU (AMX with int8 products, granted by
/// the system; x86-64 with `std`).
#[inline]
pub fn has_row_sums_tiles_i8() -> bool {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    return has_amx_int8();
    #[allow(unreachable_code)]
    false
}

/// With AMX (x86-64, `std`), the int8 sums `parts[k][p][r] = row · xq[p]` of the first whole
/// tiles of rows of each part `k` of `values` (rows of `cols`: the parts one after the other,
/// each as long as its shortest output), every input at once; returns how many rows of each
/// part that was: none where [`has_row_sums_tiles_i8`] is false.
pub fn row_sums_tiles_i8<const PARTS: usize>(
    values: &[i8],
    cols: usize,
    xq: &[&[i8]],
    parts: [&mut [&mut [i32]]; PARTS],
) -> [usize; PARTS] {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_amx_int8() {
        // SAFETY: the CPU has AMX int8 and the system granted the tiles, checked just above.
        return unsafe { amx::row_sums_tiles_i8(values, cols, xq, parts) };
    }
    let _ = (values, cols, xq, parts);
    [0; PARTS]
}

/// Inputs the grouped int8 row kernel ([`row_sums_groups_i8`]) takes at a time.
pub const GROUP_INPUTS: usize = 8;

/// Rows of a block of int8 rows where the grouped kernel takes them: a multiple of its tile of
/// rows, so that no rows of a block but the last are left to its smaller steps.
pub const GROUP_ROWS: usize = 48;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
const _: () =
    assert!(GROUP_ROWS.is_multiple_of(vnni_panel::TILE_ROWS) && GROUP_INPUTS == vnni_panel::TILE_INPUTS);

/// Whether [`row_sums_groups_i8`] has a kernel on this CPU (512-bit AVX-512 VNNI; x86-64 with
/// `std`): where [`group_inputs_i8`] gives inputs for passes of [`GROUP_INPUTS`] or more.
#[inline]
pub fn has_row_sums_groups_i8() -> bool {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    return has_vnni_512();
    #[allow(unreachable_code)]
    false
}

/// A pass's int8 inputs as the grouped row kernel takes them, prepared once per call for every
/// block of rows ([`group_inputs_i8`]).
#[derive(Debug)]
pub struct GroupInputs<'x> {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    inputs: [vnni_panel::QuantizedInput<'x>; MAX_POSITIONS_PER_PASS],
    #[cfg(not(all(feature = "std", target_arch = "x86_64")))]
    inputs: core::marker::PhantomData<&'x ()>,
}

/// Where the grouped kernel takes a pass of `count` int8 inputs (at least [`GROUP_INPUTS`] of
/// them, a CPU with 512-bit AVX-512 VNNI): the inputs as it takes them, input `p` being
/// `input(p)`: its int8 values (`cols`) and its scale. `None` elsewhere.
pub fn group_inputs_i8<'x>(
    cols: usize,
    count: usize,
    input: impl Fn(usize) -> (&'x [i8], f32),
) -> Option<GroupInputs<'x>> {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if count < GROUP_INPUTS || !has_row_sums_groups_i8() {
            return None;
        }
        let count = count.min(MAX_POSITIONS_PER_PASS);
        let grouped = count / GROUP_INPUTS * GROUP_INPUTS;
        Some(GroupInputs {
            inputs: core::array::from_fn(|p| {
                let (values, scale) = if p < count { input(p) } else { (&[][..], 0.0) };
                vnni_panel::QuantizedInput {
                    values,
                    scale,
                    excess: if p < grouped {
                        vnni_panel::excess(values, cols)
                    } else {
                        0
                    },
                }
            }),
        })
    }
    #[cfg(not(all(feature = "std", target_arch = "x86_64")))]
    {
        let _ = (cols, count, input);
        None
    }
}

/// The int8 rows of one block (`values`, rows of `cols`, one of `scales` each) for the first
/// `count` inputs of `inputs` in whole groups of [`GROUP_INPUTS`], scaled:
/// `outputs[p][out][r] = (row r · input p) as f32 * (scales[r] * scale_p)`. Each block's weights
/// are laid out once and each load of them meets a group of inputs. Returns the inputs done;
/// `next` (the next block) is asked for from memory a share with each group.
#[allow(clippy::too_many_arguments)]
pub fn row_sums_groups_i8(
    values: &[i8],
    cols: usize,
    scales: &[f32],
    inputs: &GroupInputs<'_>,
    count: usize,
    outputs: &mut [&mut [f32]],
    out: &core::ops::Range<usize>,
    next: &[i8],
) -> usize {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        let mut outs: [&mut [f32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| &mut [][..]);
        for (o, y) in outs.iter_mut().zip(outputs.iter_mut()) {
            *o = &mut y[out.clone()];
        }
        let n = count.min(MAX_POSITIONS_PER_PASS);
        // SAFETY: the block holds `scales.len() = out.len()` rows of `cols` (its caller's row
        // range), every quantized input `cols` values and every output `out.len()` (`out`); the
        // CPU has the kernel's features (`inputs` exist only then).
        unsafe {
            vnni_panel::scaled_rows_in_groups(values, cols, scales, &inputs.inputs[..n], &mut outs[..n], next)
        }
    }
    #[cfg(not(all(feature = "std", target_arch = "x86_64")))]
    {
        let _ = (values, cols, scales, inputs, count, outputs, out, next);
        0
    }
}

/// `sums[r]` for the packed int4 rows of `values` and their groups' multiplier `codes`
/// ([`portable::row_sums_i4`]), the input `xq` prepared by [`widen_input_i8`] in `widened`,
/// `xq.len()` the columns: with VNNI or AVX2 on x86-64, two rows per pass with the
/// `cortex-m-dsp` feature (`AND` and `SMLAD`; Helium two rows per pass, sixteen columns an
/// instruction, for groups of a multiple of 32 columns, else the DSP kernel widening the input
/// itself), four on RV32 (two products a `MUL`), else the portable code. Every kernel gives the
/// same sums (they are exact integers).
#[inline]
pub fn row_sums_i4(values: &[u8], group: usize, codes: &[u8], xq: &[i8], widened: &[u32], sums: &mut [i64]) {
    let _ = widened; // (read by the DSP and RV32 kernels only)
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if has_avx512_vnni() {
            // SAFETY: the CPU has AVX-512 VNNI (with VL) and AVX2, checked just above.
            return unsafe { vnni::evex::row_sums_i4(values, group, codes, xq, sums) };
        }
        if has_avx_vnni() {
            // SAFETY: the CPU has AVX-VNNI and AVX2, checked just above.
            return unsafe { vnni::vex::row_sums_i4(values, group, codes, xq, sums) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { avx::row_sums_i4(values, group, codes, xq, sums) };
        }
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return dsp::row_sums_i4(values, group, codes, xq, widened, sums);
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        if helium::row_sums_i4(values, group, codes, xq, sums) {
            return;
        }
        return dsp::row_sums_i4_widening(values, group, codes, xq, sums);
    }
    #[cfg(target_arch = "riscv32")]
    return rv32::row_sums_i4(values, group, codes, xq, widened, sums);
    #[allow(unreachable_code)]
    portable::row_sums_i4(values, group, codes, xq, sums)
}

/// `acc[c] = Σ_r xq[r] * values[r][c]` (the int8 transposed product's sums,
/// [`portable::vecmat_sums_i8`]), compiled for AVX-512BW or AVX2 on x86-64 when the CPU has
/// them (the same code, the same integers, sixteen or eight columns a register).
#[inline]
pub fn vecmat_sums_i8(xq: &[i8], values: &[i8], cols: usize, acc: &mut [i32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if has_avx512bw() {
            // SAFETY: the CPU has AVX-512F and BW, checked just above.
            return unsafe { avx512::vecmat_sums_i8(xq, values, cols, acc) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { avx::vecmat_sums_i8(xq, values, cols, acc) };
        }
    }
    portable::vecmat_sums_i8(xq, values, cols, acc);
}

/// [`vecmat_sums_i8`] for [`VECMAT_INPUTS`] inputs at once ([`portable::vecmat_sums_each_i8`]),
/// compiled for AVX-512BW or AVX2 on x86-64 when the CPU has them (the same code, the same
/// integers).
#[inline]
pub fn vecmat_sums_each_i8(
    xq: &[&[i8]; VECMAT_INPUTS],
    values: &[i8],
    cols: usize,
    sums: &mut [&mut [i32]; VECMAT_INPUTS],
) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if has_avx512bw() {
            // SAFETY: the CPU has AVX-512F and BW, checked just above.
            return unsafe { avx512::vecmat_sums_each_i8(xq, values, cols, sums) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { avx::vecmat_sums_each_i8(xq, values, cols, sums) };
        }
    }
    portable::vecmat_sums_each_i8(xq, values, cols, sums);
}

// ---- the int8 attention's sums ----------------------------------------------------------------

/// `sums[t] = query · key_t` for `t < sums.len()`, key `t` the first `d_head` bytes at
/// `keys[t * stride..]`, the 16-bit query widened into `words` ([`portable::key_sums_i8`]):
/// Helium four keys a pass (eight columns an instruction), the DSP kernel four keys a pass
/// (whole groups of four columns; the rest portable), AVX2 on x86-64, four keys a pass on
/// RV32. Exact integers: the same sums.
#[inline]
pub fn key_sums_i8(keys: &[i8], stride: usize, d_head: usize, words: &[u32], sums: &mut [i32]) {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::key_sums_i8(keys, stride, d_head, words, sums);
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        let groups = d_head / 4;
        dsp::key_sums_i8(keys, stride, groups, words, sums);
        if 4 * groups < d_head {
            for (t, sum) in sums.iter_mut().enumerate() {
                portable::key_sums_columns(&keys[t * stride..t * stride + d_head], 4 * groups, words, sum);
            }
        }
        return;
    }
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { avx::key_sums_i8(keys, stride, d_head, words, sums) };
    }
    #[cfg(target_arch = "riscv32")]
    return rv32::key_sums_i8(keys, stride, d_head, words, sums);
    #[cfg(all(target_arch = "arm", not(feature = "cortex-m-dsp")))]
    return arm::base::key_sums_i8(keys, stride, d_head, words, sums);
    #[allow(unreachable_code)]
    portable::key_sums_i8(keys, stride, d_head, words, sums)
}

/// The largest of the bits of `|v|` (the sign cleared) over `values`, as unsigned integers,
/// which order as the magnitudes do (a NaN's above infinity's); 0 for no values
/// ([`portable::magnitude_bits`]): Helium four values an instruction, the FPU builds' core
/// registers four values a pass.
#[inline]
pub fn magnitude_bits(values: &[f32]) -> u32 {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::magnitude_bits(values);
    #[cfg(all(
        feature = "cortex-m-dsp",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::magnitude_bits(values);
    #[allow(unreachable_code)]
    portable::magnitude_bits(values)
}

/// The int8 attention's 16-bit query words from the finite values `query` scaled by `inverse`
/// (`int8_attention::QueryWords::quantize`'s rounding and order): Helium four columns an
/// instruction where the columns are whole groups of four and its flushing cannot change a
/// result, the FPU four a pass for whole groups of four. Returns false, with nothing written,
/// where no kernel ran.
#[inline]
pub fn query_halves(query: &[f32], words: &mut [u32], inverse: f32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::query_halves(query, words, inverse);
    #[cfg(all(
        feature = "cortex-m-dsp",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::query_halves(query, words, inverse);
    #[allow(unreachable_code)]
    {
        let _ = (query, words, inverse);
        false
    }
}

/// Whether this build has kernels for [`key_scores_i8`] and [`value_weights`] (Helium, and the
/// FPU of the `cortex-m-dsp` cores): elsewhere the int8 attention keeps its own per-key loops,
/// which the compiler fuses with the rest of each pass.
pub const INT8_ATTENTION_PASSES: bool = cfg!(all(feature = "cortex-m-dsp", target_abi = "eabihf"));

/// The int8 attention's scores from their query · key sums, and their largest
/// ([`portable::key_scores_i8`]): Helium four keys an instruction, the FPU one key a pass.
/// `None` where a kernel's floating point may have given other bits (then `out` holds neither
/// the sums nor the scores: the caller computes them again with the portable code).
#[inline]
pub fn key_scores_i8(
    out: &mut [f32],
    key_scales: &[f32],
    heads: usize,
    terms: &[f32],
    steps: (f32, f32),
    max: f32,
) -> Option<f32> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::key_scores_i8(out, key_scales, heads, terms, steps, max);
    #[cfg(all(
        feature = "cortex-m-dsp",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return Some(fpu::key_scores_i8(out, key_scales, heads, terms, steps, max));
    #[allow(unreachable_code)]
    Some(portable::key_scores_i8(out, key_scales, heads, terms, steps, max))
}

/// The int8 attention's weights of a probability · value sum and their magnitudes
/// ([`portable::value_weights`]): Helium four keys an instruction, the FPU one key a pass.
/// False where a kernel's floating point may have given other bits (then `w` is unspecified and
/// `magnitudes` as it was: the caller computes them again with the portable code).
#[inline]
pub fn value_weights(
    e: &[f32],
    inverse: f32,
    key_scales: (&[f32], usize),
    w: &mut [f32],
    magnitudes: &mut Magnitudes,
) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::value_weights(e, inverse, key_scales, w, magnitudes);
    #[cfg(all(
        feature = "cortex-m-dsp",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    {
        fpu::value_weights(e, inverse, key_scales, w, magnitudes);
        return true;
    }
    #[allow(unreachable_code)]
    {
        portable::value_weights(e, inverse, key_scales, w, magnitudes);
        true
    }
}

/// `out[c] = 0.0 + sums[c] as f32 * step` ([`portable::scaled_sums_i32`]): Helium four columns
/// an instruction, the FPU of the other `cortex-m-dsp` cores eight a pass. The same bits.
#[inline]
pub fn scaled_sums_i32(sums: &[i32], step: f32, out: &mut [f32]) {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::scaled_sums_i32(sums, step, out);
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::scaled_sums_i32(sums, step, out);
    #[allow(unreachable_code)]
    portable::scaled_sums_i32(sums, step, out)
}

/// The int8 attention's 16-bit probability weights in place, from the bits of the finite f32
/// weights in `w` scaled by `inverse` (`int8_attention::ProbabilityWords`'s rounding): Helium
/// four weights an instruction over whole groups of four where its flushing cannot change a
/// result, the FPU four a pass. Returns how many of the first weights it rounded (0 where no
/// kernel ran): the rest are the caller's.
#[inline]
pub fn round_weights(w: &mut [i32], inverse: f32) -> usize {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::round_weights(w, inverse);
    #[cfg(all(
        feature = "cortex-m-dsp",
        target_abi = "eabihf",
        not(feature = "cortex-m-mve")
    ))]
    return fpu::round_weights(w, inverse);
    #[allow(unreachable_code)]
    {
        let _ = (w, inverse);
        0
    }
}

/// [`value_sums_i8`] into zeros, `acc[c] = Σ_t weights[t] · value_t[c]`: the `cortex-m-dsp`
/// cores start the kernels' sums from zeros (Helium sixteen columns a pass, the DSP kernels
/// eight) instead of clearing `acc` first. The same sums. (Inlined into each caller: the float
/// and the integer attention's.)
#[inline(always)]
pub fn value_sums_from_zero_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    #[cfg(feature = "cortex-m-dsp")]
    {
        #[cfg(feature = "cortex-m-mve")]
        let done = helium::value_sums_from_zero_i8(values, stride, weights, acc);
        #[cfg(not(feature = "cortex-m-mve"))]
        let done = dsp::value_sums_from_zero_i8(values, stride, weights, acc);
        if done < acc.len() {
            acc[done..].fill(0);
            value_sums_i8(&values[done..], stride, weights, &mut acc[done..]);
        }
        return;
    }
    #[allow(unreachable_code)]
    {
        acc.fill(0);
        value_sums_i8(values, stride, weights, acc)
    }
}

/// `acc[c] += Σ_t weights[t] · value_t[c]` for `c < acc.len()`, value `t` at
/// `values[t * stride..]` ([`portable::value_sums_i8`]): Helium sixteen columns a pass, the DSP
/// kernel (whole groups of four columns; the rest portable), AVX2 on x86-64, sixteen columns at
/// a time on RV32. Exact integers: the same sums.
#[inline]
pub fn value_sums_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::value_sums_i8(values, stride, weights, acc);
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        let body = acc.len() / 4 * 4;
        dsp::value_sums_i8(values, stride, weights, acc);
        if body < acc.len() {
            portable::value_sums_i8(&values[body..], stride, weights, &mut acc[body..]);
        }
        return;
    }
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { avx::value_sums_i8(values, stride, weights, acc) };
    }
    #[cfg(target_arch = "riscv32")]
    return rv32::value_sums_i8(values, stride, weights, acc);
    #[cfg(all(target_arch = "arm", not(feature = "cortex-m-dsp")))]
    return arm::base::value_sums_i8(values, stride, weights, acc);
    #[allow(unreachable_code)]
    portable::value_sums_i8(values, stride, weights, acc)
}

/// [`key_sums_i8`] for several queries: `sums[b][t] = query_b · key_t` for `t` below the
/// shortest output, `query_b` the words `words[b]`. With AVX-512BW on x86-64 (`std` feature)
/// each block of sixteen keys is widened once for all the queries; else one [`key_sums_i8`] per
/// query. Integer sums: the same bits either way.
#[inline]
pub fn key_sums_each_i8(
    keys: &[i8],
    stride: usize,
    d_head: usize,
    words: &[&[u32]],
    sums: &mut [&mut [i32]],
) {
    // SAFETY: the CPU has AVX-512F, BW and VL, checked first.
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx512bw() && unsafe { avx512_attention::key_sums_each_i8(keys, stride, d_head, words, sums) } {
        return;
    }
    for (words, sums) in words.iter().zip(sums.iter_mut()) {
        key_sums_i8(keys, stride, d_head, words, sums);
    }
}

/// [`value_sums_i8`] for several weight lists: `accs[b][c] += Σ_t weights[b][t] · value_t[c]`
/// for `t` below the shortest list and `c` below the shortest accumulator. With AVX-512BW on
/// x86-64 (`std` feature) each pair of values is widened once for four lists; else one
/// [`value_sums_i8`] per list. Integer sums: the same bits either way.
#[inline]
pub fn value_sums_each_i8(values: &[i8], stride: usize, weights: &[&[i32]], accs: &mut [&mut [i32]]) {
    let keys = weights.iter().map(|w| w.len()).min().unwrap_or(0);
    let columns = accs.iter().map(|a| a.len()).min().unwrap_or(0);
    // SAFETY: the CPU has AVX-512F, BW and VL, checked first.
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx512bw() && unsafe { avx512_attention::value_sums_each_i8(values, stride, weights, accs) } {
        return;
    }
    for (weights, acc) in weights.iter().zip(accs.iter_mut()) {
        value_sums_i8(values, stride, &weights[..keys], &mut acc[..columns]);
    }
}

/// `largest[b]` and `sums[b]` as [`Magnitudes`] adds them up over `rows[b]` (at most
/// [`SIDE_BY_SIDE`] rows, taken up to the shortest's length), from the values given
/// ([`portable::magnitudes_each_f32`]): with AVX-512F on x86-64 one lane a row. The same bits.
#[inline]
pub fn magnitudes_each_f32(
    rows: &[&mut [f32]],
    largest: &mut [f32; SIDE_BY_SIDE],
    sums: &mut [f32; SIDE_BY_SIDE],
) {
    // SAFETY: the CPU has AVX-512F, BW and VL, checked first.
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx512bw() && unsafe { avx512_attention::magnitudes_each_f32(rows, largest, sums) } {
        return;
    }
    portable::magnitudes_each_f32(rows, largest, sums)
}

// ---- LayerNorm and the softmax ----------------------------------------------------------------

/// The LayerNorm sums of a block of up to [`LAYER_NORM_ROWS`] rows of `width`
/// ([`portable::layer_norm_sums_f32`]: each row's sum, then its sum of squared deviations, in
/// column order from `-0.0`): one lane a row with AVX-512F on x86-64 (`std` feature, chosen at
/// run time). The same bits.
#[inline]
pub fn layer_norm_sums_f32(
    block: &[f32],
    width: usize,
    means: &mut [f32; LAYER_NORM_ROWS],
    vars: &mut [f32; LAYER_NORM_ROWS],
) {
    if width == 0 {
        return;
    }
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if has_avx512f() {
        // SAFETY: `width` is not zero and the CPU has AVX-512F, checked just above.
        return unsafe { avx512::layer_norm_sums_f32(block, width, means, vars) };
    }
    portable::layer_norm_sums_f32(block, width, means, vars)
}

/// [`portable::sum_f32`]: LayerNorm's first sum, eight values a pass with the FPU of the
/// `cortex-m-dsp` cores. The same bits (the same additions in the same order).
#[inline]
pub fn sum_f32(x: &[f32]) -> f32 {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf"
    ))]
    return fpu::sum_f32(x);
    #[allow(unreachable_code)]
    portable::sum_f32(x)
}

/// [`portable::squared_deviations_f32`]: LayerNorm's second sum, eight values a pass with the
/// FPU of the `cortex-m-dsp` cores. The same bits.
#[inline]
pub fn squared_deviations_f32(x: &[f32], mean: f32) -> f32 {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf"
    ))]
    return fpu::squared_deviations_f32(x, mean);
    #[allow(unreachable_code)]
    portable::squared_deviations_f32(x, mean)
}

/// [`portable::normalize_f32`]: LayerNorm's last step, eight values a pass with the FPU of the
/// `cortex-m-dsp` cores. The same bits.
#[inline]
pub fn normalize_f32(x: &mut [f32], moments: (f32, f32), gain: &[f32], bias: &[f32]) {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf"
    ))]
    return fpu::normalize_f32(x, moments, gain, bias);
    #[allow(unreachable_code)]
    portable::normalize_f32(x, moments, gain, bias)
}

/// `values[i] = exp(values[i] - max)` in place, returning `sum` plus all of them added in order
/// ([`portable::softmax_exps_sum_f32`]): `libm::expf`'s main path in assembly with the FPU of
/// the `cortex-m-dsp` cores (not `fast-math`), four values an instruction with Helium. The same
/// bits.
#[inline]
pub fn softmax_exps_sum_f32(values: &mut [f32], max: f32, sum: f32) -> f32 {
    #[cfg(all(
        feature = "cortex-m-dsp",
        feature = "cortex-m-large-kernels",
        target_abi = "eabihf",
        not(feature = "fast-math")
    ))]
    {
        #[cfg(feature = "cortex-m-mve")]
        return helium::softmax_exps_sum_f32(values, max, sum);
        #[allow(unreachable_code)]
        return fpu::softmax_exps_sum_f32(values, max, sum);
    }
    #[allow(unreachable_code)]
    portable::softmax_exps_sum_f32(values, max, sum)
}

/// Whether this build has a kernel for [`softmax_exps_f32`] that takes values eight or more at
/// a time (x86-64 with `std`, not `fast-math`; it is then chosen at run time): elsewhere the
/// softmaxes keep their one loop.
pub const SOFTMAX_EXPS: bool = cfg!(all(
    feature = "std",
    target_arch = "x86_64",
    not(feature = "fast-math")
));

/// `values[i] = exp(values[i] - max)` ([`portable::softmax_exps_f32`], `libm::expf`'s bits):
/// with `std` on x86-64 (not `fast-math`), sixteen lanes at a time with AVX-512F, eight with
/// AVX2, on each chunk of eight (`values` a multiple of eight long there). The softmax adds
/// them up in order.
#[inline]
pub fn softmax_exps_f32(values: &mut [f32], max: f32) {
    #[cfg(all(feature = "std", target_arch = "x86_64", not(feature = "fast-math")))]
    {
        if has_avx512f() && has_avx2() {
            // SAFETY: the CPU has AVX-512F, AVX2 and F16C (`has_avx512f` checks F16C), checked
            // just above.
            return unsafe { avx512::softmax_exps_f32(values, max) };
        }
        if has_avx2() && has_avx_f16c() {
            let (eights, rest) = values.split_at_mut(values.len() / 8 * 8);
            for chunk in eights.chunks_exact_mut(8) {
                if let Ok(eight) = <&mut [f32; 8]>::try_from(chunk) {
                    // SAFETY: the CPU has AVX2 and F16C, checked just above.
                    unsafe { avx::softmax_exp8(eight, max) };
                }
            }
            return portable::softmax_exps_f32(rest, max);
        }
    }
    portable::softmax_exps_f32(values, max)
}

// The integer arithmetic's per-value passes (`integer`, `fixed_point`, `session::integer`).
// Each returns `None` (`false`, or 0 done) where this build has no kernel for it: the caller
// then runs its own scalar definition, which the kernel's bits equal. On the builds without
// one the call folds away, so those cores run the scalar code as before.

/// Whether this build has kernels for the integer log-softmax's passes (the largest value,
/// [`sum_range_i32`], and the exponentials, [`exp_scores_i32`]: Helium's, and the DSP
/// extension's a value at a time).
pub const INTEGER_PASSES: bool = cfg!(feature = "cortex-m-dsp");

/// Whether this build has a kernel for the integer LayerNorm's last step ([`layer_norm_i32`]:
/// Helium's, and the DSP extension's a value at a time).
pub const INTEGER_LAYER_NORM: bool = cfg!(feature = "cortex-m-dsp");

/// Whether this build has a kernel for the attention scores ([`attention_scores_i32`]: Helium's,
/// and the DSP extension's a key at a time).
pub const INTEGER_SCORES: bool = cfg!(feature = "cortex-m-dsp");

/// Whether this build's attention scores take a row's keys where they lie
/// ([`attention_scores_row_i32`]: the DSP extension's without Helium) rather than gathered
/// ([`attention_scores_i32`]).
pub const INTEGER_SCORES_ROWS: bool = cfg!(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")));

/// `x[i] = integer::act_shift(x[i], act[i], biased_top)` in place for each `i` (as many as
/// the shorter); the largest magnitude after. Helium four values an instruction, DSP one at a
/// time.
#[inline]
pub fn act_shifts_i32(x: &mut [i32], act: &[f32], biased_top: u32) -> Option<u32> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return Some(helium::act_shift(x, act, biased_top));
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return Some(dsp_integer::act_shift(x, act, biased_top));
    #[allow(unreachable_code)]
    {
        let _ = (x, act, biased_top);
        None
    }
}

/// `out[i] = round(x[i] · wide / 2^32).clamp(-127, 127)` (halves up) for each `i`: the
/// quantization of `fixed_point::PreparedRescale` for a shift of at most 32. Helium four
/// values an instruction (`VRMULH`), DSP one a `SMMULR`; false where no kernel ran.
#[inline]
pub fn quantize_wide_i32(x: &[i32], out: &mut [i8], wide: i32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium::quantize_rmulh(x, out, wide);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::quantize_wide(x, out, wide);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (x, out, wide);
        false
    }
}

/// [`quantize_wide_i32`] that also writes `widened` as [`widen_input_i8`] makes it of `out`
/// (the same words), in one pass: DSP without Helium (where the row sums read `widened`); false
/// where no kernel ran or `widened` is too short (nothing written).
#[inline]
pub fn quantize_widen_i32(x: &[i32], out: &mut [i8], widened: &mut [u32], wide: i32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return dsp_integer::quantize_widen(x, out, widened, wide);
    #[allow(unreachable_code)]
    {
        let _ = (x, out, widened, wide);
        false
    }
}

/// `y[i] = apply(scales[i].to_bits(), y[i])` for each `i`, `apply` being
/// `fixed_point::ScaledByBits::apply` of a rescale of mantissa `sm` and `k` in `33..=254`:
/// Helium four rows an instruction where one `VRMULH` gives the exact rounding, DSP a row a
/// `SMMULR`, `apply` for the others. `exponents`: bounds on the scales' biased exponents (the
/// sign bit included), which spare Helium a pass over the scales. False where no kernel ran
/// (`y` as it was).
#[inline]
pub fn scaled_by_bits_i32(
    scales: &[f32],
    y: &mut [i32],
    (sm, k): (u32, i32),
    exponents: Option<(i32, i32)>,
    apply: impl Fn(u32, i32) -> i32,
) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium::scaled_by_bits(scales, y, (sm, k), exponents, apply);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::scaled_by_bits(scales, y, (sm, k), exponents, apply);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (scales, y, sm, k, exponents, apply);
        false
    }
}

/// The integer LayerNorm's last step: `out[i] = finish(gains[i], apply(gains[i] & 0x7FFF_FFFF,
/// (x[i] << shift) - mean), biases[i])` for each `i`, `apply` as in [`scaled_by_bits_i32`].
/// Helium four values an instruction, DSP one at a time; false where no kernel ran (`out` as it
/// was). `bounds`: the gains' smallest and largest biased exponent (of their magnitudes) and
/// the largest deviation's magnitude, which let Helium take a row without checks.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn layer_norm_i32(
    x: &[i32],
    gains: &[u32],
    biases: &[i32],
    out: &mut [i32],
    deviations: (u32, i32),
    rescale: (u32, i32),
    bounds: Option<((i32, i32), u32)>,
    apply: impl Fn(u32, i32) -> i32,
    finish: impl Fn(u32, i32, i32) -> i32,
) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium::layer_norm(x, gains, biases, out, deviations, rescale, bounds, apply, finish);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        let exponents = bounds.map(|(exponents, _)| exponents);
        dsp_integer::layer_norm(
            x, gains, biases, out, deviations, rescale, exponents, apply, finish,
        );
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (x, gains, biases, out, deviations, rescale, bounds, apply, finish);
        false
    }
}

/// `(Σ x, min x, max x)` of some values `x`, the sum exact in 64 bits. Helium four values an
/// instruction, DSP one at a time (`SMLAL`); `None` where no kernel ran, or for no values.
#[inline]
pub fn sum_range_i32(x: &[i32]) -> Option<(i64, i32, i32)> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::sum_range(x);
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return dsp_integer::sum_range(x);
    #[allow(unreachable_code)]
    {
        let _ = x;
        None
    }
}

/// `Σ c²` of `c = round(((v << shift) - mean) / 2^s)` (halves up) over `v` in `x`, for `s` in
/// `1..=31`, every `(v << shift) - mean` within `i32` and every `|c| ≤ 2^15`. Helium four
/// values an instruction, DSP one at a time for `s ≥ 2` (`SMMULR`, `SMLAL`); `None` where no
/// kernel ran.
#[inline]
pub fn squares_i32(x: &[i32], shift: u32, mean: i32, s: u32) -> Option<u64> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return Some(helium::squares(x, shift, mean, s));
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return (s >= 2).then(|| dsp_integer::squares(x, shift, mean, s));
    #[allow(unreachable_code)]
    {
        let _ = (x, shift, mean, s);
        None
    }
}

/// `qb[i] = q[i].saturating_add(b[i])` for each `i`; the largest `|qb[i]|`. Helium four
/// columns an instruction, DSP one at a time (`QADD`); `None` where no kernel ran.
#[inline]
pub fn query_sums_i32(q: &[i32], b: &[i32], qb: &mut [i32]) -> Option<u32> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return Some(helium::query_sums(q, b, qb));
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return Some(dsp_integer::query_sums(q, b, qb));
    #[allow(unreachable_code)]
    {
        let _ = (q, b, qb);
        None
    }
}

/// The query's 16-bit words ([`portable::query_words`]' layout) of `round(v / 2^e)` for the
/// whole groups of eight values of `qb`: Helium eight columns an instruction, DSP a column a
/// `SMMULR` and two a `PKHBT`. Returns how many groups it packed (0 where no kernel ran): the
/// rest are the caller's.
#[inline]
pub fn query_pack_i32(qb: &[i32], words: &mut [u32], e: u32) -> usize {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        let octets = (qb.len() / 8).min(words.len() / 4);
        helium::query_pack(qb, words, octets, e);
        return octets;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        let octets = (qb.len() / 8).min(words.len() / 4);
        dsp_integer::query_pack(qb, words, octets, e);
        return octets;
    }
    #[allow(unreachable_code)]
    {
        let _ = (qb, words, e);
        0
    }
}

/// `integer::attention_score_of_small` of each key in place (`scores[i]` its content sum,
/// `ce[i]` its power of two, `position[i]` and `pe[i]` the position sum's), for the rescale
/// of `mantissa` and `shift` at `e = 0`; the largest score. Helium four keys an instruction
/// where one `VRMULH` gives the exact rounding, DSP a key a `SMMULR`, `slow(i, score)` (the
/// scalar definition) for the others; at most 64 keys. `None` where no kernel ran.
#[inline]
pub fn attention_scores_i32(
    scores: &mut [i32],
    exponents: (&[i32], &[i32], &[i32]),
    rescale: (u32, i32),
    slow: impl Fn(usize, i32) -> i32,
) -> Option<i32> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return Some(helium::scores(scores, exponents, rescale, slow));
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return Some(dsp_integer::scores(scores, exponents, rescale, slow));
    #[allow(unreachable_code)]
    {
        let _ = (scores, exponents, rescale, slow);
        None
    }
}

/// `integer::attention_score_of_small` of each key `k` of a row in place (`scores[k]` its
/// content sum), read where they lie: its power of two `ce + ring[a_k]` (the bits of the
/// memory's ring: `a_k` is `at` plus `k` times `heads`, wrapping at the ring's end), its
/// position sum `positions[d_k]` and that sum's power of two `pe + exponents[d_k · row]`,
/// `d_k = min(nearest - k, far)` (`far` the last distance of `positions`; `nearest + 1` keys at
/// least), for the rescale of `mantissa` and `shift` at `e = 0`; the largest score. The DSP
/// extension without Helium in runs of keys that neither wrap nor pass `far`, a key a `SMMULR`
/// ([`INTEGER_SCORES_ROWS`]), `slow(k, score)` (the scalar definition) for the others. `None`
/// where no kernel ran (none, or the tables do not hold what the row reads: `scores` as they
/// were).
#[inline]
pub fn attention_scores_row_i32(
    scores: &mut [i32],
    keys: (&[f32], usize, usize, i32),
    positions: (&[i32], &[u8], usize, i32),
    nearest: usize,
    rescale: (u32, i32),
    slow: impl Fn(usize, i32) -> i32,
) -> Option<i32> {
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return arm::dsp_scores::scores(scores, keys, positions, nearest, rescale, slow);
    #[allow(unreachable_code)]
    {
        let _ = (scores, keys, positions, nearest, rescale, slow);
        None
    }
}

/// `scores[i] = fixed_point::exp_neg(integer::to_exp_input(largest, scores[i], frac))` for each
/// score, `frac` in `0..=24`, `table` being `fixed_point::EXP2_TABLE`; their sum. Helium four
/// scores an instruction, DSP one at a time; `None` where no kernel ran (`scores` as they
/// were).
#[inline]
pub fn exp_scores_i32(scores: &mut [i32], largest: i32, frac: u32, table: &[u32; 257]) -> Option<u64> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return Some(helium::exp_scores(scores, largest, frac, table));
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return (frac <= 24).then(|| dsp_integer::exp_scores(scores, largest, frac, table));
    #[allow(unreachable_code)]
    {
        let _ = (scores, largest, frac, table);
        None
    }
}

/// For each key: `p[i]` (its `e_j`, `0..=2^30`) becomes its probability
/// `min(round(⌊e m / 2^32⌋ / 2^t), 32767)` shifted right by `min(max(e_max - ve[i], 0), 16)`,
/// rounded, or 0 where `e_j < 2^14`. Helium four keys an instruction, DSP one at a time
/// (`UMULL`, `USAT`); false where no kernel ran (`p` as it was).
#[inline]
pub fn probabilities_i32(p: &mut [i32], ve: &[i32], normalise: (u32, u32), e_max: i32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium::probabilities(p, ve, normalise, e_max);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::probabilities(p, ve, normalise, e_max);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (p, ve, normalise, e_max);
        false
    }
}

/// `out[k] = words[k · stride].to_bits() as i32 + add` for each `k < out.len()` (the exponents
/// of a memory's ring: one a slot, `stride` apart): Helium four keys an instruction (a gather
/// load), DSP four keys a pass; false where no kernel ran (`out` as it was).
#[inline]
pub fn exponents_strided_i32(out: &mut [i32], words: &[f32], stride: usize, add: i32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium::gather_strided(out, words, stride, add);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::gather_strided(out, words, stride, add);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (out, words, stride, add);
        false
    }
}

/// For each `k < poss.len()` (and `pes.len()`, at most `distance + 1`), with
/// `d = distance - k` (`distance < positions.len()`, `distance · row < exponents.len()`):
/// `poss[k] = positions[d]` and `pes[k] = pe + exponents[d · row]` (the position sums and
/// their powers of two by distance, key by key). Helium four keys an instruction (gather
/// loads), DSP two keys a pass; false where no kernel ran (`poss`, `pes` as they were).
#[inline]
pub fn positions_i32(
    outs: (&mut [i32], &mut [i32]),
    table: (&[i32], &[u8], usize),
    distance: usize,
    pe: i32,
) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium::gather_positions(outs, table, distance, pe);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::gather_positions(outs, table, distance, pe);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (outs, table, distance, pe);
        false
    }
}

/// `max(0, max ve[i])` over the keys (as many as the shorter of the two) whose `e[i]` (each in
/// `0..=2^30`) is at least `2^14` and has a probability, `has(e)` (true from some `e` on, and
/// for every larger one): a pass over the keys (Helium four keys an instruction, DSP a key at a
/// time), the largest `ve` among the keys from a threshold on and the largest `e` among those of
/// it, that one tried by `has` (the next pass from past it where it has none); `None` where no
/// kernel ran.
#[inline]
pub fn top_exponent_i32(e: &[i32], ve: &[i32], has: impl Fn(u32) -> bool) -> Option<i32> {
    #[cfg(feature = "cortex-m-dsp")]
    {
        #[cfg(not(feature = "cortex-m-mve"))]
        use dsp_integer::top_exponent;
        #[cfg(feature = "cortex-m-mve")]
        use helium::top_exponent;
        let mut threshold = 1u32 << 14;
        loop {
            // (a key of exponent `top` at or above the threshold: `largest` is one)
            let Some((top, largest)) = top_exponent(e, ve, threshold) else {
                return Some(0);
            };
            if has(largest) {
                return Some(top.max(0));
            }
            // none of `e ≤ largest` has a probability; `largest ≤ 2^30`
            threshold = largest + 1;
        }
    }
    #[allow(unreachable_code)]
    {
        let _ = (e, ve, has);
        None
    }
}

/// `out[i] = round_shift_i32(sums[i], -amount)` for `amount` in `-31..=0`, `sums[i] << amount`
/// saturated to the `i32` range for `amount` in `1..=31` (the attention output's shift by the
/// values' powers of two), as many as the shorter of the two: Helium four values an instruction
/// (`VQRSHL`), DSP four an `LDM` and an `STM`; false where no kernel ran or `amount` is out of
/// range (`out` as it was).
#[inline]
pub fn shift_sums_i32(sums: &[i32], out: &mut [i32], amount: i32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    if (-31..=31).contains(&amount) {
        helium::shift_sums(sums, out, amount);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    if (-31..=31).contains(&amount) {
        dsp_integer::shift_sums(sums, out, amount);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (sums, out, amount);
        false
    }
}

/// `dst[i] = src[i]`, as many as the shorter of the two (the attention's new `h` kept as the
/// residual): Helium four values an instruction, DSP eight an `LDM` and an `STM`, elsewhere
/// `copy_from_slice`. The same values.
#[inline]
pub fn copy_i32(dst: &mut [i32], src: &[i32]) {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium::copy(dst, src);
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return dsp_integer::copy(dst, src);
    #[allow(unreachable_code)]
    {
        let n = dst.len().min(src.len());
        dst[..n].copy_from_slice(&src[..n]);
    }
}

/// `x[i] = x[i].saturating_sub(a).saturating_sub(b)` for each value. Helium four values an
/// instruction, DSP one a `QSUB`; false where no kernel ran (`x` as it was).
#[inline]
pub fn subtract_twice_i32(x: &mut [i32], a: i32, b: i32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium::sub_sub(x, a, b);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::sub_sub(x, a, b);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (x, a, b);
        false
    }
}

/// The power-of-two quantization of `x` into `out` (as many as the shorter): `e =
/// exponent(largest |x[i]|)` (clamped to `0..=31`), then `out[i] = round(x[i] / 2^e)` (halves
/// up; `x[i]` for `e = 0`) cut to its low byte, as the int8 memory stores a head's keys and
/// values. Helium four values an instruction (`VMAXAV`, `VRSHL`), DSP four a word; `None`
/// where no kernel ran (`out` as it was).
#[inline]
pub fn pow2_int8_i32(x: &[i32], out: &mut [i8], exponent: impl Fn(u32) -> i32) -> Option<i32> {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return Some(helium_integer::pow2_int8(x, out, exponent));
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return Some(dsp_integer::pow2_int8(x, out, exponent));
    #[allow(unreachable_code)]
    {
        let _ = (x, out, exponent);
        None
    }
}

/// `v[i] = v[i].saturating_add(b[i]).max(0)` for each `i` (as many as the shorter): a bias and
/// the ReLU. Helium four values an instruction, DSP one a `QADD` and a `USAT`; false where no
/// kernel ran (`v` as it was).
#[inline]
pub fn bias_relu_i32(v: &mut [i32], b: &[i32]) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium_integer::bias_relu(v, b);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::bias_relu(v, b);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (v, b);
        false
    }
}

/// `h[i] = h[i].saturating_add(o[i].saturating_add(b[i]))` for each `i` (as many as the
/// shortest): a bias and the residual. Helium four values an instruction, DSP one two `QADD`s;
/// false where no kernel ran (`h` as it was).
#[inline]
pub fn add_sums_i32(h: &mut [i32], o: &[i32], b: &[i32]) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium_integer::add_sums(h, o, b);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::add_sums(h, o, b);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (h, o, b);
        false
    }
}

/// `y[i] = y[i].saturating_add(x[i])` for each `i` (as many as the shorter): a residual.
/// Helium four values an instruction, DSP one a `QADD`; false where no kernel ran (`y` as it
/// was).
#[inline]
pub fn add_saturating_i32(y: &mut [i32], x: &[i32]) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        helium_integer::add_saturating(y, x);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    {
        dsp_integer::add_saturating(y, x);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (y, x);
        false
    }
}

/// `y[i] = y[i].saturating_add(fixed(b[i]))` for each `i` (as many as the shorter), `fixed`
/// being `fixed_point::fixed_of_f32(_, frac)`, `frac ≤ 100`: Helium four values an instruction,
/// DSP one at a time, where the mantissa is shifted right (`150 - exponent - frac ≥ 1`: zeros
/// and subnormals too), `rare(bits)` (the fixed-point value of the bits) for the others. False where no kernel ran
/// (`y` as it was).
#[inline]
pub fn add_fixed_f32(y: &mut [i32], b: &[f32], frac: u32, rare: impl Fn(u32) -> i32) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    if frac <= 100 {
        helium_integer::add_fixed(y, b, frac, rare);
        return true;
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    if frac <= 100 {
        dsp_integer::add_fixed(y, b, frac, rare);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (y, b, frac, rare);
        false
    }
}

/// An embedding row's columns into `out` (as many as the shortest of the three):
/// `out[i] = round(q[i] · m / 2^s)` (halves up), `m · 2^-s` the product `Multiplier::times`
/// makes of the row's multiplier (`mantissa` in `[2^30, 2^31)`, `shift`) and the multiplier of
/// the column's activation scale `act[i]` (its 24-bit mantissa `· 2^7`, shift `157 -
/// exponent`): `m` the top 31 bits of the 62-bit product of the mantissas. Helium four columns
/// an instruction, DSP one at a time (a `UMULL` and a `SMMULR`). True where the kernel made
/// every column (a positive scale of exponent `95..=156`, `s` in `8..=47`); false where no
/// kernel ran or some column is not the usual one (`out` unspecified: the caller's scalar code
/// makes the row).
#[inline]
pub fn embedding_columns_i32(act: &[f32], q: &[i8], out: &mut [i32], multiplier: (u32, u32)) -> bool {
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    return helium_integer::embedding_columns(act, q, out, multiplier);
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    return dsp_integer::embedding_columns(act, q, out, multiplier);
    #[allow(unreachable_code)]
    {
        let _ = (act, q, out, multiplier);
        false
    }
}

#[cfg(test)]
mod tests {
    /// The fused order is one chain in column order: a 1 added to 1e8 is lost (f32's spacing
    /// there is 8) before -1e8 cancels the 1e8, so the sum is 0. Any order that adds the 1 last,
    /// or in a lane of its own (as sixteen lanes did), gives 1.
    #[test]
    fn the_fused_order_is_one_chain_in_column_order() {
        use super::portable::{dot_f32, dot_fma_f32};
        let row = [1e8f32, 1.0, -1e8];
        assert_eq!(dot_fma_f32(&row, &[1.0; 3]), 0.0);
        let reversed = [-1e8f32, 1.0, 1e8];
        assert_eq!(dot_fma_f32(&reversed, &[1.0; 3]), 0.0);
        let one_last = [1e8f32, -1e8, 1.0];
        assert_eq!(dot_fma_f32(&one_last, &[1.0; 3]), 1.0);
        // fused: (1 + 2^-23)(1 - 2^-23) = 1 - 2^-46 meets the running sum -1 unrounded, so the
        // sum is -2^-46, where a multiply then an add rounds the product to 1 first and gives 0
        let (a, b) = (1.0 + f32::EPSILON, 1.0 - f32::EPSILON);
        assert_eq!(dot_fma_f32(&[-1.0, a], &[1.0, b]), -1.0 / (1u64 << 46) as f32);
        assert_eq!(dot_f32(&[-1.0, a], &[1.0, b]), 0.0);
        // the kernels chosen at run time give the same bits as the reference
        let weight: [f32; 9] = core::array::from_fn(|i| [row, reversed, one_last][i / 3][i % 3]);
        let (mut y0, mut y1) = ([f32::NAN; 3], [f32::NAN; 3]);
        super::matmul_fma_f32(&weight, &[&[1.0; 3], &[1.0; 3]], &mut [&mut y0, &mut y1]);
        assert_eq!((y0, y1), ([0.0, 0.0, 1.0], [0.0, 0.0, 1.0]));
    }
}
