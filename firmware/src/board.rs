// The boards, each as QEMU 7.2 models it (firmware/README.md says what was checked and how).
// This file is shared by build.rs (`include!`: memory.x and the fit checks), the firmware
// (`mod board`; the build script names the board it was built for in `build::BOARD`), the runner
// in host/ (the QEMU command line) and the firmware tests, so all of them read the same numbers.

/// A range of the address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The first address.
    pub origin: u32,
    /// Its size in bytes.
    pub bytes: usize,
}

/// How the firmware counts the instructions it executes. QEMU runs with `-icount shift=S`
/// ([`ICOUNT_SHIFT`]): every guest instruction advances the virtual clock by exactly `2^S` ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// The Arm SysTick on the core's clock (`hz`): 24 bits counting down, its interrupt counts the
    /// wraps; `instructions = ticks * (10^9 / hz) / 2^S`.
    SysTick {
        /// The core clock SysTick counts (its `CLKSOURCE = 1`).
        hz: u32,
    },
    /// The RISC-V `minstret` CSR (64 bits): under `-icount` QEMU 7.2 answers it with the virtual
    /// clock in ns, so `instructions = minstret / 2^S`.
    Minstret,
}

/// How the firmware resets the board (`score --reset-after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reset {
    /// `SYSRESETREQ` in the Arm core's AIRCR: QEMU resets the whole machine.
    SysResetReq,
    /// QEMU's `sifive_test` device at `base`: writing `0x7777` resets the whole machine.
    SifiveTest {
        /// The device's address.
        base: usize,
    },
}

/// A board: what to build for it, where things go, how QEMU runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Board {
    /// The board's name (`TXL_BOARD`, `scripts/firmware.sh BOARD`).
    pub name: &'static str,
    /// The core, as the firmware's log names it.
    pub core: &'static str,
    /// The Rust target the firmware is built for.
    pub target: &'static str,
    /// The emulator.
    pub qemu: &'static str,
    /// QEMU's machine.
    pub machine: &'static str,
    /// QEMU's CPU, if the machine's default is not the one.
    pub cpu: Option<&'static str>,
    /// More QEMU options the board needs.
    pub qemu_options: &'static [&'static str],
    /// The firmware's cargo features a build for this board turns on: the core's kernels for
    /// the extensions its core has (`mve`: Helium). The build script refuses a build whose
    /// features differ.
    pub features: &'static [&'static str],
    /// Where the vector table (or reset entry), the code and the constants live: read-only
    /// memory, "flash"; also the model image and the tokens unless `image` says otherwise.
    pub flash: Region,
    /// Where the model image and the tokens live when not in `flash`.
    pub image: Option<Region>,
    /// Where the statics (the static arena among them), the heap and the stack live.
    pub ram: Region,
    /// RAM that nothing is linked into and that a reset leaves as it was: `score --reset-after`
    /// keeps the session state there. `None`: the board has none, and the firmware refuses
    /// `--reset-after`.
    pub surviving_ram: Option<Region>,
    /// The RAM itself keeps its contents across a system reset (SRAM on a real part does, until
    /// the power goes): when `surviving_ram` is `None` and this is true, the build script keeps
    /// the session state's record at the top of `ram` if it fits beside the arena, the stack and
    /// the statics (and says why not otherwise).
    pub ram_survives_reset: bool,
    /// Bytes kept for the stack at the top of `ram`: [`STACK_BYTES`] on the boards with RAM to
    /// spare, measured (the firmware paints the stack and logs the most it used) where RAM is
    /// scarce.
    pub stack_bytes: usize,
    /// Bytes of `ram` kept for the statics besides the arena (defmt, the allocator, buffers).
    pub static_bytes: usize,
    /// Bytes of `flash` kept for the code and the constants besides the model image and the
    /// tokens (when the image has no region of its own).
    pub code_bytes: usize,
    /// The core has no FPU: every floating-point operation is a call into the software routines
    /// of `compiler_builtins` (`__aeabi_fadd`, `__addsf3`, ...). The firmware counts those calls
    /// (the linker's `--wrap`, set up by the build script) and `score` prints the count.
    pub soft_float: bool,
    /// The instruction counter.
    pub counter: Counter,
    /// How the board resets.
    pub reset: Reset,
}

