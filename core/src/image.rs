//! The model image: a checked view over bytes (`Image::parse`) and, with the `alloc` feature,
//! the writer (`write_image`). The byte layout is documented in `core/FORMAT.md`.
//!
//! `Image::parse` checks everything once: magic, version, length, CRC, config, and that the
//! directory holds exactly the tensors the config needs, in order, with the right shapes, each
//! payload inside the image, 16-byte aligned and not overlapping the previous one. After that,
//! reading a tensor is a few loads and no further checks can fail.

use crate::config::{Config, MAX_CUTOFFS};
use crate::crc32::crc32;
use crate::error::{ArithmeticError, Error};
use crate::fixed_point::{multiplier_of_f32, sqrt_multiplier, Multiplier};
use crate::included;
use crate::tensors::{for_each_tensor, Shape, TensorLayout, TensorName};
use crate::vocab::{Vocabulary, VOCAB_MAGIC};
use crate::weights::{int4_groups, int4_row_bytes, Matrix, MatrixData, Vector};

/// The first eight bytes of every image.
pub const MAGIC: [u8; 8] = *b"TXLMODEL";
/// The format version this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the fixed header (magic, sizes, config).
pub const HEADER_BYTES: usize = 128;
/// Bytes of one directory entry.
pub const ENTRY_BYTES: usize = 80;
/// Bytes of a directory entry's name field (zero-padded ASCII).
pub const NAME_BYTES: usize = 48;
/// Payload alignment, relative to the start of the image.
pub const PAYLOAD_ALIGN: usize = 16;
/// Bytes of the trailing CRC-32.
pub const CRC_BYTES: usize = 4;
/// Header offset of the tensor count: how many directory entries follow the header.
pub const TENSOR_COUNT_AT: usize = 16;
/// Header offset of `vocab_offset`: where the optional vocabulary section starts, 0 for none.
pub const VOCAB_OFFSET_AT: usize = 116;

const FLAG_TIE_WEIGHT: u32 = 1 << 0;
const FLAG_PRE_LNORM: u32 = 1 << 1;
const FLAG_UNTIE_R: u32 = 1 << 2;
const FLAG_SAME_LENGTH: u32 = 1 << 3;
const FLAG_INTEGER: u32 = 1 << 4;
const KNOWN_FLAGS: u32 = FLAG_TIE_WEIGHT | FLAG_PRE_LNORM | FLAG_UNTIE_R | FLAG_SAME_LENGTH | FLAG_INTEGER;
/// Header offset of `frac`: the fraction bits of an integer image's activations (0 in a float
/// image).
pub const FRAC_AT: usize = 120;
pub use crate::fixed_point::MAX_FRAC;
/// The widest `d_model` of an integer image (the integer LayerNorm's row).
pub const MAX_NORM_ROW: u32 = 1 << 14;

/// How a session computes with the image's weights: in floating point, or in integers alone
/// (`docs/INTEGER.md`), with every activation in `Q(frac)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Arithmetic {
    /// f32 activations (images of every dtype).
    Float,
    /// Integer activations in `Q(frac)` (int8 and int4 images).
    Integer {
        /// Fraction bits of the activations, `0..=`[`MAX_FRAC`].
        frac: u32,
    },
}

impl Arithmetic {
    /// `"float"` or `"integer"`.
    pub fn name(self) -> &'static str {
        match self {
            Arithmetic::Float => "float",
            Arithmetic::Integer { .. } => "integer",
        }
    }
}

/// How a tensor's elements are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum Dtype {
    /// IEEE 754 binary32, little-endian.
    F32 = 0,
    /// IEEE 754 binary16, little-endian.
    F16 = 1,
    /// Symmetric int8 with one f32 scale per row (and optionally one per column).
    Int8RowScaled = 2,
    /// Symmetric int4, two values a byte, one f32 scale and one u8 multiplier code per row and
    /// group of columns ([`crate::weights`] has the packing).
    Int4GroupScaled = 3,
}

impl Dtype {
    /// Bytes of the values of a `(rows, cols)` tensor (scales not included); a vector is one
    /// row.
    pub fn values_bytes(self, rows: usize, cols: usize) -> usize {
        match self {
            Dtype::F32 => rows * cols * 4,
            Dtype::F16 => rows * cols * 2,
            Dtype::Int8RowScaled => rows * cols,
            Dtype::Int4GroupScaled => rows * int4_row_bytes(cols),
        }
    }

    fn from_u8(value: u8) -> Option<Dtype> {
        match value {
            0 => Some(Dtype::F32),
            1 => Some(Dtype::F16),
            2 => Some(Dtype::Int8RowScaled),
            3 => Some(Dtype::Int4GroupScaled),
            _ => None,
        }
    }
}

