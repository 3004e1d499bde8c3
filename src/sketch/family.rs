//! What a sketch family is: the [`Family`] trait each family file implements and the
//! pre-pass [`Sample`] its data-dependent parameters are fitted on. The key checks the
//! families share live in `keys`, a leaf below every family file.
//!
//! A family goes through three forms, as in linfa's params → checked params → fitted
//! model: its parameters as parsed (the spec struct, which is also what pipeline files and
//! model headers hold), the same parameters checked against every rule and the input
//! width ([`Family::check`]), and the fitted parameters ([`Family::Fitted`], with no value
//! left to fill in) that [`Family::build`] draws a map from and [`Family::restore`]
//! rebuilds a stored map from.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::keys::{Checked, Normalize};
use super::params::{PResult, Params};
use super::{Kernel, Sketch, StageSpec};
use crate::rng::StageRng;

/// One sketch family: a spec struct that implements this trait, one line in the
/// registry (`families!` in `sketch/mod.rs`), and nothing else.
pub(crate) trait Family:
    Clone + Debug + PartialEq + Default + Serialize + DeserializeOwned + Into<StageSpec>
{
    /// The parameters with every data-dependent value settled.
    type Fitted;

    /// True when the stage's inputs must be non-negative (the χ² family).
    const NONNEGATIVE: bool = false;

    /// True when the fit leaves arrays (Nyström's landmarks) that only the built map and
    /// a model's arrays hold: such a stage cannot be redrawn from its spec and seed.
    const ARRAY_FITTED: bool = false;

    /// An upper bound on the bytes of the random parameters that grow as `d × D` (dense
    /// projections), for inputs of width `d`: what the run states and checks before it
    /// draws the map. Count-sketch families hold `O(d)` and count 0.
    fn dense_param_bytes(&self, _d: usize) -> u64 {
        0
    }

    /// The stage's largest allocation while its map is built, in place of
    /// [`Family::dense_param_bytes`] (Nyström's f64 landmark kernel and its factor).
    fn build_peak_bytes(&self, d: usize) -> u64 {
        self.dense_param_bytes(d)
    }

    /// Checks every key; with the input width `d` known, also the keys sized by it.
    fn check(&self, d: Option<usize>) -> Checked;

    /// The fitted parameters, or `None` while some are still to be fitted.
    fn fitted(&self) -> Option<Self::Fitted>;

    /// The fitted parameters a stored map is rebuilt with ([`Family::restore`]) and its
    /// kernel read from: [`Family::fitted`], except where the fit's arrays live in the
    /// model rather than in the spec.
    fn stored(&self) -> Option<Self::Fitted> {
        self.fitted()
    }

    /// The sample rows the fit needs at least (Nyström: one per landmark).
    fn sample_rows(&self) -> usize {
        0
    }

    /// Fits the missing parameters on the pre-pass sample (called only when
    /// [`Family::fitted`] is `None`, with at least [`Family::sample_rows`] rows).
    fn fit(&self, sample: &Sample) -> Self::Fitted;

    /// The spec a model header stores for fitted parameters.
    fn settled(fitted: &Self::Fitted) -> Self;

    /// The output dimension asked for (`None`: the input width).
    fn dim(&self) -> Option<usize>;

    /// The same stage at output dimension `dim` (for error-versus-dimension sweeps).
    fn with_dim(&self, dim: usize) -> Self;

    /// The exact kernel the stage approximates on its normalised input.
    fn kernel(fitted: &Self::Fitted) -> Kernel;

    /// Draws the map for inputs of dimension `d`.
    fn build(fitted: &Self::Fitted, d: usize, rng: &mut StageRng) -> Box<dyn Sketch>;

    /// Rebuilds the map from a model's arrays, checking every shape and range.
    fn restore(fitted: &Self::Fitted, d: usize, params: &Params) -> PResult<Box<dyn Sketch>>;
}

/// The pre-pass sample as one stage sees it: its rows normalised by the stage, and up to
/// 1000 random row pairs drawn from the stage's own stream.
#[derive(Debug)]
pub(crate) struct Sample {
    /// Rows, `n × d`, normalised.
    pub x: Vec<f32>,
    /// Row count.
    pub n: usize,
    /// Input width.
    pub d: usize,
    /// Distinct row pairs.
    pub pairs: Vec<(usize, usize)>,
    /// The stream `(seed, 2^32 + index)` the pairs came from, for further draws.
    stream: (u64, u64),
}

impl Sample {
    /// The sample `x` (`n × d` raw rows) as stage `index` of a run seeded `seed` sees it.
    pub fn new(x: &[f32], d: usize, normalize: Normalize, seed: u64, index: usize) -> Sample {
        let mut xn = x.to_vec();
        normalize.apply(&mut xn, d);
        let n = xn.len().checked_div(d).unwrap_or(0);
        let stream = (seed, (1u64 << 32) + index as u64);
        let mut rng = StageRng::new(stream.0, stream.1);
        let pairs = if n < 2 {
            Vec::new()
        } else {
            (0..1000.min(n * (n - 1) / 2))
                .map(|_| {
                    let a = rng.below(n as u32) as usize;
                    let mut b = rng.below(n as u32 - 1) as usize;
                    if b >= a {
                        b += 1;
                    }
                    (a, b)
                })
                .collect()
        };
        Sample { x: xn, n, d, pairs, stream }
    }

    /// `m` distinct row indices, uniformly (a partial Fisher–Yates shuffle on the stream
    /// after the pairs'), in increasing order; every row when `m ≥ n`.
    pub fn draw_rows(&self, m: usize) -> Vec<usize> {
        let mut rng = StageRng::new(self.stream.0, self.stream.1 ^ (1u64 << 48));
        let mut idx: Vec<usize> = (0..self.n).collect();
        let m = m.min(self.n);
        for k in 0..m {
            let j = k + rng.below((self.n - k) as u32) as usize;
            idx.swap(k, j);
        }
        idx.truncate(m);
        idx.sort_unstable();
        idx
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.x[i * self.d..(i + 1) * self.d]
    }

    /// The median non-zero pair distance, L2 or L1 (1 when every pair coincides).
    pub fn median_distance(&self, l1: bool) -> f64 {
        let mut dist: Vec<f64> = self
            .pairs
            .iter()
            .map(|&(a, b)| {
                let it = self.row(a).iter().zip(self.row(b)).map(|(&p, &q)| f64::from(p) - f64::from(q));
                if l1 {
                    it.map(f64::abs).sum::<f64>()
                } else {
                    it.map(|v| v * v).sum::<f64>().sqrt()
                }
            })
            .filter(|&v| v > 0.0)
            .collect();
        dist.sort_by(f64::total_cmp);
        dist.get(dist.len() / 2).copied().unwrap_or(1.0)
    }

    /// The mean of `f` over the pairs (0 without pairs).
    pub fn pair_mean(&self, f: impl Fn(&[f32], &[f32]) -> f64) -> f64 {
        self.pairs.iter().map(|&(a, b)| f(self.row(a), self.row(b))).sum::<f64>() / self.pairs.len().max(1) as f64
    }
}
