//! The quantizer's report as a picture (`--report-png`), laid out to read at a glance however
//! many layers the model has: a grid of layers (rows) by matrix kinds (columns), each cell
//! coloured by the matrix's weight SQNR in this image and holding its dtype and SQNR, beside
//! each layer's output error (this image, and every precision rounded plainly); the matrices
//! outside the layers in rows of their own; the colour scales; the worst matrices named in a
//! list; and the calibration bits per token of each precision as bars. Every piece of text is
//! placed by [`layout`] from its measured size, one row or column per label, so that no two
//! overlap (the tests check the boxes). Drawn from the [`Report`] alone (the JSON holds the
//! same numbers), with the font in `tools/assets/`, so no system font is needed.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::{FontDesc, FontFamily, FontStyle};
use txl_host_gpu::quantize::{Report, Target};

use crate::cli::picture::{font, png_bytes, FONT};

/// The margin around the picture and between its parts, in pixels.
const MARGIN: i32 = 20;
/// The height of one grid row, and of one bar of the bits per token.
const ROW: i32 = 22;
/// The narrowest grid column.
const MIN_COLUMN: i32 = 84;
/// Text sizes: the title, the headings, the grid's cells and labels.
const TITLE: u32 = 22;
const HEADING: u32 = 15;
const SMALL: u32 = 12;
/// How many matrices the list of the worst names.
const WORST: usize = 10;
/// The width of a colour scale's bar.
const SCALE_WIDTH: i32 = 300;

/// The kinds of a layer's matrices, in column order: (short name, the name's suffix).
const KINDS: [(&str, &str); 5] = [
    ("qkv", "dec_attn.qkv_net.weight"),
    ("r", "dec_attn.r_net.weight"),
    ("o", "dec_attn.o_net.weight"),
    ("ff1", "pos_ff.CoreNet.0.weight"),
    ("ff2", "pos_ff.CoreNet.3.weight"),
];

/// The matrices outside the layers: (short name's prefix, the name's prefix); each has an index
/// after the prefix, but the cluster weight.
const OUTSIDE: [(&str, &str); 5] = [
    ("emb", "word_emb.emb_layers."),
    ("emb_proj", "word_emb.emb_projs."),
    ("out", "crit.out_layers."),
    ("out_proj", "crit.out_projs."),
    ("cluster", "crit.cluster_weight"),
];

const GREY: RGBColor = RGBColor(136, 138, 133);
const LIGHT: RGBColor = RGBColor(238, 238, 236);

/// A plotters error as an error of this crate.
fn drawn<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T> {
    result.map_err(|e| anyhow!("drawing the report: {e}"))
}

/// Where a matrix of the report sits: a layer's column, or a row of its own outside the layers.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    Layer(usize, usize),
    Outside(String),
}

/// The place of tensor `name`, if it is a matrix.
fn place(name: &str) -> Option<Place> {
    if let Some(rest) = name.strip_prefix("layers.") {
        let (layer, suffix) = rest.split_once('.')?;
        let kind = KINDS.iter().position(|(_, s)| *s == suffix)?;
        return Some(Place::Layer(layer.parse().ok()?, kind));
    }
    OUTSIDE.iter().find_map(|(short, prefix)| {
        let rest = name.strip_prefix(prefix)?;
        let index = rest.strip_suffix(".weight").unwrap_or(rest);
        match index {
            "" => Some(Place::Outside(short.to_string())),
            index if index.bytes().all(|b| b.is_ascii_digit()) => {
                Some(Place::Outside(format!("{short}.{index}")))
            }
            _ => None,
        }
    })
}

/// A tensor's name, short: `layers.3.dec_attn.qkv_net.weight` is `3.qkv`,
/// `crit.out_layers.0.weight` is `out.0`; any other name stays as it is.
fn short_name(name: &str) -> String {
    match place(name) {
        Some(Place::Layer(layer, kind)) => format!("{layer}.{}", KINDS[kind].0),
        Some(Place::Outside(short)) => short,
        None => name.to_string(),
    }
}

/// A rectangle: left, top, width, height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Box2 {
    pub x: i32,
    pub y: i32,
    pub w: i32,
    pub h: i32,
}

#[cfg(test)]
impl Box2 {
    /// Whether the two share a pixel.
    pub fn intersects(&self, other: &Box2) -> bool {
        self.x < other.x + other.w
            && other.x < self.x + self.w
            && self.y < other.y + other.h
            && other.y < self.y + self.h
    }

    /// Whether `other` lies within this one.
    pub fn contains(&self, other: &Box2) -> bool {
        other.x >= self.x
            && other.y >= self.y
            && other.x + other.w <= self.x + self.w
            && other.y + other.h <= self.y + self.h
    }
}

