//! Generation: `forward_last` is `forward` without the rows nobody reads, greedy generation is
//! repeated argmax, and seeded sampling draws from `p^(1/T)`.

use txl_core::rng::Rng;
use txl_core::sampling::{Sampler, Sampling};
use txl_core::scoring::arena_for;
use txl_core::{AlignedBytes, Config, MemDtype, MemInit, Model, Session, SessionOptions};
use txl_host_gpu::quantize::Target;
use txl_tests::{fixtures_dir, quantized_image, random_model, reference_config, small_config, tokens};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::generate::generate;

/// The f32 model of `config` and its f16 and int8 quantizations.
fn images_of(config: &Config, seed: u64) -> [(&'static str, AlignedBytes); 3] {
    let aligned = |image: Vec<u8>| AlignedBytes::copy_from(&image).unwrap();
    [
        ("f32", random_model(config, seed)),
        ("f16", aligned(quantized_image(config, seed, Target::F16))),
        ("int8", aligned(quantized_image(config, seed, Target::Int8))),
    ]
}

/// The demo checkpoint, converted in f32.
fn demo_image() -> AlignedBytes {
    let image = load_hf_checkpoint(&fixtures_dir().join("demo"), CheckpointFormat::Auto, false)
        .and_then(|checkpoint| checkpoint.to_image())
        .expect("the demo checkpoint converts");
    AlignedBytes::copy_from(&image).unwrap()
}

/// The index of the first largest value (written here, not taken from the core).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn bits(row: &[f32]) -> Vec<u32> {
    row.iter().map(|v| v.to_bits()).collect()
}

/// Segment lengths that vary between 1 and `tgt_len` and run the memory round more than once.
fn segment_lengths(tgt_len: usize) -> Vec<usize> {
    [tgt_len, 1, 2, tgt_len, 3, 1, tgt_len, tgt_len, 2, tgt_len]
        .into_iter()
        .map(|n| n.min(tgt_len))
        .collect()
}

#[test]
fn forward_last_gives_the_last_row_of_forward_bit_for_bit() {
    for (config_name, config, seed) in [("small", small_config(), 1), ("reference", reference_config(), 2)] {
        for (dtype, image) in images_of(&config, seed) {
            let model = Model::parse(image.bytes()).unwrap();
            let defaults = SessionOptions::from_config(&config);
            let variants = [
                defaults,
                SessionOptions {
                    same_length: true,
                    clamp_len: 3,
                    mem_init: MemInit::Zeros,
                    ..defaults
                },
            ];
            for (variant, base) in variants.into_iter().enumerate() {
                for mem_dtype in [MemDtype::F32, MemDtype::F16, MemDtype::Int8] {
                    let what = format!("{config_name}/{dtype}/variant {variant}/memory {mem_dtype:?}");
                    let options = SessionOptions { mem_dtype, ..base };
                    let mut full_arena = arena_for(&model, &options).unwrap();
                    let mut last_arena = arena_for(&model, &options).unwrap();
                    let mut full = Session::new(&model, full_arena.bytes_mut(), options).unwrap();
                    let mut last = Session::new(&model, last_arena.bytes_mut(), options).unwrap();
                    let lengths = segment_lengths(options.tgt_len as usize);
                    let stream = tokens(lengths.iter().sum(), config.n_token, seed + 10);
                    let mut start = 0;
                    for (s, &len) in lengths.iter().enumerate() {
                        let segment = &stream[start..start + len];
                        start += len;
                        let mut rows = Vec::new();
                        full.forward(segment, |i, row| rows.push((i, bits(row)))).unwrap();
                        let mut calls = Vec::new();
                        last.forward_last(segment, |i, row| calls.push((i, bits(row))))
                            .unwrap();
                        assert_eq!(rows.len(), len, "{what}: segment {s}");
                        assert_eq!(calls.len(), 1, "{what}: segment {s}: forward_last gives one row");
                        assert_eq!(calls[0], rows[len - 1], "{what}: segment {s} of {len} tokens");
                        assert_eq!(full.memory_len(), last.memory_len(), "{what}: segment {s}");
                    }
                }
            }
        }
    }
}

/// Greedy tokens computed here: the whole prompt with `forward`, then one token at a time,
/// each the first largest entry of the last row.
fn greedy_by_hand(model: &Model<'_>, options: SessionOptions, prompt: &[u32], count: usize) -> Vec<u32> {
    let mut arena = arena_for(model, &options).unwrap();
    let mut session = Session::new(model, arena.bytes_mut(), options).unwrap();
    let mut last_row = Vec::new();
    for segment in prompt.chunks(options.tgt_len as usize) {
        session
            .forward(segment, |_, row| last_row = row.to_vec())
            .unwrap();
    }
    let mut generated = Vec::new();
    loop {
        let next = argmax(&last_row);
        generated.push(next);
        if generated.len() == count {
            return generated;
        }
        session
            .forward(&[next], |_, row| last_row = row.to_vec())
            .unwrap();
    }
}

