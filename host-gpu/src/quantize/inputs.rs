//! The Gram matrices `XᵀX` of every quantized matrix's inputs on calibration text, which the
//! error-compensated rounding ([`gptq`](super::gptq)) weighs its errors with.
//!
//! They are collected the way the [`ChannelRanges`](super::calibrate::ChannelRanges) are,
//! consumer by consumer: every layer's `qkv`, `o_net`, `ff1` and `ff2` inputs (seen through
//! the f32 model's [`Probe`]), the output tables' inputs (the last layer's output, projected
//! per cluster when the model has output projections), the cluster head's (cluster 0's), and
//! the embedding projections' (the embedding rows looked up, once per occurrence).

use txl_core::tensors::{LayerTensor, TensorName};
use txl_core::{kernels, Config, Linear, Model, Probe, Session, SessionOptions};

use super::gptq::Gram;
use crate::cpu::matmul::{matmul, Rhs};
use crate::error::Error;

/// Input rows gathered before they are added to a Gram matrix as one product.
const BATCH: usize = 256;

/// `XᵀX` of each consumer's inputs.
#[derive(Clone, Debug)]
pub struct InputGrams {
    /// `[layer][Qkv, ONet, Ff1, Ff2]`.
    pub layers: Vec<[Gram; 4]>,
    /// Input of each output table, by table.
    pub out_tables: Vec<Gram>,
    /// Input of the cluster logits.
    pub cluster_head: Gram,
    /// Input of each embedding projection.
    pub emb_proj: Vec<Gram>,
}

impl InputGrams {
    /// The Gram matrix of the inputs `name` multiplies as a `(rows, cols)` matrix times a
    /// column, if it is used that way: the layers' products, the output tables (and a tied
    /// embedding table, which is one), the cluster head and the embedding projections. The
    /// position projection `r_net` (its inputs are fixed sinusoids) and the output projections
    /// (applied transposed) have none.
    pub fn of(&self, config: &Config, name: TensorName) -> Option<&Gram> {
        let gram = match name {
            TensorName::Layer(l, LayerTensor::QkvWeight) => &self.layers[l as usize][Linear::Qkv as usize],
            TensorName::Layer(l, LayerTensor::OWeight) => &self.layers[l as usize][Linear::ONet as usize],
            TensorName::Layer(l, LayerTensor::Ff1Weight) => &self.layers[l as usize][Linear::Ff1 as usize],
            TensorName::Layer(l, LayerTensor::Ff2Weight) => &self.layers[l as usize][Linear::Ff2 as usize],
            TensorName::EmbLayer(t) if config.tie_weight => &self.out_tables[t as usize],
            TensorName::OutWeight(t) => &self.out_tables[t as usize],
            TensorName::ClusterWeight => &self.cluster_head,
            TensorName::EmbProj(t) => &self.emb_proj[t as usize],
            _ => return None,
        };
        (!gram.is_empty()).then_some(gram)
    }
}

/// A Gram matrix being accumulated: rows wait in a batch, then go in as one product.
#[derive(Clone, Debug)]
struct Accumulator {
    gram: Gram,
    /// `(n, BATCH)` the waiting rows, transposed.
    pending: Vec<f64>,
    waiting: usize,
}

impl Accumulator {
    fn new() -> Accumulator {
        Accumulator {
            gram: Gram::new(0),
            pending: Vec::new(),
            waiting: 0,
        }
    }

    /// Adds the row `x`; the matrix takes `x`'s width on first use.
    fn add(&mut self, x: &[f32]) {
        if self.gram.rows == 0 && self.waiting == 0 && self.gram.n != x.len() {
            self.gram = Gram::new(x.len());
            self.pending = vec![0.0; x.len() * BATCH];
        }
        for (c, &v) in x.iter().enumerate() {
            self.pending[c * BATCH + self.waiting] = v as f64;
        }
        self.waiting += 1;
        if self.waiting == BATCH {
            self.flush();
        }
    }

