//! What the CUDA engine holds on the device and every launch helper needs: the compiled kernels
//! ([`Kernels`], with their launch shapes), the weights ([`DeviceWeights`]), the activations
//! ([`Buffers`]), and all of them borrowed for one step ([`Gpu`]).

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig};

/// The compiled kernels, and the block width they are launched with.
pub(super) struct Kernels {
    /// Threads per block ([`CudaLimits::block`](super::CudaLimits::block)).
    pub(super) block: u32,
    pub(super) gather_rows: CudaFunction,
    pub(super) add_position_biases: CudaFunction,
    pub(super) store_kv: CudaFunction,
    pub(super) fill_kv: CudaFunction,
    pub(super) attention_probs: CudaFunction,
    pub(super) layer_norm: CudaFunction,
    pub(super) residual: CudaFunction,
    pub(super) add_bias: CudaFunction,
    pub(super) adaptive_log_softmax: CudaFunction,
    pub(super) gather_targets: CudaFunction,
    pub(super) column_max_abs: CudaFunction,
    pub(super) widen: CudaFunction,
    pub(super) mirror_upper: CudaFunction,
}

/// One decoder layer on the device (shapes as in [`crate::weights::LayerParams`]).
pub(super) struct DeviceLayer {
    pub(super) r_w_bias: CudaSlice<f32>,
    pub(super) r_r_bias: CudaSlice<f32>,
    pub(super) qkv: CudaSlice<f32>,
    pub(super) r_net: CudaSlice<f32>,
    pub(super) o_net: CudaSlice<f32>,
    pub(super) attn_norm_weight: CudaSlice<f32>,
    pub(super) attn_norm_bias: CudaSlice<f32>,
    pub(super) ff1_weight: CudaSlice<f32>,
    pub(super) ff1_bias: CudaSlice<f32>,
    pub(super) ff2_weight: CudaSlice<f32>,
    pub(super) ff2_bias: CudaSlice<f32>,
    pub(super) ff_norm_weight: CudaSlice<f32>,
    pub(super) ff_norm_bias: CudaSlice<f32>,
    pub(super) zero_key: CudaSlice<f32>,
    pub(super) zero_value: CudaSlice<f32>,
}

/// Every weight on the device.
pub(super) struct DeviceWeights {
    pub(super) emb_layers: Vec<CudaSlice<f32>>,
    pub(super) emb_projs: Vec<CudaSlice<f32>>,
    pub(super) layers: Vec<DeviceLayer>,
    pub(super) out_weights: Vec<CudaSlice<f32>>,
    pub(super) out_biases: Vec<CudaSlice<f32>>,
    pub(super) out_projs: Vec<CudaSlice<f32>>,
    /// `(n_clusters, d_embed)` and `(n_clusters)`, when there are tail clusters.
    pub(super) cluster: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    /// `(n_clusters + 2)`: cluster `c` covers tokens `bounds[c]..bounds[c + 1]`.
    pub(super) bounds: CudaSlice<i32>,
}

/// Launch shapes, with the engine's block width.
impl Kernels {
    /// One block per row.
    pub(super) fn per_row(&self, rows: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (self.block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Enough blocks for `elements` in a grid-stride loop.
    pub(super) fn per_element(&self, elements: usize) -> LaunchConfig {
        let blocks = elements.div_ceil(self.block as usize).clamp(1, 1 << 16);
        LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (self.block, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// Activations and scratch, sized for `max_rows` rows per step.
pub(super) struct Buffers {
    pub(super) hidden: CudaSlice<f32>,      // (max_rows, d_model)
    pub(super) normed: CudaSlice<f32>,      // (max_rows, d_model)
    pub(super) delta: CudaSlice<f32>,       // (max_rows, d_model)
    pub(super) qkv: CudaSlice<f32>,         // (max_rows, 3W)
    pub(super) content_q: CudaSlice<f32>,   // (max_rows, W)
    pub(super) position_q: CudaSlice<f32>,  // (max_rows, W)
    pub(super) attn: CudaSlice<f32>,        // (max_rows, W)
    pub(super) inner: CudaSlice<f32>,       // (max_rows, d_inner)
    pub(super) content: CudaSlice<f32>,     // (n_head, tgt_len, capacity)
    pub(super) position: CudaSlice<f32>,    // (n_head, tgt_len, max_distance + 1)
    pub(super) probs: CudaSlice<f32>,       // (n_head, tgt_len, capacity)
    pub(super) gathered: CudaSlice<f32>,    // (max_rows, d_embed)
    pub(super) projected: CudaSlice<f32>,   // (max(max_rows, chunk), max(d_model, d_embed))
    pub(super) indices: CudaSlice<i32>,     // (2 * max_rows)
    pub(super) identity: CudaSlice<i32>,    // (max_rows): 0, 1, 2, ...
    pub(super) logits: CudaSlice<f32>,      // (chunk, n_token)
    pub(super) tail: CudaSlice<f32>,        // (chunk, max(n_clusters, 1))
    pub(super) targets: CudaSlice<i32>,     // (chunk)
    pub(super) target_logp: CudaSlice<f32>, // (chunk)
}

/// What every launch of a step needs: the stream, cuBLAS, the kernels, the weights, the
/// hyper-parameters. Borrowed from the engine for one step, beside its run.
#[derive(Clone, Copy)]
pub(super) struct Gpu<'a> {
    pub(super) stream: &'a Arc<CudaStream>,
    pub(super) blas: &'a CudaBlas,
    pub(super) k: &'a Kernels,
    pub(super) w: &'a DeviceWeights,
    pub(super) c: txl_core::Config,
    pub(super) eps: f32,
}
