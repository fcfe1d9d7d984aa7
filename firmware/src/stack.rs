//! How much of the stack reserve a run uses, measured by painting: at boot every word of the
//! reserve below the current stack pointer gets a pattern, and at the end the lowest word that
//! no longer holds it is the deepest the stack went. `score`, `demo` and `bench` report it in a
//! `stack:` line just before their last line; the reserve of a board with little RAM
//! (`Board::stack_bytes`) is sized from these figures.

use core::mem::MaybeUninit;
use core::ptr::addr_of;

/// The pattern painted into the unused stack ("STK!").
const PAINT: u32 = 0x2154_4b53;

/// Bytes left unpainted below the stack pointer at the time of painting: the painting
/// function's own frame.
const MARGIN: usize = 256;

extern "C" {
    /// Lowest address of the stack reserve (memory.x).
    static _stack_end: MaybeUninit<u8>;
    /// The stack's top: the end of RAM (the runtime's linker script).
    static _stack_start: MaybeUninit<u8>;
}

fn bounds() -> (usize, usize) {
    (addr_of!(_stack_end) as usize, addr_of!(_stack_start) as usize)
}

/// Paints the stack reserve below the current stack pointer. Called once, first thing.
#[inline(never)]
pub fn paint() {
    let here = 0u32;
    let sp = core::hint::black_box(addr_of!(here)) as usize;
    let (low, _) = bounds();
    let top = sp.saturating_sub(MARGIN) & !3;
    let mut at = (low + 3) & !3;
    while at < top {
        // SAFETY: `low..top` is the stack reserve below this frame (with a margin): memory no
        // static, heap block or live frame uses; writing it changes nothing anyone reads.
        unsafe { core::ptr::write_volatile(at as *mut u32, PAINT) };
        at += 4;
    }
}

/// Logs the most stack bytes used since [`paint`] and the reserve's size.
pub fn report() {
    let (used, reserved) = used();
    defmt::info!("stack: {=usize} bytes used of {=usize} reserved", used, reserved);
}

/// The most stack bytes used since [`paint`], and the reserve's size.
fn used() -> (usize, usize) {
    let (low, top) = bounds();
    let mut at = (low + 3) & !3;
    // SAFETY: reading the stack reserve below the live frames; every word there is initialized
    // (painted or written by a frame).
    while at < top && unsafe { core::ptr::read_volatile(at as *const u32) } == PAINT {
        at += 4;
    }
    (top - at, top - low)
}
