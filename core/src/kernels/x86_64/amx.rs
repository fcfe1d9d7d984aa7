//! x86-64 int8 row sums with AMX (Advanced Matrix Extensions: Sapphire Rapids and later Xeons),
//! chosen at run time (feature `std`, Linux, which must grant a process the tile registers).
//!
//! `TDPBSSD` multiplies a tile of 16 rows of 64 signed bytes by a tile of 16 rows of 64 signed
//! bytes laid out four bytes a column, and adds the i32 sums of each four products into a tile
//! of 16 × 16 i32: 16,384 multiply-accumulates an instruction. Here the first tile is sixteen
//! weight rows read in place (the row length is the tile's stride), the second holds sixteen
//! inputs' 64 columns with each group of four consecutive columns side by side (the layout the
//! instruction reads, built once per call in a thread's own buffer), and the result holds
//! `values[r] · xq[p]` for sixteen rows and sixteen inputs. Two weight tiles against two input
//! tiles a step keep four result tiles in the eight registers.
//!
//! Every addition wraps in i32 (the instruction has no saturating form), so a sum is the exact
//! `values[r] · xq[p]` modulo 2³², which is the exact sum itself wherever the portable i32 sum
//! is exact: the same bits as [`crate::kernels::portable::dot_i8`]. When 64 does not divide a row, its
//! last step reads on into the next row, whose bytes meet zeros in the input tile and add
//! nothing; rows past the last whole tile of 16 (and a last tile whose reading would pass the
//! end of the weights) are left to the caller.

use core::arch::asm;
use core::arch::x86_64::*;
use core::cell::RefCell;

#[cfg(test)]
use crate::kernels::portable;

/// Rows (and inputs) a tile holds.
const TILE: usize = 16;

/// Bytes of a tile's row: the columns one step takes.
const STEP: usize = 64;

/// Bytes of one input tile: `TILE` rows of `STEP` bytes.
const INPUT_TILE_BYTES: usize = TILE * STEP;

/// Four result tiles as `TILESTORED` writes them, each row on a cache line of its own.
#[repr(C, align(64))]
struct ResultTiles([[[i32; TILE]; TILE]; 4]);

/// The 64-byte tile configuration `LDTILECFG` reads: palette 1, every tile 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn all_full() -> TileConfig {
        let mut bytes = [0u8; 64];
        bytes[0] = 1; // palette 1: eight tiles of up to 16 rows of 64 bytes
        for tile in 0..8 {
            bytes[16 + 2 * tile] = STEP as u8; // bytes a row (little-endian u16)
            bytes[48 + tile] = TILE as u8; // rows
        }
        TileConfig(bytes)
    }
}

std::thread_local! {
    /// The inputs in the layout `TDPBSSD` reads, reused from call to call.
    static INPUT_LAYOUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Writes the first `cols` columns of every input of `xq` in the instruction's layout: for each
/// block of sixteen inputs and each step of 64 columns, a tile whose row `j` holds columns
/// `4j..4j + 4` of the step for the sixteen inputs side by side; zeros for inputs past the last
/// and for columns past `cols` (the last step's, when 64 does not divide `cols`). The tiles
/// start at the first 64-byte boundary of `buffer`, so each of their rows is one cache line:
/// a tile load whose rows straddle two lines takes about twice as long (measured, 64-byte
/// aligned against 16: 1.4 against 0.6 T int8 MAC/s). Returns the tiles.
fn lay_out_inputs<'b>(xq: &[&[i8]], cols: usize, buffer: &'b mut Vec<u8>) -> &'b [u8] {
    let steps = cols.div_ceil(STEP);
    let blocks = xq.len().div_ceil(TILE);
    let len = blocks * steps * INPUT_TILE_BYTES;
    buffer.resize(len + STEP - 1, 0);
    let skip = buffer.as_ptr().align_offset(STEP).min(STEP - 1);
    let layout = &mut buffer[skip..skip + len];
    for (block, inputs) in xq.chunks(TILE).enumerate() {
        for step in 0..steps {
            // row n: input n's 64 columns as sixteen words of four bytes
            let mut words = [[0i32; TILE]; TILE];
            for (row, x) in words.iter_mut().zip(inputs) {
                let columns = &x[step * STEP..cols.min((step + 1) * STEP)];
                let row_bytes: &mut [u8] = bytemuck::cast_slice_mut(row);
                row_bytes[..columns.len()].copy_from_slice(bytemuck::cast_slice(columns));
            }
            // SAFETY: `has_amx_int8` checked AVX-512F (and only such a CPU gets here).
            let tile = unsafe { transpose(&words) };
            layout[(block * steps + step) * INPUT_TILE_BYTES..][..INPUT_TILE_BYTES]
                .copy_from_slice(bytemuck::cast_slice(&tile));
        }
    }
    layout
}

