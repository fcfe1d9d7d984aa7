//! `txl fit --png`: the model's flash and RAM against the part's, as two bars. Each bar is the
//! part's memory, 100% wide; its segments are what the model and the firmware take (code and
//! image in flash; statics, stack and the arena's parts in RAM), and what is left is grey. A
//! bar that overflows is drawn to the need, past a red line at the part's size. Drawn with the
//! quantizer report's font and crates (`plotters`, `png`).

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::Answer;
use crate::cli::picture::{font, png_bytes, FONT};

/// Width and height in pixels.
pub const SIZE: (u32, u32) = (1000, 320);

fn drawn<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T> {
    result.map_err(|e| anyhow!("drawing the fit: {e}"))
}

const CODE: RGBColor = RGBColor(117, 80, 123);
const IMAGE: RGBColor = RGBColor(52, 101, 164);
const STATICS: RGBColor = RGBColor(117, 80, 123);
const STACK: RGBColor = RGBColor(193, 125, 17);
const MEMORY: RGBColor = RGBColor(78, 154, 6);
const KEYS: RGBColor = RGBColor(245, 121, 0);
const ACTIVATIONS: RGBColor = RGBColor(52, 101, 164);
const SCRATCH: RGBColor = RGBColor(136, 138, 133);
const FREE: RGBColor = RGBColor(230, 230, 230);
const OVER: RGBColor = RGBColor(204, 0, 0);

/// The answer drawn as a PNG file's bytes.
pub fn png(answer: &Answer, model: &str) -> Result<Vec<u8>> {
    font()?;
    let (width, height) = SIZE;
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, SIZE).into_drawing_area();
        drawn(root.fill(&WHITE))?;
        let verdict = if answer.fits { "fits" } else { "does not fit" };
        let title = format!("txl fit: {model} {verdict} {} ({})", answer.part, answer.core);
        drawn(root.draw_text(&title, &(FONT, 22).into_font().color(&BLACK), (20, 12)))?;
        let o = &answer.options;
        let subtitle = format!(
            "tgt_len {} mem_len {} mem_dtype {} position_keys {}, {} weights",
            o.tgt_len, o.mem_len, o.mem_dtype, o.position_keys, answer.weights
        );
        drawn(root.draw_text(&subtitle, &(FONT, 16).into_font().color(&BLACK), (20, 42)))?;

        let flash = [
            ("code", answer.code_bytes, CODE),
            ("image", answer.image_bytes, IMAGE),
        ];
        bar(&root, 80, "flash", answer.flash_bytes, &flash)?;
        let ram = [
            ("statics", answer.static_bytes, STATICS),
            ("stack", answer.stack_bytes, STACK),
            ("memory", answer.arena_memory_bytes, MEMORY),
            ("position keys", answer.arena_position_key_bytes, KEYS),
            ("activations", answer.arena_activation_bytes, ACTIVATIONS),
            ("scratch", answer.arena_scratch_bytes, SCRATCH),
        ];
        bar(&root, 200, "RAM", answer.ram_bytes, &ram)?;
        drawn(root.present())?;
    }
    png_bytes(&pixels, width, height)
}

/// One bar at `y`: `capacity` bytes across the bar's width (or the need, if larger), the
/// segments in order, the rest free; a legend under it.
fn bar(
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    y: i32,
    label: &str,
    capacity: usize,
    segments: &[(&str, usize, RGBColor)],
) -> Result<()> {
    let (left, right) = (110i32, SIZE.0 as i32 - 30);
    let height = 46;
    let need: usize = segments.iter().map(|s| s.1).sum();
    let scale_bytes = capacity.max(need).max(1) as f64;
    let x_of = |bytes: usize| left + ((right - left) as f64 * bytes as f64 / scale_bytes).round() as i32;
    let text = (FONT, 15).into_font().color(&BLACK);
    let legend = (FONT, 14).into_font().color(&BLACK);
    drawn(root.draw_text(label, &(FONT, 18).into_font().color(&BLACK), (20, y + 14)))?;
    drawn(root.draw(&Rectangle::new(
        [(left, y), (x_of(capacity), y + height)],
        FREE.filled(),
    )))?;
    let mut at = 0usize;
    for &(_, bytes, colour) in segments {
        if bytes == 0 {
            continue;
        }
        drawn(root.draw(&Rectangle::new(
            [(x_of(at), y), (x_of(at + bytes), y + height)],
            colour.filled(),
        )))?;
        at += bytes;
    }
    if need > capacity {
        let x = x_of(capacity);
        drawn(root.draw(&Rectangle::new(
            [(x - 1, y - 6), (x + 2, y + height + 6)],
            OVER.filled(),
        )))?;
    }
    let summary = if need <= capacity {
        format!(
            "{need} of {capacity} bytes ({:.0}%), {} free",
            100.0 * need as f64 / capacity.max(1) as f64,
            capacity - need
        )
    } else {
        format!("{need} of {capacity} bytes: {} bytes too many", need - capacity)
    };
    drawn(root.draw_text(&summary, &text, (left, y - 20)))?;
    // The legend: a swatch and the bytes of each segment.
    let mut x = left;
    for &(name, bytes, colour) in segments {
        if bytes == 0 {
            continue;
        }
        let entry = format!("{name} {bytes}");
        drawn(root.draw(&Rectangle::new(
            [(x, y + height + 10), (x + 12, y + height + 22)],
            colour.filled(),
        )))?;
        drawn(root.draw_text(&entry, &legend, (x + 16, y + height + 9)))?;
        // DejaVu Sans Mono at 14 px: about 8.5 px a character
        x += 16 + (entry.len() as i32 * 17 + 1) / 2 + 10;
    }
    Ok(())
}
