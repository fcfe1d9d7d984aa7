//! Symmetric int4 with one scale per matrix and one 8-bit multiplier code per group of columns,
//! each group's code chosen to minimise its squared error (a clip search per group).
//!
//! The image stores `W[r][c] = (q[r][c] * int4_multiplier(code[r][g])) as f32 * scale`, `g = c /
//! group` ([`txl_core::weights`]); the codes are small floats (four exponent bits, four
//! mantissa bits) over a range of 2^16, so the loudest and the quietest groups of a matrix
//! both get a step within 3–6% of the one they want, for one byte a group: 4.25 bits a weight
//! at `group = 32`.

use txl_core::weights::{int4_groups, int4_multiplier, int4_pack_row, int4_row_bytes};

/// The largest value written (`-8` is never written: the grid is symmetric).
pub const Q_MAX: f32 = 7.0;

/// Columns per multiplier unless asked otherwise.
pub const DEFAULT_GROUP: usize = 32;

/// The group sizes `txl quantize --group-size` suggests.
pub const GROUPS: [usize; 3] = [32, 64, 128];

/// Fractions of a group's widest step tried as its step (1.0 never clips).
const CLIP_RATIOS: [f32; 12] = [
    1.0, 0.97, 0.94, 0.91, 0.88, 0.85, 0.82, 0.79, 0.76, 0.72, 0.68, 0.64,
];

/// An int4 matrix, unpacked: `W[r][c] ≈ (values[r][c] * int4_multiplier(codes[r][c / group]))
/// as f32 * scale`.
#[derive(Clone, Debug, PartialEq)]
pub struct Int4Matrix {
    /// `(rows, cols)` values in `-7..=7`.
    pub values: Vec<i8>,
    /// The matrix's scale.
    pub scale: f32,
    /// `(rows, int4_groups(cols, group))` multiplier codes.
    pub codes: Vec<u8>,
    /// Columns per group.
    pub group: usize,
}

/// `w / step` rounded into the grid (a zero step gives 0).
fn grid_value(w: f32, step: f32) -> f32 {
    if step > 0.0 {
        (w / step).round().clamp(-Q_MAX, Q_MAX)
    } else {
        0.0
    }
}

/// The weight grid value `q` of a group with `code` stands for, as the core computes it.
fn weight_of(q: f32, code: u8, scale: f32) -> f32 {
    (q as i32 * int4_multiplier(code)) as f32 * scale
}

/// The code whose multiplier is nearest `multiplier` (16 for anything below it).
fn nearest_code(multiplier: f32) -> u8 {
    if multiplier.is_nan() || multiplier <= 16.0 {
        return 0;
    }
    let exponent = ((multiplier / 16.0).log2().floor() as i32).clamp(0, 15);
    let mantissa = (multiplier / (1 << exponent) as f32).round() as i32 - 16;
    match (exponent, mantissa) {
        (15, m) if m > 15 => 255,
        (e, m) if m > 15 => ((e + 1) << 4) as u8,
        (e, m) => ((e << 4) + m.clamp(0, 15)) as u8,
    }
}

/// Squared error of `group` rounded with `code`.
fn group_error(group: &[f32], code: u8, scale: f32) -> f64 {
    let step = int4_multiplier(code) as f32 * scale;
    group
        .iter()
        .map(|&w| {
            let d = (w - weight_of(grid_value(w, step), code, scale)) as f64;
            d * d
        })
        .sum()
}

/// The group a matrix of `cols` columns stores for `group` asked (a multiple of 8): a group
/// longer than the row becomes the row, rounded up to 8, which means the same and is the one
/// encoding the image accepts.
pub fn stored_group(cols: usize, group: usize) -> usize {
    group.min(cols.next_multiple_of(8)).max(8)
}

/// Quantizes `weight (rows, cols)` with `group` columns per multiplier ([`stored_group`]).
pub fn quantize(weight: &[f32], cols: usize, group: usize) -> Int4Matrix {
    let group = stored_group(cols, group);
    let rows = weight.len() / cols;
    let groups = int4_groups(cols, group);
    let widest_step = |part: &[f32]| part.iter().fold(0.0f32, |m, v| m.max(v.abs())) / Q_MAX;
    let largest_step = weight
        .chunks_exact(cols)
        .flat_map(|row| row.chunks(group))
        .map(widest_step)
        .fold(0.0f32, f32::max);
    let scale = largest_step / int4_multiplier(u8::MAX) as f32;
    let mut values = vec![0i8; weight.len()];
    let mut codes = vec![0u8; rows * groups];
    if !(scale > 0.0 && scale.is_finite()) {
        return Int4Matrix {
            values,
            scale: 0.0,
            codes,
            group,
        };
    }
    for (r, row) in weight.chunks_exact(cols).enumerate() {
        for (g, part) in row.chunks(group).enumerate() {
            let widest = widest_step(part) / scale;
            let mut best = (f64::INFINITY, 0u8);
            for ratio in CLIP_RATIOS {
                let code = nearest_code(widest * ratio);
                let error = group_error(part, code, scale);
                if error < best.0 {
                    best = (error, code);
                }
            }
            codes[r * groups + g] = best.1;
            let step = int4_multiplier(best.1) as f32 * scale;
            for (c, &w) in part.iter().enumerate() {
                values[r * cols + g * group + c] = grid_value(w, step) as i8;
            }
        }
    }
    Int4Matrix {
        values,
        scale,
        codes,
        group,
    }
}

