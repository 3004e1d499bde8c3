//! Cyclic convolutions of real signals of even length `N` by the spectrum (math.md §3):
//! each signal's spectrum multiplied into an accumulator, then one inverse transform.
//!
//! A real signal of length `N` is transformed as `N/2` complex values (even samples as
//! real parts, odd as imaginary) by one complex FFT of half the length, then split into
//! its spectrum bin by bin. Every bin is computed on its own from two FFT outputs (`k`
//! and `N/2 − k`), so the split, the product and the inverse's merge are straight loops
//! the compiler vectorises. realfft pairs the bins instead and runs that step in scalar
//! code, which took a fifth of `predict`'s CPU with a degree-3 tensor sketch at D = 4096;
//! here the split and the product are one loop and the 1/N scale is folded into the merge.
//! The loops run under pulp's run-time dispatch, so they are compiled for the CPU's
//! widest vectors (the crate's baseline is SSE2); every bin is the same IEEE operations
//! at any width, so the bits do not depend on the CPU.

use std::sync::Arc;

use pulp::{Arch, Simd, WithSimd};
use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};

/// The plans and twiddles for one length `N` (even, ≥ 2).
pub(crate) struct Convolver {
    half: usize,
    arch: Arch,
    forward: Arc<dyn Fft<f32>>,
    inverse: Arc<dyn Fft<f32>>,
    /// `e^{−2πik/N}` for `k = 0..N/2`.
    twiddles: Vec<Complex32>,
}

/// One thread's buffers for a [`Convolver`].
pub(crate) struct Spectra {
    /// The packed signal, then its half-length FFT.
    packed: Vec<Complex32>,
    /// The product of the spectra so far, bins `0..=N/2`.
    acc: Vec<Complex32>,
    scratch: Vec<Complex32>,
}

impl Convolver {
    /// Plans for length `n`; `None` when `n` is odd or below 2 (the caller keeps a real FFT).
    pub(crate) fn new(n: usize) -> Option<Convolver> {
        if n < 2 || !n.is_multiple_of(2) {
            return None;
        }
        let half = n / 2;
        let mut planner = FftPlanner::<f32>::new();
        let forward = planner.plan_fft_forward(half);
        let inverse = planner.plan_fft_inverse(half);
        let step = -2.0 * std::f64::consts::PI / n as f64;
        // In f64 then rounded once, so every twiddle is within half an f32 ulp.
        let twiddles = (0..=half)
            .map(|k| Complex32::new((step * k as f64).cos() as f32, (step * k as f64).sin() as f32))
            .collect();
        Some(Convolver { half, arch: Arch::new(), forward, inverse, twiddles })
    }

    /// Buffers for one thread.
    pub(crate) fn spectra(&self) -> Spectra {
        let scratch = self.forward.get_inplace_scratch_len().max(self.inverse.get_inplace_scratch_len());
        let zero = Complex32::new(0.0, 0.0);
        Spectra { packed: vec![zero; self.half], acc: vec![zero; self.half + 1], scratch: vec![zero; scratch] }
    }

    /// Multiplies the spectrum of `x` (length `N`) into the accumulator; `first` sets it.
    pub(crate) fn multiply(&self, x: &[f32], first: bool, s: &mut Spectra) {
        let m = self.half;
        self.arch.dispatch(Pack { x, packed: &mut s.packed });
        self.forward.process_with_scratch(&mut s.packed, &mut s.scratch);
        let z = &s.packed;
        // Bins 0 and N/2 are real: the sums of the even and of the odd samples.
        let (dc, nyquist) = (z[0].re + z[0].im, z[0].re - z[0].im);
        if first {
            s.acc[0] = Complex32::new(dc, 0.0);
            s.acc[m] = Complex32::new(nyquist, 0.0);
        } else {
            s.acc[0].re *= dc;
            s.acc[m].re *= nyquist;
        }
        let (acc, tw) = (&mut s.acc[1..m], &self.twiddles[1..m]);
        self.arch.dispatch(Split { acc, z: &z[1..m], twiddles: tw, first });
    }

    /// `out ← IFFT(acc) / N`, the cyclic convolution of the signals multiplied in.
    pub(crate) fn inverse(&self, s: &mut Spectra, out: &mut [f32]) {
        let m = self.half;
        let (packed, acc, tw) = (&mut s.packed, &s.acc, &self.twiddles[..m]);
        self.arch.dispatch(Merge { packed, acc, twiddles: tw, scale: 1.0 / (2 * m) as f32 });
        self.inverse.process_with_scratch(&mut s.packed, &mut s.scratch);
        self.arch.dispatch(Unpack { packed: &s.packed, out });
    }
}

// Each loop is a `WithSimd` whose body is inlined into pulp's dispatched function, so it
// is compiled with the CPU's features (a closure was compiled apart, for SSE2).

