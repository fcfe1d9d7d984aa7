//! The matrix layer: products of the image's weight matrices (f32, f16, int8, int4;
//! [`Matrix`]) with one or several activation vectors, choosing the kernels through the
//! dispatch layer ([`crate::kernels`]) and blocking rows so each block of weights is read once
//! for all the inputs of a pass.

use crate::included::{left_out, WEIGHTS_F16, WEIGHTS_F32, WEIGHTS_INT4, WEIGHTS_INT8, WEIGHTS_QUANTIZED};
use crate::kernels::portable::{
    i64_to_f32, int4_groups, int4_multiplier, int4_row_bytes, int4_value, largest_magnitude, max_abs,
    quantize_with,
};
use crate::kernels::{self, GroupInputs, GROUP_ROWS, MAX_POSITIONS_PER_PASS, VECMAT_INPUTS};
use crate::vector::{add_vector, Vector};
use crate::weights::{Matrix, MatrixData};

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

/// `W (rows, cols) @ x (cols) -> y (rows)` in the matrix's dtype.
///
/// f16 weights are widened and accumulated in f32. int8 weights are W8A8: `x` (times the
/// activation scales) is quantized per call to symmetric int8 in `scratch` (at least
/// [`scratch_words`]`(cols)` long), products accumulate in i32, and
/// `y[r] = acc * (row_scale[r] * x_scale)`.
pub fn matvec(weight: &Matrix<'_>, x: &[f32], y: &mut [f32], scratch: &mut [u32]) {
    let cols = weight.cols;
    match weight.data {
        MatrixData::F32(w) if WEIGHTS_F32 => kernels::matvec_f32(w, x, y),
        MatrixData::F32Fma(w) if WEIGHTS_F32 => kernels::matvec_fma_f32(w, x, y),
        MatrixData::F16(w) if WEIGHTS_F16 => kernels::matvec_f16(w, x, y),
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        } if WEIGHTS_INT8 => {
            let input = Int8Input::quantize(x, act_scales, scratch, cols);
            input.rows(values, row_scales, y);
        }
        MatrixData::Int4 {
            values,
            scale,
            codes,
            group,
        } if WEIGHTS_INT4 => {
            let input = Int8Input::quantize(x, None, scratch, cols);
            input.int4_rows(values, scale, codes, group, y);
        }
        _ => left_out(),
    }
}

/// One input of an int8 product, quantized (and widened for the DSP kernels) once however many
/// rows read it.
struct Int8Input<'s> {
    /// The input times the activation scales, in int8.
    xq: &'s [i8],
    /// `xq` prepared by [`kernels::widen_input_i8`].
    widened: &'s [u32],
    /// `max |x| / 127`.
    x_scale: f32,
}

impl<'s> Int8Input<'s> {
    /// No input (a placeholder in an array of inputs).
    const NONE: Int8Input<'static> = Int8Input {
        xq: &[],
        widened: &[],
        x_scale: 0.0,
    };

    /// Quantizes `x` (`cols` long, times `act_scales` if any) into `scratch`.
    fn quantize(x: &[f32], act_scales: Option<&[f32]>, scratch: &'s mut [u32], cols: usize) -> Self {
        Self::quantize_known(x, act_scales, None, scratch, cols)
    }

    /// [`Int8Input::quantize`] given, where known, the largest bits of `|x|`
    /// ([`kernels::magnitude_bits`]`(x)`).
    fn quantize_known(
        x: &[f32],
        act_scales: Option<&[f32]>,
        magnitude: Option<u32>,
        scratch: &'s mut [u32],
        cols: usize,
    ) -> Self {
        let (xq, widened) = split_scratch(scratch, cols);
        let x_scale = kernels::quantize_widen_i8(x, act_scales, magnitude, xq, widened);
        Int8Input { xq, widened, x_scale }
    }

    /// `y = W x` for int8 `values (y.len(), cols)`: `y[r] = (values[r] · xq) * (row_scales[r] *
    /// x_scale)`. The i32 sums pass through `y`'s own words.
    fn rows(&self, values: &[i8], row_scales: &[f32], y: &mut [f32]) {
        let cols = self.xq.len();
        kernels::row_sums_i8(values, cols, self.xq, self.widened, bytemuck::cast_slice_mut(y));
        self.scale(row_scales, y);
    }

    /// [`Int8Input::rows`], `bias` then added to each output (`y[r] += bias[r]`) in the pass
    /// that scales the sums: the same bits.
    fn rows_bias(&self, values: &[i8], row_scales: &[f32], bias: &[f32], y: &mut [f32]) {
        let cols = self.xq.len();
        kernels::row_sums_i8(values, cols, self.xq, self.widened, bytemuck::cast_slice_mut(y));
        kernels::scale_sums_bias_i8(y, row_scales, self.x_scale, bias);
    }

    /// `y = W x` for int4 `values (y.len(), int4_row_bytes(cols))`: `y[r] = (sum over groups g
    /// of multiplier[r][g] * (values[r][g] · xq[g])) * (scale * x_scale)`, the sum in i64
    /// (exact for any `cols`).
    fn int4_rows(&self, values: &[u8], scale: f32, codes: &[u8], group: usize, y: &mut [f32]) {
        // rows a call of the kernel: the Helium kernel's call and its setup weigh more against
        // its sixteen products an instruction
        const BLOCK: usize = if cfg!(feature = "cortex-m-mve") { 32 } else { 8 };
        let cols = self.xq.len();
        let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
        let step = scale * self.x_scale;
        let mut sums = [0i64; BLOCK];
        for (block, y) in y.chunks_mut(BLOCK).enumerate() {
            let rows = block * BLOCK..block * BLOCK + y.len();
            let sums = &mut sums[..y.len()];
            kernels::row_sums_i4(
                &values[rows.start * row_bytes..rows.end * row_bytes],
                group,
                &codes[rows.start * groups..rows.end * groups],
                self.xq,
                self.widened,
                sums,
            );
            for (out, &sum) in y.iter_mut().zip(sums.iter()) {
                *out = i64_to_f32(sum) * step;
            }
        }
    }

    /// [`Int8Input::rows`] for two inputs, `y[p] = W x[p]`: the pair kernel reads each weight
    /// once for both.
    fn rows_pair(x: [&Self; 2], values: &[i8], row_scales: &[f32], y: [&mut [f32]; 2]) {
        let [a, b] = x;
        let [y_a, y_b] = y;
        kernels::row_sums_pair_i8(
            values,
            a.xq.len(),
            [a.xq, b.xq],
            [a.widened, b.widened],
            [
                bytemuck::cast_slice_mut(&mut *y_a),
                bytemuck::cast_slice_mut(&mut *y_b),
            ],
        );
        a.scale(row_scales, y_a);
        b.scale(row_scales, y_b);
    }

    /// `y[r] = (sum in y[r]'s bits) * (row_scales[r] * x_scale)`.
    fn scale(&self, row_scales: &[f32], y: &mut [f32]) {
        kernels::scale_sums_i8(y, row_scales, self.x_scale);
    }
}