/// A piece of text at its place: the box is its measured size.
#[derive(Clone, Debug)]
pub struct Label {
    pub text: String,
    pub size: u32,
    pub at: Box2,
    pub colour: RGBColor,
}

/// What the picture holds, placed: filled rectangles, colour scales and text.
#[derive(Clone, Debug)]
pub struct Layout {
    pub width: i32,
    pub height: i32,
    pub cells: Vec<(Box2, RGBColor)>,
    /// Gradient bars: the box and the scale drawn along it, left (low) to right (high).
    pub scales: Vec<(Box2, Scale)>,
    pub labels: Vec<Label>,
}

/// How a [`Scale`] places a value between its ends.
#[derive(Clone, Debug)]
enum Mapping {
    /// By the value's logarithm.
    Log,
    /// By the value's rank among these (sorted): the worst matrices stand out even where one
    /// precision's values are far from another's (int4 around 16 dB, int8 around 40).
    Rank(Vec<f64>),
}

/// A colour scale over values from `low` to `high`; `good_high` says which end is good (teal)
/// and which is bad (red).
#[derive(Clone, Debug)]
pub struct Scale {
    low: f64,
    high: f64,
    mapping: Mapping,
    good_high: bool,
}

impl Scale {
    /// A scale over the finite (and, for [`Mapping::Log`], positive) `values`, `rank` placing
    /// them by rank, else by logarithm; `None` if there are none.
    fn over(values: impl Iterator<Item = f64>, rank: bool, good_high: bool) -> Option<Scale> {
        let mut kept: Vec<f64> = values.filter(|v| v.is_finite() && (rank || *v > 0.0)).collect();
        kept.sort_by(f64::total_cmp);
        let (&low, &high) = (kept.first()?, kept.last()?);
        let mapping = if rank { Mapping::Rank(kept) } else { Mapping::Log };
        Some(Scale {
            low,
            high,
            mapping,
            good_high,
        })
    }

    /// The middle value: the median of a rank scale, the geometric mean of the ends of a
    /// logarithmic one.
    fn middle(&self) -> f64 {
        match &self.mapping {
            Mapping::Rank(sorted) => sorted[sorted.len() / 2],
            Mapping::Log => (self.low * self.high).sqrt(),
        }
    }

    /// Where `value` lies, from 0 (low) to 1 (high).
    fn position(&self, value: f64) -> f64 {
        match &self.mapping {
            Mapping::Rank(sorted) => {
                if sorted.len() < 2 {
                    return 0.5;
                }
                // ties share the middle of their ranks
                let below = sorted.partition_point(|&x| x < value);
                let up_to = sorted.partition_point(|&x| x <= value);
                let rank = (below + up_to) as f64 / 2.0 - 0.5;
                (rank / (sorted.len() - 1) as f64).clamp(0.0, 1.0)
            }
            Mapping::Log => {
                let (low, high) = (self.low.ln(), self.high.ln());
                if high - low <= 0.0 {
                    return 0.5;
                }
                ((value.max(f64::MIN_POSITIVE).ln() - low) / (high - low)).clamp(0.0, 1.0)
            }
        }
    }

    /// The colour at fraction `t` of the bar, from bad to good.
    fn colour_at(&self, t: f64) -> RGBColor {
        let t = if self.good_high { t } else { 1.0 - t };
        // red, orange, yellow, light green, teal
        const STOPS: [(u8, u8, u8); 5] = [
            (204, 0, 0),
            (245, 121, 0),
            (237, 212, 0),
            (138, 226, 52),
            (6, 152, 154),
        ];
        let scaled = t * (STOPS.len() - 1) as f64;
        let i = (scaled.floor() as usize).min(STOPS.len() - 2);
        let f = scaled - i as f64;
        let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
        let (a, b) = (STOPS[i], STOPS[i + 1]);
        RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
    }

    /// The colour of `value`.
    fn colour(&self, value: f64) -> RGBColor {
        self.colour_at(self.position(value))
    }
}

/// Black or white, whichever reads on `fill`.
fn ink_on(fill: RGBColor) -> RGBColor {
    let RGBColor(r, g, b) = fill;
    let luminance = 0.299 * r as f64 + 0.587 * g as f64 + 0.114 * b as f64;
    if luminance > 110.0 {
        BLACK
    } else {
        WHITE
    }
}

/// Measures text: its width and height in pixels at a size.
type Measure<'m> = &'m dyn Fn(&str, u32) -> Result<(i32, i32)>;

/// Places text and keeps the boxes: `measure` gives a text's width and height at a size.
struct Placer<'m> {
    measure: Measure<'m>,
    labels: Vec<Label>,
}

