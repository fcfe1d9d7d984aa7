//! The forward pass on the GPU, f32, the same steps as the CPU backend: every product a
//! cuBLAS GEMM (per stream, the attention's three products batched over heads), everything
//! else a kernel from `kernels.cu`. The weights, the streams' memories and the activations
//! stay on the device; only token ids go up and only the asked-for log-probabilities come down.
//!
//! Read [`CudaEngine::step`] top to bottom, as the CPU backend's: [`embed`], then per layer
//! [`Step::attention_sublayer`] (`[q k v] = LN?(h) W_qkv^T`, the keys and values stored in the
//! stream's memory, the content and position scores, the masked softmax, `P V`, then
//! `h = LN?(h + attn W_o^T)`) and [`Step::feed_forward_sublayer`], then
//! [`Run::keep_last_positions`] and [`Step::output`] (the adaptive log-softmax, [`log_probs`],
//! in chunks of rows).

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::device::{Buffers, DeviceLayer, DeviceWeights, Gpu, Kernels};
use super::library::{compile_kernels, cuda_available, KERNEL_NAMES};
use super::limits::CudaLimits;
use super::ops::{add_bias, gemm, residual, Batch, SINGLE};
use super::statistics::{Consumer, DeviceStatistics};
use super::vocab::{cluster_input, embed, log_probs};
use crate::cpu::matmul::Rhs;
use crate::engine::{Segment, Settings, StepOutput, Wanted};
use crate::error::{with_room, Error};
use crate::statistics::Statistics;
use crate::weights::{position_embeddings, HostWeights};
use txl_core::Linear;

/// One stream's memory: per layer, `(capacity, W)` keys and values, rows `0..len` in use.
struct StreamMemory {
    len: usize,
    keys: Vec<CudaSlice<f32>>,
    values: Vec<CudaSlice<f32>>,
}

/// What one `score` call sets up.
struct Run {
    settings: Settings,
    /// Per layer `(max_distance + 1, W)`.
    position_keys: Vec<CudaSlice<f32>>,
    streams: Vec<StreamMemory>,
    /// `(capacity, W)`: where a memory is compacted to before the two swap.
    spare: CudaSlice<f32>,
    max_rows: usize,
    chunk: usize,
    b: Buffers,
}

/// The CUDA forward pass.
pub(crate) struct CudaEngine {
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    k: Kernels,
    /// Largest output chunk, in log-probabilities ([`CudaLimits::output_elements`]).
    output_elements: usize,
    config: txl_core::Config,
    eps: f32,
    w: DeviceWeights,
    run: Option<Run>,
}

impl std::fmt::Debug for CudaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEngine")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The PTX architecture of a compute capability NVRTC 13 can target, if it is one we name.
fn arch_of(capability: (i32, i32)) -> Option<&'static str> {
    Some(match capability {
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        _ => return None,
    })
}

