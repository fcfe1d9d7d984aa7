//! Numeric kernels. `scalar` is the reference every faster kernel must match.
//!
//! Each kernel states its shapes: `W (rows, cols) @ x (cols) -> y (rows)`. Slices are taken
//! at the lengths the shapes say; callers pass buffers of exactly those lengths.

pub mod scalar;

pub mod fast_math;

pub mod fma;

#[cfg(feature = "cortex-m-dsp")]
pub mod cortex_m;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod x86;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod vnni;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod vnni_tiles;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod amx;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod avx512;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod x86_fma;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod attention_avx512;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;

pub use scalar::*;

/// The instruction-set extensions this CPU has that the kernels choose from at run time
/// (feature `std`), by name: what a benchmark ran with. Empty where the kernels choose none at
/// run time (NEON on aarch64 is always built in; `SDOT` is chosen).
#[cfg(feature = "std")]
pub fn run_time_extensions() -> std::vec::Vec<&'static str> {
    let mut chosen = std::vec::Vec::new();
    #[cfg(target_arch = "x86_64")]
    for (name, present) in [
        ("AVX+F16C", x86::has_avx_f16c()),
        ("AVX2", x86::has_avx2()),
        ("FMA", x86_fma::has_avx2_fma()),
        ("AVX-512F", avx512::has_avx512f()),
        ("AVX-512 VNNI", vnni::has_avx512_vnni()),
        ("AVX-VNNI", vnni::has_avx_vnni()),
        ("AMX-INT8", amx::has_amx_int8()),
    ] {
        if present {
            chosen.push(name);
        }
    }
    #[cfg(target_arch = "aarch64")]
    if aarch64::has_dotprod() {
        chosen.push("SDOT");
    }
    chosen
}

/// Asks the caches for the share `share` of `parts` equal shares of `items`' bytes (whole
/// 64-byte lines), so that weights read later do not wait for memory; nothing where the target
/// has no prefetch this crate uses. It reads nothing into the program.
#[inline]
pub(crate) fn prefetch_share<T>(items: &[T], share: core::ops::Range<usize>, parts: usize) {
    prefetch_share_into::<T, 1>(items, share, parts);
}

/// [`prefetch_share`] into the cache level `LEVEL` (1 or 2) and those below it: the second
/// for lines the first would lose to other reads before they are used.
#[inline]
pub(crate) fn prefetch_share_into<T, const LEVEL: u8>(
    items: &[T],
    share: core::ops::Range<usize>,
    parts: usize,
) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        const LINE: usize = 64;
        let bytes = core::mem::size_of_val(items);
        let lines = bytes.div_ceil(LINE);
        let parts = parts.max(1);
        for line in share.start * lines / parts..(share.end * lines / parts).min(lines) {
            // SAFETY: `line * LINE < bytes`, so the address is inside `items`; a prefetch reads
            // nothing into the program and never faults.
            unsafe {
                let at = items.as_ptr().cast::<i8>().add(line * LINE);
                if LEVEL == 1 {
                    _mm_prefetch::<{ _MM_HINT_T0 }>(at);
                } else {
                    _mm_prefetch::<{ _MM_HINT_T1 }>(at);
                }
            }
        }
    }
    #[cfg(not(all(feature = "std", target_arch = "x86_64")))]
    let _ = (items, share, parts);
}

/// Rows of `cols` elements at `stride` that fit in `len` elements, at most `wanted`.
#[allow(dead_code)] // the SIMD kernels' (x86-64 with std, aarch64)
pub(crate) fn rows_that_fit(len: usize, stride: usize, cols: usize, wanted: usize) -> usize {
    if len < cols {
        return 0;
    }
    match (len - cols).checked_div(stride) {
        Some(more) => wanted.min(1 + more),
        None => wanted, // stride 0: every row is the first
    }
}

/// `sum a[i] * b[i]` in i32: the Cortex-M DSP kernel with the `cortex-m-dsp` feature, AVX2 on
/// x86-64 with the `std` feature when the CPU has it, else the scalar one. All give the same bits.
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(feature = "cortex-m-dsp")]
    return cortex_m::dot_i8(a, b);
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx2() {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { x86::dot_i8(a, b) };
    }
    #[cfg(not(feature = "cortex-m-dsp"))]
    return scalar::dot_i8(a, b);
}

