//! Portable kernels with exact math (`libm`): the reference every faster kernel must match.

use half::f16;

use crate::weights::{int4_groups, int4_multiplier, int4_row_bytes, int4_value, Matrix, MatrixData, Vector};

/// Sum of `a[i] * b[i]` over the shorter of the two, in four interleaved f32 accumulators.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 4];
    let mut chunks_a = a.chunks_exact(4);
    let mut chunks_b = b.chunks_exact(4);
    for (ca, cb) in (&mut chunks_a).zip(&mut chunks_b) {
        for k in 0..4 {
            acc[k] += ca[k] * cb[k];
        }
    }
    let mut tail = 0.0;
    for (x, y) in chunks_a.remainder().iter().zip(chunks_b.remainder()) {
        tail += x * y;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `W (rows, cols) @ x (cols) -> y (rows)` for f32 weights, `rows = y.len()`, `cols = x.len()`.
pub fn matvec_f32(weight: &[f32], x: &[f32], y: &mut [f32]) {
    let cols = x.len();
    for (out, row) in y.iter_mut().zip(weight.chunks_exact(cols)) {
        *out = dot(row, x);
    }
}

/// `W (rows, cols) @ x (cols) -> y (rows)` in the matrix's dtype.
///
/// f16 weights are widened and accumulated in f32. int8 weights are W8A8: `x` (times the
/// activation scales) is quantized per call to symmetric int8 in `scratch` (at least
/// [`scratch_words`](super::scratch_words)`(cols)` long), products accumulate in i32, and
/// `y[r] = acc * (row_scale[r] * x_scale)`.
pub fn matvec(weight: &Matrix<'_>, x: &[f32], y: &mut [f32], scratch: &mut [u32]) {
    let cols = weight.cols;
    match weight.data {
        MatrixData::F32(w) => super::matvec_f32_rows(w, x, y),
        MatrixData::F32Fma(w) => super::fma::matvec_fma_rows(w, x, y),
        MatrixData::F16(w) => super::matvec_f16_rows(w, x, y),
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        } => {
            let input = Int8Input::quantize(x, act_scales, scratch, cols);
            input.rows(values, row_scales, y);
        }
        MatrixData::Int4 {
            values,
            scale,
            codes,
            group,
        } => {
            let input = Int8Input::quantize(x, None, scratch, cols);
            input.int4_rows(values, scale, codes, group, y);
        }
    }
}

