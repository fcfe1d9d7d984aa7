//! The host side of txl-firmware: runs a firmware ELF in QEMU, on the board it was built for,
//! and decodes its `defmt` log.
//!
//! The board comes from the ELF itself (the firmware's `TXL_BOARD` symbol names it), and with it
//! the emulator, machine and CPU (`firmware/src/board.rs`: `qemu-system-arm -machine mps2-an386
//! -cpu cortex-m4` for the default board, `qemu-system-riscv32 -machine virt -bios none` for the
//! RISC-V one). QEMU runs with `-icount shift=6` (every instruction advances the virtual clock by 64 ns, which
//! the firmware's timer turns into an instruction count), semihosting for the log, the arguments
//! and the exit code, and no display, serial port or monitor, so it runs with a closed stdin (CI).
//! The `txl-qemu` binary is cargo's runner for the firmware; the tests call [`run`].
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use std::path::Path;
//! use std::time::Duration;
//!
//! let elf = Path::new("firmware/target/thumbv7em-none-eabihf/release/txl-firmware");
//! let outcome = txl_firmware_host::run(elf, &["score"], Some(Duration::from_secs(300)), |line| {
//!     println!("{line}")
//! })?;
//! let score = outcome.lines.iter().rev().find_map(|l| txl_firmware_host::ScoreLine::parse(l));
//! # let _ = score; Ok(()) }
//! ```

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use defmt_decoder::{DecodeError, Table};

use object::{Object, ObjectSection, ObjectSymbol};

/// The boards (`firmware/src/board.rs`).
#[allow(dead_code)]
pub mod board {
    include!("../../src/board.rs");
}

pub use board::{board_named, Board, BOARDS};

/// `-icount shift`: one guest instruction is `2^ICOUNT_SHIFT` ns of virtual time. The firmware
/// assumes this value (`firmware/src/board.rs`).
pub const ICOUNT_SHIFT: u32 = board::ICOUNT_SHIFT;

/// What a run printed and how it ended.
#[derive(Debug)]
pub struct Outcome {
    /// The decoded log, one message a line (`WARN ` / `ERROR ` before those levels).
    pub lines: Vec<String>,
    /// QEMU's exit status: the firmware's semihosting exit code. `None` when it timed out.
    pub status: Option<ExitStatus>,
    /// QEMU's own error output.
    pub stderr: String,
}

impl Outcome {
    /// The firmware exited with code 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The firmware's exit code (`firmware/README.md` lists them: 0 success, 1 an error, 2 bad
    /// arguments, 101 a panic, 102 a fault, ...); `None` when QEMU timed out or was killed by a
    /// signal.
    pub fn exit_code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// The decoded log and QEMU's errors as one text, for failure messages.
    pub fn transcript(&self) -> String {
        let mut text = self.lines.join("\n");
        if !self.stderr.is_empty() {
            text.push_str("\n[qemu stderr]\n");
            text.push_str(&self.stderr);
        }
        match self.status {
            Some(status) => text.push_str(&format!("\n[{status}]")),
            None => text.push_str("\n[timed out]"),
        }
        text
    }
}

/// The board a firmware ELF was built for: its `TXL_BOARD` symbol holds the name.
pub fn elf_board(elf_bytes: &[u8]) -> Result<Board> {
    let file = object::File::parse(elf_bytes).context("not an ELF file")?;
    let symbol = file
        .symbols()
        .find(|s| s.name() == Ok("TXL_BOARD"))
        .context("no TXL_BOARD symbol: not a txl-firmware ELF")?;
    let section = symbol
        .section_index()
        .and_then(|index| file.section_by_index(index).ok())
        .context("TXL_BOARD is in no section")?;
    let data = section.data().context("reading TXL_BOARD's section")?;
    let start = usize::try_from(symbol.address() - section.address())?;
    let name = data
        .get(start..start + usize::try_from(symbol.size())?)
        .context("TXL_BOARD lies outside its section")?;
    let name = std::str::from_utf8(name).context("TXL_BOARD is not text")?;
    board_named(name)
        .ok_or_else(|| anyhow!("the ELF was built for {name:?}, which this runner does not know"))
}

