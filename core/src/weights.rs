//! Typed views of weight matrices in the image: f32, f16, int8 with per-row scales, or int4
//! with one scale and a multiplier per group of columns.
//!
//! An int8 matrix stores `q[r][c]` with one f32 scale per row and, optionally, one f32
//! activation scale per column (SmoothQuant-style migration). The matrix it stands for is
//! ```text
//! W[r][c] = q[r][c] * row_scale[r] * act_scale[c]
//! ```
//! so `W @ x = row_scale * (q @ (act_scale * x))`: the activation scale is applied to the input
//! before it is quantized.
//!
//! An int4 matrix stores `q[r][c]` in `-8..=7` (the quantizer writes `-7..=7`), two to a byte,
//! one f32 scale for the whole matrix and one u8 code per row and group of `group` columns,
//! which names an integer multiplier (four exponent bits, four mantissa bits:
//! [`int4_multiplier`], 16 to 1,015,808, 3–6% apart):
//! ```text
//! W[r][c] = (q[r][c] * int4_multiplier(code[r][c / group])) as f32 * scale
//! ```
//! (`q * multiplier` is below 2^24, so exact in f32). The sums are integers to the end: `W x`
//! is `scale * x_scale * Σ_g multiplier_g * (q_g · xq_g)`, exact in i64.
//! Each row takes [`int4_row_bytes`]`(cols)` bytes: the columns in blocks of eight, block `b`
//! in the four bytes at `4b`, byte `k` holding column `8b + k` in its low nibble and column
//! `8b + k + 4` in its high one (columns past `cols` are zero). That order lets a DSP core turn
//! a word into the same 16-bit pairs as four int8 columns with two masks and four `SXTB16`s.

use half::f16;

use crate::included::{WEIGHTS_F16, WEIGHTS_F32, WEIGHTS_INT4, WEIGHTS_INT8};

