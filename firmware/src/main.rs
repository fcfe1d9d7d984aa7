//! # txl-firmware: the txl core on microcontrollers, bit-exact with the host
//!
//! The same `txl-core` the host tools use, unmodified, on the boards of [`board`] as QEMU models
//! them: Arm MPS2/MPS3 boards with a Cortex-M4F (the default, `mps2-an386`), M7, M33, M55 or M3
//! (also running Armv6-M code), and RISC-V's `virt` machine with an RV32IMAC hart. Everything is
//! decided at build time (see `build.rs`), the board included (`TXL_BOARD`):
//!
//! - **The model image** lives in flash (`include_bytes!`, 16-byte aligned, in the section
//!   `.txl_image` that the memory map places in the board's flash) and is read in place:
//!   `Model::parse` checks it once, the forward pass reads the weights where they are.
//! - **The arena** is a static buffer of exactly `Session::arena_bytes` for the build-time
//!   options, computed by the build script with the core itself, so an arena that cannot fit the
//!   RAM fails the build with the shortfall in bytes. With `--arena heap` the same firmware
//!   instead sizes its arena at boot (from the run-time options) and takes it from the heap.
//! - **Two modes**: `score` scores the token file embedded at build time and prints bits per
//!   token, an FNV-1a digest of every log-probability's bits (the same as `txl score --json`'s
//!   `digest`) and the instructions executed per token (on a board without an FPU also the calls
//!   into software floating point, [`soft_float`]); `demo` continues a prompt.
//! - **Logs** go out through `defmt` over semihosting and are decoded on the host (`host/`).
//!
//! Arguments come through semihosting (`cargo run --release -- demo --prompt "And God said"`):
//! see [`args`].

#![no_std]
#![no_main]

extern crate alloc;

mod args;
mod bench;
mod bench_integer;
#[allow(dead_code)] // the memory map is for build.rs; the firmware reads the board's devices
mod board;
mod counter;
mod demo;
mod resume;
mod score;
mod soft_float;
mod stack;

use core::mem::MaybeUninit;
use core::ptr::{addr_of, addr_of_mut};
use core::sync::atomic::{AtomicBool, Ordering};

use defmt::{error, info};
use embedded_alloc::LlffHeap;
use txl_core::arena::ArenaLayout;
use txl_core::{Model, OptionWord, PositionKeys, Session, SessionOptions};

use crate::args::{ArenaSource, Mode};

// The critical section implementation (single core) and the defmt transport.
#[cfg(target_arch = "arm")]
use cortex_m as _;
use defmt_semihosting as _;
#[cfg(target_arch = "riscv32")]
use riscv as _;

/// What the build script decided: image, tokens, options, arena sizes.
#[allow(dead_code)]
mod build {
    include!(concat!(env!("OUT_DIR"), "/build_config.rs"));
}

/// A 16-byte-aligned wrapper: model images and arenas must start on a 16-byte boundary.
#[repr(C, align(16))]
struct Aligned<T: ?Sized>(T);

/// The model image, in flash (the board's image region, if it has one).
#[link_section = ".txl_image"]
static IMAGE: Aligned<[u8; build::IMAGE_BYTES]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/model.txl")));

/// The tokens `score` reads, next to the image: every byte is one token id.
#[link_section = ".txl_image"]
static TOKENS: [u8; build::TOKEN_BYTES] = *include_bytes!(concat!(env!("OUT_DIR"), "/tokens.bin"));

/// The board's name, which the runner (`host/`) reads from the ELF to start the board's QEMU.
#[used]
#[no_mangle]
static TXL_BOARD: [u8; build::BOARD_NAME.len()] = build::BOARD_NAME;

/// The static arena, exactly `Session::arena_bytes` for the build-time options (in `.bss`).
static mut ARENA: Aligned<[u8; build::ARENA_BYTES]> = Aligned([0; build::ARENA_BYTES]);

/// The heap: the RAM between the statics and the stack reserve.
#[global_allocator]
static HEAP: LlffHeap = LlffHeap::empty();

extern "C" {
    /// End of the statics (cortex-m-rt's linker script).
    static __sheap: MaybeUninit<u8>;
    /// Lowest address of the stack reserve (memory.x).
    static _stack_end: MaybeUninit<u8>;
}