/// Rows of `cols` the tile kernel may take from `values.len()` bytes, at most `wanted`: whole
/// tiles of sixteen, each row read in whole steps of 64 bytes. When 64 does not divide `cols`
/// the last step of a row reads on into the next row (whose bytes meet the zeros the input
/// layout has past `cols`, and add nothing), so the last row taken must have those bytes inside
/// `values`.
fn rows_for_tiles(len: usize, cols: usize, wanted: usize) -> usize {
    let read = cols.div_ceil(STEP) * STEP;
    if cols == 0 || len < read {
        return 0;
    }
    let rows = wanted.min(1 + (len - read) / cols);
    rows / TILE * TILE
}

/// `sums[p][r] = values[r * cols..][..cols] · xq[p]` in i32 for every input `p` and the rows
/// `r` of every whole tile of sixteen that fits in `values` (see the module docs) and every
/// output; returns how many rows that is (a multiple of 16; the caller does the rest). Equal
/// to `portable::dot_i8` per row and input.
///
/// # Safety
/// [`has_amx_int8`](crate::kernels::features::has_amx_int8) must have returned true.
pub unsafe fn row_sums_many(values: &[i8], cols: usize, xq: &[&[i8]], sums: &mut [&mut [i32]]) -> usize {
    // SAFETY: this function's contract.
    let [done] = unsafe { row_sums_tiles_i8(values, cols, xq, [sums]) };
    done
}

/// [`row_sums_many`] for rows split among outputs: part `k`'s rows follow part `k - 1`'s, as
/// many as its shortest output holds, and `parts[k][p][i]` is the sum of part `k`'s row `i`
/// with input `p`. The inputs are laid out once for every part; returns each part's rows
/// taken from its start (whole tiles; a part's last step may read on into the next part's
/// rows).
///
/// # Safety
/// [`has_amx_int8`](crate::kernels::features::has_amx_int8) must have returned true.
pub unsafe fn row_sums_tiles_i8<const PARTS: usize>(
    values: &[i8],
    cols: usize,
    xq: &[&[i8]],
    mut parts: [&mut [&mut [i32]]; PARTS],
) -> [usize; PARTS] {
    let inputs = parts.iter().fold(xq.len(), |n, sums| n.min(sums.len()));
    let part_rows = parts
        .each_ref()
        .map(|sums| sums[..inputs].iter().map(|s| s.len()).min().unwrap_or(0));
    let mut taken = [0; PARTS];
    let mut start = 0;
    for (&rows, taken) in part_rows.iter().zip(taken.iter_mut()) {
        *taken = rows_for_tiles(values.len().saturating_sub(start * cols), cols, rows);
        start += rows;
    }
    if inputs == 0 || taken.iter().all(|&t| t == 0) || xq[..inputs].iter().any(|x| x.len() < cols) {
        return [0; PARTS];
    }
    INPUT_LAYOUT.with_borrow_mut(|buffer| {
        let layout = lay_out_inputs(&xq[..inputs], cols, buffer);
        let config = TileConfig::all_full();
        // SAFETY: the CPU has AMX-TILE and the tile state is granted (this function's
        // contract); the configuration is 64 readable bytes.
        unsafe { asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack)) };
        let mut start = 0;
        for ((sums, &rows), &part_rows) in parts.iter_mut().zip(&taken).zip(&part_rows) {
            // SAFETY: `rows_for_tiles` bounded `rows` within the values from `start`; the CPU
            // has AMX and AVX-512F (this function's contract); the layout holds the inputs.
            unsafe { tile_rows(&values[start * cols..], cols, rows, layout, &mut sums[..inputs]) };
            start += part_rows;
        }
        // SAFETY: the tiles are configured; releasing them returns the state to its start.
        unsafe { asm!("tilerelease", options(nostack)) };
    });
    taken
}

