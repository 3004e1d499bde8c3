//! The identity map `z(x) = x`: the linear kernel, the baseline every sketch is
//! compared against.

use serde::{Deserialize, Serialize};

use super::down::DownKind;
use super::family::{defaults, weight, Checked, Family};
use super::params::{PResult, ParamArray, Params};
use super::{DotKernel, FeatureMap, Kernel, Normalize, Sketch};
use crate::rng::StageRng;

/// `kind = "identity"`: the linear kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitySpec {
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight `w` of the stage in a concatenation (its kernel is weighted by `w²`).
    #[serde(default = "defaults::weight")]
    pub weight: f64,
    /// Down-projection after the map, `"srht"` or `"gaussian"` (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<DownKind>,
    /// Output dimension of the down-projection.
    #[serde(default, skip_serializing_if = "defaults::is_zero")]
    pub down_dim: usize,
}

impl Family for IdentitySpec {
    type Fitted = IdentitySpec;

    fn common(&self) -> (Normalize, f64) {
        (self.normalize, self.weight)
    }
    fn check(&self, _d: Option<usize>) -> Checked {
        weight(self.weight)
    }
    fn fitted(&self) -> Option<Self> {
        Some(self.clone())
    }
    fn fit(&self, _sample: &super::Sample) -> Self {
        self.clone()
    }
    fn settled(fitted: &Self) -> Self {
        fitted.clone()
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

impl Sketch for Identity {
    fn params(&self) -> Vec<ParamArray> {
        Vec::new()
    }
}
