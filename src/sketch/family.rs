//! What a sketch family is: the [`Family`] trait each family file implements, the
//! pre-pass [`Sample`] its data-dependent parameters are fitted on, and the key checks
//! the families share.
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

use super::down::DownKind;
use super::params::{PResult, Params};
use super::rff::RffVariant;
use super::stage::Normalize;
use super::{Kernel, Sketch, StageSpec, MAX_DIM, MAX_TRUNCATION};
use crate::rng::StageRng;

/// A key that broke its rule, and the rule.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyError {
    /// The key, relative to the stage's table (`dim`, `center`, …).
    pub key: &'static str,
    /// What is wrong and what is allowed.
    pub message: String,
}

/// The outcome of a family's check.
pub type Checked = std::result::Result<(), KeyError>;

/// One sketch family: a spec struct that implements this trait, one line in the
/// registry (`families!` in `sketch/mod.rs`), and nothing else.
pub(crate) trait Family:
    Clone + Debug + PartialEq + Default + Serialize + DeserializeOwned + Into<StageSpec>
{
    /// The parameters with every data-dependent value settled.
    type Fitted;

    /// True when the stage's inputs must be non-negative (the χ² family).
    const NONNEGATIVE: bool = false;

    /// Checks every key; with the input width `d` known, also the keys sized by it.
    fn check(&self, d: Option<usize>) -> Checked;

    /// The fitted parameters, or `None` while some are still to be fitted.
    fn fitted(&self) -> Option<Self::Fitted>;

    /// Fits the missing parameters on the pre-pass sample (called only when
    /// [`Family::fitted`] is `None`).
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
}

impl Sample {
    /// The sample `x` (`n × d` raw rows) as stage `index` of a run seeded `seed` sees it.
    pub fn new(x: &[f32], d: usize, normalize: Normalize, seed: u64, index: usize) -> Sample {
        let mut xn = x.to_vec();
        normalize.apply(&mut xn, d);
        let n = xn.len().checked_div(d).unwrap_or(0);
        let mut rng = StageRng::new(seed, (1u64 << 32) + index as u64);
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
        Sample { x: xn, n, d, pairs }
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

/// A failed check of `key`.
pub(crate) fn fail(key: &'static str, message: impl Into<String>) -> Checked {
    Err(KeyError { key, message: message.into() })
}

/// The weight every stage has.
pub(crate) fn weight(w: f64) -> Checked {
    if !(w.is_finite() && w > 0.0) {
        return fail("weight", format!("must be a positive number, got {w}"));
    }
    Ok(())
}

/// Degree, scale and offset of a polynomial kernel.
pub(crate) fn poly(degree: u32, gamma: f64, offset: f64) -> Checked {
    if degree == 0 || degree > 16 {
        return fail("degree", format!("must be an integer from 1 to 16, got {degree}"));
    }
    if !(gamma.is_finite() && gamma > 0.0) {
        return fail("gamma", format!("must be a positive number, got {gamma}"));
    }
    if !(offset.is_finite() && offset >= 0.0) {
        return fail("offset", format!("must be a number ≥ 0, got {offset}"));
    }
    Ok(())
}

/// An output dimension from `min` to [`MAX_DIM`].
pub(crate) fn dim(key: &'static str, v: usize, min: usize) -> Checked {
    if v < min || v > MAX_DIM {
        return fail(key, format!("must be from {min} to {MAX_DIM}, got {v}"));
    }
    Ok(())
}

/// An even output dimension from 2 to [`MAX_DIM`].
pub(crate) fn even_dim(v: usize) -> Checked {
    dim("dim", v, 2)?;
    if !v.is_multiple_of(2) {
        return fail("dim", format!("must be even, got {v}"));
    }
    Ok(())
}

/// The order base of random Maclaurin.
pub(crate) fn eta(v: f64) -> Checked {
    if !(v.is_finite() && v > 1.0) {
        return fail("eta", format!("must be a number > 1, got {v}"));
    }
    Ok(())
}

/// An optional positive number.
pub(crate) fn positive_opt(key: &'static str, v: Option<f64>) -> Checked {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => fail(key, format!("must be a positive number, got {x}")),
        _ => Ok(()),
    }
}

/// The output dimension of an RFF layout.
pub(crate) fn rff_dim(variant: RffVariant, v: usize) -> Checked {
    if !(1..=MAX_DIM).contains(&v) {
        return fail("dim", format!("must be from 2 to {MAX_DIM}, got {v}"));
    }
    if variant == RffVariant::CosSin && (v < 2 || v % 2 == 1) {
        return fail("dim", format!("must be even and ≥ 2 for variant = \"cos_sin\", got {v}"));
    }
    Ok(())
}

/// The terms, given `k`'s and fit bins of a χ² series.
pub(crate) fn chi2_terms(terms: usize, k: &[f64], bins: usize, max: usize) -> Checked {
    if terms == 0 || terms > max {
        return fail("terms", format!("must be from 1 to {max}, got {terms}"));
    }
    if !k.is_empty() && k.len() != terms {
        return fail("k", format!("has {} values but terms = {terms}", k.len()));
    }
    if k.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return fail("k", "every k must be a positive number");
    }
    if !(2..=100_000).contains(&bins) {
        return fail("bins", format!("must be from 2 to 100000, got {bins}"));
    }
    Ok(())
}