impl Placer<'_> {
    fn size(&self, text: &str, size: u32) -> Result<(i32, i32)> {
        (self.measure)(text, size)
    }

    /// `text` with its top left at `(x, y)`; returns its box.
    fn text(&mut self, text: &str, size: u32, (x, y): (i32, i32), colour: RGBColor) -> Result<Box2> {
        let (w, h) = self.size(text, size)?;
        let at = Box2 { x, y, w, h };
        self.labels.push(Label {
            text: text.to_string(),
            size,
            at,
            colour,
        });
        Ok(at)
    }

    /// `text` centred in `cell`.
    fn centred(&mut self, text: &str, size: u32, cell: Box2, colour: RGBColor) -> Result<Box2> {
        let (w, h) = self.size(text, size)?;
        self.text(
            text,
            size,
            (cell.x + (cell.w - w) / 2, cell.y + (cell.h - h) / 2),
            colour,
        )
    }

    /// `text` right-aligned to `right`, centred on the row `cell` gives.
    fn right(&mut self, text: &str, size: u32, right: i32, row: Box2, colour: RGBColor) -> Result<Box2> {
        let (w, h) = self.size(text, size)?;
        self.text(text, size, (right - w, row.y + (row.h - h) / 2), colour)
    }
}

/// A layer-error column: its heading and each layer's error.
struct ErrorColumn<'r> {
    heading: String,
    errors: &'r [f64],
}

