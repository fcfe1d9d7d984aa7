//! `txl inspect`: a model image's config, tensors and the arena a session needs.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use txl_core::arena::ArenaLayout;
use txl_core::image::Arithmetic;
use txl_core::tensors::for_each_tensor;
use txl_core::Session;

use super::arena;
use super::args::SessionArgs;
use crate::image_file::{parse_model, read_image};
use crate::vocab::characters::SymbolKind;

pub const EXAMPLES: &str = "Examples:\n  \
    txl inspect model.txl\n  \
    txl inspect model.txl --mem-len 256 --mem-dtype int8 --position-keys segment\n  \
    txl inspect model.txl --tgt-len 1 --mem-dtype int8 --position-keys folded";

/// Arguments of `txl inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image.
    pub model: PathBuf,
    #[command(flatten)]
    pub session: SessionArgs,
}

impl Args {
    /// Prints the image's description on `out`. The arena is computed, not allocated, so any
    /// size that fits the address space is reported.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let bytes = read_image(&self.model)?;
        let model = parse_model(&bytes, &self.model)?;
        let c = model.config();
        writeln!(out, "image         {}", self.model.display())?;
        writeln!(out, "image bytes   {}", bytes.len())?;
        writeln!(
            out,
            "model         n_layer {}  d_model {}  d_embed {}  n_head {}  d_head {}  d_inner {}",
            c.n_layer, c.d_model, c.d_embed, c.n_head, c.d_head, c.d_inner
        )?;
        writeln!(
            out,
            "vocabulary    n_token {}  cutoffs {:?}  div_val {}  tie_weight {}  tie_projs {:#b}",
            c.n_token,
            c.cutoffs(),
            c.div_val,
            c.tie_weight,
            c.tie_projs
        )?;
        match model.image().vocabulary() {
            Some(v) => {
                let shown: Vec<String> = v.symbols().take(8).map(|s| format!("{s:?}")).collect();
                let more = if v.len() > shown.len() { ", ..." } else { "" };
                let kind = match SymbolKind::of(&crate::vocab::Vocabulary::from_image(&v)) {
                    Some(SymbolKind::ByteValues) => {
                        "  characters: byte values (enwik8; --bytes reads raw bytes)"
                    }
                    Some(SymbolKind::Characters) => "  characters: letters (text8; --bytes reads raw text)",
                    None => "",
                };
                writeln!(
                    out,
                    "symbols       {}  lower_case {}  {}{more}{kind}",
                    v.len(),
                    v.lower_case(),
                    shown.join(", ")
                )?;
            }
            None => writeln!(out, "symbols       none (token ids are bytes, or given as ids)")?,
        }
        writeln!(
            out,
            "layers        pre_lnorm {}  untie_r {}  layer_norm_epsilon {:e}",
            c.pre_lnorm, c.untie_r, c.layer_norm_epsilon
        )?;
        match model.image().arithmetic() {
            Arithmetic::Float => writeln!(out, "arithmetic    float")?,
            Arithmetic::Integer { frac } => writeln!(out, "arithmetic    integer, activations Q{frac}")?,
        }
        let options = self.session.options(&model)?;
        writeln!(out, "session       {options}")?;
        arena::arena_bytes(&model, &options)?;
        let layout = ArenaLayout::new(c, model.image().arithmetic(), &options)?;
        writeln!(out, "arena bytes   {}", layout.total_bytes())?;
        writeln!(out, "  memory (keys + values)   {}", layout.memory_bytes())?;
        writeln!(out, "  position keys            {}", layout.position_key_bytes())?;
        writeln!(out, "  activations              {}", layout.activation_bytes())?;
        writeln!(out, "  scratch                  {}", layout.scratch_bytes())?;
        if layout.parameter_bytes() > 0 {
            writeln!(out, "  integer parameters       {}", layout.parameter_bytes())?;
        }
        writeln!(
            out,
            "state bytes   {} (Session::save_state with a full memory)",
            Session::state_bytes_for(&model, &options)?
        )?;

        let image = model.image();
        writeln!(out, "tensors       {}", image.layout().count())?;
        let mut lines = Vec::new();
        let mut parameters = 0usize;
        let mut index = 0;
        for_each_tensor(c, |name, shape| {
            let entry = image.entry(index);
            parameters += shape.len();
            lines.push(format!(
                "  {:<40} {:?} {:?} @ {}",
                name.to_string(),
                entry.dtype,
                shape,
                entry.offset
            ));
            index += 1;
        });
        for line in lines {
            writeln!(out, "{line}")?;
        }
        writeln!(out, "parameters    {parameters}")?;
        Ok(())
    }
}
