//! The CUDA backend. On a machine without NVIDIA's libraries:
//! - `cuda_backend_reports_a_missing_gpu_as_an_error` checks that asking for CUDA gives
//!   `Error::NoGpu` (no panic) and records that the GPU tests are skipped (`TXL_SKIPS`);
//! - the NVRTC compilation test is ignored unless NVRTC is installed: `scripts/test.sh`
//!   installs it (the `nvidia-cuda-nvrtc` wheel) and runs it with `--ignored`;
//! - the GPU tests are ignored: `scripts/gpu-check.sh` runs them on a GPU machine.

use txl_core::{MemInit, Model, SessionOptions};
use txl_host_gpu::quantize::gptq::Gram;
use txl_host_gpu::{compile_kernels, cuda_available, Backend, Error, Reference, Statistics, KERNEL_NAMES};
use txl_tests::{max_delta, random_model, reference_config, session_variants, skipped, tokens, Manifest};
use txl_tools::npy;

#[test]
fn cuda_backend_reports_a_missing_gpu_as_an_error() {
    let image = random_model(&reference_config(), 1);
    let model = Model::parse(image.bytes()).unwrap();
    match cuda_available() {
        Err(Error::NoGpu(why)) => {
            skipped(&format!(
                "the GPU tests: no GPU here ({why}). Run scripts/gpu-check.sh on a GPU machine."
            ));
            match Reference::new(&model, Backend::Cuda) {
                Err(Error::NoGpu(_)) => {}
                other => panic!("expected Error::NoGpu, got {other:?}"),
            }
        }
        Err(other) => panic!("cuda_available failed with {other:?}"),
        Ok(gpu) => {
            eprintln!("GPU present: {gpu:?}");
            Reference::new(&model, Backend::Cuda).unwrap();
        }
    }
}

#[test]
#[ignore = "needs libnvrtc (pip nvidia-cuda-nvrtc==13.0.88): scripts/test.sh installs it and runs this"]
fn nvrtc_compiles_every_kernel() {
    for arch in [None, Some("compute_80"), Some("compute_90")] {
        let kernels = compile_kernels(arch).unwrap_or_else(|e| panic!("{arch:?}: {e}"));
        let ptx = kernels.ptx_source();
        for name in KERNEL_NAMES {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch:?}: kernel {name} missing from the PTX"
            );
        }
        let target = ptx
            .lines()
            .find(|l| l.starts_with(".target"))
            .unwrap_or("no .target");
        if let Some(arch) = arch {
            assert_eq!(target, format!(".target {}", arch.replace("compute_", "sm_")));
        }
        println!(
            "{arch:?}: {} kernels, {} bytes of PTX, {target}",
            KERNEL_NAMES.len(),
            ptx.len()
        );
    }
}

/// CUDA against the Hugging Face float64 fixtures and against the CPU f64 reference.
#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn cuda_matches_hugging_face_and_cpu_f64_on_every_fixture() {
    let manifest = Manifest::load().unwrap();
    let mut worst: f64 = 0.0;
    for fixture in &manifest.models {
        let image = fixture.image().unwrap();
        let model = Model::parse(image.bytes()).unwrap();
        let mut cuda = Reference::new(&model, Backend::Cuda).unwrap();
        let mut cpu = Reference::new(&model, Backend::Cpu64).unwrap();
        let tokens = fixture.tokens().unwrap();
        for case in &fixture.cases {
            let tokens = &tokens[..case.n_tokens];
            let options = case.options();
            let ours = cuda.score(tokens, &options, case.rows_k, |_| {}).unwrap();
            let golden = cpu.score(tokens, &options, case.rows_k, |_| {}).unwrap();
            let logp = npy::read(&fixture.path().join(&case.logp)).unwrap();
            let rows = npy::read(&fixture.path().join(&case.rows)).unwrap();
            let vs_hf = max_delta(
                ours.logp.iter().chain(&ours.rows).copied(),
                logp.data.iter().chain(&rows.data).copied(),
            );
            let vs_cpu = max_delta(
                ours.logp.iter().chain(&ours.rows).copied(),
                golden.logp.iter().chain(&golden.rows).copied(),
            );
            println!(
                "cuda {:<28} {:<22} vs HF {vs_hf:.3e}  vs cpu64 {vs_cpu:.3e}",
                fixture.name, case.name
            );
            assert_eq!(ours.logp.len(), logp.data.len());
            assert_eq!(ours.rows.len(), rows.data.len());
            assert!(vs_hf <= 1e-4 && vs_cpu <= 1e-4, "{} {}", fixture.name, case.name);
            worst = worst.max(vs_hf).max(vs_cpu);
        }
    }
    println!("cuda: worst |Δ ln p| over the fixtures {worst:.3e}");
}