/// The picture's layout for `report`, its text measured by `measure` (width and height in
/// pixels of a text at a size).
pub fn layout(report: &Report, measure: Measure<'_>) -> Result<Layout> {
    let mut p = Placer {
        measure,
        labels: Vec::new(),
    };
    let mut cells = Vec::new();
    let mut scales = Vec::new();

    let mut title = format!(
        "txl quantize: {}, {} method, {} bytes",
        report.target, report.method, report.image_bytes
    );
    if let Some(budget) = report.budget_bytes {
        title += &format!(" (budget {budget})");
    }
    let title_box = p.text(&title, TITLE, (MARGIN, MARGIN), BLACK)?;
    let mut y = title_box.y + title_box.h + MARGIN;

    // The matrices, where they sit.
    let matrices: Vec<(usize, Place)> = report
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.dtype != "f32")
        .filter_map(|(i, t)| Some((i, place(&t.name)?)))
        .collect();
    let layers = matrices
        .iter()
        .filter_map(|(_, p)| match p {
            Place::Layer(l, _) => Some(l + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
        .max(report.layer_errors.len());
    let kinds: Vec<usize> = (0..KINDS.len())
        .filter(|&k| {
            matrices
                .iter()
                .any(|(_, p)| matches!(p, Place::Layer(_, kk) if *kk == k))
        })
        .collect();
    let outside: Vec<(usize, String)> = matrices
        .iter()
        .filter_map(|(i, p)| match p {
            Place::Outside(name) => Some((*i, name.clone())),
            _ => None,
        })
        .collect();
    let sqnr = Scale::over(
        matrices.iter().map(|(i, _)| report.tensors[*i].sqnr_db),
        true,
        true,
    );
    let mut error_columns = vec![ErrorColumn {
        heading: "this image".into(),
        errors: &report.layer_errors,
    }];
    error_columns.extend(
        report
            .precisions
            .iter()
            .filter(|p| !p.layer_errors.is_empty())
            .map(|p| ErrorColumn {
                heading: format!("{} plain", p.precision),
                errors: &p.layer_errors,
            }),
    );
    error_columns.retain(|c| !c.errors.is_empty());
    let error_scale = Scale::over(
        error_columns.iter().flat_map(|c| c.errors.iter().copied()),
        false,
        false,
    );

    // Row labels, and the columns' widths from their headings and widest cells.
    let row_labels: Vec<String> = (0..layers)
        .map(|l| format!("layer {l}"))
        .chain(outside.iter().map(|(_, name)| name.clone()))
        .collect();
    let mut label_width = 0;
    for label in &row_labels {
        label_width = label_width.max(p.size(label, SMALL)?.0);
    }
    let column_width = |heading: &str, widest: &str| -> Result<i32> {
        let (h, _) = p.size(heading, SMALL)?;
        let (c, _) = p.size(widest, SMALL)?;
        Ok(MIN_COLUMN.max(h.max(c) + 10))
    };
    let mut matrix_columns = Vec::new();
    for &k in &kinds {
        matrix_columns.push(column_width(KINDS[k].0, "int4 -99.9")?);
    }
    if matrix_columns.is_empty() && !outside.is_empty() {
        // only matrices outside the layers: one column for them
        matrix_columns.push(column_width("", "int4 -99.9")?);
    }
    let mut error_widths = Vec::new();
    for c in &error_columns {
        error_widths.push(column_width(&c.heading, "99.99%")?);
    }
    let grid_x = MARGIN + label_width + 10;
    let matrix_x: Vec<i32> = matrix_columns
        .iter()
        .scan(grid_x, |x, w| {
            let at = *x;
            *x += w;
            Some(at)
        })
        .collect();
    let matrices_right = grid_x + matrix_columns.iter().sum::<i32>();
    let errors_left = matrices_right + MARGIN;
    let error_x: Vec<i32> = error_widths
        .iter()
        .scan(errors_left, |x, w| {
            let at = *x;
            *x += w;
            Some(at)
        })
        .collect();
    let errors_right = errors_left + error_widths.iter().sum::<i32>();
    let grid_right = if error_columns.is_empty() {
        matrices_right
    } else {
        errors_right
    };

    // Headings of the two halves, then of each column.
    let heading = p.text("weight SQNR (dB) per matrix", HEADING, (grid_x, y), BLACK)?;
    let mut heading_bottom = heading.y + heading.h;
    if error_columns.is_empty() {
        let note = "layer output error: not measured (no calibration text)";
        let at = p.text(note, SMALL, (errors_left, y + 2), GREY)?;
        heading_bottom = heading_bottom.max(at.y + at.h);
    } else {
        // over the error columns, on a line of its own if the two headings would meet
        let text = "layer output error (relative RMS against f32)";
        let at_y = if heading.x + heading.w + 20 > errors_left {
            heading_bottom + 4
        } else {
            y
        };
        let at = p.text(text, HEADING, (errors_left, at_y), BLACK)?;
        heading_bottom = heading_bottom.max(at.y + at.h);
    }
    y = heading_bottom + 8;
    let header_row = Box2 {
        x: grid_x,
        y,
        w: grid_right - grid_x,
        h: ROW,
    };
    for (&k, (&x, &w)) in kinds.iter().zip(matrix_x.iter().zip(&matrix_columns)) {
        p.centred(KINDS[k].0, SMALL, Box2 { x, w, ..header_row }, BLACK)?;
    }
    for (c, (&x, &w)) in error_columns.iter().zip(error_x.iter().zip(&error_widths)) {
        p.centred(&c.heading, SMALL, Box2 { x, w, ..header_row }, BLACK)?;
    }
    y += ROW;

    // The grid: a row per layer, then a row per matrix outside the layers.
    let cell =
        |p: &mut Placer<'_>, cells: &mut Vec<(Box2, RGBColor)>, at: Box2, fill: RGBColor, text: &str| {
            let inner = Box2 {
                x: at.x + 1,
                y: at.y + 1,
                w: at.w - 2,
                h: at.h - 2,
            };
            cells.push((inner, fill));
            p.centred(text, SMALL, inner, ink_on(fill)).map(drop)
        };
    let matrix_text = |i: usize| {
        let t = &report.tensors[i];
        let fill = sqnr.as_ref().map_or(LIGHT, |s| {
            if t.sqnr_db.is_finite() {
                s.colour(t.sqnr_db)
            } else {
                LIGHT
            }
        });
        (fill, format!("{} {:.1}", t.dtype, t.sqnr_db))
    };
    for (row, label) in row_labels.iter().enumerate() {
        let row_box = Box2 {
            x: MARGIN,
            y,
            w: grid_right - MARGIN,
            h: ROW,
        };
        p.right(label, SMALL, grid_x - 10, row_box, BLACK)?;
        if row < layers {
            for (col, &k) in kinds.iter().enumerate() {
                let Some((i, _)) = matrices.iter().find(|(_, p)| *p == Place::Layer(row, k)) else {
                    continue;
                };
                let (fill, text) = matrix_text(*i);
                let at = Box2 {
                    x: matrix_x[col],
                    y,
                    w: matrix_columns[col],
                    h: ROW,
                };
                cell(&mut p, &mut cells, at, fill, &text)?;
            }
            for (c, (&x, &w)) in error_columns.iter().zip(error_x.iter().zip(&error_widths)) {
                let Some(&error) = c.errors.get(row) else {
                    continue;
                };
                let fill = error_scale.as_ref().map_or(LIGHT, |s| s.colour(error));
                let at = Box2 { x, y, w, h: ROW };
                cell(&mut p, &mut cells, at, fill, &format!("{:.2}%", 100.0 * error))?;
            }
        } else {
            let (i, _) = &outside[row - layers];
            let (fill, text) = matrix_text(*i);
            let at = Box2 {
                x: matrix_x[0],
                y,
                w: matrix_columns[0],
                h: ROW,
            };
            cell(&mut p, &mut cells, at, fill, &text)?;
        }
        y += ROW;
    }
    if row_labels.is_empty() {
        p.text("no matrices stored", SMALL, (grid_x, y), GREY)?;
        y += ROW;
    }
    y += MARGIN;

    // The colour scales, one a line: a caption, the bar, its ends.
    let captions = ["weight SQNR, by rank", "layer output error"];
    let sqnr_ends = sqnr.as_ref().map(|s| {
        [
            format!("{:.1} dB", s.low),
            format!("{:.1} dB", s.high),
            format!("(median {:.1} dB)", s.middle()),
        ]
    });
    let error_ends = error_scale.as_ref().map(|s| {
        [
            format!("{:.2}%", 100.0 * s.low),
            format!("{:.2}%", 100.0 * s.high),
            format!("(logarithmic, middle {:.2}%)", 100.0 * s.middle()),
        ]
    });
    let (mut caption_width, mut low_width) = (0, 0);
    for caption in captions {
        caption_width = caption_width.max(p.size(caption, SMALL)?.0);
    }
    for ends in sqnr_ends.iter().chain(&error_ends) {
        low_width = low_width.max(p.size(&ends[0], SMALL)?.0);
    }
    let scale_line = |p: &mut Placer<'_>,
                      scales: &mut Vec<(Box2, Scale)>,
                      y: i32,
                      caption: &str,
                      scale: Scale,
                      ends: [String; 3]|
     -> Result<i32> {
        let caption = p.text(caption, SMALL, (MARGIN, y), BLACK)?;
        let low = p.right(
            &ends[0],
            SMALL,
            MARGIN + caption_width + 10 + low_width,
            Box2 {
                x: 0,
                y,
                w: 0,
                h: p.size(&ends[0], SMALL)?.1,
            },
            BLACK,
        )?;
        let bar = Box2 {
            x: MARGIN + caption_width + low_width + 18,
            y: y + 2,
            w: SCALE_WIDTH,
            h: ROW - 6,
        };
        scales.push((bar, scale));
        let high = p.text(&ends[1], SMALL, (bar.x + bar.w + 8, y), BLACK)?;
        let middle = p.text(&ends[2], SMALL, (high.x + high.w + 16, y), GREY)?;
        Ok(caption.h.max(low.h).max(high.h).max(middle.h).max(bar.h) + 8)
    };
    if let (Some(s), Some(ends)) = (sqnr.clone(), sqnr_ends) {
        y += scale_line(&mut p, &mut scales, y, captions[0], s, ends)?;
    }
    if let (Some(s), Some(ends)) = (error_scale.clone(), error_ends) {
        y += scale_line(&mut p, &mut scales, y, captions[1], s, ends)?;
    }
    y += MARGIN;

    // The bits per token of each precision, a bar each.
    let bits_bottom = draw_bits_rows(&mut p, &mut cells, report, y)?;

    // The worst matrices, in a column right of everything else (the title aside).
    let boxes = |p: &Placer<'_>, cells: &[(Box2, RGBColor)], scales: &[(Box2, Scale)]| -> Vec<Box2> {
        p.labels
            .iter()
            .skip(1)
            .map(|l| l.at)
            .chain(cells.iter().map(|(b, _)| *b))
            .chain(scales.iter().map(|(b, _)| *b))
            .collect()
    };
    let right = boxes(&p, &cells, &scales)
        .iter()
        .map(|b| b.x + b.w)
        .max()
        .unwrap_or(MARGIN);
    let list_bottom = worst_list(
        &mut p,
        report,
        &matrices,
        (right + 2 * MARGIN, title_box.y + title_box.h + MARGIN),
    )?;

    let mut width = 0;
    let mut height = bits_bottom.max(list_bottom);
    for b in boxes(&p, &cells, &scales).into_iter().chain([title_box]) {
        width = width.max(b.x + b.w + MARGIN);
        height = height.max(b.y + b.h + MARGIN);
    }
    Ok(Layout {
        width,
        height,
        cells,
        scales,
        labels: p.labels,
    })
}

