//! The CUDA backend: f32 on an NVIDIA GPU. cuBLAS does the matrix products; the kernels in
//! `kernels.cu` (the attention scores' combination, masking and softmax, LayerNorm, bias and
//! ReLU, the adaptive log-softmax, gathers) are compiled at run time with NVRTC.
//!
//! Every CUDA library is loaded when first needed (cudarc's `dynamic-loading`), so this crate
//! builds and its CPU backends run on machines without CUDA. The functions here check for
//! each library before touching it and report its absence as an [`Error`] instead of letting
//! cudarc panic.

mod engine;
mod ops;
mod vocab;

use cudarc::driver::CudaContext;
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

pub(crate) use engine::CudaEngine;

use crate::error::Error;

/// The kernels' CUDA C++ source.
pub const KERNEL_SOURCE: &str = include_str!("kernels.cu");

/// The `extern "C"` kernels [`KERNEL_SOURCE`] defines.
pub const KERNEL_NAMES: [&str; 10] = [
    "gather_rows",
    "add_position_biases",
    "store_kv",
    "fill_kv",
    "attention_probs",
    "layer_norm",
    "residual",
    "add_bias",
    "adaptive_log_softmax",
    "gather_targets",
];

/// The GPU the CUDA backend would use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// CUDA devices present.
    pub devices: usize,
    /// Name of device 0.
    pub name: String,
}

/// Whether the CUDA backend can run here: the driver library loads, a device exists, and
/// cuBLAS loads. `Err(Error::NoGpu(why))` otherwise; never panics.
pub fn cuda_available() -> Result<GpuInfo, Error> {
    // SAFETY: only tries to load the driver library by its names (dlopen), loading nothing else.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::NoGpu(
            "the CUDA driver library (libcuda.so) is not installed".into(),
        ));
    }
    let devices = CudaContext::device_count()
        .map_err(|e| Error::NoGpu(format!("the CUDA driver found no usable device ({e})")))?;
    if devices < 1 {
        return Err(Error::NoGpu("the CUDA driver found no device".into()));
    }
    let name = cudarc::driver::result::device::get(0)
        .and_then(cudarc::driver::result::device::get_name)
        .map_err(|e| Error::NoGpu(format!("device 0 cannot be queried ({e})")))?;
    // SAFETY: as above, for cuBLAS.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(Error::NoGpu("cuBLAS (libcublas.so) is not installed".into()));
    }
    Ok(GpuInfo {
        devices: devices as usize,
        name,
    })
}

/// Whether NVRTC (`libnvrtc.so`) can be loaded.
pub fn nvrtc_available() -> Result<(), Error> {
    // SAFETY: only tries to load the NVRTC library by its names.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::NoNvrtc("no libnvrtc.so on the library path".into()))
    }
}

/// PTX of the kernels, compiled by NVRTC.
#[derive(Debug)]
pub struct CompiledKernels {
    ptx: Ptx,
}

impl CompiledKernels {
    /// The PTX text.
    pub fn ptx_source(&self) -> String {
        self.ptx.to_src()
    }

    fn into_ptx(self) -> Ptx {
        self.ptx
    }
}

/// Compiles [`KERNEL_SOURCE`] with NVRTC for `arch` (e.g. `compute_90`; `None`: NVRTC's
/// default). Needs only NVRTC, not a GPU.
pub fn compile_kernels(arch: Option<&'static str>) -> Result<CompiledKernels, Error> {
    nvrtc_available()?;
    let options = CompileOptions {
        arch,
        name: Some("txl_kernels.cu".into()),
        ..Default::default()
    };
    compile_ptx_with_opts(KERNEL_SOURCE, options)
        .map(|ptx| CompiledKernels { ptx })
        .map_err(|e| match e {
            CompileError::CompileError { log, .. } => Error::KernelCompile {
                log: log.to_string_lossy().into_owned(),
            },
            other => Error::KernelCompile {
                log: other.to_string(),
            },
        })
}
