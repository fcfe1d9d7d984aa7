//! The house's rule for `core/` and `host-gpu/`: no import circles. A module that uses an item
//! of another depends on it; where two modules depend on each other, directly or through
//! others, neither can be read, tested or moved alone (`docs/ARCHITECTURE.md`, "The core's
//! modules").
//!
//! The graph is read from the sources: every `crate::`, `super::` and `self::` path, and every
//! path through a child module, outside comments, strings and `#[cfg(test)]` modules, taken to
//! the module that defines the item (following `pub use` re-exports), as `cargo modules
//! dependencies --acyclic` does from the compiler's view.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's modules (`a::b`; the root is `""`) and each one's code without comments, strings
/// and test modules.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path: PathBuf = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src).unwrap().with_extension("");
                let mut parts: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    parts.pop();
                }
                let text = std::fs::read_to_string(&path).unwrap();
                out.insert(parts.join("::"), code_only(&text));
            }
        }
    }
    out
}

/// `text` without comments, string and character literals, and its `#[cfg(test)]` (or
/// `#[cfg(all(test, ...))]`) modules (`pub(super) mod tests` too, and `mod name;` lines).
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |end| end + 2);
        } else if let Some(hashes) = raw_string_hashes(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let open = 2 + hashes;
            i += open
                + rest[open..]
                    .find(&close)
                    .map_or(rest.len() - open, |end| end + close.len());
            out.push_str("\"\"");
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            i = j + 1;
            out.push_str("\"\"");
        } else if bytes[i] == b'\'' && char_literal_len(rest) > 0 {
            i += char_literal_len(rest);
            out.push_str("' '");
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    for marker in ["#[cfg(test)]", "#[cfg(all(test"] {
        let mut from = 0;
        while let Some(at) = out[from..].find(marker).map(|at| at + from) {
            let after = out[at..].find(']').map_or(out.len(), |end| at + end + 1);
            let rest = out[after..].trim_start();
            let item = match rest.strip_prefix("pub") {
                Some(vis) if vis.starts_with('(') => {
                    vis[vis.find(')').map_or(0, |end| end + 1)..].trim_start()
                }
                Some(vis) => vis.trim_start(),
                None => rest,
            };
            if !item.starts_with("mod ") {
                from = after;
                continue;
            }
            // the module: `mod name;` to its `;`, `mod name { .. }` to its closing brace
            let start = out.len() - item.len();
            let end = match (item.find(';'), item.find('{')) {
                (Some(semi), Some(open)) if semi < open => start + semi + 1,
                (Some(semi), None) => start + semi + 1,
                (_, Some(open)) => {
                    let mut depth = 0usize;
                    let mut end = out.len();
                    for (i, c) in out[start + open..].char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = start + open + i + 1;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    end
                }
                (None, None) => out.len(),
            };
            out.replace_range(at..end, "");
            from = at;
        }
    }
    out
}

/// The `#`s of a raw string starting `text` (`r"`, `r#"`, ...).
fn raw_string_hashes(text: &str) -> Option<usize> {
    let rest = text.strip_prefix('r')?;
    let hashes = rest.len() - rest.trim_start_matches('#').len();
    rest[hashes..].starts_with('"').then_some(hashes)
}

/// Bytes of a character literal starting `text`, or 0 where the quote opens a lifetime.
fn char_literal_len(text: &str) -> usize {
    let b = text.as_bytes();
    if b.len() >= 4 && b[1] == b'\\' {
        return text[2..].find('\'').map_or(0, |end| end + 3);
    }
    let c = text[1..].chars().next().map_or(0, char::len_utf8);
    if c > 0 && text.as_bytes().get(1 + c) == Some(&b'\'') {
        1 + c + 1
    } else {
        0
    }
}

/// The paths a module's code names: `crate::`, `super::`, `self::` paths (use trees expanded)
/// and paths through its children (`child::item`).
fn paths(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let words: Vec<(usize, &str)> = tokens(code);
    let mut k = 0;
    while k < words.len() {
        let (at, word) = words[k];
        let starts = matches!(word, "crate" | "super" | "self") || children.contains(word);
        let preceded = at >= 2 && &code[at - 2..at] == "::";
        if starts && !preceded && code[at + word.len()..].starts_with("::") {
            let end = path_end(code, at);
            expand(&code[at..end], &mut out);
        }
        k += 1;
    }
    out
}