#[test]
fn greedy_generation_is_repeated_argmax() {
    let mut cases: Vec<(String, AlignedBytes, SessionOptions, Vec<u32>)> = Vec::new();
    for (config_name, config, seed) in [("small", small_config(), 3), ("reference", reference_config(), 4)] {
        for (dtype, image) in images_of(&config, seed) {
            for mem_dtype in [MemDtype::F32, MemDtype::Int8] {
                let options = SessionOptions {
                    mem_dtype,
                    ..SessionOptions::from_config(&config)
                };
                // A prompt of two and a bit segments.
                let prompt = tokens(2 * config.tgt_len as usize + 1, config.n_token, seed + 20);
                cases.push((
                    format!("{config_name}/{dtype}/{mem_dtype:?}"),
                    image.clone(),
                    options,
                    prompt,
                ));
            }
        }
    }
    let demo = demo_image();
    let demo_options = SessionOptions::from_config(Model::parse(demo.bytes()).unwrap().config());
    let prompt: Vec<u32> = b"Giving thanks unto the Father, which hath made us meet"
        .iter()
        .map(|&b| u32::from(b))
        .collect();
    // The demo's own settings (one segment of prompt), and short segments that split it.
    cases.push(("demo".into(), demo.clone(), demo_options, prompt.clone()));
    let short = SessionOptions {
        tgt_len: 8,
        mem_len: 16,
        ..demo_options
    };
    cases.push(("demo/tgt_len 8".into(), demo, short, prompt));

    for (what, image, options, prompt) in &cases {
        let model = Model::parse(image.bytes()).unwrap();
        // More tokens than the memory holds, so generation runs past a full memory.
        let count = 3 * (options.mem_len + options.tgt_len) as usize;
        let expected = greedy_by_hand(&model, *options, prompt, count);
        let mut distinct = expected.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(
            distinct.len() > 1,
            "{what}: a constant continuation tests little: {expected:?}"
        );
        assert_eq!(
            generate(&model, *options, prompt, count, Sampling::Greedy).unwrap(),
            expected,
            "{what}: greedy"
        );
        // A temperature of 0 is greedy too.
        let zero = Sampling::Temperature {
            temperature: 0.0,
            seed: 5,
        };
        assert_eq!(
            generate(&model, *options, prompt, count, zero).unwrap(),
            expected,
            "{what}: temperature 0"
        );
    }
}

/// How often each token is drawn in `draws` picks from `log_probs`.
fn frequencies(sampling: Sampling, log_probs: &[f32], draws: usize) -> Vec<f64> {
    let mut sampler = Sampler::new(sampling);
    let mut counts = vec![0usize; log_probs.len()];
    for _ in 0..draws {
        counts[sampler.pick(log_probs) as usize] += 1;
    }
    counts.into_iter().map(|c| c as f64 / draws as f64).collect()
}

