//! The Gram matrices `XᵀX` of every quantized matrix's inputs on calibration text, which the
//! error-compensated rounding ([`gptq`](super::gptq)) weighs its errors with.
//!
//! They are collected by the full-precision reference while it runs, consumer by consumer, as
//! the [`ChannelRanges`](super::calibrate::ChannelRanges) are: every layer's `qkv`, `o_net`,
//! `ff1` and `ff2` inputs, the output tables' inputs (the last layer's output, projected per
//! cluster when the model has output projections), the cluster head's (cluster 0's), and the
//! embedding projections' (the embedding rows looked up, once per occurrence). On the CPU
//! backends the rows are added a batch at a time; on CUDA, on the device.
//! See [`Reference::statistics`](crate::Reference::statistics).

use txl_core::{Model, SessionOptions};

use crate::error::Error;
use crate::reference::{Backend, Reference};
pub use crate::statistics::InputGrams;

/// Runs the f32 `model` on the reference's `backend` over `tokens` (one stream, in segments of
/// `options.tgt_len`) and returns the Gram matrix of every quantized matrix's inputs, in f64.
pub fn input_grams(
    model: &Model<'_>,
    backend: Backend,
    options: SessionOptions,
    tokens: &[u32],
) -> Result<InputGrams, Error> {
    let statistics = Reference::new(model, backend)?.statistics(&[tokens], &options, true)?;
    Ok(statistics.grams.expect("asked for"))
}

#[cfg(test)]
mod tests {
    use txl_core::rng::Rng;
    use txl_core::{matrix, AlignedBytes, Config, Linear, Model, Probe, Session, SessionOptions};

    use super::InputGrams;
    use crate::quantize::calibrate::ChannelRanges;
    use crate::quantize::gptq::Gram;
    use crate::{random_image, small_config, Backend, RandomInit, Reference};