/// The reference config with pre-LN, one embedding table of width 12 projected to d_model, and
/// the second cluster's output projection tied.
fn projected_pre_ln_config() -> txl_core::Config {
    let mut c = reference_config();
    c.pre_lnorm = true;
    c.div_val = 1;
    c.d_embed = 12;
    c.tie_projs = 0b010;
    c
}

/// Batches of streams of different lengths on random models covering the options: CUDA
/// against CPU f64.
#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn cuda_batches_match_cpu_f64_on_random_models() {
    let mut configs = vec![reference_config()];
    let mut c = projected_pre_ln_config();
    c.untie_r = false;
    configs.push(c);
    c.n_cutoffs = 0;
    c.cutoffs = [0; 8];
    c.tie_projs = 0; // one cluster: one projection flag
    c.tie_weight = false;
    c.d_embed = c.d_model;
    c.d_head = 7; // odd widths
    configs.push(c);
    let mut worst: f64 = 0.0;
    for (i, config) in configs.iter().enumerate() {
        let image = random_model(config, 10 + i as u64);
        let model = Model::parse(image.bytes()).unwrap();
        let mut cuda = Reference::new(&model, Backend::Cuda).unwrap();
        let mut cpu = Reference::new(&model, Backend::Cpu64).unwrap();
        let streams: Vec<Vec<u32>> = [61, 7, 0, 33, 1, 40]
            .iter()
            .enumerate()
            .map(|(s, &n)| tokens(n, config.n_token, s as u64 + 5))
            .collect();
        let views: Vec<&[u32]> = streams.iter().map(|s| s.as_slice()).collect();
        let base = SessionOptions::from_config(model.config());
        // and long segments over a long, clamped memory
        let long = SessionOptions {
            tgt_len: 16,
            mem_len: 48,
            clamp_len: 20,
            same_length: true,
            mem_init: MemInit::Zeros,
            ..base
        };
        for options in session_variants(base).into_iter().chain([long]) {
            let ours = cuda.score_batch(&views, &options, 3, |_| {}).unwrap();
            let golden = cpu.score_batch(&views, &options, 3, |_| {}).unwrap();
            assert_eq!(ours.len(), views.len(), "one result per stream");
            assert_eq!(golden.len(), views.len(), "one result per stream");
            for (a, b) in ours.iter().zip(&golden) {
                assert_eq!(a.logp.len(), b.logp.len());
                assert_eq!(a.rows.len(), b.rows.len());
                let delta = max_delta(
                    a.logp.iter().chain(&a.rows).copied(),
                    b.logp.iter().chain(&b.rows).copied(),
                );
                assert!(delta <= 1e-4, "config {i} {options:?}: {delta:e}");
                worst = worst.max(delta);
            }
        }
    }
    println!("cuda vs cpu64 on random batches: worst |Δ ln p| {worst:.3e}");
}

/// One consumer's input range and Gram matrix.
type Seen<'a> = (&'a [f32], &'a Gram);

