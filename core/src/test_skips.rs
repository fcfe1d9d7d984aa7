//! Skipped checks on the record. A test that cannot reach what it was written for (a CPU without
//! the kernel's extension, no GPU) calls [`skipped`]: that prints `SKIPPED <test>: <reason>` and,
//! where the environment variable `TXL_SKIPS` names a file, appends the line `<test>: <reason>`
//! to it. `scripts/test.sh` lists that file at the end of its run: what the machine did not check.
//!
//! One file for every test crate of the workspace: the core's unit tests (`mod test_skips`) and
//! the other tests include it by path (`#[path = ".../core/src/test_skips.rs"]`).

/// Records that the running test did not check something, and why (`reason`: one line). The
/// test is named as the test harness names its thread, after its test binary:
/// `txl_core::kernels::x86_64::amx::tests::amx_row_sums_equal_the_scalar_dot_per_row`. Panics
/// when `TXL_SKIPS` names a file that cannot be appended to: a skip must not go unrecorded.
pub fn skipped(reason: &str) {
    use std::io::Write as _;

    let thread = std::thread::current();
    let line = format!(
        "{}::{}: {}{}\n",
        test_binary(),
        thread.name().unwrap_or("(a test's own thread)"),
        reason.replace('\n', " "),
        // Miri's CPU has the extensions the build enabled and that Miri can interpret, no more
        if cfg!(miri) { " (under Miri)" } else { "" }
    );
    std::eprint!("SKIPPED {line}");
    let Some(path) = std::env::var_os("TXL_SKIPS").filter(|p| !p.is_empty()) else {
        return;
    };
    // one write of the whole line to a file opened to append: the lines of tests running side
    // by side do not mix
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(e) = appended {
        panic!(
            "TXL_SKIPS: cannot record the skip in {}: {e}",
            std::path::Path::new(&path).display()
        );
    }
}

/// The running test binary's name without Cargo's hash (`positions_per_pass-0f1e2d3c4b5a6978`
/// is `positions_per_pass`), or the crate's where it cannot be asked (Miri's isolation would
/// stop at the question).
fn test_binary() -> String {
    let exe = if cfg!(miri) {
        None
    } else {
        std::env::current_exe().ok()
    };
    let stem = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .and_then(|s| s.to_str());
    match stem {
        Some(stem) => match stem.rsplit_once('-') {
            Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
                name.to_string()
            }
            _ => stem.to_string(),
        },
        None => env!("CARGO_CRATE_NAME").to_string(),
    }
}