    /// Feeds the core's probe rows to plain [`Gram::add`]s, one row at a time.
    struct GramProbe<'m> {
        model: &'m Model<'m>,
        grams: InputGrams,
        last_layer: usize,
        projected: Vec<f32>,
        scratch: Vec<u32>,
    }

    /// `gram`, sized for `x` on first use, plus `x`.
    fn add(gram: &mut Gram, x: &[f32]) {
        if gram.rows == 0 && gram.n != x.len() {
            *gram = Gram::new(x.len());
        }
        gram.add(x);
    }

    impl Probe for GramProbe<'_> {
        fn linear_input(&mut self, layer: usize, linear: Linear, x: &[f32]) {
            add(&mut self.grams.layers[layer][linear as usize], x);
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
                    let out_proj = self.model.out_proj(cluster);
                    matrix::vecmat(hidden, &out_proj, &mut self.projected[..width], &mut self.scratch);
                    &self.projected[..width]
                } else {
                    hidden
                };
                add(&mut self.grams.out_tables[table], input);
                if cluster == 0 && config.n_clusters() > 0 {
                    add(&mut self.grams.cluster_head, input);
                }
            }
        }
    }

    /// The Gram matrices as the core's scalar engine sees the inputs through a [`Probe`], one
    /// position at a time: an implementation independent of the reference's.
    fn core_input_grams(model: &Model<'_>, options: SessionOptions, tokens: &[u32]) -> InputGrams {
        let config = *model.config();
        let d_model = config.d_model as usize;
        let d_embed = config.d_embed as usize;
        let mut probe = GramProbe {
            model,
            grams: InputGrams::empty(&config),
            last_layer: config.n_layer as usize - 1,
            projected: vec![0.0; d_embed],
            scratch: vec![0; matrix::scratch_words(d_model.max(d_embed))],
        };
        let mut arena = txl_core::scoring::arena_for(model, &options).unwrap();
        let mut session = Session::new(model, arena.bytes_mut(), options).unwrap();
        let mut row = vec![0.0f32; d_embed];
        for segment in tokens.chunks(options.tgt_len.max(1) as usize) {
            session.forward_probed(segment, |_, _| {}, &mut probe).unwrap();
            if config.has_emb_proj() {
                for &token in segment {
                    let (table, r) = config.embedding_row(token);
                    let width = config.emb_dim(table) as usize;
                    model.emb_layer(table).row_to_f32(r, &mut row[..width]);
                    add(&mut probe.grams.emb_proj[table], &row[..width]);
                }
            }
        }
        let mut grams = probe.grams;
        for gram in every_gram(&mut grams) {
            gram.symmetrize();
        }
        grams
    }

    fn every_gram(grams: &mut InputGrams) -> impl Iterator<Item = &mut Gram> {
        let InputGrams {
            layers,
            out_tables,
            cluster_head,
            emb_proj,
        } = grams;
        layers
            .iter_mut()
            .flat_map(|l| l.iter_mut())
            .chain(out_tables.iter_mut())
            .chain([cluster_head])
            .chain(emb_proj.iter_mut())
    }

    /// The Gram matrices side by side with the input range of their consumer, named (the cluster
    /// head's with tail clusters only).
    fn pairs<'a>(
        config: &Config,
        grams: &'a InputGrams,
        ranges: &'a ChannelRanges,
    ) -> Vec<(String, &'a Gram, &'a [f32])> {
        let mut all = Vec::new();
        for (l, (g, r)) in grams.layers.iter().zip(&ranges.layers).enumerate() {
            for (k, (g, r)) in g.iter().zip(r).enumerate() {
                all.push((format!("layer {l} linear {k}"), g, r.as_slice()));
            }
        }
        for (t, (g, r)) in grams.out_tables.iter().zip(&ranges.out_tables).enumerate() {
            all.push((format!("out_tables[{t}]"), g, r.as_slice()));
        }
        if config.n_clusters() > 0 {
            all.push(("cluster_head".into(), &grams.cluster_head, &ranges.cluster_head));
        }
        for (t, (g, r)) in grams.emb_proj.iter().zip(&ranges.emb_proj).enumerate() {
            all.push((format!("emb_proj[{t}]"), g, r.as_slice()));
        }
        all
    }

    /// Exactly symmetric, and each channel's `sum x²` lies between the largest `x²` (from the
    /// ranges of the same run) and `rows` times it.
    fn assert_consistent(gram: &Gram, range: &[f32], what: &str) {
        assert_eq!(gram.n, range.len(), "{what}: width");
        let n = gram.n;
        for (c, &r) in range.iter().enumerate() {
            let (diagonal, largest) = (gram.sum[c * n + c], (r as f64).powi(2));
            assert!(
                diagonal >= largest * (1.0 - 1e-9) && diagonal <= gram.rows as f64 * largest * (1.0 + 1e-9),
                "{what}[{c}]: sum x² {diagonal} against max x² {largest}"
            );
        }
        for i in 0..n {
            for j in 0..n {
                assert_eq!(gram.sum[i * n + j], gram.sum[j * n + i], "{what}: symmetric");
            }
        }
    }

    /// `ours` equals `expected` entry by entry to `tolerance` of the entry's scale
    /// `sqrt(H_ii H_jj)` (Cauchy-Schwarz bounds `|H_ij|` by it), with the same rows.
    fn assert_close(ours: &Gram, expected: &Gram, tolerance: f64, what: &str) {
        assert_eq!(
            (ours.n, ours.rows),
            (expected.n, expected.rows),
            "{what}: width and rows"
        );
        let n = ours.n;
        for i in 0..n {
            for j in 0..n {
                let scale = (expected.sum[i * n + i] * expected.sum[j * n + j]).sqrt();
                let delta = (ours.sum[i * n + j] - expected.sum[i * n + j]).abs();
                assert!(
                    delta <= tolerance * scale + 1e-12,
                    "{what}[{i}][{j}]: {} against {}",
                    ours.sum[i * n + j],
                    expected.sum[i * n + j]
                );
            }
        }
    }

    fn configs() -> Vec<Config> {
        let small = small_config();
        let projected = Config {
            n_cutoffs: 0,
            cutoffs: [0; txl_core::config::MAX_CUTOFFS],
            div_val: 1,
            d_embed: 8,
            tie_projs: 0,
            ..small
        };
        vec![small, projected]
    }

    #[test]
    fn reference_gram_matrices_equal_the_core_probes() {
        for (i, config) in configs().into_iter().enumerate() {
            let image = random_image(&config, 11 + i as u64, RandomInit::default()).unwrap();
            let bytes = AlignedBytes::copy_from(&image).unwrap();
            let model = Model::parse(bytes.bytes()).unwrap();
            let options = SessionOptions::from_config(&config);
            let mut rng = Rng::new(i as u64);
            // more than a batch, and a part batch
            let tokens: Vec<u32> = (0..300)
                .map(|_| rng.below(config.n_token as u64) as u32)
                .collect();
            let expected = core_input_grams(&model, options, &tokens);
            for (backend, tolerance) in [(Backend::Cpu64, 1e-5), (Backend::Cpu32, 1e-5)] {
                let mut reference = Reference::new(&model, backend).unwrap();
                let statistics = reference.statistics(&[&tokens], &options, true).unwrap();
                let grams = statistics.grams.as_ref().unwrap();
                let ours = pairs(&config, grams, &statistics.ranges);
                let theirs = pairs(&config, &expected, &statistics.ranges);
                for ((what, gram, range), (_, core, _)) in ours.into_iter().zip(theirs) {
                    let what = format!("config {i} {backend:?} {what}");
                    assert_consistent(gram, range, &what);
                    assert_close(gram, core, tolerance, &what);
                }
                let looked_up: usize = grams.emb_proj.iter().map(|g| g.rows).sum();
                let expected_rows = if config.has_emb_proj() { tokens.len() } else { 0 };
                assert_eq!(
                    looked_up, expected_rows,
                    "config {i}: one embedding row per token"
                );
                assert_eq!(grams.layers[0][0].rows, tokens.len());
                if config.n_clusters() == 0 {
                    assert!(
                        grams.cluster_head.is_empty(),
                        "config {i}: no tail clusters, no head matrix"
                    );
                }
            }
        }
    }

    #[test]
    fn statistics_without_grams_have_the_same_ranges() {
        let config = small_config();
        let image = random_image(&config, 3, RandomInit::default()).unwrap();
        let bytes = AlignedBytes::copy_from(&image).unwrap();
        let model = Model::parse(bytes.bytes()).unwrap();
        let options = SessionOptions::from_config(&config);
        let tokens: Vec<u32> = (0..50).map(|t| t % config.n_token).collect();
        let mut reference = Reference::new(&model, Backend::Cpu32).unwrap();
        let with = reference.statistics(&[&tokens], &options, true).unwrap();
        let without = reference.statistics(&[&tokens], &options, false).unwrap();
        assert!(without.grams.is_none());
        assert_eq!(format!("{:?}", with.ranges), format!("{:?}", without.ranges));
    }

    #[test]
    fn streams_add_up() {
        let config = small_config();
        let image = random_image(&config, 5, RandomInit::default()).unwrap();
        let bytes = AlignedBytes::copy_from(&image).unwrap();
        let model = Model::parse(bytes.bytes()).unwrap();
        let options = SessionOptions::from_config(&config);
        let mut rng = Rng::new(9);
        let mut stream =
            |n: usize| -> Vec<u32> { (0..n).map(|_| rng.below(config.n_token as u64) as u32).collect() };
        let (a, b) = (stream(40), stream(23));
        let mut reference = Reference::new(&model, Backend::Cpu64).unwrap();
        let mut both = reference
            .statistics(&[&a, &b], &options, true)
            .unwrap()
            .grams
            .unwrap();
        let mut one = reference
            .statistics(&[&a], &options, true)
            .unwrap()
            .grams
            .unwrap();
        let mut other = reference
            .statistics(&[&b], &options, true)
            .unwrap()
            .grams
            .unwrap();
        // a consumer one stream never reached has an empty matrix: zeros
        let entry = |g: &Gram, i: usize| if g.rows == 0 { 0.0 } else { g.sum[i] };
        let mut compared = 0;
        for ((sum, x), y) in every_gram(&mut both)
            .zip(every_gram(&mut one))
            .zip(every_gram(&mut other))
        {
            assert_eq!(sum.rows, x.rows + y.rows);
            for (i, &s) in sum.sum.iter().enumerate() {
                let (x, y) = (entry(x, i), entry(y, i));
                assert!(
                    (s - (x + y)).abs() <= 1e-9 * s.abs().max(1.0),
                    "{s} against {x} + {y}"
                );
                compared += 1;
            }
        }
        assert!(compared > 1000, "{compared} entries compared");
    }
}
