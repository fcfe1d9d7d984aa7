//! The exact row kernel for four inputs or more (the positions of a segment): a block of six rows
//! meets four inputs each step, in twelve accumulators.
//!
//! **The order** is the portable [`dot`](crate::kernels::portable::dot_f32)'s: column `c` of a row
//! goes to that row's accumulator `c % 4`, each product rounded and then added (no fused
//! multiply-add), and the sum is `(a0 + a1) + (a2 + a3) + tail`. So the bits are the device's.
//!
//! **The registers.** One register holds one row's four accumulators for two inputs:
//! `[row · x_a, lanes 0..3 | row · x_b, lanes 0..3]`. Each step takes four columns: a row's four
//! weights are broadcast to both halves (`VBROADCASTF128`) and multiply a register of two inputs'
//! four columns side by side. Six rows and two pairs of inputs make twelve accumulators; with the
//! two input registers, the broadcast row and one product, all sixteen registers are in use. The
//! loop is written in assembly because the compiler, given those sixteen, kept some accumulators
//! in memory.
//!
//! **The memory.** A step reads 160 bytes for 96 multiply-adds, so both operands must come from
//! the first-level cache, in as few streams as the prefetchers can follow:
//! - the inputs are copied once per call, `[group of four][column quad][input]`;
//! - six rows are copied (f16 widened, exactly) a chunk of [`CHUNK_QUADS`] quads at a time into a
//!   panel, `[column quad][row]`, which every group of inputs then reads as one stream.
//!
//! The sums of a chunk stay in memory between chunks, per group, so rows of any length keep a
//! small panel. With many groups the rows of the block after next are asked for while this one is
//! worked on ([`PREFETCH_LEAST_GROUPS`]).

use core::arch::x86_64::*;

use super::row_element::{row_tail, RowElement};

/// Rows of a block.
const BLOCK_ROWS: usize = 6;

/// Inputs of a block; the last group of a call is filled up with zeros, whose sums are dropped.
const BLOCK_INPUTS: usize = 4;

/// Column quads of a panel chunk: six rows of 1,024 columns (24 KB) and a group's inputs for
/// them (16 KB) about fill the first-level cache.
const CHUNK_QUADS: usize = 256;

/// Groups of inputs from which, in a matrix of 1 MB or more, the rows of the block after next
/// are asked for while the groups meet this one, a share with each group, so that their panel's
/// copy does not wait for memory. With 16 groups (passes of 64 positions, in segments of 128 at
/// the WikiText-103 shape) a run went from 103–111 to 112–114 tokens per second; with
/// 8 (segments of 32) it was slower, 97–98 against 102–104: fewer groups leave too little work
/// to hide the requests behind.
const PREFETCH_LEAST_GROUPS: usize = 16;

/// Accumulators of a block: six rows, two pairs of inputs.
type BlockSums = [__m256; 12];

/// What the block kernel keeps from call to call.
struct Buffers {
    /// The inputs, `[group][quad][input]`, four floats each.
    inputs: Vec<f32>,
    /// A chunk of six rows, `[quad][row]`, four floats each.
    panel: Vec<f32>,
    /// Each group's sums between chunks.
    sums: Vec<BlockSums>,
}

std::thread_local! {
    static BUFFERS: core::cell::RefCell<Buffers> = const {
        core::cell::RefCell::new(Buffers { inputs: Vec::new(), panel: Vec::new(), sums: Vec::new() })
    };
}

