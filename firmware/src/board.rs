// The board: Arm MPS2 with the AN386 FPGA image (Cortex-M4 with FPU), as QEMU's `mps2-an386`
// models it. This file is shared by build.rs (`include!`: memory.x and the fit checks) and the
// firmware (`mod board`), so both read the same numbers.

/// Where the code, the model image and the token file live: SSRAM1 (4 MiB), used as flash.
pub const FLASH_ORIGIN: u32 = 0x0000_0000;
/// Bytes of flash.
pub const FLASH_BYTES: usize = 4 << 20;
/// Where the static arena, the heap and the stack live: SSRAM2/3 (4 MiB).
pub const RAM_ORIGIN: u32 = 0x2000_0000;
/// Bytes of RAM.
pub const RAM_BYTES: usize = 4 << 20;
/// Bytes kept for the stack at the top of RAM; the heap ends below it.
pub const STACK_BYTES: usize = 64 << 10;
/// Flash kept for the code and constants besides the model image and the tokens (the firmware
/// itself is about 115 KiB: 95 KiB of code, 20 KiB of constants).
pub const CODE_BYTES: usize = 192 << 10;
/// RAM kept for statics besides the arena (defmt, the allocator, buffers: a few KiB).
pub const STATIC_BYTES: usize = 16 << 10;
/// CMSDK APB timer 0: counts down at 25 MHz; under `-icount shift=S` one instruction advances
/// virtual time by `2^S` ns, so `instructions = ticks * 40 / 2^S`.
pub const TIMER0_BASE: usize = 0x4000_0000;
/// Nanoseconds per timer tick (25 MHz).
pub const TIMER_TICK_NS: u64 = 40;
/// The `-icount shift` the runner gives QEMU: one instruction is `2^6 = 64` ns.
pub const ICOUNT_SHIFT: u32 = 6;
/// PSRAM (16 MiB): nothing is linked there, and a soft reset (`SYSRESETREQ`) leaves it as it
/// was, so the firmware keeps its session state there across one.
pub const SURVIVING_RAM_ORIGIN: usize = 0x2100_0000;
/// Bytes of PSRAM.
pub const SURVIVING_RAM_BYTES: usize = 16 << 20;