/// σ, truncation and centre of the Gaussian sketches.
pub(crate) fn gaussian(sigma: Option<f64>, truncation: Option<usize>, center: &[f64], d: Option<usize>) -> Checked {
    positive_opt("sigma", sigma)?;
    if let Some(t) = truncation {
        if t == 0 || t > MAX_TRUNCATION {
            return fail("truncation", format!("must be from 1 to {MAX_TRUNCATION}, got {t}"));
        }
    }
    if center.iter().any(|c| !c.is_finite()) {
        return fail("center", "every entry must be a finite number");
    }
    match d {
        Some(d) if !center.is_empty() && center.len() != d => fail(
            "center",
            format!("has {} entries for d = {d} input columns; give one per column or omit it", center.len()),
        ),
        _ => Ok(()),
    }
}

/// The pipeline file's defaults, shared by the families' spec structs.
pub(crate) mod defaults {
    pub(crate) fn weight() -> f64 {
        1.0
    }
    pub(crate) fn degree() -> u32 {
        2
    }
    pub(crate) fn gamma() -> f64 {
        1.0
    }
    pub(crate) fn dim() -> usize {
        4096
    }
    pub(crate) fn eta() -> f64 {
        2.0
    }
    pub(crate) fn yes() -> bool {
        true
    }
    pub(crate) fn terms() -> usize {
        10
    }
    pub(crate) fn cheb_terms() -> usize {
        40
    }
    pub(crate) fn bins() -> usize {
        200
    }
    pub(crate) fn is_zero(v: &usize) -> bool {
        *v == 0
    }
}

/// The keys every stage has: `normalize`, `weight` and (all but CRAFTMaps, which has
/// its own) `down` and `down_dim`. [`family_spec!`] implements it.
pub(crate) trait CommonKeys: Sized {
    /// Input normalisation and weight.
    fn common(&self) -> (Normalize, f64);
    /// `down` and `down_dim` as given.
    fn down_keys(&self) -> (Option<DownKind>, usize);
    /// The same stage with `down` and `down_dim` replaced (CRAFTMaps: unchanged).
    fn with_down(&self, down: Option<DownKind>, down_dim: usize) -> Self;
}

/// Declares a family's spec struct (the derives, `deny_unknown_fields`) with the keys
/// every stage has appended after its own, and implements [`CommonKeys`] for it;
/// `no_down;` leaves out `down` and `down_dim`.
macro_rules! family_spec {
    (no_down; $(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
            /// Input row normalisation.
            #[serde(default)]
            pub normalize: $crate::sketch::Normalize,
            /// Weight `w` of the stage in a concatenation (its kernel counts `w²`).
            #[serde(default = "crate::sketch::family::defaults::weight")]
            pub weight: f64,
        }

        impl $crate::sketch::family::CommonKeys for $name {
            fn common(&self) -> ($crate::sketch::Normalize, f64) {
                (self.normalize, self.weight)
            }
            fn down_keys(&self) -> (Option<$crate::sketch::DownKind>, usize) {
                (None, 0)
            }
            fn with_down(&self, _down: Option<$crate::sketch::DownKind>, _down_dim: usize) -> Self {
                self.clone()
            }
        }
    };
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
            /// Input row normalisation.
            #[serde(default)]
            pub normalize: $crate::sketch::Normalize,
            /// Weight `w` of the stage in a concatenation (its kernel counts `w²`).
            #[serde(default = "crate::sketch::family::defaults::weight")]
            pub weight: f64,
            /// Down-projection after the map, `"srht"` or `"gaussian"` (none by default).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub down: Option<$crate::sketch::DownKind>,
            /// Output dimension of the down-projection.
            #[serde(default, skip_serializing_if = "crate::sketch::family::defaults::is_zero")]
            pub down_dim: usize,
        }

        impl $crate::sketch::family::CommonKeys for $name {
            fn common(&self) -> ($crate::sketch::Normalize, f64) {
                (self.normalize, self.weight)
            }
            fn down_keys(&self) -> (Option<$crate::sketch::DownKind>, usize) {
                (self.down, self.down_dim)
            }
            fn with_down(&self, down: Option<$crate::sketch::DownKind>, down_dim: usize) -> Self {
                Self { down, down_dim, ..self.clone() }
            }
        }
    };
}
pub(crate) use family_spec;

/// The [`Family`] items of a family with no data-dependent parameter: it is its own
/// fitted form.
macro_rules! no_fitting {
    () => {
        type Fitted = Self;

        fn fitted(&self) -> Option<Self> {
            Some(self.clone())
        }
        fn fit(&self, _sample: &$crate::sketch::Sample) -> Self {
            self.clone()
        }
        fn settled(fitted: &Self) -> Self {
            fitted.clone()
        }
    };
}
pub(crate) use no_fitting;

/// The down-projection keys: `down_dim` from 1 to [`MAX_DIM`] with `down`, absent without.
pub(crate) fn down_keys_check(down: Option<DownKind>, down_dim: usize) -> Checked {
    match down {
        Some(_) => dim("down_dim", down_dim, 1),
        None if down_dim != 0 => fail("down_dim", "needs down = \"srht\" or \"gaussian\""),
        None => Ok(()),
    }
}
