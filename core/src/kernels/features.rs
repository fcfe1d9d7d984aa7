//! The one CPU-feature probe: which instruction-set extensions this CPU has, asked at run time
//! (`std` feature: the detection needs the standard library) and kept. The dispatch layer
//! ([`super`]) asks here before it calls a kernel built for an extension; every other build
//! chooses its kernels at compile time (`cortex-m-dsp`, `cortex-m-mve`, NEON on aarch64).

/// The instruction-set extensions this CPU has that the kernels choose from at run time
/// (feature `std`), by name: what a benchmark ran with. Empty where the kernels choose none at
/// run time (NEON on aarch64 is always built in; `SDOT` is chosen).
#[cfg(feature = "std")]
pub fn run_time_extensions() -> std::vec::Vec<&'static str> {
    let mut chosen = std::vec::Vec::new();
    #[cfg(target_arch = "x86_64")]
    for (name, present) in [
        ("AVX+F16C", has_avx_f16c()),
        ("AVX2", has_avx2()),
        ("FMA", has_avx2_fma()),
        ("AVX-512F", has_avx512f()),
        ("AVX-512 VNNI", has_avx512_vnni()),
        ("AVX-VNNI", has_avx_vnni()),
        ("AMX-INT8", has_amx_int8()),
    ] {
        if present {
            chosen.push(name);
        }
    }
    #[cfg(target_arch = "aarch64")]
    if has_dotprod() {
        chosen.push("SDOT");
    }
    chosen
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub use x86_64::*;

#[cfg(all(feature = "std", target_arch = "aarch64"))]
pub use aarch64::*;

/// x86-64: AVX, AVX2, F16C, FMA, AVX-512 (F, BW, VNNI), AVX-VNNI and AMX.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
mod x86_64 {
    use core::arch::asm;
    use core::sync::atomic::{AtomicU8, Ordering};

    /// Whether this CPU has AVX2 (detected once, then cached by the standard library).
    #[inline]
    pub fn has_avx2() -> bool {
        std::is_x86_feature_detected!("avx2")
    }

    /// Whether this CPU converts f16 to f32 in hardware (F16C; detected once, then cached).
    #[inline]
    pub fn has_f16c() -> bool {
        std::is_x86_feature_detected!("f16c")
    }

    /// Whether this CPU has AVX and F16C, what the AVX float kernels need (every x86-64 CPU with
    /// AVX since 2012 has both).
    #[inline]
    pub fn has_avx_f16c() -> bool {
        std::is_x86_feature_detected!("avx") && has_f16c()
    }

    /// Whether this CPU has AVX-512F (the AVX-512F float kernels; every such CPU has F16C too, which
    /// the f16 rows also need, checked here all the same).
    #[inline]
    pub fn has_avx512f() -> bool {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("f16c")
    }

    /// Whether this CPU executes each 512-bit operation as two 256-bit halves: AMD's Zen 4 (family
    /// 19h; Zen 3, the same family, has no AVX-512). There 512-bit registers add no arithmetic over
    /// AVX2, and the AVX-512F float kernel runs rows of 512 columns or more slower than the AVX2 tiles
    /// (`x86_64/avx_blocks.rs`; 29 against 37 G multiply-accumulates a second on 1024 columns and sixteen
    /// inputs, measured), which [the dispatch](super) then prefers where they apply.
    /// Asked once (CPUID leaves 0 and 1), then kept.
    pub fn splits_512_bit_operations() -> bool {
        static SPLITS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *SPLITS.get_or_init(|| {
            if cfg!(miri) {
                return false;
            }
            // SAFETY: CPUID exists on every x86-64 CPU (the intrinsics are safe in newer Rust).
            #[allow(unused_unsafe)]
            let (vendor, signature) = unsafe {
                let vendor = core::arch::x86_64::__cpuid(0);
                (vendor, core::arch::x86_64::__cpuid(1).eax)
            };
            // "AuthenticAMD", four bytes a register in EBX, EDX, ECX
            let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
            let base_family = (signature >> 8) & 0xf;
            let family = if base_family == 0xf {
                base_family + ((signature >> 20) & 0xff)
            } else {
                base_family
            };
            amd && family == 0x19
        })
    }

