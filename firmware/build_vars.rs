// The build-time variables of the firmware, read by `build.rs` and cleared or set by the tests
// (tests/tests/firmware.rs includes this file too, so the two lists cannot drift apart).

/// Every environment variable `build.rs` reads.
pub const BUILD_VARS: [&str; 11] = [
    "TXL_BOARD",
    "TXL_MODEL",
    "TXL_DTYPE",
    "TXL_TOKENS",
    "TXL_TGT_LEN",
    "TXL_MEM_LEN",
    "TXL_CLAMP_LEN",
    "TXL_SAME_LENGTH",
    "TXL_MEM_INIT",
    "TXL_MEM_DTYPE",
    "TXL_POSITION_KEYS",
];
