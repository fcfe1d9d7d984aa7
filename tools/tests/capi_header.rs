//! `include/txl.h` and the C API's Rust side (`capi/src`) declare the same things: every
//! `extern "C"` function with the same name, return type, parameter types and parameter names,
//! every `TXL_*` constant with the same value (the struct sizes for 64-bit and for 32-bit
//! pointers each), and every struct with the same fields in the same order. Read from the
//! sources as text, so a change to either side that the other lacks fails here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Rust sources of the C API, concatenated.
fn rust_sources() -> String {
    let dir = repo().join("capi/src");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The header without its comments.
fn header() -> String {
    let text = std::fs::read_to_string(repo().join("include/txl.h")).unwrap();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("a closed comment") + start + 2;
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A Rust type of a C signature written as C.
fn c_type(rust: &str) -> String {
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*const ") {
        return format!("const {} *", c_type(inner));
    }
    if let Some(inner) = rust.strip_prefix("*mut ") {
        return format!("{} *", c_type(inner));
    }
    match rust {
        "c_int" => "int",
        "c_char" => "char",
        "c_void" | "" => "void",
        "u8" => "uint8_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "usize" => "size_t",
        "f32" => "float",
        other if other.starts_with("txl_") => other,
        other => panic!("no C type for the Rust type `{other}`"),
    }
    .to_string()
}

/// `TYPE NAME` (`const txl_model *model`, `size_t n`) split into its normalized type and name.
fn c_declaration(text: &str) -> (String, String) {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let split = text
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .expect("a type before the name");
    let (ty, name) = text.split_at(split + 1);
    let ty = ty.trim().replace(" *", "*").replace('*', " *");
    (ty.trim().to_string(), name.to_string())
}

/// The functions as `return name(type name, ...)`, by name.
type Functions = BTreeMap<String, String>;

fn rust_functions(source: &str) -> Functions {
    let mut functions = Functions::new();
    for piece in source.split("extern \"C\" fn ").skip(1) {
        let open = piece.find('(').unwrap();
        let name = piece[..open].trim().to_string();
        if !name.starts_with("txl_") {
            continue; // (`rust_eh_personality`: for the linker, not part of the API)
        }
        let close = piece.find(')').unwrap();
        let params: Vec<String> = piece[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|param| {
                let (name, ty) = param.split_once(':').unwrap();
                format!("{} {}", c_type(ty), name.trim())
            })
            .collect();
        let after = &piece[close + 1..piece.find('{').unwrap()];
        let ret = after.trim().strip_prefix("->").map_or("void".to_string(), c_type);
        functions.insert(name.clone(), format!("{ret} {name}({})", params.join(", ")));
    }
    functions
}

fn header_functions(header: &str) -> Functions {
    let mut functions = Functions::new();
    // Prototypes: declarations at the top level that end in `);`.
    let flat = header.split_whitespace().collect::<Vec<_>>().join(" ");
    for statement in flat.split(';') {
        let statement = statement.trim();
        let Some(open) = statement.find('(') else { continue };
        if !statement.ends_with(')') || statement.starts_with('#') || statement.contains('{') {
            continue;
        }
        let (ret, name) = c_declaration(&statement[..open]);
        let inner = &statement[open + 1..statement.len() - 1];
        let params: Vec<String> = if inner.trim() == "void" {
            Vec::new()
        } else {
            inner
                .split(',')
                .map(|p| {
                    let (ty, name) = c_declaration(p);
                    format!("{ty} {name}")
                })
                .collect()
        };
        functions.insert(name.clone(), format!("{ret} {name}({})", params.join(", ")));
    }
    functions
}

/// `TXL_*` constants, by name; the struct sizes as `NAME@64` and `NAME@32`.
type Constants = BTreeMap<String, i64>;

fn rust_constants(source: &str) -> Constants {
    let mut constants = Constants::new();
    let mut width = "";
    for line in source.lines().map(str::trim) {
        if line == "#[cfg(target_pointer_width = \"64\")]" {
            width = "@64";
        } else if line == "#[cfg(not(target_pointer_width = \"64\"))]" {
            width = "@32";
        } else if let Some(rest) = line.strip_prefix("pub const TXL_") {
            let (name, value) = rest.split_once(':').unwrap();
            let value = value.split('=').nth(1).unwrap().trim().trim_end_matches(';');
            constants.insert(format!("TXL_{name}{width}"), value.parse().unwrap());
            width = "";
        } else if !line.starts_with("///") {
            width = "";
        }
    }
    constants
}

fn header_constants(header: &str) -> Constants {
    let mut constants = Constants::new();
    let mut width = "";
    for line in header.lines().map(str::trim) {
        if line.starts_with("#if UINTPTR_MAX > 0xFFFFFFFF") {
            width = "@64";
        } else if line == "#else" && width == "@64" {
            width = "@32";
        } else if line == "#endif" {
            width = "";
        } else if let Some(rest) = line.strip_prefix("#define TXL_") {
            // numbers only (not the include guard, not `TXL_ALIGN_16`)
            let Some((name, value)) = rest.split_once(' ') else {
                continue;
            };
            if let Ok(value) = value.trim().parse() {
                constants.insert(format!("TXL_{name}{width}"), value);
            }
        } else if line.starts_with("TXL_") {
            let (name, value) = line.split_once('=').unwrap();
            let value = value.trim().trim_end_matches(',');
            constants.insert(name.trim().to_string(), value.parse().unwrap());
        }
    }
    constants
}

/// Each struct's fields as `type name` (arrays `type name[LEN]`), by struct name.
type Structs = BTreeMap<String, Vec<String>>;

fn rust_structs(source: &str) -> Structs {
    let mut structs = Structs::new();
    for piece in source.split("pub struct txl_").skip(1) {
        let name = format!("txl_{}", &piece[..piece.find(' ').unwrap()]);
        let body = &piece[piece.find('{').unwrap() + 1..piece.find('}').unwrap()];
        let fields = body
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .map(|field| {
                let (name, ty) = field.trim_start_matches("pub ").split_once(':').unwrap();
                let ty = ty.trim().trim_end_matches(',');
                match ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                    Some(array) => {
                        let (element, len) = array.split_once(';').unwrap();
                        format!("{} {}[{}]", c_type(element), name.trim(), len.trim())
                    }
                    None => format!("{} {}", c_type(ty), name.trim()),
                }
            })
            .collect();
        structs.insert(name, fields);
    }
    structs
}

