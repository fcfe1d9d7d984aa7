//! The CUDA backend's launch and output-chunk sizes ([`CudaLimits`]).

use crate::error::Error;

/// Log-probabilities computed at once by default: bounds the logits buffer to 1 GiB.
const OUTPUT_ELEMENTS: usize = 1 << 28;

/// Threads per block by default (`BLOCK` in `kernels.cu` says the same; the kernels themselves
/// read `blockDim.x`, so [`CudaLimits`] may choose another power of two).
const BLOCK: u32 = 256;

/// Test-only limits of the CUDA backend, to exercise on small models the paths that only
/// large ones reach with the defaults: rows wider than one block of threads, and the output
/// log-softmax in several chunks. Passed to [`crate::Reference::with_cuda_limits`].
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaLimits {
    /// Most log-probabilities computed at once: a step's output rows go through the output
    /// layer in chunks of `max(1, output_elements / n_token)` rows. 1 to 2^28 (the default).
    pub output_elements: usize,
    /// Threads per block of every kernel launch: a power of two from 32 to 256 (the default).
    /// The kernels loop over rows and elements with a stride of `blockDim.x` and reduce in
    /// whole warps of 32 (at most 32 warps in their shared-memory partials), so any such width
    /// is correct; it changes only how rows are split over threads and the order of f32 sums.
    pub block: u32,
}

impl Default for CudaLimits {
    /// What [`crate::Reference::new`] uses.
    fn default() -> Self {
        CudaLimits {
            output_elements: OUTPUT_ELEMENTS,
            block: BLOCK,
        }
    }
}

impl CudaLimits {
    /// `Err(Error::BadOptions)` unless the kernels support these values.
    pub fn check(&self) -> Result<(), Error> {
        if !self.block.is_power_of_two() || !(32..=BLOCK).contains(&self.block) {
            return Err(Error::BadOptions(format!(
                "CUDA block width {}: must be a power of two from 32 to {} (the kernels reduce \
                 in whole warps of 32)",
                self.block, BLOCK
            )));
        }
        if !(1..=OUTPUT_ELEMENTS).contains(&self.output_elements) {
            return Err(Error::BadOptions(format!(
                "CUDA output chunk of {} log-probabilities: must be from 1 to {}",
                self.output_elements, OUTPUT_ELEMENTS
            )));
        }
        Ok(())
    }
}
