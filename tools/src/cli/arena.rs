//! What a run's sessions need, found by arithmetic before anything is allocated.
//!
//! A session's arena size follows from the model and the options ([`Session::arena_bytes`]),
//! so an absurd `--mem-len` is caught before it is asked of the allocator: a size that
//! overflows the address space, or one larger than this machine's memory (RAM and swap, where
//! the system says how much it has), is an error naming the bytes and the options. What is
//! left (memory in use elsewhere) the core's fallible allocation reports, and [`explain`] names
//! the options there too.

use anyhow::{anyhow, bail, Result};
use txl_core::{Error, MemDtype, Model, PositionKeys, Session, SessionOptions};
use txl_host_gpu::Backend;

/// The options that size a session: `tgt_len 32, mem_len 40000000`.
fn sizes(options: &SessionOptions) -> String {
    format!("tgt_len {}, mem_len {}", options.tgt_len, options.mem_len)
}

fn overflow(options: &SessionOptions) -> anyhow::Error {
    anyhow!(
        "the session's arena size overflows the address space ({})",
        sizes(options)
    )
}

/// The arena bytes of one core session; an overflow is an error naming the options.
pub fn arena_bytes(model: &Model<'_>, options: &SessionOptions) -> Result<usize> {
    match Session::arena_bytes(model, options) {
        Ok(bytes) => Ok(bytes),
        Err(Error::SizeOverflow) => Err(overflow(options)),
        Err(error) => Err(error.into()),
    }
}

/// Checks that core sessions of these models and options fit in memory together.
pub fn check_core(sessions: &[(&Model<'_>, SessionOptions)]) -> Result<()> {
    let Some((_, first)) = sessions.first() else {
        return Ok(());
    };
    let mut total = 0usize;
    for (model, options) in sessions {
        total = total
            .checked_add(arena_bytes(model, options)?)
            .ok_or_else(|| overflow(options))?;
    }
    let who = match sessions.len() {
        1 => "the session needs".to_string(),
        n => format!("the {n} sessions need"),
    };
    fits(total, || {
        format!("{who} {total} bytes of arena ({})", sizes(first))
    })
}

/// Checks that the reference on `backend` can run `streams` streams under `options`. It keeps
/// what the core's arena keeps (each layer's memory and position keys) in f32, or in f64 on
/// [`Backend::Cpu64`], and the memory once per stream; the core's f32 arena measures that.
pub fn check_reference(
    model: &Model<'_>,
    options: &SessionOptions,
    backend: Backend,
    streams: usize,
) -> Result<()> {
    let f32_options = SessionOptions {
        mem_dtype: MemDtype::F32,
        position_keys: PositionKeys::PerSession,
        ..*options
    };
    let per_stream = arena_bytes(model, &f32_options)?;
    let widening = if backend == Backend::Cpu64 { 2 } else { 1 };
    let bytes = per_stream
        .checked_mul(widening)
        .and_then(|b| b.checked_mul(streams.max(1)))
        .ok_or_else(|| overflow(options))?;
    fits(bytes, || {
        format!(
            "the reference needs about {bytes} bytes for {} stream(s) ({})",
            streams.max(1),
            sizes(options)
        )
    })
}

/// An error when `bytes` is more than this machine's memory.
fn fits(bytes: usize, what: impl FnOnce() -> String) -> Result<()> {
    match memory_bytes() {
        Some(memory) if bytes as u64 > memory => bail!(
            "{}: cannot allocate (this machine has {memory} bytes of memory)",
            what()
        ),
        _ => Ok(()),
    }
}

/// RAM and swap, from `/proc/meminfo`; `None` where there is no such file.
fn memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |field: &str| {
        info.lines().find_map(|line| {
            let value = line.strip_prefix(field)?.trim().strip_suffix("kB")?;
            value.trim().parse::<u64>().ok()
        })
    };
    let total = kib("MemTotal:")?.saturating_add(kib("SwapTotal:").unwrap_or(0));
    Some(total.saturating_mul(1024))
}

/// The core's error from running a session under `options`; where an allocation failed, it
/// names the options that sized it.
pub fn explain(options: &SessionOptions) -> impl FnOnce(Error) -> anyhow::Error {
    let sizes = sizes(options);
    move |error| match error {
        Error::AllocationFailed { .. } => anyhow::Error::new(error).context(format!("the session ({sizes})")),
        error => error.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::memory_bytes;

    #[test]
    fn this_machine_has_some_memory() {
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(memory_bytes().is_some_and(|bytes| bytes > 1 << 20));
        }
    }
}
