//! CRAFTMaps (Hamid, Xiao, Gittens & DeCoste 2014; math.md §6): up-project
//! nonlinearly to a large `D` (random Maclaurin, dense or Hadamard-structured, or a
//! tensor sketch), then down-project linearly to `E < D` with an SRHT (or a dense
//! Gaussian map, the reference). Unbiased, since the down-projection is linear and
//! unbiased.

use super::hadamard::{next_pow2, GaussianProjection, Srht};
use super::maclaurin::RandomMaclaurin;
use super::tensor::{PolyKernel, TensorSketch};
use super::{
    dot_kernel, maclaurin_from, tensor_sketch, CraftmapsSpec, DownKind, FeatureMap, PResult, Params, Sketch, UpKind,
};
use crate::rng::StageRng;

/// An up-projection followed by a down-projection.
#[derive(Debug)]
pub struct Craftmaps {
    /// `z_up`.
    pub up: Box<dyn super::Sketch>,
    /// `G`.
    pub down: Box<dyn super::Sketch>,
}

impl FeatureMap for Craftmaps {
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

/// Draws the maps of a CRAFTMaps stage for inputs of dimension `d`: the up-projection,
/// then the down-projection from its output (an SRHT to at most the next power of two).
pub(crate) fn build(s: &CraftmapsSpec, d: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
    let up: Box<dyn Sketch> = match s.up {
        UpKind::RandomMaclaurin => Box::new(RandomMaclaurin::draw(
            dot_kernel(s.kernel, s.degree, s.gamma, s.offset),
            d,
            s.up_dim(),
            s.eta,
            s.h01,
            s.hadamard,
            rng,
        )),
        UpKind::TensorSketch => Box::new(tensor_sketch(s.degree, s.gamma, s.offset, d, s.up_dim(), rng)),
    };
    let du = up.output_dim();
    let e = s.dim.min(next_pow2(du));
    let down: Box<dyn Sketch> = match s.down {
        DownKind::Srht => Box::new(Srht::draw(du, e, rng)),
        DownKind::Gaussian => Box::new(GaussianProjection::draw(du, s.dim, rng)),
    };
    Box::new(Craftmaps { up, down })
}

/// Rebuilds a CRAFTMaps stage from a model's arrays (`up_…` and `down_…`).
pub(crate) fn restore(s: &CraftmapsSpec, d: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
    let up_p = p.sub("up_");
    let up_params = Params(&up_p);
    let up: Box<dyn Sketch> = match s.up {
        UpKind::RandomMaclaurin => Box::new(maclaurin_from(
            dot_kernel(s.kernel, s.degree, s.gamma, s.offset),
            d,
            s.up_dim(),
            s.eta,
            s.h01,
            s.hadamard,
            &up_params,
        )?),
        UpKind::TensorSketch => {
            let dp = d + usize::from(s.offset > 0.0);
            let sketches = up_params.count_sketches("hash", "sign", s.degree as usize, dp, s.up_dim())?;
            Box::new(TensorSketch::from_sketches(
                PolyKernel { degree: s.degree, gamma: s.gamma, offset: s.offset },
                d,
                s.up_dim(),
                sketches,
            ))
        }
    };
    let du = up.output_dim();
    let down_p = p.sub("down_");
    let dp = Params(&down_p);
    let down: Box<dyn Sketch> = match s.down {
        DownKind::Srht => {
            let e = dp.shape("rows")?.first().copied().unwrap_or(0);
            let srht = Srht { d_in: du, zeta: dp.i8("zeta", &[next_pow2(du)])?, rows: dp.u32("rows", &[e])? };
            srht.validate().map_err(|e| e.to_string())?;
            Box::new(srht)
        }
        DownKind::Gaussian => Box::new(GaussianProjection { at: dp.f32("matrix", &[du, s.dim])?, d_in: du, e: s.dim }),
    };
    Ok(Box::new(Craftmaps { up, down }))
}
