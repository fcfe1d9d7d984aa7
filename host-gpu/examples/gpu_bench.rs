//! The GPU benchmark `scripts/gpu-check.sh` runs: how closely the CUDA f32 backend follows the
//! CPU f64 reference on the same models, and how many tokens per second it scores on a
//! WT103-shaped model (18 layers, d_model 1024, 16 heads of 64, d_inner 4096, adaptive softmax
//! over 267,735 tokens, mem_len 1600, tgt_len 128), generated in memory with random weights.
//!
//! It also times the quantizer's calibration statistics (activation ranges and the inputs'
//! Gram matrices `XᵀX`, [`Reference::statistics`]) on the WT103-shaped model against the CPU f32
//! backend's, and compares the two.
//!
//! ```text
//! cargo run --release -p txl-host-gpu --example gpu_bench -- [--backend cuda|cpu32]
//!     [--out FILE] [--wt103-layers N] [--wt103-streams B] [--wt103-tokens T] [--compare-tokens T]
//!     [--statistics-tokens T]
//! ```
//! `--backend cpu32` runs the same measurements with the CPU f32 backend in place of CUDA (to
//! try the benchmark on a machine without a GPU, with fewer layers and tokens).
//!
//! It exits with a failure status, after finishing the measurements, when any log-probability
//! (of a target or of a full row) differs from the CPU f64 reference by more than what f32
//! should reach, while a wrong mask, chunk or reduction moves log-probabilities by 0.1 and more:
//! - [`MAX_DELTA`] = 1e-4 on the medium model: the project's f32 tolerance (the core and the CPU
//!   f32 backend against Hugging Face's float64, the CUDA tests); the CPU f32 backend reaches
//!   1.1e-5 there;
//! - [`MAX_DELTA_WT103`] = 1e-3 on the WT103-shaped model, where f32 rounding builds up over 18
//!   layers of width 1024 and a log-softmax over 267,735 tokens: the CPU f32 backend reaches
//!   1.2e-4 there (6.2e-5 with 2 layers), above the small models' 1e-4;
//! - [`MAX_GRAM_DELTA`] = 1e-4 for each Gram matrix entry against the CPU f32 backend's, as a
//!   fraction of the matrix's mean diagonal: a hundredth of the dampening the compensated
//!   rounding adds to that diagonal (1%). (An entry's own scale `sqrt(H_ii H_jj)` would not do:
//!   a ReLU unit that fires once in the text has a diagonal near 0, and there the CPU f32 and
//!   f64 backends already differ by 0.1% of it.)

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use txl_core::config::MAX_CUTOFFS;
use txl_core::AlignedBytes;
use txl_core::{Config, MemInit, Model, SessionOptions};
use txl_host_gpu::{cuda_available, eval, random_image, Backend, RandomInit, Reference};

/// The largest |Δ ln p| against the CPU f64 reference that passes on the medium model.
const MAX_DELTA: f64 = 1e-4;

/// The largest |Δ ln p| against the CPU f64 reference that passes on the WT103-shaped model.
const MAX_DELTA_WT103: f64 = 1e-3;

/// The largest difference of a Gram matrix entry from the CPU f32 backend's, as a fraction of
/// the matrix's mean diagonal, that passes on the WT103-shaped model.
const MAX_GRAM_DELTA: f64 = 1e-4;

const USAGE: &str = "\
usage: gpu_bench [--backend cuda|cpu32] [--out FILE] [--wt103-layers N] [--wt103-streams B]
                 [--wt103-tokens T] [--compare-tokens T] [--statistics-tokens T]

Compares the backend (default cuda) with the CPU f64 reference on a medium and a WT103-shaped
random model and measures its tokens per second on the latter. Exits with status 1 when any
log-probability differs from the f64 reference by more than f32 should reach (max |Δ ln p| above
1e-4 on the medium model, above 1e-3 on the WT103-shaped one) or when its calibration
statistics differ from the CPU f32 backend's by more (a Gram matrix entry by more than 1e-4 of
the matrix's mean diagonal), 2 on bad arguments.
";

struct Args {
    backend: Backend,
    out: Option<String>,
    wt103_layers: u32,
    wt103_streams: usize,
    wt103_tokens: usize,
    compare_tokens: usize,
    statistics_tokens: usize,
}