/// Why a run stopped.
#[derive(Debug)]
pub enum Failure {
    /// The core returned an error.
    Core(txl_core::Error),
    /// The command line could not be understood.
    Args(&'static str),
    /// A kernel gave other sums than the portable code (`bench`'s check).
    KernelMismatch(&'static str),
    /// The heap cannot hold what `bench` needs.
    BenchHeapTooSmall {
        /// Heap bytes `bench` needs.
        needed: usize,
        /// Heap bytes free.
        free: usize,
    },
    /// The heap cannot hold the arena.
    HeapTooSmall {
        /// Arena bytes needed.
        needed: usize,
        /// Heap bytes free.
        free: usize,
    },
}

impl defmt::Format for Failure {
    fn format(&self, f: defmt::Formatter<'_>) {
        match self {
            Failure::Core(error) => defmt::write!(f, "txl-core: {}", error),
            Failure::Args(message) => defmt::write!(f, "{=str}", message),
            Failure::KernelMismatch(kernel) => {
                defmt::write!(f, "{=str} differs from the portable code", kernel)
            }
            Failure::BenchHeapTooSmall { needed, free } => defmt::write!(
                f,
                "bench needs {=usize} bytes of heap, this build has {=usize} free (the arena takes the rest of the RAM)",
                needed,
                free
            ),
            Failure::HeapTooSmall { needed, free } => defmt::write!(
                f,
                "the arena needs {=usize} bytes, the heap has {=usize} free: {=usize} bytes short",
                needed,
                free,
                needed.saturating_sub(*free)
            ),
        }
    }
}

impl From<txl_core::Error> for Failure {
    fn from(error: txl_core::Error) -> Failure {
        Failure::Core(error)
    }
}

#[cfg_attr(target_arch = "arm", cortex_m_rt::entry)]
#[cfg_attr(target_arch = "riscv32", riscv_rt::entry)]
fn main() -> ! {
    stack::paint();
    let code = match run() {
        Ok(()) => 0,
        Err(failure) => {
            error!("{}", failure);
            match failure {
                Failure::Args(_) => 2,
                _ => 1,
            }
        }
    };
    semihosting::process::exit(code)
}

fn run() -> Result<(), Failure> {
    init_heap();
    let cli = args::parse()?;
    let counter = counter::InstructionCounter::start();
    if cli.mode == Mode::Bench {
        return bench::run(&counter);
    }
    let start = counter.read();
    let model = Model::parse(&IMAGE.0)?;
    let parse_instructions = counter.since(start).instructions();
    let config = model.config();
    info!(
        "txl-firmware on {=str} ({=str}): image {=usize} bytes in flash at {=usize:#010x} ({=str})",
        build::BOARD.core,
        build::BOARD.name,
        IMAGE.0.len(),
        IMAGE.0.as_ptr() as usize,
        build::MODEL_SOURCE
    );
    info!(
        "image checked in place: {=u64} instructions (CRC-32, header, every tensor's bounds)",
        parse_instructions
    );
    info!(
        "model: n_layer {=u32} d_model {=u32} n_head {=u32} d_head {=u32} d_inner {=u32} n_token {=u32}",
        config.n_layer, config.d_model, config.n_head, config.d_head, config.d_inner, config.n_token
    );
    let options = cli.options();
    info!(
        "session: tgt_len {=u32} mem_len {=u32} clamp_len {=u32} same_length {=bool} mem_init {=str} mem_dtype {=str} position_keys {=str}",
        options.tgt_len,
        options.mem_len,
        options.clamp_len,
        options.same_length,
        options.mem_init.word(),
        options.mem_dtype.word(),
        options.position_keys.word()
    );

    let arena = arena(&model, &options, cli.arena)?;
    let start = counter.read();
    let session = Session::new(&model, arena, options)?;
    let position_keys = match options.position_keys {
        PositionKeys::PerSession => "position keys for every distance and layer, computed once",
        PositionKeys::PerSegment => "position embeddings for every distance; keys recomputed per segment",
        PositionKeys::FoldedIntoQuery => {
            "position embeddings for every distance; W_r folded into the queries"
        }
    };
    info!(
        "session ready: {=u64} instructions ({=str})",
        counter.since(start).instructions(),
        position_keys
    );
    match cli.mode {
        Mode::Score => score::run(session, &TOKENS, &counter, cli.reset_after),
        Mode::Demo => demo::run(session, &cli.demo, &counter),
        Mode::Bench => bench::run(&counter),
    }
}

/// The arena for `options`: the static one (sized at build time) or a fresh one from the heap.
fn arena(
    model: &Model<'_>,
    options: &SessionOptions,
    source: ArenaSource,
) -> Result<&'static mut [u8], Failure> {
    let layout = ArenaLayout::new(model.config(), model.image().arithmetic(), options)?;
    let needed = layout.total_bytes();
    let arena = match source {
        ArenaSource::Static => {
            info!(
                "arena bytes {=usize} (static, computed at build time for tgt_len {=u32} mem_len {=u32})",
                build::ARENA_BYTES,
                build::OPTIONS.tgt_len,
                build::OPTIONS.mem_len
            );
            info!(
                "arena breakdown: memory {=usize} position keys {=usize} activations {=usize} scratch {=usize} parameters {=usize}",
                build::ARENA_MEMORY_BYTES,
                build::ARENA_POSITION_KEY_BYTES,
                build::ARENA_ACTIVATION_BYTES,
                build::ARENA_SCRATCH_BYTES,
                build::ARENA_PARAMETER_BYTES
            );
            static_arena().ok_or(Failure::Args("the static arena is taken"))?
        }
        ArenaSource::Heap => {
            let free = HEAP.free();
            info!(
                "arena bytes {=usize} (from the heap, sized at boot; {=usize} bytes free)",
                needed, free
            );
            info!(
                "arena breakdown: memory {=usize} position keys {=usize} activations {=usize} scratch {=usize} parameters {=usize}",
                layout.memory_bytes(),
                layout.position_key_bytes(),
                layout.activation_bytes(),
                layout.scratch_bytes(),
                layout.parameter_bytes()
            );
            heap_arena(needed).ok_or(Failure::HeapTooSmall { needed, free })?
        }
    };
    Ok(arena)
}

/// The static arena; `None` after the first call.
fn static_arena() -> Option<&'static mut [u8]> {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    // The firmware is single-threaded and no interrupt handler calls this, so a load and a store
    // do (Armv6-M has no atomic swap).
    if TAKEN.load(Ordering::Acquire) {
        return None;
    }
    TAKEN.store(true, Ordering::Release);
    // SAFETY: `TAKEN` hands out this one `&mut` to `ARENA` at most once, and nothing else
    // touches `ARENA`.
    Some(unsafe { &mut (*addr_of_mut!(ARENA)).0 })
}

