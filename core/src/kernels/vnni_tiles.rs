//! The int8 row kernel for six inputs or more on CPUs with 512-bit AVX-512 VNNI: a tile of four
//! rows meets six inputs each step, 64 columns at a time, in 24 accumulators.
//!
//! [`vnni`](super::vnni)'s pair kernel loads each register of weights, flips its sign bits and
//! multiplies it into two inputs' sums: eighteen instructions for eight `VPDPBUSD`. Here the
//! weights of a block of rows are flipped once, into a panel, and each loaded register meets
//! six inputs: ten loads for 24 `VPDPBUSD`, which leaves the multipliers as the only limit.
//!
//! The sums are the pair kernel's: a lane adds `(w + 128) * x` (the flipped weight, unsigned,
//! times the signed input), and `128 * Σ x` is taken off each row's total once (every addition
//! wraps in i32), so each row's sum is the exact `w · x`, the bits of
//! [`dot_i8`](super::scalar::dot_i8). Columns after the last whole 64 are added as the portable
//! code adds them.

use core::arch::x86_64::*;

/// Inputs a tile takes.
pub const TILE_INPUTS: usize = 6;

/// Rows a tile takes.
const TILE_ROWS: usize = 4;

/// Columns a step takes: one 512-bit register of bytes.
const STEP: usize = 64;