/// The list of the worst matrices at `(x, y)`: by their measured cost alone on the calibration
/// text when the report has it (`--auto-keep-f16`, `--auto-keep-int8`, `--budget-bytes`), else
/// by the lowest weight SQNR. Returns the list's bottom.
fn worst_list(
    p: &mut Placer<'_>,
    report: &Report,
    matrices: &[(usize, Place)],
    (x, y): (i32, i32),
) -> Result<i32> {
    let costed = matrices
        .iter()
        .any(|(i, _)| report.tensors[*i].solo_delta_bits.is_some());
    let mut order: Vec<usize> = matrices
        .iter()
        .map(|(i, _)| *i)
        .filter(|&i| report.tensors[i].sqnr_db.is_finite())
        .collect();
    if costed {
        order.retain(|&i| report.tensors[i].solo_delta_bits.is_some());
        let cost = |i: usize| report.tensors[i].solo_delta_bits.unwrap_or(0.0);
        order.sort_by(|&a, &b| cost(b).total_cmp(&cost(a)));
    } else {
        let sqnr = |i: usize| report.tensors[i].sqnr_db;
        order.sort_by(|&a, &b| sqnr(a).total_cmp(&sqnr(b)));
    }
    let heading = if costed {
        "costliest matrices alone"
    } else {
        "lowest weight SQNR"
    };
    let at = p.text(heading, HEADING, (x, y), BLACK)?;
    let mut y = at.y + at.h + 8;
    let caption = if costed {
        "bits/token added, calibration text"
    } else {
        "this image, dB"
    };
    let at = p.text(caption, SMALL, (x, y), GREY)?;
    y = at.y + at.h + 6;
    let mut longest = 0;
    for &i in order.iter().take(WORST) {
        longest = longest.max(short_name(&report.tensors[i].name).len());
    }
    for (rank, &i) in order.iter().take(WORST).enumerate() {
        let t = &report.tensors[i];
        let value = match t.solo_delta_bits.filter(|_| costed) {
            Some(bits) => format!("{bits:+.5}"),
            None => format!("{:.1}", t.sqnr_db),
        };
        let line = format!(
            "{:>2}. {:<longest$}  {:<4} {value}",
            rank + 1,
            short_name(&t.name),
            t.dtype
        );
        let at = p.text(&line, SMALL, (x, y), BLACK)?;
        y = at.y + at.h.max(ROW - 6) + 4;
    }
    if order.is_empty() {
        let at = p.text("none measured", SMALL, (x, y), GREY)?;
        y = at.y + at.h;
    }
    Ok(y)
}

