//! The int8 row kernel for eight inputs or more on CPUs with 512-bit AVX-512 VNNI: each lane
//! of a register sums one row, so a tile of 48 rows (three registers) meets eight inputs a step
//! of four columns, in 24 accumulators, and no row's lanes are added up at the end.
//!
//! [`vnni`](super::vnni)'s pair kernel multiplies a row's 64 columns into a register a step and
//! adds each row's sixteen lanes at the end, as do kernels of four or six rows; on rows of 1,024
//! columns those additions cost a fifth of the products. Here the weights of a block of rows are
//! laid out once into a panel: for each sixteen rows, each four columns of the sixteen rows side
//! by side in 64 bytes (a transpose of 16 × 16 dwords), their sign bits flipped. A step loads a
//! tile's three registers of weights, and each input's four bytes of those columns, broadcast,
//! meet all three: one `VPDPBUSD` adds four products to each of sixteen rows.
//!
//! The sums: a lane adds `(w + 128) * x` (the flipped weight, unsigned, times the signed input),
//! and `128 * Σ x` ([`excess`]) is taken off each row's total once, every addition wrapping in
//! i32, so each row's sum is the exact `w · x`, the bits of
//! [`dot_i8`](crate::kernels::portable::dot_i8). Columns after the last whole four are added as the
//! portable code adds them. Each sum is then scaled as the portable code scales it, `sum as f32
//! * (row_scale * input_scale)`.

use core::arch::x86_64::*;

/// Inputs a tile takes.
pub const TILE_INPUTS: usize = 8;

/// Rows a register sums, one a lane.
const LANES: usize = 16;

/// Registers of rows a tile takes.
const TILE_REGISTERS: usize = 3;

/// Rows a tile takes; blocks of rows that are a multiple of it leave no rows to smaller steps.
pub const TILE_ROWS: usize = TILE_REGISTERS * LANES;

/// Columns a step takes: the four bytes each lane multiplies.
const QUAD: usize = 4;

std::thread_local! {
    /// A block of rows laid out for the steps, reused from call to call.
    static PANEL: core::cell::RefCell<Vec<u8>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// What the flipped sign bits add to a row's sum for the input `xq` of rows of `cols`: `128 * Σ
/// xq[c]` over the columns the steps take (wrapping).
pub fn excess(xq: &[i8], cols: usize) -> i32 {
    let body = (cols / QUAD * QUAD).min(xq.len());
    xq[..body]
        .iter()
        .fold(0i32, |sum, &x| sum.wrapping_add(i32::from(x)))
        .wrapping_mul(128)
}

/// One input of the kernel: its int8 values, the scale they were quantized with, its
/// [`excess`].
#[derive(Clone, Copy, Debug)]
pub struct QuantizedInput<'a> {
    /// The int8 values, `cols` of them.
    pub values: &'a [i8],
    /// `x ≈ values * scale`.
    pub scale: f32,
    /// [`excess`] of `values`.
    pub excess: i32,
}

