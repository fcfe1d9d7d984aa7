//! Calibration: per-channel ranges of every linear layer's input, seen on calibration text, and
//! the SmoothQuant migration factors derived from them.

use txl_core::weights::Matrix;
use txl_core::{Model, SessionOptions};

use crate::error::Error;
use crate::reference::{Backend, Reference};
pub use crate::statistics::ChannelRanges;

/// Runs `model` over `tokens` (one stream, in segments of `options.tgt_len`) on the f32 CPU
/// reference and records the input range of every linear layer.
pub fn channel_ranges(
    model: &Model<'_>,
    options: SessionOptions,
    tokens: &[u32],
) -> Result<ChannelRanges, Error> {
    Reference::new(model, Backend::Cpu32)?.channel_ranges(&[tokens], &options)
}

/// SmoothQuant factors `s[c] = max|x_c|^alpha / max_r |W[r][c]|^(1 - alpha)` for a matrix and
/// the input range of its columns (each rounded to the nearest power of two in log terms with
/// `power_of_two`); `None` when nothing was observed.
pub fn smoothing_factors(
    weight: &Matrix<'_>,
    dense: &[f32],
    input_range: &[f32],
    (alpha, power_of_two): (f32, bool),
) -> Option<Vec<f32>> {
    let cols = weight.cols;
    if input_range.len() != cols || input_range.iter().all(|&r| r == 0.0) {
        return None;
    }
    let mut weight_range = vec![0.0f32; cols];
    for row in dense.chunks_exact(cols) {
        for (m, w) in weight_range.iter_mut().zip(row) {
            *m = m.max(w.abs());
        }
    }
    Some(
        input_range
            .iter()
            .zip(&weight_range)
            .map(|(&x, &w)| {
                if x > 0.0 && w > 0.0 {
                    let s = (x.powf(alpha) / w.powf(1.0 - alpha)).clamp(1e-4, 1e4);
                    if power_of_two {
                        s.log2().round().exp2()
                    } else {
                        s
                    }
                } else {
                    1.0
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use txl_core::rng::Rng;
    use txl_core::{matrix, AlignedBytes, Config, Linear, MemInit, Model, Probe, Session, SessionOptions};

    use super::ChannelRanges;
    use crate::{random_image, small_config, Backend, RandomInit, Reference};

    fn widen(range: &mut Vec<f32>, x: &[f32]) {
        if range.len() < x.len() {
            range.resize(x.len(), 0.0);
        }
        for (r, v) in range.iter_mut().zip(x) {
            *r = r.max(v.abs());
        }
    }

    struct RangeProbe<'r> {
        ranges: &'r mut ChannelRanges,
        last_layer: usize,
        final_hidden: Vec<f32>,
        d_model: usize,
    }

    impl Probe for RangeProbe<'_> {
        fn linear_input(&mut self, layer: usize, linear: Linear, x: &[f32]) {
            widen(self.ranges.linear_input_mut(layer, linear), x);
        }

        fn layer_output(&mut self, layer: usize, position: usize, hidden: &[f32]) {
            if layer == self.last_layer {
                let at = position * self.d_model;
                if self.final_hidden.len() < at + self.d_model {
                    self.final_hidden.resize(at + self.d_model, 0.0);
                }
                self.final_hidden[at..at + self.d_model].copy_from_slice(hidden);
            }
        }
    }

    /// The ranges as the core's scalar engine sees them through a [`Probe`], one position at
    /// a time: an implementation independent of the reference's.
    fn core_channel_ranges(model: &Model<'_>, options: SessionOptions, tokens: &[u32]) -> ChannelRanges {
        let config = *model.config();
        let d_model = config.d_model as usize;
        let mut ranges = ChannelRanges {
            layers: vec![Default::default(); config.n_layer as usize],
            out_tables: vec![Vec::new(); config.n_emb_tables()],
            cluster_head: Vec::new(),
            emb_proj: vec![Vec::new(); config.n_emb_tables()],
        };
        let mut arena = txl_core::scoring::arena_for(model, &options).unwrap();
        let mut session = Session::new(model, arena.bytes_mut(), options).unwrap();
        let mut projected = vec![0.0f32; config.d_embed as usize];
        let mut row = vec![0.0f32; config.d_embed as usize];
        let mut scratch = vec![0u32; matrix::scratch_words(d_model.max(config.d_embed as usize))];
        for segment in tokens.chunks(options.tgt_len as usize) {
            let mut probe = RangeProbe {
                ranges: &mut ranges,
                last_layer: config.n_layer as usize - 1,
                final_hidden: Vec::new(),
                d_model,
            };
            session.forward_probed(segment, |_, _| {}, &mut probe).unwrap();
            let final_hidden = probe.final_hidden;
            for h in final_hidden.chunks_exact(d_model) {
                for cluster in 0..=config.n_clusters() {
                    let table = config.emb_table_of_cluster(cluster);
                    let input: &[f32] = if config.has_out_proj() {
                        let width = config.emb_dim(table) as usize;
                        matrix::vecmat(h, &model.out_proj(cluster), &mut projected[..width], &mut scratch);
                        &projected[..width]
                    } else {
                        h
                    };
                    widen(&mut ranges.out_tables[table], input);
                    if cluster == 0 {
                        widen(&mut ranges.cluster_head, input);
                    }
                }
            }
            if config.has_emb_proj() {
                for &token in segment {
                    let (table, r) = config.embedding_row(token);
                    let width = config.emb_dim(table) as usize;
                    model.emb_layer(table).row_to_f32(r, &mut row[..width]);
                    widen(&mut ranges.emb_proj[table], &row[..width]);
                }
            }
        }
        ranges
    }

    /// Every range of `ours` equals the same range of `expected` to a relative `tolerance`.
    fn assert_close(ours: &ChannelRanges, expected: &ChannelRanges, tolerance: f32, what: &str) {
        let close = |a: &[f32], b: &[f32], name: String| {
            assert_eq!(a.len(), b.len(), "{what}: {name}: widths differ");
            for (c, (&x, &y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x - y).abs() <= tolerance * y.abs(),
                    "{what}: {name}[{c}]: {x} against {y}"
                );
            }
        };
        assert_eq!(ours.layers.len(), expected.layers.len());
        for (l, (a, b)) in ours.layers.iter().zip(&expected.layers).enumerate() {
            for (i, (a, b)) in a.iter().zip(b).enumerate() {
                assert!(!b.is_empty());
                close(a, b, format!("layer {l} linear {i}"));
            }
        }
        assert_eq!(ours.out_tables.len(), expected.out_tables.len());
        for (t, (a, b)) in ours.out_tables.iter().zip(&expected.out_tables).enumerate() {
            close(a, b, format!("out_tables[{t}]"));
        }
        close(&ours.cluster_head, &expected.cluster_head, "cluster_head".into());
        assert_eq!(ours.emb_proj.len(), expected.emb_proj.len());
        for (t, (a, b)) in ours.emb_proj.iter().zip(&expected.emb_proj).enumerate() {
            close(a, b, format!("emb_proj[{t}]"));
        }
    }

    fn random_tokens(config: &Config, n: usize, seed: u64) -> Vec<u32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| rng.below(config.n_token as u64) as u32).collect()
    }

    /// The configs the comparison runs on: the adaptive small config, pre-LN with a zero-memory
    /// start, a full softmax with projections (div_val 1, d_embed != d_model), and one without
    /// any projection.
    fn configs() -> Vec<(Config, MemInit)> {
        let small = small_config();
        let pre_ln = Config {
            pre_lnorm: true,
            ..small
        };
        let projected = Config {
            n_cutoffs: 0,
            cutoffs: [0; txl_core::config::MAX_CUTOFFS],
            div_val: 1,
            d_embed: 8,
            tie_projs: 0,
            ..small
        };
        let plain = Config {
            n_cutoffs: 0,
            cutoffs: [0; txl_core::config::MAX_CUTOFFS],
            div_val: 1,
            tie_projs: 0,
            tie_weight: false,
            ..small
        };
        vec![
            (small, MemInit::Empty),
            (pre_ln, MemInit::Zeros),
            (projected, MemInit::Empty),
            (plain, MemInit::Zeros),
        ]
    }

    #[test]
    fn reference_ranges_equal_the_core_probes() {
        for (i, (config, mem_init)) in configs().into_iter().enumerate() {
            let image = random_image(&config, 7 + i as u64, RandomInit::default()).unwrap();
            let bytes = AlignedBytes::copy_from(&image).unwrap();
            let model = Model::parse(bytes.bytes()).unwrap();
            let options = SessionOptions {
                mem_init,
                ..SessionOptions::from_config(&config)
            };
            // 27 tokens: a short last segment
            let tokens = random_tokens(&config, 27, i as u64);
            let expected = core_channel_ranges(&model, options, &tokens);
            let ours = super::channel_ranges(&model, options, &tokens).unwrap();
            assert_close(&ours, &expected, 1e-4, &format!("config {i}, cpu32"));
            let ours64 = Reference::new(&model, Backend::Cpu64)
                .unwrap()
                .channel_ranges(&[&tokens], &options)
                .unwrap();
            assert_close(&ours64, &expected, 1e-4, &format!("config {i}, cpu64"));
        }
    }

    #[test]
    fn streams_are_observed_each_with_its_own_memory() {
        let config = small_config();
        let image = random_image(&config, 3, RandomInit::default()).unwrap();
        let bytes = AlignedBytes::copy_from(&image).unwrap();
        let model = Model::parse(bytes.bytes()).unwrap();
        let options = SessionOptions::from_config(&config);
        let (a, b) = (random_tokens(&config, 19, 1), random_tokens(&config, 6, 2));
        let mut reference = Reference::new(&model, Backend::Cpu64).unwrap();
        let both = reference.channel_ranges(&[&a, &b], &options).unwrap();
        // The union of the streams alone, each channel the larger of the two.
        let mut expected = core_channel_ranges(&model, options, &a);
        let other = core_channel_ranges(&model, options, &b);
        for (l, o) in expected.layers.iter_mut().zip(&other.layers) {
            for (x, y) in l.iter_mut().zip(o) {
                widen(x, y);
            }
        }
        for (x, y) in expected.out_tables.iter_mut().zip(&other.out_tables) {
            widen(x, y);
        }
        widen(&mut expected.cluster_head, &other.cluster_head);
        for (x, y) in expected.emb_proj.iter_mut().zip(&other.emb_proj) {
            widen(x, y);
        }
        assert_close(&both, &expected, 1e-4, "two streams");
    }

    #[test]
    fn out_of_range_tokens_are_errors() {
        let config = small_config();
        let image = random_image(&config, 3, RandomInit::default()).unwrap();
        let bytes = AlignedBytes::copy_from(&image).unwrap();
        let model = Model::parse(bytes.bytes()).unwrap();
        let options = SessionOptions::from_config(&config);
        let result = super::channel_ranges(&model, options, &[1, 2, config.n_token]);
        assert!(matches!(
            result,
            Err(crate::Error::TokenOutOfRange { position: 2, .. })
        ));
    }
}