/// `W (rows, cols) @ x (cols) -> y (rows)` for f32 weights, `rows = y.len()`: four rows per
/// pass with the `cortex-m-dsp` feature on a core with an FPU (`eabihf`), sixteen with AVX on
/// x86-64 (`std` feature, chosen at run time), eight with NEON on aarch64, else one. Same bits
/// every way.
#[inline]
pub fn matvec_f32_rows(weight: &[f32], x: &[f32], y: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { x86::dots(weight, x.len(), x, y) };
    }
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    cortex_m::matvec_f32(weight, x, y);
    #[cfg(target_arch = "aarch64")]
    aarch64::dots_each(weight, x.len(), &[x], &mut [y]);
    #[cfg(not(any(target_arch = "aarch64", all(feature = "cortex-m-dsp", target_abi = "eabihf"))))]
    scalar::matvec_f32(weight, x, y);
}

/// `out[r] = x · rows[r * stride..][..x.len()]` for `r < out.len()` (f32 rows at a stride: the
/// cached keys of one head): four rows per pass with `cortex-m-dsp` on an FPU, sixteen with AVX
/// on x86-64, eight with NEON on aarch64, else one. The bits of [`dot`]`(x, row)` for each row.
#[inline]
pub fn dots_strided(rows: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { x86::dots(rows, stride, x, out) };
    }
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    cortex_m::dots_strided(rows, stride, x, out);
    #[cfg(target_arch = "aarch64")]
    aarch64::dots_each(rows, stride, &[x], &mut [out]);
    #[cfg(not(any(target_arch = "aarch64", all(feature = "cortex-m-dsp", target_abi = "eabihf"))))]
    for (r, o) in out.iter_mut().enumerate() {
        *o = scalar::dot(x, &rows[r * stride..r * stride + x.len()]);
    }
}

/// The x86-64 kernels of [`dots_strided_each`] for f32 or f16 rows: AVX-512F for three inputs
/// or more, else AVX with F16C; `false`, with nothing written, on a CPU with neither. Where the
/// CPU splits 512-bit operations in two ([`avx512::splits_512_bit_operations`]), the AVX tiles
/// take the shapes they apply to. Every kernel gives the same bits.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[inline]
fn dots_each_x86<T: x86::RowElement>(
    rows: &[T],
    stride: usize,
    xs: &[&[f32]],
    outs: &mut [&mut [f32]],
) -> bool {
    let tiles_first = || {
        let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
        x86::takes_tiles(xs.len().min(outs.len()), cols) && avx512::splits_512_bit_operations()
    };
    if xs.len() > 2 && avx512::has_avx512f() && !tiles_first() {
        // SAFETY: the CPU has AVX-512F and F16C, checked just above.
        unsafe { avx512::dots_four_inputs(rows, stride, xs, outs) };
        return true;
    }
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        unsafe { x86::dots_each(rows, stride, xs, outs) };
        return true;
    }
    false
}

/// [`dots_strided`] for several inputs of one length (the queries of one head against its
/// cached keys): `outs[p][r] = xs[p] · rows[r * stride..][..cols]`, `cols` the shortest input's
/// length, for the rows of the shortest output. With AVX-512F on x86-64 and three inputs or
/// more, sixteen rows a pass (four a register) against four inputs; with AVX (NEON on aarch64) each
/// block of rows is read once for all the inputs; else one call per input. The bits of one
/// [`dots_strided`] per input.
#[inline]
pub fn dots_strided_each(rows: &[f32], stride: usize, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if dots_each_x86(rows, stride, xs, outs) {
        return;
    }
    #[cfg(target_arch = "aarch64")]
    aarch64::dots_each(rows, stride, xs, outs);
    #[cfg(not(target_arch = "aarch64"))]
    for (x, out) in xs.iter().zip(outs.iter_mut()) {
        dots_strided(rows, stride, x, out);
    }
}

/// `out += p[k] * rows[k * stride..][..out.len()]` for each `k < p.len()` in order (the cached
/// values of one head, weighted): four rows per pass with `cortex-m-dsp` on an FPU, eight
/// elements a register with AVX on x86-64, four with NEON on aarch64, else one. Per element the
/// products are added in `k` order every way: the same bits.
#[inline]
pub fn axpys_strided(rows: &[f32], stride: usize, p: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { x86::axpys(rows, stride, p, out) };
    }
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    cortex_m::axpys_strided(rows, stride, p, out);
    #[cfg(target_arch = "aarch64")]
    aarch64::axpys(rows, stride, p, out);
    #[cfg(not(any(target_arch = "aarch64", all(feature = "cortex-m-dsp", target_abi = "eabihf"))))]
    {
        let n = out.len();
        for (k, &weight) in p.iter().enumerate() {
            for (o, v) in out.iter_mut().zip(&rows[k * stride..k * stride + n]) {
                *o += weight * v;
            }
        }
    }
}

