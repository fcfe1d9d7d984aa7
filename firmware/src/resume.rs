//! A score that survives a soft reset: before the reset, the session state and how far the
//! score got go to RAM that the reset leaves alone; after it, the firmware picks them up and
//! goes on, and prints the digest an uninterrupted run prints.
//!
//! Only boards with RAM that a reset leaves alone can do this (`build::SURVIVING_RAM`: the
//! board's `surviving_ram`, or the top of its RAM where the RAM itself survives a reset and the
//! record fits); the others refuse `--reset-after`, saying why.
//!
//! The record at the start of that RAM: a 64-byte header (below) with its own
//! CRC-32, then the session state as `Session::save_state` writes it (which has its own CRC and
//! says which model and options it belongs to). The header is cleared as soon as it is read, so
//! a second reset starts afresh.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `TXLRESUM` |
//! | 8 | 4 | next segment to score |
//! | 12 | 4 | tokens predicted so far |
//! | 16 | 4 | the digest so far |
//! | 20 | 4 | zero (the session state says its own length) |
//! | 24 | 8 | the sum of ln p so far (f64) |
//! | 32 | 8 | timer ticks spent in forward passes so far |
//! | 40 | 8 | calls into software floating point in them so far (0 on a board with an FPU) |
//! | 48 | 8 | of those, the score's own (its sum of ln p in f64) |
//! | 56 | 4 | CRC-32 of bytes 0..56 |

use txl_core::digest::Digest;
use txl_core::{crc32, Session};

use crate::board::Reset;
use crate::build::BOARD;
use crate::counter::Spent;
use crate::Failure;

const MAGIC: [u8; 8] = *b"TXLRESUM";
const HEADER_BYTES: usize = 64;

/// How far a score got.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// The next segment to score.
    pub next_segment: usize,
    /// Tokens predicted so far.
    pub predicted: usize,
    /// The digest of every log-probability so far.
    pub digest: Digest,
    /// The sum of every ln p so far, in order.
    pub sum: f64,
    /// The forward passes so far: the counter's ticks and the calls into software floating
    /// point (the callbacks that take the log-probabilities included).
    pub spent: Spent,
    /// Of those calls, the score's own: its sum of ln p in f64.
    pub scoring_soft_float_calls: u64,
    /// Whether this run picked up after a reset.
    pub resumed: bool,
}

impl Progress {
    /// Nothing scored yet.
    pub fn start() -> Progress {
        Progress {
            next_segment: 0,
            predicted: 0,
            digest: Digest::new(),
            sum: 0.0,
            spent: Spent::default(),
            scoring_soft_float_calls: 0,
            resumed: false,
        }
    }
}

/// Why `--reset-after` is refused on a board without surviving RAM.
pub const NO_SURVIVING_RAM: &str =
    "--reset-after needs RAM that survives a reset, and this build has none (firmware/README.md)";

/// The surviving RAM, if the build has any.
fn region() -> Option<&'static mut [u8]> {
    let region = crate::build::SURVIVING_RAM?;
    // SAFETY: the surviving RAM is RAM on this board that the linker script places nothing in and
    // no other code touches; this firmware is single-threaded and uses the slice returned here
    // only until the next call (`take` and `save_and_reset` never overlap).
    Some(unsafe { core::slice::from_raw_parts_mut(region.origin as usize as *mut u8, region.bytes) })
}

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from(get_u32(bytes, at)) | (u64::from(get_u32(bytes, at + 4)) << 32)
}

/// If a reset left a record, restores its session state into `session` and returns how far
/// the score got; `None` on a cold start. The record is cleared either way.
pub fn take(session: &mut Session<'_, '_>) -> Result<Option<Progress>, Failure> {
    let Some(region) = region() else {
        return Ok(None);
    };
    let header = &region[..HEADER_BYTES];
    if header[..8] != MAGIC || get_u32(header, 56) != crc32(&header[..56]) {
        return Ok(None);
    }
    let progress = Progress {
        next_segment: get_u32(header, 8) as usize,
        predicted: get_u32(header, 12) as usize,
        digest: Digest::resume(get_u32(header, 16)),
        sum: f64::from_bits(get_u64(header, 24)),
        spent: Spent {
            ticks: get_u64(header, 32),
            soft_float_calls: get_u64(header, 40),
        },
        scoring_soft_float_calls: get_u64(header, 48),
        resumed: true,
    };
    region[..8].fill(0);
    session.restore_state(&region[HEADER_BYTES..])?;
    Ok(Some(progress))
}

/// Saves the session state and `progress` to the surviving RAM and resets the core.
pub fn save_and_reset(session: &Session<'_, '_>, progress: &Progress) -> Result<(), Failure> {
    let region = region().ok_or(Failure::Args(NO_SURVIVING_RAM))?;
    let (header, rest) = region.split_at_mut(HEADER_BYTES);
    let state_len = session.save_state(rest)?;
    header.fill(0);
    header[..8].copy_from_slice(&MAGIC);
    let fields: [(usize, u32); 3] = [
        (8, progress.next_segment as u32),
        (12, progress.predicted as u32),
        (16, progress.digest.value()),
    ];
    for (at, value) in fields {
        header[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
    header[24..32].copy_from_slice(&progress.sum.to_bits().to_le_bytes());
    let wide: [(usize, u64); 3] = [
        (32, progress.spent.ticks),
        (40, progress.spent.soft_float_calls),
        (48, progress.scoring_soft_float_calls),
    ];
    for (at, value) in wide {
        header[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    let crc = crc32(&header[..56]);
    header[56..60].copy_from_slice(&crc.to_le_bytes());
    defmt::info!(
        "score: session state saved ({=usize} bytes) after segment {=usize}; resetting",
        state_len,
        progress.next_segment
    );
    reset()
}

/// Resets the whole board, as its [`Reset`] says.
fn reset() -> ! {
    match BOARD.reset {
        #[cfg(target_arch = "arm")]
        Reset::SysResetReq => {
            cortex_m::asm::dsb();
            cortex_m::peripheral::SCB::sys_reset()
        }
        #[cfg(target_arch = "riscv32")]
        Reset::SifiveTest { base } => {
            // SAFETY: the board has QEMU's `sifive_test` device at `base`; writing 0x7777 to it
            // resets the machine and touches no memory.
            unsafe { core::ptr::write_volatile(base as *mut u32, 0x7777) };
            loop {
                core::hint::spin_loop();
            }
        }
        #[allow(unreachable_patterns)] // a board whose reset this architecture cannot do
        _ => unreachable!("the board's reset does not match its architecture"),
    }
}
