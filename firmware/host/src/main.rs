//! `txl-qemu ELF [ARGS...]`: runs a txl-firmware ELF in QEMU, on the board it was built for, with
//! `ARGS` as its semihosting command line, prints the decoded defmt log as it comes, and exits
//! with the firmware's exit code (124 after `TXL_QEMU_TIMEOUT` seconds, if set). Cargo's runner
//! for the firmware: `cargo run --release -- demo --prompt "And God said"` inside `firmware/`.
//!
//! `txl-qemu --boards` lists the boards, one a line: name, Rust target, core, and the firmware's
//! cargo features the board's build turns on (comma-separated; `-` for none). `txl-qemu
//! --code-bytes ELF` prints the bytes of flash the ELF's code and constants take (every
//! allocated section in the board's flash but the model image and the tokens).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(elf) = args.next().map(PathBuf::from) else {
        eprintln!("usage: txl-qemu ELF [ARGS...] | txl-qemu --boards");
        std::process::exit(2);
    };
    if elf.as_os_str() == "--boards" {
        for board in txl_firmware_host::BOARDS {
            let features = if board.features.is_empty() {
                "-".to_string()
            } else {
                board.features.join(",")
            };
            println!("{} {} {} {features}", board.name, board.target, board.core);
        }
        return;
    }
    if elf.as_os_str() == "--code-bytes" {
        // The flash an ELF's code and constants take (`txl_firmware_host::code_bytes`).
        let Some(path) = args.next() else {
            eprintln!("usage: txl-qemu --code-bytes ELF");
            std::process::exit(2);
        };
        match std::fs::read(&path)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| txl_firmware_host::code_bytes(&bytes))
        {
            Ok(bytes) => println!("{bytes}"),
            Err(error) => {
                eprintln!("error: {path}: {error:#}");
                std::process::exit(1);
            }
        }
        return;
    }
    let args: Vec<String> = args.collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let timeout = std::env::var("TXL_QEMU_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map(Duration::from_secs_f64);
    let stdout = std::io::stdout();
    let outcome = txl_firmware_host::run(&elf, &args, timeout, |line| {
        let mut out = stdout.lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    });
    match outcome {
        Ok(outcome) => {
            eprint!("{}", outcome.stderr);
            match outcome.status {
                Some(status) => std::process::exit(status.code().unwrap_or(1)),
                None => {
                    eprintln!("txl-qemu: timed out after {timeout:?}");
                    std::process::exit(124)
                }
            }
        }
        Err(error) => {
            eprintln!("txl-qemu: {error:#}");
            std::process::exit(1)
        }
    }
}