/// The LayerNorm sums [`scalar::layer_norm_rows_in_place`] takes of a block of up to sixteen
/// rows of `width`: `means[b]` row `b`'s sum from `-0.0` in column order divided by `width`,
/// `vars[b]` its sum of squared deviations from `-0.0` in column order (lanes past the block's
/// rows `-0.0`, `means` divided). One lane a row with AVX-512F on x86-64 (`std` feature, chosen
/// at run time), the same bits; whether it ran (else nothing is written, and the portable
/// loops add the sums).
#[inline]
pub fn layer_norm_sums(block: &[f32], width: usize, means: &mut [f32; 16], vars: &mut [f32; 16]) -> bool {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if width > 0 && avx512::has_avx512f() {
        // SAFETY: `width` is not zero and the CPU has AVX-512F, checked just above.
        unsafe { avx512::layer_norm_sums(block, width, means, vars) };
        return true;
    }
    let _ = (block, width, means, vars);
    false
}

/// Elements a vector of the image is widened by at a time, on the stack ([`add_vector`],
/// [`layer_norm`]).
pub const VECTOR_CHUNK: usize = 32;

/// `dst = src` widened exactly to f32: by the FPU (`VCVTB`/`VCVTT`) with `cortex-m-dsp`, in
/// integers ([`scalar::f16_to_f32`]) elsewhere; the same bits.
pub fn widen_f16(src: &[half::f16], dst: &mut [f32]) {
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    cortex_m::widen_f16(src, dst);
    #[cfg(not(all(feature = "cortex-m-dsp", target_abi = "eabihf")))]
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = scalar::f16_to_f32(s);
    }
}

/// `y += v` for a vector of the image (`v` at least as long as `y`), f32 or f16 (widened
/// exactly, [`VECTOR_CHUNK`] elements at a time).
pub fn add_vector(y: &mut [f32], v: crate::weights::Vector<'_>) {
    use crate::weights::Vector;
    match v {
        Vector::F32(v) => add_assign(y, v),
        Vector::F16(_) => {
            let mut wide = [0.0f32; VECTOR_CHUNK];
            for (start, chunk) in (0..).step_by(VECTOR_CHUNK).zip(y.chunks_mut(VECTOR_CHUNK)) {
                let wide = &mut wide[..chunk.len()];
                v.widen_into(start, wide);
                add_assign(chunk, wide);
            }
        }
    }
}

/// [`matvec_f32_rows`] for f16 weights, widened exactly (by the FPU with `cortex-m-dsp`, by
/// F16C on x86-64, sixteen rows per pass).
#[inline]
pub fn matvec_f16_rows(weight: &[half::f16], x: &[f32], y: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { x86::dots(weight, x.len(), x, y) };
    }
    #[cfg(all(feature = "cortex-m-dsp", target_abi = "eabihf"))]
    cortex_m::matvec_f16(weight, x, y);
    #[cfg(not(all(feature = "cortex-m-dsp", target_abi = "eabihf")))]
    for (out, row) in y.iter_mut().zip(weight.chunks_exact(x.len())) {
        *out = dot_f16(row, x);
    }
}

/// `sum a[i] * b[i]` for `a` and `b` of one length, f16 weights widened to f32: F16C on x86-64
/// with the `std` feature when the CPU has it, else the portable widening. Same bits.
#[inline]
pub fn dot_f16(a: &[half::f16], b: &[f32]) -> f32 {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_f16c() {
        // SAFETY: the CPU has F16C, checked just above.
        return unsafe { x86::dot_f16(a, b) };
    }
    scalar::dot_f16(a, b)
}

