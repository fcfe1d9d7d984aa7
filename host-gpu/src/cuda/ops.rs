//! Launch helpers of the CUDA backend: row-major GEMMs on cuBLAS with the shape checks cuBLAS
//! does not make, launch shapes, and the small kernels called from several places.

use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, PushKernelArg};

use super::device::{Buffers, Kernels};
use crate::cpu::matmul::Rhs;
use crate::error::Error;

/// Elements a row-major `(rows, cols)` block with row stride `ld` spans.
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    }
}

/// A batch of equally shaped products, `batch` matrices `stride_*` elements apart.
#[derive(Clone, Copy, Debug)]
pub(super) struct Batch {
    pub count: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

pub(super) const SINGLE: Batch = Batch {
    count: 1,
    stride_a: 0,
    stride_b: 0,
    stride_c: 0,
};

/// `C (m, n) = A (m, k) @ op(B)`, row-major, on cuBLAS; a batch of them when
/// `batch.count > 1`.
///
/// cuBLAS is column-major: the row-major `C` is the column-major `C^T = op(B)^T A^T`, so `B`
/// goes first, untransposed when `op(B) = B` and transposed when `op(B) = B^T`.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm(
    blas: &CudaBlas,
    (m, n, k): (usize, usize, usize),
    a: &CudaView<'_, f32>,
    lda: usize,
    b: &CudaView<'_, f32>,
    rhs: Rhs,
    c: &mut CudaViewMut<'_, f32>,
    ldc: usize,
    batch: Batch,
) -> Result<(), Error> {
    if m == 0 || n == 0 || k == 0 || batch.count == 0 {
        return Ok(());
    }
    let last = batch.count - 1;
    let (transa, ldb, b_span) = match rhs {
        Rhs::Plain { ld } => (cublasOperation_t::CUBLAS_OP_N, ld, span(k, n, ld)),
        Rhs::Transposed { ld } => (cublasOperation_t::CUBLAS_OP_T, ld, span(n, k, ld)),
    };
    // The shape checks cuBLAS does not make: every matrix inside its view.
    assert!(lda >= k && ldc >= n && ldb >= if matches!(rhs, Rhs::Plain { .. }) { n } else { k });
    assert!(
        a.len() >= last * batch.stride_a + span(m, k, lda),
        "A outside its buffer"
    );
    assert!(b.len() >= last * batch.stride_b + b_span, "B outside its buffer");
    assert!(
        c.len() >= last * batch.stride_c + span(m, n, ldc),
        "C outside its buffer"
    );
    let config = GemmConfig {
        transa,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: n as i32,
        n: m as i32,
        k: k as i32,
        alpha: 1.0f32,
        lda: ldb as i32,
        ldb: lda as i32,
        beta: 0.0f32,
        ldc: ldc as i32,
    };
    if batch.count == 1 {
        // SAFETY: the asserts above keep every element cuBLAS reads or writes inside the views.
        unsafe { blas.gemm(config, b, a, c) }?;
    } else {
        let batched = StridedBatchedConfig {
            gemm: config,
            batch_size: batch.count as i32,
            stride_a: batch.stride_b as i64,
            stride_b: batch.stride_a as i64,
            stride_c: batch.stride_c as i64,
        };
        // SAFETY: as above, for every matrix of the batch.
        unsafe { blas.gemm_strided_batched(batched, b, a, c) }?;
    }
    Ok(())
}

/// `h += delta; h = LN(h)` when `normalize`, for `rows` rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn residual(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    b: &mut Buffers,
    (gain, bias): (&CudaSlice<f32>, &CudaSlice<f32>),
    eps: f32,
    d_model: i32,
    normalize: i32,
    rows: usize,
) -> Result<(), Error> {
    let mut launch = stream.launch_builder(&k.residual);
    launch.arg(&mut b.hidden).arg(&b.delta).arg(gain).arg(bias);
    launch.arg(&eps).arg(&d_model).arg(&normalize);
    // SAFETY: residual(float*, const float*, const float*, const float*, float, int, int) reads
    // and writes `rows` rows of d_model inside hidden and delta.
    unsafe { launch.launch(k.per_row(rows)) }?;
    Ok(())
}

/// `x[r][c] += bias[c]` (then ReLU when `relu`) for a `(rows, width)` block, rows `ld` apart.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_bias(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    x: &mut CudaSlice<f32>,
    ld: i32,
    bias: &CudaSlice<f32>,
    rows: usize,
    width: usize,
    relu: bool,
) -> Result<(), Error> {
    add_bias_view(
        stream,
        k,
        &mut x.slice_mut(..),
        ld,
        &bias.slice(..),
        rows,
        width,
        relu,
    )
}

#[allow(clippy::too_many_arguments)]
pub(super) fn add_bias_view(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    x: &mut CudaViewMut<'_, f32>,
    ld: i32,
    bias: &CudaView<'_, f32>,
    rows: usize,
    width: usize,
    relu: bool,
) -> Result<(), Error> {
    if rows == 0 || width == 0 {
        return Ok(());
    }
    assert!(x.len() >= span(rows, width, ld as usize) && bias.len() >= width);
    let (r, w, relu) = (rows as i32, width as i32, relu as i32);
    let mut launch = stream.launch_builder(&k.add_bias);
    launch.arg(x).arg(&ld).arg(bias).arg(&r).arg(&w).arg(&relu);
    // SAFETY: add_bias(float*, int, const float*, int, int, int) touches the (rows, width) block
    // with row stride ld, which the assert keeps inside x, and width bias elements.
    unsafe { launch.launch(k.per_element(rows * width)) }?;
    Ok(())
}