    /// `sum += P Pᵀ` for the waiting rows `P (n, waiting)`.
    fn flush(&mut self) {
        let n = self.gram.n;
        if self.waiting > 0 {
            // P (n, waiting) @ Pᵀ (waiting, n) -> (n, n), accumulated
            matmul(
                n,
                n,
                self.waiting,
                &self.pending,
                BATCH,
                &self.pending,
                Rhs::Transposed { ld: BATCH },
                &mut self.gram.sum,
                n,
                true,
            );
            self.gram.rows += self.waiting;
            self.waiting = 0;
        }
    }

    /// The Gram matrix of every row added, exactly symmetric.
    fn finish(mut self) -> Gram {
        self.flush();
        let n = self.gram.n;
        for i in 0..n {
            for j in 0..i {
                self.gram.sum[i * n + j] = self.gram.sum[j * n + i];
            }
        }
        self.gram
    }
}

/// The accumulators of every consumer, laid out as [`InputGrams`].
#[derive(Debug)]
struct Accumulators {
    layers: Vec<[Accumulator; 4]>,
    out_tables: Vec<Accumulator>,
    cluster_head: Accumulator,
    emb_proj: Vec<Accumulator>,
}

struct GramProbe<'m> {
    model: &'m Model<'m>,
    grams: Accumulators,
    last_layer: usize,
    projected: Vec<f32>,
    scratch: Vec<u32>,
}

impl Probe for GramProbe<'_> {
    fn linear_input(&mut self, layer: usize, linear: Linear, x: &[f32]) {
        self.grams.layers[layer][linear as usize].add(x);
    }

    fn layer_output(&mut self, layer: usize, _position: usize, hidden: &[f32]) {
        if layer != self.last_layer {
            return;
        }
        let config = self.model.config();
        for cluster in 0..=config.n_clusters() {
            let table = config.emb_table_of_cluster(cluster);
            let input: &[f32] = if config.has_out_proj() {
                let width = config.emb_dim(table) as usize;
                // hidden (d_model) @ out_proj (d_model, width) -> (width)
                kernels::vecmat(
                    hidden,
                    &self.model.out_proj(cluster),
                    &mut self.projected[..width],
                    &mut self.scratch,
                );
                &self.projected[..width]
            } else {
                hidden
            };
            self.grams.out_tables[table].add(input);
            if cluster == 0 && config.n_clusters() > 0 {
                self.grams.cluster_head.add(input);
            }
        }
    }
}

/// Runs the f32 `model` over `tokens` (one stream, in segments of `options.tgt_len`) and
/// accumulates the Gram matrix of every quantized matrix's inputs, in f64.
pub fn input_grams(model: &Model<'_>, options: SessionOptions, tokens: &[u32]) -> Result<InputGrams, Error> {
    let config = *model.config();
    let d_model = config.d_model as usize;
    let d_embed = config.d_embed as usize;
    let mut probe = GramProbe {
        model,
        grams: Accumulators {
            layers: (0..config.n_layer)
                .map(|_| std::array::from_fn(|_| Accumulator::new()))
                .collect(),
            out_tables: vec![Accumulator::new(); config.n_emb_tables()],
            cluster_head: Accumulator::new(),
            emb_proj: vec![Accumulator::new(); config.n_emb_tables()],
        },
        last_layer: config.n_layer as usize - 1,
        projected: vec![0.0; d_embed],
        scratch: vec![0; kernels::scratch_words(d_model.max(d_embed))],
    };
    let mut arena = txl_core::scoring::arena_for(model, &options)?;
    let mut session = Session::new(model, arena.bytes_mut(), options)?;
    let mut row = vec![0.0f32; d_embed];
    for segment in tokens.chunks(options.tgt_len.max(1) as usize) {
        session.forward_probed(segment, |_, _| {}, &mut probe)?;
        if config.has_emb_proj() {
            for &token in segment {
                let (table, r) = config.embedding_row(token);
                let width = config.emb_dim(table) as usize;
                model.emb_layer(table).row_to_f32(r, &mut row[..width]);
                probe.grams.emb_proj[table].add(&row[..width]);
            }
        }
    }
    let grams = probe.grams;
    let finish = |all: Vec<Accumulator>| all.into_iter().map(Accumulator::finish).collect();
    Ok(InputGrams {
        layers: grams
            .layers
            .into_iter()
            .map(|layer| layer.map(Accumulator::finish))
            .collect(),
        out_tables: finish(grams.out_tables),
        cluster_head: grams.cluster_head.finish(),
        emb_proj: finish(grams.emb_proj),
    })
}