/// [`int8_row_sums`] for two inputs at once, `sums[p][r] = values[r] · xq[p]`: with the
/// `cortex-m-dsp` feature, and with VNNI or AVX2 on x86-64, each weight is loaded (and widened
/// or sign-flipped) once for both (Helium needs no widening and runs each input on its own).
#[inline]
pub fn int8_row_sums_pair(
    values: &[i8],
    cols: usize,
    xq: [&[i8]; 2],
    widened: [&[u32]; 2],
    sums: [&mut [i32]; 2],
) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if vnni::has_avx512_vnni() {
            // SAFETY: the CPU has AVX-512 VNNI (with VL) and AVX2, checked just above.
            return unsafe { vnni::evex::row_sums_pair(values, cols, xq, sums) };
        }
        if vnni::has_avx_vnni() {
            // SAFETY: the CPU has AVX-VNNI and AVX2, checked just above.
            return unsafe { vnni::vex::row_sums_pair(values, cols, xq, sums) };
        }
        if x86::has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { x86::row_sums_i8_pair(values, cols, xq, sums) };
        }
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    cortex_m::row_sums_i8_pair(values, cols, xq, widened, sums);
    #[cfg(not(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve"))))]
    for ((x, widened), sums) in xq.into_iter().zip(widened).zip(sums) {
        int8_row_sums(values, cols, x, widened, sums);
    }
}

/// [`scalar::int8_vecmat_sums_each`], compiled for AVX-512BW or AVX2 on x86-64 when the CPU
/// has them (the same code, the same integers).
#[inline]
pub fn int8_vecmat_sums_each(
    xq: &[&[i8]; VECMAT_INPUTS],
    values: &[i8],
    cols: usize,
    sums: &mut [&mut [i32]; VECMAT_INPUTS],
) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has AVX-512F and BW, checked just above.
            return unsafe { x86::int8_vecmat_sums_each_avx512(xq, values, cols, sums) };
        }
        if x86::has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { x86::int8_vecmat_sums_each_avx2(xq, values, cols, sums) };
        }
    }
    scalar::int8_vecmat_sums_each(xq, values, cols, sums);
}

/// [`scalar::int8_vecmat_sums`] (the int8 transposed product's sums), compiled for AVX-512BW
/// or AVX2 on x86-64 when the CPU has them (the same code, the same integers, sixteen or eight
/// columns a register).
#[inline]
pub fn int8_vecmat_sums(xq: &[i8], values: &[i8], cols: usize, acc: &mut [i32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has AVX-512F and BW, checked just above.
            return unsafe { x86::int8_vecmat_sums_avx512(xq, values, cols, acc) };
        }
        if x86::has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { x86::int8_vecmat_sums_avx2(xq, values, cols, acc) };
        }
    }
    scalar::int8_vecmat_sums(xq, values, cols, acc);
}

/// Words of kernel scratch a product with `cols` inputs needs: the input quantized to int8 (one
/// byte a column, rounded up to whole words) and, for the DSP kernels, the same values widened
/// to 16-bit pairs (two bytes a column). Words keep every view of it aligned.
pub const fn scratch_words(cols: usize) -> usize {
    3 * cols.div_ceil(4)
}

/// Splits `scratch` into `cols` bytes for the quantized input and the words after them.
///
/// # Panics
/// If `scratch` is shorter than `cols.div_ceil(4)` words (a caller's sizing error).
pub fn split_scratch(scratch: &mut [u32], cols: usize) -> (&mut [i8], &mut [u32]) {
    let (bytes, rest) = scratch.split_at_mut(cols.div_ceil(4));
    let bytes: &mut [i8] = bytemuck::cast_slice_mut(bytes);
    (&mut bytes[..cols], rest)
}

/// Prepares a quantized input `xq` for [`int8_row_sums`], once per input however many rows
/// read it: the DSP kernels take it widened to 16-bit pairs in `widened` (at least
/// `2 * xq.len().div_ceil(4)` words); the other kernels read `xq` itself.
#[inline]
pub fn widen_int8_input(xq: &[i8], widened: &mut [u32]) {
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    cortex_m::widen_input(xq, widened);
    #[cfg(not(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve"))))]
    let _ = (xq, widened);
}