    /// Whether this CPU has AVX-512F, BW and VL (the int8 attention's sums for a block of queries, `x86_64/avx512_attention.rs`).
    #[inline]
    pub fn has_avx512bw() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
    }

    /// Whether this CPU has AVX-512 VNNI with 256-bit registers (`x86_64::vnni::evex`'s kernels).
    #[inline]
    pub fn has_avx512_vnni() -> bool {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("avx512vnni")
            && std::is_x86_feature_detected!("avx512vl")
    }

    /// Whether this CPU has AVX-VNNI (`x86_64::vnni::vex`'s kernels).
    #[inline]
    pub fn has_avx_vnni() -> bool {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("avxvnni")
    }

    /// Whether this CPU has AVX-512 VNNI on 512-bit registers (and the AVX-512F the panel needs).
    #[inline]
    pub fn has_vnni_512() -> bool {
        has_avx512_vnni() && std::is_x86_feature_detected!("avx512f")
    }

    /// Whether this CPU has AVX2 and FMA (the fused-order kernel, `x86_64/fma.rs`).
    #[inline]
    pub fn has_avx2_fma() -> bool {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }

    /// Whether the tile registers are usable: 0 not yet asked, 1 no, 2 yes.
    static AMX_STATE: AtomicU8 = AtomicU8::new(0);

    /// Whether this CPU has AMX with int8 products (and AVX-512F) and the operating system lets this
    /// process use the tile registers (`x86_64/amx.rs`). The first call asks Linux for them
    /// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); the answer is kept. Linux refuses
    /// when a thread's alternate signal stack is too small for the tile state, and then the other
    /// int8 kernels run.
    pub fn has_amx_int8() -> bool {
        match AMX_STATE.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => {
                // (AVX-512F for the transposes; every CPU with AMX has it, but a virtual machine
                // could say otherwise)
                let usable =
                    cpu_has_amx_int8() && std::is_x86_feature_detected!("avx512f") && os_grants_tiles();
                AMX_STATE.store(if usable { 2 } else { 1 }, Ordering::Relaxed);
                usable
            }
        }
    }

    /// CPUID leaf 7: AMX-TILE (EDX bit 24) and AMX-INT8 (EDX bit 25).
    fn cpu_has_amx_int8() -> bool {
        if cfg!(miri) {
            return false;
        }
        // SAFETY: CPUID exists on every x86-64 CPU (the intrinsics are safe in newer Rust).
        #[allow(unused_unsafe)]
        let (max_leaf, leaf) = unsafe {
            (
                core::arch::x86_64::__cpuid(0).eax,
                core::arch::x86_64::__cpuid_count(7, 0),
            )
        };
        max_leaf >= 7 && leaf.edx & (1 << 24) != 0 && leaf.edx & (1 << 25) != 0
    }

    /// Asks Linux to enable the tile data state for this process; true if it did.
    #[cfg(target_os = "linux")]
    fn os_grants_tiles() -> bool {
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let result: i64;
        // SAFETY: `arch_prctl(ARCH_REQ_XCOMP_PERM, ..)` only changes which register state the kernel
        // saves for this process; it reads and writes no memory of ours. The `syscall` instruction
        // clobbers rcx and r11, declared here.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => result,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        result == 0
    }

    /// Other systems: not asked, so not used.
    #[cfg(not(target_os = "linux"))]
    fn os_grants_tiles() -> bool {
        false
    }
}

/// aarch64: the dot-product extension (NEON itself is in every aarch64 build).
#[cfg(all(feature = "std", target_arch = "aarch64"))]
mod aarch64 {
    /// Whether this CPU has the dot-product extension (`SDOT`; detected once, then cached).
    #[inline]
    pub fn has_dotprod() -> bool {
        std::arch::is_aarch64_feature_detected!("dotprod")
    }
}

#[cfg(all(test, feature = "std", target_arch = "x86_64"))]
mod tests {
    #[test]
    fn the_extensions_named_are_the_cpus() {
        let named = super::run_time_extensions();
        for (name, present) in [
            ("AVX2", std::is_x86_feature_detected!("avx2")),
            ("AVX-512F", std::is_x86_feature_detected!("avx512f")),
            (
                "AVX-512 VNNI",
                std::is_x86_feature_detected!("avx512vnni")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx2"),
            ),
        ] {
            assert_eq!(named.contains(&name), present, "{name} in {named:?}");
        }
    }
}