impl CudaEngine {
    /// Checks `limits` and for a GPU, compiles the kernels and uploads the weights.
    pub fn new(w: HostWeights<f32>, limits: CudaLimits) -> Result<Self, Error> {
        limits.check()?;
        cuda_available()?;
        // cudarc panics where a library lacks a symbol it expects; report that as an error too.
        let create = std::panic::AssertUnwindSafe(|| Self::create(w, limits));
        std::panic::catch_unwind(create).unwrap_or_else(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a CUDA library failed to load".into());
            Err(Error::NoGpu(why))
        })
    }

    fn create(w: HostWeights<f32>, limits: CudaLimits) -> Result<Self, Error> {
        let ctx = CudaContext::new(0)?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone())?;
        // Plain f32 products: no TF32 tensor cores.
        // SAFETY: the handle is valid for the life of `blas`.
        unsafe {
            cudarc::cublas::sys::cublasSetMathMode(
                *blas.handle(),
                cudarc::cublas::sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            )
            .result()?
        };
        let arch = arch_of(ctx.compute_capability()?);
        let module = ctx.load_module(compile_kernels(arch)?.into_ptx())?;
        let f = |name: &str| module.load_function(name);
        debug_assert_eq!(KERNEL_NAMES.len(), 13);
        let k = Kernels {
            block: limits.block,
            gather_rows: f("gather_rows")?,
            add_position_biases: f("add_position_biases")?,
            store_kv: f("store_kv")?,
            fill_kv: f("fill_kv")?,
            attention_probs: f("attention_probs")?,
            layer_norm: f("layer_norm")?,
            residual: f("residual")?,
            add_bias: f("add_bias")?,
            adaptive_log_softmax: f("adaptive_log_softmax")?,
            gather_targets: f("gather_targets")?,
            column_max_abs: f("column_max_abs")?,
            widen: f("widen")?,
            mirror_upper: f("mirror_upper")?,
        };
        let up = |v: &Vec<f32>| stream.clone_htod(v.as_slice());
        let all = |v: &Vec<Vec<f32>>| v.iter().map(up).collect::<Result<Vec<_>, _>>();
        let layers = w
            .layers
            .iter()
            .map(|l| -> Result<DeviceLayer, Error> {
                Ok(DeviceLayer {
                    r_w_bias: up(&l.r_w_bias)?,
                    r_r_bias: up(&l.r_r_bias)?,
                    qkv: up(&l.qkv)?,
                    r_net: up(&l.r_net)?,
                    o_net: up(&l.o_net)?,
                    attn_norm_weight: up(&l.attn_norm_weight)?,
                    attn_norm_bias: up(&l.attn_norm_bias)?,
                    ff1_weight: up(&l.ff1_weight)?,
                    ff1_bias: up(&l.ff1_bias)?,
                    ff2_weight: up(&l.ff2_weight)?,
                    ff2_bias: up(&l.ff2_bias)?,
                    ff_norm_weight: up(&l.ff_norm_weight)?,
                    ff_norm_bias: up(&l.ff_norm_bias)?,
                    zero_key: up(&l.zero_key)?,
                    zero_value: up(&l.zero_value)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let c = w.config;
        let bounds: Vec<i32> = (0..=c.n_clusters())
            .map(|cluster| c.cluster_range(cluster).0 as i32)
            .chain([c.n_token as i32])
            .collect();
        let cluster = if c.n_clusters() > 0 {
            Some((up(&w.cluster_weight)?, up(&w.cluster_bias)?))
        } else {
            None
        };
        let weights = DeviceWeights {
            emb_layers: all(&w.emb_layers)?,
            emb_projs: all(&w.emb_projs)?,
            layers,
            out_weights: all(&w.out_weights)?,
            out_biases: all(&w.out_biases)?,
            out_projs: all(&w.out_projs)?,
            cluster,
            bounds: stream.clone_htod(bounds.as_slice())?,
        };
        stream.synchronize()?;
        Ok(CudaEngine {
            eps: w.layer_norm_epsilon() as f32,
            config: c,
            _ctx: ctx,
            stream,
            blas,
            k,
            output_elements: limits.output_elements,
            w: weights,
            run: None,
        })
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, Error> {
        Ok(self.stream.alloc_zeros::<T>(len.max(1))?)
    }

    /// Forgets every stream and starts `n_streams` new ones under `settings`: position keys,
    /// memories (zero states if asked) and buffers for `n_streams * tgt_len` rows.
    pub fn start(&mut self, n_streams: usize, settings: Settings) -> Result<(), Error> {
        self.run = None; // free the previous run's memory first
        let c = self.config;
        let d_model = c.d_model as usize;
        let width = c.qkv_width() as usize;
        let n_head = c.n_head as usize;
        let distances = settings.max_distance + 1;
        let capacity = settings.mem_len.saturating_add(settings.tgt_len);
        let max_rows = n_streams.max(1).saturating_mul(settings.tgt_len);
        let n_token = c.n_token as usize;
        let chunk = (self.output_elements / n_token).clamp(1, max_rows);
        let d_embed = c.d_embed as usize;
        // The kernels and cuBLAS take lengths and row counts as 32-bit ints, and every buffer
        // below is sized by the settings: both are checked before anything is allocated.
        let lengths = [capacity, distances, max_rows.saturating_mul(2)];
        let buffers = [
            distances.checked_mul(width),
            capacity.checked_mul(width),
            max_rows.checked_mul(3 * width.max(d_model).max(d_embed).max(c.d_inner as usize)),
            n_head
                .saturating_mul(settings.tgt_len)
                .checked_mul(capacity.max(distances)),
        ];
        if lengths.iter().any(|&n| i32::try_from(n).is_err()) || buffers.iter().any(Option::is_none) {
            return Err(Error::BadOptions(format!(
                "tgt_len {} and mem_len {} for {n_streams} stream(s) are beyond what the CUDA kernels index \
                 (32-bit lengths)",
                settings.tgt_len, settings.mem_len
            )));
        }

        // R (distances, W) = pos_emb (distances, d_model) @ W_r^T, per layer.
        let pos_emb_f64 = position_embeddings(distances, d_model)?;
        let mut pos_emb = with_room(pos_emb_f64.len(), "the position embeddings")?;
        pos_emb.extend(pos_emb_f64.into_iter().map(|v| v as f32));
        let pos_emb = self.stream.clone_htod(pos_emb.as_slice())?;
        let mut position_keys = Vec::new();
        for layer in &self.w.layers {
            let mut r = self.zeros::<f32>(distances * width)?;
            gemm(
                &self.blas,
                (distances, width, d_model),
                &pos_emb.slice(..),
                d_model,
                &layer.r_net.slice(..),
                Rhs::Transposed { ld: d_model },
                &mut r.slice_mut(..),
                width,
                SINGLE,
            )?;
            position_keys.push(r);
        }

        let memory_len = if settings.zero_memory { settings.mem_len } else { 0 };
        let mut streams = Vec::with_capacity(n_streams);
        for _ in 0..n_streams {
            let mut memory = StreamMemory {
                len: memory_len,
                keys: Vec::new(),
                values: Vec::new(),
            };
            for layer in &self.w.layers {
                let mut keys = self.zeros::<f32>(capacity * width)?;
                let mut values = self.zeros::<f32>(capacity * width)?;
                if memory_len > 0 {
                    let (n, w) = (memory_len as i32, width as i32);
                    let mut launch = self.stream.launch_builder(&self.k.fill_kv);
                    launch.arg(&layer.zero_key).arg(&layer.zero_value);
                    launch.arg(&mut keys).arg(&mut values).arg(&n).arg(&w);
                    // SAFETY: fill_kv(const float*, const float*, float*, float*, int, int) writes
                    // n * width elements of keys and values (capacity * width long) and reads
                    // width elements of the zero rows.
                    unsafe { launch.launch(self.k.per_element(memory_len * width)) }?;
                }
                memory.keys.push(keys);
                memory.values.push(values);
            }
            streams.push(memory);
        }

        let d_wide = d_model.max(d_embed);
        let b = Buffers {
            hidden: self.zeros(max_rows * d_model)?,
            normed: self.zeros(max_rows * d_model)?,
            delta: self.zeros(max_rows * d_model)?,
            qkv: self.zeros(max_rows * 3 * width)?,
            content_q: self.zeros(max_rows * width)?,
            position_q: self.zeros(max_rows * width)?,
            attn: self.zeros(max_rows * width)?,
            inner: self.zeros(max_rows * c.d_inner as usize)?,
            content: self.zeros(n_head * settings.tgt_len * capacity)?,
            position: self.zeros(n_head * settings.tgt_len * distances)?,
            probs: self.zeros(n_head * settings.tgt_len * capacity)?,
            gathered: self.zeros(max_rows * d_embed)?,
            projected: self.zeros(max_rows.max(chunk) * d_wide)?,
            indices: self.zeros(2 * max_rows)?,
            identity: self
                .stream
                .clone_htod((0..max_rows as i32).collect::<Vec<i32>>().as_slice())?,
            logits: self.zeros(chunk * n_token)?,
            tail: self.zeros(chunk * c.n_clusters().max(1))?,
            targets: self.zeros(chunk)?,
            target_logp: self.zeros(chunk)?,
        };
        self.run = Some(Run {
            settings,
            position_keys,
            streams,
            spare: self.zeros(capacity * width)?,
            max_rows,
            chunk,
            b,
        });
        Ok(())
    }

    /// Runs one segment of each stream in `segments` and collects what `wanted` asks for:
    /// embed, then per layer the attention and feed-forward sub-layers, then keep the last
    /// `mem_len` positions of each stream and compute the output log-probabilities.
    pub fn step(&mut self, segments: &[Segment<'_>], wanted: &Wanted<'_>) -> Result<StepOutput, Error> {
        self.step_observed(segments, wanted, None)
    }

    /// Calibration statistics for this engine's model, empty: for [`CudaEngine::step_observed`].
    pub(crate) fn statistics(&self, grams: bool) -> DeviceStatistics {
        DeviceStatistics::new(self.stream.clone(), self.config, grams)
    }

    /// What `stats` saw, brought back from the device.
    pub(crate) fn finish_statistics(&self, stats: DeviceStatistics) -> Result<Statistics, Error> {
        stats.finish(&self.k)
    }

    /// [`CudaEngine::step`], with `stats` seeing every consumer's input rows on the device. With
    /// no target and no full row wanted, the output layer is skipped (its log-probabilities are
    /// NaN).
    pub(crate) fn step_observed(
        &mut self,
        segments: &[Segment<'_>],
        wanted: &Wanted<'_>,
        mut stats: Option<&mut DeviceStatistics>,
    ) -> Result<StepOutput, Error> {
        let gpu = Step(Gpu {
            stream: &self.stream,
            blas: &self.blas,
            k: &self.k,
            w: &self.w,
            c: self.config,
            eps: self.eps,
        });
        let run = self
            .run
            .as_mut()
            .ok_or(Error::BadOptions("no run started".into()))?;
        let rows: usize = segments.iter().map(|s| s.tokens.len()).sum();
        if rows > run.max_rows || segments.iter().any(|s| s.tokens.len() > run.settings.tgt_len) {
            return Err(Error::BadOptions(
                "a step larger than the run was set up for".into(),
            ));
        }

        // hidden (rows, d_model) = embeddings * sqrt(d_model)
        let tokens: Vec<u32> = segments.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        embed(&gpu, &mut run.b, &tokens, stats.as_deref_mut())?;

        for (l, lw) in gpu.w.layers.iter().enumerate() {
            gpu.attention_sublayer(l, lw, run, segments, rows, stats.as_deref_mut())?;
            gpu.feed_forward_sublayer(l, lw, &mut run.b, rows, stats.as_deref_mut())?;
        }
        if let Some(stats) = stats {
            gpu.observe_output_inputs(&mut run.b, rows, stats)?;
        }

        run.keep_last_positions(gpu.stream, segments, gpu.c.qkv_width() as usize)?;
        if wanted.full_rows.is_empty() && wanted.targets.iter().all(Option::is_none) {
            return Ok(StepOutput {
                target_logp: vec![f64::NAN; rows],
                full_rows: Vec::new(),
            });
        }
        gpu.output(&mut run.b, run.chunk, rows, wanted)
    }
}

/// Where one stream's segment sits in a step: its rows `r0..r0 + qlen` of the step's buffers,
/// after `mlen` positions of memory; it attends over `klen = mlen + qlen` keys, with position
/// keys for the `distances` nearest distances.
#[derive(Clone, Copy, Debug)]
struct SegmentShape {
    r0: usize,
    qlen: usize,
    mlen: usize,
    klen: usize,
    distances: usize,
}

impl SegmentShape {
    fn new(r0: usize, qlen: usize, mlen: usize, settings: &Settings) -> Self {
        let klen = mlen + qlen;
        SegmentShape {
            r0,
            qlen,
            mlen,
            klen,
            distances: klen.min(settings.max_distance + 1),
        }
    }
}

/// One step's launches: the device's [`Gpu`] with the engine's sub-layers as methods (a type of
/// this module's own, so the device's module depends on nothing here).
#[derive(Clone, Copy)]
struct Step<'a>(Gpu<'a>);

impl<'a> core::ops::Deref for Step<'a> {
    type Target = Gpu<'a>;

    fn deref(&self) -> &Gpu<'a> {
        &self.0
    }
}

impl Step<'_> {
    /// `W`: the width of all heads' queries, keys or values together.
    fn width(&self) -> usize {
        self.c.qkv_width() as usize
    }

    /// `normed (rows, d_model) = LN(hidden)` with `(gain, bias)`: the pre-LN models' input
    /// LayerNorm of a sub-layer.
    fn layer_norm(
        &self,
        b: &mut Buffers,
        (gain, bias): (&CudaSlice<f32>, &CudaSlice<f32>),
        rows: usize,
    ) -> Result<(), Error> {
        let dm = self.c.d_model as i32;
        let mut launch = self.stream.launch_builder(&self.k.layer_norm);
        launch.arg(&b.hidden).arg(&mut b.normed);
        launch.arg(gain).arg(bias).arg(&self.eps).arg(&dm);
        // SAFETY: layer_norm(const float*, float*, const float*, const float*, float, int)
        // reads and writes `rows` rows of d_model inside hidden and normed.
        unsafe { launch.launch(self.k.per_row(rows)) }?;
        Ok(())
    }

    /// The attention sub-layer of layer `l`: `h = LN?(h + Attn(LN?(h)) @ W_o^T)`, each stream
    /// attending over its memory plus its segment (Dai et al., 2019, section 3.3).
    fn attention_sublayer(
        &self,
        l: usize,
        lw: &DeviceLayer,
        run: &mut Run,
        segments: &[Segment<'_>],
        rows: usize,
        mut stats: Option<&mut DeviceStatistics>,
    ) -> Result<(), Error> {
        let b = &mut run.b;
        self.queries(lw, b, rows)?;
        if let Some(stats) = stats.as_deref_mut() {
            let x = if self.c.pre_lnorm { &b.normed } else { &b.hidden };
            let d_model = self.c.d_model as usize;
            stats.observe(
                self,
                Consumer::Linear(l, Linear::Qkv),
                &x.slice(..),
                rows,
                d_model,
            )?;
        }
        let mut r0 = 0;
        for segment in segments {
            let memory = &mut run.streams[segment.stream];
            let s = SegmentShape::new(r0, segment.tokens.len(), memory.len, &run.settings);
            let (keys, values) = (&mut memory.keys[l], &mut memory.values[l]);
            self.store_kv(b, s, keys, values)?;
            self.attention_scores(b, s, keys, &run.position_keys[l])?;
            self.attention_probs(b, s, &run.settings)?;
            self.attention_values(b, s, values)?;
            r0 += s.qlen;
        }
        if let Some(stats) = stats {
            let width = self.width();
            stats.observe(
                self,
                Consumer::Linear(l, Linear::ONet),
                &b.attn.slice(..),
                rows,
                width,
            )?;
        }
        self.attention_output(lw, b, rows)
    }

    /// `[q k v] (rows, 3W) = LN?(h) @ W_qkv^T`, then `content_q = q + u` and
    /// `position_q = q + v`, each `(rows, W)`.
    fn queries(&self, lw: &DeviceLayer, b: &mut Buffers, rows: usize) -> Result<(), Error> {
        let (d_model, width) = (self.c.d_model as usize, self.width());
        if self.c.pre_lnorm {
            self.layer_norm(b, (&lw.attn_norm_weight, &lw.attn_norm_bias), rows)?;
        }
        let x = if self.c.pre_lnorm { &b.normed } else { &b.hidden };
        gemm(
            self.blas,
            (rows, 3 * width, d_model),
            &x.slice(..),
            d_model,
            &lw.qkv.slice(..),
            Rhs::Transposed { ld: d_model },
            &mut b.qkv.slice_mut(..),
            3 * width,
            SINGLE,
        )?;
        let mut launch = self.stream.launch_builder(&self.k.add_position_biases);
        launch.arg(&b.qkv).arg(&lw.r_w_bias).arg(&lw.r_r_bias);
        let (rows_i, wd) = (rows as i32, width as i32);
        launch
            .arg(&mut b.content_q)
            .arg(&mut b.position_q)
            .arg(&rows_i)
            .arg(&wd);
        // SAFETY: add_position_biases(const float*, const float*, const float*, float*, float*,
        // int, int) touches `rows` rows inside each buffer.
        unsafe { launch.launch(self.k.per_element(rows * width)) }?;
        Ok(())
    }

    /// Appends the segment's keys and values (qkv rows `r0..r0 + qlen`) to the stream's
    /// memory, `(capacity, W)` each, at rows `mlen..klen`.
    fn store_kv(
        &self,
        b: &Buffers,
        s: SegmentShape,
        keys: &mut CudaSlice<f32>,
        values: &mut CudaSlice<f32>,
    ) -> Result<(), Error> {
        let width = self.width();
        let wd = width as i32;
        let mut launch = self.stream.launch_builder(&self.k.store_kv);
        let (row0, n, at) = (s.r0 as i32, s.qlen as i32, s.mlen as i32);
        launch
            .arg(&b.qkv)
            .arg(&row0)
            .arg(&n)
            .arg(&wd)
            .arg(&mut *keys)
            .arg(&mut *values)
            .arg(&at);
        // SAFETY: store_kv(const float*, int, int, int, float*, float*, int) reads qkv rows
        // r0..r0 + qlen (< rows) and writes memory rows mlen..klen (<= capacity).
        unsafe { launch.launch(self.k.per_element(s.qlen * width)) }?;
        Ok(())
    }

    /// The two score products, batched over the heads `h`:
    /// `content (n_head, qlen, klen)`: `AC_h = (Q + u)_h (qlen, d_head) @ K_h^T`, and
    /// `position (n_head, qlen, distances)`: `BD_h = (Q + v)_h (qlen, d_head) @ R_h^T` with the
    /// layer's position keys `R (max_distance + 1, W)`.
    fn attention_scores(
        &self,
        b: &mut Buffers,
        s: SegmentShape,
        keys: &CudaSlice<f32>,
        position_keys: &CudaSlice<f32>,
    ) -> Result<(), Error> {
        let (n_head, d_head) = (self.c.n_head as usize, self.c.d_head as usize);
        let width = self.width();
        let (r0, qlen, klen, distances) = (s.r0, s.qlen, s.klen, s.distances);
        // AC_h (qlen, klen) = (Q + u)_h (qlen, d_head) @ K_h^T, for every head h.
        gemm(
            self.blas,
            (qlen, klen, d_head),
            &b.content_q.slice(r0 * width..),
            width,
            &keys.slice(..),
            Rhs::Transposed { ld: width },
            &mut b.content.slice_mut(..),
            klen,
            Batch {
                count: n_head,
                stride_a: d_head,
                stride_b: d_head,
                stride_c: qlen * klen,
            },
        )?;
        // BD_h (qlen, distances) = (Q + v)_h (qlen, d_head) @ R_h^T
        gemm(
            self.blas,
            (qlen, distances, d_head),
            &b.position_q.slice(r0 * width..),
            width,
            &position_keys.slice(..),
            Rhs::Transposed { ld: width },
            &mut b.position.slice_mut(..),
            distances,
            Batch {
                count: n_head,
                stride_a: d_head,
                stride_b: d_head,
                stride_c: qlen * distances,
            },
        )?;
        Ok(())
    }

    /// `probs (n_head, qlen, klen)`: the masked softmax of `(AC + BD shifted) / sqrt(d_head)`,
    /// one block per (query, head).
    fn attention_probs(&self, b: &mut Buffers, s: SegmentShape, settings: &Settings) -> Result<(), Error> {
        let (n_head, d_head) = (self.c.n_head as usize, self.c.d_head as usize);
        let mut launch = self.stream.launch_builder(&self.k.attention_probs);
        let scale = (1.0 / (d_head as f64).sqrt()) as f32;
        let ints = [
            s.qlen as i32,
            s.klen as i32,
            s.distances as i32,
            s.mlen as i32,
            settings.mem_len as i32,
            settings.same_length as i32,
            settings.max_distance as i32,
        ];
        launch.arg(&b.content).arg(&b.position).arg(&mut b.probs);
        for v in &ints {
            launch.arg(v);
        }
        launch.arg(&scale);
        let grid = LaunchConfig {
            grid_dim: (s.qlen as u32, n_head as u32, 1),
            block_dim: (self.k.block, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: attention_probs(const float*, const float*, float*, int x 7, float) reads
        // (n_head, qlen, klen) and (n_head, qlen, distances) and writes (n_head, qlen, klen);
        // the buffers hold n_head * tgt_len * capacity and n_head * tgt_len *
        // (max_distance + 1) elements.
        unsafe { launch.launch(grid) }?;
        Ok(())
    }

    /// `attn` rows `r0..r0 + qlen`, `(qlen, W)`: per head `out_h (qlen, d_head) = P_h (qlen,
    /// klen) @ V_h (klen, d_head)`, batched over the heads.
    fn attention_values(
        &self,
        b: &mut Buffers,
        s: SegmentShape,
        values: &CudaSlice<f32>,
    ) -> Result<(), Error> {
        let (n_head, d_head) = (self.c.n_head as usize, self.c.d_head as usize);
        let width = self.width();
        let (r0, qlen, klen) = (s.r0, s.qlen, s.klen);
        // out_h (qlen, d_head) = P_h (qlen, klen) @ V_h (klen, d_head), into attn's rows.
        gemm(
            self.blas,
            (qlen, d_head, klen),
            &b.probs.slice(..),
            klen,
            &values.slice(..),
            Rhs::Plain { ld: width },
            &mut b.attn.slice_mut(r0 * width..),
            width,
            Batch {
                count: n_head,
                stride_a: qlen * klen,
                stride_b: d_head,
                stride_c: d_head,
            },
        )?;
        Ok(())
    }

    /// `h = LN?(h + attn @ W_o^T)`: `delta (rows, d_model) = attn (rows, W) @ W_o^T`, then the
    /// residual (with the post-LN models' LayerNorm).
    fn attention_output(&self, lw: &DeviceLayer, b: &mut Buffers, rows: usize) -> Result<(), Error> {
        let (d_model, width) = (self.c.d_model as usize, self.width());
        let not_pre = (!self.c.pre_lnorm) as i32;
        gemm(
            self.blas,
            (rows, d_model, width),
            &b.attn.slice(..),
            width,
            &lw.o_net.slice(..),
            Rhs::Transposed { ld: width },
            &mut b.delta.slice_mut(..),
            d_model,
            SINGLE,
        )?;
        residual(
            self.stream,
            self.k,
            b,
            (&lw.attn_norm_weight, &lw.attn_norm_bias),
            self.eps,
            d_model as i32,
            not_pre,
            rows,
        )
    }

    /// The feed-forward sub-layer: `h = LN?(h + ReLU(LN?(h) @ W_1^T + b_1) @ W_2^T + b_2)`,
    /// through `inner (rows, d_inner)` and `delta (rows, d_model)`.
    fn feed_forward_sublayer(
        &self,
        l: usize,
        lw: &DeviceLayer,
        b: &mut Buffers,
        rows: usize,
        mut stats: Option<&mut DeviceStatistics>,
    ) -> Result<(), Error> {
        let (d_model, d_inner) = (self.c.d_model as usize, self.c.d_inner as usize);
        let (dm, di) = (d_model as i32, d_inner as i32);
        let not_pre = (!self.c.pre_lnorm) as i32;
        let (stream, k) = (self.stream, self.k);
        if self.c.pre_lnorm {
            self.layer_norm(b, (&lw.ff_norm_weight, &lw.ff_norm_bias), rows)?;
        }
        let x = if self.c.pre_lnorm { &b.normed } else { &b.hidden };
        if let Some(stats) = stats.as_deref_mut() {
            stats.observe(
                self,
                Consumer::Linear(l, Linear::Ff1),
                &x.slice(..),
                rows,
                d_model,
            )?;
        }
        gemm(
            self.blas,
            (rows, d_inner, d_model),
            &x.slice(..),
            d_model,
            &lw.ff1_weight.slice(..),
            Rhs::Transposed { ld: d_model },
            &mut b.inner.slice_mut(..),
            d_inner,
            SINGLE,
        )?;
        add_bias(stream, k, &mut b.inner, di, &lw.ff1_bias, rows, d_inner, true)?;
        if let Some(stats) = stats {
            stats.observe(
                self,
                Consumer::Linear(l, Linear::Ff2),
                &b.inner.slice(..),
                rows,
                d_inner,
            )?;
        }
        gemm(
            self.blas,
            (rows, d_model, d_inner),
            &b.inner.slice(..),
            d_inner,
            &lw.ff2_weight.slice(..),
            Rhs::Transposed { ld: d_inner },
            &mut b.delta.slice_mut(..),
            d_model,
            SINGLE,
        )?;
        add_bias(stream, k, &mut b.delta, dm, &lw.ff2_bias, rows, d_model, false)?;
        residual(
            stream,
            k,
            b,
            (&lw.ff_norm_weight, &lw.ff_norm_bias),
            self.eps,
            dm,
            not_pre,
            rows,
        )
    }

    /// Shows `stats` the output layer's inputs for the step's `rows` final hidden states: each
    /// cluster's projection of them (or they themselves) is its output table's input, and
    /// cluster 0's is also the tail clusters' head's.
    fn observe_output_inputs(
        &self,
        b: &mut Buffers,
        rows: usize,
        stats: &mut DeviceStatistics,
    ) -> Result<(), Error> {
        let c = self.c;
        for cluster in 0..=c.n_clusters() {
            let table = c.emb_table_of_cluster(cluster);
            let width = c.emb_dim(table) as usize;
            let x = cluster_input(self, &b.hidden, &mut b.projected, cluster, 0, rows)?;
            stats.observe(self, Consumer::OutTable(table), &x, rows, width)?;
            // the cluster head's matrix exists only with tail clusters
            if cluster == 0 && c.n_clusters() > 0 {
                stats.observe(self, Consumer::ClusterHead, &x, rows, width)?;
            }
        }
        Ok(())
    }

    /// The output layer, `chunk` rows at a time: per row `ln p(target)` (NaN where the row has
    /// none) and the full rows `wanted` asks for.
    fn output(
        &self,
        b: &mut Buffers,
        chunk: usize,
        rows: usize,
        wanted: &Wanted<'_>,
    ) -> Result<StepOutput, Error> {
        let mut out = StepOutput::default();
        for first in (0..rows).step_by(chunk) {
            let n = chunk.min(rows - first);
            // logits (n, n_token) = log-probabilities of hidden rows first..first + n
            log_probs(self, b, first, n)?;
            self.collect_chunk(b, first, n, wanted, &mut out)?;
        }
        Ok(out)
    }

    /// Brings back what `wanted` asks of the chunk `logits (n, n_token)` (step rows
    /// `first..first + n`): the targets' log-probabilities, gathered on the device, and the
    /// full rows asked for.
    fn collect_chunk(
        &self,
        b: &mut Buffers,
        first: usize,
        n: usize,
        wanted: &Wanted<'_>,
        out: &mut StepOutput,
    ) -> Result<(), Error> {
        let (stream, k) = (self.stream, self.k);
        let n_token = self.c.n_token as usize;
        let targets: Vec<i32> = wanted.targets[first..first + n]
            .iter()
            .map(|t| t.map_or(-1, |t| t as i32))
            .collect();
        stream.memcpy_htod(targets.as_slice(), &mut b.targets.slice_mut(..n))?;
        let mut launch = stream.launch_builder(&k.gather_targets);
        let (ni, nt) = (n as i32, n_token as i32);
        launch
            .arg(&b.logits)
            .arg(&b.targets)
            .arg(&mut b.target_logp)
            .arg(&ni)
            .arg(&nt);
        // SAFETY: gather_targets(const float*, const int*, float*, int, int) reads n rows of
        // logits at target columns below n_token and writes n outputs.
        unsafe { launch.launch(k.per_element(n)) }?;
        let target_logp = stream.clone_dtoh(&b.target_logp.slice(..n))?;
        // Bring back only the full rows asked for.
        let mut full = Vec::new();
        let wanted_here: Vec<usize> = wanted
            .full_rows
            .iter()
            .copied()
            .filter(|r| (first..first + n).contains(r))
            .collect();
        for &r in &wanted_here {
            let at = (r - first) * n_token;
            full.extend(stream.clone_dtoh(&b.logits.slice(at..at + n_token))?);
        }
        for (i, lp) in target_logp.iter().enumerate() {
            out.target_logp.push(match wanted.targets[first + i] {
                Some(_) => *lp as f64,
                None => f64::NAN,
            });
        }
        out.full_rows.extend(full.iter().map(|&v| v as f64));
        Ok(())
    }
}

impl Run {
    /// Keeps the last `mem_len` positions of each stream in `segments` (`(capacity, W)` keys
    /// and values per layer, `width` = W): copies them to the front of the spare buffer, then
    /// swaps the two.
    fn keep_last_positions(
        &mut self,
        stream: &Arc<CudaStream>,
        segments: &[Segment<'_>],
        width: usize,
    ) -> Result<(), Error> {
        for segment in segments {
            let memory = &mut self.streams[segment.stream];
            let total = memory.len + segment.tokens.len();
            let keep = total.min(self.settings.mem_len);
            let dropped = total - keep;
            if dropped > 0 && keep > 0 {
                for buffer in memory.keys.iter_mut().chain(memory.values.iter_mut()) {
                    let kept = buffer.slice(dropped * width..total * width);
                    stream.memcpy_dtod(&kept, &mut self.spare.slice_mut(..keep * width))?;
                    std::mem::swap(buffer, &mut self.spare);
                }
            }
            memory.len = keep;
        }
        Ok(())
    }
}