#[cfg(test)]
mod tests {
    use txl_core::rng::Rng;
    use txl_core::{AlignedBytes, Config, Model, SessionOptions};

    use super::input_grams;
    use crate::quantize::calibrate::channel_ranges;
    use crate::quantize::gptq::Gram;
    use crate::{random_image, small_config, RandomInit};

    /// Each channel's `sum x²` lies between the largest `x²` and `rows` times it, channel by
    /// channel, for ranges from the reference (another engine).
    fn assert_consistent(gram: &Gram, range: &[f32], rows: usize, what: &str) {
        assert_eq!(gram.rows, rows, "{what}: rows");
        assert_eq!(gram.n, range.len(), "{what}: width");
        let n = gram.n;
        for (c, &r) in range.iter().enumerate() {
            let (diagonal, largest) = (gram.sum[c * n + c], (r as f64).powi(2));
            assert!(
                diagonal >= largest * (1.0 - 1e-3) && diagonal <= rows as f64 * largest * (1.0 + 1e-3),
                "{what}[{c}]: sum x² {diagonal} against max x² {largest}"
            );
        }
        for i in 0..n {
            for j in 0..n {
                assert_eq!(gram.sum[i * n + j], gram.sum[j * n + i], "{what}: symmetric");
            }
        }
    }

    #[test]
    fn gram_matrices_agree_with_the_reference_ranges() {
        let small = small_config();
        let projected = Config {
            n_cutoffs: 0,
            cutoffs: [0; txl_core::config::MAX_CUTOFFS],
            div_val: 1,
            d_embed: 8,
            tie_projs: 0,
            ..small
        };
        for (i, config) in [small, projected].into_iter().enumerate() {
            let image = random_image(&config, 11 + i as u64, RandomInit::default()).unwrap();
            let bytes = AlignedBytes::copy_from(&image).unwrap();
            let model = Model::parse(bytes.bytes()).unwrap();
            let options = SessionOptions::from_config(&config);
            let mut rng = Rng::new(i as u64);
            // more than a batch, and a part batch
            let tokens: Vec<u32> = (0..300)
                .map(|_| rng.below(config.n_token as u64) as u32)
                .collect();
            let grams = input_grams(&model, options, &tokens).unwrap();
            let ranges = channel_ranges(&model, options, &tokens).unwrap();
            let n = tokens.len();
            for (l, (g, r)) in grams.layers.iter().zip(&ranges.layers).enumerate() {
                for (k, (g, r)) in g.iter().zip(r).enumerate() {
                    assert_consistent(g, r, n, &format!("config {i} layer {l} linear {k}"));
                }
            }
            for (t, (g, r)) in grams.out_tables.iter().zip(&ranges.out_tables).enumerate() {
                assert_consistent(g, r, n, &format!("config {i} out_tables[{t}]"));
            }
            if config.n_clusters() > 0 {
                assert_consistent(&grams.cluster_head, &ranges.cluster_head, n, "cluster_head");
            }
            if config.has_emb_proj() {
                let looked_up: usize = grams.emb_proj.iter().map(|g| g.rows).sum();
                assert_eq!(looked_up, n, "config {i}: one embedding row per token");
                for (t, (g, r)) in grams.emb_proj.iter().zip(&ranges.emb_proj).enumerate() {
                    if g.rows > 0 {
                        assert_consistent(g, r, g.rows, &format!("config {i} emb_proj[{t}]"));
                    }
                }
            }
        }
    }
}
