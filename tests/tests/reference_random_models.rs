//! The random-model generator makes models whose predictions are far from uniform, so that a
//! comparison between implementations tests something: a near-uniform model (every
//! `ln p ≈ -ln n_token`) would agree with almost any implementation.

use txl_core::{Model, SessionOptions};
use txl_host_gpu::{Backend, Reference};
use txl_tests::{random_model, reference_config, tokens};

/// Mean entropy of the predicted distributions over `ln n_token`, the uniform distribution's.
fn mean_relative_entropy(config: &txl_core::Config, seed: u64) -> f64 {
    let image = random_model(config, seed);
    let model = Model::parse(image.bytes()).unwrap();
    let mut reference = Reference::new(&model, Backend::Cpu64).unwrap();
    let text = tokens(40, config.n_token, seed);
    let options = SessionOptions::from_config(model.config());
    let scores = reference.score(&text, &options, text.len(), |_| {}).unwrap();
    let n_token = config.n_token as usize;
    let entropies: Vec<f64> = scores
        .rows
        .chunks_exact(n_token)
        .map(|row| -row.iter().map(|&lp| lp.exp() * lp).sum::<f64>())
        .collect();
    entropies.iter().sum::<f64>() / entropies.len() as f64 / (n_token as f64).ln()
}

#[test]
fn random_models_predict_far_from_uniform() {
    let mut configs = vec![reference_config()];
    let mut c = reference_config();
    c.n_cutoffs = 0;
    c.cutoffs = [0; 8];
    c.div_val = 1;
    c.tie_projs = 0;
    c.n_token = 100;
    c.n_layer = 3;
    c.n_head = 4;
    c.d_head = 16;
    c.d_model = 48;
    c.d_embed = 48;
    configs.push(c);
    c.pre_lnorm = true;
    c.d_embed = 24;
    c.n_token = 120;
    c.n_cutoffs = 2;
    c.cutoffs[..2].copy_from_slice(&[20, 60]);
    c.tie_projs = 0b001;
    configs.push(c);
    // A uniform prediction has relative entropy 1.
    let mut all = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        for seed in 1..=3 {
            let relative = mean_relative_entropy(config, seed);
            println!("config {i} seed {seed}: mean entropy / ln(n_token) = {relative:.3}");
            assert!(relative < 0.7, "config {i} seed {seed}: {relative:.3}");
            all.push(relative);
        }
    }
    let mean = all.iter().sum::<f64>() / all.len() as f64;
    assert!(mean < 0.5, "mean relative entropy {mean:.3}");
}
