//! The f32 image being quantized ([`Source`]): each tensor's [`Plan`], the image built of the
//! plans, and the weights-only quantization ([`quantize_weights`]).

use half::f16;
use txl_core::image::{set_vocabulary, write_image, Payload};
use txl_core::tensors::{for_each_tensor, Shape, TensorName};
use txl_core::weights::{int4_groups, int4_row_bytes};
use txl_core::{Config, Model};

use super::options::{check_group, Target, VectorDtype};
use super::{int4, int8};
use crate::error::Error;

/// How one tensor is stored.
#[derive(Clone, Debug)]
pub(super) enum Plan {
    F32,
    F16,
    /// int8 with these smoothing factors, rounded plainly.
    Int8(Option<Vec<f32>>),
    /// int8, already quantized (by the calibrated quantizer's error-compensated rounding).
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    Quantized(std::rc::Rc<int8::Int8Matrix>),
    /// int4 with this many columns a group, rounded plainly.
    Int4(usize),
    /// int4, already quantized.
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    Int4Quantized(std::rc::Rc<int4::Int4Matrix>),
}

impl Plan {
    /// How a vector is stored as `dtype` says.
    pub(super) fn vector(dtype: VectorDtype) -> Plan {
        match dtype {
            VectorDtype::F32 => Plan::F32,
            VectorDtype::F16 => Plan::F16,
        }
    }

    /// The dtype's name in the report.
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    pub(super) fn dtype(&self) -> &'static str {
        match self {
            Plan::F32 => "f32",
            Plan::F16 => "f16",
            Plan::Int8(_) | Plan::Quantized(_) => "int8",
            Plan::Int4(_) | Plan::Int4Quantized(_) => "int4",
        }
    }
}

/// A tensor as the image stores it.
enum Stored {
    F32,
    F16(Vec<f16>),
    Int8(int8::Int8Matrix),
    /// The matrix and its packed values.
    Int4(int4::Int4Matrix, Vec<u8>),
}

/// The source model's tensors, in f32, and its vocabulary section (kept in every image built).
pub(super) struct Source {
    pub(super) config: Config,
    pub(super) tensors: Vec<(TensorName, Shape, Vec<f32>)>,
    vocabulary: Option<Vec<u8>>,
}

impl Source {
    pub(super) fn read(model: &Model<'_>) -> Source {
        let config = *model.config();
        let image = model.image();
        let mut tensors = Vec::new();
        let mut index = 0;
        for_each_tensor(&config, |name, shape| {
            let data = if name.is_matrix() {
                let matrix = image.matrix(index);
                let mut dense = vec![0.0f32; matrix.rows * matrix.cols];
                for (r, row) in dense.chunks_exact_mut(matrix.cols).enumerate() {
                    matrix.row_to_f32(r, row);
                }
                dense
            } else {
                image.vector(index).iter().collect()
            };
            tensors.push((name, shape, data));
            index += 1;
        });
        let vocabulary = image.vocabulary().map(|v| v.section_bytes().to_vec());
        Source {
            config,
            tensors,
            vocabulary,
        }
    }

    /// Every matrix rounded plainly to `target` (int4 in groups of `group` columns), the
    /// vectors stored as `vectors`.
    pub(super) fn plain_plans(&self, target: Target, group: usize, vectors: VectorDtype) -> Vec<Plan> {
        self.tensors
            .iter()
            .map(|(name, _, _)| match (name.is_matrix(), target) {
                (false, _) => Plan::vector(vectors),
                (true, Target::F16) => Plan::F16,
                (true, _) if target.is_int4(*name) => Plan::Int4(group),
                (true, _) => Plan::Int8(None),
            })
            .collect()
    }

    /// Builds an image storing tensor `i` as `plans[i]`; returns it and each tensor's SQNR.
    pub(super) fn build(&self, plans: &[Plan]) -> Result<(Vec<u8>, Vec<f64>), Error> {
        let mut stored = Vec::with_capacity(plans.len());
        let mut sqnr = Vec::with_capacity(plans.len());
        for ((_, shape, data), plan) in self.tensors.iter().zip(plans) {
            let cols = shape.rows_cols().1;
            let (item, approximation) = match plan {
                Plan::F32 => (Stored::F32, None),
                Plan::F16 => {
                    let halves: Vec<f16> = data.iter().map(|&v| f16::from_f32(v)).collect();
                    let back = halves.iter().map(|v| v.to_f32()).collect();
                    (Stored::F16(halves), Some(back))
                }
                Plan::Int8(smooth) => {
                    let q = int8::quantize(data, cols, smooth.as_deref());
                    let back = q.dequantize(cols);
                    (Stored::Int8(q), Some(back))
                }
                Plan::Quantized(q) => {
                    let back = q.dequantize(cols);
                    (Stored::Int8((**q).clone()), Some(back))
                }
                Plan::Int4(group) => {
                    let q = int4::quantize(data, cols, *group);
                    let (back, packed) = (q.dequantize(cols), q.packed(cols));
                    (Stored::Int4(q, packed), Some(back))
                }
                Plan::Int4Quantized(q) => {
                    let (back, packed) = (q.dequantize(cols), q.packed(cols));
                    (Stored::Int4((**q).clone(), packed), Some(back))
                }
            };
            sqnr.push(approximation.map_or(f64::INFINITY, |a| int8::sqnr_db(data, &a)));
            stored.push(item);
        }
        Ok((self.write(&stored)?, sqnr))
    }

