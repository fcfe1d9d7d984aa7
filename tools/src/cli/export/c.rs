//! `txl export --c`: the C twin of the Rust module, for the C API (`include/txl.h`): `NAME.h`
//! with the sizes (`TXL_IMAGE_BYTES`, `TXL_ARENA_BYTES`, `TXL_STATE_BYTES`) and the session
//! options (`TXL_OPTIONS_INIT`) as macros, and `NAME.c` with the image as a 16-byte-aligned
//! `const uint8_t NAME_image[]` (read-only data: flash on a microcontroller) and the options as
//! `const txl_options NAME_options`.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use anyhow::Result;
use txl_core::{MemDtype, MemInit, Model, PositionKeys, SessionOptions};

use super::{summary, Places, Sizes};
use crate::image_file::write_file;

/// Writes `dir/NAME.h` and `dir/NAME.c`; says so on `out`.
pub fn write(
    model: &Model<'_>,
    options: &SessionOptions,
    name: &str,
    source: &str,
    dir: &Path,
    out: &mut dyn Write,
) -> Result<()> {
    let sizes = Sizes::of(model, options)?;
    let places = Places {
        image: &format!("`{name}_image` in {name}.c"),
        vocabulary: "in the image; the C API takes and gives token ids",
    };
    let summary = summary(model, options, &sizes, source, &places);
    let header_path = dir.join(format!("{name}.h"));
    let source_path = dir.join(format!("{name}.c"));
    write_file(
        &header_path,
        header_text(model, options, &sizes, name, &summary).as_bytes(),
    )?;
    write_file(&source_path, source_text(model, name, &summary).as_bytes())?;
    writeln!(
        out,
        "wrote {} and {}",
        header_path.display(),
        source_path.display()
    )?;
    Ok(())
}

/// The C name of each option's value, as `include/txl.h` spells it.
fn mem_init(value: MemInit) -> &'static str {
    match value {
        MemInit::Empty => "TXL_MEM_INIT_EMPTY",
        MemInit::Zeros => "TXL_MEM_INIT_ZEROS",
    }
}

fn mem_dtype(value: MemDtype) -> &'static str {
    match value {
        MemDtype::F32 => "TXL_MEM_DTYPE_F32",
        MemDtype::F16 => "TXL_MEM_DTYPE_F16",
        MemDtype::Int8 => "TXL_MEM_DTYPE_INT8",
    }
}

fn position_keys(value: PositionKeys) -> &'static str {
    match value {
        PositionKeys::PerSession => "TXL_POSITION_KEYS_SESSION",
        PositionKeys::PerSegment => "TXL_POSITION_KEYS_SEGMENT",
        PositionKeys::FoldedIntoQuery => "TXL_POSITION_KEYS_FOLDED",
    }
}

/// `summary` as a C comment, ` * ` before each line.
fn comment(summary: &[String], more: &[&str]) -> String {
    let mut text = String::from("/*\n");
    for line in summary.iter().map(String::as_str).chain(more.iter().copied()) {
        let _ = match line.is_empty() {
            true => writeln!(text, " *"),
            // (a path with `*/` in it must not end the comment)
            false => writeln!(text, " * {}", line.replace("*/", "* /")),
        };
    }
    text.push_str(" */\n");
    text
}

/// `NAME.h`.
fn header_text(
    model: &Model<'_>,
    options: &SessionOptions,
    sizes: &Sizes,
    name: &str,
    summary: &[String],
) -> String {
    let guard = format!("TXL_EXPORT_{}_H", name.to_ascii_uppercase());
    let image_bytes = model.image().bytes().len();
    let usage = [
        "",
        "    txl_model model;",
        "    txl_session session;",
        "    TXL_ALIGN_16 static uint8_t arena[TXL_ARENA_BYTES];",
        &format!("    txl_model_parse(&model, {name}_image, TXL_IMAGE_BYTES);"),
        &format!("    txl_session_init(&session, &model, arena, TXL_ARENA_BYTES, &{name}_options);"),
        "",
        "Written for txl-core, the image format and the C API (TXL_API_VERSION) of this version.",
    ];
    let mut h = comment(summary, &usage);
    let o = options;
    let _ = write!(
        h,
        "#ifndef {guard}
#define {guard}

#include <stddef.h>
#include <stdint.h>

#include \"txl.h\"

#ifdef __cplusplus
extern \"C\" {{
#endif

/* Bytes of {name}_image. */
#define TXL_IMAGE_BYTES {image_bytes}u

/* The model's vocabulary size: token ids are 0..TXL_N_TOKEN-1, a row of log-probabilities
 * (txl_session_feed) has TXL_N_TOKEN floats. */
#define TXL_N_TOKEN {n_token}u

/* The longest segment a session with {name}_options runs at once (its tgt_len). */
#define TXL_TGT_LEN {tgt_len}u

/* Bytes of the arena a session with {name}_options needs (txl_arena_bytes); it must start on a
 * 16-byte boundary. */
#define TXL_ARENA_BYTES {arena_bytes}u

/* Bytes of a saved session state with a full memory (txl_state_bytes). */
#define TXL_STATE_BYTES {state_bytes}u

/* The session options TXL_ARENA_BYTES was computed for, as an initializer of a txl_options. */
#define TXL_OPTIONS_INIT \\
    {{ \\
        {tgt_len}u, /* tgt_len */ \\
        {mem_len}u, /* mem_len */ \\
        {clamp_len}u, /* clamp_len */ \\
        {same_length}u, /* same_length */ \\
        {mem_init}, /* mem_init */ \\
        {mem_dtype}, /* mem_dtype */ \\
        {position_keys} /* position_keys */ \\
    }}

/* The model image, 16-byte aligned, read in place by txl_model_parse. */
extern const uint8_t {name}_image[TXL_IMAGE_BYTES];

/* TXL_OPTIONS_INIT. */
extern const txl_options {name}_options;

#ifdef __cplusplus
}}
#endif

#endif /* {guard} */
",
        n_token = model.config().n_token,
        arena_bytes = sizes.arena_bytes,
        state_bytes = sizes.state_bytes,
        tgt_len = o.tgt_len,
        mem_len = o.mem_len,
        clamp_len = o.clamp_len,
        same_length = u32::from(o.same_length),
        mem_init = mem_init(o.mem_init),
        mem_dtype = mem_dtype(o.mem_dtype),
        position_keys = position_keys(o.position_keys),
    );
    h
}

/// `NAME.c`: the image, twenty bytes a line.
fn source_text(model: &Model<'_>, name: &str, summary: &[String]) -> String {
    let bytes = model.image().bytes();
    let mut c = comment(summary, &[]);
    let _ = write!(
        c,
        "#include \"{name}.h\"

const txl_options {name}_options = TXL_OPTIONS_INIT;

/* The image must start on a 16-byte boundary (txl_model_parse refuses it otherwise). */
#ifndef TXL_ALIGN_16
#error \"TXL_ALIGN_16 (txl.h) knows no way to align a variable with this compiler: define it\"
#endif
TXL_ALIGN_16 const uint8_t {name}_image[TXL_IMAGE_BYTES] = {{
"
    );
    // about five characters a byte
    c.reserve(bytes.len() * 5 + bytes.len() / 20 * 2);
    for line in bytes.chunks(20) {
        for byte in line {
            let _ = write!(c, "{byte},");
        }
        c.push('\n');
    }
    c.push_str("};\n");
    c
}
