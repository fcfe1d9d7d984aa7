//! `txl convert`: a Hugging Face TransfoXL checkpoint to a txl model image.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use txl_core::AlignedBytes;

use super::args::{DtypeArg, QuantizeArgs};
use super::quantize::quantize_image;
use crate::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use crate::image_file::{parse_model, write_file};

pub const EXAMPLES: &str = "Examples:\n  \
    txl convert path/to/hf-checkpoint -o model.txl\n  \
    txl convert path/to/hf-checkpoint -o model.txl --format pytorch-bin\n  \
    txl convert path/to/hf-checkpoint -o model-f16.txl --dtype f16";

/// Arguments of `txl convert`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Checkpoint directory or weights file.
    pub src: PathBuf,
    /// Output image path.
    #[arg(short, long, value_name = "OUT.txl")]
    pub out: PathBuf,
    /// Which weights file to read when the directory has both.
    #[arg(long, value_enum, default_value_t = CheckpointFormat::Auto)]
    pub format: CheckpointFormat,
    /// Weight precision of the image (f16 and int8 as `txl quantize` makes them).
    #[arg(long, value_enum, default_value_t = DtypeArg::F32)]
    pub dtype: DtypeArg,
    #[command(flatten)]
    pub quantize: QuantizeArgs,
}

impl Args {
    /// Converts; prints nothing on `out` (a note on stderr says what was written).
    pub fn run(self, _out: &mut dyn Write) -> Result<()> {
        if let Some(flag) = self.quantize.given().filter(|_| self.dtype == DtypeArg::F32) {
            bail!("{flag} applies to quantization: add --dtype f16 or --dtype int8");
        }
        let quantize = (self.dtype != DtypeArg::F32).then_some((self.dtype, &self.quantize));
        convert(&self.src, &self.out, self.format, quantize).map(|_| ())
    }
}

/// Converts the checkpoint at `src` to an image at `out`, quantized to the given precision if
/// one is given; returns the image's size in bytes.
pub fn convert(
    src: &Path,
    out: &Path,
    format: CheckpointFormat,
    quantize: Option<(DtypeArg, &QuantizeArgs)>,
) -> Result<usize> {
    let checkpoint = load_hf_checkpoint(src, format, std::io::stderr().is_terminal())?;
    let mut image = checkpoint.to_image()?;
    let aligned = AlignedBytes::copy_from(&image)?;
    // Check what we wrote reads back before anyone flashes it.
    let model = parse_model(&aligned, out)?;
    if let Some((dtype, args)) = quantize {
        image = quantize_image(&model, dtype, args)?;
    }
    write_file(out, &image)?;
    eprintln!(
        "wrote {} ({} bytes, {} tensors)",
        out.display(),
        image.len(),
        checkpoint.tensors.len()
    );
    Ok(image.len())
}
