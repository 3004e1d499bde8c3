//! Count sketch (Charikar et al. 2002; math.md §2): `(Cx)_k = Σ_{i: h(i)=k} s(i) x_i`.
//! The building block of the tensor sketch; linear, one nonzero per input coordinate.

use crate::rng::StageRng;

/// A count sketch `R^d → R^D` given by its stored hash and sign tables.
#[derive(Debug, Clone, PartialEq)]
pub struct CountSketch {
    /// `h(i) ∈ [D]` for each input coordinate.
    pub hash: Vec<u32>,
    /// `s(i) ∈ {±1}` for each input coordinate.
    pub sign: Vec<i8>,
    /// Output dimension `D`.
    pub dim: usize,
}

impl CountSketch {
    /// Draws `h` uniform on `[D]` and `s` Rademacher, independently per coordinate.
    pub fn draw(d: usize, dim: usize, rng: &mut StageRng) -> Self {
        let hash = (0..d).map(|_| rng.below(dim as u32)).collect();
        let sign = (0..d).map(|_| rng.sign()).collect();
        CountSketch { hash, sign, dim }
    }

    /// Input dimension.
    pub fn input_dim(&self) -> usize {
        self.hash.len()
    }

    /// `out ← C x` (out is overwritten). `scale` multiplies every input value, so a
    /// scaled input needs no copy.
    pub fn apply(&self, x: &[f32], scale: f32, out: &mut [f32]) {
        debug_assert_eq!(out.len(), self.dim);
        out.fill(0.0);
        self.accumulate(x, scale, out);
    }

    /// Zeroes every value of `out` this sketch can write: after [`CountSketch::accumulate`]
    /// into a zeroed buffer, the buffer is zero again at `d` stores instead of `D`.
    pub fn clear(&self, out: &mut [f32]) {
        for &h in &self.hash {
            out[h as usize] = 0.0;
        }
    }

    /// `out += scale · C x[..len]`, for the first `x.len()` coordinates of the table.
    pub fn accumulate(&self, x: &[f32], scale: f32, out: &mut [f32]) {
        for ((&v, &h), &s) in x.iter().zip(&self.hash).zip(&self.sign) {
            if v != 0.0 {
                out[h as usize] += f32::from(s) * scale * v;
            }
        }
    }
}