    /// Bytes of the image [`Source::build`] makes of `plans`, without quantizing anything: the
    /// same writer, given zeros of the lengths each plan stores.
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    pub(super) fn image_bytes(&self, plans: &[Plan]) -> Result<usize, Error> {
        let stored: Vec<Stored> = self
            .tensors
            .iter()
            .zip(plans)
            .map(|((_, shape, _), plan)| {
                let (rows, cols) = shape.rows_cols();
                let values = rows * cols;
                let int8 = |act_scales: Option<usize>| int8::Int8Matrix {
                    values: vec![0; values],
                    row_scales: vec![0.0; rows],
                    act_scales: act_scales.map(|n| vec![0.0; n]),
                };
                let int4 = |group: usize| {
                    let group = int4::stored_group(cols, group);
                    let q = int4::Int4Matrix {
                        values: Vec::new(),
                        scale: 0.0,
                        codes: vec![0; rows * int4_groups(cols, group)],
                        group,
                    };
                    Stored::Int4(q, vec![0; rows * int4_row_bytes(cols)])
                };
                match plan {
                    Plan::F32 => Stored::F32,
                    Plan::F16 => Stored::F16(vec![f16::ZERO; values]),
                    Plan::Int8(smooth) => Stored::Int8(int8(smooth.as_ref().map(Vec::len))),
                    Plan::Quantized(q) => Stored::Int8(int8(q.act_scales.as_ref().map(Vec::len))),
                    Plan::Int4(group) => int4(*group),
                    Plan::Int4Quantized(q) => int4(q.group),
                }
            })
            .collect();
        Ok(self.write(&stored)?.len())
    }

    /// The image of the tensors stored as `stored`, with the source's vocabulary.
    fn write(&self, stored: &[Stored]) -> Result<Vec<u8>, Error> {
        let payloads: Vec<(TensorName, Payload<'_>)> = self
            .tensors
            .iter()
            .zip(stored)
            .map(|((name, _, data), item)| {
                let payload = match item {
                    Stored::F32 => Payload::F32(data),
                    Stored::F16(h) => Payload::F16(h),
                    Stored::Int8(q) => Payload::Int8 {
                        values: &q.values,
                        row_scales: &q.row_scales,
                        act_scales: q.act_scales.as_deref(),
                    },
                    Stored::Int4(q, packed) => Payload::Int4 {
                        values: packed,
                        scale: q.scale,
                        codes: &q.codes,
                        group: q.group,
                    },
                };
                (*name, payload)
            })
            .collect();
        let mut image = write_image(&self.config, &payloads)?;
        if let Some(section) = &self.vocabulary {
            image = set_vocabulary(&image, Some(section))?;
        }
        Ok(image)
    }

    /// Columns of tensor `index` (a vector's length).
    #[cfg(feature = "reference")]
    pub(super) fn cols(&self, index: usize) -> usize {
        self.tensors[index].1.rows_cols().1
    }

    #[cfg(feature = "reference")]
    pub(super) fn parameters(&self) -> usize {
        self.tensors.iter().map(|(_, shape, _)| shape.len()).sum()
    }
}

/// `model` with its weights quantized to `target` and nothing measured: what `txl convert
/// --dtype` and `txl quantize` make without calibration text, and what the firmware's build
/// script embeds.
/// int4 tensors have [`int4::DEFAULT_GROUP`] columns a group ([`quantize_weights_grouped`]
/// chooses).
pub fn quantize_weights(model: &Model<'_>, target: Target) -> Result<Vec<u8>, Error> {
    quantize_weights_grouped(model, target, int4::DEFAULT_GROUP)
}

/// [`quantize_weights`] with `group` columns per multiplier of the int4 tensors (a multiple of
/// 8, at least 8).
pub fn quantize_weights_grouped(model: &Model<'_>, target: Target, group: usize) -> Result<Vec<u8>, Error> {
    check_group(group)?;
    let source = Source::read(model);
    let plans = source.plain_plans(target, group, target.default_vectors());
    Ok(source.build(&plans)?.0)
}

#[cfg(test)]
mod tests {
    use super::{Plan, Source};

    /// The size the budget counts with is the size of the image built, whatever the mix of
    /// precisions, smoothing and group sizes.
    #[cfg(feature = "reference")]
    #[test]
    fn image_bytes_are_the_bytes_built() {
        use crate::{random_image, small_config, RandomInit};

        let image = random_image(&small_config(), 5, RandomInit::default()).unwrap();
        let bytes = txl_core::AlignedBytes::copy_from(&image).unwrap();
        let model = txl_core::Model::parse(bytes.bytes()).unwrap();
        let source = Source::read(&model);
        for shift in 0..6 {
            let plans: Vec<Plan> = source
                .tensors
                .iter()
                .enumerate()
                .map(|(index, (name, _, _))| {
                    let cols = source.cols(index);
                    match (name.is_matrix(), (index + shift) % 6) {
                        (false, _) | (true, 0) => Plan::F32,
                        (true, 1) => Plan::F16,
                        (true, 2) => Plan::Int8(None),
                        (true, 3) => Plan::Int8(Some(vec![1.5; cols])),
                        (true, 4) => Plan::Int4(8),
                        (true, _) => Plan::Int4(32),
                    }
                })
                .collect();
            let built = source.build(&plans).unwrap().0.len();
            assert_eq!(source.image_bytes(&plans).unwrap(), built, "shift {shift}");
        }
    }
}
