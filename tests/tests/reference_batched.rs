//! Scoring streams side by side gives each stream what scoring it alone gives.

use txl_core::{Model, SessionOptions};
use txl_host_gpu::{Backend, Reference};
use txl_tests::{max_delta, random_model, reference_config, session_variants, tokens, Manifest};

fn check(model: &Model<'_>, options: &SessionOptions, backend: Backend, tolerance: f64) -> f64 {
    let n_token = model.config().n_token;
    // Different lengths, an empty stream, one shorter than a segment.
    let streams: Vec<Vec<u32>> = [37, 5, 0, 23, 16, 1]
        .iter()
        .enumerate()
        .map(|(i, &n)| tokens(n, n_token, i as u64 + 1))
        .collect();
    let views: Vec<&[u32]> = streams.iter().map(|s| s.as_slice()).collect();
    let mut reference = Reference::new(model, backend).unwrap();
    let batched = reference.score_batch(&views, options, 3, |_| {}).unwrap();
    assert_eq!(batched.len(), views.len(), "one result per stream");
    let mut worst: f64 = 0.0;
    for (stream, together) in views.iter().zip(&batched) {
        let alone = reference.score(stream, options, 3, |_| {}).unwrap();
        assert_eq!(together.logp.len(), stream.len().saturating_sub(1));
        assert_eq!(together.rows_kept, alone.rows_kept);
        assert_eq!(together.rows.len(), alone.rows.len());
        let delta = max_delta(
            together.logp.iter().chain(&together.rows).copied(),
            alone.logp.iter().chain(&alone.rows).copied(),
        );
        worst = worst.max(delta);
    }
    assert!(worst <= tolerance, "{backend:?} {options:?}: {worst:e}");
    worst
}

#[test]
fn batched_equals_unbatched_on_the_cpu() {
    let mut worst: [f64; 2] = [0.0; 2];
    let mut models = vec![random_model(&reference_config(), 3)];
    let mut pre = reference_config();
    pre.pre_lnorm = true;
    pre.div_val = 1;
    pre.d_embed = 12;
    pre.tie_projs = 0b010;
    models.push(random_model(&pre, 4));
    let manifest = Manifest::load().unwrap();
    models.extend(
        manifest
            .models
            .iter()
            .filter(|m| m.name == "demo")
            .map(|m| m.image().unwrap()),
    );
    for image in &models {
        let model = Model::parse(image.bytes()).unwrap();
        for options in session_variants(SessionOptions::from_config(model.config())) {
            worst[0] = worst[0].max(check(&model, &options, Backend::Cpu64, 1e-12));
            worst[1] = worst[1].max(check(&model, &options, Backend::Cpu32, 5e-5));
        }
    }
    println!(
        "batched vs alone, max |Δ ln p|: f64 {:.3e}, f32 {:.3e}",
        worst[0], worst[1]
    );
}
