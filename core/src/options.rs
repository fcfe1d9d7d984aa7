//! The settings of a session, and the words that name them.
//!
//! The same words are used on the command line, in the firmware's build variables and in its
//! arguments: `empty|zeros` ([`MemInit`]), `f32|f16|int8` ([`MemDtype`]) and
//! `session|segment|folded` ([`PositionKeys`]). Each type parses them with [`FromStr`] and prints
//! them with [`Display`](fmt::Display), so every tool reads and writes one spelling.
//!
//! ```
//! use txl_core::{MemDtype, MemInit, OptionWord, PositionKeys};
//!
//! assert_eq!("zeros".parse::<MemInit>(), Ok(MemInit::Zeros));
//! assert_eq!("int8".parse::<MemDtype>(), Ok(MemDtype::Int8));
//! assert_eq!(PositionKeys::PerSegment.to_string(), "segment");
//! assert!("bf16".parse::<MemDtype>().is_err());
//! ```

use core::fmt;
use core::str::FromStr;

use crate::config::Config;

/// How the recurrence memory starts (and restarts after [`Session::reset`](crate::Session::reset)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MemInit {
    /// No memory: the first segment sees only itself (the original PyTorch code).
    #[default]
    Empty,
    /// `mem_len` all-zero hidden states (Hugging Face and the original TensorFlow code).
    Zeros,
}

/// Where the position term `(q + v) · R_d` of the attention scores comes from. The position
/// keys `R_d = W_r · pos_emb(d)` depend only on the distance and the layer, so they can be kept
/// or recomputed (same bits either way), or never formed at all: `W_r` folds into the query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PositionKeys {
    /// Computed once per session for every layer: the fastest, `n_layer` tables of RAM.
    #[default]
    PerSession,
    /// Recomputed for each layer of each segment from a kept table of `pos_emb`: two tables of
    /// RAM instead of `n_layer`, at `klen × d_model × n_head·d_head` MACs per layer and segment.
    PerSegment,
    /// No keys: `(q + v) · (W_r pos_emb(d)) = (W_rᵀ (q + v)) · pos_emb(d)`, so each query and
    /// head folds `W_r` in once (`d_head × d_model` MACs) and meets a kept table of `pos_emb`
    /// (`d_model` MACs per key instead of `d_head`). One table of RAM, of `pos_emb`, and the
    /// fewest bytes; another summation order, so other bits than the two modes above (within
    /// the same tolerance of the reference).
    FoldedIntoQuery,
}

/// Evaluation settings; [`SessionOptions::from_config`] takes the model's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SessionOptions {
    /// Longest segment [`Session::forward`](crate::Session::forward) accepts (sizes the activations).
    pub tgt_len: u32,
    /// Positions remembered between segments.
    pub mem_len: u32,
    /// Largest relative distance with its own position embedding; 0 means no clamping.
    pub clamp_len: u32,
    /// Every query attends to the same number of keys.
    pub same_length: bool,
    /// How the memory starts.
    pub mem_init: MemInit,
    /// How the cached keys and values are stored.
    pub mem_dtype: MemDtype,
    /// Whether the position keys are kept for the session, recomputed per segment, or folded
    /// into the queries.
    pub position_keys: PositionKeys,
}

impl SessionOptions {
    /// The model's default evaluation settings, with an empty memory start.
    pub fn from_config(config: &Config) -> SessionOptions {
        SessionOptions {
            tgt_len: config.tgt_len,
            mem_len: config.mem_len,
            clamp_len: config.clamp_len,
            same_length: config.same_length,
            mem_init: MemInit::Empty,
            mem_dtype: MemDtype::F32,
            position_keys: PositionKeys::PerSession,
        }
    }

    /// With [`PositionKeys::FoldedIntoQuery`], how the distances are split for the tables of
    /// `pos_emb`: `(block, blocks)`, distance `d` in block `d / block` (each query and head
    /// rotates its folded query once per block it reaches, `2 d_model` MACs; with one block,
    /// never).
    pub fn folded_blocks(&self) -> (usize, usize) {
        split_distances(self.distances())
    }

