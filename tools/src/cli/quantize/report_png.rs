//! The quantizer's report as a picture (`--report-png`): each tensor's weight SQNR as a bar
//! coloured by its dtype, each layer's output error, and the calibration bits per token of each
//! precision. Drawn from the [`Report`] alone (the JSON holds the same numbers), with the font
//! in `tools/assets/`, so no system font is needed.

use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::RangedCoordusize;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};
use txl_host_gpu::quantize::{PrecisionReport, Report, Target};

/// Width and height of the picture in pixels.
pub const SIZE: (u32, u32) = (1200, 1000);

/// DejaVu Sans Mono (its licence: `tools/assets/DejaVuSansMono-LICENSE.txt`).
const FONT_BYTES: &[u8] = include_bytes!("../../../assets/DejaVuSansMono.ttf");
/// The family name the font is registered under.
const FONT: &str = "txl-mono";

/// The colour of a tensor stored as `dtype`.
fn dtype_colour(dtype: &str) -> RGBColor {
    match dtype {
        "f16" => RGBColor(52, 101, 164),
        "int8" => RGBColor(78, 154, 6),
        "int4" => RGBColor(245, 121, 0),
        _ => RGBColor(136, 138, 133),
    }
}

/// The dtypes drawn, in legend order.
const DTYPES: [&str; 3] = ["f16", "int8", "int4"];

/// A plotters error as an error of this crate.
fn drawn<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T> {
    result.map_err(|e| anyhow!("drawing the report: {e}"))
}

/// A tensor's name, shortened to fit under a bar: `layers.3.dec_attn.qkv_net.weight` is
/// `3.qkv`, `crit.out_layers.0.weight` is `out.0`.
fn short_name(name: &str) -> String {
    let name = name.strip_suffix(".weight").unwrap_or(name);
    let name = name.strip_prefix("layers.").unwrap_or(name);
    [
        ("dec_attn.qkv_net", "qkv"),
        ("dec_attn.o_net", "o"),
        ("dec_attn.r_net", "r"),
        ("pos_ff.CoreNet.0", "ff1"),
        ("pos_ff.CoreNet.3", "ff2"),
        ("word_emb.emb_layers", "emb"),
        ("word_emb.emb_projs", "emb_proj"),
        ("crit.out_layers", "out"),
        ("crit.out_projs", "out_proj"),
        ("crit.cluster_weight", "cluster"),
    ]
    .iter()
    .fold(name.to_string(), |name, (long, short)| name.replace(long, short))
}

/// The report drawn as a PNG file's bytes, [`SIZE`] pixels.
pub fn png(report: &Report) -> Result<Vec<u8>> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    if !*REGISTERED.get_or_init(|| register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()) {
        return Err(anyhow!("the report's font does not load"));
    }
    let (width, height) = SIZE;
    // (height, width, RGB)
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, SIZE).into_drawing_area();
        drawn(root.fill(&WHITE))?;
        let mut title = format!("txl quantize: {}, {} bytes", report.target, report.image_bytes);
        if let Some(budget) = report.budget_bytes {
            title += &format!(" (budget {budget})");
        }
        let root = drawn(root.titled(&title, (FONT, 24)))?;
        let (top, rest) = root.split_vertically(height * 45 / 100);
        let (middle, bottom) = rest.split_vertically(height * 25 / 100);
        draw_sqnr(&top, report)?;
        draw_layer_errors(&middle, report)?;
        draw_bits(&bottom, report)?;
        drawn(root.present())?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(out)
}

/// A panel with nothing measured in it: its caption and why.
fn draw_unmeasured(area: &DrawingArea<BitMapBackend<'_>, Shift>, caption: &str) -> Result<()> {
    let (_, h) = area.dim_in_pixel();
    let style = TextStyle::from((FONT, 18)).color(&BLACK);
    drawn(area.draw_text(caption, &style, (20, 10)))?;
    let note = TextStyle::from((FONT, 16)).color(&RGBColor(136, 138, 133));
    drawn(area.draw_text(
        "not measured: give calibration text (--calib-bytes, --calib-tokens or --calib-text)",
        &note,
        (20, (h / 2) as i32),
    ))?;
    Ok(())
}

