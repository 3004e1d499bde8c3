//! The identity map `z(x) = x`: the linear kernel, the baseline every sketch is
//! compared against.

use super::family::Family;
use super::keys::{family_spec, no_fitting, weight, Checked};
use super::params::{PResult, ParamArray, Params};
use super::{ChunkMap, DotKernel, Kernel, Sketch};
use crate::rng::StageRng;

family_spec! {
    /// `kind = "identity"`: the linear kernel.
    pub struct IdentitySpec {

    }
}

impl Family for IdentitySpec {
    no_fitting!();

    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)
    }
    fn dim(&self) -> Option<usize> {
        None
    }
    fn with_dim(&self, _dim: usize) -> Self {
        self.clone()
    }
    fn kernel(_: &Self) -> Kernel {
        Kernel::Dot(DotKernel::Polynomial { degree: 1, gamma: 1.0, offset: 0.0 })
    }
    fn build(_: &Self, d: usize, _rng: &mut StageRng) -> Box<dyn Sketch> {
        Box::new(Identity { d })
    }
    fn restore(_: &Self, d: usize, _params: &Params) -> PResult<Box<dyn Sketch>> {
        Ok(Box::new(Identity { d }))
    }
}

/// `z(x) = x`.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// Input (and output) dimension.
    pub d: usize,
}

impl ChunkMap for Identity {
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

impl Sketch for Identity {
    fn params(&self) -> Vec<ParamArray> {
        Vec::new()
    }
}
