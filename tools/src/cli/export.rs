//! `txl export`: what a firmware project needs to run a model image, as a Rust module of its
//! own: the image as a 16-byte-aligned `static` (`include_bytes!` of a copy beside the module),
//! the arena and state sizes for the chosen session options, and those options as a `const`.
//! The module uses `txl-core` alone, so the firmware needs nothing of txl's tools to build.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use txl_core::arena::ArenaLayout;
use txl_core::image::Arithmetic;
use txl_core::{Model, Session, SessionOptions};

use super::args::SessionArgs;
use super::score::precision;
use crate::image_file::{parse_model, read_image, write_file};

pub const EXAMPLES: &str = "Examples:\n  \
    txl export model.txl --rust firmware/src/model\n  \
    txl export model-int8.txl --rust out --tgt-len 1 --mem-len 64 --mem-dtype int8 --position-keys folded\n  \
    txl export model.txl --rust out --name kjv\n\n\
    It writes OUT_DIR/NAME.rs and OUT_DIR/NAME.txl. In the firmware: `mod model;`, then\n\
    `Model::parse(model::IMAGE)`, an arena of `model::ARENA_BYTES` bytes aligned to 16, and\n\
    `Session::new(&model, arena, model::OPTIONS)`. examples/export-demo is such a firmware.";

/// Arguments of `txl export`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image.
    pub model: PathBuf,
    /// Folder to write the Rust module (NAME.rs) and the copy of the image it includes
    /// (NAME.txl) into; made if missing.
    #[arg(long, value_name = "OUT_DIR")]
    pub rust: PathBuf,
    /// Name of the module and of the image file beside it.
    #[arg(long, default_value = "model", value_parser = module_name)]
    pub name: String,
    #[command(flatten)]
    pub session: SessionArgs,
}

impl Args {
    /// Writes the module and the image; prints what it wrote on `out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let bytes = read_image(&self.model)?;
        let model = parse_model(&bytes, &self.model)?;
        let options = self.session.options(&model)?;
        let module = module_text(&model, &options, &self.name, &self.model.display().to_string())?;
        let image_path = self.rust.join(format!("{}.txl", self.name));
        let module_path = self.rust.join(format!("{}.rs", self.name));
        write_file(&image_path, bytes.bytes())?;
        write_file(&module_path, module.as_bytes())?;
        writeln!(
            out,
            "wrote {} and {}",
            module_path.display(),
            image_path.display()
        )?;
        Ok(())
    }
}

/// `--name`: a Rust identifier in lower case, usable as a module and a file name.
fn module_name(name: &str) -> Result<String, String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') && name != "_" {
        Ok(name.to_string())
    } else {
        Err("expected a lower-case Rust identifier (letters, digits, _), e.g. model".into())
    }
}

