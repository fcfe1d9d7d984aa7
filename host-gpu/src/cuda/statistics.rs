//! Calibration statistics on the device ([`DeviceStatistics`]), the CUDA engine's counterpart of
//! the CPU engine's `ChannelStats`: where the forward pass holds a consumer's input rows in a
//! buffer, `column_max_abs` widens the consumer's per-column range and, for Gram matrices,
//! `widen` copies the rows to f64 and a cuBLAS DGEMM adds `XᵀX` to the consumer's matrix
//! (f64 products of f32 values, summed in f64, as on the CPU). Everything stays on the device
//! until [`DeviceStatistics::finish`] brings it back.

use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, PushKernelArg};
use txl_core::{Config, Linear};

use super::device::{Gpu, Kernels};
use crate::error::Error;
use crate::gram::Gram;
use crate::statistics::{ChannelRanges, InputGrams, Statistics};

/// Whose input a block of rows is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Consumer {
    /// A layer's linear layer.
    Linear(usize, Linear),
    /// An output table (its cluster's projected hidden state).
    OutTable(usize),
    /// The tail clusters' head logits (cluster 0's input).
    ClusterHead,
    /// An embedding projection (the embedding rows looked up).
    EmbProj(usize),
}

const LINEARS: [Linear; 4] = [Linear::Qkv, Linear::ONet, Linear::Ff1, Linear::Ff2];

/// Every consumer of a model of `config`, in the order [`DeviceStatistics`] keeps them.
fn consumers(config: &Config) -> Vec<Consumer> {
    let tables = config.n_emb_tables();
    (0..config.n_layer as usize)
        .flat_map(|l| LINEARS.map(|linear| Consumer::Linear(l, linear)))
        .chain((0..tables).map(Consumer::OutTable))
        .chain([Consumer::ClusterHead])
        .chain((0..tables).map(Consumer::EmbProj))
        .collect()
}

/// One consumer's statistics; its first rows fix its width.
#[derive(Default)]
struct Slot {
    width: usize,
    rows: usize,
    /// `(width)`: the largest `|x|` of each column.
    range: Option<CudaSlice<f32>>,
    /// `(width, width)`: `XᵀX`, when Gram matrices are collected.
    gram: Option<CudaSlice<f64>>,
}

/// Per-column ranges and, when asked, Gram matrices of every consumer's inputs, on the device.
pub(crate) struct DeviceStatistics {
    stream: Arc<CudaStream>,
    config: Config,
    grams: bool,
    consumers: Vec<Consumer>,
    /// In the order of `consumers`.
    slots: Vec<Slot>,
    /// The rows being added, widened to f64; grown to the largest block seen.
    wide: Option<CudaSlice<f64>>,
}

impl DeviceStatistics {
    /// Nothing seen yet, for a model of `config`; Gram matrices too when `grams`.
    pub(super) fn new(stream: Arc<CudaStream>, config: Config, grams: bool) -> Self {
        let consumers = consumers(&config);
        DeviceStatistics {
            stream,
            config,
            grams,
            slots: consumers.iter().map(|_| Slot::default()).collect(),
            consumers,
            wide: None,
        }
    }