/// One input of an int8 product, quantized (and widened for the DSP kernels) once however many
/// rows read it.
struct Int8Input<'s> {
    /// The input times the activation scales, in int8.
    xq: &'s [i8],
    /// `xq` prepared by [`widen_int8_input`](super::widen_int8_input).
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
        let (xq, widened) = super::split_scratch(scratch, cols);
        let x_scale = super::quantize_input(x, act_scales, xq);
        super::widen_int8_input(xq, widened);
        Int8Input { xq, widened, x_scale }
    }

    /// `y = W x` for int8 `values (y.len(), cols)`: `y[r] = (values[r] · xq) * (row_scales[r] *
    /// x_scale)`. The i32 sums pass through `y`'s own words.
    fn rows(&self, values: &[i8], row_scales: &[f32], y: &mut [f32]) {
        let cols = self.xq.len();
        super::int8_row_sums(values, cols, self.xq, self.widened, bytemuck::cast_slice_mut(y));
        self.scale(row_scales, y);
    }

    /// `y = W x` for int4 `values (y.len(), int4_row_bytes(cols))`: `y[r] = (sum over groups g
    /// of multiplier[r][g] * (values[r][g] · xq[g])) * (scale * x_scale)`, the sum in i64
    /// (exact for any `cols`).
    fn int4_rows(&self, values: &[u8], scale: f32, codes: &[u8], group: usize, y: &mut [f32]) {
        const BLOCK: usize = 8;
        let cols = self.xq.len();
        let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
        let step = scale * self.x_scale;
        let mut sums = [0i64; BLOCK];
        for (block, y) in y.chunks_mut(BLOCK).enumerate() {
            let rows = block * BLOCK..block * BLOCK + y.len();
            let sums = &mut sums[..y.len()];
            super::int4_row_sums(
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
        super::int8_row_sums_pair(
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
        for (out, &scale) in y.iter_mut().zip(row_scales) {
            let acc = out.to_bits() as i32;
            *out = acc as f32 * (scale * self.x_scale);
        }
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
    let split = first.len();
    let cols = weight.cols;
    match weight.data {
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        } => {
            let input = Int8Input::quantize(x, act_scales, scratch, cols);
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
        } => {
            let input = Int8Input::quantize(x, None, scratch, cols);
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

/// [`matvec`] for two inputs at once, `W @ x[p] -> y[p]`: int8 weights are read once for both
/// (`scratch` holds [`scratch_words`](super::scratch_words)`(cols)` words for each input). The
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
        } => {
            let (scratch_a, scratch_b) = scratch.split_at_mut(super::scratch_words(cols));
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
/// (`scratch` holds [`scratch_words`](super::scratch_words)`(cols)` words for each input of a
/// pair).
pub fn matmul(weight: &Matrix<'_>, xs: &[&[f32]], ys: &mut [&mut [f32]], scratch: &mut [u32]) {
    match weight.data {
        MatrixData::F32(w) => super::matmul_f32_rows(w, xs, ys),
        MatrixData::F32Fma(w) => super::fma::matmul_fma_rows(w, xs, ys),
        MatrixData::F16(w) => super::matmul_f16_rows(w, xs, ys),
        MatrixData::Int4 { .. } => {
            for (x, y) in xs.iter().zip(ys.iter_mut()) {
                matvec(weight, x, y, scratch);
            }
        }
        MatrixData::Int8 { .. } => {
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
    }
}

/// Most positions one pass of the linear layers takes ([`matmul_split`]'s inputs): 128 with the
/// `std` feature (a host, where a large model's weights come from memory once per pass), 16
/// without (a device's stack holds a few arrays of this many slices).
pub const MAX_POSITIONS_PER_PASS: usize = if cfg!(feature = "std") { 128 } else { 16 };

/// Bytes of weights a block of rows of [`matmul_split`] reads for all its inputs at once: the
/// block stays in the first-level cache while each input meets it.
const ROW_BLOCK_BYTES: usize = 16 * 1024;

/// [`matmul`] with each output split in two like [`matvec_split`]: `W @ xs[p] -> [firsts[p] |
/// rests[p]]` for every input `p` (at most [`MAX_POSITIONS_PER_PASS`]; `rests[p]` may be
/// empty), each input quantized once (`scratch` holds [`scratch_words`](super::scratch_words)
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
                integer_rows_blocked(weight, xs, firsts, rests, scratch)
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
        .zip(scratch.chunks_exact_mut(super::scratch_words(cols)))
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
        Some(_) => GROUP_BLOCK_ROWS,
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
                } => {
                    // eight inputs at a time where the CPU has the group kernel, then pairs
                    let mut p = group_inputs.as_ref().map_or(0, |grouped| {
                        int8_rows_in_groups(
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
                        super::prefetch_share(next_int8, p..p + 2, inputs.len());
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
                } => {
                    for (p, (input, y)) in inputs.iter().zip(outputs.iter_mut()).enumerate() {
                        super::prefetch_share(next_int4, p..p + 1, inputs.len());
                        input.int4_rows(values, scale, codes, group, &mut y[out.clone()]);
                    }
                }
                MatrixData::F32(_) | MatrixData::F32Fma(_) | MatrixData::F16(_) => {}
            }
            start = end;
        }
    }
}

/// With AMX (x86-64, `std`), the int8 sums of the first whole tiles of rows of each part
/// (`firsts`, then `rests`) for every input at once, scaled into the outputs; returns how many
/// rows of each part that was (none elsewhere, or for other dtypes).
#[cfg_attr(not(all(feature = "std", target_arch = "x86_64")), allow(unused_variables))]
fn int8_rows_tiled<'y>(
    weight: &Matrix<'_>,
    inputs: &[Int8Input<'_>],
    firsts: &mut [&'y mut [f32]],
    rests: &mut [&'y mut [f32]],
) -> [usize; 2] {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if let MatrixData::Int8 {
        values, row_scales, ..
    } = weight.data
    {
        if !super::amx::has_amx_int8() {
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
        // SAFETY: the CPU has AMX int8 and the system granted the tiles, checked just above.
        let tiled = unsafe {
            super::amx::row_sums_parts(
                values,
                weight.cols,
                &xq[..n],
                [&mut first_sums[..n], &mut rest_sums[..n]],
            )
        };
        let split = firsts.first().map_or(0, |y| y.len());
        for (outputs, (scales, done)) in [firsts, rests]
            .into_iter()
            .zip([(&row_scales[..split], tiled[0]), (&row_scales[split..], tiled[1])])
        {
            for (input, y) in inputs.iter().zip(outputs.iter_mut()) {
                input.scale(&scales[..done], &mut y[..done]);
            }
        }
        return tiled;
    }
    [0; 2]
}

/// Rows of a block of int8 rows where the group kernel takes them: one of its tiles
/// ([`vnni_tiles::TILE_ROWS`](super::vnni_tiles::TILE_ROWS)), so that no rows of a block but
/// the last are left to its smaller steps.
const GROUP_BLOCK_ROWS: usize = 48;
#[cfg(all(feature = "std", target_arch = "x86_64"))]
const _: () = assert!(GROUP_BLOCK_ROWS.is_multiple_of(super::vnni_tiles::TILE_ROWS));

/// A pass's inputs as the group kernel ([`vnni_tiles`](super::vnni_tiles)) takes them: each
/// input's values and scale, and for the inputs in whole groups of eight the excess of the sign
/// bits the kernel flips ([`vnni_tiles::excess`](super::vnni_tiles::excess)).
#[cfg(all(feature = "std", target_arch = "x86_64"))]
type GroupInputs<'x> = [super::vnni_tiles::QuantizedInput<'x>; MAX_POSITIONS_PER_PASS];

/// (No group kernel elsewhere.)
#[cfg(not(all(feature = "std", target_arch = "x86_64")))]
type GroupInputs<'x> = core::marker::PhantomData<&'x ()>;

/// Where the group kernel takes these inputs (int8 weights, at least eight inputs, a CPU with
/// 512-bit AVX-512 VNNI): the inputs as it takes them, once per call for every block of rows.
/// `None` elsewhere.
fn int8_group_inputs<'x>(weight: &Matrix<'_>, inputs: &[Int8Input<'x>]) -> Option<GroupInputs<'x>> {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        use super::vnni_tiles::{excess, has_vnni_512, QuantizedInput, TILE_INPUTS};
        let is_int8 = matches!(weight.data, MatrixData::Int8 { .. });
        if !is_int8 || inputs.len() < TILE_INPUTS || !has_vnni_512() {
            return None;
        }
        let grouped = inputs.len() / TILE_INPUTS * TILE_INPUTS;
        Some(core::array::from_fn(|p| {
            let input = inputs.get(p).unwrap_or(&Int8Input::NONE);
            QuantizedInput {
                values: input.xq,
                scale: input.x_scale,
                excess: if p < grouped {
                    excess(input.xq, weight.cols)
                } else {
                    0
                },
            }
        }))
    }
    #[cfg(not(all(feature = "std", target_arch = "x86_64")))]
    {
        let _ = (weight, inputs);
        None
    }
}

/// The int8 rows of one block (`values`, `scales`) for the first `count` inputs of `inputs`
/// ([`int8_group_inputs`]'s, which only the CPUs with the kernel get) in whole groups of eight,
/// `outputs[p][out]` for input `p`, by the group kernel ([`vnni_tiles`](super::vnni_tiles)):
/// each block's weights are laid out once and each load of them meets eight inputs. Returns
/// the inputs done; `next` (the next block) is asked for from memory a share with each group.
#[allow(clippy::too_many_arguments)]
fn int8_rows_in_groups(
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
        // CPU has the kernel's features (`inputs` exist).
        unsafe {
            super::vnni_tiles::scaled_rows_in_groups(values, cols, scales, &inputs[..n], &mut outs[..n], next)
        }
    }
    #[cfg(not(all(feature = "std", target_arch = "x86_64")))]
    {
        let _ = (values, cols, scales, inputs, count, outputs, out, next);
        0
    }
}

/// `W (rows, cols) @ x (cols) + b (rows) -> y (rows)`.
pub fn matvec_bias(weight: &Matrix<'_>, bias: Vector<'_>, x: &[f32], y: &mut [f32], scratch: &mut [u32]) {
    matvec(weight, x, y, scratch);
    super::add_vector(y, bias);
}

/// `x (rows) @ W (rows, cols) -> y (cols)`: the transposed product, in the matrix's dtype.
///
/// For int8 the row scales fold into the input, `x'[r] = x[r] * row_scale[r]`, which is
/// quantized per call in `scratch` (at least [`scratch_words`](super::scratch_words)`(rows)`
/// long); `y[c] = acc[c] * x_scale * act_scale[c]`.
pub fn vecmat(x: &[f32], weight: &Matrix<'_>, y: &mut [f32], scratch: &mut [u32]) {
    let cols = weight.cols;
    match weight.data {
        // `y[c] = Σ_r x[r] * w[r][c]`, added in `r` order from `0.0`: the weighted rows'
        // kernels (`y += x[r] * row r` for each `r` in order), which keep that order per
        // element; the transposed product keeps the exact order in a fast-f32 model too
        MatrixData::F32(w) | MatrixData::F32Fma(w) => {
            let (rows, len) = (x.len().min(w.len() / cols.max(1)), y.len().min(cols));
            y.fill(0.0);
            super::axpys_strided(w, cols, &x[..rows], &mut y[..len]);
        }
        MatrixData::F16(w) => {
            let (rows, len) = (x.len().min(w.len() / cols.max(1)), y.len().min(cols));
            y.fill(0.0);
            super::axpys_strided_f16(w, cols, &x[..rows], &mut y[..len]);
        }
        MatrixData::Int8 {
            values,
            row_scales,
            act_scales,
        } => {
            let (xq, _) = super::split_scratch(scratch, weight.rows);
            let scaled = || x.iter().zip(row_scales).map(|(v, s)| v * s);
            let x_scale = quantize_with(xq, max_abs(scaled()), scaled());
            // the i32 sums in y's own words, a row at a time (contiguous; integer sums are the
            // same in any order)
            let len = y.len().min(cols);
            let y = &mut y[..len];
            let acc: &mut [i32] = bytemuck::cast_slice_mut(y);
            super::int8_vecmat_sums(xq, values, cols, acc);
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
        } => {
            let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
            let (xq, _) = super::split_scratch(scratch, weight.rows);
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
    }
}

/// Inputs [`vecmat_each`] takes together: each int8 weight it reads meets four inputs.
pub const VECMAT_INPUTS: usize = 4;

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
        while p + VECMAT_INPUTS <= inputs && scratch.len() >= VECMAT_INPUTS * words {
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
            super::int8_vecmat_sums_each(&xq.each_ref().map(|x| &**x), values, cols, &mut sums);
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

/// [`int8_vecmat_sums`] for [`VECMAT_INPUTS`] inputs at once: `sums[k][c] = Σ_r xq[k][r] *
/// values[r][c]` for `c` below the shortest output, each row of `values` read once for all.
#[inline(always)]
pub fn int8_vecmat_sums_each(
    xq: &[&[i8]; VECMAT_INPUTS],
    values: &[i8],
    cols: usize,
    sums: &mut [&mut [i32]; VECMAT_INPUTS],
) {
    const CHUNK: usize = 32;
    let len = sums.iter().map(|s| s.len()).min().unwrap_or(0).min(cols);
    let rows = xq
        .iter()
        .map(|x| x.len())
        .min()
        .unwrap_or(0)
        .min(values.len() / cols.max(1));
    let mut start = 0;
    while start < len {
        let width = CHUNK.min(len - start);
        // the chunk's sums stay in registers while every row passes
        let mut acc = [[0i32; CHUNK]; VECMAT_INPUTS];
        if width == CHUNK {
            for r in 0..rows {
                let a = xq.map(|x| i32::from(x[r]));
                let row: &[i8; CHUNK] = values[r * cols + start..][..CHUNK]
                    .try_into()
                    .unwrap_or(&[0; CHUNK]);
                for (acc, a) in acc.iter_mut().zip(a) {
                    for (sum, &w) in acc.iter_mut().zip(row) {
                        *sum = sum.wrapping_add(a * i32::from(w));
                    }
                }
            }
        } else {
            for r in 0..rows {
                let a = xq.map(|x| i32::from(x[r]));
                let row = &values[r * cols + start..][..width];
                for (acc, a) in acc.iter_mut().zip(a) {
                    for (sum, &w) in acc.iter_mut().zip(row) {
                        *sum = sum.wrapping_add(a * i32::from(w));
                    }
                }
            }
        }
        for (sum, acc) in sums.iter_mut().zip(&acc) {
            sum[start..start + width].copy_from_slice(&acc[..width]);
        }
        start += width;
    }
}

/// `acc[c] = Σ_r xq[r] * values[r][c]` in i32 for `c < acc.len()` (`values (xq.len(), cols)`,
/// `acc.len() <= cols`), a row at a time into the output's words (contiguous; the integer sums
/// are the same in any order). Every addition wraps, as the SIMD builds' do.
#[inline(always)]
pub fn int8_vecmat_sums(xq: &[i8], values: &[i8], cols: usize, acc: &mut [i32]) {
    acc.fill(0);
    for (&a, row) in xq.iter().zip(values.chunks_exact(cols)) {
        let a = i32::from(a);
        for (sum, &w) in acc.iter_mut().zip(row) {
            *sum = sum.wrapping_add(a * i32::from(w));
        }
    }
}

/// `sums[r] = sum over groups g of int4_multiplier(codes[r][g]) * (values[r][g] · xq[g])` for
/// each row `r < sums.len()` of the packed int4 `values (rows, int4_row_bytes(cols))`, `g` the
/// columns `g * group .. (g + 1) * group` (the last group partial when `group` does not divide
/// `cols`): each group's sum in i32, the weighted sum in i64.
pub fn int4_row_sums(values: &[u8], group: usize, codes: &[u8], xq: &[i8], sums: &mut [i64]) {
    let cols = xq.len();
    let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
    for (r, sum) in sums.iter_mut().enumerate() {
        let row = &values[r * row_bytes..(r + 1) * row_bytes];
        let row_codes = &codes[r * groups..(r + 1) * groups];
        *sum = 0;
        for (g, &code) in row_codes.iter().enumerate() {
            let group_sum = int4_range_sum(row, xq, g * group..cols.min((g + 1) * group));
            *sum += int4_multiplier(code) as i64 * group_sum as i64;
        }
    }
}

/// `value as f32` (round to nearest, ties to even), without the software `i64` conversion a
/// 32-bit core calls: a value outside `i32` keeps its top 32 bits, the bits below folded into
/// the lowest (so a tie and a value just past it still round apart), converted as a `u32` and
/// scaled by a power of two (exact).
#[inline]
pub fn i64_to_f32(value: i64) -> f32 {
    if let Ok(small) = i32::try_from(value) {
        return small as f32;
    }
    let magnitude = value.unsigned_abs();
    let shift = 32 - magnitude.leading_zeros();
    let below = magnitude & ((1u64 << shift) - 1);
    let kept = (magnitude >> shift) as u32 | u32::from(below != 0);
    let result = kept as f32 * f32::from_bits((127 + shift) << 23);
    if value < 0 {
        -result
    } else {
        result
    }
}

/// `sum over c in columns of row[c] * xq[c]` for a packed int4 `row`, `columns.start` a multiple
/// of 8 and `columns.end <= xq.len()`.
pub(crate) fn int4_range_sum(row: &[u8], xq: &[i8], columns: core::ops::Range<usize>) -> i32 {
    // blocks of eight columns, the last one maybe partial
    let inputs = xq[columns.clone()].chunks(8);
    let blocks = row[columns.start / 2..].chunks_exact(4);
    let mut sum = 0i32;
    for (block, inputs) in blocks.zip(inputs) {
        let mut padded = [0i8; 8];
        padded[..inputs.len()].copy_from_slice(inputs);
        for (k, &byte) in block.iter().enumerate() {
            let (low, high) = (((byte << 4) as i8) >> 4, (byte as i8) >> 4);
            sum += low as i32 * padded[k] as i32 + high as i32 * padded[k + 4] as i32;
        }
    }
    sum
}

/// Widens an f16 to f32 exactly (normals, subnormals, infinities and NaNs), with integer and one
/// float operation instead of the branches of a general conversion.
#[inline]
pub fn f16_to_f32(half: f16) -> f32 {
    const SHIFTED_EXPONENT: u32 = 0x7c00 << 13; // f16 exponent mask, moved to f32's position
    let bits = half.to_bits() as u32;
    let mut out = (bits & 0x7fff) << 13; // exponent and mantissa
    let exponent = out & SHIFTED_EXPONENT;
    out += (127 - 15) << 23; // rebias the exponent
    if exponent == SHIFTED_EXPONENT {
        out += (128 - 16) << 23; // infinity or NaN: exponent all ones
    } else if exponent == 0 {
        // subnormal: renormalise with one float subtraction (exact)
        out += 1 << 23;
        out = (f32::from_bits(out) - f32::from_bits(113 << 23)).to_bits();
    }
    f32::from_bits(out | (bits & 0x8000) << 16)
}

/// `sum a[i] * b[i]` with f16 weights widened to f32.
#[inline]
pub fn dot_f16(a: &[f16], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let mut chunks_a = a.chunks_exact(4);
    let mut chunks_b = b.chunks_exact(4);
    for (ca, cb) in (&mut chunks_a).zip(&mut chunks_b) {
        for k in 0..4 {
            acc[k] += f16_to_f32(ca[k]) * cb[k];
        }
    }
    let mut tail = 0.0;
    for (x, y) in chunks_a.remainder().iter().zip(chunks_b.remainder()) {
        tail += f16_to_f32(*x) * y;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `sum a[i] * b[i]` in i32 (exact: `Config::validate` bounds the widths).
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// Quantizes `x * act_scales` to symmetric int8 in `out`; returns the scale (`max |x| / 127`).
pub fn quantize_activations(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    match act_scales {
        None => quantize_with(out, largest_magnitude(x), x.iter().copied()),
        Some(scales) => {
            let scaled = || x.iter().zip(scales).map(|(v, s)| v * s);
            quantize_with(out, max_abs(scaled()), scaled())
        }
    }
}

/// Rounds `values / (max_abs / 127)` into `out`; a zero or non-finite range gives zeros.
///
/// `max_abs` is the largest `|v|` of `values`, so every `|v * (127 / max_abs)|` is below
/// `127 * (1 + 3 * EPSILON) < 127.5` and rounds into `-127..=127` without a clamp. Rounding is
/// `libm::roundf`'s own formula (ties away from zero), so the bits are the same.
pub(crate) fn quantize_with(out: &mut [i8], max_abs: f32, values: impl Iterator<Item = f32>) -> f32 {
    if !(max_abs > 0.0 && max_abs.is_finite()) {
        out.fill(0);
        return 0.0;
    }
    let inverse = 127.0 / max_abs;
    if inverse.is_finite() {
        for (o, v) in out.iter_mut().zip(values) {
            *o = round_in_range(v * inverse) as i8;
        }
    } else {
        // a subnormal range: 127 / max_abs overflows, and the products need the clamp
        for (o, v) in out.iter_mut().zip(values) {
            *o = libm::roundf(v * inverse).clamp(-127.0, 127.0) as i8;
        }
    }
    max_abs / 127.0
}

/// `libm::roundf(y) as i32` for `|y| < 2^31` (NaN gives 0): the same formula, truncating
/// `y + copysign(0.5 - EPSILON / 4, y)`, without the call.
#[inline(always)]
pub(crate) fn round_in_range(y: f32) -> i32 {
    const JUST_BELOW_HALF: f32 = 0.5 - 0.25 * f32::EPSILON;
    let half = if y < 0.0 {
        -JUST_BELOW_HALF
    } else {
        JUST_BELOW_HALF
    };
    (y + half) as i32
}

/// Largest `|v|` of `values` computed on the fly (NaNs ignored; 0 for none), as `f32::max`
/// folds it; [`largest_magnitude`] takes a slice.
#[inline(always)]
fn max_abs(values: impl Iterator<Item = f32>) -> f32 {
    let mut max = 0.0f32;
    for v in values {
        let a = v.abs();
        if a > max {
            max = a;
        }
    }
    max
}

/// The largest `|v|` of `values` (NaNs ignored, as `f32::max` ignores them; 0 for none): eight
/// running maxima side by side, which the compiler can vectorise (the largest of a set is the
/// same whatever the order).
pub(crate) fn largest_magnitude(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (eights, rest) = values.as_chunks::<8>();
    for eight in eights {
        for (lane, v) in lanes.iter_mut().zip(eight) {
            *lane = lane.max(v.abs());
        }
    }
    for v in rest {
        lanes[0] = lanes[0].max(v.abs());
    }
    lanes.into_iter().fold(0.0, f32::max)
}

/// `y += x`.
pub fn add_assign(y: &mut [f32], x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a += b;
    }
}

/// `y *= s`.
pub fn scale(y: &mut [f32], s: f32) {
    for a in y.iter_mut() {
        *a *= s;
    }
}

/// In place `max(x, 0)`.
pub fn relu(x: &mut [f32]) {
    for a in x.iter_mut() {
        *a = a.max(0.0);
    }
}

/// LayerNorm: `out = (x - mean) / sqrt(var + eps) * gain + bias`, biased variance, two passes.
pub fn layer_norm(x: &[f32], gain: Vector<'_>, bias: Vector<'_>, eps: f32, out: &mut [f32]) {
    let (mean, inv_std) = moments(x, eps);
    with_f32_vectors(x.len(), gain, bias, |at, gain, bias| {
        let range = at..at + gain.len();
        for (((o, v), g), b) in out[range.clone()].iter_mut().zip(&x[range]).zip(gain).zip(bias) {
            *o = (v - mean) * inv_std * g + b;
        }
    });
}

/// In place LayerNorm (see [`layer_norm`]).
pub fn layer_norm_in_place(x: &mut [f32], gain: Vector<'_>, bias: Vector<'_>, eps: f32) {
    let moments = moments(x, eps);
    normalize(x, moments, gain, bias);
}

/// `x = (x - mean) * inv_std * gain + bias`.
fn normalize(x: &mut [f32], (mean, inv_std): (f32, f32), gain: Vector<'_>, bias: Vector<'_>) {
    with_f32_vectors(x.len(), gain, bias, |at, gain, bias| {
        for ((v, g), b) in x[at..at + gain.len()].iter_mut().zip(gain).zip(bias) {
            *v = (*v - mean) * inv_std * g + b;
        }
    });
}

/// LayerNorm's mean and `1 / sqrt(var + eps)` of `x`: each sum from `-0.0` (as `Iterator::sum`
/// starts an f32 sum), in order.
fn moments(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len() as f32;
    let mean = x.iter().fold(-0.0, |sum, v| sum + v) / n;
    let var = x.iter().fold(-0.0, |sum, v| sum + (v - mean) * (v - mean)) / n;
    (mean, 1.0 / libm::sqrtf(var + eps))
}

/// Rows whose LayerNorm sums [`layer_norm_rows_in_place`] adds side by side.
const ROWS_SIDE_BY_SIDE: usize = 16;

/// [`layer_norm_in_place`] of each row of `width` in `x`, with its bits: each row's sums (of
/// its values, then of its squared deviations) are added in its order, as there, but sixteen
/// rows' sums go side by side, so no row waits on the latency of another's chain of additions.
pub fn layer_norm_rows_in_place(x: &mut [f32], width: usize, gain: Vector<'_>, bias: Vector<'_>, eps: f32) {
    if width == 0 {
        return;
    }
    let n = width as f32;
    for block in x.chunks_mut(ROWS_SIDE_BY_SIDE * width) {
        let rows = block.len() / width;
        let mut means = [-0.0f32; ROWS_SIDE_BY_SIDE];
        let mut vars = [-0.0f32; ROWS_SIDE_BY_SIDE];
        if !super::layer_norm_sums(block, width, &mut means, &mut vars) {
            for c in 0..width {
                for (b, sum) in means[..rows].iter_mut().enumerate() {
                    *sum += block[b * width + c];
                }
            }
            for mean in means.iter_mut() {
                *mean /= n;
            }
            for c in 0..width {
                for (b, (sum, mean)) in vars[..rows].iter_mut().zip(&means).enumerate() {
                    let v = block[b * width + c];
                    *sum += (v - mean) * (v - mean);
                }
            }
        }
        for ((row, mean), var) in block.chunks_exact_mut(width).zip(means).zip(vars) {
            let inv_std = 1.0 / libm::sqrtf(var / n + eps);
            normalize(row, (mean, inv_std), gain, bias);
        }
    }
}

/// Calls `apply(at, gain, bias)` with elements `at..at + gain.len()` of the two vectors as f32
/// slices, over `0..len`: at once when both are f32, else widened
/// [`VECTOR_CHUNK`](super::VECTOR_CHUNK) at a time.
fn with_f32_vectors(
    len: usize,
    gain: Vector<'_>,
    bias: Vector<'_>,
    mut apply: impl FnMut(usize, &[f32], &[f32]),
) {
    if let (Vector::F32(gain), Vector::F32(bias)) = (gain, bias) {
        return apply(0, &gain[..len], &bias[..len]);
    }
    let mut wide_gain = [0.0f32; super::VECTOR_CHUNK];
    let mut wide_bias = [0.0f32; super::VECTOR_CHUNK];
    for at in (0..len).step_by(super::VECTOR_CHUNK) {
        let n = super::VECTOR_CHUNK.min(len - at);
        gain.widen_into(at, &mut wide_gain[..n]);
        bias.widen_into(at, &mut wide_bias[..n]);
        apply(at, &wide_gain[..n], &wide_bias[..n]);
    }
}

/// Largest element (`-inf` for an empty slice).
pub fn max(x: &[f32]) -> f32 {
    x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// Index of the largest element (the first on ties; 0 for an empty slice).
pub fn argmax(x: &[f32]) -> usize {
    x.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |best, (i, &v)| if v > best.1 { (i, v) } else { best },
        )
        .0
}

/// `ln sum exp(x)`, stable. The `exp`s are micromath's with the `fast-math` feature
/// ([`softmax_exp`](super::fast_math::softmax_exp)); the `ln` is always exact.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let m = max(x);
    m + libm::logf(sum_exp(x, m))
}

/// `sum exp(x[i] - m)`, added in order from 0. The `exp`s go eight or sixteen at a time where a
/// kernel does them so ([`softmax_exps`](super::softmax_exps), on copies 256 at a time: the
/// same bits), else one at a time ([`softmax_exp`](super::fast_math::softmax_exp)).
pub fn sum_exp(x: &[f32], m: f32) -> f32 {
    const COPIED: usize = 256;
    let mut sum = 0.0;
    let by_eight = if super::SOFTMAX_EXP8 { x.len() / 8 * 8 } else { 0 };
    let (eights, rest) = x.split_at(by_eight);
    let mut exps = [0.0f32; COPIED];
    for chunk in eights.chunks(COPIED) {
        let exps = &mut exps[..chunk.len()];
        exps.copy_from_slice(chunk);
        super::softmax_exps(exps, m);
        for v in exps.iter() {
            sum += *v;
        }
    }
    for &v in rest {
        sum += super::fast_math::softmax_exp(v - m);
    }
    sum
}

/// In place `x - ln sum exp(x)`.
pub fn log_softmax(x: &mut [f32]) {
    let lse = log_sum_exp(x);
    for v in x.iter_mut() {
        *v -= lse;
    }
}

/// In place `exp(x) / sum exp(x)`. The `exp`s are micromath's with the `fast-math` feature
/// ([`softmax_exp`](super::fast_math::softmax_exp)).
pub fn softmax(x: &mut [f32]) {
    let m = max(x);
    let mut sum = 0.0;
    // eight or sixteen `exp`s at a time where a kernel does them so (the same bits), then all
    // added in order
    let by_eight = if super::SOFTMAX_EXP8 { x.len() / 8 * 8 } else { 0 };
    let (eights, rest) = x.split_at_mut(by_eight);
    super::softmax_exps(eights, m);
    for v in eights.iter() {
        sum += *v;
    }
    for v in rest.iter_mut() {
        *v = super::fast_math::softmax_exp(*v - m);
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::{vec, vec::Vec};

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
        let noise = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 2654435761 + seed * 40503) >> 5) % 2001) as f32 / 97.0 - 10.3)
                .collect()
        };
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(3, 11)]
        } else {
            &[(1, 1), (7, 9), (40, 37), (33, 64)]
        };
        for &(rows, cols) in shapes {
            let dense = noise(rows * cols, 1);
            let halves: Vec<f16> = dense.iter().map(|&v| f16::from_f32(v)).collect();
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
        let noise = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 2654435761 + seed * 40503) >> 5) % 2001) as f32 / 1000.0 - 1.0)
                .collect()
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
                        let xs: Vec<Vec<f32>> = (0..inputs).map(|p| noise(rows, 10 + p)).collect();
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

    /// An int4 matrix of `rows x cols` with every value in `-8..=7` and every multiplier code
    /// (a fixed sequence), returned with its values unpacked.
    fn int4_matrix(rows: usize, cols: usize, group: usize) -> (Vec<i8>, Vec<u8>, Vec<u8>) {
        let mut state = 0x2545_f491_u32;
        let mut next = move || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state >> 8
        };
        let q: Vec<i8> = (0..rows * cols).map(|_| (next() % 16) as i8 - 8).collect();
        let mut packed = vec![0u8; rows * int4_row_bytes(cols)];
        for (row, out) in q.chunks(cols).zip(packed.chunks_mut(int4_row_bytes(cols))) {
            crate::weights::int4_pack_row(row, out);
        }
        let codes = (0..rows * int4_groups(cols, group))
            .map(|_| next() as u8)
            .collect();
        (q, packed, codes)
    }

    #[test]
    fn i64_to_f32_rounds_as_the_cast_does() {
        let mut values = vec![0i64, 1, -1, i64::MAX, i64::MIN, i64::MIN + 1];
        for k in 24..63 {
            let p = 1i64 << k;
            for base in [p, p + (p >> 24), p + (p >> 23), 3 * (p >> 1)] {
                // around each rounding boundary: the tie, and one either side of it
                for d in [-2i64, -1, 0, 1, 2] {
                    values.push(base.saturating_add(d));
                    values.push(base.saturating_add(d).saturating_neg());
                }
            }
        }
        for v in [i32::MAX as i64, i32::MIN as i64] {
            values.extend([v - 1, v, v + 1]);
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..if cfg!(miri) { 100 } else { 100_000 } {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            values.push((state >> (state % 40)) as i64 * if state & 1 == 0 { 1 } else { -1 });
        }
        for v in values {
            assert_eq!(i64_to_f32(v).to_bits(), (v as f32).to_bits(), "{v}");
        }
    }

    #[test]
    fn int4_values_unpack_as_packed_at_every_position() {
        let cols = 21;
        let values: Vec<i8> = (0..cols).map(|c| (c % 16) as i8 - 8).collect();
        let mut row = vec![0u8; int4_row_bytes(cols)];
        crate::weights::int4_pack_row(&values, &mut row);
        for (c, &v) in values.iter().enumerate() {
            assert_eq!(int4_value(&row, c), v, "column {c}");
        }
        // the documented order: byte k of a block holds columns k (low) and k + 4 (high)
        assert_eq!(row[0], ((-8i8 as u8) & 0xf) | (((-4i8) as u8) << 4));
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
        quantize_activations(&x, None, &mut xq);
        let mut sums = vec![0i64; rows];
        super::super::int4_row_sums(&packed, group, &codes, &xq, &[], &mut sums);
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
        let mut scratch = vec![0u32; crate::kernels::scratch_words(cols)];
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
        let mut scratch = vec![0u32; crate::kernels::scratch_words(rows)];
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

    #[test]
    fn f16_widening_is_exact_for_every_value() {
        for bits in 0..=u16::MAX {
            let half = f16::from_bits(bits);
            let (ours, theirs) = (f16_to_f32(half), half.to_f32());
            assert!(
                ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
                "{bits:#06x}: {ours} vs {theirs}"
            );
        }
    }

    #[test]
    fn activations_quantize_symmetrically() {
        let mut q = [0i8; 4];
        let scale = quantize_activations(&[1.0, -0.5, 0.25, 0.0], None, &mut q);
        assert_eq!(q, [127, -64, 32, 0]);
        assert_eq!(scale, 1.0 / 127.0);
        assert_eq!(quantize_activations(&[0.0; 4], None, &mut q), 0.0);
    }

    #[test]
    fn rounding_equals_libm_roundf() {
        let check = |y: f32| {
            let reference = libm::roundf(y) as i32;
            assert_eq!(round_in_range(y), reference, "{y:e} ({:#010x})", y.to_bits());
        };
        for special in [
            f32::NAN,
            0.0,
            -0.0,
            0.5,
            -0.5,
            0.49999997,
            -0.49999997,
            8388607.5,
            2e9,
            -2e9,
        ] {
            check(special);
        }
        // every integer and half-integer in -260..=260, and 64 ulps either side of each
        for k in -260..=260 {
            for base in [k as f32, k as f32 + 0.5] {
                let (mut up, mut down) = (base, base);
                for _ in 0..if cfg!(miri) { 2 } else { 64 } {
                    check(up);
                    check(down);
                    up = f32::from_bits(up.to_bits().wrapping_add(if up >= 0.0 { 1 } else { u32::MAX }));
                    down = f32::from_bits(down.to_bits().wrapping_add(if down > 0.0 { u32::MAX } else { 1 }));
                }
            }
        }
        // and a sweep of the range
        let steps = if cfg!(miri) { 1_000 } else { 2_000_000 };
        for i in 0..steps {
            check(-300.0 + 600.0 * i as f32 / steps as f32);
        }
    }

    #[test]
    fn quantization_rounds_as_roundf_and_clamps_a_subnormal_range() {
        let x = [
            1.0,
            -0.5,
            0.25,
            0.0,
            0.7,
            -0.003,
            f32::NAN,
            1.0 / 254.0,
            -1.5 / 254.0,
        ];
        let mut q = [0i8; 9];
        let scale = quantize_activations(&x, None, &mut q);
        for (v, q) in x.iter().zip(&q) {
            assert_eq!(*q, libm::roundf(v * 127.0).clamp(-127.0, 127.0) as i8, "{v}");
        }
        assert_eq!(scale, 1.0 / 127.0);
        // max |x| subnormal: 127 / max overflows; the largest still maps to 127
        let tiny = [f32::from_bits(1), -f32::from_bits(1), 0.0];
        let mut q = [0i8; 3];
        quantize_activations(&tiny, None, &mut q);
        assert_eq!(q, [127, -127, 0]);
    }

    #[test]
    fn log_softmax_normalises() {
        let mut x = [1.0, 2.0, 3.0, -100.0];
        log_softmax(&mut x);
        let total: f32 = x.iter().map(|v| libm::expf(*v)).sum();
        // With `fast-math` the `exp`s inside are off by up to EXP_MAX_RELATIVE_ERROR.
        let tolerance = 1e-6 + crate::kernels::fast_math::EXP_MAX_RELATIVE_ERROR;
        assert!((total - 1.0).abs() < tolerance);
        assert!((x[2] - x[1] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn layer_norm_of_zero_is_the_bias() {
        let mut out = [0.0; 3];
        let (gain, bias) = (Vector::F32(&[2.0; 3]), Vector::F32(&[0.5, -1.0, 3.0]));
        layer_norm(&[0.0; 3], gain, bias, 1e-5, &mut out);
        assert_eq!(out, [0.5, -1.0, 3.0]);
    }

    /// The rows side by side against one `layer_norm_in_place` per row, bit for bit: widths
    /// with and without a whole chunk of the vectors, row counts around a block of sixteen, f32
    /// and f16 gains and biases, and rows of negative zeros, of one value, and with a NaN.
    #[test]
    fn layer_norm_rows_have_the_bits_of_one_row_at_a_time() {
        let value = |i: usize| (((i * 2654435761) >> 9) % 4001) as f32 / 100.0 - 20.0;
        let widths: &[usize] = if cfg!(miri) { &[5, 33] } else { &[1, 5, 33, 128] };
        let counts: &[usize] = if cfg!(miri) {
            &[1, 17]
        } else {
            &[1, 2, 15, 16, 17, 40]
        };
        for &width in widths {
            let gain: Vec<f32> = (0..width).map(|i| 1.0 + value(i + 7) / 40.0).collect();
            let bias: Vec<f32> = (0..width).map(|i| value(i + 11) / 10.0).collect();
            let gain16: Vec<f16> = gain.iter().map(|&g| f16::from_f32(g)).collect();
            let bias16: Vec<f16> = bias.iter().map(|&b| f16::from_f32(b)).collect();
            let vectors = [
                (Vector::F32(&gain), Vector::F32(&bias)),
                (Vector::F16(&gain16), Vector::F16(&bias16)),
            ];
            for &rows in counts {
                let mut x: Vec<f32> = (0..rows * width).map(|i| value(i + 100 * width)).collect();
                for (r, row) in x.chunks_exact_mut(width).enumerate() {
                    match r % 5 {
                        1 => row.fill(-0.0),
                        2 => row.fill(3.25),
                        3 => row[width / 2] = f32::NAN,
                        _ => {}
                    }
                }
                for (gain, bias) in vectors {
                    let mut want = x.clone();
                    for row in want.chunks_exact_mut(width) {
                        layer_norm_in_place(row, gain, bias, 1e-5);
                    }
                    let mut got = x.clone();
                    layer_norm_rows_in_place(&mut got, width, gain, bias, 1e-5);
                    // a NaN's sign and payload are not the arithmetic's to keep (Miri varies
                    // them): every NaN compares as one
                    let bits = |v: &[f32]| {
                        v.iter()
                            .map(|f| {
                                if f.is_nan() {
                                    f32::NAN.to_bits()
                                } else {
                                    f.to_bits()
                                }
                            })
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(bits(&got), bits(&want), "{rows} rows of {width}");
                }
            }
        }
    }
}