/// The module's text.
fn module_text(model: &Model<'_>, options: &SessionOptions, name: &str, source: &str) -> Result<String> {
    let c = model.config();
    let layout = ArenaLayout::new(c, options)?;
    let arena_bytes = Session::arena_bytes(model, options)?;
    if arena_bytes != layout.total_bytes() {
        bail!(
            "the arena's layout and Session::arena_bytes disagree ({} and {arena_bytes})",
            layout.total_bytes()
        );
    }
    let state_bytes = Session::state_bytes_for(model, options)?;
    let image_bytes = model.image().bytes().len();
    let crc = txl_core::crc32(&model.image().bytes()[..image_bytes - 4]);
    let mut m = String::new();
    let w = &mut m;
    // Writing to a String cannot fail.
    let _ = writeln!(
        w,
        "//! A txl model for firmware, written by `txl export` from `{source}`."
    );
    let _ = writeln!(w, "//!");
    let _ = writeln!(
        w,
        "//! - model: {} layers, d_model {}, {} heads of {}, d_inner {}, n_token {}{}, {} weights",
        c.n_layer,
        c.d_model,
        c.n_head,
        c.d_head,
        c.d_inner,
        c.n_token,
        match c.n_cutoffs {
            0 => String::new(),
            _ => format!(
                " (adaptive softmax, cutoffs {:?}, div_val {})",
                c.cutoffs(),
                c.div_val
            ),
        },
        precision(model)
    );
    let _ = writeln!(
        w,
        "//! - image: {image_bytes} bytes, CRC-32 {crc:#010x} (`{name}.txl` beside this file)"
    );
    let _ = match model.image().vocabulary() {
        Some(v) => writeln!(
            w,
            "//! - vocabulary: {} symbols{} (`txl_core::Model::image().vocabulary()`)",
            v.len(),
            if v.lower_case() { ", lower-cased text" } else { "" }
        ),
        None => writeln!(w, "//! - vocabulary: none (token ids are bytes)"),
    };
    let _ = match model.image().arithmetic() {
        Arithmetic::Float => writeln!(w, "//! - arithmetic: float"),
        Arithmetic::Integer { frac } => writeln!(w, "//! - arithmetic: integer, activations in Q{frac}"),
    };
    let _ = writeln!(w, "//! - session: {options:#}");
    let _ = writeln!(
        w,
        "//! - arena: {arena_bytes} bytes (memory {}, position keys {}, activations {}, scratch {})",
        layout.memory_bytes(),
        layout.position_key_bytes(),
        layout.activation_bytes(),
        layout.scratch_bytes()
    );
    let _ = writeln!(w, "//!");
    let _ = writeln!(w, "//! ```ignore");
    let _ = writeln!(w, "//! let model = txl_core::Model::parse({name}::IMAGE)?;");
    let _ = writeln!(
        w,
        "//! // ARENA: &mut [u8] of {name}::ARENA_BYTES bytes, 16-byte aligned (e.g. a static)"
    );
    let _ = writeln!(
        w,
        "//! let mut session = txl_core::Session::new(&model, ARENA, {name}::OPTIONS)?;"
    );
    let _ = writeln!(
        w,
        "//! session.forward(&tokens, |position, log_probs| {{ /* ... */ }})?;"
    );
    let _ = writeln!(w, "//! ```");
    let _ = writeln!(w, "//!");
    let _ = writeln!(
        w,
        "//! Written for txl-core {}: the image format and `SessionOptions` are that version's.",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "// A firmware takes what it needs of these.");
    let _ = writeln!(w, "#![allow(dead_code)]");
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "use txl_core::{{MemDtype, MemInit, PositionKeys, SessionOptions}};"
    );
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "/// Aligns what it holds to 16 bytes, as `txl_core::Model::parse` needs the image."
    );
    let _ = writeln!(w, "#[repr(C, align(16))]");
    let _ = writeln!(w, "struct Align16<Bytes: ?Sized>(Bytes);");
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "static ALIGNED: &Align16<[u8]> = &Align16(*include_bytes!(\"{name}.txl\"));"
    );
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "/// The model image, 16-byte aligned, read in place (from flash) by `txl_core::Model::parse`."
    );
    let _ = writeln!(w, "pub static IMAGE: &[u8] = &ALIGNED.0;");
    let _ = writeln!(w);
    let _ = writeln!(w, "/// Bytes of [`IMAGE`].");
    let _ = writeln!(w, "pub const IMAGE_BYTES: usize = {image_bytes};");
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "/// Bytes of the arena a session with [`OPTIONS`] needs (`txl_core::Session::arena_bytes`); it must"
    );
    let _ = writeln!(w, "/// start on a 16-byte boundary.");
    let _ = writeln!(w, "pub const ARENA_BYTES: usize = {arena_bytes};");
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "/// Bytes of a saved session state with a full memory (`txl_core::Session::state_bytes`)."
    );
    let _ = writeln!(w, "pub const STATE_BYTES: usize = {state_bytes};");
    let _ = writeln!(w);
    let _ = writeln!(w, "/// The session options [`ARENA_BYTES`] was computed for.");
    let _ = writeln!(
        w,
        "pub const OPTIONS: SessionOptions = {};",
        options.rust_literal("")
    );
    Ok(m)
}
