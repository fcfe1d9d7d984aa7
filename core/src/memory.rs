//! The recurrence memory: per layer, a ring buffer of the keys and values of the last
//! positions, so no position's projections are ever computed twice.
//!
//! The ring holds `capacity = mem_len + tgt_len` positions. A segment appends its `qlen`
//! positions after the `len` remembered ones (logical positions `len..len + qlen`), attends
//! over all of them, then [`Memory::commit`] keeps the last `mem_len`: the original code's
//! `_update_mems` with `ext_len = 0`, without moving any data.
//!
//! Keys and values are stored in f32, f16, or int8 with one scale per (position, head)
//! ([`MemDtype`]); attention reads them only through [`Memory::key_dots`] and
//! [`Memory::add_values`] (int8 ones in integers, [`crate::int8_attention`]), so it does not
//! care which.

use half::f16;

use crate::included::{left_out, MEMORY_F16, MEMORY_F32, MEMORY_INT8};
use crate::int8_attention;
use crate::integer::{pow2_exponent, pow2_exponent_of};
use crate::kernels;
use crate::options::MemDtype;

/// Queries the attention (`crate::attention::attend_block`) takes together at most, and the
/// memory's several-query products with them. Every key and value a block reads serves
/// all its queries; but in a sliding window (`same_length`) a block of `n` computes the
/// content terms of up to `n - 1` keys per query that the query does not see, and the keys
/// all its queries see, whose values it adds together, are `n - 1` fewer than a window.
pub(crate) const QUERIES_TOGETHER: usize = 16;

/// One of the two caches (keys or values) in its storage type.
#[derive(Debug)]
pub(crate) enum Store<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    Int8 {
        values: &'a mut [i8],
        scales: &'a mut [f32],
    },
}

impl Store<'_> {
    /// Writes `row` (`width` elements at row offset `at`, split into heads of `d_head`).
    fn write(&mut self, at: usize, d_head: usize, row: &[f32]) {
        match self {
            Store::F32(s) if MEMORY_F32 => s[at..at + row.len()].copy_from_slice(row),
            Store::F16(s) if MEMORY_F16 => {
                // `half`'s portable rounding on every machine (the same bits as F16C's
                // `VCVTPS2PH`, which it would call where built with F16C, and which Miri cannot run)
                for (o, &v) in s[at..at + row.len()].iter_mut().zip(row) {
                    *o = f16::from_f32_const(v);
                }
            }
            Store::Int8 { values, scales } if MEMORY_INT8 => {
                for (head, chunk) in row.chunks_exact(d_head).enumerate() {
                    let start = at + head * d_head;
                    let out = &mut values[start..start + d_head];
                    // with Helium four values an instruction, with the FPU of the other
                    // `cortex-m-dsp` cores four a pass (the same bits); elsewhere the portable
                    // code inline
                    let kernel = cfg!(any(
                        feature = "cortex-m-mve",
                        all(
                            feature = "cortex-m-dsp",
                            feature = "cortex-m-large-kernels",
                            target_abi = "eabihf"
                        )
                    ));
                    scales[start / d_head] = if kernel {
                        kernels::quantize_i8(chunk, None, out)
                    } else {
                        let max_abs = kernels::portable::largest_magnitude(chunk);
                        kernels::portable::quantize_with(out, max_abs, chunk.iter().copied())
                    };
                }
            }
            _ => left_out(),
        }
    }

    /// `x · stored[at..at + x.len()]` (one head: `at` is a multiple of `d_head`).
    fn dot(&self, at: usize, d_head: usize, x: &[f32]) -> f32 {
        match self {
            Store::F32(s) => crate::kernels::dot_f32(x, &s[at..at + x.len()]),
            Store::F16(s) => crate::kernels::dot_f16(&s[at..at + x.len()], x),
            Store::Int8 { values, scales } => {
                let mut acc = 0.0f32;
                for (&q, &v) in values[at..at + x.len()].iter().zip(x) {
                    acc += q as f32 * v;
                }
                acc * scales[at / d_head]
            }
        }
    }

    /// `out += p * stored[at..at + out.len()]` (one head).
    fn axpy(&self, at: usize, d_head: usize, p: f32, out: &mut [f32]) {
        let end = at + out.len();
        match self {
            Store::F32(s) => {
                for (o, &v) in out.iter_mut().zip(&s[at..end]) {
                    *o += p * v;
                }
            }
            Store::F16(s) => {
                for (o, v) in out.iter_mut().zip(&s[at..end]) {
                    *o += p * crate::kernels::f16_to_f32(*v);
                }
            }
            Store::Int8 { values, scales } => {
                let weight = p * scales[at / d_head];
                for (o, &q) in out.iter_mut().zip(&values[at..end]) {
                    *o += weight * q as f32;
                }
            }
        }
    }
}

