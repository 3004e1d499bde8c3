//! CRAFTMaps (Hamid, Xiao, Gittens & DeCoste 2014; math.md §6): up-project
//! nonlinearly to a large `D` (random Maclaurin, dense or Hadamard-structured, or a
//! tensor sketch), then down-project linearly to `E < D` with an SRHT (or a dense
//! Gaussian map, the reference). Unbiased, since the down-projection is linear and
//! unbiased.

use super::FeatureMap;

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
