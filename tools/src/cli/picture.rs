//! What the command's pictures share (`txl quantize --report-png`, `txl fit --png`): the font,
//! registered once with `plotters`, and the RGB pixels written as PNG bytes.

use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use plotters::style::{register_font, FontStyle};

/// DejaVu Sans Mono (its licence: `tools/assets/DejaVuSansMono-LICENSE.txt`).
const FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");
/// The family name the font is registered under.
pub const FONT: &str = "txl-mono";

/// Registers [`FONT`] with `plotters`, once.
pub fn font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    if *REGISTERED.get_or_init(|| register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()) {
        Ok(())
    } else {
        Err(anyhow!("the pictures' font does not load"))
    }
}

/// `pixels` (`width × height`, 8-bit RGB, row by row) as a PNG file's bytes.
pub fn png_bytes(pixels: &[u8], width: u32, height: u32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()?;
    Ok(out)
}