/// `outs[p][r] = (row r · inputs[p].values) as f32 * (row_scales[r] * inputs[p].scale)` for
/// every row of `values` (rows of `cols`, as many as `row_scales`) and each input of the whole
/// groups of eight among `inputs`: the rows are laid out into a panel once, then every tile of
/// 48 rows meets each group. Returns the inputs done (a multiple of eight; the caller does the
/// rest). `next` (the block of rows the caller takes next) is asked for from memory into the
/// second-level cache, a share with each group (the first would lose it to the panel's reads).
///
/// # Safety
/// `values` must hold `row_scales.len()` rows of `cols`, every input `cols` values and every
/// output at least `row_scales.len()` elements; the CPU must support AVX-512F, AVX-512VL and
/// AVX-512 VNNI ([`has_vnni_512`](crate::kernels::features::has_vnni_512)).
#[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
pub unsafe fn scaled_rows_in_groups(
    values: &[i8],
    cols: usize,
    row_scales: &[f32],
    inputs: &[QuantizedInput<'_>],
    outs: &mut [&mut [f32]],
    next: &[i8],
) -> usize {
    let rows = row_scales.len();
    let values = &values[..rows * cols];
    let groups = inputs.len().min(outs.len()) / TILE_INPUTS;
    let quads = cols / QUAD;
    let registers = rows / LANES;
    let tiles = registers / TILE_REGISTERS;
    // (first row, registers): the tiles, then the rows in registers of sixteen after them
    let units = || {
        let tiled = (0..tiles).map(|t| (t * TILE_ROWS, TILE_REGISTERS));
        tiled.chain((tiles * TILE_REGISTERS..registers).map(|g| (g * LANES, 1)))
    };
    let block = Block {
        values,
        cols,
        row_scales,
    };
    PANEL.with_borrow_mut(|panel| {
        // grown, never shrunk: no zeroing on every call, from block to block of other sizes
        let len = registers * LANES * quads * QUAD;
        if panel.len() < len {
            panel.resize(len, 0);
        }
        for (first, count) in units() {
            let part = &mut panel[first * quads * QUAD..(first + count * LANES) * quads * QUAD];
            // SAFETY: the rows `first..first + 16 * count` are inside the block, the part holds
            // their `quads` quads; the CPU has AVX-512F (this function's contract).
            unsafe {
                lay_out(
                    &values[first * cols..(first + count * LANES) * cols],
                    cols,
                    count,
                    part,
                )
            };
        }
        for g in 0..groups {
            super::prefetch::share_into::<_, 2>(next, g..g + 1, groups);
            let group: &[QuantizedInput<'_>; TILE_INPUTS] = inputs[g * TILE_INPUTS..][..TILE_INPUTS]
                .try_into()
                .expect("a whole group");
            let outs = &mut outs[g * TILE_INPUTS..(g + 1) * TILE_INPUTS];
            let xq = group.map(|input| &input.values[..cols]);
            for (first, count) in units() {
                let part = &panel[first * quads * QUAD..(first + count * LANES) * quads * QUAD];
                let mut totals = [[0i32; TILE_ROWS]; TILE_INPUTS];
                if quads > 0 {
                    // SAFETY: the part holds `quads` steps of `count` registers, every input
                    // `cols >= 4 * quads` values; the CPU has the features (the contract).
                    unsafe {
                        if count == TILE_REGISTERS {
                            tile(part, quads, xq, &mut totals);
                        } else {
                            register(part, quads, xq, &mut totals);
                        }
                    }
                }
                block.finish(first..first + count * LANES, group, &totals, outs);
            }
            // the rows after the last whole register, as the portable code sums them
            for r in registers * LANES..rows {
                let row = &values[r * cols..(r + 1) * cols];
                for ((input, x), out) in group.iter().zip(xq).zip(outs.iter_mut()) {
                    out[r] = crate::kernels::portable::dot_i8(row, x) as f32 * (row_scales[r] * input.scale);
                }
            }
        }
    });
    groups * TILE_INPUTS
}

/// The rows of one call, for finishing their sums.
#[derive(Clone, Copy)]
struct Block<'a> {
    /// Rows of `cols`.
    values: &'a [i8],
    cols: usize,
    row_scales: &'a [f32],
}

impl Block<'_> {
    /// `outs[p][r] = (totals[p][r - rows.start] - excess_p + tail) as f32 * (row_scales[r] *
    /// scale_p)` for the rows `rows` (at most 48), `tail` the columns after the last whole four,
    /// in the portable order.
    #[inline(always)]
    fn finish(
        &self,
        rows: core::ops::Range<usize>,
        group: &[QuantizedInput<'_>; TILE_INPUTS],
        totals: &[[i32; TILE_ROWS]; TILE_INPUTS],
        outs: &mut [&mut [f32]],
    ) {
        let (cols, body) = (self.cols, self.cols / QUAD * QUAD);
        let scales = &self.row_scales[rows.clone()];
        for ((input, totals), out) in group.iter().zip(totals).zip(outs.iter_mut()) {
            let out = &mut out[rows.clone()];
            if body == cols {
                for ((y, &total), &scale) in out.iter_mut().zip(totals).zip(scales) {
                    *y = total.wrapping_sub(input.excess) as f32 * (scale * input.scale);
                }
                continue;
            }
            for (i, ((y, &total), &scale)) in out.iter_mut().zip(totals).zip(scales).enumerate() {
                let row = &self.values[(rows.start + i) * cols..(rows.start + i + 1) * cols];
                let tail = crate::kernels::portable::dot_i8(&row[body..], &input.values[body..cols]);
                let sum = total.wrapping_sub(input.excess).wrapping_add(tail);
                *y = sum as f32 * (scale * input.scale);
            }
        }
    }
}

/// Lays out `count` registers of rows (`rows`: `16 * count` rows of `cols`) for the steps: step
/// `q` (columns `4q..4q + 4`) at `q * count * 64`, register `g` of it at `+ g * 64`, lane `i` its
/// row `16g + i`'s four bytes, sign bits flipped.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn lay_out(rows: &[i8], cols: usize, count: usize, panel: &mut [u8]) {
    let quads = cols / QUAD;
    assert!(rows.len() >= count * LANES * cols && panel.len() >= count * LANES * quads * QUAD);
    let flip = _mm512_set1_epi8(i8::MIN);
    for g in 0..count {
        // SAFETY: register `g`'s first row is inside `rows` (asserted above).
        let first_row = unsafe { rows.as_ptr().add(g * LANES * cols) };
        for first in (0..quads).step_by(LANES) {
            let n = LANES.min(quads - first);
            let mask = (u32::MAX >> (32 - n)) as __mmask16;
            // row `16g + i`'s quads `first..first + n`, in the lanes of register `i`
            let mut block = [_mm512_setzero_si512(); LANES];
            for (i, lanes) in block.iter_mut().enumerate() {
                // SAFETY: the mask reads quads `first..first + n` of row `16g + i`, inside its
                // `cols` (`4 * (first + n) <= cols`), inside `rows` (asserted above).
                let w =
                    unsafe { _mm512_maskz_loadu_epi32(mask, first_row.add(i * cols + first * QUAD).cast()) };
                *lanes = _mm512_xor_si512(w, flip);
            }
            super::avx512::transpose_sixteen(&mut block);
            for (j, quad) in block[..n].iter().enumerate() {
                let to = &mut panel[((first + j) * count + g) * 64..][..64];
                // SAFETY: `to` holds 64 bytes.
                unsafe { _mm512_storeu_si512(to.as_mut_ptr().cast(), *quad) };
            }
        }
    }
}

