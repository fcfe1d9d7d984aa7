//! The recurrence memory: per layer, a ring buffer of the keys and values of the last
//! positions, so no position's projections are ever computed twice.
//!
//! The ring holds `capacity = mem_len + tgt_len` positions. A segment appends its `qlen`
//! positions after the `len` remembered ones (logical positions `len..len + qlen`), attends
//! over all of them, then [`Memory::commit`] keeps the last `mem_len`: the original code's
//! `_update_mems` with `ext_len = 0`, without moving any data.

/// Cached keys and values of every layer.
#[derive(Debug)]
pub struct Memory<'a> {
    /// `(n_layer, capacity, width)`.
    keys: &'a mut [f32],
    /// `(n_layer, capacity, width)`.
    values: &'a mut [f32],
    width: usize,
    capacity: usize,
    mem_len: usize,
    /// Ring slot of logical position 0.
    start: usize,
    /// Remembered positions (`<= mem_len`).
    len: usize,
}

impl<'a> Memory<'a> {
    /// A memory over the given buffers, each `n_layer * capacity * width` long.
    pub fn new(
        keys: &'a mut [f32],
        values: &'a mut [f32],
        width: usize,
        capacity: usize,
        mem_len: usize,
    ) -> Self {
        Memory {
            keys,
            values,
            width,
            capacity,
            mem_len,
            start: 0,
            len: 0,
        }
    }

    /// Remembered positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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

    /// The key and value rows of logical `position` (`< capacity`) of `layer`, to write.
    pub fn slot_mut(&mut self, layer: usize, position: usize) -> (&mut [f32], &mut [f32]) {
        let at = self.offset(layer, position);
        (
            &mut self.keys[at..at + self.width],
            &mut self.values[at..at + self.width],
        )
    }

    /// The key row of logical `position` of `layer`.
    pub fn key(&self, layer: usize, position: usize) -> &[f32] {
        let at = self.offset(layer, position);
        &self.keys[at..at + self.width]
    }

    /// The value row of logical `position` of `layer`.
    pub fn value(&self, layer: usize, position: usize) -> &[f32] {
        let at = self.offset(layer, position);
        &self.values[at..at + self.width]
    }

    /// After a segment of `qlen` positions: keep the last `mem_len` of `len + qlen`.
    pub fn commit(&mut self, qlen: usize) {
        let total = self.len + qlen;
        let keep = total.min(self.mem_len);
        self.start = (self.start + total - keep) % self.capacity;
        self.len = keep;
    }

    /// Marks `len` positions (already written) as remembered, e.g. the zero states.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.mem_len);
    }
}
