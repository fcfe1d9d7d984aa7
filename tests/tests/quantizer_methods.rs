//! Which rounding method the quantizer uses when none is asked for, measured: every method
//! (`round`, `compensated`, `auto`) in int8 and int4 on both trained models (the bundled demo
//! model and `tests/fixtures/second`), calibrated on 4096 bytes of `calib.txt` with smoothing
//! searched, as `txl quantize --calib-bytes` does, and scored on 8192 bytes of `heldout.txt`
//! (never used for calibration) against the f32 model; and, in a test run on demand (about
//! two and a half minutes on two cores), the same images as integer images (`txl quantize
//! --integer`: smoothing in powers of two, int8 memory). `cargo test -p txl-tests --test
//! quantizer_methods -- --include-ignored --nocapture` prints the table of docs/QUANTIZATION.md.
//! The default with calibration text must be the method with the lowest loss, and `auto` must
//! make its choice on calibration text its candidates were not fitted on.

use txl_core::{AlignedBytes, MemDtype, Model, SessionOptions};
use txl_host_gpu::quantize::{quantize, Method, QuantizeOptions, Target};
use txl_tests::{pytorch_baseline, trained_text, with_integer_arithmetic, QuantizationText};
use txl_tools::compare::compare;

const HELDOUT_TOKENS: usize = 8192;
const CALIBRATION_TOKENS: usize = 4096;
const MODELS: [&str; 2] = ["demo", "second"];
const TARGETS: [Target; 2] = [Target::Int8, Target::Int4];
const METHODS: [Method; 3] = [Method::Round, Method::Compensated, Method::Auto];

/// Held-out relative Δ in bits per token of `image` (with `mem_dtype` memory) against the f32
/// model of `f` (f32 memory).
fn held_out_delta(f: &QuantizationText, image: &[u8], mem_dtype: MemDtype) -> f64 {
    let reference = Model::parse(f.f32_image.bytes()).unwrap();
    let candidate = AlignedBytes::copy_from(image).unwrap();
    let candidate = Model::parse(candidate.bytes()).unwrap();
    let options = SessionOptions::from_config(reference.config());
    let candidate_options = SessionOptions { mem_dtype, ..options };
    compare(
        (&reference, options),
        (&candidate, candidate_options),
        &f.heldout,
        |_| {},
    )
    .unwrap()
    .relative_delta
}

/// The held-out relative Δ of every method, `[model][target][method]`, printed as a table;
/// the two models side by side on two threads.
fn measure_every_method(integer: bool) -> [[[f64; 3]; 2]; 2] {
    let measure_model = |name: &str| -> [[f64; 3]; 2] {
        let f = trained_text(name, HELDOUT_TOKENS, CALIBRATION_TOKENS);
        TARGETS.map(|target| {
            METHODS.map(|method| {
                let q = f.quantized_with(target, method, integer);
                if integer {
                    let image = with_integer_arithmetic(&q.image, &f.calibration);
                    held_out_delta(&f, &image, MemDtype::Int8)
                } else {
                    held_out_delta(&f, &q.image, MemDtype::F32)
                }
            })
        })
    };
    let deltas = std::thread::scope(|scope| {
        let threads = MODELS.map(|name| scope.spawn(move || measure_model(name)));
        threads.map(|t| t.join().unwrap())
    });
    let arithmetic = if integer { "integer" } else { "float" };
    for (name, by_target) in MODELS.iter().zip(&deltas) {
        for (target, d) in TARGETS.iter().zip(by_target) {
            let row: Vec<String> = d.iter().map(|d| format!("{:+.4}%", 100.0 * d)).collect();
            println!("| {name} | {target} | {arithmetic} | {} |", row.join(" | "));
        }
    }
    deltas
}

/// The method with the lowest held-out loss summed over both models and both precisions, and
/// each method's sum.
fn best_method(deltas: &[[[f64; 3]; 2]; 2]) -> (Method, [f64; 3]) {
    let mut sums = [0.0; 3];
    for (k, sum) in sums.iter_mut().enumerate() {
        *sum = deltas.iter().flatten().map(|d| d[k]).sum();
    }
    let best = (0..3).min_by(|&a, &b| sums[a].total_cmp(&sums[b])).unwrap();
    (METHODS[best], sums)
}

/// Prints the table's header.
fn header() {
    println!("| model | weights | arithmetic | round | compensated | auto |");
    println!("|---|---|---|---:|---:|---:|");
}

