//! The soak: a long stream of tokens, one at a time, through the int8 demo model with int8
//! memory, the session state saved and restored into another session every `TXL_SOAK_EVERY`
//! tokens, gives the digest of one uninterrupted run, with every log-probability finite and no
//! memory growth.
//!
//! CI streams 20,000 tokens (a state every 1,000). The full soak (docs/TESTING.md):
//!
//! ```text
//! TXL_SOAK_TOKENS=1000000 TXL_SOAK_EVERY=10000 cargo test --release -p txl-tests --test soak -- --nocapture
//! ```

use txl_core::digest::Digest;
use txl_core::{AlignedBytes, MemDtype, Model, Session, SessionOptions};
use txl_host_gpu::quantize::{quantize_weights, Target};
use txl_tests::fixtures_dir;
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::tokens::read_byte_tokens;

/// `name` from the environment, or `default`.
fn setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text}: not a whole number")),
        Err(_) => default,
    }
}

/// `count` byte tokens: the demo's held-out and calibration texts, over and over, each pass
/// starting at another offset so the stream does not repeat with one period.
fn stream(count: usize) -> Vec<u32> {
    let demo = fixtures_dir().join("demo");
    let mut text = read_byte_tokens(&demo.join("heldout.txt")).unwrap();
    text.extend(read_byte_tokens(&demo.join("calib.txt")).unwrap());
    let mut tokens = Vec::with_capacity(count);
    let mut offset = 0;
    while tokens.len() < count {
        let take = (count - tokens.len()).min(text.len() - offset);
        tokens.extend_from_slice(&text[offset..offset + take]);
        offset = (offset + 997) % (text.len() / 2);
    }
    tokens
}

/// What a streamed run gave.
#[derive(Debug, PartialEq)]
struct Run {
    digest: u32,
    predicted: usize,
    /// The sum of every ln p, in order.
    sum: f64,
}

/// Resident set size of this process, in bytes (Linux), or `None`.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Streams `tokens` one at a time through `sessions[0]`; every `every` tokens (if any), saves
/// the state and restores it into the other session, which goes on.
fn run(sessions: &mut [Session<'_, '_>; 2], tokens: &[u32], every: Option<usize>, state: &mut [u8]) -> Run {
    let mut digest = Digest::new();
    let mut sum = 0.0f64;
    let mut active = 0;
    for (position, &token) in tokens.iter().enumerate() {
        if let Some(every) = every {
            if position > 0 && position % every == 0 {
                let len = sessions[active].save_state(state).expect("save");
                active = 1 - active;
                sessions[active].restore_state(&state[..len]).expect("restore");
            }
        }
        sessions[active]
            .forward(&[token], |_, log_probs| {
                if let Some(&next) = tokens.get(position + 1) {
                    let log_prob = log_probs[next as usize];
                    assert!(log_prob.is_finite(), "ln p = {log_prob} at position {position}");
                    digest.push(log_prob);
                    sum += f64::from(log_prob);
                }
            })
            .expect("forward");
    }
    Run {
        digest: digest.value(),
        predicted: tokens.len().saturating_sub(1),
        sum,
    }
}

#[test]
fn a_long_stream_saved_and_restored_gives_one_runs_bits_in_constant_memory() {
    let count = setting("TXL_SOAK_TOKENS", 20_000);
    let every = setting("TXL_SOAK_EVERY", 1_000).max(1);
    let demo = fixtures_dir().join("demo");
    let f32_image = load_hf_checkpoint(&demo, CheckpointFormat::Auto, false)
        .and_then(|checkpoint| checkpoint.to_image())
        .expect("the demo checkpoint converts");
    let f32_image = AlignedBytes::copy_from(&f32_image).unwrap();
    let f32_model = Model::parse(f32_image.bytes()).unwrap();
    let image = AlignedBytes::copy_from(&quantize_weights(&f32_model, Target::Int8).unwrap()).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions {
        tgt_len: 1,
        mem_dtype: MemDtype::Int8,
        ..SessionOptions::from_config(model.config())
    };
    let tokens = stream(count);
    let arena_bytes = Session::arena_bytes(&model, &options).unwrap();
    let mut arenas = [
        AlignedBytes::zeroed(arena_bytes).unwrap(),
        AlignedBytes::zeroed(arena_bytes).unwrap(),
    ];
    let mut state = vec![0u8; Session::state_bytes_for(&model, &options).unwrap()];

    let started = std::time::Instant::now();
    let uninterrupted = {
        let [a, b] = &mut arenas;
        let mut sessions = [
            Session::new(&model, a.bytes_mut(), options).unwrap(),
            Session::new(&model, b.bytes_mut(), options).unwrap(),
        ];
        run(&mut sessions, &tokens, None, &mut state)
    };
    let one_run = started.elapsed();

    let resident_before = resident_bytes();
    let started = std::time::Instant::now();
    let interrupted = {
        let [a, b] = &mut arenas;
        let mut sessions = [
            Session::new(&model, a.bytes_mut(), options).unwrap(),
            Session::new(&model, b.bytes_mut(), options).unwrap(),
        ];
        run(&mut sessions, &tokens, Some(every), &mut state)
    };
    let saved_run = started.elapsed();
    let resident_after = resident_bytes();

    assert_eq!(
        interrupted, uninterrupted,
        "{count} tokens with the state moved every {every}: the digest differs from one run's"
    );
    if let (Some(before), Some(after)) = (resident_before, resident_after) {
        // The loop allocates nothing: the arenas and the state buffer were made before it.
        assert!(
            after <= before + (1 << 20),
            "memory grew from {before} to {after} bytes over the stream"
        );
    }
    let restores = count.saturating_sub(1) / every;
    println!(
        "soak: {count} tokens (tgt_len 1, int8 weights, int8 memory, mem_len {}), state of {} bytes \
         moved {restores} times: digest {:#010x} both ways, {:.6} bits/token; one run {:.1} s, \
         with the restores {:.1} s; resident memory {:?} -> {:?} bytes",
        options.mem_len,
        state.len(),
        interrupted.digest,
        -interrupted.sum / interrupted.predicted.max(1) as f64 / std::f64::consts::LN_2,
        one_run.as_secs_f64(),
        saved_run.as_secs_f64(),
        resident_before,
        resident_after,
    );
}
