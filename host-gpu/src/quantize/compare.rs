//! Every precision side by side: the model quantized plainly to f16, int8, int4 and int4-all
//! (the vectors as each stores them by default),
//! each measured the way the report measures the image it writes, so the report (and its
//! picture) shows what each precision costs, not only the one chosen.

use txl_core::Model;

use super::options::{check_group, QuantizeOptions, Target};
use super::report::PrecisionReport;
use super::search::{bits_per_token, measure_layer_errors};
use super::source::Source;
use crate::error::Error;

/// The precisions compared, in the order the report lists them.
pub const COMPARED: [Target; 4] = [Target::F16, Target::Int8, Target::Int4, Target::Int4All];

/// `model` quantized plainly to each of [`COMPARED`] (int4 with `options.group` columns a
/// group), measured on `calibration` when given (with `options.session`).
pub fn compare_precisions(
    model: &Model<'_>,
    options: &QuantizeOptions,
    calibration: Option<&[u32]>,
    mut progress: impl FnMut(&str),
) -> Result<Vec<PrecisionReport>, Error> {
    check_group(options.group)?;
    let source = Source::read(model);
    let mut reports = Vec::with_capacity(COMPARED.len());
    for precision in COMPARED {
        progress(&format!("comparing precisions: {precision}"));
        let plans = source.plain_plans(precision, options.group, precision.default_vectors());
        let (image, sqnr) = source.build(&plans)?;
        let (layer_errors, bits) = match calibration {
            Some(tokens) => (
                measure_layer_errors(model, &image, options.session, tokens)?,
                Some(bits_per_token(&image, options.session, tokens)?),
            ),
            None => (Vec::new(), None),
        };
        reports.push(PrecisionReport {
            precision,
            image_bytes: image.len(),
            sqnr_db: sqnr.into_iter().map(|s| s.is_finite().then_some(s)).collect(),
            layer_errors,
            bits_per_token: bits,
        });
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{random_image, small_config, RandomInit};
    use txl_core::{AlignedBytes, SessionOptions};

    #[test]
    fn each_precision_costs_more_than_the_one_above_it() {
        let config = small_config();
        let image =
            AlignedBytes::copy_from(&random_image(&config, 5, RandomInit::default()).unwrap()).unwrap();
        let model = Model::parse(image.bytes()).unwrap();
        let session = SessionOptions::from_config(model.config());
        let options = QuantizeOptions::weights_only(Target::Int8, session);
        let tokens: Vec<u32> = (0..48).map(|t| (t * 7 + 3) % config.n_token).collect();
        let reports = compare_precisions(&model, &options, Some(&tokens), |_| {}).unwrap();
        assert_eq!(reports.iter().map(|r| r.precision).collect::<Vec<_>>(), COMPARED);
        let [f16, int8, int4, int4_all] = &reports[..] else {
            unreachable!()
        };
        // Smaller images for fewer bits a weight.
        assert!(f16.image_bytes > int8.image_bytes);
        assert!(int8.image_bytes > int4.image_bytes);
        assert!(int4.image_bytes > int4_all.image_bytes);
        // Noisier weights, tensor by tensor, and noisier layer outputs.
        for (i, (a, b)) in f16.sqnr_db.iter().zip(&int8.sqnr_db).enumerate() {
            assert_eq!(a.is_some(), b.is_some(), "tensor {i}");
            if let (Some(a), Some(b), Some(c)) = (a, b, int4_all.sqnr_db[i]) {
                assert!(a > b && *b > c, "tensor {i}: {a} {b} {c} dB");
            }
        }
        for layer in 0..config.n_layer as usize {
            let errors: Vec<f64> = reports.iter().map(|r| r.layer_errors[layer]).collect();
            assert!(
                errors[0] < errors[1] && errors[1] < errors[3],
                "layer {layer}: {errors:?}"
            );
        }
        assert!(reports
            .iter()
            .all(|r| r.bits_per_token.is_some_and(f64::is_finite)));
        // Without calibration text only the weights are measured.
        let unmeasured = compare_precisions(&model, &options, None, |_| {}).unwrap();
        assert!(unmeasured
            .iter()
            .all(|r| r.layer_errors.is_empty() && r.bits_per_token.is_none()));
        assert_eq!(unmeasured[2].sqnr_db, int4.sqnr_db);
    }
}