/// The measurement chooses the default: the method with calibration text is the one that lost
/// least on held-out text, summed over both models and precisions, and in each of them (float
/// arithmetic; measured: compensated ahead of round by 0.010% to 0.24%, of auto by 0.030% to
/// 0.098%).
#[test]
fn the_default_with_calibration_text_is_the_method_that_loses_least() {
    header();
    let deltas = measure_every_method(false);
    let (best, sums) = best_method(&deltas);
    println!("summed over both models and precisions: {sums:?}, best {best}");
    assert_eq!(
        Method::default_for(true),
        best,
        "the default is not the method that lost least ({sums:?})"
    );
    let chosen = METHODS.iter().position(|&m| m == best).unwrap();
    for (name, by_target) in MODELS.iter().zip(&deltas) {
        for (target, d) in TARGETS.iter().zip(by_target) {
            for (k, method) in METHODS.iter().enumerate() {
                assert!(
                    d[chosen] <= d[k],
                    "{name} {target}: {best} {:+.4}% against {method} {:+.4}%",
                    100.0 * d[chosen],
                    100.0 * d[k]
                );
            }
        }
    }
    for name in MODELS {
        let pytorch = pytorch_baseline(name, "dynamic_int8_linear", HELDOUT_TOKENS)["relative_delta"]
            .as_f64()
            .unwrap();
        println!(
            "{name}: PyTorch dynamic int8 (Linear layers only) {:+.4}%",
            100.0 * pytorch
        );
    }
}

/// The same as integer images: the default loses least summed over both models and
/// precisions (measured: compensated +0.066%, auto +0.18%, round +0.31%), though not in each
/// (on the second model's int8, plain rounding came out 0.029% ahead).
#[test]
#[ignore = "about two and a half minutes on two cores; run with --include-ignored to regenerate the table"]
fn as_integer_images_the_default_loses_least_summed() {
    header();
    let deltas = measure_every_method(true);
    let (best, sums) = best_method(&deltas);
    println!("summed over both models and precisions: {sums:?}, best {best}");
    assert_eq!(Method::default_for(true), best, "{sums:?}");
}

/// Without calibration text the default is plain rounding, the method that needs none: the
/// others are refused without it or fall back to it.
#[test]
fn the_default_without_calibration_text_needs_none() {
    assert_eq!(Method::default_for(false), Method::Round);
    let f = trained_text("demo", 64, 64);
    let model = Model::parse(f.f32_image.bytes()).unwrap();
    let session = SessionOptions::from_config(model.config());
    let options = |method| QuantizeOptions {
        method,
        ..QuantizeOptions::weights_only(Target::Int8, session)
    };
    let plain = quantize(&model, &options(Method::default_for(false)), None, |_| {}).unwrap();
    assert!(quantize(&model, &options(Method::Compensated), None, |_| {}).is_err());
    let auto = quantize(&model, &options(Method::Auto), None, |_| {}).unwrap();
    assert_eq!(auto.image, plain.image, "auto without text rounds plainly");
}

/// `auto` fits its compensated candidates on the first half of the calibration text and
/// compares the roundings on the second: the first comparison's plain side (every tensor
/// rounded plainly, the image `--method round` makes) is that image's bits per token on the
/// second half, not on the whole text; and the choices follow the measurements.
#[test]
fn auto_chooses_on_calibration_text_it_did_not_fit_on() {
    let f = trained_text("demo", 64, 2048);
    let split = Method::auto_split(f.calibration.len());
    assert_eq!(split, 1024);
    let auto = f.quantized(Target::Int8, Method::Auto);
    assert_eq!(auto.report.rounding_choice, Some([1024, 1024]));
    let round = f.quantized(Target::Int8, Method::Round);
    assert_eq!(round.report.rounding_choice, None);
    assert_eq!(auto.report.smoothing_alpha, round.report.smoothing_alpha);
    let bits = |image: &[u8], tokens: &[u32]| {
        let bytes = AlignedBytes::copy_from(image).unwrap();
        let model = Model::parse(bytes.bytes()).unwrap();
        let options = SessionOptions::from_config(model.config());
        txl_core::scoring::score(&model, tokens, options, 0, |_| {})
            .unwrap()
            .bits_per_token()
    };
    let judged = bits(&round.image, &f.calibration[split..]);
    let whole = bits(&round.image, &f.calibration);
    let first = auto
        .report
        .tensors
        .iter()
        .find_map(|t| t.rounding.as_ref()?.bits_per_token)
        .expect("auto compares the roundings");
    assert_eq!(first[0], judged, "the first comparison's plain side");
    assert_ne!(first[0], whole, "measured on the whole text");
    let mut chose = [0; 2];
    for t in &auto.report.tensors {
        let Some([plain, compensated]) = t.rounding.as_ref().and_then(|r| r.bits_per_token) else {
            continue;
        };
        let expected = if compensated < plain {
            Method::Compensated
        } else {
            Method::Round
        };
        assert_eq!(t.method, Some(expected), "{}", t.name);
        chose[usize::from(expected == Method::Compensated)] += 1;
    }
    println!("auto kept {} tensors plain, {} compensated", chose[0], chose[1]);
    // the chosen tensors are fitted again on all of the text: as `compensated` makes them
    let compensated = f.quantized(Target::Int8, Method::Compensated);
    let (a, c) = (&auto.report.tensors, &compensated.report.tensors);
    for (a, c) in a.iter().zip(c) {
        if a.method == Some(Method::Compensated) {
            assert_eq!(a.sqnr_db, c.sqnr_db, "{}", a.name);
        }
    }
}
