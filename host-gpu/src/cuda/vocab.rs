//! The two ends of the forward pass on the GPU: the adaptive input embedding (tokens to
//! hidden states) and the adaptive log-softmax (hidden states to log-probabilities).

use cudarc::driver::{CudaSlice, CudaView, PushKernelArg};

use super::device::{Buffers, Gpu};
use super::ops::{add_bias, add_bias_view, gemm, SINGLE};
use super::statistics::{Consumer, DeviceStatistics};
use crate::cpu::matmul::Rhs;
use crate::error::Error;

/// Embeds the step's tokens into `hidden`: per embedding table, gather the tokens' rows,
/// project them to d_model (when the model has projections) and scatter them, scaled by
/// sqrt(d_model), to their rows. `stats` sees the gathered rows, the projections' inputs.
pub(super) fn embed(
    g: &Gpu<'_>,
    b: &mut Buffers,
    tokens: &[u32],
    mut stats: Option<&mut DeviceStatistics>,
) -> Result<(), Error> {
    let Gpu {
        stream,
        blas,
        k,
        w,
        c,
        ..
    } = *g;
    let d_model = c.d_model as usize;
    let scale = (d_model as f64).sqrt() as f32;
    // indices: per table, the rows in the table, then the rows in hidden.
    let mut indices: Vec<i32> = Vec::with_capacity(2 * tokens.len());
    let mut groups = Vec::new();
    for table in 0..c.n_emb_tables() {
        let first_token = if c.div_val == 1 {
            0
        } else {
            c.cluster_range(table).0
        };
        let picked: Vec<usize> = (0..tokens.len())
            .filter(|&i| c.div_val == 1 || c.cluster_of(tokens[i]) == table)
            .collect();
        if picked.is_empty() {
            continue;
        }
        let at = indices.len();
        indices.extend(picked.iter().map(|&i| (tokens[i] - first_token) as i32));
        indices.extend(picked.iter().map(|&i| i as i32));
        groups.push((table, at, picked.len()));
    }
    stream.memcpy_htod(indices.as_slice(), &mut b.indices.slice_mut(..indices.len()))?;
    for (table, at, n) in groups {
        let width = c.emb_dim(table) as usize;
        let src_rows = b.indices.slice(at..at + n);
        let dst_rows = b.indices.slice(at + n..at + 2 * n);
        let ni = n as i32;
        if c.has_emb_proj() {
            // gathered (n, width) = the tokens' rows
            let (wi, one) = (width as i32, 1.0f32);
            let mut launch = stream.launch_builder(&k.gather_rows);
            launch
                .arg(&w.emb_layers[table])
                .arg(&src_rows)
                .arg(&mut b.gathered)
                .arg(&b.identity);
            launch.arg(&ni).arg(&wi).arg(&one);
            // SAFETY: gather_rows(const float*, const int*, float*, const int*, int, int, float)
            // reads table rows below the table's token count (ids were checked against n_token)
            // and writes rows 0..n of gathered (max_rows * d_embed long).
            unsafe { launch.launch(k.per_row(n)) }?;
            if let Some(stats) = stats.as_deref_mut() {
                stats.observe(g, Consumer::EmbProj(table), &b.gathered.slice(..), n, width)?;
            }
            // projected (n, d_model) = gathered @ emb_projs[table]^T, emb_projs (d_model, width)
            gemm(
                blas,
                (n, d_model, width),
                &b.gathered.slice(..),
                width,
                &w.emb_projs[table].slice(..),
                Rhs::Transposed { ld: width },
                &mut b.projected.slice_mut(..),
                d_model,
                SINGLE,
            )?;
            let mut launch = stream.launch_builder(&k.gather_rows);
            let dm = d_model as i32;
            launch
                .arg(&b.projected)
                .arg(&b.identity)
                .arg(&mut b.hidden)
                .arg(&dst_rows);
            launch.arg(&ni).arg(&dm).arg(&scale);
            // SAFETY: as above; destination rows are below the step's row count.
            unsafe { launch.launch(k.per_row(n)) }?;
        } else {
            let mut launch = stream.launch_builder(&k.gather_rows);
            let dm = d_model as i32;
            launch
                .arg(&w.emb_layers[table])
                .arg(&src_rows)
                .arg(&mut b.hidden)
                .arg(&dst_rows);
            launch.arg(&ni).arg(&dm).arg(&scale);
            // SAFETY: as above, with the table's width equal to d_model.
            unsafe { launch.launch(k.per_row(n)) }?;
        }
    }
    Ok(())
}