/// `sums[r] = values[r] · xq` in i32 for each row `r < sums.len()` of the row-major int8
/// `values (rows, cols)`, `widened` being `xq` prepared by [`widen_int8_input`]: Helium with the
/// `cortex-m-mve` and `cortex-m-dsp` features (16 columns an instruction), else four rows per
/// pass with the `cortex-m-dsp` feature, with `VPDPBUSD` (AVX-512 VNNI or AVX-VNNI, 32 columns
/// an instruction) or else AVX2 on x86-64 (`std` feature, when the CPU has it), on aarch64
/// `SDOT` (when the CPU has it and the `std` feature can tell) or else `SMULL`, else the scalar
/// dot product. All give the same sums.
#[inline]
pub fn int8_row_sums(values: &[i8], cols: usize, xq: &[i8], widened: &[u32], sums: &mut [i32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if vnni::has_avx512_vnni() {
            // SAFETY: the CPU has AVX-512 VNNI (with VL) and AVX2, checked just above.
            return unsafe { vnni::evex::row_sums(values, cols, xq, sums) };
        }
        if vnni::has_avx_vnni() {
            // SAFETY: the CPU has AVX-VNNI and AVX2, checked just above.
            return unsafe { vnni::vex::row_sums(values, cols, xq, sums) };
        }
        if x86::has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { x86::row_sums_i8(values, cols, xq, sums) };
        }
    }
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        let _ = widened;
        cortex_m::row_sums_i8_mve(values, cols, xq, sums);
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    cortex_m::row_sums_i8(values, cols, xq, widened, sums);
    #[cfg(target_arch = "aarch64")]
    {
        let _ = widened;
        #[cfg(feature = "std")]
        if aarch64::has_dotprod() {
            // SAFETY: the CPU has the dot-product extension, checked just above.
            unsafe { aarch64::row_sums_i8_sdot(values, cols, xq, sums) };
            return;
        }
        aarch64::row_sums_i8_smull(values, cols, xq, sums);
    }
    #[cfg(not(any(target_arch = "aarch64", feature = "cortex-m-dsp")))]
    {
        let _ = widened;
        for (r, sum) in sums.iter_mut().enumerate() {
            *sum = dot_i8(&values[r * cols..(r + 1) * cols], xq);
        }
    }
}

/// [`scalar::int4_row_sums`]: `sums[r]` for the packed int4 rows of `values` and their groups'
/// multiplier `codes`, the input `xq` prepared by [`widen_int8_input`] in `widened`, `xq.len()`
/// the columns: with VNNI or AVX2 on x86-64, two rows per pass with the `cortex-m-dsp` feature (`AND`
/// and `SMLAD`; the Helium build widens the input itself), else the portable code. Every
/// kernel gives the same sums (they are exact integers).
#[inline]
pub fn int4_row_sums(
    values: &[u8],
    group: usize,
    codes: &[u8],
    xq: &[i8],
    widened: &[u32],
    sums: &mut [i64],
) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if vnni::has_avx512_vnni() {
            // SAFETY: the CPU has AVX-512 VNNI (with VL) and AVX2, checked just above.
            return unsafe { vnni::evex::int4_row_sums(values, group, codes, xq, sums) };
        }
        if vnni::has_avx_vnni() {
            // SAFETY: the CPU has AVX-VNNI and AVX2, checked just above.
            return unsafe { vnni::vex::int4_row_sums(values, group, codes, xq, sums) };
        }
        if x86::has_avx2() {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { x86::int4_row_sums(values, group, codes, xq, sums) };
        }
    }
    #[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
    cortex_m::int4_row_sums(values, group, codes, xq, widened, sums);
    #[cfg(all(feature = "cortex-m-dsp", feature = "cortex-m-mve"))]
    {
        let _ = widened;
        cortex_m::int4_row_sums_widening(values, group, codes, xq, sums);
    }
    #[cfg(not(feature = "cortex-m-dsp"))]
    {
        let _ = widened;
        scalar::int4_row_sums(values, group, codes, xq, sums);
    }
}

/// [`crate::int8_attention::key_sums`] with AVX2 when the CPU has it; whether it ran.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub(crate) fn attention_key_sums_avx2(
    keys: &[i8],
    stride: usize,
    d_head: usize,
    words: &[u32],
    sums: &mut [i32],
) -> bool {
    if !x86::has_avx2() {
        return false;
    }
    // SAFETY: the CPU has AVX2, checked just above.
    unsafe { x86::key_sums_i8(keys, stride, d_head, words, sums) };
    true
}

/// [`crate::int8_attention::value_sums`] with AVX2 when the CPU has it; whether it ran.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub(crate) fn attention_value_sums_avx2(
    values: &[i8],
    stride: usize,
    weights: &[i32],
    acc: &mut [i32],
) -> bool {
    if !x86::has_avx2() {
        return false;
    }
    // SAFETY: the CPU has AVX2, checked just above.
    unsafe { x86::value_sums_i8(values, stride, weights, acc) };
    true
}

