//! The CUDA backend: f32 on an NVIDIA GPU. cuBLAS does the matrix products; the kernels in
//! `kernels.cu` (the attention scores' combination, masking and softmax, LayerNorm, bias and
//! ReLU, the adaptive log-softmax, gathers) are compiled at run time with NVRTC.
//!
//! Every CUDA library is loaded when first needed (cudarc's `dynamic-loading`), so this crate
//! builds and its CPU backends run on machines without CUDA. The functions here check for
//! each library before touching it and report its absence as an [`Error`](crate::Error) instead of letting
//! cudarc panic.

mod device;
mod engine;
mod library;
mod limits;
mod ops;
mod statistics;
mod vocab;

pub(crate) use engine::CudaEngine;
pub use library::{
    compile_kernels, cuda_available, nvrtc_available, CompiledKernels, GpuInfo, KERNEL_NAMES, KERNEL_SOURCE,
    MIN_DRIVER_VERSION,
};
pub use limits::CudaLimits;
