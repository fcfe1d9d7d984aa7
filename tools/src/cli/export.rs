//! `txl export`: what a firmware project needs to run a model image, as a Rust module of its
//! own (`--rust`): the image as a 16-byte-aligned `static` (`include_bytes!` of a copy beside the
//! module), the arena and state sizes for the chosen session options, and those options as a
//! `const`. The module uses `txl-core` alone, so the firmware needs nothing of txl's tools to
//! build. Its C twin (`--c`, [`c`]) writes the same as a header and a source file for the C API
//! (`include/txl.h`).

mod c;

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
    txl export model.txl --rust out --name kjv\n  \
    txl export model-int8.txl --c firmware/model --tgt-len 1 --mem-len 64 --mem-dtype int8\n\n\
    With --rust it writes OUT_DIR/NAME.rs and OUT_DIR/NAME.txl. In the firmware: `mod model;`,\n\
    then `Model::parse(model::IMAGE)`, an arena of `model::ARENA_BYTES` bytes aligned to 16, and\n\
    `Session::new(&model, arena, model::OPTIONS)`. examples/export-demo is such a firmware.\n\
    With --c it writes OUT_DIR/NAME.h and OUT_DIR/NAME.c for the C API (include/txl.h):\n\
    `txl_model_parse(&model, NAME_image, TXL_IMAGE_BYTES)`, an arena of TXL_ARENA_BYTES bytes\n\
    aligned to 16, and `txl_session_init(&session, &model, arena, TXL_ARENA_BYTES, &NAME_options)`.\n\
    examples/c-firmware is such a firmware.";

/// Arguments of `txl export`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image.
    pub model: PathBuf,
    /// Folder to write the Rust module (NAME.rs) and the copy of the image it includes
    /// (NAME.txl) into; made if missing.
    #[arg(
        long,
        value_name = "OUT_DIR",
        required_unless_present = "c",
        conflicts_with = "c"
    )]
    pub rust: Option<PathBuf>,
    /// Folder to write the C header (NAME.h) and source (NAME.c, the image as an aligned
    /// `const uint8_t NAME_image[]`) into, for the C API of include/txl.h; made if missing.
    #[arg(long, value_name = "OUT_DIR")]
    pub c: Option<PathBuf>,
    /// Name of the module and of the image file beside it (--rust); of the files and the
    /// prefix of the image's and the options' names (--c).
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
        let source = self.model.display().to_string();
        let rust = match (&self.rust, &self.c) {
            (Some(rust), None) => rust,
            (None, Some(c_dir)) => return c::write(&model, &options, &self.name, &source, c_dir, out),
            _ => bail!("give one of --rust OUT_DIR and --c OUT_DIR"),
        };
        let module = module_text(&model, &options, &self.name, &source)?;
        let image_path = rust.join(format!("{}.txl", self.name));
        let module_path = rust.join(format!("{}.rs", self.name));
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

/// The sizes `txl export` writes, each checked against the core: the arena's layout, its bytes
/// (`Session::arena_bytes`, which must be the layout's), the saved state's.
struct Sizes {
    layout: ArenaLayout,
    arena_bytes: usize,
    state_bytes: usize,
}

impl Sizes {
    fn of(model: &Model<'_>, options: &SessionOptions) -> Result<Sizes> {
        let layout = ArenaLayout::new(model.config(), model.image().arithmetic(), options)?;
        let arena_bytes = Session::arena_bytes(model, options)?;
        if arena_bytes != layout.total_bytes() {
            bail!(
                "the arena's layout and Session::arena_bytes disagree ({} and {arena_bytes})",
                layout.total_bytes()
            );
        }
        let state_bytes = Session::state_bytes_for(model, options)?;
        Ok(Sizes {
            layout,
            arena_bytes,
            state_bytes,
        })
    }
}

/// Where an export's reader finds the image and the vocabulary, for [`summary`].
struct Places<'a> {
    /// Where the image is.
    image: &'a str,
    /// How the firmware reads the vocabulary's symbols.
    vocabulary: &'a str,
}

/// The lines that say what an export holds (the model, the image, its vocabulary and arithmetic,
/// the session options, the arena's parts), for a comment.
fn summary(
    model: &Model<'_>,
    options: &SessionOptions,
    sizes: &Sizes,
    source: &str,
    places: &Places<'_>,
) -> Vec<String> {
    let c = model.config();
    let image_bytes = model.image().bytes().len();
    let crc = txl_core::crc32(&model.image().bytes()[..image_bytes - 4]);
    let layout = &sizes.layout;
    let mut lines = vec![
        format!("A txl model for firmware, written by `txl export` from `{source}`."),
        String::new(),
        format!(
            "- model: {} layers, d_model {}, {} heads of {}, d_inner {}, n_token {}{}, {} weights",
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
        ),
        format!(
            "- image: {image_bytes} bytes, CRC-32 {crc:#010x} ({})",
            places.image
        ),
    ];
    lines.push(match model.image().vocabulary() {
        Some(v) => format!(
            "- vocabulary: {} symbols{} ({})",
            v.len(),
            if v.lower_case() { ", lower-cased text" } else { "" },
            places.vocabulary
        ),
        None => "- vocabulary: none (token ids are bytes)".to_string(),
    });
    lines.push(match model.image().arithmetic() {
        Arithmetic::Float => "- arithmetic: float".to_string(),
        Arithmetic::Integer { frac } => format!("- arithmetic: integer, activations in Q{frac}"),
    });
    lines.push(format!("- session: {options:#}"));
    lines.push(format!(
        "- arena: {} bytes (memory {}, position keys {}, activations {}, scratch {}{})",
        sizes.arena_bytes,
        layout.memory_bytes(),
        layout.position_key_bytes(),
        layout.activation_bytes(),
        layout.scratch_bytes(),
        match layout.parameter_bytes() {
            0 => String::new(),
            n => format!(", integer parameters {n}"),
        }
    ));
    lines
}

/// The module's text.
fn module_text(model: &Model<'_>, options: &SessionOptions, name: &str, source: &str) -> Result<String> {
    let sizes = Sizes::of(model, options)?;
    let (arena_bytes, state_bytes) = (sizes.arena_bytes, sizes.state_bytes);
    let image_bytes = model.image().bytes().len();
    let mut m = String::new();
    let w = &mut m;
    let places = Places {
        image: &format!("`{name}.txl` beside this file"),
        vocabulary: "`txl_core::Model::image().vocabulary()`",
    };
    for line in summary(model, options, &sizes, source, &places) {
        // Writing to a String cannot fail.
        let _ = match line.is_empty() {
            true => writeln!(w, "//!"),
            false => writeln!(w, "//! {line}"),
        };
    }
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