/// Where a host should place an image for speed: the phase `p` (0, 16, 32 or 48) such that an
/// image starting `p` bytes past a 64-byte boundary puts the most payload bytes on 64-byte
/// boundaries, where the kernels' 64-byte loads (an AVX-512 register, a cache line) do not
/// straddle two lines. Read from the header and the directory alone (`prefix`: the image's
/// first [`HEADER_BYTES`] plus [`ENTRY_BYTES`] per tensor, or fewer, which count what they
/// hold), without any check: an image that is not one gets 0, and [`Image::parse`] reports it.
/// Any 16-byte boundary is a valid place; this only changes the speed.
pub fn load_phase(prefix: &[u8]) -> usize {
    if prefix.len() < HEADER_BYTES || prefix[..MAGIC.len()] != MAGIC {
        return 0;
    }
    let count = read_u32(prefix, TENSOR_COUNT_AT) as usize;
    // payload bytes by their offset's place within a line: offset % 64 = 16k
    let mut bytes_at = [0u64; 4];
    for raw in prefix[HEADER_BYTES..].chunks_exact(ENTRY_BYTES).take(count) {
        let (offset, length) = (read_u32(raw, 60) as usize, read_u32(raw, 64));
        bytes_at[offset % 64 / 16] += u64::from(length);
    }
    let mut best = 0;
    for k in 1..4 {
        if bytes_at[k] > bytes_at[best] {
            best = k;
        }
    }
    // an offset of 16k bytes into a line starts one when the image starts 64 - 16k past one
    (64 - 16 * best) % 64
}

/// One validated directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Shape,
    /// Payload offset from the image start.
    pub offset: usize,
    /// Payload length in bytes.
    pub bytes: usize,
    /// Int8: offset of the `rows` f32 row scales. Int4: offset of the one f32 scale.
    pub row_scales_offset: usize,
    /// Int8: offset of the `cols` f32 activation scales, or 0 when there are none. Int4:
    /// offset of the `(rows, groups)` u8 multiplier codes.
    pub act_scales_offset: usize,
    /// Int4: columns per group of a multiplier; 0 for the other dtypes.
    pub group: usize,
}

/// A validated model image, borrowed in place (from flash on a device).
#[derive(Clone, Copy, Debug)]
pub struct Image<'a> {
    bytes: &'a [u8],
    config: Config,
    layout: TensorLayout,
    vocabulary: Option<Vocabulary<'a>>,
    arithmetic: Arithmetic,
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        word.copy_from_slice(src);
    }
    u32::from_le_bytes(word)
}

fn decode_config(header: &[u8]) -> Result<Config, Error> {
    let field = |at: usize| read_u32(header, at);
    let n_cutoffs = field(56);
    let mut cutoffs = [0u32; MAX_CUTOFFS];
    for (i, cutoff) in cutoffs.iter_mut().enumerate() {
        *cutoff = field(60 + 4 * i);
    }
    let flags = field(92);
    if flags & !KNOWN_FLAGS != 0 || header[FRAC_AT + 4..HEADER_BYTES].iter().any(|&b| b != 0) {
        return Err(Error::BadHeader);
    }
    let config = Config {
        n_token: field(24),
        d_model: field(28),
        d_embed: field(32),
        n_head: field(36),
        d_head: field(40),
        d_inner: field(44),
        n_layer: field(48),
        div_val: field(52),
        n_cutoffs,
        cutoffs,
        tie_weight: flags & FLAG_TIE_WEIGHT != 0,
        pre_lnorm: flags & FLAG_PRE_LNORM != 0,
        untie_r: flags & FLAG_UNTIE_R != 0,
        same_length: flags & FLAG_SAME_LENGTH != 0,
        tie_projs: field(96),
        layer_norm_epsilon: f32::from_bits(field(100)),
        tgt_len: field(104),
        mem_len: field(108),
        clamp_len: field(112),
    };
    config.validate()?;
    Ok(config)
}

/// The arithmetic the header asks for (flag bit 4 and `frac`), or why it cannot be.
fn decode_arithmetic(header: &[u8]) -> Result<Arithmetic, Error> {
    let frac = read_u32(header, FRAC_AT);
    if read_u32(header, 92) & FLAG_INTEGER == 0 {
        return match frac {
            0 => Ok(Arithmetic::Float),
            _ => Err(Error::BadHeader),
        };
    }
    if frac > MAX_FRAC {
        return Err(Error::BadArithmetic(ArithmeticError::Frac(frac)));
    }
    Ok(Arithmetic::Integer { frac })
}

