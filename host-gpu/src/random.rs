//! Random-weight models of any shape, built in memory: for the property tests and the
//! benchmarks. The builder is the core's ([`txl_core::random_model`]); this is its f32 image at
//! the reference fixtures' scale ([`RandomInit`]).

pub use txl_core::random_model::{small_config, RandomInit};
use txl_core::random_model::{Init, RandomModel};
use txl_core::Config;

/// An image of `config` with random weights drawn from `seed` at the scale `init` says.
///
/// A config whose f32 image would not fit a model image's 32-bit sizes is refused before any
/// weight is drawn ([`ConfigError::TooLarge`](txl_core::ConfigError::TooLarge)); the weights
/// are allocated fallibly ([`txl_core::Error::AllocationFailed`]).
pub fn random_image(config: &Config, seed: u64, init: RandomInit) -> Result<Vec<u8>, txl_core::Error> {
    RandomModel::new(config, seed).init(Init::Scaled(init)).image()
}
