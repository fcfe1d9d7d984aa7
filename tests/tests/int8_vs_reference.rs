//! int8 and int4 weights against the f64 reference with absolute bounds: random models covering
//! the architecture's options (adaptive softmax with div_val 2 and 1, a plain softmax, pre- and
//! post-LayerNorm, shared and per-layer `r_w_bias`, tied and untied output weights) are
//! quantized (weights only, rounded to nearest, no calibration) and scored by the core under
//! each of [`session_variants`] (segments and streaming, a clamp, same_length, both memory
//! starts, mem_len 0). The f32 model scored by the f64 reference (`host-gpu`) is the truth; the
//! quantized model scored by the core is held to a largest |Δ ln p| over the scored tokens, a
//! mean KL(reference ‖ quantized) per prediction over the whole distribution and a change of
//! bits per token. The other int8 tests bound int8 against the core's own f32
//! (`quantized_accuracy.rs`) or one int8 path against another (`position_keys_vs_reference.rs`).
//!
//! Each bound is about 3× the worst value measured over every model, seed and variant below
//! (`cargo test -p txl-tests --test int8_vs_reference -- --nocapture` prints them).

use txl_core::{scoring, AlignedBytes, Model, SessionOptions};
use txl_host_gpu::quantize::{quantize_weights, Target};
use txl_host_gpu::{Backend, Reference};
use txl_tests::{accuracy_configs, random_model, session_variants, tokens};

/// How far one precision may move from the reference, and how far it must at least move
/// somewhere (else the comparison would not be of weights in that precision).
#[derive(Debug)]
struct Bounds {
    /// Largest |ln p_ref(t) - ln p_q(t)| over every scored next token.
    max_abs_delta_logp: f64,
    /// Mean over predictions of KL(reference ‖ quantized), in nats.
    mean_kl: f64,
    /// |bits per token (quantized) - bits per token (reference)|.
    bits_per_token: f64,
    /// The worst mean KL over all cases must exceed this, which the next finer precision stays
    /// well below.
    min_worst_mean_kl: f64,
}

// Measured (`cargo test -p txl-tests --test int8_vs_reference -- --nocapture`), worst over
// the 3 configs × 4 seeds × 4 session variants (64 tokens each); each bound is about 3× that.
/// int8 (W8A8): measured max |Δ ln p| 0.461, mean KL 7.07e-4 nats, |Δ bits/token| 0.0467 (the
/// pre-LN model; the plain softmax 0.057, 1.4e-4, 0.0046).
const INT8: Bounds = Bounds {
    max_abs_delta_logp: 1.4,
    mean_kl: 2.1e-3,
    bits_per_token: 0.14,
    // f16 weights measure a worst mean KL of 9.6e-7.
    min_worst_mean_kl: 1e-5,
};
/// int4 (W4A8 in the layers, int8 embeddings and output, groups of 32 columns): measured max
/// |Δ ln p| 2.45, mean KL 0.0453 nats, |Δ bits/token| 0.180. Random weights have no outliers
/// for the groups to tame, and rows of these widths (16 to 32 columns) are one group each.
const INT4: Bounds = Bounds {
    max_abs_delta_logp: 7.4,
    mean_kl: 0.14,
    bits_per_token: 0.54,
    // int8 measures 7.1e-4 (above).
    min_worst_mean_kl: 5e-3,
};

/// Tokens scored per case.
const TOKENS: usize = 64;
/// Seeds per config.
const SEEDS: u64 = 4;

/// What one case measured.
#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    max_abs_delta_logp: f64,
    mean_kl: f64,
    bits_per_token: f64,
}

impl Measured {
    fn worst(self, other: Measured) -> Measured {
        Measured {
            max_abs_delta_logp: self.max_abs_delta_logp.max(other.max_abs_delta_logp),
            mean_kl: self.mean_kl.max(other.mean_kl),
            bits_per_token: self.bits_per_token.max(other.bits_per_token),
        }
    }
}