/// Arm MPS2 with the AN386 FPGA image: Cortex-M4 with FPU (the default board).
pub const MPS2_AN386: Board = Board {
    name: "mps2-an386",
    core: "Cortex-M4F",
    target: "thumbv7em-none-eabihf",
    qemu: "qemu-system-arm",
    machine: "mps2-an386",
    cpu: Some("cortex-m4"),
    qemu_options: &[],
    features: &[],
    // SSRAM1, used as flash.
    flash: Region {
        origin: 0x0000_0000,
        bytes: 4 << 20,
    },
    image: None,
    // SSRAM2/3.
    ram: Region {
        origin: 0x2000_0000,
        bytes: 4 << 20,
    },
    // PSRAM.
    surviving_ram: Some(Region {
        origin: 0x2100_0000,
        bytes: 16 << 20,
    }),
    ram_survives_reset: false,
    stack_bytes: STACK_BYTES,
    static_bytes: STATIC_BYTES,
    code_bytes: CODE_BYTES,
    soft_float: false,
    counter: Counter::SysTick { hz: 25_000_000 },
    reset: Reset::SysResetReq,
};

/// Arm MPS2 with the AN500 FPGA image: Cortex-M7.
pub const MPS2_AN500: Board = Board {
    name: "mps2-an500",
    core: "Cortex-M7",
    target: "thumbv7em-none-eabihf",
    qemu: "qemu-system-arm",
    machine: "mps2-an500",
    cpu: Some("cortex-m7"),
    qemu_options: &[],
    features: &[],
    flash: Region {
        origin: 0x0000_0000,
        bytes: 4 << 20,
    },
    image: None,
    ram: Region {
        origin: 0x2000_0000,
        bytes: 4 << 20,
    },
    // The AN500's PSRAM is at 0x6000_0000 (QEMU leaves 0x2100_0000 unmapped on this board).
    surviving_ram: Some(Region {
        origin: 0x6000_0000,
        bytes: 16 << 20,
    }),
    ram_survives_reset: false,
    stack_bytes: STACK_BYTES,
    static_bytes: STATIC_BYTES,
    code_bytes: CODE_BYTES,
    soft_float: false,
    counter: Counter::SysTick { hz: 25_000_000 },
    reset: Reset::SysResetReq,
};

/// Arm MPS2 with the AN505 FPGA image: Cortex-M33 (Armv8-M Mainline with DSP and FPU) in an
/// IoT Kit subsystem. The core starts in the Secure state with its vector table at
/// `0x1000_0000`, so the firmware uses the Secure aliases of the SSRAMs.
pub const MPS2_AN505: Board = Board {
    name: "mps2-an505",
    core: "Cortex-M33",
    target: "thumbv8m.main-none-eabihf",
    qemu: "qemu-system-arm",
    machine: "mps2-an505",
    cpu: Some("cortex-m33"),
    qemu_options: &[],
    features: &[],
    // SSRAM1 (its Secure alias).
    flash: Region {
        origin: 0x1000_0000,
        bytes: 4 << 20,
    },
    image: None,
    // SSRAM2 and SSRAM3, 2 MiB each, adjacent (their Secure alias).
    ram: Region {
        origin: 0x3800_0000,
        bytes: 4 << 20,
    },
    // The 16 MiB PSRAM QEMU maps at 0x8000_0000.
    surviving_ram: Some(Region {
        origin: 0x8000_0000,
        bytes: 16 << 20,
    }),
    ram_survives_reset: false,
    stack_bytes: STACK_BYTES,
    static_bytes: STATIC_BYTES,
    code_bytes: CODE_BYTES,
    soft_float: false,
    counter: Counter::SysTick { hz: 20_000_000 },
    reset: Reset::SysResetReq,
};