/// The first `rows` (a multiple of 16) rows of `values` against the inputs laid out in
/// `layout`, into `sums[p][..rows]`.
///
/// # Safety
/// The tiles are configured ([`TileConfig::all_full`]) and the CPU has AVX-512F; `rows` is at
/// most [`rows_for_tiles`] of `values`; `layout` holds [`lay_out_inputs`] of `sums.len()`
/// inputs of `cols` columns.
unsafe fn tile_rows(values: &[i8], cols: usize, rows: usize, layout: &[u8], sums: &mut [&mut [i32]]) {
    let (steps, inputs) = (cols.div_ceil(STEP), sums.len());
    let blocks = inputs.div_ceil(TILE);
    // every call of `tile_products` stores all four tiles before they are read
    let mut out = ResultTiles([[[0i32; TILE]; TILE]; 4]);
    let mut row = 0;
    while row < rows {
        let row_tiles = if row + 2 * TILE <= rows { 2 } else { 1 };
        let mut block = 0;
        while block < blocks {
            let input_tiles = if block + 2 <= blocks { 2 } else { 1 };
            // SAFETY: rows `row..row + row_tiles * 16`, each read in `steps` whole steps of 64
            // bytes, are inside `values` (`rows_for_tiles`); the layout holds `steps` input
            // tiles for each of `blocks` blocks; `out` has room for four tiles of 16 rows of 64
            // bytes; the tiles are configured (this function's contract).
            unsafe {
                tile_products(
                    values.as_ptr().add(row * cols),
                    cols,
                    layout.as_ptr().add(block * steps * INPUT_TILE_BYTES),
                    steps,
                    (row_tiles, input_tiles),
                    &mut out.0,
                )
            };
            for (t, tile) in out.0.iter().enumerate() {
                let (row_tile, input_tile) = (t / 2, t % 2);
                let first = (block + input_tile) * TILE;
                if row_tile >= row_tiles || input_tile >= input_tiles {
                    continue;
                }
                let r = row + row_tile * TILE;
                // the tile's columns are the inputs: each becomes sixteen sums of one output
                // SAFETY: the CPU has AVX-512F (this function's contract).
                let by_input = unsafe { transpose(tile) };
                for (p, lane) in (first..inputs).zip(by_input.iter()) {
                    sums[p][r..r + TILE].copy_from_slice(lane);
                }
            }
            block += input_tiles;
        }
        row += row_tiles * TILE;
    }
}