/// The quantized model scored by the core against the f32 model scored by the f64 reference,
/// over every prediction of `text` (the last token predicts nothing scored).
fn measure(
    reference: &mut Reference,
    quantized: &Model<'_>,
    text: &[u32],
    options: SessionOptions,
) -> Measured {
    let n_token = quantized.config().n_token as usize;
    let ours = scoring::score(quantized, text, options, text.len(), |_| {}).unwrap();
    let truth = reference.score(text, &options, text.len(), |_| {}).unwrap();
    let predictions = text.len() - 1;
    assert_eq!(ours.logp.len(), predictions, "{options:?}");
    assert_eq!(truth.logp.len(), predictions, "{options:?}");
    assert_eq!(ours.rows.len(), text.len() * n_token, "{options:?}");
    assert_eq!(truth.rows.len(), text.len() * n_token, "{options:?}");
    let mut max_abs_delta_logp = 0.0f64;
    let (mut nll_ref, mut nll_q) = (0.0, 0.0);
    for (&q, &r) in ours.logp.iter().zip(&truth.logp) {
        let delta = (q as f64 - r).abs();
        // A NaN counts as infinitely far.
        max_abs_delta_logp = max_abs_delta_logp.max(if delta.is_nan() { f64::INFINITY } else { delta });
        nll_ref -= r;
        nll_q -= q as f64;
    }
    let kl: f64 = ours
        .rows
        .chunks_exact(n_token)
        .zip(truth.rows.chunks_exact(n_token))
        .take(predictions)
        .map(|(q, p)| {
            p.iter()
                .zip(q)
                .map(|(&p, &q)| p.exp() * (p - q as f64))
                .sum::<f64>()
        })
        .sum();
    let n = predictions as f64;
    let mean_kl = kl / n;
    Measured {
        max_abs_delta_logp,
        mean_kl: if mean_kl.is_nan() { f64::INFINITY } else { mean_kl },
        bits_per_token: ((nll_q - nll_ref) / n / std::f64::consts::LN_2).abs(),
    }
}

/// Every config, seed and session variant quantized to `target`, within `bounds`.
fn check(target: Target, bounds: &Bounds) {
    let mut worst = Measured::default();
    let mut failures = Vec::new();
    for (name, config) in accuracy_configs() {
        for seed in 1..=SEEDS {
            let f32_image = random_model(&config, 60 + seed);
            let f32_model = Model::parse(f32_image.bytes()).unwrap();
            let mut reference = Reference::new(&f32_model, Backend::Cpu64).unwrap();
            let quantized = AlignedBytes::copy_from(&quantize_weights(&f32_model, target).unwrap()).unwrap();
            let quantized = Model::parse(quantized.bytes()).unwrap();
            let text = tokens(TOKENS, config.n_token, 70 + seed);
            for options in session_variants(SessionOptions::from_config(&config)) {
                let m = measure(&mut reference, &quantized, &text, options);
                let what = format!(
                    "{name} seed {seed} tgt {} mem {} clamp {} same_length {} {}",
                    options.tgt_len,
                    options.mem_len,
                    options.clamp_len,
                    options.same_length,
                    options.mem_init
                );
                println!(
                    "{target} {what}: max |Δ ln p| {:.3e}, mean KL {:.3e}, |Δ bits/token| {:.3e}",
                    m.max_abs_delta_logp, m.mean_kl, m.bits_per_token
                );
                if m.max_abs_delta_logp > bounds.max_abs_delta_logp
                    || m.mean_kl > bounds.mean_kl
                    || m.bits_per_token > bounds.bits_per_token
                {
                    failures.push(format!("{what}: {m:?}"));
                }
                worst = worst.worst(m);
            }
        }
    }
    println!(
        "{target} worst: max |Δ ln p| {:.3e}, mean KL {:.3e}, |Δ bits/token| {:.3e}",
        worst.max_abs_delta_logp, worst.mean_kl, worst.bits_per_token
    );
    assert!(
        failures.is_empty(),
        "{target} against the f64 reference, over {bounds:?}:\n{}",
        failures.join("\n")
    );
    assert!(
        worst.mean_kl > bounds.min_worst_mean_kl,
        "{target}: the worst mean KL {:.3e} is no more than a finer precision's; were the weights \
         quantized to {target}?",
        worst.mean_kl
    );
}

#[test]
fn int8_weights_stay_within_absolute_bounds_of_the_f64_reference() {
    check(Target::Int8, &INT8);
}

#[test]
fn int4_weights_stay_within_absolute_bounds_of_the_f64_reference() {
    check(Target::Int4, &INT4);
}
