//! Recursive tensor sketch (Ahle et al. 2020; math.md §8): a binary tree of degree-2
//! tensor-sketch nodes over `K = 2^⌈log₂ k⌉` count-sketched leaves, sketching a rank-one
//! tensor `u_0 ⊗ … ⊗ u_{k-1}` in time linear in `k`. Padded leaves hold `e_0`, whose
//! sketches are constants computed once.

use std::sync::Arc;

use realfft::num_complex::Complex32;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

use super::count::CountSketch;
use super::family::Family;
use super::keys::{defaults, even_dim, family_spec, no_fitting, poly, weight, Checked};
use super::params::{count_sketch_params, PResult, ParamArray, Params};
use super::{ChunkMap, DotKernel, Kernel, Sketch};
use crate::rng::StageRng;

/// The tree of one recursive tensor sketch `R^{n^k} → R^m`.
pub struct RecursiveTensorSketch {
    /// Leaf dimension `n`.
    pub n: usize,
    /// Degree `k`.
    pub k: usize,
    /// Output dimension `m`.
    pub m: usize,
    /// `K` leaf sketches `R^n → R^m`.
    pub leaves: Vec<CountSketch>,
    /// Nodes by level (`l = 1..q`), each `(C', C'')` acting on the left and right child.
    pub nodes: Vec<Vec<(CountSketch, CountSketch)>>,
    forward: Arc<dyn RealToComplex<f32>>,
    inverse: Arc<dyn ComplexToReal<f32>>,
}

impl std::fmt::Debug for RecursiveTensorSketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecursiveTensorSketch")
            .field("n", &self.n)
            .field("k", &self.k)
            .field("m", &self.m)
            .finish_non_exhaustive()
    }
}

/// Scratch for mapping one row (allocated once per chunk).
pub struct RtsScratch {
    level: Vec<Vec<f32>>,
    next: Vec<Vec<f32>>,
    a: Vec<f32>,
    b: Vec<f32>,
    fa: Vec<Complex32>,
    fb: Vec<Complex32>,
    fft: Vec<Complex32>,
}

impl RecursiveTensorSketch {
    /// Draws the leaves, then the nodes level by level.
    pub fn draw(n: usize, k: usize, m: usize, rng: &mut StageRng) -> Self {
        let big_k = k.max(1).next_power_of_two();
        let leaves = (0..big_k).map(|_| CountSketch::draw(n, m, rng)).collect();
        let mut nodes = Vec::new();
        let mut width = big_k;
        while width > 1 {
            width /= 2;
            nodes.push((0..width).map(|_| (CountSketch::draw(m, m, rng), CountSketch::draw(m, m, rng))).collect());
        }
        Self::from_parts(n, k, m, leaves, nodes)
    }

    /// Rebuilds from stored tables.
    pub fn from_parts(
        n: usize,
        k: usize,
        m: usize,
        leaves: Vec<CountSketch>,
        nodes: Vec<Vec<(CountSketch, CountSketch)>>,
    ) -> Self {
        let mut planner = RealFftPlanner::<f32>::new();
        RecursiveTensorSketch {
            n,
            k,
            m,
            leaves,
            nodes,
            forward: planner.plan_fft_forward(m),
            inverse: planner.plan_fft_inverse(m),
        }
    }

    /// Scratch for [`Self::sketch`].
    pub fn scratch(&self) -> RtsScratch {
        let (m, bins) = (self.m, self.m / 2 + 1);
        let len = self.forward.get_scratch_len().max(self.inverse.get_scratch_len());
        RtsScratch {
            level: vec![vec![0.0; m]; self.leaves.len()],
            next: vec![vec![0.0; m]; self.leaves.len()],
            a: vec![0.0; m],
            b: vec![0.0; m],
            fa: vec![Complex32::new(0.0, 0.0); bins],
            fb: vec![Complex32::new(0.0, 0.0); bins],
            fft: vec![Complex32::new(0.0, 0.0); len],
        }
    }

    /// `T(u_0, …, u_{k-1})` into `out` (length `m`); `inputs(i)` gives `u_i`, `i < k`.
    #[allow(clippy::expect_used)] // Invariant: every buffer is sized from the planned FFT length m, so the transform cannot fail.
    pub fn sketch<'a>(&self, inputs: impl Fn(usize) -> &'a [f32], s: &mut RtsScratch, out: &mut [f32]) {
        let m = self.m;
        for (i, leaf) in self.leaves.iter().enumerate() {
            let y = &mut s.level[i];
            if i < self.k {
                leaf.apply(inputs(i), 1.0, y);
            } else {
                y.fill(0.0);
                y[leaf.hash[0] as usize] = f32::from(leaf.sign[0]);
            }
        }
        let inv = 1.0 / m as f32;
        for level in &self.nodes {
            for (i, (c1, c2)) in level.iter().enumerate() {
                c1.apply(&s.level[2 * i], 1.0, &mut s.a);
                c2.apply(&s.level[2 * i + 1], 1.0, &mut s.b);
                self.forward.process_with_scratch(&mut s.a, &mut s.fa, &mut s.fft).expect("FFT lengths match the plan");
                self.forward.process_with_scratch(&mut s.b, &mut s.fb, &mut s.fft).expect("FFT lengths match the plan");
                for (p, q) in s.fa.iter_mut().zip(&s.fb) {
                    *p *= *q;
                }
                s.fa[0].im = 0.0;
                if m.is_multiple_of(2) {
                    let last = s.fa.len() - 1;
                    s.fa[last].im = 0.0;
                }
                let y = &mut s.next[i];
                self.inverse.process_with_scratch(&mut s.fa, y, &mut s.fft).expect("FFT lengths match the plan");
                y.iter_mut().for_each(|v| *v *= inv);
            }
            std::mem::swap(&mut s.level, &mut s.next);
        }
        out.copy_from_slice(&s.level[0]);
    }
}