/// `bytes` zeroed, 16-byte-aligned bytes from the heap, kept for the rest of the run.
fn heap_arena(bytes: usize) -> Option<&'static mut [u8]> {
    let layout = core::alloc::Layout::from_size_align(bytes.max(16), 16).ok()?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` is a fresh, zeroed allocation of at least `bytes` bytes that is never freed,
    // so the slice is valid, initialized and exclusive for `'static`.
    Some(unsafe { core::slice::from_raw_parts_mut(ptr, bytes) })
}

/// Heap bytes free now.
pub fn heap_free() -> usize {
    HEAP.free()
}

/// Gives the heap the RAM between the end of the statics and the stack reserve.
fn init_heap() {
    let start = addr_of!(__sheap) as usize;
    let end = addr_of!(_stack_end) as usize;
    // SAFETY: called once, before any allocation; `__sheap.._stack_end` is RAM that no static
    // and no stack uses (memory.x asserts that `__sheap <= _stack_end`).
    unsafe { HEAP.init(start, end.saturating_sub(start)) }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    error!("panic: {}", defmt::Display2Format(info));
    semihosting::process::exit(101)
}

#[cfg(target_arch = "arm")]
#[cortex_m_rt::exception]
unsafe fn HardFault(frame: &cortex_m_rt::ExceptionFrame) -> ! {
    error!("hard fault at pc {=u32:#010x}", frame.pc());
    semihosting::process::exit(102)
}

#[cfg(target_arch = "arm")]
#[cortex_m_rt::exception]
unsafe fn DefaultHandler(irqn: i16) {
    error!("unexpected interrupt {=i16}", irqn);
    semihosting::process::exit(103)
}

/// Every RISC-V exception (an illegal instruction, a misaligned or faulting access, ...).
#[cfg(target_arch = "riscv32")]
#[export_name = "ExceptionHandler"]
fn exception_handler(_frame: &riscv_rt::TrapFrame) -> ! {
    let cause = riscv::register::mcause::read().bits();
    let pc = riscv::register::mepc::read();
    error!("exception {=usize} at pc {=usize:#010x}", cause, pc);
    semihosting::process::exit(102)
}

/// Interrupts are never enabled on RISC-V; one arriving is a bug.
#[cfg(target_arch = "riscv32")]
#[export_name = "DefaultHandler"]
fn default_handler() {
    error!("unexpected interrupt");
    semihosting::process::exit(103)
}
