//! Random Maclaurin features (Kar & Karnick 2012; math.md §4) for dot-product kernels
//! `f(⟨x,y⟩) = Σ a_n ⟨x,y⟩^n` with `a_n ≥ 0`, with the H0/1 heuristic (constant and
//! linear terms exact) and the Hadamard-structured variant of CRAFTMaps (math.md §6).
//!
//! Dense path: all Rademacher vectors form one `d × ΣN_i` sign matrix, so a chunk's
//! projections are one f32 GEMM; each feature is then a product of its columns.

use serde::{Deserialize, Serialize};

use super::family::Family;
use super::hadamard::{fwht, next_pow2};
use super::keys::{defaults, dim, eta, family_spec, no_fitting, poly, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::{ChunkMap, Kernel, Sketch};
use crate::rng::StageRng;

/// A dot-product kernel with non-negative Maclaurin coefficients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DotKernel {
    /// `(γ⟨x,y⟩ + c)^p`, integer `p ≥ 1`.
    Polynomial {
        /// `p`.
        degree: u32,
        /// `γ`.
        gamma: f64,
        /// `c`.
        offset: f64,
    },
    /// `exp(γ⟨x,y⟩)`.
    Exponential {
        /// `γ`.
        gamma: f64,
    },
}

fn binom(n: u32, k: u32) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * f64::from(n - i) / f64::from(i + 1))
}

impl DotKernel {
    /// `a_n`.
    pub fn coef(&self, n: u32) -> f64 {
        match *self {
            DotKernel::Polynomial { degree, gamma, offset } => {
                if n > degree {
                    0.0
                } else {
                    binom(degree, n) * offset.powi((degree - n) as i32) * gamma.powi(n as i32)
                }
            }
            DotKernel::Exponential { gamma } => (1..=n).fold(1.0, |acc, i| acc * gamma / f64::from(i)),
        }
    }

    /// The highest order with a nonzero coefficient, if finite.
    pub fn max_order(&self) -> Option<u32> {
        match *self {
            DotKernel::Polynomial { degree, .. } => Some(degree),
            DotKernel::Exponential { .. } => None,
        }
    }

    /// `f(t)`.
    pub fn eval_dot(&self, t: f64) -> f64 {
        match *self {
            DotKernel::Polynomial { degree, gamma, offset } => (gamma * t + offset).powi(degree as i32),
            DotKernel::Exponential { gamma } => (gamma * t).exp(),
        }
    }
}

/// The order distribution `q(n) ∝ η^{-(n+1)}` on `{n ≥ n_min : a_n > 0}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrderLaw {
    kernel: DotKernel,
    eta: f64,
    n_min: u32,
    norm: f64,
}

/// Orders above this are never drawn: `q` is below `η^-4000` there.
const ORDER_CAP: u32 = 4000;

impl OrderLaw {
    /// The law for `kernel`, base `η > 1`, orders from `n_min`; `None` if the support is empty.
    pub fn new(kernel: DotKernel, eta: f64, n_min: u32) -> Option<OrderLaw> {
        let norm = match kernel.max_order() {
            Some(p) => (n_min..=p).filter(|&n| kernel.coef(n) > 0.0).map(|n| eta.powi(-(n as i32 + 1))).sum(),
            None if kernel.coef(1) > 0.0 => eta.powi(-(n_min as i32 + 1)) / (1.0 - 1.0 / eta),
            None => 0.0,
        };
        (norm > 0.0).then_some(OrderLaw { kernel, eta, n_min, norm })
    }

    /// `q(n)`.
    pub fn q(&self, n: u32) -> f64 {
        if n < self.n_min || self.kernel.coef(n) <= 0.0 {
            0.0
        } else {
            self.eta.powi(-(n as i32 + 1)) / self.norm
        }
    }

    /// `sqrt(a_n / q(n))`.
    pub fn scale(&self, n: u32) -> f64 {
        (self.kernel.coef(n) / self.q(n)).sqrt()
    }

    /// Draws an order by inversion of the CDF.
    pub fn draw(&self, rng: &mut StageRng) -> u32 {
        let u = rng.uniform();
        let mut cum = 0.0;
        let top = self.kernel.max_order().unwrap_or(ORDER_CAP);
        let mut last = self.n_min;
        for n in self.n_min..=top {
            let q = self.q(n);
            if q > 0.0 {
                cum += q;
                last = n;
                if u < cum {
                    return n;
                }
            }
        }
        last
    }
}