/// `tile` with its rows and columns exchanged, in AVX-512F registers: pairs of rows
/// interleaved by 32-bit then 64-bit elements, then 128-bit lanes gathered across four rows.
///
/// # Safety
/// The CPU must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn transpose(tile: &[[i32; TILE]; TILE]) -> [[i32; TILE]; TILE] {
    // SAFETY: each row is 16 readable i32; the CPU has AVX-512F (this function's contract).
    let rows: [__m512i; TILE] =
        core::array::from_fn(|i| unsafe { _mm512_loadu_si512(tile[i].as_ptr().cast()) });
    // pairs of rows, 32-bit elements interleaved within each 128-bit lane
    let pairs: [__m512i; TILE] = core::array::from_fn(|i| {
        let (a, b) = (rows[i / 2 * 2], rows[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    // quads[4g + e], lane k: element 4k + e of rows 4g..4g + 4
    let quads: [__m512i; TILE] = core::array::from_fn(|i| {
        let (g, e) = (i / 4, i % 4);
        let (a, b) = (pairs[4 * g + e / 2], pairs[4 * g + 2 + e / 2]);
        if e % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    let mut out = [[0i32; TILE]; TILE];
    for e in 0..4 {
        // lanes 0 and 2, and 1 and 3, of the row groups 0 and 1, and 2 and 3
        let even_low = _mm512_shuffle_i32x4::<0x88>(quads[e], quads[4 + e]);
        let odd_low = _mm512_shuffle_i32x4::<0xdd>(quads[e], quads[4 + e]);
        let even_high = _mm512_shuffle_i32x4::<0x88>(quads[8 + e], quads[12 + e]);
        let odd_high = _mm512_shuffle_i32x4::<0xdd>(quads[8 + e], quads[12 + e]);
        let columns = [
            _mm512_shuffle_i32x4::<0x88>(even_low, even_high),
            _mm512_shuffle_i32x4::<0x88>(odd_low, odd_high),
            _mm512_shuffle_i32x4::<0xdd>(even_low, even_high),
            _mm512_shuffle_i32x4::<0xdd>(odd_low, odd_high),
        ];
        for (k, column) in columns.into_iter().enumerate() {
            // SAFETY: `out[4k + e]` has room for 16 i32.
            unsafe { _mm512_storeu_si512(out[4 * k + e].as_mut_ptr().cast(), column) };
        }
    }
    out
}

/// Result tiles for `row_tiles` (1 or 2) tiles of weight rows from `weights` (row stride
/// `cols`) and `input_tiles` (1 or 2) blocks of laid-out inputs from `inputs` (each block
/// `steps` tiles), over `steps` steps of 64 columns, into `out[row_tile * 2 + input_tile]`.
/// Nothing is prefetched: the processor's own prefetching of the rows does better (software
/// prefetches of the next 32 rows cost 2% of a WikiText-103 int8 run, and 1.2 to 1.3 times the
/// time of weights streamed from memory in a probe).
///
/// # Safety
/// The tiles are configured ([`TileConfig::all_full`]); `row_tiles * 16` rows of `steps * 64`
/// bytes at stride `cols` are readable from `weights`; `input_tiles * steps` tiles of 1,024
/// bytes from `inputs`.
#[inline]
unsafe fn tile_products(
    weights: *const i8,
    cols: usize,
    inputs: *const u8,
    steps: usize,
    (row_tiles, input_tiles): (usize, usize),
    out: &mut [[[i32; TILE]; TILE]; 4],
) {
    let second_rows = TILE * cols;
    let second_inputs = steps * INPUT_TILE_BYTES;
    // SAFETY: (every instruction of this block) the addresses are inside the ranges this
    // function's contract makes readable (or, for the stores, inside `out`); the tiles are
    // configured.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack)
        );
        for step in 0..steps {
            let a = weights.add(step * STEP);
            let b = inputs.add(step * INPUT_TILE_BYTES);
            match (row_tiles, input_tiles) {
                (2, 2) => asm!(
                    "tileloadd tmm4, [{a} + {stride}]",
                    "tileloadd tmm5, [{a2} + {stride}]",
                    "tileloadd tmm6, [{b} + {row}]",
                    "tileloadd tmm7, [{b2} + {row}]",
                    "tdpbssd tmm0, tmm4, tmm6",
                    "tdpbssd tmm1, tmm4, tmm7",
                    "tdpbssd tmm2, tmm5, tmm6",
                    "tdpbssd tmm3, tmm5, tmm7",
                    a = in(reg) a,
                    a2 = in(reg) a.add(second_rows),
                    b = in(reg) b,
                    b2 = in(reg) b.add(second_inputs),
                    stride = in(reg) cols,
                    row = in(reg) STEP,
                    options(nostack, readonly),
                ),
                (2, _) => asm!(
                    "tileloadd tmm4, [{a} + {stride}]",
                    "tileloadd tmm5, [{a2} + {stride}]",
                    "tileloadd tmm6, [{b} + {row}]",
                    "tdpbssd tmm0, tmm4, tmm6",
                    "tdpbssd tmm2, tmm5, tmm6",
                    a = in(reg) a,
                    a2 = in(reg) a.add(second_rows),
                    b = in(reg) b,
                    stride = in(reg) cols,
                    row = in(reg) STEP,
                    options(nostack, readonly),
                ),
                (_, 2) => asm!(
                    "tileloadd tmm4, [{a} + {stride}]",
                    "tileloadd tmm6, [{b} + {row}]",
                    "tileloadd tmm7, [{b2} + {row}]",
                    "tdpbssd tmm0, tmm4, tmm6",
                    "tdpbssd tmm1, tmm4, tmm7",
                    a = in(reg) a,
                    b = in(reg) b,
                    b2 = in(reg) b.add(second_inputs),
                    stride = in(reg) cols,
                    row = in(reg) STEP,
                    options(nostack, readonly),
                ),
                _ => asm!(
                    "tileloadd tmm4, [{a} + {stride}]",
                    "tileloadd tmm6, [{b} + {row}]",
                    "tdpbssd tmm0, tmm4, tmm6",
                    a = in(reg) a,
                    b = in(reg) b,
                    stride = in(reg) cols,
                    row = in(reg) STEP,
                    options(nostack, readonly),
                ),
            }
        }
        let row = TILE * 4;
        asm!(
            "tilestored [{o0} + {row}], tmm0",
            "tilestored [{o1} + {row}], tmm1",
            "tilestored [{o2} + {row}], tmm2",
            "tilestored [{o3} + {row}], tmm3",
            o0 = in(reg) out[0].as_mut_ptr(),
            o1 = in(reg) out[1].as_mut_ptr(),
            o2 = in(reg) out[2].as_mut_ptr(),
            o3 = in(reg) out[3].as_mut_ptr(),
            row = in(reg) row,
            options(nostack),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::features::has_amx_int8;
    use crate::rng::Rng;

    /// `len` random bytes (every one of -128..=127 possible) from the stream of `seed`.
    fn pattern(len: usize, seed: usize) -> Vec<i8> {
        let mut rng = Rng::new(seed as u64);
        (0..len).map(|_| (rng.next_u64() >> 56) as i8).collect()
    }

    #[test]
    fn the_input_layout_starts_on_a_line_whatever_the_buffer() {
        if !crate::kernels::features::has_avx512f() {
            crate::test_skips::skipped("no AVX-512F here");
            return;
        }
        let xs: Vec<Vec<i8>> = (0..19).map(|p| pattern(100, 5 * p + 1)).collect();
        let xq: Vec<&[i8]> = xs.iter().map(|x| x.as_slice()).collect();
        let mut first = Vec::new();
        let expected = lay_out_inputs(&xq, 100, &mut first).to_vec();
        // two blocks of inputs, two steps each (the second with zeros past column 100)
        assert_eq!(expected.len(), 2 * 2 * INPUT_TILE_BYTES);
        for reserved in [1, 17, 40, 63, 64, 1000] {
            // a buffer that already holds bytes, from wherever the allocator puts it
            let mut buffer = vec![0x5a; reserved];
            let layout = lay_out_inputs(&xq, 100, &mut buffer);
            assert!((layout.as_ptr() as usize).is_multiple_of(STEP), "{reserved}");
            assert_eq!(layout, &expected[..], "{reserved}");
        }
    }

    #[test]
    fn amx_row_sums_in_parts_equal_the_scalar_dot_per_row() {
        if !has_amx_int8() {
            crate::test_skips::skipped("no AMX int8 here");
            return;
        }
        // (cols, first part's rows, second part's rows, rows each part takes): a first part
        // whose last step reads on into the second part's rows, which alone would fall back
        for (cols, first, second, tiled) in [
            (100, 32, 7, [32, 0]),
            (100, 32, 0, [16, 0]),
            (128, 40, 33, [32, 32]),
            (96, 0, 48, [0, 32]),
        ] {
            let rows = first + second;
            let values = pattern(rows * cols, cols);
            let xs: Vec<Vec<i8>> = (0..19).map(|p| pattern(cols, 3 * p + 2)).collect();
            let xq: Vec<&[i8]> = xs.iter().map(|x| x.as_slice()).collect();
            let mut out_first = vec![vec![i32::MIN; first]; xs.len()];
            let mut out_second = vec![vec![i32::MIN; second]; xs.len()];
            let mut sums_first: Vec<&mut [i32]> = out_first.iter_mut().map(|s| s.as_mut_slice()).collect();
            let mut sums_second: Vec<&mut [i32]> = out_second.iter_mut().map(|s| s.as_mut_slice()).collect();
            // SAFETY: `has_amx_int8` returned true above.
            let done =
                unsafe { row_sums_tiles_i8(&values, cols, &xq, [&mut sums_first[..], &mut sums_second[..]]) };
            assert_eq!(done, tiled, "{cols} columns, parts of {first} and {second} rows");
            for (p, x) in xs.iter().enumerate() {
                for (part, (out, start)) in [(&out_first, 0), (&out_second, first)].into_iter().enumerate() {
                    for (i, &got) in out[p].iter().enumerate() {
                        let want = if i < done[part] {
                            portable::dot_i8(&values[(start + i) * cols..][..cols], x)
                        } else {
                            i32::MIN // rows past the whole tiles are the caller's
                        };
                        assert_eq!(got, want, "{cols} columns: part {part}, row {i}, input {p}");
                    }
                }
            }
        }
    }

    #[test]
    fn amx_row_sums_equal_the_scalar_dot_per_row() {
        if !has_amx_int8() {
            crate::test_skips::skipped("this CPU (or system) has no AMX int8");
            return;
        }
        // whole and partial tiles of rows and inputs, steps with and without a tail, the
        // extremes of the byte range
        // (rows, cols, inputs, rows the tiles take): whole and partial tiles of rows and
        // inputs, rows of whole steps and rows whose last step reads into the next row (not
        // past the weights' end: a last tile that would is the caller's)
        for (rows, cols, inputs, tiled) in [
            (16, 64, 1, 16),
            (32, 128, 16, 32),
            (48, 1024, 17, 48),
            (40, 100, 33, 32),
            (39, 100, 2, 32),
            (32, 100, 2, 16),
            (64, 192, 64, 64),
            (16, 63, 3, 0),
            (17, 63, 3, 16),
            (80, 4096 + 3, 5, 64),
            (32, 96, 64, 16),
        ] {
            let mut values = pattern(rows * cols, rows + cols);
            values[0] = i8::MIN;
            values[cols - 1] = i8::MIN;
            let xs: Vec<Vec<i8>> = (0..inputs)
                .map(|p| {
                    let mut x = pattern(cols, 7 * p + 1);
                    x[0] = if p % 2 == 0 { i8::MIN } else { i8::MAX };
                    x
                })
                .collect();
            let xq: Vec<&[i8]> = xs.iter().map(|x| x.as_slice()).collect();
            let mut out = vec![vec![i32::MIN; rows]; inputs];
            let mut sums: Vec<&mut [i32]> = out.iter_mut().map(|s| s.as_mut_slice()).collect();
            // SAFETY: `has_amx_int8` returned true above.
            let done = unsafe { row_sums_many(&values, cols, &xq, &mut sums) };
            assert_eq!(done, tiled, "{rows}x{cols}, {inputs} inputs: rows the tiles took");
            for (p, x) in xs.iter().enumerate() {
                for r in 0..rows {
                    let want = if r < done {
                        portable::dot_i8(&values[r * cols..][..cols], x)
                    } else {
                        i32::MIN // rows past the whole tiles are the caller's
                    };
                    assert_eq!(
                        out[p][r], want,
                        "{rows}x{cols}, {inputs} inputs: row {r}, input {p}"
                    );
                }
            }
        }
    }
}