/// A tile's part of the panel (`quads` steps of three registers) against eight inputs: each
/// input's sums of the 48 rows in `totals`, the flipped bits' excess still in them. Written in
/// assembly: the 24 accumulators stay in registers from the first step to the last.
///
/// # Safety
/// `panel` must hold `192 * quads` bytes and every input `4 * quads`, `quads >= 1`; the CPU
/// must support AVX-512F and AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn tile(
    panel: &[u8],
    quads: usize,
    xq: [&[i8]; TILE_INPUTS],
    totals: &mut [[i32; TILE_ROWS]; TILE_INPUTS],
) {
    let body = quads * QUAD;
    debug_assert!(quads >= 1 && panel.len() >= TILE_ROWS * body && xq.iter().all(|x| x.len() >= body));
    let zero = _mm512_setzero_si512();
    // each input's end, and the offset `c` from it, -body up to zero, which ends the loop
    // SAFETY: `body` elements are in every input (the contract).
    let ends = xq.map(|x| unsafe { x.as_ptr().add(body) });
    // SAFETY: each pass reads the panel's 192 bytes of a step and four bytes of each input at
    // `end + c`, then moves on; `quads` passes stay inside them (the contract) and `c` reaches
    // zero (`quads >= 1`). The totals' 1,536 bytes are written. No stack; every register
    // written is declared.
    unsafe {
        core::arch::asm!(
            "2:",
            "vmovdqu64 zmm0, zmmword ptr [{panel}]",
            "vmovdqu64 zmm1, zmmword ptr [{panel} + 64]",
            "vmovdqu64 zmm2, zmmword ptr [{panel} + 128]",
            "vpbroadcastd zmm3, dword ptr [{x0} + {c}]",
            "vpdpbusd zmm8, zmm0, zmm3",
            "vpdpbusd zmm9, zmm1, zmm3",
            "vpdpbusd zmm10, zmm2, zmm3",
            "vpbroadcastd zmm4, dword ptr [{x1} + {c}]",
            "vpdpbusd zmm11, zmm0, zmm4",
            "vpdpbusd zmm12, zmm1, zmm4",
            "vpdpbusd zmm13, zmm2, zmm4",
            "vpbroadcastd zmm3, dword ptr [{x2} + {c}]",
            "vpdpbusd zmm14, zmm0, zmm3",
            "vpdpbusd zmm15, zmm1, zmm3",
            "vpdpbusd zmm16, zmm2, zmm3",
            "vpbroadcastd zmm4, dword ptr [{x3} + {c}]",
            "vpdpbusd zmm17, zmm0, zmm4",
            "vpdpbusd zmm18, zmm1, zmm4",
            "vpdpbusd zmm19, zmm2, zmm4",
            "vpbroadcastd zmm3, dword ptr [{x4} + {c}]",
            "vpdpbusd zmm20, zmm0, zmm3",
            "vpdpbusd zmm21, zmm1, zmm3",
            "vpdpbusd zmm22, zmm2, zmm3",
            "vpbroadcastd zmm4, dword ptr [{x5} + {c}]",
            "vpdpbusd zmm23, zmm0, zmm4",
            "vpdpbusd zmm24, zmm1, zmm4",
            "vpdpbusd zmm25, zmm2, zmm4",
            "vpbroadcastd zmm3, dword ptr [{x6} + {c}]",
            "vpdpbusd zmm26, zmm0, zmm3",
            "vpdpbusd zmm27, zmm1, zmm3",
            "vpdpbusd zmm28, zmm2, zmm3",
            "vpbroadcastd zmm4, dword ptr [{x7} + {c}]",
            "vpdpbusd zmm29, zmm0, zmm4",
            "vpdpbusd zmm30, zmm1, zmm4",
            "vpdpbusd zmm31, zmm2, zmm4",
            "add {panel}, 192",
            "add {c}, 4",
            "jnz 2b",
            "vmovdqu32 zmmword ptr [{totals}], zmm8",
            "vmovdqu32 zmmword ptr [{totals} + 64], zmm9",
            "vmovdqu32 zmmword ptr [{totals} + 128], zmm10",
            "vmovdqu32 zmmword ptr [{totals} + 192], zmm11",
            "vmovdqu32 zmmword ptr [{totals} + 256], zmm12",
            "vmovdqu32 zmmword ptr [{totals} + 320], zmm13",
            "vmovdqu32 zmmword ptr [{totals} + 384], zmm14",
            "vmovdqu32 zmmword ptr [{totals} + 448], zmm15",
            "vmovdqu32 zmmword ptr [{totals} + 512], zmm16",
            "vmovdqu32 zmmword ptr [{totals} + 576], zmm17",
            "vmovdqu32 zmmword ptr [{totals} + 640], zmm18",
            "vmovdqu32 zmmword ptr [{totals} + 704], zmm19",
            "vmovdqu32 zmmword ptr [{totals} + 768], zmm20",
            "vmovdqu32 zmmword ptr [{totals} + 832], zmm21",
            "vmovdqu32 zmmword ptr [{totals} + 896], zmm22",
            "vmovdqu32 zmmword ptr [{totals} + 960], zmm23",
            "vmovdqu32 zmmword ptr [{totals} + 1024], zmm24",
            "vmovdqu32 zmmword ptr [{totals} + 1088], zmm25",
            "vmovdqu32 zmmword ptr [{totals} + 1152], zmm26",
            "vmovdqu32 zmmword ptr [{totals} + 1216], zmm27",
            "vmovdqu32 zmmword ptr [{totals} + 1280], zmm28",
            "vmovdqu32 zmmword ptr [{totals} + 1344], zmm29",
            "vmovdqu32 zmmword ptr [{totals} + 1408], zmm30",
            "vmovdqu32 zmmword ptr [{totals} + 1472], zmm31",
            panel = inout(reg) panel.as_ptr() => _,
            x0 = in(reg) ends[0],
            x1 = in(reg) ends[1],
            x2 = in(reg) ends[2],
            x3 = in(reg) ends[3],
            x4 = in(reg) ends[4],
            x5 = in(reg) ends[5],
            x6 = in(reg) ends[6],
            x7 = in(reg) ends[7],
            c = inout(reg) body.wrapping_neg() => _,
            totals = in(reg) totals.as_mut_ptr(),
            out("zmm0") _,
            out("zmm1") _,
            out("zmm2") _,
            out("zmm3") _,
            out("zmm4") _,
            inout("zmm8") zero => _,
            inout("zmm9") zero => _,
            inout("zmm10") zero => _,
            inout("zmm11") zero => _,
            inout("zmm12") zero => _,
            inout("zmm13") zero => _,
            inout("zmm14") zero => _,
            inout("zmm15") zero => _,
            inout("zmm16") zero => _,
            inout("zmm17") zero => _,
            inout("zmm18") zero => _,
            inout("zmm19") zero => _,
            inout("zmm20") zero => _,
            inout("zmm21") zero => _,
            inout("zmm22") zero => _,
            inout("zmm23") zero => _,
            inout("zmm24") zero => _,
            inout("zmm25") zero => _,
            inout("zmm26") zero => _,
            inout("zmm27") zero => _,
            inout("zmm28") zero => _,
            inout("zmm29") zero => _,
            inout("zmm30") zero => _,
            inout("zmm31") zero => _,
            options(nostack),
        );
    }
}