/// How the random features' projections `⟨w, x⟩` are formed.
#[derive(Debug, Clone, PartialEq)]
pub enum Projections {
    /// Independent Rademacher vectors: a `d × ΣN` sign matrix (column `o_i + j` is `w_{i,j}`).
    Dense {
        /// Signs as f32 (±1), row-major `d × ΣN`.
        signs: Vec<f32>,
    },
    /// Hadamard-structured slots (math.md §6): `T` sign vectors `ζ_t` of length `d'`, and
    /// a permutation `π` of the `T d'` slots.
    Hadamard {
        /// `d' = 2^⌈log₂ d⌉`.
        d_pad: usize,
        /// `ζ`, row-major `T × d'`.
        zeta: Vec<i8>,
        /// `π`.
        perm: Vec<u32>,
    },
}

/// Random Maclaurin features.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomMaclaurin {
    /// The kernel.
    pub kernel: DotKernel,
    /// Input dimension.
    pub d: usize,
    /// H0/1 layout in force.
    pub h01: bool,
    /// Orders `N_i` of the random features.
    pub orders: Vec<u32>,
    /// Per-feature factor `sqrt(a_N/q(N)) / sqrt(D_r)`.
    pub scales: Vec<f32>,
    /// The projections.
    pub proj: Projections,
    /// Order base η.
    pub eta: f64,
}

/// What a random Maclaurin map is drawn for: its kernel, input width `d`, requested
/// dimension, order base `η`, and whether H0/1 and the Hadamard-structured projections
/// apply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    /// The dot-product kernel.
    pub kernel: DotKernel,
    /// Input width.
    pub d: usize,
    /// Requested dimension.
    pub dim: usize,
    /// Order base η.
    pub eta: f64,
    /// Exact order-0 and order-1 features (H0/1).
    pub h01: bool,
    /// Hadamard-structured projections instead of dense signs.
    pub hadamard: bool,
}

impl RandomMaclaurin {
    /// Draws a map of (requested) dimension `dim`. H0/1 applies when asked, `dim > d + 1`
    /// and `a_0 + a_1 > 0`; with no order ≥ 2 in the support the map is then exact and
    /// has dimension `d + [a_0 > 0]`.
    pub fn draw(layout: Layout, rng: &mut StageRng) -> Self {
        let Layout { kernel, d, dim, eta, h01, hadamard } = layout;
        let h01 = h01 && dim > d + 1 && kernel.coef(0) + kernel.coef(1) > 0.0;
        let (n_min, n_random) = if h01 {
            let exact = d + usize::from(kernel.coef(0) > 0.0);
            (2, dim - exact)
        } else {
            (0, dim)
        };
        let law = OrderLaw::new(kernel, eta, n_min);
        let n_random = if law.is_some() { n_random } else { 0 };
        let orders: Vec<u32> = match &law {
            Some(l) => (0..n_random).map(|_| l.draw(rng)).collect(),
            None => Vec::new(),
        };
        let total: usize = orders.iter().map(|&n| n as usize).sum();
        let proj = if hadamard {
            let d_pad = next_pow2(d);
            let t = total.div_ceil(d_pad);
            let zeta = (0..t * d_pad).map(|_| rng.sign()).collect();
            let mut perm: Vec<u32> = (0..(t * d_pad) as u32).collect();
            for k in (1..perm.len()).rev() {
                let j = rng.below(k as u32 + 1) as usize;
                perm.swap(k, j);
            }
            Projections::Hadamard { d_pad, zeta, perm }
        } else {
            // Draw vector by vector (w_{i,j} for i, then j) and lay them out as columns.
            let mut signs = vec![0f32; d * total];
            for col in 0..total {
                for row in 0..d {
                    signs[row * total + col] = f32::from(rng.sign());
                }
            }
            Projections::Dense { signs }
        };
        Self::from_parts(kernel, d, h01, orders, proj, eta)
    }

    /// Rebuilds from stored parts.
    pub fn from_parts(kernel: DotKernel, d: usize, h01: bool, orders: Vec<u32>, proj: Projections, eta: f64) -> Self {
        let law = OrderLaw::new(kernel, eta, if h01 { 2 } else { 0 });
        let dr = orders.len().max(1) as f64;
        let scales = orders.iter().map(|&n| law.map_or(0.0, |l| (l.scale(n) / dr.sqrt()) as f32)).collect();
        RandomMaclaurin { kernel, d, h01, orders, scales, proj, eta }
    }

