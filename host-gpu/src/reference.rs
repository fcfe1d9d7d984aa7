//! [`Reference`]: a model on a backend, scoring batches of independent token streams.

use txl_core::{Config, Model, SessionOptions};

use crate::cpu::statistics::ChannelStats;
use crate::cpu::CpuEngine;
use crate::cuda::{CudaEngine, CudaLimits};
use crate::engine::{lockstep, Segment, Settings, StepOutput, Wanted};
use crate::error::{with_room, Error};
use crate::real::Real;
use crate::statistics::{ChannelRanges, Statistics};
use crate::weights::HostWeights;

/// Where and in which precision the forward pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// CPU, f64: the golden reference.
    Cpu64,
    /// CPU, f32.
    Cpu32,
    /// NVIDIA GPU through CUDA (cuBLAS and NVRTC-compiled kernels), f32.
    Cuda,
}

impl Backend {
    /// `cpu64`, `cpu32` or `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu64 => "cpu64",
            Backend::Cpu32 => "cpu32",
            Backend::Cuda => "cuda",
        }
    }
}

/// What scoring one stream gave.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamScores {
    /// `logp[i] = ln p(t[i+1] | t[..=i])`, length `N - 1` (0 for an empty stream).
    pub logp: Vec<f64>,
    /// The full log-probability rows of positions `0..rows_kept`, `(rows_kept, n_token)`.
    pub rows: Vec<f64>,
    /// How many rows `rows` holds.
    pub rows_kept: usize,
}

impl StreamScores {
    /// Mean negative log-likelihood in nats (0 when nothing was predicted).
    pub fn nll(&self) -> f64 {
        if self.logp.is_empty() {
            return 0.0;
        }
        -self.logp.iter().sum::<f64>() / self.logp.len() as f64
    }

    /// Mean bits per token.
    pub fn bits_per_token(&self) -> f64 {
        self.nll() / std::f64::consts::LN_2
    }
}

#[derive(Debug)]
enum Engine {
    Cpu64(CpuEngine<f64>),
    Cpu32(CpuEngine<f32>),
    Cuda(Box<CudaEngine>),
}

/// A model loaded onto a backend: the weights are copied (to f64, f32, or to the GPU), so the
/// image may be dropped afterwards.
#[derive(Debug)]
pub struct Reference {
    config: Config,
    backend: Backend,
    engine: Engine,
}

impl Reference {
    /// Copies `model`'s weights for `backend`. For [`Backend::Cuda`] this fails with
    /// [`Error::NoGpu`] where there is no usable GPU, and with [`Error::NoNvrtc`] or
    /// [`Error::KernelCompile`] when the kernels cannot be compiled; on any backend with
    /// [`Error::AllocationFailed`] when the copy is more than the allocator gives.
    pub fn new(model: &Model<'_>, backend: Backend) -> Result<Self, Error> {
        let engine = match backend {
            Backend::Cpu64 => Engine::Cpu64(CpuEngine::new(HostWeights::new(model)?)),
            Backend::Cpu32 => Engine::Cpu32(CpuEngine::new(HostWeights::new(model)?)),
            Backend::Cuda => Engine::Cuda(Box::new(CudaEngine::new(
                HostWeights::new(model)?,
                CudaLimits::default(),
            )?)),
        };
        Ok(Reference {
            config: *model.config(),
            backend,
            engine,
        })
    }