/// The input of output cluster `cluster`'s table for hidden rows `first..first + n`, `(n, width)`
/// with `width` its table's: their projection by `out_projs[cluster]`, made in `projected`, or
/// (a model without output projections, where `width` is d_model) the hidden rows themselves.
pub(super) fn cluster_input<'a>(
    g: &Gpu<'_>,
    hidden: &'a CudaSlice<f32>,
    projected: &'a mut CudaSlice<f32>,
    cluster: usize,
    first: usize,
    n: usize,
) -> Result<CudaView<'a, f32>, Error> {
    let c = g.c;
    let d_model = c.d_model as usize;
    let hidden = hidden.slice(first * d_model..);
    if !c.has_out_proj() {
        return Ok(hidden);
    }
    let width = c.emb_dim(c.emb_table_of_cluster(cluster)) as usize;
    // x (n, width) = hidden @ out_projs[cluster] (d_model, width)
    gemm(
        g.blas,
        (n, width, d_model),
        &hidden,
        d_model,
        &g.w.out_projs[cluster].slice(..),
        Rhs::Plain { ld: width },
        &mut projected.slice_mut(..),
        width,
        SINGLE,
    )?;
    let projected: &'a CudaSlice<f32> = projected;
    Ok(projected.slice(..))
}

/// `logits (n, n_token)` = log-probabilities of hidden rows `first..first + n`.
pub(super) fn log_probs(g: &Gpu<'_>, b: &mut Buffers, first: usize, n: usize) -> Result<(), Error> {
    let Gpu {
        stream,
        blas,
        k,
        w,
        c,
        ..
    } = *g;
    let n_token = c.n_token as usize;
    let n_clusters = c.n_clusters();
    for cluster in 0..=n_clusters {
        let (start, end) = c.cluster_range(cluster);
        let (start, end) = (start as usize, end as usize);
        let table = c.emb_table_of_cluster(cluster);
        let width = c.emb_dim(table) as usize;
        let x = cluster_input(g, &b.hidden, &mut b.projected, cluster, first, n)?;
        // logits[:, start..end] = x @ W_c^T + b_c; with div_val 1 the cluster's rows of the one
        // output layer.
        let first_row = if c.div_val == 1 { start } else { 0 };
        let weight = w.out_weights[table].slice(first_row * width..(first_row + end - start) * width);
        gemm(
            blas,
            (n, end - start, width),
            &x,
            width,
            &weight,
            Rhs::Transposed { ld: width },
            &mut b.logits.slice_mut(start..),
            n_token,
            SINGLE,
        )?;
        let bias = w.out_biases[table].slice(first_row..first_row + end - start);
        let mut block = b.logits.slice_mut(start..);
        add_bias_view(
            stream,
            k,
            &mut block,
            n_token as i32,
            &bias,
            n,
            end - start,
            false,
        )?;
        if cluster == 0 {
            if let Some((cluster_weight, cluster_bias)) = &w.cluster {
                // tail (n, n_clusters) = x @ cluster_weight^T + cluster_bias
                gemm(
                    blas,
                    (n, n_clusters, width),
                    &x,
                    width,
                    &cluster_weight.slice(..),
                    Rhs::Transposed { ld: width },
                    &mut b.tail.slice_mut(..),
                    n_clusters,
                    SINGLE,
                )?;
                let nc = n_clusters as i32;
                add_bias(stream, k, &mut b.tail, nc, cluster_bias, n, n_clusters, false)?;
            }
        }
    }
    let mut launch = stream.launch_builder(&k.adaptive_log_softmax);
    let (nc, nt) = (n_clusters as i32, n_token as i32);
    launch
        .arg(&mut b.logits)
        .arg(&b.tail)
        .arg(&w.bounds)
        .arg(&nc)
        .arg(&nt);
    // SAFETY: adaptive_log_softmax(float*, const float*, const int*, int, int) works on n rows
    // of n_token logits and n_clusters tail logits, inside the buffers' chunk rows.
    unsafe { launch.launch(k.per_row(n)) }?;
    Ok(())
}