impl Store<'_> {
    /// How the rows are stored.
    fn dtype(&self) -> MemDtype {
        match self {
            Store::F32(_) => MemDtype::F32,
            Store::F16(_) => MemDtype::F16,
            Store::Int8 { .. } => MemDtype::Int8,
        }
    }

    /// Copies the row at offset `at` into `out` ([`MemDtype::row_bytes`] long).
    fn save_row(&self, at: usize, width: usize, d_head: usize, out: &mut [u8]) {
        match self {
            Store::F32(s) => {
                for (o, v) in out.chunks_exact_mut(4).zip(&s[at..at + width]) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            Store::F16(s) => {
                for (o, v) in out.chunks_exact_mut(2).zip(&s[at..at + width]) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            Store::Int8 { values, scales } => {
                let (out_values, out_scales) = out.split_at_mut(width);
                for (o, &q) in out_values.iter_mut().zip(&values[at..at + width]) {
                    *o = q as u8;
                }
                let heads = &scales[at / d_head..(at + width) / d_head];
                for (o, v) in out_scales.chunks_exact_mut(4).zip(heads) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }

    /// Stores `bytes` (one row as [`Store::save_row`] wrote it) at offset `at`.
    fn load_row(&mut self, at: usize, width: usize, d_head: usize, bytes: &[u8]) {
        match self {
            Store::F32(s) => {
                for (o, b) in s[at..at + width].iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Store::F16(s) => {
                for (o, b) in s[at..at + width].iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = f16::from_le_bytes([b[0], b[1]]);
                }
            }
            Store::Int8 { values, scales } => {
                let (in_values, in_scales) = bytes.split_at(width);
                for (o, &b) in values[at..at + width].iter_mut().zip(in_values) {
                    *o = b as i8;
                }
                let heads = &mut scales[at / d_head..(at + width) / d_head];
                for (o, b) in heads.iter_mut().zip(in_scales.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
        }
    }
}

/// The keys `lo..lo + count` of one query as its int8 attention lays them in its buffers
/// ([`Memory::ring_keys`]): in ring order (buffer index = ring slot) where they are the whole
/// ring, so the kernels take all of it at once; else in their order (buffer index = `t`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingKeys {
    /// The keys in at most two runs of consecutive ring slots, in the keys' order: each
    /// `(buffer index, first slot, keys)`.
    pieces: [(usize, usize, usize); 2],
    /// The first key's position.
    lo: usize,
    /// All the keys.
    count: usize,
    /// Whether they are the whole ring, or all of it but one slot (the buffer in ring order).
    whole: bool,
    /// The one slot of the ring that is not among the keys in ring order (then the buffer's
    /// entry for it is not a key's), else `usize::MAX`.
    hole: usize,
}

impl RingKeys {
    /// The entries of the buffers the keys take: the ring's `capacity` in ring order, else
    /// one per key.
    pub(crate) fn buffer_len(&self, capacity: usize) -> usize {
        if self.whole {
            capacity
        } else {
            self.count
        }
    }

    /// The runs in the keys' order, each `(buffer index, first slot, keys, index of its first
    /// key among the keys)`; empty ones left out.
    pub(crate) fn pieces_from(&self) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let [(a0, s0, n0), (a1, s1, n1)] = self.pieces;
        [(a0, s0, n0, 0), (a1, s1, n1, n0)]
            .into_iter()
            .filter(|&(_, _, len, _)| len > 0)
    }
}

/// Cached keys and values of every layer: `(n_layer, capacity, width)` each.
#[derive(Debug)]
pub struct Memory<'a> {
    keys: Store<'a>,
    values: Store<'a>,
    width: usize,
    d_head: usize,
    capacity: usize,
    mem_len: usize,
    /// Ring slot of logical position 0.
    start: usize,
    /// Remembered positions (`<= mem_len`).
    len: usize,
}

impl<'a> Memory<'a> {
    pub(crate) fn new(
        keys: Store<'a>,
        values: Store<'a>,
        (width, d_head): (usize, usize),
        capacity: usize,
        mem_len: usize,
    ) -> Self {
        Memory {
            keys,
            values,
            width,
            d_head,
            capacity,
            mem_len,
            start: 0,
            len: 0,
        }
    }

    /// Positions the ring holds: `mem_len + tgt_len`.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Remembered positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.start = 0;
        self.len = 0;
    }

    fn offset(&self, layer: usize, position: usize) -> usize {
        let slot = (self.start + position) % self.capacity;
        (layer * self.capacity + slot) * self.width
    }

    /// Stores the key and value rows (`width` each) of logical `position` (`< capacity`).
    pub fn write(&mut self, layer: usize, position: usize, key: &[f32], value: &[f32]) {
        let at = self.offset(layer, position);
        self.keys.write(at, self.d_head, key);
        self.values.write(at, self.d_head, value);
    }

    /// Stores the key and value rows of logical `position` for integer arithmetic: each head
    /// of `Q(frac)` values as int8 `round(x / 2^e)` with the smallest `e ≥ 0` that fits
    /// ([`pow2_exponent`]), `e` in the head's scale slot (its bits). Int8 memory only (other
    /// stores keep nothing: an integer session refuses them).
    pub(crate) fn write_pow2(&mut self, layer: usize, position: usize, key: &[i32], value: &[i32]) {
        let at = self.offset(layer, position);
        let d_head = self.d_head;
        for (store, row) in [(&mut self.keys, key), (&mut self.values, value)] {
            let Store::Int8 { values, scales } = store else {
                continue;
            };
            for (head, chunk) in row.chunks_exact(d_head).enumerate() {
                let start = at + head * d_head;
                let values = &mut values[start..start + d_head];
                // a kernel's, where there is one: the same exponent and bytes
                if let Some(e) =
                    crate::kernels::pow2_int8_i32(chunk, values, |m| pow2_exponent_of(m as u64, 127))
                {
                    scales[start / d_head] = f32::from_bits(e as u32);
                    continue;
                }
                let e = pow2_exponent(chunk, 127);
                if e == 0 {
                    for (q, &v) in values.iter_mut().zip(chunk) {
                        *q = v as i8;
                    }
                } else {
                    // `round_shift_i32` as `⌊(⌊v / 2^(e-1)⌋ + 1) / 2⌋` (the same value; the sum
                    // cannot overflow: `|v| ≤ 255` for `e = 1`, `|v / 2^(e-1)| ≤ 2^30` beyond)
                    let e1 = e as u32 - 1; // e ≤ 25 (2^31 / 2^25 = 64)
                    for (q, &v) in values.iter_mut().zip(chunk) {
                        *q = (((v >> e1) + 1) >> 1) as i8;
                    }
                }
                scales[start / d_head] = f32::from_bits(e as u32);
            }
        }
    }

    /// `f(t, e)` for each `t < n`, `e` the exponent [`Memory::write_pow2`] stored with head
    /// `head` of the keys (`keys`) or values of `layer` at logical position `lo + t`
    /// (`lo + n ≤ capacity`): the ring's slots in at most two runs, no wrap per position.
    /// Stores other than int8 give 0.
    #[inline(always)]
    pub(crate) fn each_exponent(
        &self,
        keys: bool,
        (layer, head): (usize, usize),
        lo: usize,
        n: usize,
        mut f: impl FnMut(usize, i32),
    ) {
        let Some((ring, heads, _)) = self.exponent_ring(keys, (layer, head), lo, n) else {
            return (0..n).for_each(|t| f(t, 0));
        };
        let capacity = self.capacity;
        let first = self.start + lo;
        let first = if first >= capacity {
            first - capacity
        } else {
            first
        };
        let run = n.min(capacity - first);
        let slots = |from: usize| ring[from * heads + head..].iter().step_by(heads);
        for (t, e) in slots(first).take(run).enumerate() {
            f(t, e.to_bits() as i32);
        }
        for (t, e) in slots(0).take(n - run).enumerate() {
            f(run + t, e.to_bits() as i32);
        }
    }

    /// Where [`Memory::each_exponent`] finds its exponents: `(ring, heads, at)`, the exponent
    /// of slot `s` and head `h` at `ring[s * heads + h]`, that of logical position `lo` at
    /// `ring[at]` (the next position's `heads` further on, wrapping at `ring.len()`); `None`
    /// for stores other than int8 (or a head or run out of range).
    #[inline(always)]
    pub(crate) fn exponent_ring(
        &self,
        keys: bool,
        (layer, head): (usize, usize),
        lo: usize,
        n: usize,
    ) -> Option<(&[f32], usize, usize)> {
        let store = if keys { &self.keys } else { &self.values };
        let heads = self.width / self.d_head;
        let capacity = self.capacity;
        let ring = match store {
            Store::Int8 { scales, .. } => {
                scales.get(layer * capacity * heads..(layer + 1) * capacity * heads)
            }
            _ => None,
        };
        let ring = ring.filter(|_| head < heads && lo + n <= capacity)?;
        let first = self.start + lo;
        let first = if first >= capacity {
            first - capacity
        } else {
            first
        };
        Some((ring, heads, first * heads + head))
    }

    /// `sums[t] = query · key[layer][lo + t][head]` in integers over int8 keys, the 16-bit
    /// query widened into `words` ([`crate::kernels::key_sums_i8`]).
    pub(crate) fn key_sums_int8(
        &self,
        layer: usize,
        lo: usize,
        head: usize,
        words: &[u32],
        sums: &mut [i32],
    ) {
        let Store::Int8 { values, .. } = &self.keys else {
            return;
        };
        let d_head = self.d_head;
        let mut done = 0;
        for (at, run) in self.runs(layer, lo, sums.len()) {
            let at = at + head * d_head;
            let rows = &values[at..at + (run - 1) * self.width + d_head];
            kernels::key_sums_i8(rows, self.width, d_head, words, &mut sums[done..done + run]);
            done += run;
        }
    }

    /// `acc[c] = Σ_t weights[t] · value[layer][lo + t][head][c]` in integers over int8
    /// values: the first run's sums from zeros ([`crate::kernels::value_sums_from_zero_i8`]:
    /// no clearing pass where a kernel starts from zeros), the other's added
    /// ([`crate::kernels::value_sums_i8`]); zeros for no keys (or a store other than int8).
    pub(crate) fn value_sums_int8(
        &self,
        layer: usize,
        lo: usize,
        head: usize,
        weights: &[i32],
        acc: &mut [i32],
    ) {
        let Store::Int8 { values, .. } = &self.values else {
            return acc.fill(0);
        };
        let d_head = self.d_head;
        let mut done = 0;
        for (at, run) in self.runs(layer, lo, weights.len()) {
            let at = at + head * d_head;
            let rows = &values[at..at + (run - 1) * self.width + d_head];
            let weights = &weights[done..done + run];
            if done == 0 {
                kernels::value_sums_from_zero_i8(rows, self.width, weights, acc);
            } else {
                kernels::value_sums_i8(rows, self.width, weights, acc);
            }
            done += run;
        }
        if done == 0 {
            acc.fill(0);
        }
    }

    /// `query_head · key[layer][position][head]`.
    pub fn key_dot(&self, layer: usize, position: usize, head: usize, query_head: &[f32]) -> f32 {
        let at = self.offset(layer, position) + head * self.d_head;
        self.keys.dot(at, self.d_head, query_head)
    }

    /// `out[t] = query_head · key[layer][lo + t][head]` for `t < out.len()`, several keys per
    /// pass where the store allows. f32 and f16 keys give the bits of [`Memory::key_dot`]; int8
    /// keys are dotted with the query quantized to 16 bits, in integers
    /// ([`crate::int8_attention`]), using `scratch` (at least
    /// [`int8_attention::scratch_words`]`(d_head)` words).
    pub fn key_dots(
        &self,
        layer: usize,
        lo: usize,
        head: usize,
        query_head: &[f32],
        scratch: &mut [u32],
        out: &mut [f32],
    ) {
        let d_head = self.d_head;
        match &self.keys {
            Store::F32(s) if MEMORY_F32 => {
                let mut done = 0;
                for (at, count) in self.runs(layer, lo, out.len()) {
                    let at = at + head * d_head;
                    let rows = &s[at..at + (count - 1) * self.width + d_head];
                    kernels::dots_strided_f32(rows, self.width, query_head, &mut out[done..done + count]);
                    done += count;
                }
            }
            Store::Int8 { values, scales } if MEMORY_INT8 => {
                self.key_dots_int8(values, scales, (layer, lo, head), query_head, scratch, out)
            }
            Store::F16(s) if MEMORY_F16 => self.key_dots_f16(s, (layer, lo, head), query_head, out),
            _ => left_out(),
        }
    }

    /// Whether the keys and values are f32 or f16, which [`Memory::key_dots_each`] and
    /// [`Memory::add_values_each`] take.
    pub fn is_float(&self) -> bool {
        match (&self.keys, &self.values) {
            (Store::F32(_), Store::F32(_)) => MEMORY_F32,
            (Store::F16(_), Store::F16(_)) => MEMORY_F16,
            _ => false,
        }
    }

    /// Whether the keys and values are int8, which [`Memory::key_dots_each_int8`] and
    /// [`Memory::add_values_each_int8`] take.
    pub fn is_int8(&self) -> bool {
        MEMORY_INT8
            && matches!(
                (&self.keys, &self.values),
                (Store::Int8 { .. }, Store::Int8 { .. })
            )
    }

    /// [`Memory::key_dots`] for several queries of one head over int8 keys, each query already
    /// quantized as `key_dots` quantizes it: `outs[q][t] = queries[q] · key[layer][lo + t][head]`
    /// for `t` below the shortest output's length, with the bits of one `key_dots` per query
    /// (the same integer sums, scaled the same way); each key is widened once for all the
    /// queries where a kernel does so. Other keys write nothing ([`Memory::is_int8`]).
    pub fn key_dots_each_int8(
        &self,
        layer: usize,
        lo: usize,
        head: usize,
        queries: &[int8_attention::QueryWords<'_>],
        outs: &mut [&mut [f32]],
    ) {
        let Store::Int8 { values, scales } = &self.keys else {
            return;
        };
        let count = outs.iter().map(|o| o.len()).min().unwrap_or(0);
        let queries = &queries[..queries.len().min(outs.len()).min(QUERIES_TOGETHER)];
        let mut words: [&[u32]; QUERIES_TOGETHER] = [&[]; QUERIES_TOGETHER];
        for (words, query) in words.iter_mut().zip(queries) {
            *words = query.words;
        }
        let d_head = self.d_head;
        let mut done = 0;
        for (at, run) in self.runs(layer, lo, count) {
            let at = at + head * d_head;
            let rows = &values[at..at + (run - 1) * self.width + d_head];
            let mut parts: [&mut [i32]; QUERIES_TOGETHER] = core::array::from_fn(|_| Default::default());
            for (part, out) in parts.iter_mut().zip(outs.iter_mut()) {
                *part = bytemuck::cast_slice_mut(&mut out[done..done + run]);
            }
            let n = queries.len();
            kernels::key_sums_each_i8(rows, self.width, d_head, &words[..n], &mut parts[..n]);
            // each key's scale read once for all the queries
            let key_scales = scales[at / d_head..].iter().step_by(self.width / d_head);
            for (t, &key_scale) in (done..done + run).zip(key_scales) {
                for (out, query) in outs.iter_mut().zip(queries) {
                    let sum = out[t].to_bits() as i32;
                    out[t] = sum as f32 * query.step * key_scale;
                }
            }
            done += run;
        }
    }

    /// [`Memory::add_values`] for several queries of one head over int8 values, each query
    /// weighting the keys it sees as `add_values` does: query `b` sees keys `visible[b]` (its
    /// `lo..=hi`), whose probabilities are row `b` of `weights` (rows of `capacity`, key
    /// `lo_first + t` at `t`), overwritten. Each `outs[b]` gets the bits of one `add_values`,
    /// a query whose weights cannot be quantized NaN as there; each value is widened once for
    /// several queries where a kernel does so. `scratch` holds `d_head` words for each query,
    /// `scales` a float for each key from `lo_first` to the last any query sees. Other values
    /// add nothing ([`Memory::is_int8`]).
    #[allow(clippy::too_many_arguments)]
    pub fn add_values_each_int8(
        &self,
        layer: usize,
        head: usize,
        (lo_first, visible): (usize, &[(usize, usize)]),
        (weights, capacity): (&mut [f32], usize),
        scales: &mut [f32],
        scratch: &mut [u32],
        outs: &mut [&mut [f32]],
    ) {
        let Store::Int8 {
            values,
            scales: stored,
        } = &self.values
        else {
            return;
        };
        let d_head = self.d_head;
        let heads = self.width / d_head;
        let count = visible.len().min(outs.len()).min(QUERIES_TOGETHER);
        let keys = visible
            .iter()
            .map(|&(_, hi)| hi + 1 - lo_first)
            .max()
            .unwrap_or(0);
        // the values' scales, once for all the queries
        let scales = &mut scales[..keys];
        let mut done = 0;
        for (at, run) in self.runs(layer, lo_first, keys) {
            let value_scales = stored[at / d_head + head..].iter().step_by(heads);
            for (scale, &stored) in scales[done..done + run].iter_mut().zip(value_scales) {
                *scale = stored;
            }
            done += run;
        }
        // each query's weights p[t] · scale_t in its row, zero for the keys it does not see
        // (which then add nothing), then quantized to i32 in place (all zero when they cannot
        // be: that query is NaN)
        let mut rows: [&mut [f32]; QUERIES_TOGETHER] = core::array::from_fn(|_| Default::default());
        let mut ranges: [core::ops::RangeInclusive<usize>; QUERIES_TOGETHER] =
            core::array::from_fn(|_| 0..=0);
        let weight_rows = rows
            .iter_mut()
            .zip(ranges.iter_mut())
            .zip(weights.chunks_exact_mut(capacity));
        for (((row, range), weights), &(lo, hi)) in weight_rows.zip(&visible[..count]) {
            let (seen, weights) = (lo - lo_first..=hi - lo_first, &mut weights[..keys]);
            for (w, &scale) in weights[seen.clone()].iter_mut().zip(&scales[lo - lo_first..]) {
                *w *= scale;
            }
            weights[..lo - lo_first].fill(0.0);
            weights[hi - lo_first + 1..].fill(0.0);
            (*row, *range) = (weights, seen);
        }
        let mut steps = [None; QUERIES_TOGETHER];
        int8_attention::ProbabilityWords::quantize_each_in_place(
            &mut rows[..count],
            &ranges[..count],
            &mut steps[..count],
        );
        for (row, step) in rows[..count].iter_mut().zip(&steps) {
            if step.is_none() {
                row.fill(0.0);
            }
        }
        let accs: &mut [i32] = bytemuck::cast_slice_mut(&mut scratch[..count * d_head]);
        accs.fill(0);
        let mut sums: [&mut [i32]; QUERIES_TOGETHER] = core::array::from_fn(|_| Default::default());
        for (sum, acc) in sums.iter_mut().zip(accs.chunks_exact_mut(d_head)) {
            *sum = acc;
        }
        let mut done = 0;
        for (at, run) in self.runs(layer, lo_first, keys) {
            let at = at + head * d_head;
            let rows = &values[at..at + (run - 1) * self.width + d_head];
            let mut parts: [&[i32]; QUERIES_TOGETHER] = [&[]; QUERIES_TOGETHER];
            for (part, row) in parts.iter_mut().zip(weights.chunks_exact(capacity)).take(count) {
                *part = &bytemuck::cast_slice(&row[..keys])[done..done + run];
            }
            kernels::value_sums_each_i8(rows, self.width, &parts[..count], &mut sums[..count]);
            done += run;
        }
        for ((out, sum), step) in outs.iter_mut().zip(&sums[..count]).zip(&steps) {
            let Some(step) = *step else {
                out.fill(f32::NAN);
                continue;
            };
            for (o, &sum) in out.iter_mut().zip(sum.iter()) {
                *o += sum as f32 * step;
            }
        }
    }

    /// [`Memory::key_dots`] for several queries of one head over f32 or f16 keys: `outs[q][t] =
    /// queries[q] · key[layer][lo + t][head]` for `t` below the shortest output's length, with
    /// the bits of one `key_dots` per query; each key is read once for all the queries. Other
    /// keys write nothing ([`Memory::is_float`]).
    pub fn key_dots_each(
        &self,
        layer: usize,
        lo: usize,
        head: usize,
        queries: &[&[f32]],
        outs: &mut [&mut [f32]],
    ) {
        let count = outs.iter().map(|o| o.len()).min().unwrap_or(0);
        let d_head = self.d_head;
        let mut done = 0;
        for (at, run) in self.runs(layer, lo, count) {
            let at = at + head * d_head;
            let rows = at..at + (run - 1) * self.width + d_head;
            let mut parts: [&mut [f32]; QUERIES_TOGETHER] = core::array::from_fn(|_| Default::default());
            for (part, out) in parts.iter_mut().zip(outs.iter_mut()) {
                *part = &mut out[done..done + run];
            }
            let queries = &queries[..queries.len().min(QUERIES_TOGETHER)];
            let parts = &mut parts[..queries.len()];
            match &self.keys {
                Store::F32(s) if MEMORY_F32 => {
                    kernels::dots_strided_each_f32(&s[rows], self.width, queries, parts)
                }
                Store::F16(s) if MEMORY_F16 => {
                    kernels::dots_strided_each_f16(&s[rows], self.width, queries, parts)
                }
                _ => {}
            }
            done += run;
        }
    }

    /// [`Memory::add_values`] for several queries of one head over f32 or f16 values: `outs[q]
    /// += Σ_t ps[q][t] * value[layer][lo + t][head]` for `t` below the shortest list's length,
    /// with the bits of one `add_values` per query; with f32 values and a kernel that does so,
    /// each value is read once for all the queries. Other values add nothing
    /// ([`Memory::is_float`]).
    pub fn add_values_each(
        &self,
        layer: usize,
        lo: usize,
        head: usize,
        ps: &[&[f32]],
        outs: &mut [&mut [f32]],
    ) {
        let count = ps.iter().map(|p| p.len()).min().unwrap_or(0);
        let d_head = self.d_head;
        let mut done = 0;
        for (at, run) in self.runs(layer, lo, count) {
            let at = at + head * d_head;
            let rows = at..at + (run - 1) * self.width + d_head;
            let mut parts: [&[f32]; QUERIES_TOGETHER] = [&[]; QUERIES_TOGETHER];
            for (part, p) in parts.iter_mut().zip(ps) {
                *part = &p[done..done + run];
            }
            let lists = &parts[..ps.len().min(QUERIES_TOGETHER)];
            match &self.values {
                Store::F32(s) if MEMORY_F32 => {
                    kernels::axpys_strided_each_f32(&s[rows], self.width, lists, outs)
                }
                Store::F16(s) if MEMORY_F16 => {
                    for (p, out) in lists.iter().zip(outs.iter_mut()) {
                        kernels::axpys_strided_f16(&s[rows.clone()], self.width, p, out);
                    }
                }
                _ => {}
            }
            done += run;
        }
    }

    /// [`Memory::key_dots`] over f16 keys, several per pass where a kernel does so. Out of line
    /// as [`Memory::key_dots_int8`].
    #[inline(never)]
    fn key_dots_f16(
        &self,
        keys: &[f16],
        (layer, lo, head): (usize, usize, usize),
        query_head: &[f32],
        out: &mut [f32],
    ) {
        let d_head = self.d_head;
        let mut done = 0;
        for (at, count) in self.runs(layer, lo, out.len()) {
            let at = at + head * d_head;
            let rows = &keys[at..at + (count - 1) * self.width + d_head];
            kernels::dots_strided_f16(rows, self.width, query_head, &mut out[done..done + count]);
            done += count;
        }
    }

    /// [`Memory::add_values`] over f16 values, out of line as [`Memory::key_dots_int8`].
    #[inline(never)]
    fn add_values_f16(
        &self,
        values: &[f16],
        (layer, lo, head): (usize, usize, usize),
        p: &[f32],
        out_head: &mut [f32],
    ) {
        let d_head = self.d_head;
        let mut done = 0;
        for (at, count) in self.runs(layer, lo, p.len()) {
            let at = at + head * d_head;
            let rows = &values[at..at + (count - 1) * self.width + d_head];
            kernels::axpys_strided_f16(rows, self.width, &p[done..done + count], out_head);
            done += count;
        }
    }

    /// [`Memory::key_dots`] over int8 keys. Out of line: it is larger than the f32 path, and
    /// the attention loop that calls both stays small enough for its `exp` to be inlined.
    #[inline(never)]
    fn key_dots_int8(
        &self,
        values: &[i8],
        scales: &[f32],
        (layer, lo, head): (usize, usize, usize),
        query_head: &[f32],
        scratch: &mut [u32],
        out: &mut [f32],
    ) {
        let d_head = self.d_head;
        let Some(query) = int8_attention::QueryWords::quantize(query_head, scratch) else {
            return self.key_dots_one_by_one(layer, lo, head, query_head, out);
        };
        let mut done = 0;
        for (at, count) in self.runs(layer, lo, out.len()) {
            let at = at + head * d_head;
            let rows = &values[at..at + (count - 1) * self.width + d_head];
            let key_scales = scales[at / d_head..].iter().step_by(self.width / d_head).copied();
            let out = &mut out[done..done + count];
            int8_attention::key_dots(rows, self.width, d_head, key_scales, &query, out);
            done += count;
        }
    }

    /// [`Memory::add_values`] over int8 values, out of line as [`Memory::key_dots_int8`].
    #[inline(never)]
    fn add_values_int8(
        &self,
        values: &[i8],
        scales: &[f32],
        (layer, lo, head): (usize, usize, usize),
        p: &mut [f32],
        scratch: &mut [u32],
        out_head: &mut [f32],
    ) {
        let d_head = self.d_head;
        // the weights p[t] · scale_t, then quantized
        let heads = self.width / d_head;
        let mut done = 0;
        for (at, count) in self.runs(layer, lo, p.len()) {
            let value_scales = scales[at / d_head + head..].iter().step_by(heads);
            for (w, &scale) in p[done..done + count].iter_mut().zip(value_scales) {
                *w *= scale;
            }
            done += count;
        }
        let Some(weights) = int8_attention::ProbabilityWords::quantize_in_place(p) else {
            // The scales are finite, so a weight is not only when a probability is NaN (or
            // the weights are near f32's range): the f32 path would give NaN too.
            out_head.fill(f32::NAN);
            return;
        };
        let acc: &mut [i32] = bytemuck::cast_slice_mut(&mut scratch[..d_head]);
        acc.fill(0);
        let mut done = 0;
        for (at, count) in self.runs(layer, lo, weights.weights.len()) {
            let at = at + head * d_head;
            let rows = &values[at..at + (count - 1) * self.width + d_head];
            int8_attention::value_sums(rows, self.width, &weights.weights[done..done + count], acc);
            done += count;
        }
        for (o, &sum) in out_head.iter_mut().zip(acc.iter()) {
            *o += sum as f32 * weights.step;
        }
    }

    /// Where the keys `lo..lo + count` of a layer lie in the buffers of one query's int8
    /// attention ([`Memory::content_terms_int8`], [`Memory::add_values_ring_int8`]).
    /// With `holed`, all the ring but one slot is laid out in ring order too (for one query a
    /// segment, whose keys with `same_length` are that once the memory is full).
    pub(crate) fn ring_keys(&self, lo: usize, count: usize, holed: bool) -> RingKeys {
        let first = (self.start + lo) % self.capacity.max(1);
        let before_wrap = count.min(self.capacity - first);
        // all the ring, or all of it but one slot (a full memory seen with `same_length`): in
        // ring order, so the key and value sums take the whole ring in one call each
        let whole = count == self.capacity || (holed && count > 0 && count + 1 == self.capacity);
        // the slot before the first key's (`first + count` around the ring), or none
        let hole = if whole && count < self.capacity {
            first.checked_sub(1).unwrap_or(self.capacity - 1)
        } else {
            usize::MAX
        };
        let second_at = if whole { 0 } else { before_wrap };
        RingKeys {
            pieces: [
                (if whole { first } else { 0 }, first, before_wrap),
                (second_at, 0, count - before_wrap),
            ],
            lo,
            count,
            whole,
            hole,
        }
    }

    /// The keys' contiguous blocks of ring slots, each `(buffer index, first slot, keys)`: the
    /// whole ring at once where the keys are all of it or all but one slot (whose entry the
    /// caller then ignores or weights by zero), else [`RingKeys::pieces`].
    fn ring_blocks(&self, keys: &RingKeys) -> impl Iterator<Item = (usize, usize, usize)> {
        let whole = [(0, 0, self.capacity), (0, 0, 0)];
        (if keys.whole { whole } else { keys.pieces })
            .into_iter()
            .filter(|&(_, _, len)| len > 0)
    }

    /// The scores of one query over the keys of `keys` (laid out as [`RingKeys`] says),
    /// `out[i] = (query_head · key + term) * scale`, key `t` of `n` taking the position term
    /// `terms[min(n - 1 - t, m - 1)]` (`m = terms.len() > 0`), and their largest as
    /// [`kernels::max`] finds it: the bits of [`Memory::key_dots`] over int8 keys and the sums
    /// `crate::attention::attend_one` makes of them, with one kernel call for the whole ring
    /// where the keys are all of it. `scratch` as [`Memory::key_dots`]. Int8 keys only.
    #[inline(never)]
    pub(crate) fn scores_int8(
        &self,
        (layer, head): (usize, usize),
        keys: &RingKeys,
        query_head: &[f32],
        (terms, scale): (&[f32], f32),
        scratch: &mut [u32],
        out: &mut [f32],
    ) -> f32 {
        let Store::Int8 { values, scales } = &self.keys else {
            return f32::NEG_INFINITY;
        };
        let (d_head, width) = (self.d_head, self.width);
        let heads = width / d_head;
        let Some(query) = int8_attention::QueryWords::quantize(query_head, scratch) else {
            for (at, _, len, t0) in keys.pieces_from() {
                for (t, o) in out[at..at + len].iter_mut().enumerate() {
                    *o = self.key_dot(layer, keys.lo + t0 + t, head, query_head);
                }
            }
            let rows = (&scales[layer * self.capacity * heads..], heads);
            return add_position_terms(keys, (terms, scale), rows, |content, _| content, out);
        };
        let key_sums = |out: &mut [f32]| {
            for (at, slot, len) in self.ring_blocks(keys) {
                let first = (layer * self.capacity + slot) * width + head * d_head;
                let rows = &values[first..first + (len - 1) * width + d_head];
                let sums = bytemuck::cast_slice_mut(&mut out[at..at + len]);
                kernels::key_sums_i8(rows, width, d_head, query.words, sums);
            }
        };
        key_sums(out);
        let rows = (&scales[layer * self.capacity * heads..], heads);
        if kernels::INT8_ATTENTION_PASSES {
            if let Some(max) = key_scores(keys, (terms, scale), rows, (head, query.step), out) {
                return max;
            }
            // a kernel's floating point could have given other bits: the sums again, and the
            // scores one by one
            key_sums(out);
        }
        let content = |sum: f32, row: &[f32]| {
            let sum = sum.to_bits() as i32;
            sum as f32 * query.step * row[head]
        };
        add_position_terms(keys, (terms, scale), rows, content, out)
    }

    /// `out_head = Σ_t p_t · value_t` of head `head` over the keys of `keys`, `p_t = e_t ·
    /// inverse` with `e` laid out as [`RingKeys`] says (overwritten, or `w`, as long, where the
    /// weights go to kernels): the bits of [`Memory::add_values`] over int8 values into zeros
    /// given the probabilities `e_t · inverse`, with one kernel call for the whole ring where the
    /// keys are all of it. Int8 values only (others leave `out_head` as it is).
    #[inline(never)]
    pub(crate) fn add_values_ring_int8(
        &self,
        (layer, head): (usize, usize),
        keys: &RingKeys,
        (e, inverse): (&mut [f32], f32),
        (w, scratch): (&mut [f32], &mut [u32]),
        out_head: &mut [f32],
    ) {
        let Store::Int8 { values, scales } = &self.values else {
            return;
        };
        let (d_head, width) = (self.d_head, self.width);
        let heads = width / d_head;
        // the weights p_t · scale_t and their magnitudes, in the keys' order (the largest
        // without `Magnitudes::add`'s NaN: a NaN weight makes the sum NaN, which is refused
        // the same): by the kernels into `w` or, where one refused its floating point, all
        // again by the portable code; without kernels in place
        let mut magnitudes = kernels::Magnitudes::default();
        let pieces = || {
            keys.pieces_from().map(|(at, slot, len, _)| {
                let first = (layer * self.capacity + slot) * heads + head;
                (at..at + len, &scales[first..first + (len - 1) * heads + 1])
            })
        };
        let w = if kernels::INT8_ATTENTION_PASSES {
            for (piece, key_scales) in pieces() {
                let (e_piece, w_piece) = (&e[piece.clone()], &mut w[piece]);
                if !kernels::value_weights(e_piece, inverse, (key_scales, heads), w_piece, &mut magnitudes) {
                    magnitudes = kernels::Magnitudes::default();
                    for (piece, key_scales) in pieces() {
                        let (e, w) = (&e[piece.clone()], &mut w[piece]);
                        kernels::portable::value_weights(e, inverse, (key_scales, heads), w, &mut magnitudes);
                    }
                    break;
                }
            }
            &mut w[..keys.buffer_len(self.capacity)]
        } else {
            for (at, slot, len, _) in keys.pieces_from() {
                let first = (layer * self.capacity + slot) * heads;
                let rows = scales[first..first + len * heads].chunks_exact(heads);
                for (w, row) in e[at..at + len].iter_mut().zip(rows) {
                    *w = *w * inverse * row[head];
                    let magnitude = w.abs();
                    if magnitude > magnitudes.max {
                        magnitudes.max = magnitude;
                    }
                    magnitudes.sum += magnitude;
                }
            }
            &mut e[..keys.buffer_len(self.capacity)]
        };
        if let Some(hole) = w.get_mut(keys.hole) {
            // the slot that is not a key's: weighted by zero, it adds nothing to the sums
            *hole = 0.0;
        }
        let weights = int8_attention::ProbabilityWords::with_magnitudes_of(w, magnitudes, keys.count);
        let Some(weights) = weights else {
            out_head.fill(f32::NAN);
            return;
        };
        let acc: &mut [i32] = bytemuck::cast_slice_mut(&mut scratch[..d_head]);
        // the first block's sums from zeros, the rest added to them
        let mut cleared = false;
        for (at, slot, len) in self.ring_blocks(keys) {
            let first = (layer * self.capacity + slot) * width + head * d_head;
            let rows = &values[first..first + (len - 1) * width + d_head];
            let weights = &weights.weights[at..at + len];
            if cleared {
                kernels::value_sums_i8(rows, width, weights, acc);
            } else {
                kernels::value_sums_from_zero_i8(rows, width, weights, acc);
                cleared = true;
            }
        }
        if !cleared {
            acc.fill(0);
        }
        kernels::scaled_sums_i32(acc, weights.step, out_head);
    }

    fn key_dots_one_by_one(&self, layer: usize, lo: usize, head: usize, query_head: &[f32], out: &mut [f32]) {
        for (t, o) in out.iter_mut().enumerate() {
            *o = self.key_dot(layer, lo + t, head, query_head);
        }
    }

    /// `out_head += Σ_t p[t] * value[layer][lo + t][head]` over `t < p.len()`. f32 and f16
    /// values give the bits of [`Memory::add_value`] called for each `t` in order, several
    /// values per pass where the store allows. int8 values are weighted by `p` quantized to 16
    /// bits, in integers ([`crate::int8_attention`]): `p` is then overwritten, and `scratch` (at
    /// least [`int8_attention::scratch_words`]`(d_head)` words) holds the sums.
    pub fn add_values(
        &self,
        layer: usize,
        lo: usize,
        head: usize,
        p: &mut [f32],
        scratch: &mut [u32],
        out_head: &mut [f32],
    ) {
        let d_head = self.d_head;
        match &self.values {
            Store::F32(s) if MEMORY_F32 => {
                let mut done = 0;
                for (at, count) in self.runs(layer, lo, p.len()) {
                    let at = at + head * d_head;
                    let rows = &s[at..at + (count - 1) * self.width + d_head];
                    kernels::axpys_strided_f32(rows, self.width, &p[done..done + count], out_head);
                    done += count;
                }
            }
            Store::Int8 { values, scales } if MEMORY_INT8 => {
                self.add_values_int8(values, scales, (layer, lo, head), p, scratch, out_head)
            }
            Store::F16(s) if MEMORY_F16 => self.add_values_f16(s, (layer, lo, head), p, out_head),
            _ => left_out(),
        }
    }

    /// Logical positions `lo..lo + count` of `layer` as runs of consecutive ring slots: each
    /// `(offset of the run's first row, rows)`, at most two (the ring wraps once).
    fn runs(&self, layer: usize, lo: usize, count: usize) -> impl Iterator<Item = (usize, usize)> + Clone {
        let first_slot = (self.start + lo) % self.capacity;
        let before_wrap = count.min(self.capacity - first_slot);
        let base = layer * self.capacity * self.width;
        [
            (base + first_slot * self.width, before_wrap),
            (base, count - before_wrap),
        ]
        .into_iter()
        .filter(|&(_, rows)| rows > 0)
    }

    /// `out_head += p * value[layer][position][head]`.
    pub fn add_value(&self, layer: usize, position: usize, head: usize, p: f32, out_head: &mut [f32]) {
        let at = self.offset(layer, position) + head * self.d_head;
        self.values.axpy(at, self.d_head, p, out_head);
    }

    /// After a segment of `qlen` positions: keep the last `mem_len` of `len + qlen`.
    pub fn commit(&mut self, qlen: usize) {
        let total = self.len + qlen;
        let keep = total.min(self.mem_len);
        self.start = (self.start + total - keep) % self.capacity;
        self.len = keep;
    }

    /// Bytes of one remembered position's key (or value) row in a saved state.
    pub(crate) fn row_bytes(&self) -> usize {
        // The arena holds far more than one row of any dtype, so this cannot overflow.
        let row = self.keys.dtype().row_bytes(self.width, self.d_head);
        row.unwrap_or(usize::MAX)
    }

    /// Writes the remembered positions, oldest first: every layer's keys, then every layer's
    /// values, `row_bytes` each. `out` is `2 * n_layer * len * row_bytes` long.
    pub(crate) fn save(&self, n_layer: usize, out: &mut [u8]) {
        let row = self.row_bytes();
        let mut rows = out.chunks_exact_mut(row);
        for store in [&self.keys, &self.values] {
            for layer in 0..n_layer {
                for position in 0..self.len {
                    let at = self.offset(layer, position);
                    if let Some(out) = rows.next() {
                        store.save_row(at, self.width, self.d_head, out);
                    }
                }
            }
        }
    }

    /// Replaces the memory with `len` positions read from `bytes`, laid out as
    /// [`Memory::save`] writes them. `len <= mem_len`, `bytes` the exact length.
    pub(crate) fn load(&mut self, n_layer: usize, len: usize, bytes: &[u8]) {
        let len = len.min(self.mem_len);
        self.start = 0;
        self.len = len;
        let row = self.row_bytes();
        let mut rows = bytes.chunks_exact(row);
        let (width, d_head) = (self.width, self.d_head);
        let capacity = self.capacity;
        for store in [&mut self.keys, &mut self.values] {
            for layer in 0..n_layer {
                for slot in 0..len {
                    if let Some(row) = rows.next() {
                        store.load_row((layer * capacity + slot) * width, width, d_head, row);
                    }
                }
            }
        }
    }

    /// Marks `len` positions (already written) as remembered, e.g. the zero states.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.mem_len);
    }
}

/// `out[i] = (content(out[i], row) + term) * scale` for each key of `keys` (laid out as
/// [`RingKeys`] says; `row` the `heads` scales of its ring slot in `rows`, a layer's), key `t`
/// of `n` taking `terms[min(n - 1 - t, m - 1)]` (`m = terms.len()`), and the largest score as
/// [`kernels::max`] finds it (`-inf` when there is none; which of two zeros is the same to the
/// softmax).
#[inline(always)]
fn add_position_terms(
    keys: &RingKeys,
    (terms, scale): (&[f32], f32),
    (rows, heads): (&[f32], usize),
    content: impl Fn(f32, &[f32]) -> f32,
    out: &mut [f32],
) -> f32 {
    let (n, m) = (keys.count, terms.len());
    let mut max = f32::NEG_INFINITY;
    let Some(&farthest) = terms.last() else {
        return max;
    };
    let mut score = |o: &mut f32, row: &[f32], term: f32| {
        *o = (content(*o, row) + term) * scale;
        if *o > max {
            max = *o;
        }
    };
    // keys t <= n - m take the farthest term; the nearer ones run backwards through the terms
    let far_end = n + 1 - m;
    for (at, slot, len, t0) in keys.pieces_from() {
        let out = &mut out[at..at + len];
        let mut rows = rows[slot * heads..(slot + len) * heads].chunks_exact(heads);
        let far = far_end.saturating_sub(t0).min(len);
        let (far_out, near_out) = out.split_at_mut(far);
        for (o, row) in far_out.iter_mut().zip(rows.by_ref()) {
            score(o, row, farthest);
        }
        // key t0 + far + k takes term n - 1 - t0 - far - k (all below m - 1)
        let near = near_out.len();
        if near == 0 {
            continue;
        }
        let top = n - t0 - far;
        let near_terms = terms[top - near..top].iter().rev();
        for ((o, &term), row) in near_out.iter_mut().zip(near_terms).zip(rows) {
            score(o, row, term);
        }
    }
    max
}

/// [`add_position_terms`] over the query · key sums of int8 keys (the i32 bits of `out`), the
/// content `sum as f32 * step * row[head]`: [`kernels::key_scores_i8`] for the keys of each
/// piece taking the farthest term, then for those running backwards through the terms. `None`
/// where a kernel refused its floating point (`out` then lost).
fn key_scores(
    keys: &RingKeys,
    (terms, scale): (&[f32], f32),
    (rows, heads): (&[f32], usize),
    (head, step): (usize, f32),
    out: &mut [f32],
) -> Option<f32> {
    let (n, m) = (keys.count, terms.len());
    let mut max = f32::NEG_INFINITY;
    if m == 0 {
        return Some(max);
    }
    // keys before `n - m` take the farthest term `m - 1`; key `n - m` takes it too, as the
    // first of the near keys (one kernel call fewer where `m = n`)
    let far_end = n.saturating_sub(m);
    for (at, slot, len, t0) in keys.pieces_from() {
        let out = &mut out[at..at + len];
        let key_scales = &rows[slot * heads + head..(slot + len) * heads];
        let far = far_end.saturating_sub(t0).min(len);
        let (far_out, near_out) = out.split_at_mut(far);
        if far > 0 {
            max = kernels::key_scores_i8(far_out, key_scales, heads, &terms[m - 1..], (step, scale), max)?;
        }
        // key t0 + far + k takes term n - 1 - t0 - far - k (all at most m - 1)
        let near = near_out.len();
        if near == 0 {
            continue;
        }
        let top = n - t0 - far;
        let (key_scales, near_terms) = (&key_scales[far * heads..], &terms[top - near..top]);
        max = kernels::key_scores_i8(near_out, key_scales, heads, near_terms, (step, scale), max)?;
    }
    Some(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::{vec, vec::Vec};

    /// An int8 row as the activations' quantizer defines it: the largest magnitude by
    /// `f32::max`; for a positive finite one, `roundf(v * 127 / max)` clamped and a scale of
    /// `max / 127` (which underflows to 0 for the smallest ranges: then the bytes read as zeros);
    /// else zeros and 0.
    fn written_with_roundf(chunk: &[f32]) -> (Vec<i8>, f32) {
        let max_abs = chunk.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if !(max_abs > 0.0 && max_abs.is_finite()) {
            return (vec![0; chunk.len()], 0.0);
        }
        let inverse = 127.0 / max_abs;
        let values = chunk
            .iter()
            .map(|&v| libm::roundf(v * inverse).clamp(-127.0, 127.0) as i8)
            .collect();
        (values, max_abs / 127.0)
    }

    /// Rows of ordinary values, halves that round away from zero, a range so small that `127 /
    /// max` overflows, zeros, and NaNs and infinities among the values: the same bytes and
    /// scales as `roundf` gives.
    #[test]
    fn int8_rows_are_rounded_as_roundf_rounds_them() {
        let d_head = 12;
        // multiples of 1/37 in -27..=27.05
        let mut rng = crate::rng::Rng::new(7);
        let mut value = || rng.below(2001) as f32 / 37.0 - 27.0;
        let rows: Vec<Vec<f32>> = vec![
            (0..d_head).map(|_| value()).collect(),
            (0..d_head).map(|i| (i as f32 - 6.0) * 0.5).collect(),
            (0..d_head).map(|_| value() * 1e-39).collect(),
            (0..d_head).map(|i| f32::from_bits(i as u32 % 5)).collect(),
            vec![0.0; d_head],
            vec![-0.0; d_head],
            (0..d_head)
                .map(|i| if i == 3 { f32::NAN } else { value() })
                .collect(),
            (0..d_head)
                .map(|i| if i == 5 { f32::INFINITY } else { value() })
                .collect(),
            (0..d_head)
                .map(|i| if i % 2 == 0 { f32::NEG_INFINITY } else { 1.0 })
                .collect(),
        ];
        let mut values = vec![0i8; 2 * d_head];
        let mut scales = vec![0.0f32; 2];
        for row in &rows {
            let mut store = Store::Int8 {
                values: &mut values,
                scales: &mut scales,
            };
            // two heads of the same row: the second at row offset `d_head`
            let both: Vec<f32> = row.iter().chain(row.iter()).copied().collect();
            store.write(0, d_head, &both);
            let (want, scale) = written_with_roundf(row);
            for head in 0..2 {
                assert_eq!(&values[head * d_head..(head + 1) * d_head], &want[..], "{row:?}");
                assert_eq!(scales[head].to_bits(), scale.to_bits(), "{row:?}");
            }
        }
    }

    /// The int8 scores through `kernels::key_scores_i8` (as Helium builds take them) against
    /// `add_position_terms` with the content closure: every ring layout (wrapped or not, the
    /// whole ring or part of it) and as many terms as keys, fewer, or one.
    #[test]
    fn key_scores_are_the_position_terms_of_the_sums() {
        let (heads, capacity, d_head) = (3, 13, 2);
        let (mut keys, mut key_scales) = (
            vec![0i8; 2 * capacity * heads * d_head],
            vec![0.0f32; 2 * capacity * heads],
        );
        let (mut values, mut value_scales) = (keys.clone(), key_scales.clone());
        for (i, s) in key_scales.iter_mut().enumerate() {
            *s = 0.01 + i as f32 * 0.0037;
        }
        let layer = 1;
        let mut memory = Memory::new(
            Store::Int8 {
                values: &mut keys,
                scales: &mut key_scales,
            },
            Store::Int8 {
                values: &mut values,
                scales: &mut value_scales,
            },
            (heads * d_head, d_head),
            capacity,
            capacity - 1,
        );
        let rows = {
            let Store::Int8 { scales, .. } = &memory.keys else {
                unreachable!()
            };
            scales[layer * capacity * heads..].to_vec()
        };
        for start in [0, 5, 12] {
            memory.start = start;
            for (lo, count) in [(0, 13), (0, 1), (2, 9), (4, 9), (0, 12)] {
                let keys = memory.ring_keys(lo, count, true);
                for m in [1, 3.min(count), count] {
                    let terms: Vec<f32> = (0..m).map(|d| 0.5 - d as f32 * 0.125).collect();
                    let sums: Vec<f32> = (0..capacity)
                        .map(|t| f32::from_bits((t as i32 * 7919 - 40000) as u32))
                        .collect();
                    let (step, scale, head) = (3.0e-4, 0.17, 2);
                    let (mut got, mut want) = (sums.clone(), sums.clone());
                    let max = key_scores(&keys, (&terms, scale), (&rows, heads), (head, step), &mut got);
                    let content = |sum: f32, row: &[f32]| (sum.to_bits() as i32) as f32 * step * row[head];
                    let expected =
                        add_position_terms(&keys, (&terms, scale), (&rows, heads), content, &mut want);
                    let n = if keys.whole { capacity } else { count };
                    let same = got[..n]
                        .iter()
                        .zip(&want[..n])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same && max == Some(expected),
                        "start {start} lo {lo} count {count} m {m}"
                    );
                }
            }
        }
    }
}
