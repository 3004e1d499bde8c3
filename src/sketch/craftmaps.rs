//! CRAFTMaps (Hamid, Xiao, Gittens & DeCoste 2014; math.md §6): up-project
//! nonlinearly to a large `D` (random Maclaurin, dense or Hadamard-structured, or a
//! tensor sketch), then down-project linearly to `E < D` with an SRHT (or a dense
//! Gaussian map, the reference). Unbiased, since the down-projection is linear and
//! unbiased.

use serde::{Deserialize, Serialize};

use super::family::Family;
use super::keys::{defaults, dim, eta, fail, family_spec, no_fitting, poly, weight, Checked, DownKind};
use super::maclaurin::{dot_kernel, DotKernel, DotKind, Layout, RandomMaclaurin};
use super::params::{PResult, ParamArray, Params};
use super::tensor::{PolyKernel, TensorSketch};
use super::{ChunkMap, Kernel, Sketch};
use crate::rng::StageRng;

/// An up-projection followed by a down-projection.
#[derive(Debug)]
pub struct Craftmaps {
    /// `z_up`.
    pub up: Box<dyn super::Sketch>,
    /// `G`.
    pub down: Box<dyn super::Sketch>,
}

impl ChunkMap for Craftmaps {
    fn input_dim(&self) -> usize {
        self.up.input_dim()
    }
    fn output_dim(&self) -> usize {
        self.down.output_dim()
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        // Up-project a block of rows at a time so the D-dimensional buffer stays small.
        const BLOCK: usize = 256;
        let (d, du, e) = (self.up.input_dim(), self.up.output_dim(), self.down.output_dim());
        let mut buf = vec![0f32; BLOCK.min(rows) * du];
        for start in (0..rows).step_by(BLOCK) {
            let n = BLOCK.min(rows - start);
            self.up.map(&x[start * d..(start + n) * d], n, &mut buf[..n * du]);
            self.down.map(&buf[..n * du], n, &mut out[start * e..(start + n) * e]);
        }
    }
}

/// The up-projection of CRAFTMaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpKind {
    /// Random Maclaurin with H0/1.
    #[default]
    RandomMaclaurin,
    /// Tensor sketch (polynomial kernel only).
    TensorSketch,
}

family_spec! {
    no_down;
    /// `kind = "craftmaps"`: up-project to `up_dim`, down-project to `dim`.
    pub struct CraftmapsSpec {
        /// Up-projection family.
        #[serde(default)]
        pub up: UpKind,
        /// Down-projection.
        #[serde(default)]
        pub down: DownKind,
        /// Kernel (random Maclaurin up-projection).
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
        /// Output dimension `E`.
        #[serde(default = "defaults::dim")]
        pub dim: usize,
        /// Up-projection dimension `D > E` (0: `8E`).
        #[serde(default)]
        pub up_dim: usize,
        /// Order base `η > 1` (random Maclaurin).
        #[serde(default = "defaults::eta")]
        pub eta: f64,
        /// H0/1 (random Maclaurin).
        #[serde(default = "defaults::yes")]
        pub h01: bool,
        /// Hadamard-structured random Maclaurin up-projection.
        #[serde(default)]
        pub hadamard: bool,
    }
}

impl CraftmapsSpec {
    /// `D`, the up-projection dimension.
    pub fn up_dim(&self) -> usize {
        if self.up_dim == 0 {
            8 * self.dim
        } else {
            self.up_dim
        }
    }

    fn dot(&self) -> DotKernel {
        dot_kernel(self.kernel, self.degree, self.gamma, self.offset)
    }

    /// The up-projection's random Maclaurin layout for inputs of width `d`.
    fn layout(&self, d: usize) -> Layout {
        Layout { kernel: self.dot(), d, dim: self.up_dim(), eta: self.eta, h01: self.h01, hadamard: self.hadamard }
    }

    fn poly(&self) -> PolyKernel {
        PolyKernel { degree: self.degree, gamma: self.gamma, offset: self.offset }
    }
}

impl Family for CraftmapsSpec {
    no_fitting!();

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)?;
        poly(self.degree, self.gamma, self.offset)?;
        eta(self.eta)?;
        dim("dim", self.dim, 1)?;
        dim("up_dim", self.up_dim(), 2)?;
        if self.dim >= self.up_dim() {
            return fail("dim", format!("E = {} must be below up_dim D = {}", self.dim, self.up_dim()));
        }
        if self.up == UpKind::TensorSketch && self.kernel != DotKind::Polynomial {
            return fail("kernel", "a tensor-sketch up-projection needs kernel = \"polynomial\"");
        }
        if self.up == UpKind::TensorSketch && self.hadamard {
            return fail("hadamard", "the Hadamard-structured up-projection is for random_maclaurin");
        }
        Ok(())
    }
    fn dense_param_bytes(&self, d: usize) -> u64 {
        let up = match self.up {
            UpKind::RandomMaclaurin => super::maclaurin::rm_param_bytes(self.hadamard, d, self.up_dim()),
            UpKind::TensorSketch => 0,
        };
        // A Gaussian down-projection is an up_dim × D f32 matrix; the SRHT holds O(up_dim).
        let down = if self.down == DownKind::Gaussian { 4 * (self.up_dim() * self.dim) as u64 } else { 0 };
        up + down
    }
    fn dim(&self) -> Option<usize> {
        Some(self.dim)
    }
    fn with_dim(&self, dim: usize) -> Self {
        let ratio = self.up_dim() / self.dim.max(1);
        CraftmapsSpec { dim, up_dim: ratio.max(2) * dim, ..self.clone() }
    }
    fn kernel(s: &Self) -> Kernel {
        Kernel::Dot(s.dot())
    }

    /// The up-projection, then the down-projection from its output.
    fn build(s: &Self, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        let up: Box<dyn Sketch> = match s.up {
            UpKind::RandomMaclaurin => Box::new(RandomMaclaurin::draw(s.layout(d), rng)),
            UpKind::TensorSketch => Box::new(TensorSketch::draw(s.poly(), d, s.up_dim(), rng)),
        };
        let down = s.down.draw(up.output_dim(), s.dim, rng);
        Box::new(Craftmaps { up, down })
    }

    /// From the arrays `up_…` and `down_…`.
    fn restore(s: &Self, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        let up_p = p.sub("up_");
        let up_params = Params(&up_p);
        let up: Box<dyn Sketch> = match s.up {
            UpKind::RandomMaclaurin => Box::new(RandomMaclaurin::restore(s.layout(d), &up_params)?),
            UpKind::TensorSketch => Box::new(TensorSketch::restore(s.poly(), d, s.up_dim(), &up_params, "")?),
        };
        let down_p = p.sub("down_");
        let down = s.down.restore(up.output_dim(), s.dim, &Params(&down_p))?;
        Ok(Box::new(Craftmaps { up, down }))
    }
}

impl Sketch for Craftmaps {
    fn params(&self) -> Vec<ParamArray> {
        let mut v: Vec<ParamArray> = self.up.params().into_iter().map(|p| p.prefixed("up_")).collect();
        v.extend(self.down.params().into_iter().map(|p| p.prefixed("down_")));
        v
    }
}