/// The identifiers of `code` with their offsets.
fn tokens(code: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in code.char_indices().chain([(code.len(), ' ')]) {
        let ident = c.is_alphanumeric() || c == '_';
        match (start, ident) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                out.push((s, &code[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Where the path (or use tree) starting at `at` ends.
fn path_end(code: &str, at: usize) -> usize {
    let b = code.as_bytes();
    let mut i = at;
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' if depth == 0 => break,
            b'}' => depth -= 1,
            b',' | b';' | b')' | b'(' | b'<' | b'>' | b'!' | b'=' | b'&' | b'*' | b'[' | b']'
                if depth == 0 =>
            {
                break
            }
            b if b.is_ascii_whitespace() && depth == 0 => break,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Every path of a use tree (`a::{b, c::{d, self}}` -> `a::b`, `a::c::d`, `a::c`), `as` names
/// dropped.
fn expand(tree: &str, out: &mut Vec<String>) {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        let path = tree
            .split(" as ")
            .next()
            .unwrap_or("")
            .trim()
            .trim_end_matches("::");
        if !path.is_empty() {
            out.push(path.to_string());
        }
        return;
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut depth = 0;
    let mut part = String::new();
    for c in inner.chars().chain([',']) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            let item = part.trim();
            if item == "self" {
                out.push(prefix.trim_end_matches("::").to_string());
            } else if !item.is_empty() {
                expand(&format!("{prefix}{item}"), out);
            }
            part.clear();
        } else {
            part.push(c);
        }
    }
}

/// The type names of the inherent `impl` blocks in `code` (`impl<'a> Name<'a> {`, not
/// `impl Trait for Name {`).
fn inherent_impls(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, word) in tokens(code) {
        if word != "impl" {
            continue;
        }
        let header = &code[at + 4..];
        let header = &header[..header.find('{').unwrap_or(header.len())];
        // drop the generics (`<...>`, nested) to find the words outside them
        let mut depth = 0usize;
        let outside: String = header
            .chars()
            .map(|c| match c {
                '<' => {
                    depth += 1;
                    ' '
                }
                '>' => {
                    depth = depth.saturating_sub(1);
                    ' '
                }
                _ if depth > 0 => ' ',
                c => c,
            })
            .collect();
        let words: Vec<&str> = outside.split_whitespace().collect();
        if words.contains(&"for") {
            continue;
        }
        if let Some(path) = words.first() {
            if let Some(name) = path.rsplit("::").next().filter(|n| !n.is_empty()) {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// `path` named in `module`, as segments from the crate root.
fn absolute(module: &str, path: &str) -> Vec<String> {
    let mut segments = path.split("::").map(str::trim).filter(|s| !s.is_empty());
    let mut out: Vec<String> = if module.is_empty() {
        vec![]
    } else {
        module.split("::").map(String::from).collect()
    };
    let first = segments.next().unwrap_or("");
    match first {
        "crate" => out.clear(),
        "self" => {}
        "super" => {
            out.pop();
        }
        child => out.push(child.to_string()),
    }
    for segment in segments {
        if segment == "super" {
            out.pop();
        } else if segment != "self" {
            out.push(segment.to_string());
        }
    }
    out
}

struct Crate {
    code: BTreeMap<String, String>,
    children: BTreeMap<String, BTreeSet<String>>,
    /// `(module, name)` -> the path a `pub use` in `module` names it by.
    reexports: BTreeMap<(String, String), Vec<String>>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let code = modules(src);
        let mut children: BTreeMap<String, BTreeSet<String>> =
            code.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
        for module in code.keys().filter(|m| !m.is_empty()) {
            let (parent, name) = module.rsplit_once("::").unwrap_or(("", module));
            children
                .entry(parent.to_string())
                .or_default()
                .insert(name.to_string());
        }
        let mut reexports = BTreeMap::new();
        for (module, text) in &code {
            let mut from = 0;
            while let Some(at) = text[from..].find("pub").map(|at| at + from) {
                from = at + 3;
                let rest = text[from..].trim_start();
                let rest = if rest.starts_with('(') {
                    rest[rest.find(')').map_or(0, |e| e + 1)..].trim_start()
                } else {
                    rest
                };
                let Some(tree) = rest.strip_prefix("use ") else {
                    continue;
                };
                let tree = &tree[..tree.find(';').unwrap_or(tree.len())];
                let mut named = Vec::new();
                expand(tree, &mut named);
                for path in named {
                    let first = path.split("::").next().unwrap_or("");
                    let local =
                        matches!(first, "crate" | "super" | "self") || children[module].contains(first);
                    if local {
                        let target = absolute(module, &path);
                        if let Some(name) = target.last() {
                            reexports.insert((module.clone(), name.clone()), target);
                        }
                    }
                }
            }
        }
        Crate {
            code,
            children,
            reexports,
        }
    }

    /// The module that defines the item `path` names.
    fn resolve(&self, path: &[String], depth: usize) -> Option<String> {
        for i in (0..=path.len()).rev() {
            let module = path[..i].join("::");
            if self.code.contains_key(&module) {
                if let Some(target) = path
                    .get(i)
                    .and_then(|name| self.reexports.get(&(module.clone(), name.clone())))
                {
                    if depth < 16 && target[..] != path[..=i] {
                        let mut full = target.clone();
                        full.extend_from_slice(&path[i + 1..]);
                        return self.resolve(&full, depth + 1);
                    }
                }
                return Some(module);
            }
        }
        None
    }

    fn edges(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, text) in &self.code {
            let targets = edges.entry(module.clone()).or_default();
            for path in paths(text, &self.children[module]) {
                if let Some(target) = self.resolve(&absolute(module, &path), 0) {
                    if &target != module {
                        targets.insert(target);
                    }
                }
            }
        }
        // A type's inherent methods written in another module make the type's module depend on
        // that one (its methods are its items, wherever they are written), as `cargo modules`
        // counts them.
        let defined = self.type_modules();
        for (module, text) in &self.code {
            for name in inherent_impls(text) {
                // (a child module's methods for its parent's type are the parent's own split)
                let outside = |home: &&String| *home != module && !module.starts_with(&format!("{home}::"));
                if let Some(home) = defined.get(&name).filter(outside) {
                    edges.entry(home.clone()).or_default().insert(module.clone());
                }
            }
        }
        edges
    }

    /// The module of each struct, enum and union name defined in exactly one module.
    fn type_modules(&self) -> BTreeMap<String, String> {
        let mut homes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, text) in &self.code {
            let words = tokens(text);
            for pair in words.windows(2) {
                if matches!(pair[0].1, "struct" | "enum" | "union") {
                    homes
                        .entry(pair[1].1.to_string())
                        .or_default()
                        .insert(module.clone());
                }
            }
        }
        homes
            .into_iter()
            .filter(|(_, modules)| modules.len() == 1)
            .filter_map(|(name, modules)| Some((name, modules.into_iter().next()?)))
            .collect()
    }
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

fn assert_no_circles(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let krate = Crate::read(&src);
    let edges = krate.edges();
    assert!(
        edges.len() > 10 && edges.values().map(BTreeSet::len).sum::<usize>() > 40,
        "{crate_dir}: too few modules or imports read"
    );
    let found = circles(&edges);
    let described: Vec<String> = found
        .iter()
        .map(|c| {
            let inside: BTreeSet<&String> = c.iter().collect();
            c.iter()
                .map(|m| {
                    let to: Vec<&String> = edges[m].iter().filter(|t| inside.contains(t)).collect();
                    format!("  {} -> {to:?}", if m.is_empty() { "<root>" } else { m })
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    assert!(
        found.is_empty(),
        "{crate_dir}: import circles\n{}",
        described.join("\n\n")
    );
}

#[test]
fn the_core_has_no_import_circles() {
    assert_no_circles("core");
}

/// The core's layers, bottom to top (`docs/ARCHITECTURE.md`): a module imports only from its own
/// layer or those below.
const CORE_LAYERS: &[&[&str]] = &[
    &[
        "kernels",
        "included",
        "config",
        "crc32",
        "digest",
        "rng",
        "vocab",
        "fixed_point",
    ],
    &["vector", "tensors", "options", "integer"],
    &["weights", "error"],
    &["matrix", "int8_attention", "image"],
    &["memory", "model", "sampling"],
    &["position"],
    &["attention"],
    &["embedding", "output", "arena", "macs"],
    &["session", "aligned"],
    &["scoring", "random_model", ""],
];

#[test]
fn the_core_imports_only_from_its_own_layer_or_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/src");
    let edges = Crate::read(&src).edges();
    let layer = |module: &str| {
        let top = module.split("::").next().unwrap_or("");
        CORE_LAYERS
            .iter()
            .position(|layer| layer.contains(&top))
            .unwrap_or_else(|| panic!("core module {top:?} is in no layer of CORE_LAYERS"))
    };
    let upward: Vec<String> = edges
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |to| (from, to)))
        .filter(|(from, to)| layer(to) > layer(from))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(upward.is_empty(), "imports from a lower layer up: {upward:#?}");
}

#[test]
fn the_host_reference_and_quantizer_have_no_import_circles() {
    assert_no_circles("host-gpu");
}

/// The reader itself: a circle written into a small tree is found, through a re-export and a
/// use tree, and a test module's or a comment's imports are not counted.
#[test]
fn a_circle_is_found_and_tests_and_comments_are_not_counted() {
    let dir = std::env::temp_dir().join(format!("txl-module-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\npub use b::Thing;\n").unwrap();
    std::fs::write(
        dir.join("a/mod.rs"),
        "mod c;\nuse crate::{Thing, b::{self}};\n// crate::a::c::x\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a/c.rs"),
        "#[cfg(test)]\nmod tests { use crate::b::x; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.rs"),
        "pub struct Thing;\nfn f() { let s = \"crate::a\"; }\n",
    )
    .unwrap();
    let krate = Crate::read(&dir);
    let edges = krate.edges();
    assert_eq!(edges["a"], BTreeSet::from(["b".to_string()]));
    assert!(edges["b"].is_empty() && edges["a::c"].is_empty(), "{edges:?}");
    assert!(circles(&edges).is_empty());
    std::fs::write(dir.join("b.rs"), "pub struct Thing;\nfn f() { crate::a::g(); }\n").unwrap();
    let krate = Crate::read(&dir);
    assert_eq!(
        circles(&krate.edges()),
        vec![vec!["a".to_string(), "b".to_string()]]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