/// [`tile`] for one register of sixteen rows (the rows after the last whole tile): the sums of
/// the sixteen rows in the first sixteen of each input's `totals`.
///
/// # Safety
/// `panel` must hold `64 * quads` bytes and every input `4 * quads`; the CPU must support
/// AVX-512F and AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn register(
    panel: &[u8],
    quads: usize,
    xq: [&[i8]; TILE_INPUTS],
    totals: &mut [[i32; TILE_ROWS]; TILE_INPUTS],
) {
    let mut sums = [_mm512_setzero_si512(); TILE_INPUTS];
    for (q, weights) in panel.chunks_exact(LANES * QUAD).take(quads).enumerate() {
        // SAFETY: `weights` holds 64 bytes; AVX-512F (the contract).
        let weights = unsafe { _mm512_loadu_si512(weights.as_ptr().cast()) };
        for (sum, x) in sums.iter_mut().zip(xq) {
            let quad = i32::from_le_bytes(core::array::from_fn(|k| x[q * QUAD + k] as u8));
            *sum = _mm512_dpbusd_epi32(*sum, weights, _mm512_set1_epi32(quad));
        }
    }
    for (total, sum) in totals.iter_mut().zip(sums) {
        // SAFETY: each input's totals hold 48 i32, the first sixteen written; AVX-512F.
        unsafe { _mm512_storeu_si512(total.as_mut_ptr().cast(), sum) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::features::has_vnni_512;
    use crate::rng::Rng;

    /// Every shape class: whole tiles, a register and rows after the last register, columns
    /// with and without a tail past the last four and fewer than sixteen quads, the extreme
    /// values -128 and 127, two groups of inputs and one left for the caller.
    #[test]
    fn the_sums_are_the_portable_ones_scaled() {
        if !has_vnni_512() {
            crate::test_skips::skipped("no 512-bit AVX-512 VNNI here");
            return;
        }
        let mut rng = Rng::new(3);
        let mut bytes = |n: usize| -> Vec<i8> { (0..n).map(|_| (rng.next_u64() >> 56) as i8).collect() };
        for (rows, cols) in [
            (48, 64),
            (7, 130),
            (100, 1024),
            (67, 203),
            (16, 3),
            (97, 68),
            (50, 4),
        ] {
            let mut values = bytes(rows * cols);
            values[0] = i8::MIN;
            values[rows * cols - 1] = i8::MAX;
            let row_scales: Vec<f32> = (0..rows).map(|r| 0.001 + r as f32 * 1.0e-4).collect();
            let mut quantized: Vec<Vec<i8>> = (0..2 * TILE_INPUTS + 1).map(|_| bytes(cols)).collect();
            quantized[0].fill(i8::MIN);
            quantized[1].fill(i8::MAX);
            let inputs: Vec<QuantizedInput<'_>> = quantized
                .iter()
                .enumerate()
                .map(|(p, x)| QuantizedInput {
                    values: x,
                    scale: 0.01 + p as f32 * 0.003,
                    excess: excess(x, cols),
                })
                .collect();
            let mut outs = vec![vec![0.0f32; rows]; inputs.len()];
            let mut slices: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            // SAFETY: the shapes hold (built above); the CPU has the features (checked above).
            let done =
                unsafe { scaled_rows_in_groups(&values, cols, &row_scales, &inputs, &mut slices, &[]) };
            assert_eq!(done, 2 * TILE_INPUTS);
            assert!(
                outs[done].iter().all(|&y| y == 0.0),
                "the input past the groups is the caller's"
            );
            for (p, out) in outs[..done].iter().enumerate() {
                for (r, &y) in out.iter().enumerate() {
                    let row = &values[r * cols..(r + 1) * cols];
                    let sum = crate::kernels::portable::dot_i8(row, inputs[p].values);
                    let want = sum as f32 * (row_scales[r] * inputs[p].scale);
                    assert_eq!(
                        y.to_bits(),
                        want.to_bits(),
                        "rows {rows}, cols {cols}, input {p}, row {r}"
                    );
                }
            }
        }
    }
}