/// The calibration bits per token of this image and of each precision rounded plainly: a row
/// each, its label, a bar from f32's, and its bits with the change. Returns the bottom.
fn draw_bits_rows(
    p: &mut Placer<'_>,
    cells: &mut Vec<(Box2, RGBColor)>,
    report: &Report,
    y: i32,
) -> Result<i32> {
    let heading = p.text(
        "calibration bits per token: change against f32",
        HEADING,
        (MARGIN, y),
        BLACK,
    )?;
    let mut y = heading.y + heading.h + 8;
    let mut bits = report.bits_per_token.clone();
    let Some(&(_, reference)) = bits.first() else {
        let at = p.text(
            "not measured: give calibration text (--calib-bytes, --calib-tokens or --calib-text)",
            SMALL,
            (MARGIN, y),
            GREY,
        )?;
        return Ok(at.y + at.h);
    };
    // each precision rounded plainly (f16 only if the report does not have it: the same)
    let has_f16 = bits.iter().any(|(label, _)| label == "f16");
    for pr in &report.precisions {
        if let (Some(b), false) = (pr.bits_per_token, pr.precision == Target::F16 && has_f16) {
            bits.push((format!("{} plain", pr.precision), b));
        }
    }
    let change: Vec<f64> = bits
        .iter()
        .map(|(_, b)| 100.0 * (b - reference) / reference)
        .collect();
    let largest = change.iter().fold(0.0f64, |m, c| m.max(c.abs())).max(1e-9);
    let mut label_width = 0;
    for (label, _) in &bits {
        label_width = label_width.max(p.size(label, SMALL)?.0);
    }
    let has_negative = change.iter().any(|&c| c < 0.0);
    let bar_area = 360;
    let left = MARGIN + label_width + 10;
    let zero = if has_negative { left + bar_area / 2 } else { left };
    let half = if has_negative { bar_area / 2 } else { bar_area };
    let text_x = left + bar_area + 10;
    for ((label, b), &c) in bits.iter().zip(&change) {
        let row = Box2 {
            x: MARGIN,
            y,
            w: 0,
            h: ROW,
        };
        p.right(label, SMALL, left - 10, row, BLACK)?;
        let length = ((c.abs() / largest) * half as f64).round() as i32;
        let (x, w) = if c < 0.0 {
            (zero - length, length)
        } else {
            (zero, length)
        };
        let fill = match label.split(' ').next() {
            Some("f32") => GREY,
            _ if label.ends_with(" plain") => RGBColor(173, 127, 168),
            _ => RGBColor(92, 53, 102),
        };
        cells.push((
            Box2 {
                x,
                y: y + 3,
                w: w.max(1),
                h: ROW - 6,
            },
            fill,
        ));
        p.text(
            &format!("{b:.5} ({c:+.3}%)"),
            SMALL,
            (text_x, y + (ROW - p.size("0", SMALL)?.1) / 2),
            BLACK,
        )?;
        y += ROW;
    }
    // the f32 line
    cells.push((
        Box2 {
            x: zero,
            y: heading.y + heading.h + 4,
            w: 1,
            h: y - heading.y - heading.h - 4,
        },
        BLACK,
    ));
    Ok(y)
}

/// A text's width and height in pixels, in the report's font at `size`.
fn measure(text: &str, size: u32) -> Result<(i32, i32)> {
    font()?;
    let font = FontDesc::new(FontFamily::Name(FONT), size as f64, FontStyle::Normal);
    let (w, h) = drawn(font.box_size(text))?;
    // the box of the glyphs' outlines; leave the line its full height
    Ok((w as i32 + 1, (h as i32).max(size as i32)))
}

