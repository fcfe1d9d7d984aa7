//! The CUDA backend with tiny launch and output-chunk limits ([`Reference::with_cuda_limits`]),
//! so that small models take the paths only large ones take with the defaults: blocks of 32 or
//! 64 threads, narrower than the rows they reduce (d_model, the attention's keys, the
//! vocabulary and its clusters), and the output log-softmax in several chunks per step.
//! Every log-probability and every full row is compared with the CPU f64 reference.
//!
//! On a machine without NVIDIA's libraries:
//! - `unsupported_cuda_limits_are_rejected` runs (the limits are checked before the GPU);
//! - `cuda_limit_tests_report_a_missing_gpu` records that the GPU test is skipped (`TXL_SKIPS`,
//!   listed at the end of `scripts/test.sh`), and checks that the CUDA backend reports
//!   `Error::NoGpu`;
//! - the GPU test is ignored; run with `--ignored` there, it fails with the reason instead of
//!   passing. On a GPU machine:
//!   `cargo test --release -p txl-host-gpu --test cuda_limits -- --include-ignored --nocapture`.
//!
//! Independent of `txl-tools` and `txl-tests`: the models come from
//! [`txl_host_gpu::random_image`], aligned here.

/// The skip ledger the core's tests keep too (`TXL_SKIPS`; `docs/TESTING.md`).
#[path = "../../core/src/test_skips.rs"]
mod test_skips;
use test_skips::skipped;

use txl_core::config::MAX_CUTOFFS;
use txl_core::AlignedBytes;
use txl_core::{Config, MemInit, Model, SessionOptions};
use txl_host_gpu::{cuda_available, random_image, Backend, CudaLimits, Error, RandomInit, Reference};

/// A random model of `config` from `seed`.
fn random_model(config: &Config, seed: u64) -> AlignedBytes {
    let image = random_image(config, seed, RandomInit::for_config(config)).unwrap();
    AlignedBytes::copy_from(&image).unwrap()
}

fn cutoffs(list: &[u32]) -> [u32; MAX_CUTOFFS] {
    let mut c = [0; MAX_CUTOFFS];
    c[..list.len()].copy_from_slice(list);
    c
}

/// Models whose rows are wider than a block of 32 threads: d_model 40 to 48, n_token 77 to
/// 150, clusters of 20 to 90 tokens, odd head widths.
fn configs() -> Vec<Config> {
    // Adaptive input and softmax with div_val 2 (projections of widths 40, 20, 10).
    let adaptive = Config {
        n_token: 150,
        d_model: 40,
        d_embed: 40,
        n_head: 3,
        d_head: 13,
        d_inner: 72,
        n_layer: 2,
        cutoffs: cutoffs(&[40, 60]),
        n_cutoffs: 2,
        div_val: 2,
        tie_weight: true,
        tie_projs: 0b110,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 8,
        mem_len: 40,
        clamp_len: 0,
        same_length: false,
    };
    // Pre-LN, one output layer over the clusters (div_val 1) with a projection, shared r biases.
    let pre_ln = Config {
        n_token: 120,
        d_model: 48,
        d_embed: 36,
        n_head: 4,
        d_head: 9,
        d_inner: 96,
        cutoffs: cutoffs(&[50]),
        n_cutoffs: 1,
        div_val: 1,
        tie_projs: 0b10,
        pre_lnorm: true,
        untie_r: false,
        ..adaptive
    };
    // A plain softmax, untied output layer.
    let plain = Config {
        n_token: 77,
        d_model: 34,
        d_embed: 34,
        n_head: 2,
        d_head: 17,
        cutoffs: [0; MAX_CUTOFFS],
        n_cutoffs: 0,
        tie_weight: false,
        tie_projs: 0,
        ..pre_ln
    };
    vec![adaptive, pre_ln, plain]
}

/// Deterministic pseudo-random tokens below `n_token`.
fn tokens(n: usize, n_token: u32, seed: u64) -> Vec<u32> {
    let mut rng = txl_core::rng::Rng::new(seed);
    (0..n).map(|_| rng.below(u64::from(n_token)) as u32).collect()
}

/// Largest |a - b|, a NaN counting as infinitely far.
fn max_delta(a: impl IntoIterator<Item = f64>, b: impl IntoIterator<Item = f64>) -> f64 {
    a.into_iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .map(|d| if d.is_nan() { f64::INFINITY } else { d })
        .fold(0.0, f64::max)
}

/// The bound on max |Δ ln p|, CUDA f32 against CPU f64, as in `tests/cuda.rs`: the CPU f32
/// backend reaches 1.8e-5 on these models and cases (f32 rounding through two layers and the
/// log-softmax); 1e-4 leaves room for the accumulation order of cuBLAS and of the kernels'
/// reductions, and is far below what a wrong mask, a lost chunk or a half-reduced row gives
/// (0.1 and more).
const MAX_DELTA: f64 = 1e-4;

/// Panics, with the reason, where the CUDA backend cannot run: for the ignored GPU tests, so
/// that running them with `--ignored` on a machine without a GPU fails instead of passing.
fn require_gpu() {
    if let Err(e) = cuda_available() {
        panic!("this test needs an NVIDIA GPU with a CUDA 13 driver, cuBLAS and NVRTC: {e}");
    }
}