/// [`matvec`] with the output rows split in two: `W (rows, cols) @ x -> [first | rest]`,
/// `first.len() + rest.len() = rows`. An int8 input is quantized once for both.
pub fn matvec_split(
    weight: &Matrix<'_>,
    x: &[f32],
    first: &mut [f32],
    rest: &mut [f32],
    scratch: &mut [u32],
) {
    matvec_split_known(weight, (x, None), first, rest, scratch)
}

/// [`matvec_split`] given, where known, the largest bits of `|x|` ([`kernels::magnitude_bits`]
/// of it, as [`kernels::relu_magnitude_bits`] gives them), which the int8 and int4 weights'
/// quantization of `x` then takes for its scan. The same bits.
pub fn matvec_split_known(
    weight: &Matrix<'_>,
    (x, magnitude): (&[f32], Option<u32>),
    first: &mut [f32],
    rest: &mut [f32],
    scratch: &mut [u32],
) {
    let split = first.len();
    let cols = weight.cols;
    match weight.data {
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        } if WEIGHTS_INT8 => {
            let input = Int8Input::quantize_known(x, act_scales, magnitude, scratch, cols);
            let (scales_first, scales_rest) = row_scales.split_at(split);
            let (values_first, values_rest) = values.split_at(split * cols);
            input.rows(values_first, scales_first, first);
            input.rows(values_rest, scales_rest, rest);
        }
        MatrixData::Int4 {
            values,
            scale,
            codes,
            group,
        } if WEIGHTS_INT4 => {
            let input = Int8Input::quantize_known(x, None, magnitude, scratch, cols);
            let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
            let (values_first, values_rest) = values.split_at(split * row_bytes);
            let (codes_first, codes_rest) = codes.split_at(split * groups);
            input.int4_rows(values_first, scale, codes_first, group, first);
            input.int4_rows(values_rest, scale, codes_rest, group, rest);
        }
        _ => {
            matvec(&weight.row_range(0, split), x, first, scratch);
            matvec(&weight.row_range(split, split + rest.len()), x, rest, scratch);
        }
    }
}

/// `y = W x + bias`: [`matvec_split_known`] into `y` alone, then [`add_vector`]; for int8
/// weights and an f32 bias, the bias added in the pass that scales the sums. The same bits.
pub fn matvec_bias_known(
    weight: &Matrix<'_>,
    (x, magnitude): (&[f32], Option<u32>),
    bias: Vector<'_>,
    y: &mut [f32],
    scratch: &mut [u32],
) {
    if let (
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        },
        Vector::F32(bias),
    ) = (weight.data, bias)
    {
        if WEIGHTS_INT8 && bias.len() >= y.len() {
            let input = Int8Input::quantize_known(x, act_scales, magnitude, scratch, weight.cols);
            input.rows_bias(values, row_scales, &bias[..y.len()], y);
            return;
        }
    }
    matvec_split_known(weight, (x, magnitude), y, &mut [], scratch);
    add_vector(y, bias);
}