/// The report drawn as a PNG file's bytes, its size from [`layout`].
pub fn png(report: &Report) -> Result<Vec<u8>> {
    font()?;
    let layout = layout(report, &measure)?;
    let (width, height) = (layout.width as u32, layout.height as u32);
    // (height, width, RGB)
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        drawn(root.fill(&WHITE))?;
        for (at, colour) in &layout.cells {
            drawn(root.draw(&Rectangle::new(
                [(at.x, at.y), (at.x + at.w, at.y + at.h)],
                colour.filled(),
            )))?;
        }
        for (at, scale) in &layout.scales {
            for dx in 0..at.w {
                let colour = scale.colour_at(dx as f64 / (at.w - 1).max(1) as f64);
                drawn(root.draw(&Rectangle::new(
                    [(at.x + dx, at.y), (at.x + dx + 1, at.y + at.h)],
                    colour.filled(),
                )))?;
            }
        }
        for label in &layout.labels {
            let style = TextStyle::from((FONT, label.size)).color(&label.colour);
            drawn(root.draw_text(&label.text, &style, (label.at.x, label.at.y)))?;
        }
        drawn(root.present())?;
    }
    png_bytes(&pixels, width, height)
}

#[cfg(test)]
mod tests {
    use super::*;
    use txl_host_gpu::quantize::{Method, PrecisionReport, TensorReport};

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

    /// The report of an int4 image of a model with `layers` layers (and the vectors of each,
    /// stored in f32), every precision compared, measured on calibration text or not. Layer
    /// 0's ff1 has the lowest SQNR; one qkv is kept in f16.
    fn report(layers: usize, measured: bool) -> Report {
        let mut tensors = vec![tensor("word_emb.emb_layers.0.weight", "int8", 38.0)];
        for l in 0..layers {
            tensors.push(tensor(
                &format!("layers.{l}.dec_attn.r_w_bias"),
                "f32",
                f64::INFINITY,
            ));
            for (k, (_, suffix)) in KINDS.iter().enumerate() {
                let sqnr = 20.0 + ((l * 7 + k * 3) % 11) as f64 * 0.37;
                tensors.push(tensor(&format!("layers.{l}.{suffix}"), "int4", sqnr));
            }
            tensors.push(tensor(
                &format!("layers.{l}.layer_norm.weight"),
                "f32",
                f64::INFINITY,
            ));
        }
        tensors[5].sqnr_db = 17.5; // layers.0 ff1
        if layers > 1 {
            tensors[9] = tensor("layers.1.dec_attn.qkv_net.weight", "f16", 70.0);
        }
        tensors.push(tensor("crit.out_layers.0.bias", "f32", f64::INFINITY));
        tensors.push(tensor("crit.out_projs.0", "int8", 39.5));
        let errors = |scale: f64| -> Vec<f64> {
            match measured {
                true => (0..layers).map(|l| scale * (1.0 + l as f64 * 0.1)).collect(),
                false => Vec::new(),
            }
        };
        let n = tensors.len();
        Report {
            target: Target::Int4,
            method: Method::Compensated,
            smoothing_alpha: None,
            smoothing_search: Vec::new(),
            tensors,
            layer_errors: errors(0.02),
            bits_per_token: match measured {
                true => vec![
                    ("f32".into(), 2.0),
                    ("f16".into(), 2.0001),
                    ("int4".into(), 2.001),
                    ("int4 + int8 memory".into(), 2.0014),
                ],
                false => Vec::new(),
            },
            calibration_tokens: if measured { 100 } else { 0 },
            rounding_choice: None,
            statistics_backend: measured.then_some("cpu32"),
            image_bytes: 1000,
            budget_bytes: None,
            smallest_image_bytes: None,
            parameters: 500,
            precisions: [
                (Target::F16, 70.0, 1e-4),
                (Target::Int8, 38.0, 6e-3),
                (Target::Int4, 20.0, 5e-2),
                (Target::Int4All, 19.0, 8e-2),
            ]
            .into_iter()
            .map(|(precision, sqnr, error)| PrecisionReport {
                precision,
                image_bytes: 800,
                sqnr_db: vec![Some(sqnr); n],
                layer_errors: errors(error),
                bits_per_token: measured.then_some(2.0 + error),
            })
            .collect(),
        }
    }