std::thread_local! {
    /// A block of rows with their weights' sign bits flipped, reused from call to call.
    static PANEL: core::cell::RefCell<Vec<u8>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// Whether this CPU has AVX-512 VNNI on 512-bit registers (with VL for the reductions, and the
/// pair kernel's features for [`excess`]).
#[inline]
pub fn has_vnni_512() -> bool {
    super::vnni::has_avx512_vnni() && std::is_x86_feature_detected!("avx512f")
}

/// What the flipped sign bits add to a row's sum for an input: `128 * Σ xq[..body]`
/// (wrapping), `body` the columns the steps take, summed as the pair kernel sums its input.
///
/// # Safety
/// `xq` must hold `cols` elements; the CPU must have the kernel's features ([`has_vnni_512`]).
pub unsafe fn excess(xq: &[i8], cols: usize) -> i32 {
    let body = cols / STEP * STEP;
    // SAFETY: `body <= cols`, a multiple of 32; `has_vnni_512` includes the pair kernel's
    // features (the contract).
    unsafe { super::vnni::evex::input_sum(&xq[..body], body) }.wrapping_mul(128)
}

/// `sums[p][r] = values[r * cols..][..cols] · xq[p]` in i32 for the `rows` rows of `values` and
/// each input of the whole groups of six among `xq`, `excess[p]` each input's [`excess`]: the
/// rows are flipped into a panel once, then every tile of four meets each group; the last rows
/// (fewer than four) are summed by the portable code. Returns the inputs done (a multiple of
/// six; the caller does the rest).
///
/// # Safety
/// `values` must hold `rows` rows of `cols`, every input `cols` elements, every output `rows`,
/// and `excess` an element for each input; the CPU must support AVX-512F, AVX-512VL and
/// AVX-512 VNNI ([`has_vnni_512`]).
#[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
pub unsafe fn row_sums_groups(
    values: &[i8],
    cols: usize,
    rows: usize,
    xq: &[&[i8]],
    excess: &[i32],
    sums: &mut [&mut [i32]],
) -> usize {
    let values = &values[..rows * cols];
    let groups = xq.len().min(sums.len()) / TILE_INPUTS;
    let body = cols / STEP * STEP;
    let tiled = rows / TILE_ROWS * TILE_ROWS;
    let steps = body / STEP;
    PANEL.with_borrow_mut(|panel| {
        // each tile's rows, a step at a time: `[tile][step][row][64 bytes]`, flipped
        panel.resize(tiled * body, 0);
        let flip = _mm512_set1_epi8(i8::MIN);
        let mut to = panel.chunks_exact_mut(STEP);
        for r in (0..tiled).step_by(TILE_ROWS) {
            for c in (0..body).step_by(STEP) {
                for (i, to) in (0..TILE_ROWS).zip(&mut to) {
                    let from = &values[(r + i) * cols + c..][..STEP];
                    // SAFETY: both hold 64 bytes; the CPU has AVX-512F.
                    unsafe {
                        let w = _mm512_loadu_si512(from.as_ptr().cast());
                        _mm512_storeu_si512(to.as_mut_ptr().cast(), _mm512_xor_si512(w, flip));
                    }
                }
            }
        }
        for g in 0..groups {
            let inputs = g * TILE_INPUTS..(g + 1) * TILE_INPUTS;
            let xq: [&[i8]; TILE_INPUTS] = core::array::from_fn(|p| &xq[inputs.start + p][..cols]);
            let sums = &mut sums[inputs.clone()];
            for r in (0..tiled).step_by(TILE_ROWS) {
                let four = if steps > 0 {
                    let panel = &panel[r * body..(r + TILE_ROWS) * body];
                    // SAFETY: the tile's part of the panel holds `steps` steps of four rows,
                    // every input `cols >= body` values; the CPU has the features (this
                    // function's contract).
                    unsafe { tile(panel, steps, xq) }
                } else {
                    [[0; TILE_ROWS]; TILE_INPUTS]
                };
                for (p, four) in four.iter().enumerate() {
                    let excess = excess[inputs.start + p];
                    for (i, &total) in four.iter().enumerate() {
                        sums[p][r + i] = total.wrapping_sub(excess);
                    }
                }
                if body < cols {
                    for (x, sums) in xq.iter().zip(sums.iter_mut()) {
                        for (i, sum) in sums[r..r + TILE_ROWS].iter_mut().enumerate() {
                            let row = &values[(r + i) * cols + body..(r + i + 1) * cols];
                            *sum = sum.wrapping_add(super::scalar::dot_i8(row, &x[body..]));
                        }
                    }
                }
            }
            for r in tiled..rows {
                let row = &values[r * cols..(r + 1) * cols];
                for (x, sums) in xq.iter().zip(sums.iter_mut()) {
                    sums[r] = super::scalar::dot_i8(row, x);
                }
            }
        }
    });
    groups * TILE_INPUTS
}

/// A tile's part of the panel (`steps` steps of four rows' 64 flipped bytes) against six
/// inputs: `[input][row]` lane totals, the flipped bits' excess still in them. Written in
/// assembly, the 24 accumulators in registers from the first step to the last, then each
/// input's four rows reduced together (interleaving unpacks, then the 128-bit quarters added:
/// the same wrapping sums in another order, so the same totals): the compiler, given 24
/// accumulators, kept some on the stack, and its reductions outside the loop took as long as a
/// tile's 16 steps over 1,024 columns.
///
/// # Safety
/// `panel` must hold `256 * steps` bytes and every input `64 * steps`, `steps >= 1`; the CPU
/// must support AVX-512F, AVX-512VL and AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
unsafe fn tile(panel: &[u8], steps: usize, xq: [&[i8]; TILE_INPUTS]) -> [[i32; TILE_ROWS]; TILE_INPUTS] {
    let body = steps * STEP;
    debug_assert!(steps >= 1 && panel.len() >= TILE_ROWS * body && xq.iter().all(|x| x.len() >= body));
    let mut totals = [[0i32; TILE_ROWS]; TILE_INPUTS];
    let zero = _mm512_setzero_si512();
    // each input's end, and the offset `c` from it, -body up to zero, which ends the loop
    // SAFETY: `body` elements are in every input (the contract).
    let ends = xq.map(|x| unsafe { x.as_ptr().add(body) });
    // SAFETY: each pass reads the panel's 256 bytes of a step and 64 bytes of each input at
    // `end + c`, then moves on; `steps` passes stay inside them (the contract) and `c` reaches
    // zero (`steps >= 1`). The totals' 96 bytes are written. No stack; every register written
    // is declared.
    unsafe {
        core::arch::asm!(
            "2:",
            "vmovdqu64 zmm0, zmmword ptr [{panel}]",
            "vmovdqu64 zmm1, zmmword ptr [{panel} + 64]",
            "vmovdqu64 zmm2, zmmword ptr [{panel} + 128]",
            "vmovdqu64 zmm3, zmmword ptr [{panel} + 192]",
            "vmovdqu64 zmm4, zmmword ptr [{x0} + {c}]",
            "vpdpbusd zmm8, zmm0, zmm4",
            "vpdpbusd zmm9, zmm1, zmm4",
            "vpdpbusd zmm10, zmm2, zmm4",
            "vpdpbusd zmm11, zmm3, zmm4",
            "vmovdqu64 zmm4, zmmword ptr [{x1} + {c}]",
            "vpdpbusd zmm12, zmm0, zmm4",
            "vpdpbusd zmm13, zmm1, zmm4",
            "vpdpbusd zmm14, zmm2, zmm4",
            "vpdpbusd zmm15, zmm3, zmm4",
            "vmovdqu64 zmm4, zmmword ptr [{x2} + {c}]",
            "vpdpbusd zmm16, zmm0, zmm4",
            "vpdpbusd zmm17, zmm1, zmm4",
            "vpdpbusd zmm18, zmm2, zmm4",
            "vpdpbusd zmm19, zmm3, zmm4",
            "vmovdqu64 zmm4, zmmword ptr [{x3} + {c}]",
            "vpdpbusd zmm20, zmm0, zmm4",
            "vpdpbusd zmm21, zmm1, zmm4",
            "vpdpbusd zmm22, zmm2, zmm4",
            "vpdpbusd zmm23, zmm3, zmm4",
            "vmovdqu64 zmm4, zmmword ptr [{x4} + {c}]",
            "vpdpbusd zmm24, zmm0, zmm4",
            "vpdpbusd zmm25, zmm1, zmm4",
            "vpdpbusd zmm26, zmm2, zmm4",
            "vpdpbusd zmm27, zmm3, zmm4",
            "vmovdqu64 zmm4, zmmword ptr [{x5} + {c}]",
            "vpdpbusd zmm28, zmm0, zmm4",
            "vpdpbusd zmm29, zmm1, zmm4",
            "vpdpbusd zmm30, zmm2, zmm4",
            "vpdpbusd zmm31, zmm3, zmm4",
            "add {panel}, 256",
            "add {c}, 64",
            "jnz 2b",
            "vpunpckldq zmm0, zmm8, zmm9",
            "vpunpckhdq zmm1, zmm8, zmm9",
            "vpaddd zmm8, zmm0, zmm1",
            "vpunpckldq zmm0, zmm10, zmm11",
            "vpunpckhdq zmm1, zmm10, zmm11",
            "vpaddd zmm10, zmm0, zmm1",
            "vpunpcklqdq zmm0, zmm8, zmm10",
            "vpunpckhqdq zmm1, zmm8, zmm10",
            "vpaddd zmm8, zmm0, zmm1",
            "vextracti64x4 ymm0, zmm8, 1",
            "vpaddd ymm8, ymm8, ymm0",
            "vextracti32x4 xmm0, ymm8, 1",
            "vpaddd xmm8, xmm8, xmm0",
            "vmovdqu32 xmmword ptr [{totals}], xmm8",
            "vpunpckldq zmm0, zmm12, zmm13",
            "vpunpckhdq zmm1, zmm12, zmm13",
            "vpaddd zmm12, zmm0, zmm1",
            "vpunpckldq zmm0, zmm14, zmm15",
            "vpunpckhdq zmm1, zmm14, zmm15",
            "vpaddd zmm14, zmm0, zmm1",
            "vpunpcklqdq zmm0, zmm12, zmm14",
            "vpunpckhqdq zmm1, zmm12, zmm14",
            "vpaddd zmm12, zmm0, zmm1",
            "vextracti64x4 ymm0, zmm12, 1",
            "vpaddd ymm12, ymm12, ymm0",
            "vextracti32x4 xmm0, ymm12, 1",
            "vpaddd xmm12, xmm12, xmm0",
            "vmovdqu32 xmmword ptr [{totals} + 16], xmm12",
            "vpunpckldq zmm0, zmm16, zmm17",
            "vpunpckhdq zmm1, zmm16, zmm17",
            "vpaddd zmm16, zmm0, zmm1",
            "vpunpckldq zmm0, zmm18, zmm19",
            "vpunpckhdq zmm1, zmm18, zmm19",
            "vpaddd zmm18, zmm0, zmm1",
            "vpunpcklqdq zmm0, zmm16, zmm18",
            "vpunpckhqdq zmm1, zmm16, zmm18",
            "vpaddd zmm16, zmm0, zmm1",
            "vextracti64x4 ymm0, zmm16, 1",
            "vpaddd ymm16, ymm16, ymm0",
            "vextracti32x4 xmm0, ymm16, 1",
            "vpaddd xmm16, xmm16, xmm0",
            "vmovdqu32 xmmword ptr [{totals} + 32], xmm16",
            "vpunpckldq zmm0, zmm20, zmm21",
            "vpunpckhdq zmm1, zmm20, zmm21",
            "vpaddd zmm20, zmm0, zmm1",
            "vpunpckldq zmm0, zmm22, zmm23",
            "vpunpckhdq zmm1, zmm22, zmm23",
            "vpaddd zmm22, zmm0, zmm1",
            "vpunpcklqdq zmm0, zmm20, zmm22",
            "vpunpckhqdq zmm1, zmm20, zmm22",
            "vpaddd zmm20, zmm0, zmm1",
            "vextracti64x4 ymm0, zmm20, 1",
            "vpaddd ymm20, ymm20, ymm0",
            "vextracti32x4 xmm0, ymm20, 1",
            "vpaddd xmm20, xmm20, xmm0",
            "vmovdqu32 xmmword ptr [{totals} + 48], xmm20",
            "vpunpckldq zmm0, zmm24, zmm25",
            "vpunpckhdq zmm1, zmm24, zmm25",
            "vpaddd zmm24, zmm0, zmm1",
            "vpunpckldq zmm0, zmm26, zmm27",
            "vpunpckhdq zmm1, zmm26, zmm27",
            "vpaddd zmm26, zmm0, zmm1",
            "vpunpcklqdq zmm0, zmm24, zmm26",
            "vpunpckhqdq zmm1, zmm24, zmm26",
            "vpaddd zmm24, zmm0, zmm1",
            "vextracti64x4 ymm0, zmm24, 1",
            "vpaddd ymm24, ymm24, ymm0",
            "vextracti32x4 xmm0, ymm24, 1",
            "vpaddd xmm24, xmm24, xmm0",
            "vmovdqu32 xmmword ptr [{totals} + 64], xmm24",
            "vpunpckldq zmm0, zmm28, zmm29",
            "vpunpckhdq zmm1, zmm28, zmm29",
            "vpaddd zmm28, zmm0, zmm1",
            "vpunpckldq zmm0, zmm30, zmm31",
            "vpunpckhdq zmm1, zmm30, zmm31",
            "vpaddd zmm30, zmm0, zmm1",
            "vpunpcklqdq zmm0, zmm28, zmm30",
            "vpunpckhqdq zmm1, zmm28, zmm30",
            "vpaddd zmm28, zmm0, zmm1",
            "vextracti64x4 ymm0, zmm28, 1",
            "vpaddd ymm28, ymm28, ymm0",
            "vextracti32x4 xmm0, ymm28, 1",
            "vpaddd xmm28, xmm28, xmm0",
            "vmovdqu32 xmmword ptr [{totals} + 80], xmm28",
            panel = inout(reg) panel.as_ptr() => _,
            x0 = in(reg) ends[0],
            x1 = in(reg) ends[1],
            x2 = in(reg) ends[2],
            x3 = in(reg) ends[3],
            x4 = in(reg) ends[4],
            x5 = in(reg) ends[5],
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
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape class: rows that are and are not a multiple of four, columns with and
    /// without a tail past the last 64 and fewer than 64, the extreme values -128 and 127, two
    /// groups of inputs and one left for the caller.
    #[test]
    fn the_sums_are_those_of_the_portable_dot() {
        if !has_vnni_512() {
            eprintln!("SKIPPED the_sums_are_those_of_the_portable_dot: no 512-bit AVX-512 VNNI here");
            return;
        }
        let byte = |i: usize| ((i.wrapping_mul(2_654_435_761) >> 11) % 256) as u8 as i8;
        for (rows, cols) in [(4, 64), (7, 130), (9, 1024), (3, 200), (12, 63)] {
            let mut values: Vec<i8> = (0..rows * cols).map(byte).collect();
            values[0] = i8::MIN;
            values[rows * cols - 1] = i8::MAX;
            let mut inputs: Vec<Vec<i8>> = (0..2 * TILE_INPUTS + 1)
                .map(|p| (0..cols).map(|c| byte(c * 31 + p * 977 + 5)).collect())
                .collect();
            inputs[0].fill(i8::MIN);
            inputs[1].fill(i8::MAX);
            let xq: Vec<&[i8]> = inputs.iter().map(|x| x.as_slice()).collect();
            let mut outs = vec![vec![0i32; rows]; xq.len()];
            let mut sums: Vec<&mut [i32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            // SAFETY: every input holds `cols`; the CPU has the features (checked above).
            let excess: Vec<i32> = xq.iter().map(|x| unsafe { excess(x, cols) }).collect();
            // SAFETY: the shapes hold (built above); the CPU has the features (checked above).
            let done = unsafe { row_sums_groups(&values, cols, rows, &xq, &excess, &mut sums) };
            assert_eq!(done, 2 * TILE_INPUTS);
            assert!(
                outs[done].iter().all(|&sum| sum == 0),
                "the input past the groups is the caller's"
            );
            for (p, out) in outs[..done].iter().enumerate() {
                for (r, &sum) in out.iter().enumerate() {
                    let row = &values[r * cols..(r + 1) * cols];
                    let want = super::super::scalar::dot_i8(row, xq[p]);
                    assert_eq!(sum, want, "rows {rows}, cols {cols}, input {p}, row {r}");
                }
            }
        }
    }
}