/// Elements of a matrix.
#[derive(Clone, Copy, Debug)]
pub enum MatrixData<'a> {
    /// f32, row-major.
    F32(&'a [f32]),
    /// f32, row-major, whose products are summed in the fused order of
    /// [`kernels::matmul_fma_f32`](crate::kernels::matmul_fma_f32) (a model with
    /// [`set_fast_f32`](crate::Model::set_fast_f32) on): the same numbers as `F32` to a few ulps,
    /// not the same bits.
    F32Fma(&'a [f32]),
    /// f16, row-major.
    F16(&'a [f16]),
    /// Symmetric int8, row-major, with scales.
    Int8 {
        /// `(rows, cols)` quantized values.
        values: &'a [i8],
        /// `(rows)` scale of each row.
        row_scales: &'a [f32],
        /// `(cols)` scale applied to the input of each column, if any.
        act_scales: Option<&'a [f32]>,
    },
    /// Symmetric int4, two values a byte, with one scale and a multiplier per group.
    Int4 {
        /// `(rows, int4_row_bytes(cols))` packed values.
        values: &'a [u8],
        /// The matrix's scale.
        scale: f32,
        /// `(rows, int4_groups(cols, group))` codes of each row's groups' multipliers.
        codes: &'a [u8],
        /// Columns per group: a multiple of 8, from 8 to `cols` rounded up to 8.
        group: usize,
    },
}

pub use crate::kernels::portable::{int4_groups, int4_multiplier, int4_pack_row, int4_row_bytes, int4_value};
pub use crate::vector::{Vector, VectorElements};

/// A `(rows, cols)` row-major weight matrix, borrowed from the image.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// Rows (outputs of `W @ x`).
    pub rows: usize,
    /// Columns (inputs of `W @ x`).
    pub cols: usize,
    /// The elements.
    pub data: MatrixData<'a>,
}

impl<'a> Matrix<'a> {
    /// An f32 matrix over `data` (`rows * cols` elements).
    pub fn f32(rows: usize, cols: usize, data: &'a [f32]) -> Matrix<'a> {
        Matrix {
            rows,
            cols,
            data: MatrixData::F32(data),
        }
    }

    /// The matrix with its f32 products in the fused order ([`MatrixData::F32Fma`]) when
    /// `fast` and it is f32; any other matrix as it is.
    pub fn with_fast_f32(self, fast: bool) -> Matrix<'a> {
        match self.data {
            MatrixData::F32(d) if fast => Matrix {
                data: MatrixData::F32Fma(d),
                ..self
            },
            _ => self,
        }
    }

    /// Rows `start..end` as a matrix of their own.
    pub fn row_range(&self, start: usize, end: usize) -> Matrix<'a> {
        let (a, b) = (start * self.cols, end * self.cols);
        let data = match self.data {
            MatrixData::F32(d) if WEIGHTS_F32 => MatrixData::F32(&d[a..b]),
            MatrixData::F32Fma(d) if WEIGHTS_F32 => MatrixData::F32Fma(&d[a..b]),
            MatrixData::F16(d) if WEIGHTS_F16 => MatrixData::F16(&d[a..b]),
            MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } if WEIGHTS_INT8 => MatrixData::Int8 {
                values: &values[a..b],
                row_scales: &row_scales[start..end],
                act_scales,
            },
            MatrixData::Int4 {
                values,
                scale,
                codes,
                group,
            } if WEIGHTS_INT4 => {
                let (row_bytes, groups) = (int4_row_bytes(self.cols), int4_groups(self.cols, group));
                MatrixData::Int4 {
                    values: &values[start * row_bytes..end * row_bytes],
                    scale,
                    codes: &codes[start * groups..end * groups],
                    group,
                }
            }
            // a precision this build leaves out ([`crate::included`]): never parsed
            data => data,
        };
        Matrix {
            rows: end - start,
            cols: self.cols,
            data,
        }
    }

    /// Row `row`, converted to f32, into `out` (`cols` long).
    pub fn row_to_f32(&self, row: usize, out: &mut [f32]) {
        let range = row * self.cols..(row + 1) * self.cols;
        match self.data {
            MatrixData::F32(d) | MatrixData::F32Fma(d) if WEIGHTS_F32 => out.copy_from_slice(&d[range]),
            MatrixData::F16(d) if WEIGHTS_F16 => {
                for (o, v) in out.iter_mut().zip(&d[range]) {
                    *o = crate::kernels::f16_to_f32(*v);
                }
            }
            MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } if WEIGHTS_INT8 => {
                let scale = row_scales[row];
                for (c, (o, &q)) in out.iter_mut().zip(&values[range]).enumerate() {
                    let act = act_scales.map_or(1.0, |a| a[c]);
                    *o = q as f32 * scale * act;
                }
            }
            MatrixData::Int4 {
                values,
                scale,
                codes,
                group,
            } if WEIGHTS_INT4 => {
                let (row_bytes, groups) = (int4_row_bytes(self.cols), int4_groups(self.cols, group));
                let packed = &values[row * row_bytes..(row + 1) * row_bytes];
                let row_codes = &codes[row * groups..(row + 1) * groups];
                for (c, o) in out.iter_mut().enumerate() {
                    let q = int4_value(packed, c) as i32 * int4_multiplier(row_codes[c / group]);
                    *o = q as f32 * scale;
                }
            }
            _ => {} // a precision this build leaves out: never parsed
        }
    }

    /// Bytes of the matrix's payload (values, scales).
    pub fn stored_bytes(&self) -> usize {
        match self.data {
            MatrixData::F32(d) | MatrixData::F32Fma(d) => d.len() * 4,
            MatrixData::F16(d) => d.len() * 2,
            MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } => values.len() + row_scales.len() * 4 + act_scales.map_or(0, |a| a.len() * 4),
            MatrixData::Int4 { values, codes, .. } => values.len() + 4 + codes.len(),
        }
    }
}