/// `outs[p][r] = rows[r * stride..][..cols] · xs[p]` for the rows `r` of whole blocks of six
/// below `n` and every input, with the bits of [`dot`](crate::kernels::portable::dot_f32) (f32 rows)
/// or [`dot_f16`](crate::kernels::portable::dot_f16) (f16 rows). Returns the rows done, a multiple
/// of six; the caller does the rest.
///
/// # Safety
/// Rows `0..n` of `cols` elements must be readable from `rows` at `stride`, `cols >= 4`, every
/// input must hold `cols` elements, `outs` must have an output of `n` for each input; the CPU
/// must support AVX and F16C.
#[target_feature(enable = "avx,f16c")]
pub(super) unsafe fn dots_strided_each_in_blocks<T: RowElement>(
    rows: &[T],
    stride: usize,
    n: usize,
    xs: &[&[f32]],
    outs: &mut [&mut [f32]],
    cols: usize,
) -> usize {
    if n < BLOCK_ROWS {
        return 0;
    }
    BUFFERS.with_borrow_mut(|buffers| {
        let quads = cols / 4;
        copy_inputs(xs, quads, &mut buffers.inputs);
        let groups = xs.len().div_ceil(BLOCK_INPUTS);
        buffers.sums.resize(groups, [_mm256_setzero_ps(); 12]);
        buffers.panel.resize(CHUNK_QUADS.min(quads) * BLOCK_ROWS * 4, 0.0);
        let prefetch = n * stride * core::mem::size_of::<T>() >= super::prefetch::LEAST_BYTES
            && groups >= PREFETCH_LEAST_GROUPS;
        let steps = quads.div_ceil(CHUNK_QUADS) * groups;
        let mut r = 0;
        while r + BLOCK_ROWS <= n {
            // SAFETY: rows `r..r + 6` are readable (`r + 6 <= n`, this function's contract).
            let block = unsafe { rows.as_ptr().add(r * stride) };
            // the rows of the block after next (and the gaps between them at a longer stride): the
            // next block's came too late to help as much (108 against 112 tokens a second, the
            // mean of six interleaved runs each at the WikiText-103 shape)
            let next_rows = (r + 3 * BLOCK_ROWS - 1) * stride + cols;
            let next = (prefetch && r + 3 * BLOCK_ROWS <= n)
                .then(|| &rows[(r + 2 * BLOCK_ROWS) * stride..next_rows]);
            buffers.sums.fill([_mm256_setzero_ps(); 12]);
            for (chunk_index, first) in (0..quads).step_by(CHUNK_QUADS).enumerate() {
                let chunk = first..quads.min(first + CHUNK_QUADS);
                // SAFETY: the chunk's quads are columns below `4 * quads <= cols` of the block.
                unsafe { copy_panel(block, stride, chunk.clone(), &mut buffers.panel) };
                for (group, sums) in buffers.sums.iter_mut().enumerate() {
                    if let Some(next) = next {
                        let step = chunk_index * groups + group;
                        super::prefetch::share_into::<_, 1>(next, step..step + 1, steps);
                    }
                    let inputs = &buffers.inputs[(group * quads + chunk.start) * 16..][..chunk.len() * 16];
                    // SAFETY: the panel and the inputs hold the chunk's quads (`chunk.len() >= 1`
                    // as `cols >= 4`); the CPU has AVX.
                    unsafe { block_steps(&buffers.panel, inputs, chunk.len(), sums) };
                }
            }
            for (group, sums) in buffers.sums.iter().enumerate() {
                let first = group * BLOCK_INPUTS;
                let xs = &xs[first..xs.len().min(first + BLOCK_INPUTS)];
                let outs = &mut outs[first..first + xs.len()];
                // SAFETY: as for this function, for the block's rows.
                unsafe { finish_block(sums, block, stride, cols, xs, outs, r) };
            }
            r += BLOCK_ROWS;
        }
        r
    })
}

/// The inputs as the block steps read them: for each group of four, each quad of columns holds
/// the four inputs' four columns in turn (zeros past the last input).
fn copy_inputs(xs: &[&[f32]], quads: usize, copied: &mut Vec<f32>) {
    let groups = xs.len().div_ceil(BLOCK_INPUTS);
    copied.clear();
    copied.resize(groups * quads * 16, 0.0);
    for (p, x) in xs.iter().enumerate() {
        let (group, slot) = (p / BLOCK_INPUTS, p % BLOCK_INPUTS);
        let dest = &mut copied[group * quads * 16..][..quads * 16];
        for (quad, column) in dest.chunks_exact_mut(16).zip(x.chunks_exact(4)) {
            quad[4 * slot..4 * slot + 4].copy_from_slice(column);
        }
    }
}