    /// Number of distinct position keys: distances `0..mem_len + tgt_len`, clamped.
    pub fn distances(&self) -> usize {
        let longest = (self.mem_len as usize).saturating_add(self.tgt_len as usize);
        if self.clamp_len > 0 {
            longest.min(self.clamp_len as usize + 1)
        } else {
            longest
        }
    }
}

/// The options as `txl inspect` prints them, each field's name and value:
/// `tgt_len 4  mem_len 6  clamp_len 0  same_length false  mem_init empty  mem_dtype f32  position_keys session`.
/// With `{:#}`, as a clause of a sentence:
/// `tgt_len 4, mem_len 6, clamp_len 0, same_length false, mem_init empty, mem_dtype f32, position keys session`.
///
/// ```
/// use txl_core::{MemInit, SessionOptions};
/// # let config = txl_core::Config { n_token: 50, d_model: 16, d_embed: 16, n_head: 2, d_head: 8,
/// #     d_inner: 32, n_layer: 2, cutoffs: [0; 8], n_cutoffs: 0, div_val: 1, tie_weight: true,
/// #     tie_projs: 0, pre_lnorm: false, untie_r: true, layer_norm_epsilon: 1e-5, tgt_len: 4,
/// #     mem_len: 6, clamp_len: 0, same_length: false };
/// let options = SessionOptions { mem_init: MemInit::Zeros, ..SessionOptions::from_config(&config) };
/// assert_eq!(
///     options.to_string(),
///     "tgt_len 4  mem_len 6  clamp_len 0  same_length false  mem_init zeros  mem_dtype f32  position_keys session"
/// );
/// assert_eq!(
///     format!("{options:#}"),
///     "tgt_len 4, mem_len 6, clamp_len 0, same_length false, mem_init zeros, mem_dtype f32, position keys session"
/// );
/// ```
impl fmt::Display for SessionOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (sep, position_keys) = if f.alternate() {
            (", ", "position keys")
        } else {
            ("  ", "position_keys")
        };
        write!(
            f,
            "tgt_len {}{sep}mem_len {}{sep}clamp_len {}{sep}same_length {}{sep}mem_init {}{sep}mem_dtype {}{sep}\
             {position_keys} {}",
            self.tgt_len,
            self.mem_len,
            self.clamp_len,
            self.same_length,
            self.mem_init,
            self.mem_dtype,
            self.position_keys
        )
    }
}

impl SessionOptions {
    /// The options as a Rust expression, for generated code (a firmware's build script, `txl
    /// export`): `SessionOptions`, `MemInit`, `MemDtype` and `PositionKeys` each named with `path`
    /// before it (`""` where the module imports them, `"txl_core::"` where it does not), one
    /// field a line.
    ///
    /// ```
    /// use txl_core::SessionOptions;
    /// # let config = txl_core::Config { n_token: 50, d_model: 16, d_embed: 16, n_head: 2, d_head: 8,
    /// #     d_inner: 32, n_layer: 2, cutoffs: [0; 8], n_cutoffs: 0, div_val: 1, tie_weight: true,
    /// #     tie_projs: 0, pre_lnorm: false, untie_r: true, layer_norm_epsilon: 1e-5, tgt_len: 4,
    /// #     mem_len: 6, clamp_len: 0, same_length: false };
    /// let options = SessionOptions::from_config(&config);
    /// assert_eq!(
    ///     format!("const OPTIONS: SessionOptions = {};", options.rust_literal("")),
    ///     "const OPTIONS: SessionOptions = SessionOptions {
    ///     tgt_len: 4,
    ///     mem_len: 6,
    ///     clamp_len: 0,
    ///     same_length: false,
    ///     mem_init: MemInit::Empty,
    ///     mem_dtype: MemDtype::F32,
    ///     position_keys: PositionKeys::PerSession,
    /// };"
    /// );
    /// ```
    pub fn rust_literal<'p>(&self, path: &'p str) -> RustLiteral<'p> {
        RustLiteral { options: *self, path }
    }
}