#[cfg(feature = "alloc")]
/// Writes the 128-byte header for `config` (image length and tensor count included).
fn encode_header(config: &Config, image_bytes: u32, tensor_count: u32) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    let mut put = |at: usize, value: u32| header[at..at + 4].copy_from_slice(&value.to_le_bytes());
    put(8, FORMAT_VERSION);
    put(12, image_bytes);
    put(TENSOR_COUNT_AT, tensor_count);
    put(20, HEADER_BYTES as u32);
    put(24, config.n_token);
    put(28, config.d_model);
    put(32, config.d_embed);
    put(36, config.n_head);
    put(40, config.d_head);
    put(44, config.d_inner);
    put(48, config.n_layer);
    put(52, config.div_val);
    put(56, config.n_cutoffs);
    for (i, &cutoff) in config.cutoffs.iter().enumerate() {
        put(60 + 4 * i, cutoff);
    }
    let flags = [
        (config.tie_weight, FLAG_TIE_WEIGHT),
        (config.pre_lnorm, FLAG_PRE_LNORM),
        (config.untie_r, FLAG_UNTIE_R),
        (config.same_length, FLAG_SAME_LENGTH),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |acc, (_, bit)| acc | bit);
    put(92, flags);
    put(96, config.tie_projs);
    put(100, config.layer_norm_epsilon.to_bits());
    put(104, config.tgt_len);
    put(108, config.mem_len);
    put(112, config.clamp_len);
    header[..8].copy_from_slice(&MAGIC);
    header
}

/// Whether this build runs tensor `name` stored as `dtype` ([`included`]); else the feature it
/// needs, as [`Error::LeftOut`].
fn built_for(name: TensorName, dtype: Dtype) -> Result<(), Error> {
    let (built, feature) = match dtype {
        // biases, gains and `r_w_bias` / `r_r_bias` in f32 or f16 (as int4 images keep them)
        // are read without kernels of their own
        Dtype::F32 | Dtype::F16 if !name.is_matrix() => (true, ""),
        Dtype::F32 => (included::WEIGHTS_F32, "weights-f32"),
        Dtype::F16 => (included::WEIGHTS_F16, "weights-f16"),
        Dtype::Int8RowScaled => (included::WEIGHTS_INT8, "weights-int8"),
        Dtype::Int4GroupScaled => (included::WEIGHTS_INT4, "weights-int4"),
    };
    if built {
        Ok(())
    } else {
        Err(Error::LeftOut(feature))
    }
}