/// The arguments; `Ok(None)` for `--help`.
fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        backend: Backend::Cuda,
        out: None,
        wt103_layers: 18,
        wt103_streams: 16,
        wt103_tokens: 2048,
        compare_tokens: 256,
        statistics_tokens: 512,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--backend" => {
                args.backend = match value()?.as_str() {
                    "cuda" => Backend::Cuda,
                    "cpu32" => Backend::Cpu32,
                    other => return Err(format!("unknown backend {other}")),
                }
            }
            "--out" => args.out = Some(value()?),
            "--wt103-layers" => args.wt103_layers = number(value()?)? as u32,
            "--wt103-streams" => args.wt103_streams = number(value()?)?,
            "--wt103-tokens" => args.wt103_tokens = number(value()?)?,
            "--compare-tokens" => args.compare_tokens = number(value()?)?,
            "--statistics-tokens" => args.statistics_tokens = number(value()?)?,
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Some(args))
}

/// Prints each line and keeps it for the results file.
#[derive(Default)]
struct Report(String);

impl Report {
    fn line(&mut self, text: impl AsRef<str>) {
        println!("{}", text.as_ref());
        let _ = writeln!(self.0, "{}", text.as_ref());
    }
}

fn cutoffs(list: &[u32]) -> [u32; MAX_CUTOFFS] {
    let mut c = [0; MAX_CUTOFFS];
    c[..list.len()].copy_from_slice(list);
    c
}

/// The Transformer-XL WT103 model's shape (Dai et al., 2019), with `n_layer` layers.
fn wt103_config(n_layer: u32) -> Config {
    Config {
        n_token: 267_735,
        d_model: 1024,
        d_embed: 1024,
        n_head: 16,
        d_head: 64,
        d_inner: 4096,
        n_layer,
        cutoffs: cutoffs(&[20_000, 40_000, 200_000]),
        n_cutoffs: 3,
        div_val: 4,
        tie_weight: true,
        tie_projs: 0b1110,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 128,
        mem_len: 1600,
        clamp_len: 1000,
        same_length: true,
    }
}

/// A mid-sized model for the agreement check.
fn medium_config() -> Config {
    Config {
        n_token: 5000,
        d_model: 256,
        d_embed: 256,
        n_head: 8,
        d_head: 32,
        d_inner: 1024,
        n_layer: 4,
        cutoffs: cutoffs(&[1000, 3000]),
        n_cutoffs: 2,
        div_val: 2,
        tie_weight: true,
        tie_projs: 0b110,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 64,
        mem_len: 160,
        clamp_len: 100,
        same_length: true,
    }
}

/// Deterministic pseudo-random tokens; small ids more frequent, as in text.
fn text(n: usize, n_token: u32, seed: u64) -> Vec<u32> {
    let mut rng = txl_core::rng::Rng::new(seed);
    (0..n)
        .map(|_| {
            let unit = rng.unit_f64();
            ((n_token as f64).powf(unit) - 1.0) as u32 % n_token
        })
        .collect()
}

fn build(config: &Config, seed: u64, report: &mut Report) -> Result<AlignedBytes, String> {
    let started = Instant::now();
    let image = random_image(config, seed, RandomInit::for_config(config)).map_err(|e| e.to_string())?;
    let aligned = AlignedBytes::copy_from(&image).map_err(|e| e.to_string())?;
    report.line(format!(
        "  random model: {:.2} GB image in {:.1} s",
        image.len() as f64 / 1e9,
        started.elapsed().as_secs_f64()
    ));
    Ok(aligned)
}