/// `h += W x + bias` (`bias` where given): [`matvec_bias_known`] or [`matvec_split_known`] into
/// `y`, then [`kernels::add_assign`]`(h, y)`; for int8 weights (and an f32 bias), the outputs
/// added to `h` in the pass that scales the sums (`y` then holds the sums). The same bits in
/// `h`.
pub fn matvec_residual_known(
    weight: &Matrix<'_>,
    (x, magnitude): (&[f32], Option<u32>),
    bias: Option<Vector<'_>>,
    y: &mut [f32],
    h: &mut [f32],
    scratch: &mut [u32],
) {
    if let MatrixData::Int8 {
        values,
        row_scales,
        act_scales,
    } = weight.data
    {
        let fused_bias = match bias {
            None => Some(None),
            Some(Vector::F32(bias)) if bias.len() >= y.len() => Some(Some(&bias[..y.len()])),
            Some(_) => None,
        };
        if let (true, Some(bias)) = (WEIGHTS_INT8, fused_bias) {
            let input = Int8Input::quantize_known(x, act_scales, magnitude, scratch, weight.cols);
            let cols = input.xq.len();
            kernels::row_sums_i8(values, cols, input.xq, input.widened, bytemuck::cast_slice_mut(y));
            kernels::scale_sums_add_i8(y, row_scales, input.x_scale, bias, h);
            return;
        }
    }
    match bias {
        Some(bias) => matvec_bias_known(weight, (x, magnitude), bias, y, scratch),
        None => matvec_split_known(weight, (x, magnitude), y, &mut [], scratch),
    }
    kernels::add_assign(h, y);
}

/// [`matvec`] for two inputs at once, `W @ x[p] -> y[p]`: int8 weights are read once for both
/// (`scratch` holds [`scratch_words`]`(cols)` words for each input). The
/// same bits as two calls.
pub fn matvec_pair(weight: &Matrix<'_>, x: [&[f32]; 2], y: [&mut [f32]; 2], scratch: &mut [u32]) {
    matvec_pair_split(weight, x, y, [&mut [], &mut []], scratch);
}

/// [`matvec_pair`] with each output split in two like [`matvec_split`]:
/// `W @ x[p] -> [first[p] | rest[p]]`, each input quantized once.
pub fn matvec_pair_split(
    weight: &Matrix<'_>,
    x: [&[f32]; 2],
    first: [&mut [f32]; 2],
    rest: [&mut [f32]; 2],
    scratch: &mut [u32],
) {
    let cols = weight.cols;
    let [first_a, first_b] = first;
    let [rest_a, rest_b] = rest;
    let split = first_a.len();
    match weight.data {
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        } if WEIGHTS_INT8 => {
            let (scratch_a, scratch_b) = scratch.split_at_mut(scratch_words(cols));
            let input_a = Int8Input::quantize(x[0], act_scales, scratch_a, cols);
            let input_b = Int8Input::quantize(x[1], act_scales, scratch_b, cols);
            let (values_first, values_rest) = values.split_at(split * cols);
            let (scales_first, scales_rest) = row_scales.split_at(split);
            for (values, scales, y_a, y_b) in [
                (values_first, scales_first, first_a, first_b),
                (values_rest, scales_rest, rest_a, rest_b),
            ] {
                if y_a.is_empty() {
                    continue;
                }
                Int8Input::rows_pair([&input_a, &input_b], values, scales, [y_a, y_b]);
            }
        }
        _ => {
            let end = split + rest_a.len();
            matmul(&weight.row_range(0, split), &x, &mut [first_a, first_b], scratch);
            if end > split {
                matmul(&weight.row_range(split, end), &x, &mut [rest_a, rest_b], scratch);
            }
        }
    }
}

/// `W (rows, cols) @ xs[p] (cols) -> ys[p] (rows)` for every input `p`, in the matrix's dtype,
/// with the bits of one [`matvec`] per input: f32 and f16 weights are read once for all the
/// inputs (per block of rows where a kernel does so), int8 weights once per pair of inputs
/// (`scratch` holds [`scratch_words`]`(cols)` words for each input of a
/// pair).
pub fn matmul(weight: &Matrix<'_>, xs: &[&[f32]], ys: &mut [&mut [f32]], scratch: &mut [u32]) {
    match weight.data {
        MatrixData::F32(w) if WEIGHTS_F32 => kernels::matmul_f32(w, xs, ys),
        MatrixData::F32Fma(w) if WEIGHTS_F32 => kernels::matmul_fma_f32(w, xs, ys),
        MatrixData::F16(w) if WEIGHTS_F16 => kernels::matmul_f16(w, xs, ys),
        MatrixData::Int4 { .. } if WEIGHTS_INT4 => {
            for (x, y) in xs.iter().zip(ys.iter_mut()) {
                matvec(weight, x, y, scratch);
            }
        }
        MatrixData::Int8 { .. } if WEIGHTS_INT8 => {
            for (x, y) in xs.chunks(2).zip(ys.chunks_mut(2)) {
                match (x, y) {
                    ([x_a, x_b], [y_a, y_b]) => matvec_pair(weight, [x_a, x_b], [y_a, y_b], scratch),
                    (x, y) => {
                        for (x, y) in x.iter().zip(y.iter_mut()) {
                            matvec(weight, x, y, scratch);
                        }
                    }
                }
            }
        }
        _ => left_out(),
    }
}

/// Bytes of weights a block of rows of [`matmul_split`] reads for all its inputs at once: the
/// block stays in the first-level cache while each input meets it.
const ROW_BLOCK_BYTES: usize = 16 * 1024;

