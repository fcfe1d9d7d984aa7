//! The CPU backends against the float64 log-probabilities Hugging Face `transformers` computed
//! for every fixture model and case (`tools/reference/make_fixtures.py`): f64 must agree to
//! 1e-9 (float64 against float64), f32 to 1e-4.

use txl_core::Model;
use txl_host_gpu::{Backend, Reference};
use txl_tests::{max_delta, Manifest};
use txl_tools::npy;

fn check_backend(backend: Backend, tolerance: f64) {
    let manifest = Manifest::load().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut worst_overall: f64 = 0.0;
    let mut report = Vec::new();
    for fixture in &manifest.models {
        let image = fixture.image().unwrap();
        let model = Model::parse(image.bytes()).unwrap();
        let mut reference = Reference::new(&model, backend).unwrap();
        let tokens = fixture.tokens().unwrap();
        for case in &fixture.cases {
            let tokens = &tokens[..case.n_tokens];
            let options = case.options();
            let scores = reference.score(tokens, &options, case.rows_k, |_| {}).unwrap();
            let logp = npy::read(&fixture.path().join(&case.logp)).unwrap();
            let rows = npy::read(&fixture.path().join(&case.rows)).unwrap();
            assert_eq!(
                scores.logp.len(),
                logp.data.len(),
                "{} {}",
                fixture.name,
                case.name
            );
            assert_eq!(
                scores.rows.len(),
                rows.data.len(),
                "{} {}",
                fixture.name,
                case.name
            );
            let worst = max_delta(
                scores.logp.iter().chain(&scores.rows).copied(),
                logp.data.iter().chain(&rows.data).copied(),
            );
            report.push(format!(
                "{:<8} {:<28} {:<22} max |Δ ln p| = {worst:.3e}",
                backend.name(),
                fixture.name,
                case.name
            ));
            worst_overall = worst_overall.max(worst);
            checked += 1;
            if worst > tolerance {
                failures.push(format!("{} {}: {worst:.3e}", fixture.name, case.name));
            }
        }
    }
    report.push(format!(
        "{}: {checked} cases, worst {worst_overall:.3e}",
        backend.name()
    ));
    println!("{}", report.join("\n"));
    assert!(checked >= 20, "only {checked} cases");
    assert!(
        failures.is_empty(),
        "over {tolerance:e}:\n{}",
        failures.join("\n")
    );
}

#[test]
fn cpu_f64_matches_hugging_face_float64_to_1e_9() {
    check_backend(Backend::Cpu64, 1e-9);
}

#[test]
fn cpu_f32_matches_hugging_face_float64_to_1e_4() {
    check_backend(Backend::Cpu32, 1e-4);
}