/// [`SessionOptions`] written as a Rust expression by its [`Display`](fmt::Display); see
/// [`SessionOptions::rust_literal`].
#[derive(Clone, Copy, Debug)]
pub struct RustLiteral<'p> {
    options: SessionOptions,
    path: &'p str,
}

impl fmt::Display for RustLiteral<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (o, path) = (&self.options, self.path);
        writeln!(f, "{path}SessionOptions {{")?;
        writeln!(f, "    tgt_len: {},", o.tgt_len)?;
        writeln!(f, "    mem_len: {},", o.mem_len)?;
        writeln!(f, "    clamp_len: {},", o.clamp_len)?;
        writeln!(f, "    same_length: {},", o.same_length)?;
        // The variants' names, as `Debug` writes them.
        writeln!(f, "    mem_init: {path}MemInit::{:?},", o.mem_init)?;
        writeln!(f, "    mem_dtype: {path}MemDtype::{:?},", o.mem_dtype)?;
        writeln!(f, "    position_keys: {path}PositionKeys::{:?},", o.position_keys)?;
        f.write_str("}")
    }
}

/// A word that names none of an option's values; its [`Display`](fmt::Display) lists the
/// accepted words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UnknownWord {
    /// What the option is (`"memory start"`, ...).
    pub option: &'static str,
    /// The accepted words.
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {}: expected one of ", self.option)?;
        for (i, word) in self.expected.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(word)?;
        }
        Ok(())
    }
}

impl core::error::Error for UnknownWord {}

/// An option whose values are named by words: the same words on the command line, in the
/// firmware's build variables and in its arguments. Implemented for [`MemInit`], [`MemDtype`]
/// and [`PositionKeys`]; generic tools (a command-line parser, say) take any `OptionWord`.
pub trait OptionWord: Copy + FromStr<Err = UnknownWord> + fmt::Display + Send + Sync + 'static {
    /// Every value, in declaration order.
    const ALL: &'static [Self];
    /// Every value's word, in the order of [`OptionWord::ALL`].
    const WORDS: &'static [&'static str];
    /// The word for this value.
    fn word(self) -> &'static str;
    /// One line saying what this value does.
    fn help(self) -> &'static str;
}

/// One spelling per value: `words!(Type, "option", [Value => "word": "help", ...])`
/// implements [`OptionWord`], [`FromStr`] and [`Display`](fmt::Display) for an option enum.
macro_rules! words {
    ($ty:ident, $option:literal, [$($value:ident => $word:literal : $help:literal),+ $(,)?]) => {
        impl OptionWord for $ty {
            const ALL: &'static [$ty] = &[$($ty::$value),+];
            const WORDS: &'static [&'static str] = &[$($word),+];

            fn word(self) -> &'static str {
                match self {
                    $($ty::$value => $word),+
                }
            }

            fn help(self) -> &'static str {
                match self {
                    $($ty::$value => $help),+
                }
            }
        }

        impl FromStr for $ty {
            type Err = UnknownWord;

            fn from_str(word: &str) -> Result<Self, UnknownWord> {
                match word {
                    $($word => Ok($ty::$value),)+
                    _ => Err(UnknownWord { option: $option, expected: <$ty as OptionWord>::WORDS }),
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.word())
            }
        }
    };
}

words!(MemInit, "memory start", [
    Empty => "empty": "No memory at the start (the original PyTorch code)",
    Zeros => "zeros": "mem_len all-zero hidden states (Hugging Face, the original TensorFlow code)",
]);
words!(MemDtype, "memory dtype", [
    F32 => "f32": "f32 (exact)",
    F16 => "f16": "f16",
    Int8 => "int8": "int8 with one scale per position and head",
]);
words!(PositionKeys, "position-key mode", [
    PerSession => "session": "One table per layer, computed once (fastest)",
    PerSegment => "segment":
        "One table, recomputed for each layer of each segment (two tables of RAM instead of n_layer)",
    FoldedIntoQuery => "folded":
        "No keys: W_r folded into each query, scored against one table of pos_emb (least RAM, other bits)",
]);