/// Arm MPS3 with the AN547 FPGA image: Cortex-M55 (Armv8.1-M with DSP, FPU and Helium) in an
/// SSE-300 subsystem. The vector table is read at `0x0000_0000`, the 512 KiB ITCM, which holds
/// the code; the model image and the tokens go to the 8 MiB QSPI flash.
pub const MPS3_AN547: Board = Board {
    name: "mps3-an547",
    core: "Cortex-M55",
    target: "thumbv8m.main-none-eabihf",
    qemu: "qemu-system-arm",
    machine: "mps3-an547",
    cpu: Some("cortex-m55"),
    qemu_options: &[],
    features: &["mve"],
    // The ITCM.
    flash: Region {
        origin: 0x0000_0000,
        bytes: 512 << 10,
    },
    // The QSPI flash (read-only in QEMU).
    image: Some(Region {
        origin: 0x2800_0000,
        bytes: 8 << 20,
    }),
    // The SSE-300's SRAM, two banks of 2 MiB.
    ram: Region {
        origin: 0x2100_0000,
        bytes: 4 << 20,
    },
    // The first 16 MiB of the DDR (2 GiB at 0x6000_0000).
    surviving_ram: Some(Region {
        origin: 0x6000_0000,
        bytes: 16 << 20,
    }),
    ram_survives_reset: false,
    stack_bytes: STACK_BYTES,
    static_bytes: STATIC_BYTES,
    code_bytes: CODE_BYTES,
    soft_float: false,
    counter: Counter::SysTick { hz: 32_000_000 },
    reset: Reset::SysResetReq,
};

/// Arm MPS2 with the AN385 FPGA image: Cortex-M3 (Armv7-M: no DSP extension, no FPU). The
/// memory map is the AN386's; the core runs the portable kernels and its floating point in
/// software.
pub const MPS2_AN385: Board = Board {
    name: "mps2-an385",
    core: "Cortex-M3",
    target: "thumbv7m-none-eabi",
    qemu: "qemu-system-arm",
    machine: "mps2-an385",
    cpu: Some("cortex-m3"),
    qemu_options: &[],
    features: &[],
    // SSRAM1, used as flash.
    flash: Region {
        origin: 0x0000_0000,
        bytes: 4 << 20,
    },
    image: None,
    // SSRAM2/3.
    ram: Region {
        origin: 0x2000_0000,
        bytes: 4 << 20,
    },
    // PSRAM.
    surviving_ram: Some(Region {
        origin: 0x2100_0000,
        bytes: 16 << 20,
    }),
    ram_survives_reset: false,
    stack_bytes: STACK_BYTES,
    static_bytes: STATIC_BYTES,
    code_bytes: CODE_BYTES,
    soft_float: true,
    counter: Counter::SysTick { hz: 25_000_000 },
    reset: Reset::SysResetReq,
};

/// The AN385's Cortex-M3 running a `thumbv6m-none-eabi` build: the instruction set of the
/// Cortex-M0 and M0+ (Armv6-M, a subset of Armv7-M), for which QEMU 7.2 has no board with enough
/// RAM. Same machine, memory map and counter as [`MPS2_AN385`]; the instructions counted are the
/// ones an Armv6-M core would execute.
pub const MPS2_AN385_V6M: Board = Board {
    name: "mps2-an385-v6m",
    // One word: `txl-qemu --boards` prints it as a field.
    core: "Armv6-M",
    target: "thumbv6m-none-eabi",
    ..MPS2_AN385
};

/// QEMU's RISC-V `virt` machine with a 32-bit hart (RV32GC; the firmware uses RV32IMAC), run
/// without firmware (`-bios none`): the hart starts in machine mode at the start of the DRAM,
/// which the firmware divides into flash, RAM and the surviving RAM.
pub const RISCV32_VIRT: Board = Board {
    name: "riscv32-virt",
    core: "RV32IMAC",
    target: "riscv32imac-unknown-none-elf",
    qemu: "qemu-system-riscv32",
    machine: "virt",
    cpu: None,
    // 64 MiB of DRAM: QEMU puts its device tree in the top few MiB, above what is used here.
    qemu_options: &["-bios", "none", "-m", "64M"],
    features: &[],
    flash: Region {
        origin: 0x8000_0000,
        bytes: 16 << 20,
    },
    image: None,
    ram: Region {
        origin: 0x8100_0000,
        bytes: 16 << 20,
    },
    surviving_ram: Some(Region {
        origin: 0x8200_0000,
        bytes: 16 << 20,
    }),
    ram_survives_reset: false,
    stack_bytes: STACK_BYTES,
    static_bytes: STATIC_BYTES,
    code_bytes: CODE_BYTES,
    soft_float: true,
    counter: Counter::Minstret,
    reset: Reset::SifiveTest { base: 0x0010_0000 },
};

