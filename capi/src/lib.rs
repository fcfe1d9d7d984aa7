//! # txl-capi: txl from C
//!
//! A static library (`libtxl.a`) with the functions `include/txl.h` declares, for firmware and
//! programs written in C or C++: the same engine as `txl-core`, the same bits, no heap.
//!
//! ## How memory works
//! The library allocates nothing. The caller owns every byte:
//! - the model image (`const`, in flash), read in place by [`txl_model_parse`](model::txl_model_parse);
//! - a `txl_model`, a `txl_session` and a `txl_sampler`: small structs of fixed size that the
//!   header declares (`TXL_MODEL_WORDS`, ...), as statics or on the stack, which the library fills;
//! - the arena, `txl_arena_bytes` bytes on a 16-byte boundary, where a session keeps its memory,
//!   activations and scratch, exactly as `txl_core::Session` does;
//! - the buffers that take log-probabilities and saved states.
//!
//! The image and the arena must outlive the session that uses them; a session keeps its own copy
//! of the parsed model, so the `txl_model` may go once the session is made.
//!
//! ## What it refuses to do
//! - Trust a pointer: every function checks each pointer (NULL, alignment for its type, that a
//!   length in bytes fits the address space), each struct (that the function that sets it up did,
//!   by a magic word it writes), each length (outputs large enough), and that the buffers of one
//!   call do not overlap, before it reads or writes anything; each refusal is a `TXL_ERR_*` code
//!   ([`status`]) and changes nothing. What it cannot check is the C contract itself: that a
//!   pointer and its length name memory the caller owns.
//! - Panic: the core returns an error for every bad input (a damaged image, a token out of range,
//!   a foreign state); each becomes a code. A panic would be a bug: the handler then stops the
//!   core in a loop, it never unwinds into C.
//! - Allocate, or use anything of an operating system: the library needs `memcpy`, `memset` and
//!   friends from the C library it is linked with, nothing else.
#![no_std]
#![deny(missing_docs)]
// The C names: `txl_model`, `txl_session`, ...
#![allow(non_camel_case_types)]

pub mod checked;
pub mod model;
pub mod options;
pub mod sampler;
pub mod session;
pub mod status;

/// The version of the API `include/txl.h` declares (`TXL_API_VERSION`): a program can check
/// that the header it was compiled with and the library it links agree.
pub const TXL_API_VERSION: u32 = 1;

/// The version of the API this library implements, `TXL_API_VERSION` of its header.
#[no_mangle]
pub extern "C" fn txl_api_version() -> u32 {
    TXL_API_VERSION
}

/// A panic is a bug (no input causes one): stop here, never unwind into C.
#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// On a host (an operating system's target), the precompiled `core` refers to the personality
/// routine of unwinding, which a `no_std` library with `panic = "abort"` never runs: this stands
/// in for it so that the library links.
#[cfg(all(not(test), not(target_os = "none")))]
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}