    /// Test-only: [`Backend::Cuda`] with smaller launch and output-chunk sizes than
    /// [`Reference::new`] uses (which are [`CudaLimits::default`]). `Error::BadOptions` when the
    /// kernels do not support `limits` (checked before looking for a GPU), then the errors of
    /// [`Reference::new`].
    #[doc(hidden)]
    pub fn with_cuda_limits(model: &Model<'_>, limits: CudaLimits) -> Result<Self, Error> {
        let engine = CudaEngine::new(HostWeights::new(model)?, limits)?;
        Ok(Reference {
            config: *model.config(),
            backend: Backend::Cuda,
            engine: Engine::Cuda(Box::new(engine)),
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Scores one token sequence, like the core's scorer: consecutive segments of
    /// `options.tgt_len` with the memory carried, keeping the first `keep_rows` full rows.
    pub fn score(
        &mut self,
        tokens: &[u32],
        options: &SessionOptions,
        keep_rows: usize,
        progress: impl FnMut(usize),
    ) -> Result<StreamScores, Error> {
        let mut scores = self.score_batch(&[tokens], options, keep_rows, progress)?;
        Ok(scores.remove(0))
    }

    /// Scores independent `streams`, each with its own memory, in lockstep: step `k` runs
    /// segment `k` (tokens `k * tgt_len..`) of every stream that has one. Each stream gets the
    /// same result as scoring it alone. `progress(done)` is called after each step with the
    /// number of tokens processed over all streams.
    pub fn score_batch(
        &mut self,
        streams: &[&[u32]],
        options: &SessionOptions,
        keep_rows: usize,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<StreamScores>, Error> {
        let settings = Settings::new(options)?;
        let n_token = self.config.n_token;
        check_tokens(streams, n_token)?;
        // What is kept is sized by the input and `keep_rows`, so it is asked for up front.
        let mut scores: Vec<StreamScores> = with_room(streams.len(), "the streams' scores")?;
        for tokens in streams {
            let rows_kept = keep_rows.min(tokens.len());
            let row_values = rows_kept.saturating_mul(n_token as usize);
            scores.push(StreamScores {
                logp: with_room(tokens.len().saturating_sub(1), "the log-probabilities")?,
                rows: with_room(row_values, "the kept rows")?,
                rows_kept,
            });
        }
        match &mut self.engine {
            Engine::Cpu64(e) => e.start(streams.len(), settings)?,
            Engine::Cpu32(e) => e.start(streams.len(), settings)?,
            Engine::Cuda(e) => e.start(streams.len(), settings)?,
        }
        let mut done = 0;
        for (start, segments) in lockstep(streams, settings.tgt_len) {
            let mut targets = Vec::new();
            let mut full_rows = Vec::new();
            for segment in &segments {
                let tokens = streams[segment.stream];
                for position in start..start + segment.tokens.len() {
                    if position < scores[segment.stream].rows_kept {
                        full_rows.push(targets.len());
                    }
                    targets.push(tokens.get(position + 1).copied());
                }
            }
            let wanted = Wanted {
                targets: &targets,
                full_rows: &full_rows,
            };
            let out: StepOutput = match &mut self.engine {
                Engine::Cpu64(e) => e.step(&segments, &wanted)?,
                Engine::Cpu32(e) => e.step(&segments, &wanted)?,
                Engine::Cuda(e) => e.step(&segments, &wanted)?,
            };
            // Hand each row's results to its stream.
            let mut row = 0;
            let mut full = out.full_rows.chunks_exact(n_token as usize);
            for segment in &segments {
                let s = &mut scores[segment.stream];
                for position in start..start + segment.tokens.len() {
                    if targets[row].is_some() {
                        s.logp.push(out.target_logp[row]);
                    }
                    if position < s.rows_kept {
                        s.rows.extend_from_slice(full.next().unwrap_or_default());
                    }
                    row += 1;
                }
                done += segment.tokens.len();
            }
            progress(done);
        }
        Ok(scores)
    }
}

/// Every token of every stream below `n_token`, or the first one that is not.
fn check_tokens(streams: &[&[u32]], n_token: u32) -> Result<(), Error> {
    for (stream, tokens) in streams.iter().enumerate() {
        if let Some((position, &token)) = tokens.iter().enumerate().find(|(_, &t)| t >= n_token) {
            return Err(Error::TokenOutOfRange {
                stream,
                position,
                token,
                n_token,
            });
        }
    }
    Ok(())
}

/// Calls `step` for each step of `streams` in lockstep (segment `k` of every stream at step
/// `k`), asking for no output: the engines skip the output layer.
fn each_step(
    streams: &[&[u32]],
    settings: Settings,
    mut step: impl FnMut(&[Segment<'_>], &Wanted<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    for (_, segments) in lockstep(streams, settings.tgt_len) {
        let rows = segments.iter().map(|s| s.tokens.len()).sum();
        let targets = vec![None; rows];
        let wanted = Wanted {
            targets: &targets,
            full_rows: &[],
        };
        step(&segments, &wanted)?;
    }
    Ok(())
}

/// Runs `streams` on the CPU `engine` with `stats` observing.
fn observe<T: Real>(
    engine: &mut CpuEngine<T>,
    streams: &[&[u32]],
    settings: Settings,
    mut stats: ChannelStats,
) -> Result<Statistics, Error> {
    engine.start(streams.len(), settings)?;
    each_step(streams, settings, |segments, wanted| {
        engine.step_observed(segments, wanted, Some(&mut stats)).map(drop)
    })?;
    Ok(stats.finish())
}

/// [`observe`] on the GPU: the statistics stay on the device until the last step.
fn observe_on_device(
    engine: &mut CudaEngine,
    streams: &[&[u32]],
    settings: Settings,
    grams: bool,
) -> Result<Statistics, Error> {
    engine.start(streams.len(), settings)?;
    let mut stats = engine.statistics(grams);
    each_step(streams, settings, |segments, wanted| {
        engine.step_observed(segments, wanted, Some(&mut stats)).map(drop)
    })?;
    engine.finish_statistics(stats)
}

impl Reference {
    /// What the quantizer calibrates with, seen while the model runs over `streams` as
    /// [`Reference::score_batch`] runs them (each stream with its own memory, in segments of
    /// `options.tgt_len`, the output layer skipped): per input channel of every linear layer
    /// (and of the embedding projections and the output layer) the largest `|x|`, and with
    /// `grams` the Gram matrix `XᵀX` of the inputs, accumulated in f64 on every backend (on
    /// CUDA by cuBLAS's double-precision products, on the device).
    pub fn statistics(
        &mut self,
        streams: &[&[u32]],
        options: &SessionOptions,
        grams: bool,
    ) -> Result<Statistics, Error> {
        let settings = Settings::new(options)?;
        check_tokens(streams, self.config().n_token)?;
        let config = *self.config();
        match &mut self.engine {
            Engine::Cpu64(e) => observe(e, streams, settings, ChannelStats::new(&config, grams)),
            Engine::Cpu32(e) => observe(e, streams, settings, ChannelStats::new(&config, grams)),
            Engine::Cuda(e) => observe_on_device(e, streams, settings, grams),
        }
    }

    /// The ranges of [`Reference::statistics`] alone.
    pub fn channel_ranges(
        &mut self,
        streams: &[&[u32]],
        options: &SessionOptions,
    ) -> Result<ChannelRanges, Error> {
        Ok(self.statistics(streams, options, false)?.ranges)
    }
}

#[cfg(test)]
mod tests {
    use txl_core::{AlignedBytes, MemInit, Model, SessionOptions};

    use crate::{random_image, small_config, Backend, Error, RandomInit, Reference};

    #[test]
    fn sessions_beyond_the_allocator_are_errors_not_aborts() {
        let image = random_image(&small_config(), 1, RandomInit::default()).unwrap();
        let bytes = AlignedBytes::copy_from(&image).unwrap();
        let model = Model::parse(bytes.bytes()).unwrap();
        for backend in [Backend::Cpu64, Backend::Cpu32] {
            let mut reference = Reference::new(&model, backend).unwrap();
            // Position keys for 2^33 distances of d_model 16: a terabyte of f64.
            let options = SessionOptions {
                tgt_len: u32::MAX,
                mem_len: u32::MAX,
                clamp_len: 0,
                mem_init: MemInit::Zeros,
                ..SessionOptions::from_config(model.config())
            };
            match reference.score(&[1, 2, 3], &options, 0, |_| {}) {
                Err(Error::AllocationFailed { what, bytes, .. }) => {
                    assert!(bytes > 1 << 39, "{what}: {bytes}")
                }
                other => panic!("{backend:?}: expected AllocationFailed, got {other:?}"),
            }
            // The same reference still scores with sane options afterwards, and keep_rows is
            // capped by the tokens.
            let options = SessionOptions::from_config(model.config());
            let scores = reference.score(&[1, 2, 3], &options, usize::MAX, |_| {}).unwrap();
            assert_eq!((scores.logp.len(), scores.rows_kept), (2, 3));
        }
    }
}
