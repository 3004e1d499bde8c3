//! The fast Walsh–Hadamard transform (Sylvester order, unnormalised; math.md §0) and
//! the subsampled randomized Hadamard transform (Tropp 2011; math.md §5):
//! `G(z)_k = E^{-1/2} (H_{D'} diag(ζ) pad₂(z))_{r_k}`, rows drawn without replacement.

use pulp::{Arch, Simd, WithSimd};

use super::params::ParamArray;
use super::{ChunkMap, Sketch};
use crate::rng::StageRng;

/// In-place FWHT of a power-of-two-length slice: pairs `(a, b) ↦ (a + b, a − b)` for
/// `h = 1, 2, 4, …`; no scaling, so applying it twice multiplies by `n`.
///
/// The stages below `FWHT_BLOCK` run block by block while the block is in L1, the
/// first three as one 8-point butterfly per group (their pairs are within 8 values, which
/// the plain loop ran two or four at a time), all compiled for the CPU's vectors. Every
/// value goes through the same additions in the same order as stage-by-stage over the
/// whole slice, so the result is bit-for-bit the same; at 2^17 (the CRAFTMaps SRHT) the
/// transform streamed the slice through L2 seventeen times.
pub fn fwht(v: &mut [f32]) {
    debug_assert!(v.len().is_power_of_two() || v.is_empty());
    Arch::new().dispatch(Fwht(v));
}

/// Values per block of the cache-blocked stages: 16 KiB of f32.
const FWHT_BLOCK: usize = 1 << 12;

struct Fwht<'a>(&'a mut [f32]);

impl WithSimd for Fwht<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let v = self.0;
        let n = v.len();
        let block = FWHT_BLOCK.min(n);
        for chunk in v.chunks_exact_mut(block.max(1)) {
            let mut h = 1;
            if block >= 8 {
                chunk.chunks_exact_mut(8).for_each(butterfly8);
                h = 8;
            }
            while h < block {
                stage(chunk, h);
                h *= 2;
            }
        }
        let mut h = block;
        while h < n {
            stage(v, h);
            h *= 2;
        }
    }
}

/// One stage: `(v[i], v[i + h]) ↦ (v[i] + v[i + h], v[i] − v[i + h])` within blocks of `2h`.
#[inline(always)]
fn stage(v: &mut [f32], h: usize) {
    for block in v.chunks_exact_mut(2 * h) {
        let (a, b) = block.split_at_mut(h);
        for (x, y) in a.iter_mut().zip(b.iter_mut()) {
            let (s, t) = (*x + *y, *x - *y);
            *x = s;
            *y = t;
        }
    }
}

/// Stages `h = 1, 2, 4` of eight values, in the plain loop's order of operations.
#[inline(always)]
fn butterfly8(g: &mut [f32]) {
    let mut a = [0f32; 8];
    a.copy_from_slice(g);
    for h in [1, 2, 4] {
        let mut b = [0f32; 8];
        for i in 0..8 {
            b[i] = if i & h == 0 { a[i] + a[i + h] } else { a[i - h] - a[i] };
        }
        a = b;
    }
    g.copy_from_slice(&a);
}

/// `2^⌈log₂ n⌉` (1 for n ≤ 1).
pub fn next_pow2(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// An SRHT `R^D → R^E`.
#[derive(Debug, Clone, PartialEq)]
pub struct Srht {
    /// Input dimension `D`.
    pub d_in: usize,
    /// Signs `ζ` (length `D'`).
    pub zeta: Vec<i8>,
    /// Sampled rows `r_0..r_{E-1}` (distinct, in draw order).
    pub rows: Vec<u32>,
}

impl Srht {
    /// Draws `ζ` and `E ≤ D'` distinct rows (a partial Fisher–Yates shuffle).
    pub fn draw(d_in: usize, e: usize, rng: &mut StageRng) -> Srht {
        let dp = next_pow2(d_in);
        assert!(e <= dp, "SRHT output exceeds the padded input dimension");
        let zeta = (0..dp).map(|_| rng.sign()).collect();
        let mut perm: Vec<u32> = (0..dp as u32).collect();
        for k in 0..e {
            let j = k + rng.below((dp - k) as u32) as usize;
            perm.swap(k, j);
        }
        perm.truncate(e);
        Srht { d_in, zeta, rows: perm }
    }

    /// Padded dimension `D'`.
    pub fn padded(&self) -> usize {
        self.zeta.len()
    }

    /// Checks stored parameters (a loaded model).
    pub fn validate(&self) -> Result<(), crate::container::ContainerError> {
        use crate::container::ContainerError::Inconsistent;
        let dp = self.padded();
        if dp != next_pow2(self.d_in) || self.zeta.iter().any(|&s| s != 1 && s != -1) {
            return Err(Inconsistent("SRHT signs must be ±1 with length 2^⌈log₂ D⌉".into()));
        }
        let mut seen = vec![false; dp];
        for &r in &self.rows {
            if r as usize >= dp || std::mem::replace(&mut seen[r as usize], true) {
                return Err(Inconsistent("SRHT rows must be distinct and below D'".into()));
            }
        }
        Ok(())
    }
}

impl ChunkMap for Srht {
    fn input_dim(&self) -> usize {
        self.d_in
    }
    fn output_dim(&self) -> usize {
        self.rows.len()
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, dp, e) = (self.d_in, self.padded(), self.rows.len());
        let scale = 1.0 / (e as f32).sqrt();
        let mut buf = vec![0f32; dp];
        for r in 0..rows {
            let xr = &x[r * d..(r + 1) * d];
            for (b, (&v, &s)) in buf.iter_mut().zip(xr.iter().zip(&self.zeta)) {
                *b = v * f32::from(s);
            }
            buf[d..].fill(0.0);
            fwht(&mut buf);
            for (o, &k) in out[r * e..(r + 1) * e].iter_mut().zip(&self.rows) {
                *o = buf[k as usize] * scale;
            }
        }
    }
}