/// Bytes of code and constants an ELF places in its board's flash: every allocated section there
/// but the model image and the tokens (`.txl_image`). The build's fit checks keep
/// [`board::CODE_BYTES`] for them.
pub fn code_bytes(elf_bytes: &[u8]) -> Result<u64> {
    const SHF_ALLOC: u64 = 2;
    let file = object::File::parse(elf_bytes).context("not an ELF file")?;
    let flash = elf_board(elf_bytes)?.flash;
    let flash = u64::from(flash.origin)..u64::from(flash.origin) + flash.bytes as u64;
    Ok(file
        .sections()
        .filter(|s| s.name() != Ok(".txl_image") && flash.contains(&s.address()))
        .filter(|s| matches!(s.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & SHF_ALLOC != 0))
        .map(|s| s.size())
        .sum())
}

/// The QEMU command line that runs `elf` on `board` with semihosting arguments `args` (argument 0
/// is the program name).
pub fn qemu_command(board: &Board, elf: &Path, args: &[&str]) -> Result<Command> {
    let mut semihosting = String::from("enable=on,target=native,arg=txl-firmware");
    for arg in args {
        semihosting.push_str(",arg=");
        // QEMU joins the arguments with spaces; the firmware splits them again, honouring quotes.
        let quoted = if !arg.is_empty() && !arg.contains([' ', '\t']) {
            arg.to_string()
        } else if !arg.contains('"') {
            format!("\"{arg}\"")
        } else if !arg.contains('\'') {
            format!("'{arg}'")
        } else {
            bail!("argument {arg:?} has blanks and both kinds of quotes: it cannot be passed");
        };
        // A comma inside a QEMU option value is written twice.
        semihosting.push_str(&quoted.replace(',', ",,"));
    }
    let mut command = Command::new(board.qemu);
    command.args(["-machine", board.machine]);
    if let Some(cpu) = board.cpu {
        command.args(["-cpu", cpu]);
    }
    command
        .args(board.qemu_options)
        .args(["-display", "none", "-serial", "none", "-monitor", "none"])
        .args(["-icount", &format!("shift={ICOUNT_SHIFT}")])
        .args(["-semihosting-config", &semihosting])
        .arg("-kernel")
        .arg(elf);
    Ok(command)
}

/// The Debian package with `qemu`.
fn qemu_package(qemu: &str) -> &'static str {
    match qemu {
        "qemu-system-arm" => "qemu-system-arm",
        _ => "qemu-system-misc",
    }
}

/// Checks that `board`'s emulator runs; the error says how to install it.
pub fn check_qemu(board: &Board) -> Result<()> {
    let qemu = board.qemu;
    let output = Command::new(qemu).arg("--version").output();
    match output {
        Ok(output) if output.status.success() => Ok(()),
        _ => bail!(
            "{qemu} is not installed: run scripts/test.sh, which installs it \
             (apt-get install {})",
            qemu_package(qemu)
        ),
    }
}