/// [`crate::int8_attention::key_sums_each`] with AVX-512BW when the CPU has it; whether it ran.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub(crate) fn attention_key_sums_each_avx512(
    keys: &[i8],
    stride: usize,
    d_head: usize,
    words: &[&[u32]],
    sums: &mut [&mut [i32]],
) -> bool {
    // SAFETY: the CPU has AVX-512F, BW and VL, checked first.
    attention_avx512::has_avx512bw()
        && unsafe { attention_avx512::key_sums_each(keys, stride, d_head, words, sums) }
}

/// The magnitudes [`crate::int8_attention::ProbabilityWords::quantize_each_in_place`] adds, with
/// AVX-512F when the CPU has it; whether it ran.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub(crate) fn attention_magnitudes_avx512(
    rows: &[&mut [f32]],
    largest: &mut [f32; crate::int8_attention::SIDE_BY_SIDE],
    sums: &mut [f32; crate::int8_attention::SIDE_BY_SIDE],
) -> bool {
    // SAFETY: the CPU has AVX-512F, checked first.
    attention_avx512::has_avx512bw() && unsafe { attention_avx512::magnitudes_each(rows, largest, sums) }
}

/// [`crate::int8_attention::value_sums_each`] with AVX-512BW when the CPU has it; whether it
/// ran.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub(crate) fn attention_value_sums_each_avx512(
    values: &[i8],
    stride: usize,
    weights: &[&[i32]],
    accs: &mut [&mut [i32]],
) -> bool {
    // SAFETY: the CPU has AVX-512F, BW and VL, checked first.
    attention_avx512::has_avx512bw()
        && unsafe { attention_avx512::value_sums_each(values, stride, weights, accs) }
}

// Added with the host kernels (x86-64: AVX, AVX2, F16C; aarch64: NEON): several inputs per
// pass over f32 and f16 rows, the f16 memory's rows at a stride, the int8 input's
// quantization, the softmax's `exp` eight at a time.

/// [`matvec_f32_rows`] for several inputs, `ys[p] = W xs[p]` (`W (rows, cols)`, `cols` the
/// inputs' length, `rows` the outputs'): with AVX-512F on x86-64 and three inputs or more,
/// sixteen rows a pass (four a register) against four inputs (`kernels::avx512`); else with AVX on
/// x86-64 (NEON on aarch64) each block of eight weight rows is read once for all the inputs
/// (with AVX, four inputs or more on rows of 512 columns or more take tiles of six rows); the
/// same bits as one call per input.
#[inline]
pub fn matmul_f32_rows(weight: &[f32], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    #[cfg(any(all(feature = "std", target_arch = "x86_64"), target_arch = "aarch64"))]
    return dots_strided_each(weight, xs.first().map_or(0, |x| x.len()), xs, ys);
    #[cfg(not(any(all(feature = "std", target_arch = "x86_64"), target_arch = "aarch64")))]
    for (x, y) in xs.iter().zip(ys.iter_mut()) {
        matvec_f32_rows(weight, x, y);
    }
}

/// [`axpys_strided`] for several weight lists of one length (the queries of one head, each
/// weighting the same cached values): `outs[q] += ps[q][k] * rows[k * stride..][..n]` for each
/// `k` in order, `n` the shortest output's length, `k` below the shortest list's. With AVX-512F
/// on x86-64, four lists a pass share each loaded row; else one call per list. The bits of one
/// [`axpys_strided`] per list.
#[inline]
pub fn axpys_strided_each(rows: &[f32], stride: usize, ps: &[&[f32]], outs: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if ps.len() > 1 && avx512::has_avx512f() {
        // SAFETY: the CPU has AVX-512F, checked just above.
        return unsafe { avx512::axpys_each(rows, stride, ps, outs) };
    }
    for (p, out) in ps.iter().zip(outs.iter_mut()) {
        axpys_strided(rows, stride, p, out);
    }
}

/// [`matmul_f32_rows`] for f16 weights, widened exactly (by F16C on x86-64, four weights a
/// step, in the AVX-512F kernel for three inputs or more).
#[inline]
pub fn matmul_f16_rows(weight: &[half::f16], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if dots_each_x86(weight, xs.first().map_or(0, |x| x.len()), xs, ys) {
        return;
    }
    for (x, y) in xs.iter().zip(ys.iter_mut()) {
        matvec_f16_rows(weight, x, y);
    }
}

