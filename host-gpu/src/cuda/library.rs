//! The CUDA libraries, loaded when first needed: whether the driver, a device and cuBLAS are
//! there ([`cuda_available`]), whether NVRTC is ([`nvrtc_available`]), and the kernels
//! compiled by it ([`compile_kernels`]).

use cudarc::driver::CudaContext;
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

use crate::error::Error;

/// The oldest CUDA driver the libraries this crate loads accept, as `cuDriverGetVersion`
/// reports it (`1000 * major + 10 * minor`): NVRTC and cuBLAS 13 need a CUDA 13.0 driver
/// (the 580 series or newer).
pub const MIN_DRIVER_VERSION: i32 = 13000;

/// `13000` as `13.0`.
fn cuda_version(version: i32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

/// The kernels' CUDA C++ source.
pub const KERNEL_SOURCE: &str = include_str!("kernels.cu");

/// The `extern "C"` kernels [`KERNEL_SOURCE`] defines.
pub const KERNEL_NAMES: [&str; 13] = [
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
    "column_max_abs",
    "widen",
    "mirror_upper",
];

/// The GPU the CUDA backend would use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// CUDA devices present.
    pub devices: usize,
    /// Name of device 0.
    pub name: String,
    /// The CUDA version the driver supports, as `cuDriverGetVersion` reports it
    /// (`1000 * major + 10 * minor`, e.g. 13000 for CUDA 13.0); at least
    /// [`MIN_DRIVER_VERSION`].
    pub driver_version: i32,
}

/// Whether the CUDA backend can run here: the driver library loads, supports CUDA 13 (at least
/// [`MIN_DRIVER_VERSION`], which the CUDA 13 NVRTC and cuBLAS need), a device exists, and
/// cuBLAS loads. `Err(Error::NoGpu(why))` otherwise; never panics.
pub fn cuda_available() -> Result<GpuInfo, Error> {
    // SAFETY: only tries to load the driver library by its names (dlopen), loading nothing else.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::NoGpu(
            "the CUDA driver library (libcuda.so) is not installed".into(),
        ));
    }
    let mut driver_version: std::ffi::c_int = 0;
    // SAFETY: cuDriverGetVersion (in every driver, callable before cuInit) writes one int
    // through the pointer, which points at a live local.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version).result() }
        .map_err(|e| Error::NoGpu(format!("the CUDA driver does not report its version ({e})")))?;
    if driver_version < MIN_DRIVER_VERSION {
        return Err(Error::NoGpu(format!(
            "the CUDA driver supports CUDA {} (driver API version {driver_version}), but the CUDA \
             13 libraries this backend loads (NVRTC, cuBLAS) need CUDA {} ({MIN_DRIVER_VERSION}) \
             or newer: install NVIDIA driver 580 or later",
            cuda_version(driver_version),
            cuda_version(MIN_DRIVER_VERSION),
        )));
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
        driver_version,
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

    pub(super) fn into_ptx(self) -> Ptx {
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