/// Runs `elf` in QEMU with semihosting arguments `args`, decoding its defmt log as it comes
/// (`on_line` sees each message). QEMU is killed after `timeout`.
pub fn run(
    elf: &Path,
    args: &[&str],
    timeout: Option<Duration>,
    mut on_line: impl FnMut(&str),
) -> Result<Outcome> {
    let elf_bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let table = Table::parse(&elf_bytes)
        .map_err(|e| anyhow!("{}: reading the defmt table: {e}", elf.display()))?
        .ok_or_else(|| anyhow!("{}: no defmt data (built without defmt.x?)", elf.display()))?;
    let mut decoder = table.new_stream_decoder();
    let board = elf_board(&elf_bytes).with_context(|| elf.display().to_string())?;

    check_qemu(&board)?;
    let mut child = qemu_command(&board, elf, args)?
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", board.qemu))?;
    let (sender, receiver) = mpsc::channel::<Vec<u8>>();
    let mut stdout = child.stdout.take().context("QEMU's stdout")?;
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = stdout.read(&mut buffer) {
            if sender.send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut stderr_pipe = child.stderr.take().context("QEMU's stderr")?;
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });

    let deadline = timeout.map(|t| Instant::now() + t);
    let mut lines = Vec::new();
    let mut timed_out = false;
    let mut stdout_open = true;
    let status = loop {
        if stdout_open {
            match receiver.recv_timeout(Duration::from_millis(20)) {
                Ok(bytes) => {
                    decoder.received(&bytes);
                    loop {
                        match decoder.decode() {
                            Ok(frame) => {
                                let message = frame.display_message().to_string();
                                let line = match frame.level().map(|l| l.as_str()) {
                                    Some("warn") => format!("WARN {message}"),
                                    Some("error") => format!("ERROR {message}"),
                                    _ => message,
                                };
                                on_line(&line);
                                lines.push(line);
                            }
                            Err(DecodeError::UnexpectedEof) => break,
                            Err(DecodeError::Malformed) => {
                                let _ = child.kill();
                                let _ = child.wait();
                                bail!("malformed defmt frame after {:?}", lines.last());
                            }
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => stdout_open = false,
            }
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(status) = child.try_wait().context("waiting for QEMU")? {
            if !stdout_open {
                break Some(status);
            }
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            let _ = child.kill();
            let _ = child.wait();
            timed_out = true;
            break None;
        }
    };
    let _ = reader.join();
    let stderr = stderr_reader.join().unwrap_or_default();
    debug_assert!(timed_out == status.is_none());
    Ok(Outcome {
        lines,
        status,
        stderr,
    })
}

/// The last line of `score`:
/// `score tokens=N bits_per_token=X digest=0xHHHHHHHH instructions_per_token=Y`, on a board
/// without an FPU followed by `soft_float_calls=S soft_float_calls_per_token=Z`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreLine {
    /// Tokens scored (`N`; `N - 1` are predicted).
    pub tokens: usize,
    /// Mean bits per predicted token, as the host computes it (f64).
    pub bits_per_token: f64,
    /// FNV-1a over the bits of every log-probability (`txl score --json`'s `digest`).
    pub digest: u32,
    /// Instructions executed per token in the forward passes.
    pub instructions_per_token: u64,
    /// Calls into software floating point in the forward passes, all tokens together: printed
    /// on the boards without an FPU (`Board::soft_float`), `None` on the others.
    pub soft_float_calls: Option<u64>,
}

impl ScoreLine {
    /// Parses a `score tokens=...` line.
    pub fn parse(line: &str) -> Option<ScoreLine> {
        let rest = line.strip_prefix("score tokens=")?;
        let line = format!("tokens={rest}");
        Some(ScoreLine {
            tokens: field(&line, "tokens")?.parse().ok()?,
            bits_per_token: field(&line, "bits_per_token")?.parse().ok()?,
            digest: u32::from_str_radix(field(&line, "digest")?.strip_prefix("0x")?, 16).ok()?,
            instructions_per_token: field(&line, "instructions_per_token")?.parse().ok()?,
            soft_float_calls: match field(&line, "soft_float_calls") {
                Some(calls) => Some(calls.parse().ok()?),
                None => None,
            },
        })
    }
}

/// The value of `key=value` in a line of space-separated fields.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_score_line() {
        let line = "score tokens=256 bits_per_token=2.0625 digest=0x0badf00d instructions_per_token=123";
        assert_eq!(
            ScoreLine::parse(line),
            Some(ScoreLine {
                tokens: 256,
                bits_per_token: 2.0625,
                digest: 0x0bad_f00d,
                instructions_per_token: 123,
                soft_float_calls: None,
            })
        );
        let line = "score tokens=256 bits_per_token=2.0625 digest=0x0badf00d instructions_per_token=123 \
                    soft_float_calls=5120 soft_float_calls_per_token=20";
        assert_eq!(
            ScoreLine::parse(line).map(|score| score.soft_float_calls),
            Some(Some(5120))
        );
        assert_eq!(ScoreLine::parse("score: 256 tokens"), None);
    }

    #[cfg(unix)]
    #[test]
    fn the_exit_code_is_the_status_code() {
        use std::os::unix::process::ExitStatusExt;
        let outcome = |status| Outcome {
            lines: vec![],
            status,
            stderr: String::new(),
        };
        // a wait status: the exit code in the second byte, a signal in the low bits
        assert_eq!(outcome(Some(ExitStatus::from_raw(2 << 8))).exit_code(), Some(2));
        assert_eq!(outcome(Some(ExitStatus::from_raw(0))).exit_code(), Some(0));
        assert_eq!(outcome(Some(ExitStatus::from_raw(9))).exit_code(), None);
        assert_eq!(outcome(None).exit_code(), None);
        assert!(outcome(None).transcript().ends_with("[timed out]"));
    }

    #[test]
    fn each_board_gets_its_emulator_machine_and_cpu() {
        let line = |board: &Board| -> String {
            let command = qemu_command(board, Path::new("fw.elf"), &[]).unwrap();
            let args: Vec<String> = command
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            format!("{} {}", command.get_program().to_string_lossy(), args.join(" "))
        };
        assert!(line(&board::MPS2_AN386).starts_with("qemu-system-arm -machine mps2-an386 -cpu cortex-m4 "));
        assert!(line(&board::MPS3_AN547).starts_with("qemu-system-arm -machine mps3-an547 -cpu cortex-m55 "));
        for board in [board::MPS2_AN385, board::MPS2_AN385_V6M] {
            assert!(line(&board).starts_with("qemu-system-arm -machine mps2-an385 -cpu cortex-m3 "));
        }
        assert!(line(&board::RISCV32_VIRT)
            .starts_with("qemu-system-riscv32 -machine virt -bios none -m 64M -display none "));
        for board in BOARDS {
            assert_eq!(board_named(board.name), Some(board));
            assert!(line(&board).contains(" -icount shift=6 "));
        }
    }

    /// `cargo run` in firmware/ starts this runner for every board's target
    /// (firmware/.cargo/config.toml; without it cargo would execute the ELF on the host).
    #[test]
    fn every_board_target_has_the_runner() {
        let config = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../.cargo/config.toml"))
            .expect("reading firmware/.cargo/config.toml");
        for board in BOARDS {
            // Unquoted, as cargo reads `[target.thumbv8m.main-none-eabihf]` too.
            let table = format!("[target.{}]", board.target);
            let at = config
                .find(&table)
                .unwrap_or_else(|| panic!("no {table} in firmware/.cargo/config.toml ({})", board.name));
            let body = &config[at + table.len()..];
            let body = &body[..body.find("\n[").unwrap_or(body.len())];
            assert!(
                body.contains("runner = \"host/qemu-run\""),
                "{table} has no runner in firmware/.cargo/config.toml"
            );
        }
    }

    #[test]
    fn quotes_arguments_with_blanks_and_doubles_commas() {
        let command = qemu_command(
            &BOARDS[0],
            Path::new("fw.elf"),
            &["demo", "--prompt", "In the beginning, God"],
        )
        .unwrap();
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let config = &args[args.iter().position(|a| a == "-semihosting-config").unwrap() + 1];
        assert_eq!(
            config,
            "enable=on,target=native,arg=txl-firmware,arg=demo,arg=--prompt,arg=\"In the beginning,, God\""
        );
    }
}
