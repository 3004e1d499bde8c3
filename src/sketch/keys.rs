//! The keys of a stage's table: the rule each shared key obeys ([`KeyError`] names the
//! key that broke it), the pipeline file's defaults, the keys every stage has
//! ([`CommonKeys`], declared by [`family_spec!`]), and the small enums those keys take
//! ([`Normalize`], [`DownKind`]). A leaf: every family file builds on it and it knows
//! none of them.

use serde::{Deserialize, Serialize};

use super::{MAX_DIM, MAX_TRUNCATION};

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

/// Per-row normalisation applied to a stage's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Normalize {
    /// Rows as they are.
    #[default]
    None,
    /// Rows divided by their L1 norm (all-zero rows stay zero).
    L1,
    /// Rows divided by their L2 norm (all-zero rows stay zero).
    L2,
}

impl Normalize {
    /// Normalises each row of `x` (`d` columns) in place.
    pub fn apply(self, x: &mut [f32], d: usize) {
        if self == Normalize::None || d == 0 {
            return;
        }
        for row in x.chunks_exact_mut(d) {
            let norm: f64 = match self {
                Normalize::L1 => row.iter().map(|&v| f64::from(v).abs()).sum(),
                Normalize::L2 => row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt(),
                Normalize::None => 1.0,
            };
            if norm > 0.0 {
                let inv = (1.0 / norm) as f32;
                row.iter_mut().for_each(|v| *v *= inv);
            }
        }
    }
}

/// An oblivious linear down-projection `R^D → R^E`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DownKind {
    /// Subsampled randomized Hadamard transform.
    #[default]
    Srht,
    /// Dense Gaussian map (the reference).
    Gaussian,
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
            #[serde(default = "crate::sketch::keys::defaults::weight")]
            pub weight: f64,
        }

        impl $crate::sketch::keys::CommonKeys for $name {
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
            #[serde(default = "crate::sketch::keys::defaults::weight")]
            pub weight: f64,
            /// Down-projection after the map, `"srht"` or `"gaussian"` (none by default).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub down: Option<$crate::sketch::DownKind>,
            /// Output dimension of the down-projection.
            #[serde(default, skip_serializing_if = "crate::sketch::keys::defaults::is_zero")]
            pub down_dim: usize,
        }

        impl $crate::sketch::keys::CommonKeys for $name {
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