/// The polynomial kernel `(γ⟨x,y⟩ + c)^p` by one recursive tensor sketch of `x'^{⊗p}`,
/// `x' = [√γ x; √c]`.
#[derive(Debug)]
pub struct RecursivePoly {
    /// The tree (`n = d'`, `k = p`).
    pub tree: RecursiveTensorSketch,
    /// Input dimension `d`.
    pub d: usize,
    /// `γ`.
    pub gamma: f64,
    /// `c`.
    pub offset: f64,
}

impl ChunkMap for RecursivePoly {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        self.tree.m
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, m) = (self.d, self.tree.m);
        let mut s = self.tree.scratch();
        let mut xp = vec![0f32; self.tree.n];
        let g = self.gamma.sqrt() as f32;
        for r in 0..rows {
            for (a, &b) in xp.iter_mut().zip(&x[r * d..(r + 1) * d]) {
                *a = g * b;
            }
            if self.offset > 0.0 {
                xp[d] = self.offset.sqrt() as f32;
            }
            let xr: &[f32] = &xp;
            self.tree.sketch(|_| xr, &mut s, &mut out[r * m..(r + 1) * m]);
        }
    }
}

family_spec! {
    /// `kind = "recursive_tensor_sketch"`: the polynomial kernel through the tree of degree-2 sketches.
    pub struct RecursiveSpec {
        /// Degree `p ≥ 1`.
        #[serde(default = "defaults::degree")]
        pub degree: u32,
        /// Scale `γ > 0`.
        #[serde(default = "defaults::gamma")]
        pub gamma: f64,
        /// Offset `c ≥ 0`.
        #[serde(default)]
        pub offset: f64,
        /// Output dimension `m` (even).
        #[serde(default = "defaults::dim")]
        pub dim: usize,
    }
}

impl Family for RecursiveSpec {
    no_fitting!();

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        poly(self.degree, self.gamma, self.offset)?;
        even_dim(self.dim)
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        RecursiveSpec { dim: dim + dim % 2, ..self.clone() }
    }
    fn kernel(s: &Self) -> Kernel {
        Kernel::Dot(DotKernel::Polynomial { degree: s.degree, gamma: s.gamma, offset: s.offset })
    }
    fn build(s: &Self, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        let n = d + usize::from(s.offset > 0.0);
        let tree = RecursiveTensorSketch::draw(n, s.degree as usize, s.dim, rng);
        Box::new(RecursivePoly { tree, d, gamma: s.gamma, offset: s.offset })
    }
    fn restore(s: &Self, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        let n = d + usize::from(s.offset > 0.0);
        let tree = tree_from(p, "", n, s.degree as usize, s.dim)?;
        Ok(Box::new(RecursivePoly { tree, d, gamma: s.gamma, offset: s.offset }))
    }
}

impl Sketch for RecursivePoly {
    fn params(&self) -> Vec<ParamArray> {
        // Node arrays are written even when empty (degree 1), as model files always had them.
        let t = &self.tree;
        let mut v = count_sketch_params("leaf_hash", "leaf_sign", &t.leaves);
        let nodes: Vec<CountSketch> = t.nodes.iter().flatten().flat_map(|(a, b)| [a.clone(), b.clone()]).collect();
        v.extend(count_sketch_params("node_hash", "node_sign", &nodes));
        v
    }
}

pub(crate) fn tree_params(prefix: &str, t: &RecursiveTensorSketch) -> Vec<ParamArray> {
    let mut v = count_sketch_params("leaf_hash", "leaf_sign", &t.leaves);
    let nodes: Vec<CountSketch> = t.nodes.iter().flatten().flat_map(|(a, b)| [a.clone(), b.clone()]).collect();
    if !nodes.is_empty() {
        v.extend(count_sketch_params("node_hash", "node_sign", &nodes));
    }
    v.into_iter().map(|p| p.prefixed(prefix)).collect()
}

#[allow(clippy::expect_used)] // Invariant: the tree consumes Σ⌊width/2⌋·2 ≤ 2(K−1) node sketches, and 2(K−1) were read above.
pub(crate) fn tree_from(p: &Params, prefix: &str, n: usize, k: usize, m: usize) -> PResult<RecursiveTensorSketch> {
    let sub = p.sub(prefix);
    let p = Params(&sub);
    let big_k = k.max(1).next_power_of_two();
    let leaves = p.count_sketches("leaf_hash", "leaf_sign", big_k, n, m)?;
    let mut nodes = Vec::new();
    if big_k > 1 {
        let mut flat = p.count_sketches("node_hash", "node_sign", 2 * (big_k - 1), m, m)?.into_iter();
        let mut width = big_k;
        while width > 1 {
            width /= 2;
            nodes.push((0..width).map(|_| (flat.next().expect("counted"), flat.next().expect("counted"))).collect());
        }
    }
    Ok(RecursiveTensorSketch::from_parts(n, k, m, leaves, nodes))
}