/// The fast backend against the CPU f64 reference on `streams` of one model: the largest
/// |Δ ln p| over every target and full row (infinite for a NaN).
fn compare(
    model: &Model<'_>,
    backend: Backend,
    streams: &[Vec<u32>],
    options: &SessionOptions,
    bound: f64,
    report: &mut Report,
) -> Result<f64, String> {
    let views: Vec<&[u32]> = streams.iter().map(|s| s.as_slice()).collect();
    let total: usize = streams.iter().map(|s| s.len()).sum();
    let mut results = Vec::new();
    for b in [backend, Backend::Cpu64] {
        let started = Instant::now();
        let mut reference = Reference::new(model, b).map_err(|e| e.to_string())?;
        let loaded = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let scores = reference
            .score_batch(&views, options, 1, |_| {})
            .map_err(|e| e.to_string())?;
        let seconds = started.elapsed().as_secs_f64();
        report.line(format!(
            "  {:<6} load {loaded:6.1} s, {total} tokens in {seconds:7.2} s: {:9.0} tokens/s",
            b.name(),
            total as f64 / seconds
        ));
        results.push(scores);
    }
    let (fast, golden) = (&results[0], &results[1]);
    let mut worst: f64 = 0.0;
    let mut nll = [0.0f64; 2];
    let mut count = 0usize;
    for (a, b) in fast.iter().zip(golden) {
        if a.logp.len() != b.logp.len() || a.rows.len() != b.rows.len() {
            return Err(format!(
                "{} gives {} log-probabilities and {} row values, cpu64 {} and {}",
                backend.name(),
                a.logp.len(),
                a.rows.len(),
                b.logp.len(),
                b.rows.len()
            ));
        }
        for (x, y) in a.logp.iter().chain(&a.rows).zip(b.logp.iter().chain(&b.rows)) {
            let d = (x - y).abs();
            worst = worst.max(if d.is_nan() { f64::INFINITY } else { d });
        }
        nll[0] -= a.logp.iter().sum::<f64>();
        nll[1] -= b.logp.iter().sum::<f64>();
        count += a.logp.len();
    }
    let count = count.max(1) as f64;
    report.line(format!(
        "  {} vs cpu64: max |Δ ln p| = {worst:.3e} (mean nll {:.6} vs {:.6} nats){}",
        backend.name(),
        nll[0] / count,
        nll[1] / count,
        if worst <= bound {
            format!(", bound {bound:e}")
        } else {
            format!(" ABOVE THE BOUND {bound:e}")
        }
    ));
    Ok(worst)
}

/// Times [`Reference::statistics`] with Gram matrices on `backend` and on the CPU f32 backend,
/// and returns the largest difference of a Gram matrix entry as a fraction of its matrix's mean
/// diagonal.
fn compare_statistics(
    model: &Model<'_>,
    backend: Backend,
    tokens: &[u32],
    options: &SessionOptions,
    report: &mut Report,
) -> Result<f64, String> {
    let mut results = Vec::new();
    for b in [backend, Backend::Cpu32] {
        let mut reference = Reference::new(model, b).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let statistics = reference
            .statistics(&[tokens], options, true)
            .map_err(|e| e.to_string())?;
        let seconds = started.elapsed().as_secs_f64();
        report.line(format!(
            "  {:<6} {} tokens in {seconds:7.2} s: {:9.0} tokens/s",
            b.name(),
            tokens.len(),
            tokens.len() as f64 / seconds
        ));
        results.push((statistics, seconds));
    }
    let mut reference = Reference::new(model, backend).map_err(|e| e.to_string())?;
    let started = Instant::now();
    reference
        .statistics(&[tokens], options, false)
        .map_err(|e| e.to_string())?;
    report.line(format!(
        "  {:<6} the ranges alone in {:.2} s",
        backend.name(),
        started.elapsed().as_secs_f64()
    ));
    drop(reference);
    let ((ours, our_seconds), (theirs, their_seconds)) = (&results[0], &results[1]);
    let (ours, theirs) = (ours.grams.as_ref().unwrap(), theirs.grams.as_ref().unwrap());
    let pairs = ours
        .layers
        .iter()
        .flatten()
        .zip(theirs.layers.iter().flatten())
        .chain(ours.out_tables.iter().zip(&theirs.out_tables))
        .chain(ours.emb_proj.iter().zip(&theirs.emb_proj))
        .chain([(&ours.cluster_head, &theirs.cluster_head)]);
    let (mut worst, mut entries): (f64, usize) = (0.0, 0);
    for (a, b) in pairs {
        if (a.n, a.rows) != (b.n, b.rows) {
            return Err(format!(
                "Gram matrices of {}x{} after {} and {} rows",
                a.n, b.n, a.rows, b.rows
            ));
        }
        let n = a.n;
        let mean_diagonal = (0..n).map(|i| b.sum[i * n + i]).sum::<f64>() / n.max(1) as f64;
        for (x, y) in a.sum.iter().zip(&b.sum) {
            let d = (x - y).abs() / mean_diagonal.max(f64::MIN_POSITIVE);
            worst = worst.max(if d.is_nan() { f64::INFINITY } else { d });
        }
        entries += n * n;
    }
    report.line(format!(
        "  {} vs cpu32: {:.1}x as fast; {entries} Gram entries, the largest difference {worst:.3e} of \
         the mean diagonal{}",
        backend.name(),
        their_seconds / our_seconds,
        if worst <= MAX_GRAM_DELTA {
            format!(", bound {MAX_GRAM_DELTA:e}")
        } else {
            format!(" ABOVE THE BOUND {MAX_GRAM_DELTA:e}")
        }
    ));
    Ok(worst)
}