/// Every consumer's range and Gram matrix of two sets of statistics side by side, named.
fn consumers<'a>(a: &'a Statistics, b: &'a Statistics) -> Vec<(String, [Seen<'a>; 2])> {
    let (ga, gb) = (a.grams.as_ref().unwrap(), b.grams.as_ref().unwrap());
    let (ra, rb) = (&a.ranges, &b.ranges);
    let mut all = Vec::new();
    for l in 0..ga.layers.len() {
        for k in 0..4 {
            let pair = [
                (ra.layers[l][k].as_slice(), &ga.layers[l][k]),
                (rb.layers[l][k].as_slice(), &gb.layers[l][k]),
            ];
            all.push((format!("layer {l} linear {k}"), pair));
        }
    }
    for t in 0..ga.out_tables.len() {
        let pair = [
            (ra.out_tables[t].as_slice(), &ga.out_tables[t]),
            (rb.out_tables[t].as_slice(), &gb.out_tables[t]),
        ];
        all.push((format!("out_tables[{t}]"), pair));
        let pair = [
            (ra.emb_proj[t].as_slice(), &ga.emb_proj[t]),
            (rb.emb_proj[t].as_slice(), &gb.emb_proj[t]),
        ];
        all.push((format!("emb_proj[{t}]"), pair));
    }
    let pair = [
        (ra.cluster_head.as_slice(), &ga.cluster_head),
        (rb.cluster_head.as_slice(), &gb.cluster_head),
    ];
    all.push(("cluster_head".into(), pair));
    all
}

/// The calibration statistics collected on the GPU (ranges by a kernel, Gram matrices by
/// cuBLAS's double-precision products) against the CPU f64 reference's, on batches of streams.
#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn cuda_statistics_match_cpu_f64() {
    let configs = [reference_config(), projected_pre_ln_config()];
    let (mut worst_range, mut worst_gram): (f64, f64) = (0.0, 0.0);
    for (i, config) in configs.iter().enumerate() {
        let image = random_model(config, 20 + i as u64);
        let model = Model::parse(image.bytes()).unwrap();
        let mut cuda = Reference::new(&model, Backend::Cuda).unwrap();
        let mut cpu = Reference::new(&model, Backend::Cpu64).unwrap();
        let streams: Vec<Vec<u32>> = [300, 7, 0, 45]
            .iter()
            .enumerate()
            .map(|(s, &n)| tokens(n, config.n_token, s as u64 + 40))
            .collect();
        let views: Vec<&[u32]> = streams.iter().map(|s| s.as_slice()).collect();
        let options = SessionOptions::from_config(model.config());
        let ours = cuda.statistics(&views, &options, true).unwrap();
        let golden = cpu.statistics(&views, &options, true).unwrap();
        let only_ranges = cuda.statistics(&views, &options, false).unwrap();
        assert!(only_ranges.grams.is_none());
        assert_eq!(format!("{:?}", only_ranges.ranges), format!("{:?}", ours.ranges));
        let mut compared = 0;
        for (what, [(range, gram), (golden_range, golden_gram)]) in consumers(&ours, &golden) {
            let what = format!("config {i} {what}");
            assert_eq!(range.len(), golden_range.len(), "{what}: range width");
            for (&a, &b) in range.iter().zip(golden_range) {
                let delta = (a - b).abs() as f64 / (b.abs() as f64).max(1e-3);
                assert!(delta <= 1e-4, "{what}: range {a} against {b}");
                worst_range = worst_range.max(delta);
            }
            assert_eq!(
                (gram.n, gram.rows),
                (golden_gram.n, golden_gram.rows),
                "{what}: width, rows"
            );
            let n = gram.n;
            for r in 0..n {
                for c in 0..n {
                    assert_eq!(gram.sum[r * n + c], gram.sum[c * n + r], "{what}: symmetric");
                    // Cauchy-Schwarz: |H_rc| <= sqrt(H_rr H_cc)
                    let scale = (golden_gram.sum[r * n + r] * golden_gram.sum[c * n + c]).sqrt();
                    let delta = (gram.sum[r * n + c] - golden_gram.sum[r * n + c]).abs() / scale.max(1e-12);
                    assert!(delta <= 1e-4, "{what}[{r}][{c}]: {delta:e} of the scale");
                    worst_gram = worst_gram.max(delta);
                    compared += 1;
                }
            }
        }
        assert!(compared > 2_000, "config {i}: {compared} Gram entries compared");
        assert_eq!(
            ours.grams.unwrap().layers[0][0].rows,
            352,
            "config {i}: every position"
        );
    }
    println!(
        "cuda vs cpu64 statistics: worst range {worst_range:.3e}, worst Gram entry {worst_gram:.3e} of its \
         scale"
    );
}
