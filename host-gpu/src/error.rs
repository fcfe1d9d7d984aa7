//! What can go wrong, as values: a missing GPU is an [`Error::NoGpu`], never a panic; a
//! buffer too large for the allocator is an [`Error::AllocationFailed`], never an abort.

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
    /// A buffer sized by the model, the options or the input is more than the allocator gives.
    #[error("cannot allocate {bytes} bytes for {what} ({count} values)")]
    AllocationFailed {
        /// What the buffer holds.
        what: &'static str,
        /// Values asked for.
        count: usize,
        /// Bytes asked for (wider than `usize`, so that a count that overflows it is told).
        bytes: u128,
    },
}

impl Error {
    /// The error for `count` values of `T` that could not be had.
    #[cfg(feature = "reference")]
    pub(crate) fn allocation<T>(what: &'static str, count: usize) -> Error {
        Error::AllocationFailed {
            what,
            count,
            bytes: count as u128 * size_of::<T>() as u128,
        }
    }
}

/// An empty vector with room for `count` values, asked of the allocator fallibly: every
/// buffer whose size comes from a model, the options or the input is allocated through this
/// (or [`grow`]), so that an absurd size is an [`Error::AllocationFailed`], never an abort.
#[cfg(feature = "reference")]
pub(crate) fn with_room<T>(count: usize, what: &'static str) -> Result<Vec<T>, Error> {
    let mut values = Vec::new();
    values
        .try_reserve_exact(count)
        .map_err(|_| Error::allocation::<T>(what, count))?;
    Ok(values)
}

/// `count` copies of `value`, allocated as [`with_room`] does.
#[cfg(feature = "reference")]
pub(crate) fn filled<T: Clone>(count: usize, value: T, what: &'static str) -> Result<Vec<T>, Error> {
    let mut values = with_room(count, what)?;
    values.resize(count, value);
    Ok(values)
}

/// Resizes `values` to `count`, filling with `value`, growing as [`with_room`] does.
#[cfg(feature = "reference")]
pub(crate) fn grow<T: Clone>(
    values: &mut Vec<T>,
    count: usize,
    value: T,
    what: &'static str,
) -> Result<(), Error> {
    if let Some(more) = count.checked_sub(values.len()) {
        values
            .try_reserve(more)
            .map_err(|_| Error::allocation::<T>(what, count))?;
    }
    values.resize(count, value);
    Ok(())
}