    fn exact_dim(&self) -> usize {
        if self.h01 {
            self.d + usize::from(self.kernel.coef(0) > 0.0)
        } else {
            0
        }
    }

    /// Total number of projections `ΣN_i`.
    pub fn total_order(&self) -> usize {
        self.orders.iter().map(|&n| n as usize).sum()
    }

    fn products(&self, proj: &[f32], total: usize, out: &mut [f32], slot: impl Fn(usize) -> usize) {
        let _ = total;
        let mut o = 0;
        for (i, (&n, &s)) in self.orders.iter().zip(&self.scales).enumerate() {
            let mut v = s;
            for k in 0..n as usize {
                v *= proj[slot(o + k)];
            }
            out[i] = v;
            o += n as usize;
        }
    }
}

impl ChunkMap for RandomMaclaurin {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        self.exact_dim() + self.orders.len()
    }
    #[allow(clippy::expect_used)] // Invariant: the views' lengths are rows × d and the drawn d × total signs.
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, dz, ex) = (self.d, self.output_dim(), self.exact_dim());
        if self.h01 {
            let a0 = self.kernel.coef(0);
            let s1 = self.kernel.coef(1).sqrt() as f32;
            for r in 0..rows {
                let o = &mut out[r * dz..r * dz + ex];
                let (head, lin) = if a0 > 0.0 {
                    o[0] = a0.sqrt() as f32;
                    o.split_at_mut(1)
                } else {
                    o.split_at_mut(0)
                };
                let _ = head;
                for (l, &v) in lin.iter_mut().zip(&x[r * d..(r + 1) * d]) {
                    *l = s1 * v;
                }
            }
        }
        let total = self.total_order();
        if self.orders.is_empty() {
            return;
        }
        match &self.proj {
            Projections::Dense { signs } => {
                let mut p = vec![0f32; rows * total];
                let a = ndarray::ArrayView2::from_shape((rows, d), &x[..rows * d]).expect("shape");
                let b = ndarray::ArrayView2::from_shape((d, total), &signs[..]).expect("shape");
                let mut c = ndarray::ArrayViewMut2::from_shape((rows, total), &mut p[..]).expect("shape");
                ndarray::linalg::general_mat_mul(1.0, &a, &b, 0.0, &mut c);
                for r in 0..rows {
                    self.products(&p[r * total..(r + 1) * total], total, &mut out[r * dz + ex..(r + 1) * dz], |k| k);
                }
            }
            Projections::Hadamard { d_pad, zeta, perm } => {
                let (dp, t) = (*d_pad, zeta.len() / *d_pad);
                let mut slots = vec![0f32; t * dp];
                for r in 0..rows {
                    let xr = &x[r * d..(r + 1) * d];
                    for (ti, block) in slots.chunks_exact_mut(dp).enumerate() {
                        let z = &zeta[ti * dp..(ti + 1) * dp];
                        for j in 0..dp {
                            block[j] = if j < d { xr[j] * f32::from(z[j]) } else { 0.0 };
                        }
                        fwht(block);
                    }
                    self.products(&slots, total, &mut out[r * dz + ex..(r + 1) * dz], |k| perm[k] as usize);
                }
            }
        }
    }
}

/// Which dot-product kernel a Maclaurin map approximates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DotKind {
    /// `(γ⟨x,y⟩ + c)^p`.
    #[default]
    Polynomial,
    /// `exp(γ⟨x,y⟩)`.
    Exponential,
}

/// The kernel of `kind` with its parameters.
pub(crate) fn dot_kernel(kind: DotKind, degree: u32, gamma: f64, offset: f64) -> DotKernel {
    match kind {
        DotKind::Polynomial => DotKernel::Polynomial { degree, gamma, offset },
        DotKind::Exponential => DotKernel::Exponential { gamma },
    }
}

family_spec! {
    /// `kind = "random_maclaurin"`: a dot-product kernel by random Maclaurin features.
    pub struct RandomMaclaurinSpec {
        /// Polynomial or exponential.
        #[serde(default)]
        pub kernel: DotKind,
        /// Degree `p ≥ 1` (polynomial).
        #[serde(default = "defaults::degree")]
        pub degree: u32,
        /// Scale `γ > 0`.
        #[serde(default = "defaults::gamma")]
        pub gamma: f64,
        /// Offset `c ≥ 0` (polynomial).
        #[serde(default)]
        pub offset: f64,
        /// Output dimension `D`.
        #[serde(default = "defaults::dim")]
        pub dim: usize,
        /// Order base `η > 1`.
        #[serde(default = "defaults::eta")]
        pub eta: f64,
        /// Keep the constant and linear terms exact (where allowed).
        #[serde(default = "defaults::yes")]
        pub h01: bool,
        /// Hadamard-structured projections instead of dense Rademacher vectors.
        #[serde(default)]
        pub hadamard: bool,
    }
}