/// Whether the zero-padded name field equals `name`'s text.
fn name_matches(field: &[u8], name: TensorName) -> bool {
    let (prefix, number, rest) = name.pieces();
    let mut digits = [0u8; 10];
    let mut first = digits.len();
    if let Some(mut n) = number {
        loop {
            first -= 1;
            digits[first] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
    }
    let mut at = 0;
    for piece in [prefix.as_bytes(), &digits[first..], rest.as_bytes()] {
        if field.get(at..at + piece.len()) != Some(piece) {
            return false;
        }
        at += piece.len();
    }
    at < field.len() && field[at..].iter().all(|&b| b == 0)
}

impl<'a> Image<'a> {
    /// Validates `bytes` as a model image. `bytes` must start on a 16-byte boundary.
    pub fn parse(bytes: &'a [u8]) -> Result<Image<'a>, Error> {
        let minimum = HEADER_BYTES + CRC_BYTES;
        if bytes.len() < 12 {
            return Err(Error::Truncated {
                needed: minimum,
                got: bytes.len(),
            });
        }
        if bytes[..8] != MAGIC {
            return Err(Error::BadMagic);
        }
        let version = read_u32(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion(version));
        }
        if bytes.len() < minimum {
            return Err(Error::Truncated {
                needed: minimum,
                got: bytes.len(),
            });
        }
        let declared = read_u32(bytes, 12) as usize;
        if declared > bytes.len() {
            return Err(Error::Truncated {
                needed: declared,
                got: bytes.len(),
            });
        }
        if declared < minimum || declared != bytes.len() {
            return Err(Error::BadHeader);
        }
        let crc_at = declared - CRC_BYTES;
        let stored = read_u32(bytes, crc_at);
        let computed = crc32(&bytes[..crc_at]);
        if stored != computed {
            return Err(Error::BadChecksum { stored, computed });
        }
        if !(bytes.as_ptr() as usize).is_multiple_of(PAYLOAD_ALIGN) {
            return Err(Error::ImageMisaligned);
        }
        if read_u32(bytes, 20) as usize != HEADER_BYTES {
            return Err(Error::BadHeader);
        }
        let config = decode_config(&bytes[..HEADER_BYTES])?;
        let arithmetic = decode_arithmetic(&bytes[..HEADER_BYTES])?;
        let layout = TensorLayout::new(&config);
        let count = read_u32(bytes, TENSOR_COUNT_AT) as usize;
        if count != layout.count() {
            return Err(Error::TensorCount {
                expected: layout.count(),
                found: count,
            });
        }
        let directory_end = count
            .checked_mul(ENTRY_BYTES)
            .and_then(|n| n.checked_add(HEADER_BYTES))
            .ok_or(Error::SizeOverflow)?;
        if directory_end > crc_at {
            return Err(Error::Truncated {
                needed: directory_end.saturating_add(CRC_BYTES),
                got: bytes.len(),
            });
        }
        // The vocabulary, when there is one, follows the tensors: they must end before it. The
        // header must point at one (its magic), aligned, after the directory.
        let vocab_offset = read_u32(bytes, VOCAB_OFFSET_AT) as usize;
        let payload_end = match vocab_offset {
            0 => crc_at,
            at if at >= directory_end
                && at % PAYLOAD_ALIGN == 0
                && at.checked_add(VOCAB_MAGIC.len()).is_some_and(|end| end <= crc_at)
                && bytes[at..at + VOCAB_MAGIC.len()] == VOCAB_MAGIC =>
            {
                at
            }
            _ => return Err(Error::BadHeader),
        };

        let mut image = Image {
            bytes,
            config,
            layout,
            vocabulary: None,
            arithmetic,
        };
        let mut index = 0;
        let mut payload_floor = directory_end;
        let mut result = Ok(());
        for_each_tensor(&config, |name, shape| {
            if result.is_err() {
                return;
            }
            result = image.check_entry(index, name, shape, &mut payload_floor, payload_end);
            index += 1;
        });
        result?;
        if let Arithmetic::Integer { frac } = arithmetic {
            if !included::INTEGER {
                return Err(Error::LeftOut("integer"));
            }
            image.check_integer(frac)?;
        }
        if vocab_offset != 0 {
            let section = &bytes[vocab_offset..crc_at];
            image.vocabulary =
                Some(Vocabulary::parse(section, config.n_token).map_err(Error::BadVocabulary)?);
        }
        Ok(image)
    }

    fn check_entry(
        &self,
        index: usize,
        name: TensorName,
        shape: Shape,
        payload_floor: &mut usize,
        payload_end: usize,
    ) -> Result<(), Error> {
        let at = HEADER_BYTES + index * ENTRY_BYTES;
        let raw = &self.bytes[at..at + ENTRY_BYTES];
        if !name_matches(&raw[..NAME_BYTES], name) {
            return Err(Error::TensorName {
                index,
                expected: name,
            });
        }
        let dtype = Dtype::from_u8(raw[48]).ok_or(Error::TensorDtype(name))?;
        let (dims, ndim) = shape.dims();
        if !dtype_allowed(dtype, name, ndim) {
            return Err(Error::TensorDtype(name));
        }
        let group = u16::from_le_bytes([raw[50], raw[51]]) as usize;
        let group_ok = match dtype {
            Dtype::Int4GroupScaled => int4_group_fits(group, shape.rows_cols().1),
            _ => group == 0,
        };
        let reserved_clear = group_ok && raw[76..80].iter().all(|&b| b == 0);
        if raw[49] as usize != ndim
            || read_u32(raw, 52) != dims[0]
            || read_u32(raw, 56) != dims[1]
            || !reserved_clear
        {
            return Err(Error::TensorShape(name));
        }
        let bounds = Error::TensorBounds(name);
        // Each region must start aligned, after the previous one, and end before the CRC.
        let mut region = |offset: usize, length: usize| -> Result<(), Error> {
            let fits = offset >= *payload_floor
                && offset.is_multiple_of(PAYLOAD_ALIGN)
                && offset.checked_add(length).is_some_and(|end| end <= payload_end);
            if !fits {
                return Err(bounds);
            }
            *payload_floor = offset + length;
            Ok(())
        };
        let offset = read_u32(raw, 60) as usize;
        let length = read_u32(raw, 64) as usize;
        let (rows, cols) = shape.rows_cols();
        if length != dtype.values_bytes(rows, cols) {
            return Err(bounds);
        }
        region(offset, length)?;
        let row_scales = read_u32(raw, 68) as usize;
        let act_scales = read_u32(raw, 72) as usize;
        match dtype {
            Dtype::Int8RowScaled => {
                region(row_scales, rows * 4)?;
                if act_scales != 0 {
                    region(act_scales, cols * 4)?;
                }
            }
            Dtype::Int4GroupScaled => {
                region(row_scales, 4)?;
                region(act_scales, rows * int4_groups(cols, group))?;
            }
            Dtype::F32 | Dtype::F16 if row_scales != 0 || act_scales != 0 => {
                return Err(Error::TensorShape(name));
            }
            Dtype::F32 | Dtype::F16 => {}
        }
        built_for(name, dtype)
    }

    /// Whether sessions compute in floating point or in integers.
    pub fn arithmetic(&self) -> Arithmetic {
        // A build without integer arithmetic refuses integer images, and its sessions' integer
        // branches go with this constant.
        if !included::INTEGER {
            return Arithmetic::Float;
        }
        self.arithmetic
    }

    /// Checks what integer arithmetic needs of the weights, so that every fixed-point
    /// parameter a session derives from them exists: every weight matrix int8 or int4, the
    /// embedding tables and output projections int8 (the projections without activation
    /// scales), every scale a [`Multiplier`] (non-negative, finite, below `2^31`), and an
    /// embedding row's scale times `2^frac` (and `sqrt(d_model)` without projections) too.
    fn check_integer(&self, frac: u32) -> Result<(), Error> {
        let config = self.config;
        // the integer LayerNorm's sums hold rows of up to 2^14 values
        let size = Error::BadArithmetic(ArithmeticError::Size);
        if config.d_model > MAX_NORM_ROW {
            return Err(size);
        }
        let emb_scale = sqrt_multiplier(config.d_model).ok_or(size)?;
        let mut index = 0;
        let mut result = Ok(());
        for_each_tensor(&config, |name, _| {
            let at = index;
            index += 1;
            if result.is_err() || !name.is_matrix() {
                return;
            }
            let fail = |e: fn(TensorName) -> ArithmeticError| Err(Error::BadArithmetic(e(name)));
            let scale_ok = |s: &f32| multiplier_of_f32(*s).is_some();
            result = match self.matrix(at).data {
                MatrixData::F32(_) | MatrixData::F32Fma(_) | MatrixData::F16(_) => {
                    fail(ArithmeticError::FloatWeights)
                }
                MatrixData::Int4 { .. }
                    if matches!(name, TensorName::EmbLayer(_) | TensorName::OutProj(_)) =>
                {
                    fail(ArithmeticError::NeedsInt8)
                }
                MatrixData::Int8 {
                    act_scales: Some(_), ..
                } if matches!(name, TensorName::OutProj(_)) => fail(ArithmeticError::NeedsInt8),
                MatrixData::Int4 { scale, .. } if !scale_ok(&scale) => fail(ArithmeticError::Scale),
                MatrixData::Int4 { .. } => Ok(()),
                MatrixData::Int8 {
                    row_scales,
                    act_scales,
                    ..
                } => {
                    let times = if config.has_emb_proj() {
                        Multiplier::ONE
                    } else {
                        emb_scale
                    };
                    let embedding_ok = |s: &f32| {
                        multiplier_of_f32(*s)
                            .and_then(|m| m.times(times))
                            .and_then(|m| m.times_pow2(frac as i32))
                            .is_some()
                    };
                    let rows_ok = match name {
                        TensorName::EmbLayer(_) => row_scales.iter().all(embedding_ok),
                        _ => row_scales.iter().all(scale_ok),
                    };
                    if rows_ok && act_scales.is_none_or(|a| a.iter().all(scale_ok)) {
                        Ok(())
                    } else {
                        fail(ArithmeticError::Scale)
                    }
                }
            };
        });
        result
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where each tensor sits in the directory.
    pub fn layout(&self) -> &TensorLayout {
        &self.layout
    }

    /// The whole image.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The symbols of the token ids, when the image carries a vocabulary section (word-level
    /// models; byte-level models need none).
    pub fn vocabulary(&self) -> Option<Vocabulary<'a>> {
        self.vocabulary
    }

    /// Directory entry `index` (`index < layout().count()`, validated by `parse`).
    pub fn entry(&self, index: usize) -> Entry {
        let at = HEADER_BYTES + index * ENTRY_BYTES;
        let raw = &self.bytes[at..at + ENTRY_BYTES];
        let shape = match raw[49] {
            1 => Shape::Vector(read_u32(raw, 52)),
            _ => Shape::Matrix(read_u32(raw, 52), read_u32(raw, 56)),
        };
        Entry {
            dtype: Dtype::from_u8(raw[48]).unwrap_or(Dtype::F32),
            shape,
            offset: read_u32(raw, 60) as usize,
            bytes: read_u32(raw, 64) as usize,
            row_scales_offset: read_u32(raw, 68) as usize,
            act_scales_offset: read_u32(raw, 72) as usize,
            group: u16::from_le_bytes([raw[50], raw[51]]) as usize,
        }
    }

    /// Vector tensor `index` (a bias, a LayerNorm gain, `u` or `v`), in place, f32 or f16.
    pub fn vector(&self, index: usize) -> Vector<'a> {
        let entry = self.entry(index);
        match entry.dtype {
            Dtype::F16 => {
                let payload = &self.bytes[entry.offset..entry.offset + entry.bytes];
                // `parse` checked alignment and length, so this cast cannot fail.
                Vector::F16(bytemuck::try_cast_slice(payload).unwrap_or(&[]))
            }
            _ => Vector::F32(self.f32_region(entry.offset, entry.bytes / 4)),
        }
    }

    /// Matrix tensor `index`, in place, in whatever dtype it is stored.
    pub fn matrix(&self, index: usize) -> Matrix<'a> {
        let entry = self.entry(index);
        let (rows, cols) = entry.shape.rows_cols();
        let payload = &self.bytes[entry.offset..entry.offset + entry.bytes];
        // `parse` checked alignment and lengths, so these casts cannot fail.
        let data = match entry.dtype {
            Dtype::F32 => MatrixData::F32(bytemuck::try_cast_slice(payload).unwrap_or(&[])),
            Dtype::F16 => MatrixData::F16(bytemuck::try_cast_slice(payload).unwrap_or(&[])),
            Dtype::Int8RowScaled => MatrixData::Int8 {
                values: bytemuck::try_cast_slice(payload).unwrap_or(&[]),
                row_scales: self.f32_region(entry.row_scales_offset, rows),
                act_scales: (entry.act_scales_offset != 0)
                    .then(|| self.f32_region(entry.act_scales_offset, cols)),
            },
            Dtype::Int4GroupScaled => MatrixData::Int4 {
                values: payload,
                scale: f32::from_bits(read_u32(self.bytes, entry.row_scales_offset)),
                codes: {
                    let at = entry.act_scales_offset;
                    &self.bytes[at..at + rows * int4_groups(cols, entry.group)]
                },
                group: entry.group,
            },
        };
        Matrix { rows, cols, data }
    }

    fn f32_region(&self, offset: usize, len: usize) -> &'a [f32] {
        let bytes = &self.bytes[offset..offset + len * 4];
        bytemuck::try_cast_slice(bytes).unwrap_or(&[])
    }
}