    /// The first `rows` rows of `x`, `(rows, width)`, enter `consumer`.
    pub(super) fn observe(
        &mut self,
        g: &Gpu<'_>,
        consumer: Consumer,
        x: &CudaView<'_, f32>,
        rows: usize,
        width: usize,
    ) -> Result<(), Error> {
        if rows == 0 || width == 0 {
            return Ok(());
        }
        let elements = rows * width;
        assert!(x.len() >= elements, "rows outside their buffer");
        let index = self
            .consumers
            .iter()
            .position(|&c| c == consumer)
            .expect("every consumer has a slot");
        let slot = &mut self.slots[index];
        if slot.width == 0 {
            slot.width = width;
            slot.range = Some(self.stream.alloc_zeros::<f32>(width)?);
            if self.grams {
                slot.gram = Some(self.stream.alloc_zeros::<f64>(width * width)?);
            }
        }
        assert_eq!(slot.width, width, "{consumer:?}: one width");
        let (rows_i, width_i, elements_i) = (rows as i32, width as i32, elements as i32);
        let range = slot.range.as_mut().expect("allocated with the width");
        let mut launch = self.stream.launch_builder(&g.k.column_max_abs);
        launch.arg(x).arg(&rows_i).arg(&width_i).arg(range);
        // SAFETY: column_max_abs(const float*, int, int, float*) reads rows * width elements of
        // x, which the assert keeps inside it, and updates width elements of range (width long).
        unsafe { launch.launch(g.k.per_element(width)) }?;
        if let Some(gram) = &mut slot.gram {
            if self.wide.as_ref().is_none_or(|w| w.len() < elements) {
                self.wide = None; // free the smaller one first
                self.wide = Some(self.stream.alloc_zeros::<f64>(elements)?);
            }
            let wide = self.wide.as_mut().expect("allocated above");
            let mut launch = self.stream.launch_builder(&g.k.widen);
            launch.arg(x).arg(&elements_i).arg(&mut *wide);
            // SAFETY: widen(const float*, int, double*) reads rows * width elements of x, as
            // above, and writes as many of wide (at least that long).
            unsafe { launch.launch(g.k.per_element(elements)) }?;
            // Column-major, the packed rows are A (width, rows): G (width, width) += A Aᵀ.
            let config = GemmConfig {
                transa: cublasOperation_t::CUBLAS_OP_N,
                transb: cublasOperation_t::CUBLAS_OP_T,
                m: width_i,
                n: width_i,
                k: rows_i,
                alpha: 1.0f64,
                lda: width_i,
                ldb: width_i,
                beta: 1.0f64,
                ldc: width_i,
            };
            let a = wide.slice(..elements);
            // SAFETY: A spans width * rows elements of wide's slice, G width * width of gram.
            unsafe { g.blas.gemm(config, &a, &a, gram) }?;
        }
        slot.rows += rows;
        Ok(())
    }

    /// Brings the statistics back: ranges as [`ChannelRanges`], Gram matrices (made exactly
    /// symmetric by `mirror_upper` first) as [`InputGrams`]; a consumer that saw no rows has an
    /// empty range and matrix.
    pub(super) fn finish(mut self, k: &Kernels) -> Result<Statistics, Error> {
        let mut ranges = ChannelRanges::empty(&self.config);
        let mut grams = self.grams.then(|| InputGrams::empty(&self.config));
        self.wide = None;
        for slot in &mut self.slots {
            if let Some(gram) = &mut slot.gram {
                let n = slot.width as i32;
                let mut launch = self.stream.launch_builder(&k.mirror_upper);
                launch.arg(&mut *gram).arg(&n);
                // SAFETY: mirror_upper(double*, int) touches the n * n elements of gram.
                unsafe { launch.launch(k.per_element(slot.width * slot.width)) }?;
            }
        }
        for (&consumer, slot) in self.consumers.iter().zip(self.slots) {
            if let Some(range) = &slot.range {
                *range_of(&mut ranges, consumer) = self.stream.clone_dtoh(range)?;
            }
            if let (Some(grams), Some(sum)) = (&mut grams, &slot.gram) {
                *gram_of(grams, consumer) = Gram {
                    n: slot.width,
                    sum: self.stream.clone_dtoh(sum)?,
                    rows: slot.rows,
                };
            }
        }
        Ok(Statistics { ranges, grams })
    }
}

fn range_of(ranges: &mut ChannelRanges, consumer: Consumer) -> &mut Vec<f32> {
    match consumer {
        Consumer::Linear(l, linear) => ranges.linear_input_mut(l, linear),
        Consumer::OutTable(t) => &mut ranges.out_tables[t],
        Consumer::ClusterHead => &mut ranges.cluster_head,
        Consumer::EmbProj(t) => &mut ranges.emb_proj[t],
    }
}

fn gram_of(grams: &mut InputGrams, consumer: Consumer) -> &mut Gram {
    match consumer {
        Consumer::Linear(l, linear) => &mut grams.layers[l][linear as usize],
        Consumer::OutTable(t) => &mut grams.out_tables[t],
        Consumer::ClusterHead => &mut grams.cluster_head,
        Consumer::EmbProj(t) => &mut grams.emb_proj[t],
    }
}
