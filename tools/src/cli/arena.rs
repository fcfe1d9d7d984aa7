//! What a run's sessions need, found by arithmetic before anything is allocated.
//!
//! A session's arena size follows from the model and the options ([`Session::arena_bytes`]),
//! so an absurd `--mem-len` is caught before it is asked of the allocator: a size that
//! overflows the address space, or one larger than the memory this machine has available (RAM
//! and swap not in use, within the process's cgroup limit, where the system says), is an error
//! naming the bytes and the options. What is left the core's fallible allocation reports, and
//! [`explain`] names the options there too.
//!
//! Other buffers an option sizes (`generate --length`, `bench --tokens`) are checked the same
//! way by [`check_values`] and allocated by [`reserve`], with errors that name the option.

use anyhow::{anyhow, bail, Result};
use txl_core::tensors::for_each_tensor;
use txl_core::{scoring, Error, MemDtype, Model, PositionKeys, Session, SessionOptions};
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

/// The arena bytes of one core session as a device runs it ([`Session::arena_bytes`]); an
/// overflow is an error naming the options.
pub fn arena_bytes(model: &Model<'_>, options: &SessionOptions) -> Result<usize> {
    explained(Session::arena_bytes(model, options), options)
}

/// The arena bytes of one core session as this host runs it ([`scoring::start`], which may take
/// more positions per pass than a device session).
fn host_arena_bytes(model: &Model<'_>, options: &SessionOptions) -> Result<usize> {
    let positions = scoring::POSITIONS_PER_PASS;
    explained(
        Session::arena_bytes_for_positions_per_pass(model, options, positions),
        options,
    )
}

fn explained(bytes: Result<usize, Error>, options: &SessionOptions) -> Result<usize> {
    match bytes {
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
            .checked_add(host_arena_bytes(model, options)?)
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
/// [`Backend::Cpu64`], and the memory once per stream; the core's f32 arena measures that. Its
/// copy of the weights (in f64 on `Cpu64`, else f32; the host's copy on `Cuda`) comes on top.
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
    let weights = parameters(model).saturating_mul(4 * widening);
    let bytes = per_stream
        .checked_mul(widening)
        .and_then(|b| b.checked_mul(streams.max(1)))
        .and_then(|b| b.checked_add(weights))
        .ok_or_else(|| overflow(options))?;
    fits(bytes, || {
        format!(
            "the reference needs about {bytes} bytes for {} stream(s) ({})",
            streams.max(1),
            sizes(options)
        )
    })
}

/// The model's parameters (elements of every tensor its image stores).
pub fn parameters(model: &Model<'_>) -> usize {
    let mut parameters = 0usize;
    for_each_tensor(model.config(), |_, shape| {
        parameters = parameters.saturating_add(shape.len())
    });
    parameters
}

/// Checks that `count` values of `T`, sized by what `what` names (`--length 100`, say), can be
/// had: their bytes must not overflow the address space nor exceed the memory available.
pub fn check_values<T>(count: usize, what: impl FnOnce() -> String) -> Result<()> {
    let Some(bytes) = count.checked_mul(size_of::<T>()) else {
        bail!(
            "{}: {count} values of {} bytes overflow the address space",
            what(),
            size_of::<T>()
        );
    };
    fits(bytes, || format!("{}: {bytes} bytes", what()))
}

/// An empty vector with room for `count` values of `T`, checked as [`check_values`] does and
/// then asked of the allocator fallibly; an error names `what`.
pub fn reserve<T>(count: usize, what: impl Fn() -> String) -> Result<Vec<T>> {
    check_values::<T>(count, &what)?;
    let mut values = Vec::new();
    values.try_reserve_exact(count).map_err(|_| {
        anyhow!(
            "{}: cannot allocate {} bytes",
            what(),
            count.saturating_mul(size_of::<T>())
        )
    })?;
    Ok(values)
}

/// An error when `bytes` is more than the memory this machine has available.
fn fits(bytes: usize, what: impl FnOnce() -> String) -> Result<()> {
    match memory_bytes() {
        Some(memory) if bytes as u64 > memory => bail!(
            "{}: cannot allocate (this machine has {memory} bytes of memory available)",
            what()
        ),
        _ => Ok(()),
    }
}

/// The memory a new allocation can have without the kernel killing something for it: RAM
/// available (`MemAvailable`, which counts reclaimable caches) and free swap, from
/// `/proc/meminfo`, and no more than the cgroup's `memory.max` leaves; `None` where there is
/// no such file.
fn memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |field: &str| {
        info.lines().find_map(|line| {
            let value = line.strip_prefix(field)?.trim().strip_suffix("kB")?;
            value.trim().parse::<u64>().ok()
        })
    };
    let ram = kib("MemAvailable:").or_else(|| kib("MemFree:"))?;
    let available = ram
        .saturating_add(kib("SwapFree:").unwrap_or(0))
        .saturating_mul(1024);
    Some(available.min(cgroup_room().unwrap_or(u64::MAX)))
}

/// What the cgroup (v2) this process runs in still allows: `memory.max` less the memory in
/// use, not counting the file cache it could drop (`memory.current - inactive_file`, the
/// working set); `None` without a limit.
fn cgroup_room() -> Option<u64> {
    let read = |file: &str| std::fs::read_to_string(std::path::Path::new("/sys/fs/cgroup").join(file)).ok();
    let limit = read("memory.max")?.trim().parse::<u64>().ok()?; // "max" (no limit) does not parse
    let current = read("memory.current").and_then(|text| text.trim().parse::<u64>().ok());
    let cache = read("memory.stat").and_then(|stat| {
        stat.lines()
            .find_map(|line| line.strip_prefix("inactive_file ")?.trim().parse::<u64>().ok())
    });
    let in_use = current.unwrap_or(0).saturating_sub(cache.unwrap_or(0));
    Some(limit.saturating_sub(in_use))
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
    use super::{check_values, memory_bytes, reserve};

    #[test]
    fn this_machine_has_some_memory() {
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(memory_bytes().is_some_and(|bytes| bytes > 1 << 20));
        }
    }

    #[test]
    fn counts_beyond_memory_are_errors_naming_what_sized_them() {
        let error = check_values::<u64>(usize::MAX / 4, || "--length N".into()).unwrap_err();
        assert!(format!("{error}").starts_with("--length N: "), "{error}");
        assert!(format!("{error}").contains("overflow"), "{error}");
        let error = reserve::<u32>(1 << 60, || "--tokens N".into()).unwrap_err();
        assert!(format!("{error}").starts_with("--tokens N: "), "{error}");
        let room = reserve::<u32>(1000, || "--tokens 1000".into()).unwrap();
        assert!(room.is_empty() && room.capacity() >= 1000);
    }
}