/// `packed_k = x_{2k} + i·x_{2k+1}`.
struct Pack<'a> {
    x: &'a [f32],
    packed: &'a mut [Complex32],
}

impl WithSimd for Pack<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        for (p, pair) in self.packed.iter_mut().zip(self.x.chunks_exact(2)) {
            *p = Complex32::new(pair[0], pair[1]);
        }
    }
}

/// `out_{2k} + i·out_{2k+1} = packed_k`.
struct Unpack<'a> {
    packed: &'a [Complex32],
    out: &'a mut [f32],
}

impl WithSimd for Unpack<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        for (pair, z) in self.out.chunks_exact_mut(2).zip(self.packed) {
            pair[0] = z.re;
            pair[1] = z.im;
        }
    }
}

/// Bins `1..m` of the spectrum from the packed FFT `z` (its entries `1..m`), set into or
/// multiplied into `acc`.
struct Split<'a> {
    acc: &'a mut [Complex32],
    z: &'a [Complex32],
    twiddles: &'a [Complex32],
    first: bool,
}

impl WithSimd for Split<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let bins = self.acc.iter_mut().zip(self.z).zip(self.z.iter().rev()).zip(self.twiddles);
        if self.first {
            for (((a, &zk), &zr), &w) in bins {
                *a = bin(zk, zr, w);
            }
        } else {
            for (((a, &zk), &zr), &w) in bins {
                *a *= bin(zk, zr, w);
            }
        }
    }
}

/// The packed input of the half-length inverse from the spectrum `acc` (bins `0..=m`),
/// times `scale`: `z_k = (E_k + i·O_k)·scale` with `E_k = Y_k + conj Y_{m−k}` and
/// `O_k = (Y_k − conj Y_{m−k})·conj(w_k)`, the even and odd samples' spectra (doubled).
struct Merge<'a> {
    packed: &'a mut [Complex32],
    acc: &'a [Complex32],
    twiddles: &'a [Complex32],
    scale: f32,
}

impl WithSimd for Merge<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let Merge { packed, acc, twiddles, scale } = self;
        let m = packed.len();
        for (((z, &y), &yr), &w) in packed.iter_mut().zip(&acc[..m]).zip(acc[1..=m].iter().rev()).zip(twiddles) {
            let c = yr.conj();
            let odd = (y - c) * w.conj();
            *z = Complex32::new(y.re + c.re - odd.im, y.im + c.im + odd.re) * scale;
        }
    }
}

/// Bin `k` of a real signal's spectrum from its packed FFT `z_k` and `z_{m−k}`:
/// `E + w·O` with `E = (z_k + conj z_{m−k})/2`, `O = (z_k − conj z_{m−k})/(2i)`.
#[inline(always)]
fn bin(zk: Complex32, zr: Complex32, w: Complex32) -> Complex32 {
    let c = zr.conj();
    let even = (zk + c) * 0.5;
    let d = zk - c;
    let odd = Complex32::new(d.im * 0.5, -d.re * 0.5);
    even + w * odd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cyclic convolution of `signals` in f64 by its definition, O(N²) per signal.
    fn direct(signals: &[Vec<f32>]) -> Vec<f64> {
        let n = signals[0].len();
        let mut acc: Vec<f64> = signals[0].iter().map(|&v| f64::from(v)).collect();
        for s in &signals[1..] {
            acc = (0..n).map(|i| (0..n).map(|j| acc[j] * f64::from(s[(i + n - j) % n])).sum()).collect();
        }
        acc
    }

    /// Against the definition for lengths whose half is a power of two, prime and
    /// composite, one to four signals. An FFT's error in the 2-norm is about
    /// ε·log₂N·‖y‖₂ per transform (Parseval), so every entry must be within a small
    /// multiple of that: a wrong twiddle or a misplaced bin errs by O(‖y‖₂).
    #[test]
    fn convolution_matches_the_definition() {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        for n in [2usize, 4, 6, 14, 22, 64, 96, 250, 1024] {
            for count in 1..=4 {
                let signals: Vec<Vec<f32>> = (0..count).map(|_| (0..n).map(|_| next()).collect()).collect();
                let conv = Convolver::new(n).expect("even length");
                let mut s = conv.spectra();
                for (j, x) in signals.iter().enumerate() {
                    conv.multiply(x, j == 0, &mut s);
                }
                let mut out = vec![0f32; n];
                conv.inverse(&mut s, &mut out);
                let want = direct(&signals);
                let norm = want.iter().map(|v| v * v).sum::<f64>().sqrt();
                let tol = 8.0 * ((n as f64).log2() + 1.0) * (count + 1) as f64 * f64::from(f32::EPSILON) * norm;
                for (i, (&got, &w)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(got) - w).abs() <= tol,
                        "n = {n}, {count} signals, [{i}]: {got} vs {w} (tol {tol})"
                    );
                }
            }
        }
        assert!(Convolver::new(7).is_none() && Convolver::new(0).is_none());
    }
}
