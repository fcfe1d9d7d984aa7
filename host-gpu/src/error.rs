//! What can go wrong, as values: a missing GPU is an [`Error::NoGpu`], never a panic.

/// Errors of the reference implementation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CUDA backend cannot run here: no driver library, a driver older than CUDA 13, no
    /// device, or no cuBLAS.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// NVRTC (`libnvrtc.so`) cannot be loaded, so the CUDA kernels cannot be compiled.
    #[error(
        "NVRTC not found: {0}. Install it with `pip install --target target/nvrtc \
         nvidia-cuda-nvrtc==13.0.88` (from the workspace root) and run with \
         LD_LIBRARY_PATH=$PWD/target/nvrtc/nvidia/cu13/lib"
    )]
    NoNvrtc(String),
    /// NVRTC rejected the kernel source.
    #[error("the CUDA kernels do not compile:\n{log}")]
    KernelCompile {
        /// NVRTC's log.
        log: String,
    },
    /// A CUDA driver call failed.
    #[cfg(feature = "reference")]
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// A cuBLAS call failed.
    #[cfg(feature = "reference")]
    #[error("cuBLAS: {0}")]
    Cublas(#[from] cudarc::cublas::result::CublasError),
    /// The model image is invalid.
    #[error("model: {0}")]
    Model(#[from] txl_core::Error),
    /// A token id is not below `n_token`.
    #[error(
        "stream {stream}, position {position}: token id {token} out of range (vocabulary has {n_token})"
    )]
    TokenOutOfRange {
        /// Which stream.
        stream: usize,
        /// Where in the stream.
        position: usize,
        /// The token id.
        token: u32,
        /// The vocabulary size.
        n_token: u32,
    },
    /// Settings that cannot work.
    #[error("invalid settings: {0}")]
    BadOptions(String),
}