fn header_structs(header: &str) -> Structs {
    let mut structs = Structs::new();
    for piece in header.split("typedef struct txl_").skip(1) {
        let name = format!("txl_{}", piece[..piece.find('{').unwrap()].trim());
        let body = &piece[piece.find('{').unwrap() + 1..piece.find('}').unwrap()];
        let fields = body
            .split(';')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(|field| match field.split_once('[') {
                Some((declaration, len)) => {
                    let (ty, name) = c_declaration(declaration);
                    format!("{ty} {name}[{}]", len.trim_end_matches(']'))
                }
                None => {
                    let (ty, name) = c_declaration(field);
                    format!("{ty} {name}")
                }
            })
            .collect();
        structs.insert(name, fields);
    }
    structs
}

#[test]
fn the_header_declares_every_function_of_the_library_as_the_library_defines_it() {
    let (rust, c) = (rust_functions(&rust_sources()), header_functions(&header()));
    assert!(rust.len() >= 18, "{rust:#?}");
    assert_eq!(rust, c, "capi/src (left) and include/txl.h (right) disagree");
}

#[test]
fn the_header_gives_every_constant_the_library_gives() {
    let (rust, c) = (rust_constants(&rust_sources()), header_constants(&header()));
    for name in [
        "TXL_MODEL_WORDS@64",
        "TXL_SESSION_WORDS@32",
        "TXL_ERR_INTERNAL",
        "TXL_API_VERSION",
    ] {
        assert!(
            rust.contains_key(name),
            "{name} not read from capi/src: {rust:#?}"
        );
    }
    assert_eq!(rust, c, "capi/src (left) and include/txl.h (right) disagree");
}

#[test]
fn the_header_lays_out_every_struct_as_the_library_does() {
    let (rust, c) = (rust_structs(&rust_sources()), header_structs(&header()));
    assert_eq!(rust.len(), 5, "{rust:#?}");
    assert_eq!(rust, c, "capi/src (left) and include/txl.h (right) disagree");
}

/// The readers above see a difference: a header with a parameter's type, a constant and a
/// field changed does not match.
#[test]
fn a_changed_header_is_seen() {
    let source = rust_sources();
    let header = header();
    for (from, to) in [
        ("size_t n_tokens,", "uint32_t n_tokens,"),
        ("TXL_ERR_OVERLAP = 4", "TXL_ERR_OVERLAP = 40"),
        ("#define TXL_SESSION_WORDS 96", "#define TXL_SESSION_WORDS 95"),
        ("uint32_t mem_dtype;", "uint8_t mem_dtype;"),
        (
            "const char *txl_strerror(int code);",
            "const char *txl_strerror(int status);",
        ),
    ] {
        assert!(header.contains(from), "{from}");
        let changed = header.replacen(from, to, 1);
        let same = rust_functions(&source) == header_functions(&changed)
            && rust_constants(&source) == header_constants(&changed)
            && rust_structs(&source) == header_structs(&changed);
        assert!(!same, "changing `{from}` to `{to}` went unseen");
    }
}