/// Quads `chunk` of the six rows at `block` into `panel`, `[quad][row]`, widened to f32.
///
/// # Safety
/// Columns `4 * chunk.start..4 * chunk.end` of six rows at `stride` must be readable from
/// `block`, and `panel` must hold `24 * chunk.len()` floats; the CPU must support AVX and F16C.
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn copy_panel<T: RowElement>(
    block: *const T,
    stride: usize,
    chunk: core::ops::Range<usize>,
    panel: &mut [f32],
) {
    let panel = &mut panel[..chunk.len() * BLOCK_ROWS * 4];
    for (quad, rows) in chunk.zip(panel.chunks_exact_mut(BLOCK_ROWS * 4)) {
        for (row, dest) in rows.chunks_exact_mut(4).enumerate() {
            // SAFETY: four columns from `4 * quad` of row `row < 6` (the contract); `dest` holds
            // four floats.
            unsafe { _mm_storeu_ps(dest.as_mut_ptr(), T::quad(block.add(row * stride + 4 * quad))) };
        }
    }
}

/// `steps` quads of the panel against one group's inputs, into `sums`: the twelve accumulators
/// stay in registers for the whole loop.
///
/// # Safety
/// `panel` and `inputs` must hold `steps >= 1` quads (`24` and `16` floats each); the CPU must
/// support AVX.
#[inline]
#[target_feature(enable = "avx")]
unsafe fn block_steps(panel: &[f32], inputs: &[f32], steps: usize, sums: &mut BlockSums) {
    debug_assert!(steps >= 1 && panel.len() >= steps * 24 && inputs.len() >= steps * 16);
    let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7, mut a8, mut a9, mut a10, mut a11] =
        *sums;
    // SAFETY: each pass reads 96 bytes of the panel and 64 of the inputs, `steps` passes, which
    // both hold (the contract); `steps >= 1`, so the count reaches zero. No stack, no flags kept;
    // the registers named are all declared.
    #[cfg(not(miri))]
    unsafe {
        core::arch::asm!(
            "2:",
            "vmovups {x01}, ymmword ptr [{inputs}]",
            "vmovups {x23}, ymmword ptr [{inputs} + 32]",
            "vbroadcastf128 {w}, xmmword ptr [{panel}]",
            "vmulps {t}, {w}, {x01}",
            "vaddps {a0}, {a0}, {t}",
            "vmulps {t}, {w}, {x23}",
            "vaddps {a1}, {a1}, {t}",
            "vbroadcastf128 {w}, xmmword ptr [{panel} + 16]",
            "vmulps {t}, {w}, {x01}",
            "vaddps {a2}, {a2}, {t}",
            "vmulps {t}, {w}, {x23}",
            "vaddps {a3}, {a3}, {t}",
            "vbroadcastf128 {w}, xmmword ptr [{panel} + 32]",
            "vmulps {t}, {w}, {x01}",
            "vaddps {a4}, {a4}, {t}",
            "vmulps {t}, {w}, {x23}",
            "vaddps {a5}, {a5}, {t}",
            "vbroadcastf128 {w}, xmmword ptr [{panel} + 48]",
            "vmulps {t}, {w}, {x01}",
            "vaddps {a6}, {a6}, {t}",
            "vmulps {t}, {w}, {x23}",
            "vaddps {a7}, {a7}, {t}",
            "vbroadcastf128 {w}, xmmword ptr [{panel} + 64]",
            "vmulps {t}, {w}, {x01}",
            "vaddps {a8}, {a8}, {t}",
            "vmulps {t}, {w}, {x23}",
            "vaddps {a9}, {a9}, {t}",
            "vbroadcastf128 {w}, xmmword ptr [{panel} + 80]",
            "vmulps {t}, {w}, {x01}",
            "vaddps {a10}, {a10}, {t}",
            "vmulps {t}, {w}, {x23}",
            "vaddps {a11}, {a11}, {t}",
            "add {panel}, 96",
            "add {inputs}, 64",
            "dec {steps}",
            "jnz 2b",
            panel = inout(reg) panel.as_ptr() => _,
            inputs = inout(reg) inputs.as_ptr() => _,
            steps = inout(reg) steps => _,
            a0 = inout(ymm_reg) a0,
            a1 = inout(ymm_reg) a1,
            a2 = inout(ymm_reg) a2,
            a3 = inout(ymm_reg) a3,
            a4 = inout(ymm_reg) a4,
            a5 = inout(ymm_reg) a5,
            a6 = inout(ymm_reg) a6,
            a7 = inout(ymm_reg) a7,
            a8 = inout(ymm_reg) a8,
            a9 = inout(ymm_reg) a9,
            a10 = inout(ymm_reg) a10,
            a11 = inout(ymm_reg) a11,
            x01 = out(ymm_reg) _,
            x23 = out(ymm_reg) _,
            w = out(ymm_reg) _,
            t = out(ymm_reg) _,
            options(nostack, readonly),
        );
    }
    // Miri cannot run `asm!`: the same loads, products and sums in intrinsics, so that it checks
    // the bytes the assembly reads.
    #[cfg(miri)]
    {
        let mut accumulators = [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11];
        for step in 0..steps {
            // SAFETY: step `step < steps` reads floats `16 * step..16 * step + 16` of the inputs
            // and `24 * step..24 * step + 24` of the panel, which hold them (the contract).
            unsafe {
                let x = inputs.as_ptr().add(16 * step);
                let (x01, x23) = (_mm256_loadu_ps(x), _mm256_loadu_ps(x.add(8)));
                for (row, pair) in accumulators.chunks_exact_mut(2).enumerate() {
                    let quad = _mm_loadu_ps(panel.as_ptr().add(24 * step + 4 * row));
                    let w = _mm256_set_m128(quad, quad);
                    pair[0] = _mm256_add_ps(pair[0], _mm256_mul_ps(w, x01));
                    pair[1] = _mm256_add_ps(pair[1], _mm256_mul_ps(w, x23));
                }
            }
        }
        [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11] = accumulators;
    }
    *sums = [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11];
}