impl Int4Matrix {
    /// The step of column `c` of row `r` (`cols` columns a row).
    pub fn step(&self, r: usize, c: usize, cols: usize) -> f32 {
        let groups = int4_groups(cols, self.group);
        int4_multiplier(self.codes[r * groups + c / self.group]) as f32 * self.scale
    }

    /// The matrix this stands for, in f32, with the core's bits.
    pub fn dequantize(&self, cols: usize) -> Vec<f32> {
        let groups = int4_groups(cols, self.group);
        self.values
            .chunks_exact(cols)
            .enumerate()
            .flat_map(|(r, row)| {
                row.iter().enumerate().map(move |(c, &q)| {
                    weight_of(q as f32, self.codes[r * groups + c / self.group], self.scale)
                })
            })
            .collect()
    }

    /// The values packed two a byte in the image's order.
    pub fn packed(&self, cols: usize) -> Vec<u8> {
        let row_bytes = int4_row_bytes(cols);
        let rows = self.values.len() / cols;
        let mut packed = vec![0u8; rows * row_bytes];
        for (row, out) in self
            .values
            .chunks_exact(cols)
            .zip(packed.chunks_exact_mut(row_bytes))
        {
            int4_pack_row(row, out);
        }
        packed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize::int8::tests::laplacian_row;
    use txl_core::weights::{Matrix, MatrixData};

    #[test]
    fn the_core_reads_the_matrix_the_quantizer_meant() {
        let (rows, cols, group) = (5, 75, 32);
        let weight = laplacian_row(rows * cols);
        let q = quantize(&weight, cols, group);
        assert!(q.values.iter().all(|v| (-7..=7).contains(v)));
        let packed = q.packed(cols);
        let matrix = Matrix {
            rows,
            cols,
            data: MatrixData::Int4 {
                values: &packed,
                scale: q.scale,
                codes: &q.codes,
                group,
            },
        };
        let back = q.dequantize(cols);
        let mut row = vec![0.0f32; cols];
        for r in 0..rows {
            matrix.row_to_f32(r, &mut row);
            assert_eq!(row, back[r * cols..(r + 1) * cols], "row {r}");
        }
    }

    #[test]
    fn codes_name_the_nearest_multiplier() {
        for code in 0..=u8::MAX {
            let multiplier = int4_multiplier(code) as f32;
            assert_eq!(nearest_code(multiplier), code, "multiplier {multiplier}");
            // between two neighbours, the nearer one
            if code < u8::MAX {
                let next = int4_multiplier(code + 1) as f32;
                assert_eq!(nearest_code(multiplier + 0.4 * (next - multiplier)), code);
                assert_eq!(nearest_code(multiplier + 0.6 * (next - multiplier)), code + 1);
            }
        }
        assert_eq!(nearest_code(3.0), 0);
        assert_eq!(nearest_code(2e6), u8::MAX);
    }

    #[test]
    fn groups_beat_one_scale_per_row_and_the_search_beats_the_widest_step() {
        let (rows, cols) = (16, 256);
        let mut weight = laplacian_row(rows * cols);
        // one loud column per row, as attention and feed-forward inputs have
        for row in weight.chunks_exact_mut(cols) {
            row[17] = 0.9;
        }
        let error = |q: &Int4Matrix| -> f64 {
            let back = q.dequantize(cols);
            weight
                .iter()
                .zip(&back)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum()
        };
        let grouped = error(&quantize(&weight, cols, 32));
        let one_group = error(&quantize(&weight, cols, cols));
        assert!(
            grouped < 0.5 * one_group,
            "groups of 32: {grouped}, one per row: {one_group}"
        );
        // the widest step alone (no clip search): every group at ratio 1.0
        let widest = {
            let mut q = quantize(&weight, cols, 32);
            let groups = int4_groups(cols, 32);
            for r in 0..rows {
                for g in 0..groups {
                    let part = &weight[r * cols + g * 32..r * cols + (g + 1) * 32];
                    let step = part.iter().fold(0.0f32, |m, v| m.max(v.abs())) / Q_MAX;
                    let code = nearest_code(step / q.scale);
                    q.codes[r * groups + g] = code;
                    for (c, &w) in part.iter().enumerate() {
                        q.values[r * cols + g * 32 + c] =
                            grid_value(w, int4_multiplier(code) as f32 * q.scale) as i8;
                    }
                }
            }
            error(&q)
        };
        assert!(grouped < widest, "searched: {grouped}, widest step: {widest}");
    }
}
