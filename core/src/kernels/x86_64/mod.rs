//! x86-64 kernels (feature `std`: chosen at run time by [`features`](super::features)). Each
//! gives the portable kernels' bits.
//!
//! - `avx.rs`: AVX, AVX2 and F16C: f32 and f16 rows, weighted rows, int8 and int4 rows, the int8
//!   attention's sums, the input's quantization, the softmax's `exp` eight lanes at a time.
//! - `avx_blocks.rs`: blocks of six f32 or f16 rows against four inputs a step (AVX).
//! - `row_element.rs`: the f32 and f16 rows those kernels read.
//! - `avx512.rs`: AVX-512F: f32 and f16 rows against four inputs, weighted rows, LayerNorm's
//!   sums, the softmax's `exp` sixteen lanes at a time.
//! - `avx512_attention.rs`: the int8 attention's sums for sixteen queries (AVX-512BW).
//! - `vnni.rs`: int8 and int4 rows with `VPDPBUSD` (AVX-512 VNNI and AVX-VNNI).
//! - `vnni_panel.rs`: int8 rows against eight inputs at a time, 48 rows laid out into a panel
//!   (512-bit AVX-512 VNNI).
//! - `amx.rs`: int8 rows in AMX tiles.
//! - `fma.rs`: the fused-order f32 products (AVX2 and FMA).
//! - `prefetch.rs`: asking for the next weights from memory.

pub mod amx;
pub mod avx;
pub mod avx512;
pub mod avx512_attention;
mod avx_blocks;
pub mod fma;
pub mod prefetch;
pub mod row_element;
pub mod vnni;
pub mod vnni_panel;