/// A bar over segment `i` of a chart whose x axis has one segment per bar.
fn bar(i: usize, value: f64, colour: RGBColor) -> Rectangle<(SegmentValue<usize>, f64)> {
    let mut bar = Rectangle::new(
        [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), value)],
        colour.filled(),
    );
    bar.set_margin(0, 0, 3, 3);
    bar
}

/// The x axis of `n` bars (plotters counts an integer range's end as a segment too).
fn segments(n: usize) -> SegmentedCoord<RangedCoordusize> {
    (0..n.saturating_sub(1)).into_segmented()
}

/// The label of segment `at` among `labels` (the segments' centres only).
fn segment_label(labels: &[String], at: &SegmentValue<usize>) -> String {
    match at {
        SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    }
}

/// The colour of `dtype` quantized plainly for comparison: the dtype's colour, lighter.
fn plain_colour(precision: Target) -> RGBColor {
    let RGBColor(r, g, b) = match precision {
        Target::Int4All => RGBColor(143, 89, 2),
        other => dtype_colour(&other.to_string()),
    };
    let lighter = |c: u8| ((c as u16 + 2 * 255) / 3) as u8;
    RGBColor(lighter(r), lighter(g), lighter(b))
}

/// The colour of the image's own layer errors.
const IMAGE_COLOUR: RGBColor = RGBColor(117, 80, 123);

/// One series of a grouped bar chart: its legend, and a colour and value (if any) per group.
struct Series {
    label: String,
    legend: RGBColor,
    bars: Vec<Option<(f64, RGBColor)>>,
}