/// `p^(1/T)` normalised, in f64, from log-probabilities.
fn tempered(log_probs: &[f32], temperature: f64) -> Vec<f64> {
    let top = log_probs
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let weights: Vec<f64> = log_probs
        .iter()
        .map(|&v| ((f64::from(v) - top) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

/// The bound on `|frequency - q|` for `n` draws of a token of probability `q`: 5 standard
/// deviations of a binomial, `5 sqrt(q (1 - q) / n)`, plus 3 draws for the rare tokens where the
/// normal approximation is poor. A fair sampler leaves it with probability below 1e-6 per
/// token, so with a fixed seed the test cannot flake (and any seed would pass); the f32
/// arithmetic inside the sampler is off by about 1e-7, far inside it.
fn bound(q: f64, n: usize) -> f64 {
    let n = n as f64;
    5.0 * (q * (1.0 - q) / n).sqrt() + 3.0 / n
}

fn assert_follows(what: &str, observed: &[f64], expected: &[f64], draws: usize) {
    for (token, (&f, &q)) in observed.iter().zip(expected).enumerate() {
        assert!(
            (f - q).abs() <= bound(q, draws),
            "{what}: token {token} drawn with frequency {f:.5}, expected {q:.5} ± {:.5}",
            bound(q, draws)
        );
    }
}

/// The last row the small random model gives after a few tokens.
fn model_row() -> Vec<f32> {
    let image = random_model(&small_config(), 6);
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions::from_config(model.config());
    let mut arena = arena_for(&model, &options).unwrap();
    let mut session = Session::new(&model, arena.bytes_mut(), options).unwrap();
    let mut last = Vec::new();
    session
        .forward(&[3, 17, 25, 8], |_, row| last = row.to_vec())
        .unwrap();
    last
}

#[test]
fn sampling_at_half_temperature_follows_p_squared() {
    const DRAWS: usize = 200_000;
    // Five distinct probabilities, the largest in the middle.
    let p = [0.10f64, 0.40, 0.05, 0.30, 0.15];
    let hand_made: Vec<f32> = p.iter().map(|&v| v.ln() as f32).collect();
    for (what, log_probs) in [("hand-made", hand_made), ("model row", model_row())] {
        let at = |temperature, seed| Sampling::Temperature { temperature, seed };
        let half = frequencies(at(0.5, 21), &log_probs, DRAWS);
        let one = frequencies(at(1.0, 22), &log_probs, DRAWS);
        let expected_half = tempered(&log_probs, 0.5);
        let expected_one = tempered(&log_probs, 1.0);
        assert_follows(&format!("{what} at T = 0.5"), &half, &expected_half, DRAWS);
        assert_follows(&format!("{what} at T = 1"), &one, &expected_one, DRAWS);
        // The two temperatures are told apart: the most likely token is drawn measurably more
        // often at T = 0.5 (by more than ten times the bound), so a sampler that ignores the
        // temperature fails here as well as above.
        let top = argmax(&log_probs) as usize;
        assert!(
            half[top] - one[top] > 10.0 * bound(expected_one[top], DRAWS),
            "{what}: top token at T = 0.5: {:.5}, at T = 1: {:.5}",
            half[top],
            one[top]
        );
    }
    // p^2 of the hand-made row, normalised, written out: tempered() is checked too.
    let squares = [0.01, 0.16, 0.0025, 0.09, 0.0225];
    let total: f64 = squares.iter().sum();
    let hand_made: Vec<f32> = p.iter().map(|&v| v.ln() as f32).collect();
    for (q, square) in tempered(&hand_made, 0.5).iter().zip(squares) {
        assert!((q - square / total).abs() < 1e-6, "{q} vs {}", square / total);
    }
}

#[test]
fn greedy_and_zero_temperature_pick_the_argmax() {
    let mut rng = Rng::new(31);
    let mut rows: Vec<Vec<f32>> = (0..2000)
        .map(|_| {
            let n = 1 + rng.index(60);
            (0..n).map(|_| -10.0 * rng.unit_f32()).collect()
        })
        .collect();
    rows.push(model_row());
    let mut greedy = Sampler::new(Sampling::Greedy);
    let mut zero = Sampler::new(Sampling::Temperature {
        temperature: 0.0,
        seed: 32,
    });
    let mut below_zero = Sampler::new(Sampling::Temperature {
        temperature: -1.0,
        seed: 33,
    });
    let mut tops = std::collections::HashSet::new();
    for row in &rows {
        let top = argmax(row);
        tops.insert(top);
        assert_eq!(greedy.pick(row), top, "greedy on {row:?}");
        assert_eq!(zero.pick(row), top, "temperature 0 on {row:?}");
        assert_eq!(below_zero.pick(row), top, "temperature -1 on {row:?}");
    }
    // The argmax moves around, so a sampler that always answers one position fails.
    assert!(tops.len() > 20, "only {} distinct argmaxes", tops.len());
}

#[test]
fn the_same_seed_repeats_and_other_seeds_differ() {
    let row = model_row();
    let draws = |seed: u64, temperature: f32| {
        let mut sampler = Sampler::new(Sampling::Temperature { temperature, seed });
        (0..500).map(|_| sampler.pick(&row)).collect::<Vec<u32>>()
    };
    for temperature in [0.5, 1.0, 2.0] {
        for seed in [1, 2, 77, u64::MAX] {
            assert_eq!(
                draws(seed, temperature),
                draws(seed, temperature),
                "seed {seed}, T = {temperature}"
            );
            assert_ne!(
                draws(seed, temperature),
                draws(seed.wrapping_add(1), temperature),
                "seeds {seed} and {}, T = {temperature}",
                seed.wrapping_add(1)
            );
        }
    }
    // A clone continues the same stream.
    let mut sampler = Sampler::new(Sampling::Temperature {
        temperature: 1.0,
        seed: 9,
    });
    sampler.pick(&row);
    let mut copy = sampler.clone();
    let ahead: Vec<u32> = (0..100).map(|_| sampler.pick(&row)).collect();
    let behind: Vec<u32> = (0..100).map(|_| copy.pick(&row)).collect();
    assert_eq!(ahead, behind);

    // The same through generation.
    let image = random_model(&small_config(), 8);
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions::from_config(model.config());
    let run = |seed| {
        let sampling = Sampling::Temperature {
            temperature: 1.0,
            seed,
        };
        generate(&model, options, &[1, 2, 3], 40, sampling).unwrap()
    };
    assert_eq!(run(10), run(10));
    assert_ne!(run(10), run(11));
    assert_ne!(
        run(10),
        generate(&model, options, &[1, 2, 3], 40, Sampling::Greedy).unwrap()
    );
}