/// [`matmul`] with each output split in two like [`matvec_split`]: `W @ xs[p] -> [firsts[p] |
/// rests[p]]` for every input `p` (at most [`MAX_POSITIONS_PER_PASS`]; `rests[p]` may be
/// empty), each input quantized once (`scratch` holds [`scratch_words`]
/// `(cols)` words for each input). Up to two inputs it is [`matvec_split`] or
/// [`matvec_pair_split`]; with more, int8 and int4 weights are read in blocks of rows, each
/// block once for all the inputs (the pair kernel on each pair), and f32 and f16 weights as
/// [`matmul`] reads them. Every output row has the bits of one [`matvec`] per input: a row's
/// integer sum is exact in any order, and the float kernels sum each row in their own order
/// whichever rows they take together.
pub fn matmul_split<'y>(
    weight: &Matrix<'_>,
    xs: &[&[f32]],
    firsts: &mut [&'y mut [f32]],
    rests: &mut [&'y mut [f32]],
    scratch: &mut [u32],
) {
    let count = xs
        .len()
        .min(firsts.len())
        .min(rests.len())
        .min(MAX_POSITIONS_PER_PASS);
    let (xs, firsts, rests) = (&xs[..count], &mut firsts[..count], &mut rests[..count]);
    match (xs, firsts, rests) {
        ([], _, _) => {}
        ([x], [first], [rest]) => matvec_split(weight, x, first, rest, scratch),
        ([x_a, x_b], [first_a, first_b], [rest_a, rest_b]) => {
            matvec_pair_split(weight, [x_a, x_b], [first_a, first_b], [rest_a, rest_b], scratch)
        }
        (xs, firsts, rests) => match weight.data {
            MatrixData::Int8 { .. } | MatrixData::Int4 { .. } => {
                if WEIGHTS_QUANTIZED {
                    integer_rows_blocked(weight, xs, firsts, rests, scratch)
                }
            }
            MatrixData::F32(_) | MatrixData::F32Fma(_) | MatrixData::F16(_) => {
                let split = firsts[0].len();
                matmul(&weight.row_range(0, split), xs, firsts, scratch);
                let end = split + rests[0].len();
                if end > split {
                    matmul(&weight.row_range(split, end), xs, rests, scratch);
                }
            }
        },
    }
}

/// [`matmul_split`] for int8 and int4 weights and three or more inputs: the inputs quantized
/// once, then the rows in blocks of about [`ROW_BLOCK_BYTES`], each block's sums for every
/// input (int8 inputs in pairs) before the next block is read; while the inputs meet one
/// block, the next is asked for from memory (a share with each pass, where the target has a
/// prefetch).
fn integer_rows_blocked<'y>(
    weight: &Matrix<'_>,
    xs: &[&[f32]],
    firsts: &mut [&'y mut [f32]],
    rests: &mut [&'y mut [f32]],
    scratch: &mut [u32],
) {
    let cols = weight.cols;
    let act_scales = match weight.data {
        MatrixData::Int8 { act_scales, .. } => act_scales,
        _ => None,
    };
    let mut inputs: [Int8Input<'_>; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| Int8Input::NONE);
    let mut quantized = 0;
    for ((slot, x), words) in inputs
        .iter_mut()
        .zip(xs)
        .zip(scratch.chunks_exact_mut(scratch_words(cols)))
    {
        *slot = Int8Input::quantize(x, act_scales, words, cols);
        quantized += 1;
    }
    // (a scratch too short for every input leaves the outputs of the rest as they are)
    let inputs = &inputs[..quantized];
    let split = firsts[0].len();
    let rows = split + rests[0].len();
    let row_bytes = match weight.data {
        MatrixData::Int4 { .. } => int4_row_bytes(cols),
        _ => cols,
    };
    let group_inputs = int8_group_inputs(weight, inputs);
    let block = match group_inputs {
        Some(_) => GROUP_ROWS,
        // a multiple of 8 rows: whole passes of every kernel
        None => (ROW_BLOCK_BYTES / row_bytes.max(1)).max(8) / 8 * 8,
    };
    // rows the tile kernel took at the start of each part
    let tiled = int8_rows_tiled(weight, inputs, firsts, rests);
    for (part_start, part_end, tiled) in [(0, split, tiled[0]), (split, rows, tiled[1])] {
        let mut start = part_start + tiled;
        while start < part_end {
            let end = (start + block).min(part_end);
            let (outputs, at) = if part_start == 0 {
                (&mut *firsts, start)
            } else {
                (&mut *rests, start - split)
            };
            let out = at..at + (end - start);
            // the next block's bytes, asked for a share with each pass over this block
            let next_rows = weight.row_range(end, (end + block).min(part_end));
            let next_int8: &[i8] = match next_rows.data {
                MatrixData::Int8 { values, .. } => values,
                _ => &[],
            };
            let next_int4: &[u8] = match next_rows.data {
                MatrixData::Int4 { values, .. } => values,
                _ => &[],
            };
            match weight.row_range(start, end).data {
                MatrixData::Int8 {
                    values,
                    row_scales: scales,
                    ..
                } if WEIGHTS_INT8 => {
                    // eight inputs at a time where the CPU has the group kernel, then pairs
                    let mut p = group_inputs.as_ref().map_or(0, |grouped| {
                        kernels::row_sums_groups_i8(
                            values,
                            cols,
                            scales,
                            grouped,
                            inputs.len(),
                            outputs,
                            &out,
                            next_int8,
                        )
                    });
                    while p < inputs.len() {
                        kernels::prefetch_share(next_int8, p..p + 2, inputs.len());
                        if p + 1 < inputs.len() {
                            let (head, tail) = outputs.split_at_mut(p + 1);
                            let (y_a, y_b) = (&mut head[p][out.clone()], &mut tail[0][out.clone()]);
                            Int8Input::rows_pair([&inputs[p], &inputs[p + 1]], values, scales, [y_a, y_b]);
                            p += 2;
                        } else {
                            inputs[p].rows(values, scales, &mut outputs[p][out.clone()]);
                            p += 1;
                        }
                    }
                }
                MatrixData::Int4 {
                    values,
                    scale,
                    codes,
                    group,
                } if WEIGHTS_INT4 => {
                    for (p, (input, y)) in inputs.iter().zip(outputs.iter_mut()).enumerate() {
                        kernels::prefetch_share(next_int4, p..p + 1, inputs.len());
                        input.int4_rows(values, scale, codes, group, &mut y[out.clone()]);
                    }
                }
                _ => {}
            }
            start = end;
        }
    }
}

/// Where the CPU has a tile kernel ([`kernels::row_sums_tiles_i8`]: AMX), the int8 sums of the
/// first whole tiles of rows of each part (`firsts`, then `rests`) for every input at once,
/// scaled into the outputs; returns how many rows of each part that was (none elsewhere, or for
/// other dtypes).
fn int8_rows_tiled<'y>(
    weight: &Matrix<'_>,
    inputs: &[Int8Input<'_>],
    firsts: &mut [&'y mut [f32]],
    rests: &mut [&'y mut [f32]],
) -> [usize; 2] {
    let MatrixData::Int8 {
        values, row_scales, ..
    } = weight.data
    else {
        return [0; 2];
    };
    if !WEIGHTS_INT8 || !kernels::has_row_sums_tiles_i8() {
        return [0; 2];
    }
    let xq: [&[i8]; MAX_POSITIONS_PER_PASS] =
        core::array::from_fn(|p| inputs.get(p).map_or(&[][..], |i| i.xq));
    /// The outputs' words, where the kernel writes its i32 sums.
    fn as_sums<'a>(outputs: &'a mut [&mut [f32]]) -> [&'a mut [i32]; MAX_POSITIONS_PER_PASS] {
        let mut sums: [&mut [i32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| &mut [][..]);
        for (sum, y) in sums.iter_mut().zip(outputs.iter_mut()) {
            *sum = bytemuck::cast_slice_mut(y);
        }
        sums
    }
    let n = inputs.len();
    let (mut first_sums, mut rest_sums) = (as_sums(firsts), as_sums(rests));
    let tiled = kernels::row_sums_tiles_i8(
        values,
        weight.cols,
        &xq[..n],
        [&mut first_sums[..n], &mut rest_sums[..n]],
    );
    let split = firsts.first().map_or(0, |y| y.len());
    for (outputs, (scales, done)) in [firsts, rests]
        .into_iter()
        .zip([(&row_scales[..split], tiled[0]), (&row_scales[split..], tiled[1])])
    {
        for (input, y) in inputs.iter().zip(outputs.iter_mut()) {
            input.scale(&scales[..done], &mut y[..done]);
        }
    }
    tiled
}

/// Where the grouped int8 kernel takes these inputs (int8 weights, at least
/// [`kernels::GROUP_INPUTS`] inputs, a CPU with the kernel): the inputs as it takes them, once
/// per call for every block of rows. `None` elsewhere.
fn int8_group_inputs<'x>(weight: &Matrix<'_>, inputs: &[Int8Input<'x>]) -> Option<GroupInputs<'x>> {
    if !WEIGHTS_INT8 || !matches!(weight.data, MatrixData::Int8 { .. }) {
        return None;
    }
    kernels::group_inputs_i8(weight.cols, inputs.len(), |p| (inputs[p].xq, inputs[p].x_scale))
}

/// `W (rows, cols) @ x (cols) + b (rows) -> y (rows)`.
pub fn matvec_bias(weight: &Matrix<'_>, bias: Vector<'_>, x: &[f32], y: &mut [f32], scratch: &mut [u32]) {
    matvec(weight, x, y, scratch);
    add_vector(y, bias);
}

/// `x (rows) @ W (rows, cols) -> y (cols)`: the transposed product, in the matrix's dtype.
///
/// For int8 the row scales fold into the input, `x'[r] = x[r] * row_scale[r]`, which is
/// quantized per call in `scratch` (at least [`scratch_words`]`(rows)`
/// long); `y[c] = acc[c] * x_scale * act_scale[c]`.
pub fn vecmat(x: &[f32], weight: &Matrix<'_>, y: &mut [f32], scratch: &mut [u32]) {
    let cols = weight.cols;
    match weight.data {
        // `y[c] = Σ_r x[r] * w[r][c]`, added in `r` order from `0.0`: the weighted rows'
        // kernels (`y += x[r] * row r` for each `r` in order), which keep that order per
        // element; the transposed product keeps the exact order in a fast-f32 model too
        MatrixData::F32(w) | MatrixData::F32Fma(w) if WEIGHTS_F32 => {
            let (rows, len) = (x.len().min(w.len() / cols.max(1)), y.len().min(cols));
            y.fill(0.0);
            kernels::axpys_strided_f32(w, cols, &x[..rows], &mut y[..len]);
        }
        MatrixData::F16(w) if WEIGHTS_F16 => {
            let (rows, len) = (x.len().min(w.len() / cols.max(1)), y.len().min(cols));
            y.fill(0.0);
            kernels::axpys_strided_f16(w, cols, &x[..rows], &mut y[..len]);
        }
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        } if WEIGHTS_INT8 => {
            let (xq, _) = split_scratch(scratch, weight.rows);
            let scaled = || x.iter().zip(row_scales).map(|(v, s)| v * s);
            let x_scale = quantize_with(xq, max_abs(scaled()), scaled());
            // the i32 sums in y's own words, a row at a time (contiguous; integer sums are the
            // same in any order)
            let len = y.len().min(cols);
            let y = &mut y[..len];
            let acc: &mut [i32] = bytemuck::cast_slice_mut(y);
            kernels::vecmat_sums_i8(xq, values, cols, acc);
            for (c, out) in y.iter_mut().enumerate() {
                let acc = out.to_bits() as i32;
                *out = acc as f32 * x_scale * act_scales.map_or(1.0, |a| a[c]);
            }
        }
        MatrixData::Int4 {
            values,
            scale,
            codes,
            group,
        } if WEIGHTS_INT4 => {
            let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
            let (xq, _) = split_scratch(scratch, weight.rows);
            let x_scale = quantize_with(xq, largest_magnitude(x), x.iter().copied());
            for (c, out) in y.iter_mut().enumerate() {
                let acc: i64 = xq
                    .iter()
                    .enumerate()
                    .map(|(r, &a)| {
                        let q = int4_value(&values[r * row_bytes..], c) as i64;
                        a as i64 * q * int4_multiplier(codes[r * groups + c / group]) as i64
                    })
                    .sum();
                *out = i64_to_f32(acc) * (x_scale * scale);
            }
        }
        _ => left_out(),
    }
}

/// [`vecmat`] for each input, `ys[p] = W^T xs[p]` (pairs of `xs` and `ys`), each with the bits
/// of one [`vecmat`]. With int8 weights, four inputs at a time are quantized into `scratch`
/// (when it holds four of [`vecmat`]'s) and every weight row is read once for the four (their
/// i32 sums side by side: the same integers); everything else is one [`vecmat`] per input.
pub fn vecmat_each(xs: &[&[f32]], weight: &Matrix<'_>, ys: &mut [&mut [f32]], scratch: &mut [u32]) {
    let (rows, cols) = (weight.rows, weight.cols);
    let words = rows.div_ceil(4);
    let inputs = xs.len().min(ys.len());
    let mut p = 0;
    if let MatrixData::Int8 {
        values,
        row_scales,
        act_scales,
    } = weight.data
    {
        while WEIGHTS_INT8 && p + VECMAT_INPUTS <= inputs && scratch.len() >= VECMAT_INPUTS * words {
            let mut quantized = scratch[..VECMAT_INPUTS * words].chunks_exact_mut(words);
            let mut xq: [&mut [i8]; VECMAT_INPUTS] = core::array::from_fn(|_| Default::default());
            let mut x_scales = [0.0f32; VECMAT_INPUTS];
            for ((xq, x_scale), x) in xq.iter_mut().zip(x_scales.iter_mut()).zip(&xs[p..]) {
                let words = quantized.next().unwrap_or_default();
                *xq = &mut bytemuck::cast_slice_mut::<u32, i8>(words)[..rows];
                let scaled = || x.iter().zip(row_scales).map(|(v, s)| v * s);
                *x_scale = quantize_with(xq, max_abs(scaled()), scaled());
            }
            // the i32 sums in the outputs' own words, as `vecmat` keeps them
            let mut sums: [&mut [i32]; VECMAT_INPUTS] = core::array::from_fn(|_| Default::default());
            for (sum, y) in sums.iter_mut().zip(ys[p..].iter_mut()) {
                let len = y.len().min(cols);
                *sum = bytemuck::cast_slice_mut(&mut y[..len]);
            }
            kernels::vecmat_sums_each_i8(&xq.each_ref().map(|x| &**x), values, cols, &mut sums);
            for (y, x_scale) in ys[p..].iter_mut().zip(x_scales) {
                let len = y.len().min(cols);
                for (c, out) in y[..len].iter_mut().enumerate() {
                    let acc = out.to_bits() as i32;
                    *out = acc as f32 * x_scale * act_scales.map_or(1.0, |a| a[c]);
                }
            }
            p += VECMAT_INPUTS;
        }
    }
    for (x, y) in xs[p..inputs].iter().zip(ys[p..inputs].iter_mut()) {
        vecmat(x, weight, y, scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::portable::{f16_to_f32, matvec_f32, quantize_i8};
    use crate::rng::Rng;
    use alloc::{vec, vec::Vec};
    use half::f16;

    #[test]
    fn matvec_and_vecmat_agree_with_a_hand_computation() {
        // W = [[1, 2, 3], [4, 5, 6]]
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut y = [0.0; 2];
        let m = Matrix::f32(2, 3, &w);
        matvec(&m, &[1.0, 0.5, -1.0], &mut y, &mut []);
        assert_eq!(y, [1.0 + 1.0 - 3.0, 4.0 + 2.5 - 6.0]);
        let mut z = [0.0; 3];
        vecmat(&[1.0, -1.0], &m, &mut z, &mut []);
        assert_eq!(z, [-3.0, -3.0, -3.0]);
    }

    /// f32 and f16 `W^T x` add each element's products in row order from `0.0`, however the
    /// kernels underneath are vectorised: the bits of the plain loop, for lengths that leave
    /// partial registers and outputs shorter than a row.
    #[test]
    fn float_vecmat_adds_rows_in_order() {
        // multiples of 1/97 in -10.3..=10.32
        let noise = |n: usize, seed: u64| -> Vec<f32> {
            let mut rng = Rng::new(seed);
            (0..n).map(|_| rng.below(2001) as f32 / 97.0 - 10.3).collect()
        };
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(3, 11)]
        } else {
            &[(1, 1), (7, 9), (40, 37), (33, 64)]
        };
        for &(rows, cols) in shapes {
            let dense = noise(rows * cols, 1);
            let halves: Vec<f16> = dense.iter().map(|&v| f16::from_f32_const(v)).collect();
            let x = noise(rows, 2);
            for (m, widened) in [
                (Matrix::f32(rows, cols, &dense), dense.clone()),
                (
                    Matrix {
                        rows,
                        cols,
                        data: MatrixData::F16(&halves),
                    },
                    halves.iter().map(|&h| f16_to_f32(h)).collect(),
                ),
            ] {
                for len in [cols, cols / 2] {
                    let mut want = vec![0.0f32; len];
                    for (r, &xr) in x.iter().enumerate() {
                        for (c, out) in want.iter_mut().enumerate() {
                            *out += xr * widened[r * cols + c];
                        }
                    }
                    let mut got = vec![f32::NAN; len];
                    vecmat(&x, &m, &mut got, &mut []);
                    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{rows}x{cols}, {len} outputs");
                }
            }
        }
    }

    /// `vecmat_each` against one `vecmat` per input, bit for bit: int8 weights with and without
    /// activation scales, column counts with and without a partial chunk of 32, input counts
    /// around the group of four, scratch for four inputs or for one (then one at a time); and
    /// f32 weights, which take one `vecmat` per input.
    #[test]
    fn vecmat_each_has_the_bits_of_one_vecmat_per_input() {
        // thousandths in -1..=1
        let noise = |n: usize, seed: u64| -> Vec<f32> {
            let mut rng = Rng::new(seed);
            (0..n).map(|_| rng.below(2001) as f32 / 1000.0 - 1.0).collect()
        };
        // (smaller under Miri, with a partial chunk and a group of four all the same)
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(5, 40)]
        } else {
            &[(40, 96), (37, 70), (8, 5), (64, 33)]
        };
        let counts: &[usize] = if cfg!(miri) { &[1, 5] } else { &[1, 3, 4, 5, 9] };
        for &(rows, cols) in shapes {
            let values: Vec<i8> = noise(rows * cols, 1).iter().map(|v| (v * 127.0) as i8).collect();
            let row_scales: Vec<f32> = noise(rows, 2).iter().map(|v| 0.01 + v.abs()).collect();
            let act: Vec<f32> = noise(cols, 3).iter().map(|v| 0.5 + v.abs()).collect();
            let dense = noise(rows * cols, 4);
            for act_scales in [None, Some(&act[..])] {
                let int8 = Matrix {
                    rows,
                    cols,
                    data: MatrixData::Int8 {
                        values: &values,
                        row_scales: &row_scales,
                        act_scales,
                    },
                };
                for m in [int8, Matrix::f32(rows, cols, &dense)] {
                    for &inputs in counts {
                        let xs: Vec<Vec<f32>> = (0..inputs).map(|p| noise(rows, 10 + p as u64)).collect();
                        let x_refs: Vec<&[f32]> = xs.iter().map(|x| x.as_slice()).collect();
                        let mut want = vec![vec![0.0f32; cols]; inputs];
                        for (x, y) in xs.iter().zip(want.iter_mut()) {
                            vecmat(x, &m, y, &mut vec![0; rows.div_ceil(4)]);
                        }
                        for words in [rows.div_ceil(4), VECMAT_INPUTS * rows.div_ceil(4)] {
                            let mut got = vec![vec![f32::NAN; cols]; inputs];
                            let mut y_refs: Vec<&mut [f32]> =
                                got.iter_mut().map(|y| y.as_mut_slice()).collect();
                            vecmat_each(&x_refs, &m, &mut y_refs, &mut vec![0; words]);
                            for (p, (g, w)) in got.iter().zip(&want).enumerate() {
                                let (g, w): (Vec<u32>, Vec<u32>) = (
                                    g.iter().map(|v| v.to_bits()).collect(),
                                    w.iter().map(|v| v.to_bits()).collect(),
                                );
                                assert_eq!(g, w, "{rows}x{cols}, input {p} of {inputs}, {words} words");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn int8_matvec_and_vecmat_match_their_dequantized_matrix() {
        // W = q * row_scale * act_scale
        let q = [10i8, -20, 30, 127, 0, -127];
        let row_scales = [0.5, 0.25];
        let act = [1.0, 2.0, 0.5];
        let m = Matrix {
            rows: 2,
            cols: 3,
            data: MatrixData::Int8 {
                values: &q,
                row_scales: &row_scales,
                act_scales: Some(&act),
            },
        };
        let mut dense = [0.0f32; 6];
        for r in 0..2 {
            m.row_to_f32(r, &mut dense[r * 3..(r + 1) * 3]);
        }
        let x = [0.3, -1.2, 0.9];
        let (mut exact, mut quant) = ([0.0; 2], [0.0; 2]);
        matvec_f32(&dense, &x, &mut exact);
        matvec(&m, &x, &mut quant, &mut [0; 3]);
        for (a, b) in exact.iter().zip(&quant) {
            assert!((a - b).abs() < 0.02 * a.abs().max(1.0), "{exact:?} vs {quant:?}");
        }
        let d = Matrix::f32(2, 3, &dense);
        let (mut exact, mut quant) = ([0.0; 3], [0.0; 3]);
        vecmat(&[0.7, -0.4], &d, &mut exact, &mut []);
        vecmat(&[0.7, -0.4], &m, &mut quant, &mut [0; 3]);
        for (a, b) in exact.iter().zip(&quant) {
            assert!((a - b).abs() < 0.02 * a.abs().max(1.0), "{exact:?} vs {quant:?}");
        }
    }

    /// An int4 matrix of `rows x cols` with every value in `-8..=7` (the first sixteen in
    /// order, the rest random) and random multiplier codes over the whole byte (a fixed
    /// sequence), returned with its values unpacked.
    fn int4_matrix(rows: usize, cols: usize, group: usize) -> (Vec<i8>, Vec<u8>, Vec<u8>) {
        let mut rng = Rng::new(0x2545_f491);
        let q: Vec<i8> = (0..rows * cols)
            .map(|i| {
                if i < 16 {
                    i as i8 - 8
                } else {
                    rng.below(16) as i8 - 8
                }
            })
            .collect();
        let mut packed = vec![0u8; rows * int4_row_bytes(cols)];
        for (row, out) in q.chunks(cols).zip(packed.chunks_mut(int4_row_bytes(cols))) {
            crate::weights::int4_pack_row(row, out);
        }
        let codes = (0..rows * int4_groups(cols, group))
            .map(|_| (rng.next_u64() >> 56) as u8)
            .collect();
        (q, packed, codes)
    }

    #[test]
    fn int4_sums_are_the_exact_integer_sums_and_matvec_matches_the_dense_matrix() {
        // 37 columns (not a multiple of 8 or of the group), 11 rows (more than one block)
        let (rows, cols, group) = (11, 37, 16);
        let (q, packed, codes) = int4_matrix(rows, cols, group);
        let groups = int4_groups(cols, group);
        let scale = 3e-7;
        let multiplier = |r: usize, c: usize| int4_multiplier(codes[r * groups + c / group]) as i64;
        let x: Vec<f32> = (0..cols).map(|c| ((c * 7 % 13) as f32 - 6.0) * 0.37).collect();
        let mut xq = vec![0i8; cols];
        quantize_i8(&x, None, &mut xq);
        let mut sums = vec![0i64; rows];
        super::kernels::row_sums_i4(&packed, group, &codes, &xq, &[], &mut sums);
        for r in 0..rows {
            let expected: i64 = (0..cols)
                .map(|c| q[r * cols + c] as i64 * xq[c] as i64 * multiplier(r, c))
                .sum();
            assert_eq!(sums[r], expected, "row {r}");
        }
        let m = Matrix {
            rows,
            cols,
            data: MatrixData::Int4 {
                values: &packed,
                scale,
                codes: &codes,
                group,
            },
        };
        let dense: Vec<f64> = (0..rows * cols)
            .map(|i| q[i] as f64 * multiplier(i / cols, i % cols) as f64 * scale as f64)
            .collect();
        let mut row = vec![0.0f32; cols];
        for r in 0..rows {
            m.row_to_f32(r, &mut row);
            for c in 0..cols {
                assert_eq!(
                    row[c] as f64,
                    dense[r * cols + c] as f32 as f64,
                    "row {r} col {c}"
                );
            }
        }
        let mut y = vec![0.0f32; rows];
        let mut scratch = vec![0u32; crate::matrix::scratch_words(cols)];
        matvec(&m, &x, &mut y, &mut scratch);
        let x_max = x.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64;
        for r in 0..rows {
            let exact: f64 = (0..cols).map(|c| dense[r * cols + c] * x[c] as f64).sum();
            let row_abs: f64 = (0..cols).map(|c| dense[r * cols + c].abs()).sum();
            // each input is off by at most half a step of max |x| / 127
            let bound = row_abs * x_max / 254.0 + 1e-5 * exact.abs();
            assert!(
                (y[r] as f64 - exact).abs() <= bound,
                "row {r}: {} vs {exact}",
                y[r]
            );
        }
        let (mut first, mut rest) = (vec![0.0f32; 4], vec![0.0f32; rows - 4]);
        matvec_split(&m, &x, &mut first, &mut rest, &mut scratch);
        assert_eq!(
            [&first[..], &rest[..]].concat(),
            y,
            "split rows give the same bits"
        );
        let p: Vec<f32> = (0..rows).map(|r| (r as f32 - 5.0) * 0.21).collect();
        let mut t = vec![0.0f32; cols];
        let mut scratch = vec![0u32; crate::matrix::scratch_words(rows)];
        vecmat(&p, &m, &mut t, &mut scratch);
        let p_max = p.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64;
        for c in 0..cols {
            let exact: f64 = (0..rows).map(|r| p[r] as f64 * dense[r * cols + c]).sum();
            let col_abs: f64 = (0..rows).map(|r| dense[r * cols + c].abs()).sum();
            let bound = col_abs * p_max / 254.0 + 1e-5 * exact.abs();
            assert!(
                (t[c] as f64 - exact).abs() <= bound,
                "col {c}: {} vs {exact}",
                t[c]
            );
        }
    }
}