/// Whether tensor `name` of `ndim` dimensions may be stored as `dtype`: weight matrices in any
/// dtype, the vectors and `u` / `v` in f32 or f16.
fn dtype_allowed(dtype: Dtype, name: TensorName, ndim: usize) -> bool {
    matches!(dtype, Dtype::F32 | Dtype::F16) || (name.is_matrix() && ndim == 2)
}

/// Whether an int4 matrix of `cols` columns may have groups of `group`: a multiple of 8, from 8
/// to the row's columns rounded up to 8 (a longer group would mean the same as that), which
/// fits the entry's 16 bits.
pub fn int4_group_fits(group: usize, cols: usize) -> bool {
    group >= 8
        && group.is_multiple_of(8)
        && group <= cols.next_multiple_of(8).max(8)
        && group <= u16::MAX as usize
}

/// A tensor's elements handed to the writer.
#[cfg(feature = "alloc")]
#[derive(Clone, Copy, Debug)]
pub enum Payload<'d> {
    /// f32 elements, row-major.
    F32(&'d [f32]),
    /// f16 elements, row-major.
    F16(&'d [half::f16]),
    /// int8 values with their scales (matrices only): `W[r][c] = values[r][c] * row_scales[r] *
    /// act_scales[c]`.
    Int8 {
        /// `(rows, cols)` values.
        values: &'d [i8],
        /// `(rows)` scales.
        row_scales: &'d [f32],
        /// `(cols)` activation scales, if any.
        act_scales: Option<&'d [f32]>,
    },
    /// int4 values with their scales (matrices only), packed as [`crate::weights`] says:
    /// `W[r][c] = (q[r][c] * int4_multiplier(codes[r][c / group])) as f32 * scale`.
    Int4 {
        /// `(rows, int4_row_bytes(cols))` packed values.
        values: &'d [u8],
        /// The matrix's scale.
        scale: f32,
        /// `(rows, int4_groups(cols, group))` multiplier codes.
        codes: &'d [u8],
        /// Columns per group: a multiple of 8, at least 8, at most 65,528.
        group: usize,
    },
}

#[cfg(feature = "alloc")]
impl Payload<'_> {
    fn dtype(&self) -> Dtype {
        match self {
            Payload::F32(_) => Dtype::F32,
            Payload::F16(_) => Dtype::F16,
            Payload::Int8 { .. } => Dtype::Int8RowScaled,
            Payload::Int4 { .. } => Dtype::Int4GroupScaled,
        }
    }

    /// Whether the payload's lengths are those of a `(rows, cols)` tensor.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        let values_ok = |len: usize| len == self.dtype().values_bytes(rows, cols);
        match self {
            Payload::F32(d) => d.len() == rows * cols,
            Payload::F16(d) => d.len() == rows * cols,
            Payload::Int8 {
                values,
                row_scales,
                act_scales,
            } => {
                values_ok(values.len())
                    && row_scales.len() == rows
                    && act_scales.is_none_or(|a| a.len() == cols)
            }
            Payload::Int4 {
                values, codes, group, ..
            } => {
                int4_group_fits(*group, cols)
                    && values_ok(values.len())
                    && codes.len() == rows * int4_groups(cols, *group)
            }
        }
    }

    /// The regions this payload occupies, in order: values, then any scales.
    fn regions(&self) -> [Option<alloc::vec::Vec<u8>>; 3] {
        let floats = |d: &[f32]| d.iter().flat_map(|v| v.to_le_bytes()).collect();
        match self {
            Payload::F32(d) => [Some(floats(d)), None, None],
            Payload::F16(d) => [
                Some(d.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect()),
                None,
                None,
            ],
            Payload::Int8 {
                values,
                row_scales,
                act_scales,
            } => [
                Some(values.iter().map(|&v| v as u8).collect()),
                Some(floats(row_scales)),
                act_scales.map(floats),
            ],
            Payload::Int4 {
                values, scale, codes, ..
            } => [
                Some(values.to_vec()),
                Some(floats(&[*scale])),
                Some(codes.to_vec()),
            ],
        }
    }
}

