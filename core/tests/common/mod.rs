//! Tiny models built in the test, so the core's own tests (and Miri) run whole sessions
//! without fixtures or other crates.

#![allow(dead_code)]

pub use test_skips::skipped;
pub use txl_core::random_model::{tiny_config, MatrixDtype, VectorDtype};
use txl_core::random_model::{Init, RandomModel};
use txl_core::{AlignedBytes, Config, Model, Session, SessionOptions};

/// An image of `config` with random weights from `seed` ([`Init::Plain`]), matrices stored as
/// `weights` says.
pub fn tiny_image(config: &Config, weights: MatrixDtype, seed: u64) -> AlignedBytes {
    tiny_image_with_vectors(config, weights, VectorDtype::F32, seed)
}

/// [`tiny_image`] with the vectors stored as `vectors` says.
pub fn tiny_image_with_vectors(
    config: &Config,
    weights: MatrixDtype,
    vectors: VectorDtype,
    seed: u64,
) -> AlignedBytes {
    RandomModel::new(config, seed)
        .init(Init::Plain)
        .matrices(weights)
        .vectors(vectors)
        .aligned()
        .expect("a valid tiny model")
}

/// A 16-byte-aligned arena of `bytes`.
pub fn arena(bytes: usize) -> Vec<u128> {
    vec![0u128; bytes.div_ceil(16)]
}

/// Every log-probability of `tokens` in segments of `options.tgt_len`, the linear layers on
/// `positions` positions a pass.
pub fn log_prob_bits(
    model: &Model<'_>,
    options: SessionOptions,
    positions: usize,
    tokens: &[u32],
) -> Vec<u32> {
    let bytes = Session::arena_bytes_for_positions_per_pass(model, &options, positions).unwrap();
    let mut memory = arena(bytes);
    let arena = bytemuck::cast_slice_mut(&mut memory);
    let mut session = Session::with_positions_per_pass(model, arena, options, positions).unwrap();
    let mut bits = Vec::new();
    for segment in tokens.chunks(options.tgt_len as usize) {
        session
            .forward(segment, |_, row| bits.extend(row.iter().map(|v| v.to_bits())))
            .unwrap();
    }
    bits
}

/// The skip ledger the core's unit tests keep too (`TXL_SKIPS`; `docs/TESTING.md`).
#[path = "../../src/test_skips.rs"]
mod test_skips;

/// Records a skip of the running test where the kernel it was written for (`kernel`, which
/// needs `needs`) did not run: the session took the kernel's fallback in its place, and the test
/// compared that with the one-at-a-time path, not the kernel.
pub fn unless_reached(reached: bool, kernel: &str, needs: &str) {
    if !reached {
        let build = if cfg!(feature = "std") {
            ""
        } else {
            " and the core built with std (this build is without)"
        };
        skipped(&format!(
            "{kernel} not reached, the fallback ran instead: it needs {needs}{build}"
        ));
    }
}

/// [`unless_reached`] for a kernel of x86-64, chosen at run time: other architectures have none
/// to reach.
pub fn unless_x86_64_reached(reached: bool, kernel: &str, needs: &str) {
    if cfg!(target_arch = "x86_64") {
        unless_reached(reached, kernel, needs);
    }
}

/// Whether the core's AVX-512BW kernels run here: x86-64, the core built with `std` (the only
/// build that chooses kernels at run time) and a CPU with AVX-512 F, BW and VL.
pub fn has_avx512bw() -> bool {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    return txl_core::kernels::features::has_avx512bw();
    #[allow(unreachable_code)]
    false
}

/// Whether the core's AVX2-with-FMA kernel of the fused order runs here (x86-64, `std`).
pub fn has_avx2_fma() -> bool {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    return txl_core::kernels::features::has_avx2_fma();
    #[allow(unreachable_code)]
    false
}

/// Every log-probability of a run of `segments`, as bits.
pub fn run(session: &mut Session<'_, '_>, segments: &[&[u32]]) -> Vec<u32> {
    let mut bits = Vec::new();
    for segment in segments {
        session
            .forward(segment, |_, row| bits.extend(row.iter().map(|v| v.to_bits())))
            .expect("forward");
    }
    bits
}

/// The session's state, as `save_state` writes it.
pub fn saved(session: &Session<'_, '_>) -> Vec<u8> {
    let mut out = vec![0u8; session.state_bytes()];
    let written = session.save_state(&mut out).expect("save");
    out.truncate(written);
    out
}