/// QEMU's `netduinoplus2`: an STM32F405RG (Cortex-M4F at 168 MHz), a part people ship, with
/// the real part's limits. QEMU maps 1 MiB of flash at `0x0800_0000` (aliased at 0, where the
/// core reads its vector table) and 192 KiB of SRAM at `0x2000_0000`; the real part has 128 KiB
/// of SRAM there (SRAM1 and SRAM2) and 64 KiB of core-coupled RAM at `0x1000_0000`, which QEMU
/// does not model. The firmware uses only the first 128 KiB, so what runs here fits the chip.
/// The stack is sized from measurement (the firmware paints it), and a reset leaves the SRAM as
/// it was, on the real part as in QEMU, so the session state can stay in it across a reset.
pub const STM32F405: Board = Board {
    name: "stm32f405",
    core: "Cortex-M4F",
    target: "thumbv7em-none-eabihf",
    qemu: "qemu-system-arm",
    machine: "netduinoplus2",
    cpu: None,
    qemu_options: &[],
    features: &[],
    // The internal flash.
    flash: Region {
        origin: 0x0800_0000,
        bytes: 1 << 20,
    },
    image: None,
    // SRAM1 + SRAM2, contiguous; QEMU's SRAM goes on to 192 KiB, which the part does not have.
    ram: Region {
        origin: 0x2000_0000,
        bytes: 128 << 10,
    },
    surviving_ram: None,
    ram_survives_reset: true,
    stack_bytes: STM32F405_STACK_BYTES,
    static_bytes: STM32F405_STATIC_BYTES,
    code_bytes: STM32F405_CODE_BYTES,
    soft_float: false,
    // QEMU's STM32F405 clocks the core (and so the SysTick) at 168 MHz.
    counter: Counter::SysTick { hz: 168_000_000 },
    reset: Reset::SysResetReq,
};

/// The STM32F405's stack reserve: more than the firmware was measured to use on this board
/// (stack painting: the `stack:` line of its log), 8 136 bytes in `demo` and 13 608 in `score`
/// with tests/fixtures/second in int4, streaming (firmware/README.md).
pub const STM32F405_STACK_BYTES: usize = 16 << 10;
/// The STM32F405's reserve for the statics besides the arena: 72 bytes measured (`.bss` less
/// the arena, `arm-none-eabi-size -A`), with room to spare.
pub const STM32F405_STATIC_BYTES: usize = 1 << 10;
/// The STM32F405's flash kept for code and constants: [`CODE_BYTES`], as on the other boards
/// (456 940 bytes measured on the stm32f405's optimised build: `txl-qemu --code-bytes ELF`).
pub const STM32F405_CODE_BYTES: usize = CODE_BYTES;

/// Every board; the first is the default.
pub const BOARDS: [Board; 8] = [
    MPS2_AN386,
    MPS2_AN500,
    MPS2_AN505,
    MPS3_AN547,
    MPS2_AN385,
    MPS2_AN385_V6M,
    RISCV32_VIRT,
    STM32F405,
];

/// The board called `name`.
pub fn board_named(name: &str) -> Option<Board> {
    BOARDS.iter().copied().find(|board| board.name == name)
}

/// Bytes kept for the stack at the top of RAM; the heap ends below it.
pub const STACK_BYTES: usize = 64 << 10;
/// Flash kept for the code and constants besides the model image and the tokens: the optimised
/// builds (`scripts/firmware.sh`, link-time optimisation) measure up to 469 852 bytes, the
/// Cortex-M4F's build of the integer image (`txl_firmware_host::code_bytes`, `txl-qemu
/// --code-bytes ELF`; every build's figure is in `tools/src/cli/fit/cores.tsv`), the firmware
/// tests' builds (without it) 403 148, and the tests check every build they make against this.
pub const CODE_BYTES: usize = 480 << 10;
/// RAM kept for statics besides the arena (defmt, the allocator, buffers: a few KiB).
pub const STATIC_BYTES: usize = 16 << 10;
/// The `-icount shift` the runner gives QEMU: one instruction is `2^6 = 64` ns.
pub const ICOUNT_SHIFT: u32 = 6;