    /// No two pieces of text share a pixel, none runs over a cell or bar it is not written in,
    /// no two cells overlap, and everything lies within the picture.
    fn check_layout(layout: &Layout, what: &str) {
        let picture = Box2 {
            x: 0,
            y: 0,
            w: layout.width,
            h: layout.height,
        };
        let labels = &layout.labels;
        for (i, a) in labels.iter().enumerate() {
            assert!(
                picture.contains(&a.at),
                "{what}: {:?} outside the picture",
                a.text
            );
            for b in &labels[i + 1..] {
                assert!(
                    !a.at.intersects(&b.at),
                    "{what}: {:?} {:?} overlaps {:?} {:?}",
                    a.text,
                    a.at,
                    b.text,
                    b.at
                );
            }
            for (cell, _) in &layout.cells {
                assert!(
                    !a.at.intersects(cell) || cell.contains(&a.at),
                    "{what}: {:?} {:?} runs over the cell {cell:?}",
                    a.text,
                    a.at
                );
            }
            for (bar, _) in &layout.scales {
                assert!(!a.at.intersects(bar), "{what}: {:?} over a scale", a.text);
            }
        }
        let cells: Vec<Box2> = layout.cells.iter().map(|(b, _)| *b).filter(|b| b.w > 1).collect();
        for (i, a) in cells.iter().enumerate() {
            assert!(picture.contains(a), "{what}: {a:?} outside the picture");
            for b in &cells[i + 1..] {
                assert!(!a.intersects(b), "{what}: cells {a:?} and {b:?} overlap");
            }
        }
    }

    fn text_of(layout: &Layout) -> Vec<&str> {
        layout.labels.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn the_layout_never_overlaps_from_one_layer_to_many() {
        for layers in [1, 4, 24, 64] {
            for measured in [true, false] {
                let what = format!("{layers} layers, measured {measured}");
                let report = report(layers, measured);
                let layout = layout(&report, &measure).unwrap();
                check_layout(&layout, &what);
                let text = text_of(&layout);
                // a row per layer, and one per matrix outside the layers
                for l in 0..layers {
                    assert!(text.contains(&format!("layer {l}").as_str()), "{what}: layer {l}");
                }
                for name in ["emb.0", "out_proj.0", "qkv", "r", "o", "ff1", "ff2"] {
                    assert!(text.contains(&name), "{what}: no {name}");
                }
                // a cell per matrix, and per layer and error column when measured
                let matrices = 2 + 5 * layers;
                let errors = if measured { 5 * layers } else { 0 };
                let bits = if measured { 4 + 3 + 1 } else { 0 };
                assert_eq!(layout.cells.len(), matrices + errors + bits, "{what}");
                assert_eq!(layout.scales.len(), if measured { 2 } else { 1 }, "{what}");
                // the worst first in the list
                let first = text.iter().find(|t| t.starts_with(" 1. ")).unwrap();
                assert!(
                    first.contains("0.ff1") && first.contains("17.5"),
                    "{what}: {first}"
                );
                // the picture grows with the layers, not the text into itself
                assert!(layout.height >= layers as i32 * ROW, "{what}");
            }
        }
    }

    /// With the cost of each matrix alone measured, the list ranks by it.
    #[test]
    fn the_list_ranks_by_measured_cost_when_there_is_one() {
        let mut report = report(4, true);
        for (i, t) in report.tensors.iter_mut().enumerate() {
            if t.dtype == "int4" {
                t.solo_delta_bits = Some(i as f64 * 1e-4);
            }
        }
        let last = report.tensors.iter().rposition(|t| t.dtype == "int4").unwrap();
        let layout = layout(&report, &measure).unwrap();
        check_layout(&layout, "costed");
        let text = text_of(&layout);
        assert!(text.contains(&"costliest matrices alone"));
        let first = text.iter().find(|t| t.starts_with(" 1. ")).unwrap();
        assert!(first.contains(&short_name(&report.tensors[last].name)), "{first}");
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
    fn the_picture_draws_the_layout() {
        for (layers, measured) in [(1, true), (24, true), (4, false)] {
            let report = report(layers, measured);
            let layout = layout(&report, &measure).unwrap();
            let (size, pixels) = decode(&png(&report).unwrap());
            assert_eq!(size, (layout.width as u32, layout.height as u32));
            let count = |RGBColor(r, g, b): RGBColor| pixels.iter().filter(|p| **p == [r, g, b]).count();
            // every cell's fill shows (text covers part of it)
            for (cell, colour) in layout.cells.iter().filter(|(c, _)| c.w > 1) {
                assert!(
                    count(*colour) as i32 >= cell.w * cell.h / 3,
                    "{layers}: {colour:?}"
                );
            }
            // the worst SQNR is red, the best teal, and the scale runs between them
            let sqnr = &layout.scales[0].1;
            assert_eq!(sqnr.colour(17.5), RGBColor(204, 0, 0));
            assert_eq!(sqnr.colour(70.0), RGBColor(6, 152, 154));
            assert!(count(RGBColor(204, 0, 0)) > 100, "{layers}: no red");
            assert!(count(RGBColor(0, 0, 0)) > 300, "{layers}: no text");
        }
    }
}