/// [`dots_strided`] for f16 rows (the cached keys of one head in f16 memory): `out[r] =
/// dot_f16(rows[r * stride..][..x.len()], x)`, sixteen rows per pass with AVX and F16C on
/// x86-64, else one. The same bits.
#[inline]
pub fn dots_strided_f16(rows: &[half::f16], stride: usize, x: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { x86::dots(rows, stride, x, out) };
    }
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot_f16(&rows[r * stride..r * stride + x.len()], x);
    }
}

/// [`dots_strided_each`] for f16 rows (the queries of one head against its keys in f16
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

/// [`axpys_strided`] for f16 rows (the cached values of one head in f16 memory): `out +=
/// p[k] * widen(rows[k * stride..][..out.len()])` for each `k` in order, eight elements a
/// register with AVX and F16C on x86-64, else one. The same bits.
#[inline]
pub fn axpys_strided_f16(rows: &[half::f16], stride: usize, p: &[f32], out: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { x86::axpys(rows, stride, p, out) };
    }
    let n = out.len();
    for (k, &weight) in p.iter().enumerate() {
        for (o, v) in out.iter_mut().zip(&rows[k * stride..k * stride + n]) {
            *o += weight * scalar::f16_to_f32(*v);
        }
    }
}

/// [`quantize_activations`] (the input of an int8 product to int8, returning its scale): eight
/// columns a step with AVX on x86-64 (`std` feature, chosen at run time). The same bits.
#[inline]
pub fn quantize_input(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX and F16C, checked just above.
        return unsafe { x86::quantize_activations(x, act_scales, out) };
    }
    scalar::quantize_activations(x, act_scales, out)
}

/// Whether this build has a kernel for [`softmax_exp8`] (x86-64 with `std`, not `fast-math`;
/// it is then chosen at run time): elsewhere the softmax keeps its one loop.
pub const SOFTMAX_EXP8: bool = cfg!(all(
    feature = "std",
    target_arch = "x86_64",
    not(feature = "fast-math")
));

/// `values[i] = softmax_exp(values[i] - max)` for eight values
/// ([`softmax_exp`](fast_math::softmax_exp)): eight lanes at once with AVX2 on x86-64 (`std`
/// feature, not `fast-math`), computing `libm::expf`'s bits. The softmax adds them up in order.
#[inline]
pub fn softmax_exp8(values: &mut [f32; 8], max: f32) {
    #[cfg(all(feature = "std", target_arch = "x86_64", not(feature = "fast-math")))]
    if x86::has_avx2() && x86::has_avx_f16c() {
        // SAFETY: the CPU has AVX2 and F16C, checked just above.
        return unsafe { x86::softmax_exp8(values, max) };
    }
    for v in values.iter_mut() {
        *v = fast_math::softmax_exp(*v - max);
    }
}

/// [`softmax_exp8`] on each chunk of eight of `values` (a multiple of eight long), the kernel
/// chosen once for all: sixteen lanes at a time with AVX-512F, eight with AVX2 (the same bits).
#[inline]
pub fn softmax_exps(values: &mut [f32], max: f32) {
    #[cfg(all(feature = "std", target_arch = "x86_64", not(feature = "fast-math")))]
    if avx512::has_avx512f() && x86::has_avx2() {
        // SAFETY: the CPU has AVX-512F, AVX2 and F16C (`has_avx512f` checks F16C), checked just
        // above.
        return unsafe { avx512::softmax_exps(values, max) };
    }
    for chunk in values.chunks_exact_mut(8) {
        if let Ok(eight) = <&mut [f32; 8]>::try_from(chunk) {
            softmax_exp8(eight, max);
        }
    }
}

#[cfg(all(test, feature = "std", target_arch = "x86_64"))]
mod extension_tests {
    #[test]
    fn the_extensions_named_are_the_cpus() {
        let named = super::run_time_extensions();
        for (name, present) in [
            ("AVX2", std::is_x86_feature_detected!("avx2")),
            ("AVX-512F", std::is_x86_feature_detected!("avx512f")),
            (
                "AVX-512 VNNI",
                std::is_x86_feature_detected!("avx512vnni")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx2"),
            ),
        ] {
            assert_eq!(named.contains(&name), present, "{name} in {named:?}");
        }
    }
}