/// A dense Gaussian (Johnson–Lindenstrauss) map `R^D → R^E`, `A_ij ~ N(0, 1/E)`: the
/// reference down-projection for CRAFTMaps.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianProjection {
    /// `Aᵀ`, row-major `D × E`.
    pub at: Vec<f32>,
    /// `D`.
    pub d_in: usize,
    /// `E`.
    pub e: usize,
}

impl GaussianProjection {
    /// Draws `A`.
    pub fn draw(d_in: usize, e: usize, rng: &mut StageRng) -> Self {
        let sd = 1.0 / (e as f64).sqrt();
        let at = (0..d_in * e).map(|_| (rng.normal() * sd) as f32).collect();
        GaussianProjection { at, d_in, e }
    }
}

impl ChunkMap for GaussianProjection {
    fn input_dim(&self) -> usize {
        self.d_in
    }
    fn output_dim(&self) -> usize {
        self.e
    }
    #[allow(clippy::expect_used)] // Invariant: the views' lengths are the caller's rows × d_in and the fitted d_in × E.
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let a = ndarray::ArrayView2::from_shape((rows, self.d_in), &x[..rows * self.d_in]).expect("shape");
        let b = ndarray::ArrayView2::from_shape((self.d_in, self.e), &self.at).expect("shape");
        let mut c = ndarray::ArrayViewMut2::from_shape((rows, self.e), &mut out[..rows * self.e]).expect("shape");
        ndarray::linalg::general_mat_mul(1.0, &a, &b, 0.0, &mut c);
    }
}

impl Sketch for Srht {
    fn params(&self) -> Vec<ParamArray> {
        vec![
            ParamArray::i8("zeta", vec![self.zeta.len()], self.zeta.clone()),
            ParamArray::u32("rows", vec![self.rows.len()], self.rows.clone()),
        ]
    }
}

impl Sketch for GaussianProjection {
    fn params(&self) -> Vec<ParamArray> {
        vec![ParamArray::f32("matrix", vec![self.d_in, self.e], self.at.clone())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sylvester(n: usize) -> Vec<f32> {
        (0..n * n).map(|k| if ((k / n) & (k % n)).count_ones().is_multiple_of(2) { 1.0 } else { -1.0 }).collect()
    }

    #[test]
    fn fwht_is_the_sylvester_product_and_an_involution_up_to_n() {
        let mut r = StageRng::new(4, 4);
        for n in [1usize, 2, 8, 64, 1024] {
            let v: Vec<f32> = (0..n).map(|_| r.uniform() as f32 - 0.5).collect();
            let h = sylvester(n);
            let want: Vec<f32> = (0..n).map(|i| (0..n).map(|j| h[i * n + j] * v[j]).sum()).collect();
            let mut got = v.clone();
            fwht(&mut got);
            let scale = (n as f32).sqrt();
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-5 * scale, "n={n}");
            }
            fwht(&mut got);
            for (a, b) in got.iter().zip(&v) {
                assert!((a - n as f32 * b).abs() <= 1e-4 * n as f32, "involution n={n}");
            }
        }
    }

    /// The blocked transform is the plain stage-by-stage one bit for bit, below the
    /// 8-point kernel, inside one block and across blocks (n above `FWHT_BLOCK`).
    #[test]
    fn blocked_fwht_is_the_plain_one_bit_for_bit() {
        let mut r = StageRng::new(4, 5);
        for n in [2usize, 4, 8, 16, FWHT_BLOCK, 4 * FWHT_BLOCK] {
            let v: Vec<f32> = (0..n).map(|_| r.uniform() as f32 - 0.5).collect();
            let mut want = v.clone();
            let mut h = 1;
            while h < n {
                stage(&mut want, h);
                h *= 2;
            }
            let mut got = v;
            fwht(&mut got);
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "n={n}");
        }
    }

    #[test]
    fn full_srht_is_an_isometry() {
        let mut r = StageRng::new(9, 1);
        let s = Srht::draw(12, 16, &mut r);
        s.validate().unwrap();
        let x: Vec<f32> = (0..24).map(|_| r.uniform() as f32 - 0.5).collect();
        let mut z = vec![0f32; 32];
        s.map(&x, 2, &mut z);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum::<f64>();
        assert!((dot(&z[..16], &z[16..]) - dot(&x[..12], &x[12..])).abs() < 1e-5);
        assert!((dot(&z[..16], &z[..16]) - dot(&x[..12], &x[..12])).abs() < 1e-5);
    }
}