/// How the cached keys and values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MemDtype {
    /// f32: exact.
    #[default]
    F32,
    /// f16: half the bytes.
    F16,
    /// Symmetric int8 with one f32 scale per position and head: about a quarter of the bytes.
    Int8,
}

impl MemDtype {
    /// Bytes to store `rows` rows of `width` elements split into heads of `d_head`.
    pub fn bytes(self, rows: usize, width: usize, d_head: usize) -> Option<usize> {
        let elements = rows.checked_mul(width)?;
        match self {
            MemDtype::F32 => elements.checked_mul(4),
            MemDtype::F16 => elements.checked_mul(2),
            // values, padded to 16 bytes, then one f32 scale per head
            MemDtype::Int8 => {
                int8_values_bytes(elements)?.checked_add((elements / d_head.max(1)).checked_mul(4)?)
            }
        }
    }

    /// Bytes of one position's row of `width` elements in heads of `d_head` in a saved state:
    /// the elements, and for int8 one f32 scale per head after them (no padding).
    pub(crate) fn row_bytes(self, width: usize, d_head: usize) -> Option<usize> {
        match self {
            MemDtype::F32 => width.checked_mul(4),
            MemDtype::F16 => width.checked_mul(2),
            MemDtype::Int8 => width.checked_add((width / d_head.max(1)).checked_mul(4)?),
        }
    }
}

/// Bytes of the int8 values of `elements`, padded so the scales after them are aligned.
pub(crate) fn int8_values_bytes(elements: usize) -> Option<usize> {
    Some(elements.checked_add(15)? / 16 * 16)
}

/// `(block, coarse)` for `distances` (at least 1): blocks of `block = ⌈2 √distances⌉`
/// distances, `coarse = ⌈distances / block⌉` of them, when the `block + coarse` table rows and
/// the rotated query take fewer rows than `distances`; else one block of every distance (no
/// rotation). The rotations cost about `2 · coarse / distances` of the position products
/// (under 20% from 65 distances up, 3% at 3,800).
pub(crate) fn split_distances(distances: usize) -> (usize, usize) {
    let distances = distances.max(1);
    let four = distances.saturating_mul(4);
    // the smallest block with block² >= 4 · distances
    let block = (four - 1).isqrt() + 1;
    let coarse = distances.div_ceil(block);
    if block + coarse + 1 < distances {
        (block, coarse)
    } else {
        (distances, 1)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    fn round_trip<T: OptionWord + PartialEq + fmt::Debug>() {
        assert_eq!(T::ALL.len(), T::WORDS.len());
        for (&value, &word) in T::ALL.iter().zip(T::WORDS) {
            assert_eq!(value.word(), word);
            assert_eq!(word.parse::<T>(), Ok(value));
            assert_eq!(value.to_string(), word);
            assert!(!value.help().is_empty());
        }
        let unknown = "no such word".parse::<T>().unwrap_err();
        assert_eq!(unknown.expected, T::WORDS);
    }

    #[test]
    fn every_word_parses_to_its_value_and_prints_back() {
        round_trip::<MemInit>();
        round_trip::<MemDtype>();
        round_trip::<PositionKeys>();
    }

    #[test]
    fn the_words_are_the_documented_ones() {
        // README, `txl --help` and the firmware's build variables use these spellings.
        assert_eq!(MemInit::WORDS, ["empty", "zeros"]);
        assert_eq!(MemDtype::WORDS, ["f32", "f16", "int8"]);
        assert_eq!(PositionKeys::WORDS, ["session", "segment", "folded"]);
    }
}
