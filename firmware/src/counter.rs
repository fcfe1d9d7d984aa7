//! Counting executed instructions under QEMU.
//!
//! QEMU is not cycle-accurate, so the firmware counts instructions, never time. With
//! `-icount shift=S` every guest instruction advances QEMU's virtual clock by exactly `2^S` ns,
//! and the board's CMSDK timer 0 counts that clock down at 25 MHz (40 ns a tick), so
//! `instructions = ticks * 40 / 2^S`. The runner uses `S = 6`: 0.625 instructions a tick. The
//! 32-bit counter wraps every 2^32 ticks (about 2.7e9 instructions); its interrupt counts the
//! wraps, so intervals of any length are measured. The count is the same on every run.

use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::interrupt::InterruptNumber;
use cortex_m::peripheral::NVIC;

use crate::board::{ICOUNT_SHIFT, TIMER0_BASE, TIMER_TICK_NS};

/// Timer 0's interrupt line on the MPS2 (CMSDK APB timer 0).
pub const TIMER0_IRQ: u16 = 8;

const CTRL: usize = TIMER0_BASE;
const VALUE: usize = TIMER0_BASE + 0x04;
const RELOAD: usize = TIMER0_BASE + 0x08;
const INTSTATUS: usize = TIMER0_BASE + 0x0C; // read
const INTCLEAR: usize = TIMER0_BASE + 0x0C; // write
const CTRL_ENABLE: u32 = 1 << 0;
const CTRL_IRQ_ENABLE: u32 = 1 << 3;

/// Wraps of timer 0 (each 2^32 ticks).
static WRAPS: AtomicU32 = AtomicU32::new(0);

#[derive(Clone, Copy)]
struct Timer0Irq;

// SAFETY: 8 is timer 0's interrupt number on the MPS2 board.
unsafe impl InterruptNumber for Timer0Irq {
    fn number(self) -> u16 {
        TIMER0_IRQ
    }
}

/// Timer 0, free-running from `0xFFFF_FFFF` down, its wraps counted.
#[derive(Debug)]
pub struct InstructionCounter(());

impl InstructionCounter {
    /// Starts timer 0 and unmasks its interrupt.
    pub fn start() -> InstructionCounter {
        // SAFETY: timer 0's registers are at `TIMER0_BASE` on this board; nothing else uses the
        // timer. Unmasking its interrupt is sound: the handler only counts wraps.
        unsafe {
            write_volatile(CTRL as *mut u32, 0);
            write_volatile(RELOAD as *mut u32, u32::MAX);
            write_volatile(VALUE as *mut u32, u32::MAX);
            write_volatile(INTCLEAR as *mut u32, 1);
            write_volatile(CTRL as *mut u32, CTRL_ENABLE | CTRL_IRQ_ENABLE);
            NVIC::unmask(Timer0Irq);
        }
        InstructionCounter(())
    }

    /// Ticks since the timer started.
    pub fn ticks(&self) -> u64 {
        cortex_m::interrupt::free(|_| {
            let mut wraps = WRAPS.load(Ordering::Acquire);
            // SAFETY: reading timer 0's counter and interrupt status has no side effects.
            let (value, pending) = unsafe {
                (
                    read_volatile(VALUE as *const u32),
                    read_volatile(INTSTATUS as *const u32) & 1 != 0,
                )
            };
            // A wrap whose interrupt is still pending: a value read after it is near the top.
            if pending && value > u32::MAX / 2 {
                wraps += 1;
            }
            (u64::from(wraps) << 32) + u64::from(u32::MAX - value)
        })
    }

    /// Ticks since `start` (a value of [`InstructionCounter::ticks`]).
    pub fn ticks_since(&self, start: u64) -> u64 {
        self.ticks() - start
    }
}

/// Timer 0's interrupt: one more wrap.
pub fn on_wrap() {
    WRAPS.fetch_add(1, Ordering::AcqRel);
    // SAFETY: writing INTCLEAR acknowledges timer 0's interrupt.
    unsafe { write_volatile(INTCLEAR as *mut u32, 1) };
}

/// Instructions executed in `ticks` timer ticks under `-icount shift=ICOUNT_SHIFT`.
pub fn instructions(ticks: u64) -> u64 {
    (ticks * TIMER_TICK_NS) >> ICOUNT_SHIFT
}
