//! Typed views of weight matrices in the image: f32, f16, or int8 with per-row scales.
//!
//! An int8 matrix stores `q[r][c]` with one f32 scale per row and, optionally, one f32
//! activation scale per column (SmoothQuant-style migration). The matrix it stands for is
//! ```text
//! W[r][c] = q[r][c] * row_scale[r] * act_scale[c]
//! ```
//! so `W @ x = row_scale * (q @ (act_scale * x))`: the activation scale is applied to the input
//! before it is quantized.

use half::f16;

/// Elements of a matrix.
#[derive(Clone, Copy, Debug)]
pub enum MatrixData<'a> {
    /// f32, row-major.
    F32(&'a [f32]),
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
}

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

    /// Rows `start..end` as a matrix of their own.
    pub fn row_range(&self, start: usize, end: usize) -> Matrix<'a> {
        let (a, b) = (start * self.cols, end * self.cols);
        let data = match self.data {
            MatrixData::F32(d) => MatrixData::F32(&d[a..b]),
            MatrixData::F16(d) => MatrixData::F16(&d[a..b]),
            MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } => MatrixData::Int8 {
                values: &values[a..b],
                row_scales: &row_scales[start..end],
                act_scales,
            },
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
            MatrixData::F32(d) => out.copy_from_slice(&d[range]),
            MatrixData::F16(d) => {
                for (o, v) in out.iter_mut().zip(&d[range]) {
                    *o = crate::kernels::f16_to_f32(*v);
                }
            }
            MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } => {
                let scale = row_scales[row];
                for (c, (o, &q)) in out.iter_mut().zip(&values[range]).enumerate() {
                    let act = act_scales.map_or(1.0, |a| a[c]);
                    *o = q as f32 * scale * act;
                }
            }
        }
    }

    /// Bytes of the matrix's payload (values, scales).
    pub fn stored_bytes(&self) -> usize {
        match self.data {
            MatrixData::F32(d) => d.len() * 4,
            MatrixData::F16(d) => d.len() * 2,
            MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } => values.len() + row_scales.len() * 4 + act_scales.map_or(0, |a| a.len() * 4),
        }
    }
}
