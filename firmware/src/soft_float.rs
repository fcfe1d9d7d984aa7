//! Counting the calls into software floating point on a board without an FPU
//! (`Board::soft_float`: the Cortex-M3, Armv6-M and RV32IMAC boards).
//!
//! There every `f32` and `f64` operation is a call into `compiler_builtins` (`__aeabi_fadd`,
//! `__aeabi_fcmplt`, `__aeabi_f2iz`, ... on Arm; `__addsf3`, `__ltsf2`, `__fixsfsi`, ... on RISC-V).
//! The build script wraps each of those routines with the linker's `--wrap` and writes the
//! wrappers (`soft_float.s` in `OUT_DIR`): each adds one to [`TXL_SOFT_FLOAT_CALLS`] and jumps to
//! the routine, in `SOFT_FLOAT_WRAPPER_INSTRUCTIONS` instructions, which the instruction counts
//! leave out (`counter::Spent::instructions`). libm's functions (`expf`, `sqrtf`, `fmaxf`, ...)
//! are counted through the routines they call. On the other boards nothing is wrapped and the
//! count stays 0.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::build::{SOFT_FLOAT_COUNTED, SOFT_FLOAT_WRAPPER_INSTRUCTIONS};

/// Calls into the software floating-point routines since boot (wrapping at 2^32). Only the
/// wrappers write it: single-threaded, never from an interrupt handler.
#[used]
#[no_mangle]
static TXL_SOFT_FLOAT_CALLS: AtomicU32 = AtomicU32::new(0);

// The wrappers (empty on a board with an FPU).
core::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/soft_float.s")));

/// Whether this build counts the calls.
pub const COUNTED: bool = SOFT_FLOAT_COUNTED;

/// Instructions one wrapper executes besides the routine itself.
pub const WRAPPER_INSTRUCTIONS: u64 = SOFT_FLOAT_WRAPPER_INSTRUCTIONS;

/// The calls so far (wrapping; only differences count). Always 0, and no instruction, on a board
/// with an FPU.
#[inline(always)]
pub fn calls() -> u32 {
    if COUNTED {
        TXL_SOFT_FLOAT_CALLS.load(Ordering::Relaxed)
    } else {
        0
    }
}
