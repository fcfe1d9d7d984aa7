//! Relative multi-head attention of one stream's segment, head by head, as three matrix
//! products: the content scores `AC = (Q + u) K^T`, the position scores `BD = (Q + v) R^T`
//! over every distance, and `P V`. The position score of query `i` and key `j` is `BD[i][d]`
//! at the distance `d = mlen + i - j` (clamped): the "rel-shift" is an index.

use crate::cpu::matmul::{matmul, Rhs};
use crate::error::{grow, Error};
use crate::real::Real;

/// Which keys each query of a segment may see, in Hugging Face's terms.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    /// Queries in the segment.
    pub qlen: usize,
    /// Remembered positions before the segment.
    pub mlen: usize,
    /// The session's `mem_len`.
    pub mem_len: usize,
    /// Whether every query sees the same number of keys.
    pub same_length: bool,
}

impl Window {
    /// Keys: the memory, then the segment.
    pub fn klen(&self) -> usize {
        self.mlen + self.qlen
    }

    /// Whether query `i` must not see key `j`. The mask is
    /// `triu(ones(qlen, klen), 1 + mlen)`, plus, with `same_length`,
    /// `tril(ones(qlen, klen), -shift)` where `shift = qlen - (klen - mem_len)` when
    /// `klen > mem_len`, else `qlen`.
    pub fn masked(&self, i: usize, j: usize) -> bool {
        let future = j > self.mlen + i;
        if !self.same_length {
            return future;
        }
        let klen = self.klen() as isize;
        let mask_len = klen - self.mem_len as isize;
        let shift = if mask_len > 0 {
            self.qlen as isize - mask_len
        } else {
            self.qlen as isize
        };
        future || (j as isize) <= i as isize - shift
    }
}

/// Scratch for [`attend`], grown as needed.
#[derive(Debug, Default)]
pub(crate) struct Scratch<T> {
    content: Vec<T>,
    position: Vec<T>,
}

/// One stream's attention output for one layer.
///
/// `content_q` and `position_q` are the segment's `(qlen, W)` rows of `q + u` and `q + v`;
/// `keys` and `values` are `(klen, W)` (memory then segment); `position_keys` is
/// `(max_distance + 1, W)`. Writes `out (qlen, W)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend<T: Real>(
    window: &Window,
    n_head: usize,
    d_head: usize,
    max_distance: usize,
    content_q: &[T],
    position_q: &[T],
    keys: &[T],
    values: &[T],
    position_keys: &[T],
    scratch: &mut Scratch<T>,
    out: &mut [T],
) -> Result<(), Error> {
    let width = n_head * d_head;
    let (qlen, klen) = (window.qlen, window.klen());
    let distances = klen.min(max_distance + 1);
    let scale = T::from_f64(1.0 / (d_head as f64).sqrt());
    // (qlen, klen) and (qlen, distances) scores: sized by the segment and the memory.
    let scores = "the attention scores";
    grow(&mut scratch.content, qlen.saturating_mul(klen), T::ZERO, scores)?;
    grow(
        &mut scratch.position,
        qlen.saturating_mul(distances),
        T::ZERO,
        scores,
    )?;
    let (ac, bd) = (&mut scratch.content, &mut scratch.position);
    for head in 0..n_head {
        let h = head * d_head;
        // AC (qlen, klen) = (Q + u)_h (qlen, d_head) @ K_h^T
        let k_t = Rhs::Transposed { ld: width };
        matmul(
            qlen,
            klen,
            d_head,
            &content_q[h..],
            width,
            &keys[h..],
            k_t,
            ac,
            klen,
            false,
        );
        // BD (qlen, distances) = (Q + v)_h (qlen, d_head) @ R_h^T
        let r_t = Rhs::Transposed { ld: width };
        let pk = &position_keys[h..];
        matmul(
            qlen,
            distances,
            d_head,
            &position_q[h..],
            width,
            pk,
            r_t,
            bd,
            distances,
            false,
        );
        // Scores, mask, softmax: AC becomes the probabilities P (qlen, klen).
        for i in 0..qlen {
            let row = &mut ac[i * klen..(i + 1) * klen];
            let pos = &bd[i * distances..(i + 1) * distances];
            let mut max: Option<T> = None;
            for (j, s) in row.iter_mut().enumerate() {
                if window.masked(i, j) {
                    continue;
                }
                let d = (window.mlen + i - j).min(max_distance);
                *s = (*s + pos[d]) * scale;
                max = Some(match max {
                    Some(m) if m >= *s => m,
                    _ => *s,
                });
            }
            let Some(max) = max else {
                // Every key masked: Hugging Face fills all scores with the same value, so the
                // softmax is uniform over all keys.
                row.fill(T::ONE / T::from_f64(klen as f64));
                continue;
            };
            let mut sum = T::ZERO;
            for (j, s) in row.iter_mut().enumerate() {
                *s = if window.masked(i, j) {
                    T::ZERO
                } else {
                    (*s - max).exp()
                };
                sum += *s;
            }
            for s in row.iter_mut() {
                *s = *s / sum;
            }
        }
        // out_h (qlen, d_head) = P (qlen, klen) @ V_h (klen, d_head)
        let v = Rhs::Plain { ld: width };
        matmul(
            qlen,
            d_head,
            klen,
            ac,
            klen,
            &values[h..],
            v,
            &mut out[h..],
            width,
            false,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Window;

    fn visible(w: &Window, i: usize) -> Vec<usize> {
        (0..w.klen()).filter(|&j| !w.masked(i, j)).collect()
    }

    #[test]
    fn causal_mask_sees_memory_and_the_past() {
        let w = Window {
            qlen: 3,
            mlen: 2,
            mem_len: 4,
            same_length: false,
        };
        assert_eq!(visible(&w, 0), [0, 1, 2]);
        assert_eq!(visible(&w, 2), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn same_length_sees_mem_len_keys_once_the_memory_is_full() {
        let w = Window {
            qlen: 3,
            mlen: 4,
            mem_len: 4,
            same_length: true,
        };
        for i in 0..3 {
            assert_eq!(visible(&w, i), (i + 1..=i + 4).collect::<Vec<_>>());
        }
    }

    #[test]
    fn same_length_without_memory_masks_everything() {
        let w = Window {
            qlen: 3,
            mlen: 0,
            mem_len: 0,
            same_length: true,
        };
        assert!((0..3).all(|i| visible(&w, i).is_empty()));
    }
}