/// The bound of a random Maclaurin map's projections: dense ±1 signs held as f32 over
/// `d × Σ N_i`, the orders averaging at most 4 (the law `q(n) ∝ η^{−n}` at η ≥ 2, from
/// order 2 with H0/1); the Hadamard-structured projections hold `O(Σ N_i)` bytes.
pub(crate) fn rm_param_bytes(hadamard: bool, d: usize, dim: usize) -> u64 {
    let total = 4 * dim as u64;
    if hadamard {
        5 * total
    } else {
        4 * d as u64 * total
    }
}

impl RandomMaclaurinSpec {
    fn dot(&self) -> DotKernel {
        dot_kernel(self.kernel, self.degree, self.gamma, self.offset)
    }

    fn layout(&self, d: usize, dim: usize) -> Layout {
        Layout { kernel: self.dot(), d, dim, eta: self.eta, h01: self.h01, hadamard: self.hadamard }
    }
}

impl Family for RandomMaclaurinSpec {
    no_fitting!();

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        poly(self.degree, self.gamma, self.offset)?;
        eta(self.eta)?;
        dim("dim", self.dim, 1)
    }
    fn dense_param_bytes(&self, d: usize) -> u64 {
        rm_param_bytes(self.hadamard, d, self.dim)
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        RandomMaclaurinSpec { dim, ..self.clone() }
    }
    fn kernel(s: &Self) -> Kernel {
        Kernel::Dot(s.dot())
    }
    fn build(s: &Self, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        Box::new(RandomMaclaurin::draw(s.layout(d, s.dim), rng))
    }
    fn restore(s: &Self, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        Ok(Box::new(RandomMaclaurin::restore(s.layout(d, s.dim), p)?))
    }
}

impl RandomMaclaurin {
    /// Rebuilds a map from stored `orders` and `signs` (or `zeta` and `perm`).
    pub(crate) fn restore(layout: Layout, p: &Params) -> PResult<Self> {
        let Layout { kernel, d, dim, eta, h01, hadamard } = layout;
        let h01 = h01 && dim > d + 1 && kernel.coef(0) + kernel.coef(1) > 0.0;
        let n_rand = p.shape("orders")?.first().copied().unwrap_or(0);
        let orders = p.u32("orders", &[n_rand])?;
        let n_min = if h01 { 2 } else { 0 };
        if orders.iter().any(|&n| n < n_min || kernel.coef(n) <= 0.0) {
            return Err("orders outside the kernel's support".into());
        }
        let total: usize = orders.iter().map(|&n| n as usize).sum();
        let proj = if hadamard {
            let zs = p.shape("zeta")?;
            let d_pad = next_pow2(d);
            let t = zs.first().copied().unwrap_or(0);
            let zeta = p.i8("zeta", &[t, d_pad])?;
            let perm = p.u32("perm", &[t * d_pad])?;
            let mut seen = vec![false; t * d_pad];
            if t * d_pad < total
                || perm.iter().any(|&k| k as usize >= seen.len() || std::mem::replace(&mut seen[k as usize], true))
            {
                return Err("perm must be a permutation of the slots".into());
            }
            Projections::Hadamard { d_pad, zeta, perm }
        } else {
            Projections::Dense { signs: p.i8("signs", &[d, total])?.into_iter().map(f32::from).collect() }
        };
        Ok(RandomMaclaurin::from_parts(kernel, d, h01, orders, proj, eta))
    }
}

impl Sketch for RandomMaclaurin {
    fn params(&self) -> Vec<ParamArray> {
        let mut v = vec![ParamArray::u32("orders", vec![self.orders.len()], self.orders.clone())];
        match &self.proj {
            Projections::Dense { signs } => v.push(ParamArray::i8(
                "signs",
                vec![self.d, self.total_order()],
                signs.iter().map(|&s| if s > 0.0 { 1 } else { -1 }).collect(),
            )),
            Projections::Hadamard { d_pad, zeta, perm } => {
                v.push(ParamArray::i8("zeta", vec![zeta.len() / d_pad, *d_pad], zeta.clone()));
                v.push(ParamArray::u32("perm", vec![perm.len()], perm.clone()));
            }
        }
        v
    }
}