/// Builds an image from `config` and its tensors, given in canonical order
/// ([`for_each_tensor`]). Fails with the first tensor that is missing, misplaced, misshapen,
/// or in a dtype its kind cannot have (vectors are f32 or f16).
#[cfg(feature = "alloc")]
pub fn write_image(
    config: &Config,
    tensors: &[(TensorName, Payload<'_>)],
) -> Result<alloc::vec::Vec<u8>, Error> {
    use alloc::vec::Vec;

    config.validate()?;
    let layout = TensorLayout::new(config);
    if tensors.len() != layout.count() {
        return Err(Error::TensorCount {
            expected: layout.count(),
            found: tensors.len(),
        });
    }
    let mut expected = Vec::with_capacity(tensors.len());
    for_each_tensor(config, |name, shape| expected.push((name, shape)));

    let align = |n: usize| n.div_ceil(PAYLOAD_ALIGN) * PAYLOAD_ALIGN;
    let mut entries = Vec::with_capacity(tensors.len() * ENTRY_BYTES);
    let mut payloads: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut offset = align(HEADER_BYTES + tensors.len() * ENTRY_BYTES);
    for (index, ((name, payload), (expected_name, shape))) in tensors.iter().zip(&expected).enumerate() {
        if name != expected_name {
            return Err(Error::TensorName {
                index,
                expected: *expected_name,
            });
        }
        let (dims, ndim) = shape.dims();
        if !dtype_allowed(payload.dtype(), *name, ndim) {
            return Err(Error::TensorDtype(*name));
        }
        let (rows, cols) = shape.rows_cols();
        if !payload.fits(rows, cols) {
            return Err(Error::TensorShape(*name));
        }
        let mut entry = [0u8; ENTRY_BYTES];
        let text = alloc::format!("{name}");
        if text.len() >= NAME_BYTES {
            return Err(Error::TensorName {
                index,
                expected: *name,
            });
        }
        entry[..text.len()].copy_from_slice(text.as_bytes());
        entry[48] = payload.dtype() as u8;
        entry[49] = ndim as u8;
        if let Payload::Int4 { group, .. } = payload {
            entry[50..52].copy_from_slice(&(*group as u16).to_le_bytes());
        }
        entry[52..56].copy_from_slice(&dims[0].to_le_bytes());
        entry[56..60].copy_from_slice(&dims[1].to_le_bytes());
        let regions = payload.regions();
        // values at 60/64; row scales at 68; activation scales at 72.
        for (slot, region) in regions.into_iter().enumerate() {
            let Some(bytes) = region else { continue };
            let at = [60, 68, 72][slot];
            entry[at..at + 4].copy_from_slice(&(offset as u32).to_le_bytes());
            if slot == 0 {
                entry[64..68].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            }
            let next = align(offset + bytes.len());
            payloads.push((offset, bytes));
            offset = next;
        }
        entries.extend_from_slice(&entry);
    }
    let image_bytes = offset + CRC_BYTES;
    if image_bytes > u32::MAX as usize {
        return Err(Error::BadConfig(crate::error::ConfigError::TooLarge));
    }
    let mut image = Vec::with_capacity(image_bytes);
    image.extend_from_slice(&encode_header(config, image_bytes as u32, tensors.len() as u32));
    image.extend_from_slice(&entries);
    for (at, bytes) in payloads {
        image.resize(at, 0);
        image.extend_from_slice(&bytes);
    }
    image.resize(image_bytes - CRC_BYTES, 0);
    let crc = crc32(&image);
    image.extend_from_slice(&crc.to_le_bytes());
    Ok(image)
}

/// `image` with its arithmetic set to `arithmetic` (header flag bit 4 and `frac`) and the CRC
/// rewritten; the tensors stay as they are. `image` must be a whole image (it is not parsed
/// here: parse the result, which checks what integer arithmetic needs of the weights).
#[cfg(feature = "alloc")]
pub fn set_arithmetic(image: &[u8], arithmetic: Arithmetic) -> Result<alloc::vec::Vec<u8>, Error> {
    let minimum = HEADER_BYTES + CRC_BYTES;
    if image.len() < minimum {
        return Err(Error::Truncated {
            needed: minimum,
            got: image.len(),
        });
    }
    let (flag, frac) = match arithmetic {
        Arithmetic::Float => (0, 0),
        Arithmetic::Integer { frac } if frac <= MAX_FRAC => (FLAG_INTEGER, frac),
        Arithmetic::Integer { frac } => return Err(Error::BadArithmetic(ArithmeticError::Frac(frac))),
    };
    let mut out = image.to_vec();
    let flags = read_u32(&out, 92) & !FLAG_INTEGER | flag;
    out[92..96].copy_from_slice(&flags.to_le_bytes());
    out[FRAC_AT..FRAC_AT + 4].copy_from_slice(&frac.to_le_bytes());
    let crc_at = out.len() - CRC_BYTES;
    let crc = crc32(&out[..crc_at]);
    out[crc_at..].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// `image` with its vocabulary section replaced by `section` (or removed, with `None`): the
/// tensors and config stay as they are, the header's `image_bytes` and `vocab_offset` and the
/// CRC are rewritten. `image` must be a whole image (it is not parsed here: parse the result);
/// `section` must be a valid section for the image's `n_token`
/// ([`crate::vocab::encode_section`], or [`Vocabulary::section_bytes`] of another image).
#[cfg(feature = "alloc")]
pub fn set_vocabulary(image: &[u8], section: Option<&[u8]>) -> Result<alloc::vec::Vec<u8>, Error> {
    let minimum = HEADER_BYTES + CRC_BYTES;
    if image.len() < minimum {
        return Err(Error::Truncated {
            needed: minimum,
            got: image.len(),
        });
    }
    if image[..8] != MAGIC {
        return Err(Error::BadMagic);
    }
    let n_token = read_u32(image, 24);
    let crc_at = image.len() - CRC_BYTES;
    let old_offset = read_u32(image, VOCAB_OFFSET_AT) as usize;
    let tensors_end = match old_offset {
        0 => crc_at,
        at if at >= HEADER_BYTES && at <= crc_at => at,
        _ => return Err(Error::BadHeader),
    };
    let mut out = image[..tensors_end].to_vec();
    let mut offset = 0usize;
    if let Some(section) = section {
        let vocabulary = Vocabulary::parse(section, n_token).map_err(Error::BadVocabulary)?;
        out.resize(tensors_end.div_ceil(PAYLOAD_ALIGN) * PAYLOAD_ALIGN, 0);
        offset = out.len();
        out.extend_from_slice(vocabulary.section_bytes());
        out.resize(out.len().div_ceil(PAYLOAD_ALIGN) * PAYLOAD_ALIGN, 0);
    }
    let image_bytes = out.len() + CRC_BYTES;
    let (Ok(image_bytes), Ok(offset)) = (u32::try_from(image_bytes), u32::try_from(offset)) else {
        return Err(Error::BadConfig(crate::error::ConfigError::TooLarge));
    };
    out[12..16].copy_from_slice(&image_bytes.to_le_bytes());
    out[VOCAB_OFFSET_AT..VOCAB_OFFSET_AT + 4].copy_from_slice(&offset.to_le_bytes());
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header and directory with `entries` of `(offset, length)`.
    fn prefix(entries: &[(u32, u32)]) -> [u8; HEADER_BYTES + 4 * ENTRY_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES + 4 * ENTRY_BYTES];
        bytes[..MAGIC.len()].copy_from_slice(&MAGIC);
        bytes[TENSOR_COUNT_AT..][..4].copy_from_slice(&(entries.len() as u32).to_le_bytes());
        for (i, &(offset, length)) in entries.iter().enumerate() {
            let raw = &mut bytes[HEADER_BYTES + i * ENTRY_BYTES..][..ENTRY_BYTES];
            raw[60..64].copy_from_slice(&offset.to_le_bytes());
            raw[64..68].copy_from_slice(&length.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn the_load_phase_puts_the_most_payload_bytes_on_lines() {
        // most bytes at 16 past a line: the image starts 48 past one
        assert_eq!(load_phase(&prefix(&[(464, 100), (592, 4096), (4704, 64)])), 48);
        // most at 32, then 48: 32 and 16
        assert_eq!(load_phase(&prefix(&[(480, 50), (544, 10), (608, 20)])), 32);
        assert_eq!(load_phase(&prefix(&[(496, 4096), (544, 10)])), 16);
        // already on lines, or a tie with the lines: as it is
        assert_eq!(load_phase(&prefix(&[(512, 4096), (656, 64)])), 0);
        assert_eq!(load_phase(&prefix(&[(512, 64), (656, 64)])), 0);
        // a directory cut short counts the entries it holds
        let whole = prefix(&[(464, 4096), (512, 8192)]);
        assert_eq!(load_phase(&whole[..HEADER_BYTES + ENTRY_BYTES]), 48);
        assert_eq!(load_phase(&whole), 0);
        // not an image, or too short to be one: as it is
        assert_eq!(load_phase(&whole[..HEADER_BYTES - 1]), 0);
        let mut other = whole;
        other[0] = b'X';
        assert_eq!(load_phase(&other), 0);
    }
}
