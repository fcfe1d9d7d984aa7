//! Counting executed instructions under QEMU.
//!
//! QEMU is not cycle-accurate, so the firmware counts instructions, never time. With
//! `-icount shift=S` every guest instruction advances QEMU's virtual clock by exactly `2^S` ns
//! (the runner uses `S = 6`), and a counter that follows that clock counts instructions:
//!
//! - **Arm**: the SysTick on the core clock (`f` Hz, [`Counter::SysTick`]), so
//!   `instructions = ticks * (10^9 / f) / 2^S` (25 MHz: 40 ns a tick, 0.625 instructions). It
//!   counts down from `2^24 - 1` and wraps every `2^24` ticks (about 10 million instructions); its
//!   exception counts the wraps, so intervals of any length are measured.
//! - **RISC-V**: `minstret`, which QEMU 7.2 answers under `-icount` with the virtual clock in ns
//!   ([`Counter::Minstret`]): `instructions = minstret / 2^S`. 64 bits, no wraps.
//!
//! The count is the same on every run. On a board without an FPU each reading also takes the
//! calls into software floating point so far ([`crate::soft_float`]): the counting wrappers'
//! own instructions are taken off, so the counts are those of the firmware without them.

use crate::board::{Counter, ICOUNT_SHIFT};
use crate::build::BOARD;
use crate::soft_float;

/// The board's counter, started.
#[derive(Debug)]
pub struct InstructionCounter(());

/// A reading of the counter: its ticks, and the calls into software floating point so far.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    ticks: u64,
    soft_float_calls: u32,
}

/// What ran between two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spent {
    /// Ticks of the board's counter.
    pub ticks: u64,
    /// Calls into software floating point (0 on a board with an FPU).
    pub soft_float_calls: u64,
}

impl Spent {
    /// The instructions executed, without the soft-float counting's own (a fixed number per call).
    pub fn instructions(&self) -> u64 {
        instructions(self.ticks).saturating_sub(self.soft_float_calls * soft_float::WRAPPER_INSTRUCTIONS)
    }
}

impl core::ops::AddAssign for Spent {
    fn add_assign(&mut self, other: Spent) {
        self.ticks += other.ticks;
        self.soft_float_calls += other.soft_float_calls;
    }
}

impl InstructionCounter {
    /// Starts the counter.
    pub fn start() -> InstructionCounter {
        arch::start();
        InstructionCounter(())
    }

    /// The counter now (its origin is arbitrary: only differences count).
    pub fn read(&self) -> Reading {
        Reading {
            ticks: arch::ticks(),
            soft_float_calls: soft_float::calls(),
        }
    }

    /// What ran since `start`.
    pub fn since(&self, start: Reading) -> Spent {
        let now = self.read();
        Spent {
            ticks: now.ticks - start.ticks,
            soft_float_calls: u64::from(now.soft_float_calls.wrapping_sub(start.soft_float_calls)),
        }
    }
}

/// Instructions executed in `ticks` ticks of the board's counter under `-icount shift=ICOUNT_SHIFT`.
pub fn instructions(ticks: u64) -> u64 {
    match BOARD.counter {
        Counter::SysTick { hz } => {
            // ticks * (10^9 / hz) / 2^S, with the fraction reduced so that nothing overflows.
            let divisor = gcd(1_000_000_000, u64::from(hz));
            let (numerator, denominator) = (1_000_000_000 / divisor, u64::from(hz) / divisor);
            ticks * numerator / (denominator << ICOUNT_SHIFT)
        }
        Counter::Minstret => ticks >> ICOUNT_SHIFT,
    }
}

const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(target_arch = "arm")]
mod arch {
    use core::sync::atomic::{AtomicU32, Ordering};

    use cortex_m::peripheral::syst::SystClkSource;
    use cortex_m::peripheral::{SCB, SYST};
    use cortex_m_rt::exception;

    /// The SysTick's reload value: it counts `RELOAD..=0`, `2^24` ticks a wrap.
    const RELOAD: u32 = 0x00FF_FFFF;

    /// Wraps of the SysTick (each `2^24` ticks).
    static WRAPS: AtomicU32 = AtomicU32::new(0);

    /// Starts the SysTick on the core clock, free-running, its exception enabled.
    pub fn start() {
        // SAFETY: only the counter uses the SysTick; the firmware takes no other peripherals
        // object, so this one is the only handle.
        let mut syst = unsafe { cortex_m::Peripherals::steal() }.SYST;
        syst.disable_counter();
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(RELOAD);
        syst.clear_current();
        syst.enable_interrupt();
        syst.enable_counter();
    }

    /// Ticks since [`start`].
    pub fn ticks() -> u64 {
        cortex_m::interrupt::free(|_| {
            let mut wraps = WRAPS.load(Ordering::Acquire);
            let value = SYST::get_current();
            // A wrap whose exception is still pending: a value read after it is near the top.
            if SCB::is_pendst_pending() && value > RELOAD / 2 {
                wraps += 1;
            }
            (u64::from(wraps) << 24) + u64::from(RELOAD - value)
        })
    }

    #[exception]
    fn SysTick() {
        // Only this handler writes `WRAPS`, and nothing preempts it, so a load and a store do
        // (Armv6-M has no atomic read-modify-write).
        WRAPS.store(WRAPS.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }
}

#[cfg(target_arch = "riscv32")]
mod arch {
    /// `minstret` counts from the start; nothing to set up.
    pub fn start() {}

    /// `minstret`: the virtual clock in ns under `-icount` (QEMU 7.2).
    pub fn ticks() -> u64 {
        riscv::register::minstret::read64()
    }
}
