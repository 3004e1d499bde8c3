//! The identity map `z(x) = x`: the linear kernel, the baseline every sketch is
//! compared against.

use super::FeatureMap;

/// `z(x) = x`.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// Input (and output) dimension.
    pub d: usize,
}

impl FeatureMap for Identity {
    fn input_dim(&self) -> usize {
        self.d
    }
    fn output_dim(&self) -> usize {
        self.d
    }
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        out[..rows * self.d].copy_from_slice(&x[..rows * self.d]);
    }
}