/// The block's sums into `outs[p][first_row + i]` for its inputs: accumulators `2i` and `2i + 1`
/// hold row `i` against inputs `0 | 1` and `2 | 3`. Two rounds of `VHADDPS` add lanes `0 + 1`
/// and `2 + 3`, then those two sums (the portable `(a0 + a1) + (a2 + a3)`), two rows a
/// register; then each row's columns after the last quad (`tail`) are added. At most four
/// inputs.
///
/// # Safety
/// Six rows of `cols` elements must be readable from `block` at `stride`, every input must hold
/// `cols` elements and every output `first_row + 6`; the CPU must support AVX and F16C.
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn finish_block<T: RowElement>(
    sums: &BlockSums,
    block: *const T,
    stride: usize,
    cols: usize,
    xs: &[&[f32]],
    outs: &mut [&mut [f32]],
    first_row: usize,
) {
    let body = cols / 4 * 4;
    let per_row: [__m256; BLOCK_ROWS] =
        core::array::from_fn(|i| _mm256_hadd_ps(sums[2 * i], sums[2 * i + 1]));
    // Rows `2j` and `2j + 1` at `all[8j..8j + 8]`: row `2j` · inputs 0, 2, row `2j + 1` · 0, 2 |
    // row `2j` · 1, 3, row `2j + 1` · 1, 3; `LANE[row % 2][input]` is the lane.
    const LANE: [[usize; BLOCK_INPUTS]; 2] = [[0, 4, 1, 5], [2, 6, 3, 7]];
    let mut all = [0.0f32; 8 * BLOCK_ROWS / 2];
    for (pair, lanes) in all.chunks_exact_mut(8).enumerate() {
        let both = _mm256_hadd_ps(per_row[2 * pair], per_row[2 * pair + 1]);
        // SAFETY: `lanes` holds eight floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), both) };
    }
    for (input, (x, out)) in xs.iter().zip(outs.iter_mut()).enumerate() {
        let out = &mut out[first_row..first_row + BLOCK_ROWS];
        for (row, out) in out.iter_mut().enumerate() {
            let sum = all[row / 2 * 8 + LANE[row % 2][input]];
            // Without tail columns the portable kernel adds 0, which changes no sum: the lanes
            // start at +0, so no sum is -0.
            *out = if body < cols {
                // SAFETY: row `row < 6` of the block has `cols` readable elements (the contract).
                sum + unsafe { row_tail(block.add(row * stride), &x[..cols], body) }
            } else {
                sum
            };
        }
    }
}
