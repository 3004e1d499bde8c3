//! The oblivious linear down-projection after a stage's map (`down`, `down_dim` on any
//! stage; math.md §5–6): an SRHT or a dense Gaussian map from the stage's output to
//! `down_dim` features. Both are unbiased for inner products, so the composed stage
//! still estimates the stage's kernel, with the down-projection's variance added
//! (`kernel-error` reports how much).

use super::hadamard::{next_pow2, GaussianProjection, Srht};
use super::keys::{DownKind, KeyError};
use super::params::{PResult, ParamArray, Params};
use super::{ChunkMap, Sketch};
use crate::rng::StageRng;

impl DownKind {
    /// Draws the projection from `d_in` to `e` (an SRHT to at most the next power of two).
    pub fn draw(self, d_in: usize, e: usize, rng: &mut StageRng) -> Box<dyn Sketch> {
        match self {
            DownKind::Srht => Box::new(Srht::draw(d_in, e.min(next_pow2(d_in)), rng)),
            DownKind::Gaussian => Box::new(GaussianProjection::draw(d_in, e, rng)),
        }
    }

    /// Rebuilds the projection from `d_in` to `e` from its stored arrays.
    pub(crate) fn restore(self, d_in: usize, e: usize, p: &Params) -> PResult<Box<dyn Sketch>> {
        Ok(match self {
            DownKind::Srht => {
                let rows = p.shape("rows")?.first().copied().unwrap_or(0);
                let srht = Srht { d_in, zeta: p.i8("zeta", &[next_pow2(d_in)])?, rows: p.u32("rows", &[rows])? };
                srht.validate().map_err(|e| e.to_string())?;
                Box::new(srht)
            }
            DownKind::Gaussian => Box::new(GaussianProjection { at: p.f32("matrix", &[d_in, e])?, d_in, e }),
        })
    }
}

/// A stage's map followed by its down-projection.
#[derive(Debug)]
pub struct Downed {
    /// The stage's own map.
    pub inner: Box<dyn Sketch>,
    /// The projection of its output.
    pub proj: Box<dyn Sketch>,
}

impl ChunkMap for Downed {
    fn input_dim(&self) -> usize {
        self.inner.input_dim()
    }
    fn output_dim(&self) -> usize {
        self.proj.output_dim()
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        // A block of rows at a time keeps the stage's full-width buffer small.
        const BLOCK: usize = 256;
        let (d, di, e) = (self.inner.input_dim(), self.inner.output_dim(), self.proj.output_dim());
        let mut buf = vec![0f32; BLOCK.min(rows) * di];
        for start in (0..rows).step_by(BLOCK) {
            let n = BLOCK.min(rows - start);
            self.inner.map(&x[start * d..(start + n) * d], n, &mut buf[..n * di]);
            self.proj.map(&buf[..n * di], n, &mut out[start * e..(start + n) * e]);
        }
    }
}

/// The stage's arrays as they were, and the projection's under `down_`.
impl Sketch for Downed {
    fn params(&self) -> Vec<ParamArray> {
        let mut v = self.inner.params();
        v.extend(self.proj.params().into_iter().map(|p| p.prefixed("down_")));
        v
    }
}

/// `map`, followed by the down-projection `down` asks for (drawn next from `rng`).
pub(crate) fn then_draw(
    map: Box<dyn Sketch>,
    down: (Option<DownKind>, usize),
    rng: &mut StageRng,
) -> Result<Box<dyn Sketch>, KeyError> {
    let (Some(kind), e) = down else { return Ok(map) };
    let di = map.output_dim();
    if e >= di {
        return Err(KeyError {
            key: "down_dim",
            message: format!("must be below the stage's own output dimension {di}, got {e}"),
        });
    }
    Ok(Box::new(Downed { proj: kind.draw(di, e, rng), inner: map }))
}

/// `map`, followed by the down-projection restored from the arrays `down_…`.
pub(crate) fn then_restore(
    map: Box<dyn Sketch>,
    down: (Option<DownKind>, usize),
    p: &Params,
) -> PResult<Box<dyn Sketch>> {
    let (Some(kind), e) = down else { return Ok(map) };
    let di = map.output_dim();
    if e >= di {
        return Err(format!("down_dim {e} is not below the stage's output dimension {di}"));
    }
    let proj = kind.restore(di, e, &Params(&p.sub("down_")))?;
    Ok(Box::new(Downed { inner: map, proj }))
}