#[test]
fn unsupported_cuda_limits_are_rejected() {
    assert_eq!(CudaLimits::default().check().ok(), Some(()));
    let image = random_model(&configs()[2], 1);
    let model = Model::parse(image.bytes()).unwrap();
    let defaults = CudaLimits::default();
    for (block, output_elements) in [(0, 1000), (16, 1000), (48, 1000), (512, 1000), (32, 0)] {
        let limits = CudaLimits {
            block,
            output_elements,
        };
        match Reference::with_cuda_limits(&model, limits) {
            Err(Error::BadOptions(why)) => println!("{limits:?}: {why}"),
            other => panic!("{limits:?}: expected Error::BadOptions, got {other:?}"),
        }
    }
    let too_many = CudaLimits {
        output_elements: defaults.output_elements + 1,
        ..defaults
    };
    assert!(matches!(too_many.check(), Err(Error::BadOptions(_))));
    for block in [32, 64, 128, 256] {
        let limits = CudaLimits {
            block,
            output_elements: 1,
        };
        assert_eq!(limits.check().ok(), Some(()), "{limits:?}");
    }
}

#[test]
fn cuda_limit_tests_report_a_missing_gpu() {
    let image = random_model(&configs()[0], 1);
    let model = Model::parse(image.bytes()).unwrap();
    let limits = CudaLimits {
        block: 32,
        output_elements: 1,
    };
    match cuda_available() {
        Err(Error::NoGpu(why)) => {
            skipped(&format!(
                "the GPU test (ignored): no GPU here ({why}). Run it on a GPU machine with \
                 `--include-ignored`."
            ));
            match Reference::with_cuda_limits(&model, limits) {
                Err(Error::NoGpu(_)) => {}
                other => panic!("expected Error::NoGpu, got {other:?}"),
            }
        }
        Err(other) => panic!("cuda_available failed with {other:?}"),
        Ok(gpu) => {
            eprintln!("GPU present: {gpu:?}");
            Reference::with_cuda_limits(&model, limits).unwrap();
        }
    }
}

/// Batches of streams on the models of [`configs`], scored by CUDA with blocks of 32 and 64
/// threads and output chunks of a few rows (or one), against the CPU f64 reference: every
/// target's log-probability and the first rows' full distributions, over several chunks.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p txl-host-gpu --test cuda_limits -- --include-ignored"]
fn cuda_with_tiny_limits_matches_cpu_f64() {
    require_gpu();
    let mut worst: f64 = 0.0;
    for (i, config) in configs().iter().enumerate() {
        let image = random_model(config, 20 + i as u64);
        let model = Model::parse(image.bytes()).unwrap();
        let n_token = config.n_token as usize;
        assert!(n_token > 64 && config.d_model > 32, "rows wider than a block");
        let mut cpu = Reference::new(&model, Backend::Cpu64).unwrap();
        let streams: Vec<Vec<u32>> = [45, 9, 0, 23, 1]
            .iter()
            .enumerate()
            .map(|(s, &n)| tokens(n, config.n_token, 7 * i as u64 + s as u64 + 1))
            .collect();
        let views: Vec<&[u32]> = streams.iter().map(|s| s.as_slice()).collect();
        let keep_rows = 20; // full rows of the first 20 positions: several steps and chunks
        for (tgt_len, mem_len, clamp_len, same_length, mem_init) in [
            (8, 40, 0, true, MemInit::Zeros),   // klen up to 48 > 32
            (5, 7, 3, false, MemInit::Empty),   // short clamped distances
            (16, 30, 20, true, MemInit::Empty), // 64 rows per step at most
        ] {
            let options = SessionOptions {
                tgt_len,
                mem_len,
                clamp_len,
                same_length,
                mem_init,
                ..SessionOptions::from_config(model.config())
            };
            let golden = cpu.score_batch(&views, &options, keep_rows, |_| {}).unwrap();
            let rows_per_step = streams.iter().filter(|s| !s.is_empty()).count() * tgt_len as usize;
            for limits in [
                // chunks of 3 rows (the limit not a multiple of n_token)
                CudaLimits {
                    block: 32,
                    output_elements: 3 * n_token + 7,
                },
                // one row per chunk (the limit below one row)
                CudaLimits {
                    block: 32,
                    output_elements: 1,
                },
                // chunks of 5 rows, blocks of 64
                CudaLimits {
                    block: 64,
                    output_elements: 5 * n_token,
                },
            ] {
                assert!(limits.output_elements < rows_per_step * n_token, "several chunks");
                let mut cuda = Reference::with_cuda_limits(&model, limits).unwrap();
                let ours = cuda.score_batch(&views, &options, keep_rows, |_| {}).unwrap();
                assert_eq!(ours.len(), golden.len());
                for (s, (a, b)) in ours.iter().zip(&golden).enumerate() {
                    assert_eq!(a.logp.len(), b.logp.len());
                    assert_eq!(a.rows_kept, b.rows_kept);
                    assert_eq!(a.rows.len(), b.rows.len());
                    assert_eq!(a.rows.len(), a.rows_kept * n_token);
                    let delta = max_delta(
                        a.logp.iter().chain(&a.rows).copied(),
                        b.logp.iter().chain(&b.rows).copied(),
                    );
                    assert!(
                        delta <= MAX_DELTA,
                        "config {i}, {limits:?}, {options:?}, stream {s}: max |Δ ln p| {delta:e}"
                    );
                    worst = worst.max(delta);
                }
            }
        }
    }
    println!("cuda with tiny limits vs cpu64: worst |Δ ln p| {worst:.3e} (bound {MAX_DELTA:e})");
}