/// Bars in groups, one bar per series in each group and a gap after it, each group labelled;
/// `log` draws the values on a logarithmic axis.
fn draw_grouped(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    caption: &str,
    groups: &[String],
    series: &[Series],
    log: bool,
) -> Result<()> {
    let values = || {
        series
            .iter()
            .flat_map(|s| s.bars.iter().flatten().map(|&(v, _)| v))
    };
    let high = values()
        .filter(|v| v.is_finite())
        .fold(f64::MIN_POSITIVE, f64::max);
    let slots = series.len() + 1;
    let x = segments(groups.len() * slots);
    // One label every `every` groups, at most 40 along the axis.
    let every = groups.len().div_ceil(40).max(1);
    let label = |at: &SegmentValue<usize>| match at {
        SegmentValue::CenterOf(i) if i % slots == (slots - 2) / 2 && (i / slots).is_multiple_of(every) => {
            groups.get(i / slots).cloned().unwrap_or_default()
        }
        _ => String::new(),
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(caption, (FONT, 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70);
    let bars = |bottom: f64, top: f64| {
        series.iter().enumerate().map(move |(k, s)| {
            let bars: Vec<_> = s
                .bars
                .iter()
                .enumerate()
                .filter_map(|(g, bar)| bar.map(|(v, colour)| (g * slots + k, v.clamp(bottom, top), colour)))
                .map(move |(i, v, colour)| {
                    let mut rect = Rectangle::new(
                        [(SegmentValue::Exact(i), bottom), (SegmentValue::Exact(i + 1), v)],
                        colour.filled(),
                    );
                    rect.set_margin(0, 0, 1, 1);
                    rect
                })
                .collect();
            (s.label.clone(), s.legend, bars)
        })
    };
    macro_rules! finish {
        ($chart:expr, $bottom:expr, $top:expr) => {{
            let mut chart = $chart;
            drawn(
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .x_labels(groups.len() * slots)
                    .x_label_formatter(&label)
                    .x_label_style((FONT, 11))
                    .label_style((FONT, 13))
                    .draw(),
            )?;
            for (name, colour, rects) in bars($bottom, $top) {
                drawn(chart.draw_series(rects))?
                    .label(name)
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
            }
            drawn(
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .background_style(WHITE.mix(0.9))
                    .border_style(BLACK)
                    .label_font((FONT, 13))
                    .draw(),
            )?;
        }};
    }
    if log {
        let low = values().filter(|v| *v > 0.0).fold(high, f64::min) / 2.0;
        // The bars in the lower half: room above them for the legend.
        let top = high * (high / low).powf(1.6).max(10.0);
        finish!(
            drawn(builder.build_cartesian_2d(x, (low..top).log_scale()))?,
            low,
            top
        );
    } else {
        let top = high * 1.45;
        finish!(drawn(builder.build_cartesian_2d(x, 0.0..top))?, 0.0, top);
    }
    Ok(())
}

/// Each stored tensor's weight SQNR, the image's bar coloured by its dtype, beside the SQNR
/// of every precision quantized plainly ([`Report::precisions`]; int4 from int4-all, which
/// holds every matrix in int4).
fn draw_sqnr(area: &DrawingArea<BitMapBackend<'_>, Shift>, report: &Report) -> Result<()> {
    let caption = "weight SQNR per tensor (dB): this image, and each precision plainly rounded";
    let compared: Vec<&PrecisionReport> = report
        .precisions
        .iter()
        .filter(|p| p.precision != Target::Int4)
        .collect();
    let shown: Vec<usize> = (0..report.tensors.len())
        .filter(|&i| {
            let t = &report.tensors[i];
            (t.dtype != "f32" && t.sqnr_db.is_finite())
                || compared
                    .iter()
                    .any(|p| p.sqnr_db.get(i).copied().flatten().is_some())
        })
        .collect();
    if shown.is_empty() {
        return draw_unmeasured(area, caption);
    }
    let mut series: Vec<Series> = compared
        .iter()
        .map(|p| Series {
            label: format!("{} plain", p.precision),
            legend: plain_colour(p.precision),
            bars: shown
                .iter()
                .map(|&i| {
                    p.sqnr_db
                        .get(i)
                        .copied()
                        .flatten()
                        .map(|v| (v, plain_colour(p.precision)))
                })
                .collect(),
        })
        .collect();
    series.push(Series {
        label: "this image".into(),
        legend: RGBColor(85, 87, 83),
        bars: shown
            .iter()
            .map(|&i| {
                let t = &report.tensors[i];
                (t.sqnr_db.is_finite()).then(|| (t.sqnr_db, dtype_colour(t.dtype)))
            })
            .collect(),
    });
    let names: Vec<String> = shown
        .iter()
        .map(|&i| short_name(&report.tensors[i].name))
        .collect();
    draw_grouped(area, caption, &names, &series, false)?;
    // The image's bars take each tensor's dtype colour: name them in a second legend.
    let style = TextStyle::from((FONT, 13)).color(&BLACK);
    drawn(area.draw_text("this image:", &style, (90, 31)))?;
    for (k, dtype) in DTYPES.iter().enumerate() {
        let x = 200 + 80 * k as i32;
        drawn(area.draw(&Rectangle::new(
            [(x, 32), (x + 14, 42)],
            dtype_colour(dtype).filled(),
        )))?;
        drawn(area.draw_text(dtype, &style, (x + 18, 31)))?;
    }
    Ok(())
}

/// Each layer's relative RMS output error against the f32 model on the calibration text, for
/// this image and for every precision quantized plainly, on a logarithmic axis.
fn draw_layer_errors(area: &DrawingArea<BitMapBackend<'_>, Shift>, report: &Report) -> Result<()> {
    let caption = "output error per layer (relative RMS against f32, calibration text)";
    let errors = &report.layer_errors;
    if errors.is_empty() {
        return draw_unmeasured(area, caption);
    }
    let layers = |values: &[f64], colour: RGBColor| -> Vec<Option<(f64, RGBColor)>> {
        (0..errors.len())
            .map(|l| values.get(l).map(|&e| (e, colour)))
            .collect()
    };
    let mut series: Vec<Series> = report
        .precisions
        .iter()
        .filter(|p| !p.layer_errors.is_empty())
        .map(|p| Series {
            label: format!("{} plain", p.precision),
            legend: plain_colour(p.precision),
            bars: layers(&p.layer_errors, plain_colour(p.precision)),
        })
        .collect();
    series.push(Series {
        label: "this image".into(),
        legend: IMAGE_COLOUR,
        bars: layers(errors, IMAGE_COLOUR),
    });
    let labels: Vec<String> = (0..errors.len()).map(|l| format!("layer {l}")).collect();
    draw_grouped(area, caption, &labels, &series, true)
}

/// The calibration bits per token of each precision, as the change against f32 in percent,
/// each bar labelled with its bits.
fn draw_bits(area: &DrawingArea<BitMapBackend<'_>, Shift>, report: &Report) -> Result<()> {
    let caption = "calibration bits per token: change against f32 (%), bits on each bar";
    let mut bits = report.bits_per_token.clone();
    let Some(&(_, reference)) = bits.first() else {
        return draw_unmeasured(area, caption);
    };
    // Each precision quantized plainly (f16 only if the report does not have it: the same).
    let has_f16 = bits.iter().any(|(label, _)| label == "f16");
    for p in &report.precisions {
        if let (Some(b), false) = (p.bits_per_token, p.precision == Target::F16 && has_f16) {
            bits.push((format!("{} plain", p.precision), b));
        }
    }
    let change: Vec<f64> = bits
        .iter()
        .map(|(_, b)| 100.0 * (b - reference) / reference)
        .collect();
    let high = change.iter().copied().fold(0.0f64, f64::max);
    let low = change.iter().copied().fold(0.0f64, f64::min);
    let pad = (high - low).max(1e-3) * 0.2;
    let mut chart = drawn(
        ChartBuilder::on(area)
            .caption(caption, (FONT, 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(segments(bits.len()), (low - pad)..(high + pad)),
    )?;
    let labels: Vec<String> = bits.iter().map(|(label, _)| label.clone()).collect();
    drawn(
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bits.len())
            .x_label_formatter(&|at| segment_label(&labels, at))
            .y_label_formatter(&|y| format!("{y:+.3}"))
            .label_style((FONT, 13))
            .draw(),
    )?;
    let colour = |label: &str| match (
        label.split(' ').next().unwrap_or(label),
        label.ends_with(" plain"),
    ) {
        ("f32", _) => RGBColor(85, 87, 83),
        (precision, true) => precision.parse().map_or(BLACK, plain_colour),
        (dtype, false) => dtype_colour(dtype.split('-').next().unwrap_or(dtype)),
    };
    drawn(
        chart.draw_series(
            bits.iter()
                .zip(&change)
                .enumerate()
                .map(|(i, ((label, _), &c))| bar(i, c, colour(label))),
        ),
    )?;
    let style = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Center, VPos::Bottom));
    drawn(
        chart.draw_series(bits.iter().zip(&change).enumerate().map(|(i, ((_, b), &c))| {
            Text::new(
                format!("{b:.5}"),
                (SegmentValue::CenterOf(i), c.max(0.0) + pad * 0.3),
                style.clone(),
            )
        })),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use txl_host_gpu::quantize::{Method, TensorReport};

    fn tensor(name: &str, dtype: &'static str, sqnr_db: f64) -> TensorReport {
        TensorReport {
            name: name.to_string(),
            dtype,
            shape: vec![16, 16],
            sqnr_db,
            solo_delta_bits: None,
            solo_delta_bits_int8: None,
            kept_for: None,
            method: None,
            rounding: None,
        }
    }

    /// The RGB pixels of a PNG file, with its size.
    fn decode(bytes: &[u8]) -> ((u32, u32), Vec<[u8; 3]>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buffer).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let pixels = buffer[..info.buffer_size()]
            .chunks_exact(3)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        ((info.width, info.height), pixels)
    }

    #[test]
    fn the_picture_shows_each_dtype_and_text() {
        let report = Report {
            target: Target::Int4,
            method: Method::Round,
            smoothing_alpha: None,
            smoothing_search: Vec::new(),
            tensors: vec![
                tensor("word_emb.emb_layers.0.weight", "int8", 38.0),
                tensor("layers.0.dec_attn.qkv_net.weight", "int4", 21.0),
                tensor("layers.0.dec_attn.o_net.weight", "f16", 70.0),
                tensor("layers.0.layer_norm.bias", "f32", f64::INFINITY),
            ],
            layer_errors: vec![0.01, 0.03],
            bits_per_token: vec![
                ("f32".into(), 2.0),
                ("f16".into(), 2.0001),
                ("int4".into(), 2.05),
                ("int4 + int8 memory".into(), 2.06),
            ],
            calibration_tokens: 100,
            statistics_backend: Some("cpu32"),
            image_bytes: 1000,
            budget_bytes: Some(1200),
            smallest_image_bytes: Some(900),
            parameters: 500,
            precisions: [
                (Target::F16, 70.0, 1e-4),
                (Target::Int8, 38.0, 1e-2),
                (Target::Int4, 20.0, 5e-2),
            ]
            .into_iter()
            .chain([(Target::Int4All, 19.0, 8e-2)])
            .map(|(precision, sqnr, error)| PrecisionReport {
                precision,
                image_bytes: 800,
                sqnr_db: vec![Some(sqnr), Some(sqnr), Some(sqnr), None],
                layer_errors: vec![error, 2.0 * error],
                bits_per_token: Some(2.0 + error),
            })
            .collect(),
        };
        let (size, pixels) = decode(&png(&report).unwrap());
        assert_eq!(size, SIZE);
        let count = |colour: RGBColor| {
            pixels
                .iter()
                .filter(|p| **p == [colour.0, colour.1, colour.2])
                .count()
        };
        // Each dtype's bar (and legend), each precision's plain bars, and the text's black.
        for dtype in DTYPES {
            assert!(count(dtype_colour(dtype)) > 500, "no {dtype} bar");
        }
        for precision in [Target::F16, Target::Int8, Target::Int4, Target::Int4All] {
            assert!(count(plain_colour(precision)) > 300, "no plain {precision} bar");
        }
        assert!(count(IMAGE_COLOUR) > 300, "no layer error bar for the image");
        assert!(count(RGBColor(0, 0, 0)) > 500, "no text");
        let distinct: std::collections::HashSet<[u8; 3]> = pixels.iter().copied().collect();
        assert!(distinct.len() > 20, "{} colours", distinct.len());

        // One bar a panel.
        let single = Report {
            tensors: report.tensors[..1].to_vec(),
            layer_errors: vec![0.02],
            bits_per_token: report.bits_per_token[..1].to_vec(),
            precisions: Vec::new(),
            ..report.clone()
        };
        let (size, pixels) = decode(&png(&single).unwrap());
        assert_eq!(size, SIZE);
        assert!(pixels.contains(&[78, 154, 6]), "no int8 bar");

        // Without calibration text the measured panels say so, and the picture is still drawn.
        let unmeasured = Report {
            layer_errors: Vec::new(),
            bits_per_token: Vec::new(),
            precisions: report
                .precisions
                .iter()
                .map(|p| PrecisionReport {
                    layer_errors: Vec::new(),
                    bits_per_token: None,
                    ..p.clone()
                })
                .collect(),
            ..report
        };
        let (size, pixels) = decode(&png(&unmeasured).unwrap());
        assert_eq!(size, SIZE);
        assert!(pixels.contains(&{
            let RGBColor(r, g, b) = plain_colour(Target::Int8);
            [r, g, b]
        }));
    }
}