/// Notes an agreement check above `bound` in `failures`.
fn check(worst: f64, bound: f64, what: &str, failures: &mut Vec<String>) {
    if worst > bound {
        failures.push(format!("{what}: max |Δ ln p| = {worst:.3e} > {bound:e}"));
    }
}

fn run(args: &Args, report: &mut Report) -> Result<(), String> {
    report.line(format!("txl-host-gpu benchmark, backend {}", args.backend.name()));
    if args.backend == Backend::Cuda {
        let gpu = cuda_available().map_err(|e| e.to_string())?;
        report.line(format!(
            "GPU: {} ({} device(s)), driver API version {}",
            gpu.name, gpu.devices, gpu.driver_version
        ));
    }
    let mut failures = Vec::new();

    let config = medium_config();
    report.line(format!(
        "\n[1] agreement, medium model: {} layers, d_model {}, n_token {}, 4 streams",
        config.n_layer, config.d_model, config.n_token
    ));
    let image = build(&config, 7, report)?;
    let model = Model::parse(image.bytes()).map_err(|e| e.to_string())?;
    let streams: Vec<Vec<u32>> = (0..4).map(|s| text(1000, config.n_token, s + 1)).collect();
    for mem_init in [MemInit::Empty, MemInit::Zeros] {
        let options = SessionOptions {
            mem_init,
            ..SessionOptions::from_config(&config)
        };
        report.line(format!("  mem_init {mem_init:?}:"));
        let worst = compare(&model, args.backend, &streams, &options, MAX_DELTA, report)?;
        let what = format!("medium model, mem_init {mem_init:?}");
        check(worst, MAX_DELTA, &what, &mut failures);
    }
    drop(image);

    let config = wt103_config(args.wt103_layers);
    report.line(format!(
        "\n[2] WT103-shaped model: {} layers, d_model 1024, n_token 267735, mem_len 1600, \
         tgt_len 128, clamp_len 1000, same_length",
        config.n_layer
    ));
    let image = build(&config, 103, report)?;
    let model = Model::parse(image.bytes()).map_err(|e| e.to_string())?;
    let options = SessionOptions {
        mem_init: MemInit::Zeros,
        ..SessionOptions::from_config(&config)
    };
    report.line(format!(
        "  agreement on {} tokens, one stream:",
        args.compare_tokens
    ));
    let streams = vec![text(args.compare_tokens, config.n_token, 11)];
    let worst = compare(&model, args.backend, &streams, &options, MAX_DELTA_WT103, report)?;
    check(worst, MAX_DELTA_WT103, "WT103-shaped model", &mut failures);

    let started = Instant::now();
    let mut reference = Reference::new(&model, args.backend).map_err(|e| e.to_string())?;
    report.line(format!(
        "  {} load: {:.1} s",
        args.backend.name(),
        started.elapsed().as_secs_f64()
    ));
    // Warm up (kernel loading, first allocations), then measure.
    reference
        .score(&text(128, config.n_token, 1), &options, 0, |_| {})
        .map_err(|e| e.to_string())?;
    let tokens = text(args.wt103_streams * args.wt103_tokens, config.n_token, 5);
    let result =
        eval(&mut reference, &tokens, &options, args.wt103_streams, |_, _| {}).map_err(|e| e.to_string())?;
    report.line(format!(
        "  throughput: {} streams x {} tokens in {:.2} s: {:.0} tokens/s (nll {:.3})",
        result.streams, args.wt103_tokens, result.seconds, result.tokens_per_second, result.nll
    ));
    drop(reference);

    report.line(format!(
        "\n[3] calibration statistics (ranges and Gram matrices), WT103-shaped model, {} tokens:",
        args.statistics_tokens
    ));
    let tokens = text(args.statistics_tokens, config.n_token, 17);
    let worst = compare_statistics(&model, args.backend, &tokens, &options, report)?;
    if worst > MAX_GRAM_DELTA {
        failures.push(format!(
            "statistics: a Gram matrix entry {worst:.3e} of the mean diagonal from cpu32's > \
             {MAX_GRAM_DELTA:e}"
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} differs from the CPU f64 reference by more than f32 should: {}",
            args.backend.name(),
            failures.join("; ")
        ))
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("gpu_bench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut report = Report::default();
    let result = run(&args, &mut report);
    if let Err(e) = &result {
        report.line(format!("FAILED: {e}"));
    }
    if let Some(path) = &args.out {
        if let Err(e) = std::fs::write(path, &report.0) {
            eprintln!("gpu_bench: writing {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
