//! Random-feature maps ("sketches"), one file per family, and their composition.
//!
//! A map is a value built from its spec and a seed. It maps a whole chunk at a time
//! (`x: rows×d` → `z: rows×D`, row-major, caller-owned output), takes `&self` and is
//! `Send + Sync`, so worker threads share one map. Its random parameters are drawn
//! once when it is built and can be exported as arrays for the model file, so a
//! loaded model maps rows to exactly the same features.

pub mod chi2;
pub mod count;
pub mod craftmaps;
pub mod gaussian;
pub mod hadamard;
pub mod identity;
pub mod maclaurin;
pub mod recursive;
pub mod rff;
pub mod tensor;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rng::StageRng;
use chi2::{Chi2Chebyshev, Chi2Series, ExpChi2};
use count::CountSketch;
use craftmaps::Craftmaps;
use gaussian::{GaussianSketch, GaussianSketchHd, HdBlock, Preprocess};
use hadamard::{next_pow2, GaussianProjection, Srht};
use identity::Identity;
use maclaurin::{DotKernel, Projections, RandomMaclaurin};
use recursive::{RecursivePoly, RecursiveTensorSketch};
use rff::{Rff, RffVariant, ShiftKernel};
use tensor::{PolyKernel, TensorSketch};

/// A feature map over whole chunks.
pub trait FeatureMap: Send + Sync {
    /// Input dimension `d`.
    fn input_dim(&self) -> usize;
    /// Output dimension `D`.
    fn output_dim(&self) -> usize;
    /// Maps `rows` rows of `x` (row-major, `rows × d`) into `out` (`rows × D`).
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]);
}

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

fn default_weight() -> f64 {
    1.0
}
fn default_degree() -> u32 {
    2
}
fn default_gamma() -> f64 {
    1.0
}
fn default_dim() -> usize {
    4096
}
fn default_eta() -> f64 {
    2.0
}
fn default_true() -> bool {
    true
}

/// `kind = "identity"`: the linear kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitySpec {
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight `w` of the stage in a concatenation (its kernel is weighted by `w²`).
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// `kind = "tensor_sketch"`: the polynomial kernel `(γ⟨x,y⟩ + c)^p`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSketchSpec {
    /// Degree `p ≥ 1`.
    #[serde(default = "default_degree")]
    pub degree: u32,
    /// Scale `γ > 0`.
    #[serde(default = "default_gamma")]
    pub gamma: f64,
    /// Offset `c ≥ 0`.
    #[serde(default)]
    pub offset: f64,
    /// Output dimension `D ≥ 2`.
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// Which dot-product kernel a Maclaurin map approximates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DotKind {
    /// `(γ⟨x,y⟩ + c)^p`.
    #[default]
    Polynomial,
    /// `exp(γ⟨x,y⟩)`.
    Exponential,
}

/// `kind = "random_maclaurin"`: a dot-product kernel by random Maclaurin features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomMaclaurinSpec {
    /// Polynomial or exponential.
    #[serde(default)]
    pub kernel: DotKind,
    /// Degree `p ≥ 1` (polynomial).
    #[serde(default = "default_degree")]
    pub degree: u32,
    /// Scale `γ > 0`.
    #[serde(default = "default_gamma")]
    pub gamma: f64,
    /// Offset `c ≥ 0` (polynomial).
    #[serde(default)]
    pub offset: f64,
    /// Output dimension `D`.
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Order base `η > 1`.
    #[serde(default = "default_eta")]
    pub eta: f64,
    /// Keep the constant and linear terms exact (where allowed).
    #[serde(default = "default_true")]
    pub h01: bool,
    /// Hadamard-structured projections instead of dense Rademacher vectors.
    #[serde(default)]
    pub hadamard: bool,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// `kind = "recursive_tensor_sketch"`: the polynomial kernel through the tree of degree-2 sketches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecursiveSpec {
    /// Degree `p ≥ 1`.
    #[serde(default = "default_degree")]
    pub degree: u32,
    /// Scale `γ > 0`.
    #[serde(default = "default_gamma")]
    pub gamma: f64,
    /// Offset `c ≥ 0`.
    #[serde(default)]
    pub offset: f64,
    /// Output dimension `m` (even).
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
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

/// The down-projection of CRAFTMaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DownKind {
    /// Subsampled randomized Hadamard transform.
    #[default]
    Srht,
    /// Dense Gaussian map (the reference).
    Gaussian,
}

/// `kind = "craftmaps"`: up-project to `up_dim`, down-project to `dim`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    #[serde(default = "default_degree")]
    pub degree: u32,
    /// Scale `γ > 0`.
    #[serde(default = "default_gamma")]
    pub gamma: f64,
    /// Offset `c ≥ 0` (polynomial).
    #[serde(default)]
    pub offset: f64,
    /// Output dimension `E`.
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Up-projection dimension `D > E` (0: `8E`).
    #[serde(default)]
    pub up_dim: usize,
    /// Order base `η > 1` (random Maclaurin).
    #[serde(default = "default_eta")]
    pub eta: f64,
    /// H0/1 (random Maclaurin).
    #[serde(default = "default_true")]
    pub h01: bool,
    /// Hadamard-structured random Maclaurin up-projection.
    #[serde(default)]
    pub hadamard: bool,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
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
}

fn default_terms() -> usize {
    10
}
fn default_cheb_terms() -> usize {
    40
}
fn default_bins() -> usize {
    200
}

/// `kind = "rff"`: random Fourier features for a shift-invariant kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RffSpec {
    /// Gaussian or Laplacian.
    #[serde(default)]
    pub kernel: ShiftKernel,
    /// `cos_sin` or `cos`.
    #[serde(default)]
    pub variant: RffVariant,
    /// Output dimension `D` (even for `cos_sin`).
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Bandwidth σ; default: the median pairwise distance (L2, or L1 for the Laplacian)
    /// of the pre-pass sample.
    #[serde(default)]
    pub sigma: Option<f64>,
    /// Gaussian only: `γ = 1/(2σ²)`, instead of `sigma`.
    #[serde(default)]
    pub gamma: Option<f64>,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

impl RffSpec {
    /// σ as given or fitted (`None` until fitted).
    pub fn bandwidth(&self) -> Option<f64> {
        self.sigma.or(self.gamma.map(|g| (1.0 / (2.0 * g)).sqrt()))
    }
}

/// `kind = "chi2"`: the direct additive-χ² series with `terms` parameters per coordinate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chi2Spec {
    /// `N`, terms per coordinate (output `d·N`).
    #[serde(default = "default_terms")]
    pub terms: usize,
    /// `k_1..k_N`; empty: fitted greedily on the pre-pass sample.
    #[serde(default)]
    pub k: Vec<f64>,
    /// Histogram bins of the fit.
    #[serde(default = "default_bins")]
    pub bins: usize,
    /// Input row normalisation (`l1` turns counts into histograms).
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// `kind = "chi2_chebyshev"`: the Chebyshev approximation of the additive χ² kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chi2ChebyshevSpec {
    /// `Q`, coefficients per coordinate (output `d·Q`).
    #[serde(default = "default_cheb_terms")]
    pub terms: usize,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// `kind = "exp_chi2"`: `exp(−β X²)` by the direct χ² series then Gaussian RFF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpChi2Spec {
    /// `N`, χ² terms per coordinate.
    #[serde(default = "default_terms")]
    pub terms: usize,
    /// `k_1..k_N`; empty: fitted.
    #[serde(default)]
    pub k: Vec<f64>,
    /// Histogram bins of the fit.
    #[serde(default = "default_bins")]
    pub bins: usize,
    /// `β > 0`; default `1/mean(X²)` over pre-pass sample pairs.
    #[serde(default)]
    pub beta: Option<f64>,
    /// RFF layout.
    #[serde(default)]
    pub variant: RffVariant,
    /// Output dimension `D`.
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// `kind = "gaussian_sketch"`: `exp(−‖x−y‖²/(2σ²))` by per-coordinate expansions and one
/// recursive tensor sketch over the coordinates (for low `d`, math.md §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaussianSketchSpec {
    /// Bandwidth σ; default: the median pairwise distance of the pre-pass sample.
    #[serde(default)]
    pub sigma: Option<f64>,
    /// Terms per coordinate `s`; default: the smallest making the truncation bound ≤ 1e-6.
    #[serde(default)]
    pub truncation: Option<usize>,
    /// Output dimension `m` (even).
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Centre `c` of the preprocessing; default: the pre-pass sample mean.
    #[serde(default)]
    pub center: Vec<f64>,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// `kind = "gaussian_sketch_hd"`: `exp(−‖x−y‖²/(2σ²))` by one recursive tensor sketch per
/// degree of the series in `⟨x, y⟩` (for high `d`, math.md §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaussianSketchHdSpec {
    /// Bandwidth σ; default: the median pairwise distance of the pre-pass sample.
    #[serde(default)]
    pub sigma: Option<f64>,
    /// Degrees `s`; default: the smallest making the truncation bound ≤ 1e-6.
    #[serde(default)]
    pub truncation: Option<usize>,
    /// Total output dimension `Σ m_j`, split over the degrees.
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Centre `c`; default: the pre-pass sample mean.
    #[serde(default)]
    pub center: Vec<f64>,
    /// Block sizes `m_1 … m_{s−1}`; default: from the radius of the sample (math.md §9).
    #[serde(default)]
    pub blocks: Vec<usize>,
    /// Degree 1 exact (set by the fit when its share reaches `d`).
    #[serde(default)]
    pub identity_block: bool,
    /// Input row normalisation.
    #[serde(default)]
    pub normalize: Normalize,
    /// Weight of the stage in a concatenation.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// The largest truncation the Gaussian sketches fit (math.md §9 warns above 64).
pub const MAX_TRUNCATION: usize = 96;

/// The sketch families: one line each. From it come the [`StageSpec`] enum (tagged by
/// `kind` in pipeline files and model headers), [`KINDS`], the TOML dispatch, the
/// fields every stage has (`normalize`, `weight`), `From<…Spec>` for building pipelines
/// in code, and `Default` — the pipeline file's own defaults, read from an empty table
/// with the file's rules, so code and files never disagree. Adding a family: its file,
/// its spec struct, one line here, and its arms in the methods below.
macro_rules! families {
    ($( $kind:literal => $variant:ident($spec:ty) ),* $(,)?) => {
        /// One stage of a pipeline, as written in the pipeline file.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind")]
        pub enum StageSpec {
            $(
                #[doc = concat!("`kind = \"", $kind, "\"`: see [`", stringify!($spec), "`].")]
                #[serde(rename = $kind)]
                $variant($spec),
            )*
        }

        /// The stage kinds a pipeline may name.
        pub const KINDS: &[&str] = &[$($kind),*];

        impl StageSpec {
            /// The spec of `kind` from its table (without `kind`); `None` for an unknown kind.
            fn parse_kind(kind: &str, value: toml::Value) -> Option<std::result::Result<StageSpec, toml::de::Error>> {
                match kind {
                    $($kind => Some(value.try_into().map(StageSpec::$variant)),)*
                    _ => None,
                }
            }

            /// The fields every family has: input normalisation and weight.
            fn common(&self) -> (Normalize, f64) {
                match self {
                    $(StageSpec::$variant(s) => (s.normalize, s.weight),)*
                }
            }
        }

        $(
            impl From<$spec> for StageSpec {
                fn from(s: $spec) -> StageSpec {
                    StageSpec::$variant(s)
                }
            }

            impl Default for $spec {
                #[allow(clippy::expect_used)] // Invariant: every field has a serde default (tested).
                fn default() -> Self {
                    toml::Value::Table(toml::Table::new()).try_into().expect("every field has a default")
                }
            }
        )*
    };
}

families! {
    "identity" => Identity(IdentitySpec),
    "tensor_sketch" => TensorSketch(TensorSketchSpec),
    "random_maclaurin" => RandomMaclaurin(RandomMaclaurinSpec),
    "recursive_tensor_sketch" => RecursiveTensorSketch(RecursiveSpec),
    "craftmaps" => Craftmaps(CraftmapsSpec),
    "rff" => Rff(RffSpec),
    "chi2" => Chi2(Chi2Spec),
    "chi2_chebyshev" => Chi2Chebyshev(Chi2ChebyshevSpec),
    "exp_chi2" => ExpChi2(ExpChi2Spec),
    "gaussian_sketch" => GaussianSketch(GaussianSketchSpec),
    "gaussian_sketch_hd" => GaussianSketchHd(GaussianSketchHdSpec),
}

/// The largest output dimension a stage may ask for (2^20).
pub const MAX_DIM: usize = 1 << 20;

pub(crate) fn dot_kernel(kind: DotKind, degree: u32, gamma: f64, offset: f64) -> DotKernel {
    match kind {
        DotKind::Polynomial => DotKernel::Polynomial { degree, gamma, offset },
        DotKind::Exponential => DotKernel::Exponential { gamma },
    }
}

fn gaussian_common(sigma: Option<f64>, t: Option<usize>, err: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
    positive_opt("sigma", sigma, err)?;
    if let Some(t) = t {
        if t == 0 || t > MAX_TRUNCATION {
            return err("truncation", format!("must be from 1 to {MAX_TRUNCATION}, got {t}"));
        }
    }
    Ok(())
}

fn rff_dim(variant: RffVariant, dim: usize, err: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
    if !(1..=MAX_DIM).contains(&dim) {
        return err("dim", format!("must be from 2 to {MAX_DIM}, got {dim}"));
    }
    if variant == RffVariant::CosSin && (dim < 2 || dim % 2 == 1) {
        return err("dim", format!("must be even and ≥ 2 for variant = \"cos_sin\", got {dim}"));
    }
    Ok(())
}

fn positive_opt(key: &str, v: Option<f64>, err: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => err(key, format!("must be a positive number, got {x}")),
        _ => Ok(()),
    }
}

fn chi2_terms(
    terms: usize,
    k: &[f64],
    bins: usize,
    max: usize,
    err: &dyn Fn(&str, String) -> Result<()>,
) -> Result<()> {
    if terms == 0 || terms > max {
        return err("terms", format!("must be from 1 to {max}, got {terms}"));
    }
    if !k.is_empty() && k.len() != terms {
        return err("k", format!("has {} values but terms = {terms}", k.len()));
    }
    if k.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return err("k", "every k must be a positive number".into());
    }
    if !(2..=100_000).contains(&bins) {
        return err("bins", format!("must be from 2 to 100000, got {bins}"));
    }
    Ok(())
}

/// The χ² distance `Σ (x_i − y_i)²/(x_i + y_i)` (terms with `x_i + y_i = 0` are 0).
pub fn chi2_distance(x: &[f32], y: &[f32]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| {
            let (a, b) = (f64::from(a), f64::from(b));
            if a + b > 0.0 {
                (a - b).powi(2) / (a + b)
            } else {
                0.0
            }
        })
        .sum()
}

/// The exact kernel a stage approximates (on its normalised input).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    /// A dot-product kernel (the linear kernel is the polynomial of degree 1).
    Dot(DotKernel),
    /// `exp(−‖x−y‖²/(2σ²))`.
    Gaussian {
        /// σ.
        sigma: f64,
    },
    /// `exp(−‖x−y‖₁/σ)`.
    Laplacian {
        /// σ.
        sigma: f64,
    },
    /// `Σ 2x_iy_i/(x_i+y_i)`.
    Chi2,
    /// `exp(−β X²(x, y))`.
    ExpChi2 {
        /// β.
        beta: f64,
    },
}

impl Kernel {
    /// `k(x, y)`.
    pub fn eval(&self, x: &[f32], y: &[f32]) -> f64 {
        let pairs = || x.iter().zip(y).map(|(&a, &b)| (f64::from(a), f64::from(b)));
        match self {
            Kernel::Dot(k) => k.eval_dot(pairs().map(|(a, b)| a * b).sum()),
            Kernel::Gaussian { sigma } => {
                (-pairs().map(|(a, b)| (a - b).powi(2)).sum::<f64>() / (2.0 * sigma * sigma)).exp()
            }
            Kernel::Laplacian { sigma } => (-pairs().map(|(a, b)| (a - b).abs()).sum::<f64>() / sigma).exp(),
            Kernel::Chi2 => pairs().map(|(a, b)| chi2::k0(a, b)).sum(),
            Kernel::ExpChi2 { beta } => (-beta * chi2_distance(x, y)).exp(),
        }
    }
}

impl StageSpec {
    /// Builds a stage spec from its TOML table, with errors that name the key.
    pub fn from_toml(table: &toml::Table, file: &str, at: &str) -> Result<Self> {
        let kind = match table.get("kind") {
            Some(toml::Value::String(k)) => k.clone(),
            Some(_) => return Err(Error::config(file, format!("{at}.kind"), "must be a string")),
            None => {
                return Err(Error::config(
                    file,
                    format!("{at}.kind"),
                    format!("missing; every stage needs a kind: {}", KINDS.join(", ")),
                ))
            }
        };
        let mut rest = table.clone();
        rest.remove("kind");
        let value = toml::Value::Table(rest);
        let bad = |e: toml::de::Error| Error::config(file, at, format!("stage kind '{kind}': {}", e.message()));
        let spec = match StageSpec::parse_kind(&kind, value) {
            Some(parsed) => parsed.map_err(bad)?,
            None => {
                return Err(Error::config(
                    file,
                    format!("{at}.kind"),
                    format!("unknown stage kind '{kind}'; known kinds: {}", KINDS.join(", ")),
                ))
            }
        };
        spec.validate(file, at)?;
        Ok(spec)
    }

    /// Checks every parameter's range.
    pub fn validate(&self, file: &str, at: &str) -> Result<()> {
        let err = |key: &str, msg: String| Err(Error::config(file, format!("{at}.{key}"), msg));
        let weight = self.weight();
        if !(weight.is_finite() && weight > 0.0) {
            return err("weight", format!("must be a positive number, got {weight}"));
        }
        let poly = |degree: u32, gamma: f64, offset: f64| -> Result<()> {
            if degree == 0 || degree > 16 {
                return err("degree", format!("must be an integer from 1 to 16, got {degree}"));
            }
            if !(gamma.is_finite() && gamma > 0.0) {
                return err("gamma", format!("must be a positive number, got {gamma}"));
            }
            if !(offset.is_finite() && offset >= 0.0) {
                return err("offset", format!("must be a number ≥ 0, got {offset}"));
            }
            Ok(())
        };
        let dim = |key: &str, v: usize, min: usize| -> Result<()> {
            if v < min || v > MAX_DIM {
                return err(key, format!("must be from {min} to {MAX_DIM}, got {v}"));
            }
            Ok(())
        };
        let eta = |v: f64| -> Result<()> {
            if !(v.is_finite() && v > 1.0) {
                return err("eta", format!("must be a number > 1, got {v}"));
            }
            Ok(())
        };
        match self {
            StageSpec::Identity(_) => Ok(()),
            StageSpec::TensorSketch(s) => {
                poly(s.degree, s.gamma, s.offset)?;
                dim("dim", s.dim, 2)
            }
            StageSpec::RandomMaclaurin(s) => {
                poly(s.degree, s.gamma, s.offset)?;
                eta(s.eta)?;
                dim("dim", s.dim, 1)
            }
            StageSpec::RecursiveTensorSketch(s) => {
                poly(s.degree, s.gamma, s.offset)?;
                dim("dim", s.dim, 2)?;
                if s.dim % 2 != 0 {
                    return err("dim", format!("must be even, got {}", s.dim));
                }
                Ok(())
            }
            StageSpec::Craftmaps(s) => {
                poly(s.degree, s.gamma, s.offset)?;
                eta(s.eta)?;
                dim("dim", s.dim, 1)?;
                dim("up_dim", s.up_dim(), 2)?;
                if s.dim >= s.up_dim() {
                    return err("dim", format!("E = {} must be below up_dim D = {}", s.dim, s.up_dim()));
                }
                if s.up == UpKind::TensorSketch && s.kernel != DotKind::Polynomial {
                    return err("kernel", "a tensor-sketch up-projection needs kernel = \"polynomial\"".into());
                }
                if s.up == UpKind::TensorSketch && s.hadamard {
                    return err("hadamard", "the Hadamard-structured up-projection is for random_maclaurin".into());
                }
                Ok(())
            }
            StageSpec::Rff(s) => {
                rff_dim(s.variant, s.dim, &err)?;
                if s.sigma.is_some() && s.gamma.is_some() {
                    return err("gamma", "give either sigma or gamma, not both".into());
                }
                if s.gamma.is_some() && s.kernel == ShiftKernel::Laplacian {
                    return err("gamma", "the Laplacian kernel takes sigma".into());
                }
                positive_opt("sigma", s.sigma, &err)?;
                positive_opt("gamma", s.gamma, &err)
            }
            StageSpec::Chi2(s) => chi2_terms(s.terms, &s.k, s.bins, 64, &err),
            StageSpec::Chi2Chebyshev(s) => {
                if s.terms == 0 || s.terms > 400 {
                    return err("terms", format!("must be from 1 to 400, got {}", s.terms));
                }
                Ok(())
            }
            StageSpec::ExpChi2(s) => {
                chi2_terms(s.terms, &s.k, s.bins, 64, &err)?;
                positive_opt("beta", s.beta, &err)?;
                rff_dim(s.variant, s.dim, &err)
            }
            StageSpec::GaussianSketch(s) => {
                gaussian_common(s.sigma, s.truncation, &err)?;
                dim("dim", s.dim, 2)?;
                if s.dim % 2 == 1 {
                    return err("dim", format!("must be even, got {}", s.dim));
                }
                Ok(())
            }
            StageSpec::GaussianSketchHd(s) => {
                gaussian_common(s.sigma, s.truncation, &err)?;
                if s.truncation == Some(1) {
                    return err("truncation", "must be ≥ 2: the HD sketch needs at least the degree-1 block".into());
                }
                dim("dim", s.dim, 2)?;
                if let Some(j) = s.blocks.iter().position(|&b| b == 0) {
                    return err("blocks", format!("entry {j} is 0; every block size must be ≥ 1"));
                }
                if let Some(t) = s.truncation {
                    if !s.blocks.is_empty() && s.blocks.len() + 1 != t {
                        return err("blocks", format!("needs {} sizes (degrees 1..s−1) for truncation = {t}", t - 1));
                    }
                }
                Ok(())
            }
        }
    }

    /// Checks what needs the input width `d`: a given `center` must have `d` entries.
    pub fn check_width(&self, d: usize, index: usize) -> Result<()> {
        let center = match self {
            StageSpec::GaussianSketch(s) => &s.center,
            StageSpec::GaussianSketchHd(s) => &s.center,
            _ => return Ok(()),
        };
        if !center.is_empty() && center.len() != d {
            return Err(Error::config(
                "pipeline",
                format!("stages.{index}.center"),
                format!("has {} entries for d = {d} input columns; give one per column or omit it", center.len()),
            ));
        }
        Ok(())
    }

    /// True for the Gaussian kernel-distance sketches.
    pub fn is_gaussian_sketch(&self) -> bool {
        matches!(self, StageSpec::GaussianSketch(_) | StageSpec::GaussianSketchHd(_))
    }

    /// True for stages whose inputs must be non-negative (the χ² family).
    pub fn needs_nonnegative(&self) -> bool {
        matches!(self, StageSpec::Chi2(_) | StageSpec::Chi2Chebyshev(_) | StageSpec::ExpChi2(_))
    }

    /// True when a parameter is still to be fitted on the pre-pass sample.
    pub fn needs_fit(&self) -> bool {
        match self {
            StageSpec::Rff(s) => s.bandwidth().is_none(),
            StageSpec::Chi2(s) => s.k.is_empty(),
            StageSpec::ExpChi2(s) => s.k.is_empty() || s.beta.is_none(),
            StageSpec::GaussianSketch(s) => s.sigma.is_none() || s.truncation.is_none() || s.center.is_empty(),
            StageSpec::GaussianSketchHd(s) => {
                s.sigma.is_none() || s.truncation.is_none() || s.center.is_empty() || s.blocks.is_empty()
            }
            _ => false,
        }
    }

    /// Fills the data-dependent parameters from the pre-pass sample `x` (`n × d`, raw
    /// rows; the stage's normalisation is applied here): the χ² `k`'s (math.md §10.2),
    /// the RFF bandwidth (median distance over ≤ 1000 random pairs) and the exp-χ² β
    /// (`1/mean X²` over the same pairs).
    pub fn fit(&self, x: &[f32], d: usize, seed: u64, index: usize) -> Result<StageSpec> {
        self.check_width(d, index)?;
        if !self.needs_fit() {
            return Ok(self.clone());
        }
        let mut xn = x.to_vec();
        self.normalize().apply(&mut xn, d);
        let n = xn.len().checked_div(d).unwrap_or(0);
        let mut rng = StageRng::new(seed, (1u64 << 32) + index as u64);
        let pairs: Vec<(usize, usize)> = if n < 2 {
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
        let row = |i: usize| &xn[i * d..(i + 1) * d];
        let mut out = self.clone();
        match &mut out {
            StageSpec::Rff(s) => {
                let mut dist: Vec<f64> = pairs
                    .iter()
                    .map(|&(a, b)| {
                        let it = row(a).iter().zip(row(b)).map(|(&p, &q)| f64::from(p) - f64::from(q));
                        match s.kernel {
                            ShiftKernel::Gaussian => it.map(|v| v * v).sum::<f64>().sqrt(),
                            ShiftKernel::Laplacian => it.map(f64::abs).sum::<f64>(),
                        }
                    })
                    .filter(|&v| v > 0.0)
                    .collect();
                dist.sort_by(f64::total_cmp);
                s.sigma = Some(dist.get(dist.len() / 2).copied().unwrap_or(1.0));
            }
            StageSpec::Chi2(s) if s.k.is_empty() => {
                s.k = chi2::fit_k(xn.iter().map(|&v| f64::from(v)), s.terms, s.bins).k;
            }
            StageSpec::GaussianSketch(s) => gaussian::fit_sketch(s, &xn, n, d, &pairs),
            StageSpec::GaussianSketchHd(s) => gaussian::fit_sketch_hd(s, &xn, n, d, &pairs),
            StageSpec::ExpChi2(s) => {
                if s.k.is_empty() {
                    s.k = chi2::fit_k(xn.iter().map(|&v| f64::from(v)), s.terms, s.bins).k;
                }
                if s.beta.is_none() {
                    let mean = pairs.iter().map(|&(a, b)| chi2_distance(row(a), row(b))).sum::<f64>()
                        / pairs.len().max(1) as f64;
                    s.beta = Some(if mean > 0.0 { 1.0 / mean } else { 1.0 });
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// Input normalisation.
    pub fn normalize(&self) -> Normalize {
        self.common().0
    }

    /// Weight in a concatenation.
    pub fn weight(&self) -> f64 {
        self.common().1
    }

    /// The kernel the stage approximates (for a fitted spec; unfitted bandwidths read as 1).
    pub fn kernel(&self) -> Kernel {
        match self {
            StageSpec::Rff(s) if s.kernel == ShiftKernel::Gaussian => {
                Kernel::Gaussian { sigma: s.bandwidth().unwrap_or(1.0) }
            }
            StageSpec::Rff(s) => Kernel::Laplacian { sigma: s.bandwidth().unwrap_or(1.0) },
            StageSpec::Chi2(_) | StageSpec::Chi2Chebyshev(_) => Kernel::Chi2,
            StageSpec::ExpChi2(s) => Kernel::ExpChi2 { beta: s.beta.unwrap_or(1.0) },
            StageSpec::GaussianSketch(s) => Kernel::Gaussian { sigma: s.sigma.unwrap_or(1.0) },
            StageSpec::GaussianSketchHd(s) => Kernel::Gaussian { sigma: s.sigma.unwrap_or(1.0) },
            StageSpec::Identity(_) => Kernel::Dot(DotKernel::Polynomial { degree: 1, gamma: 1.0, offset: 0.0 }),
            StageSpec::TensorSketch(s) => Kernel::Dot(dot_kernel(DotKind::Polynomial, s.degree, s.gamma, s.offset)),
            StageSpec::RecursiveTensorSketch(s) => {
                Kernel::Dot(dot_kernel(DotKind::Polynomial, s.degree, s.gamma, s.offset))
            }
            StageSpec::RandomMaclaurin(s) => Kernel::Dot(dot_kernel(s.kernel, s.degree, s.gamma, s.offset)),
            StageSpec::Craftmaps(s) => Kernel::Dot(dot_kernel(s.kernel, s.degree, s.gamma, s.offset)),
        }
    }

    /// The same stage with output dimension `dim` (for error-versus-dimension sweeps).
    pub fn with_dim(&self, dim: usize) -> StageSpec {
        let mut s = self.clone();
        match &mut s {
            StageSpec::Identity(_) => {}
            StageSpec::TensorSketch(t) => t.dim = dim,
            StageSpec::RandomMaclaurin(t) => t.dim = dim,
            StageSpec::RecursiveTensorSketch(t) => t.dim = dim + dim % 2,
            StageSpec::Craftmaps(t) => {
                let ratio = t.up_dim() / t.dim.max(1);
                t.dim = dim;
                t.up_dim = ratio.max(2) * dim;
            }
            StageSpec::Rff(t) => t.dim = dim + dim % 2,
            StageSpec::ExpChi2(t) => t.dim = dim + dim % 2,
            StageSpec::Chi2(t) => t.terms = dim.clamp(1, 64),
            StageSpec::Chi2Chebyshev(t) => t.terms = dim.clamp(1, 400),
            StageSpec::GaussianSketch(t) => t.dim = dim + dim % 2,
            StageSpec::GaussianSketchHd(t) => {
                t.dim = dim.max(2);
                t.blocks.clear();
            }
        }
        s
    }

    /// The output dimension the stage asks for (identity: none).
    pub fn dim(&self) -> Option<usize> {
        match self {
            StageSpec::Identity(_) => None,
            StageSpec::TensorSketch(t) => Some(t.dim),
            StageSpec::RandomMaclaurin(t) => Some(t.dim),
            StageSpec::RecursiveTensorSketch(t) => Some(t.dim),
            StageSpec::Craftmaps(t) => Some(t.dim),
            StageSpec::Rff(t) => Some(t.dim),
            StageSpec::ExpChi2(t) => Some(t.dim),
            StageSpec::Chi2(t) => Some(t.terms),
            StageSpec::Chi2Chebyshev(t) => Some(t.terms),
            StageSpec::GaussianSketch(t) => Some(t.dim),
            StageSpec::GaussianSketchHd(t) => Some(t.dim),
        }
    }
}

/// A named array of a stage's materialised random parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamArray {
    /// Name within the stage (e.g. `hash`).
    pub name: String,
    /// Shape, row-major.
    pub shape: Vec<usize>,
    /// Values.
    pub data: ParamData,
}

/// The values of a [`ParamArray`].
#[derive(Debug, Clone, PartialEq)]
pub enum ParamData {
    /// Hash values, orders, indices.
    U32(Vec<u32>),
    /// Signs.
    I8(Vec<i8>),
    /// Real parameters.
    F32(Vec<f32>),
}

impl ParamArray {
    fn u32(name: &str, shape: Vec<usize>, v: Vec<u32>) -> Self {
        ParamArray { name: name.into(), shape, data: ParamData::U32(v) }
    }
    fn i8(name: &str, shape: Vec<usize>, v: Vec<i8>) -> Self {
        ParamArray { name: name.into(), shape, data: ParamData::I8(v) }
    }
    fn f32(name: &str, shape: Vec<usize>, v: Vec<f32>) -> Self {
        ParamArray { name: name.into(), shape, data: ParamData::F32(v) }
    }
    fn prefixed(mut self, p: &str) -> Self {
        self.name = format!("{p}{}", self.name);
        self
    }
}

/// Stored arrays of a stage, looked up by name with shape checks.
pub(crate) struct Params<'a>(pub(crate) &'a [ParamArray]);

pub(crate) type PResult<T> = std::result::Result<T, String>;

impl Params<'_> {
    fn get(&self, name: &str) -> PResult<&ParamArray> {
        self.0.iter().find(|p| p.name == name).ok_or_else(|| format!("missing array '{name}'"))
    }
    fn u32(&self, name: &str, shape: &[usize]) -> PResult<Vec<u32>> {
        match self.get(name)? {
            ParamArray { shape: s, data: ParamData::U32(v), .. }
                if s == shape && v.len() == s.iter().product::<usize>() =>
            {
                Ok(v.clone())
            }
            _ => Err(format!("array '{name}' must be u32 of shape {shape:?}")),
        }
    }
    fn i8(&self, name: &str, shape: &[usize]) -> PResult<Vec<i8>> {
        match self.get(name)? {
            ParamArray { shape: s, data: ParamData::I8(v), .. }
                if s == shape && v.len() == s.iter().product::<usize>() =>
            {
                if v.iter().any(|&x| x != 1 && x != -1) {
                    return Err(format!("array '{name}' must hold signs ±1"));
                }
                Ok(v.clone())
            }
            _ => Err(format!("array '{name}' must be i8 of shape {shape:?}")),
        }
    }
    fn f32(&self, name: &str, shape: &[usize]) -> PResult<Vec<f32>> {
        match self.get(name)? {
            ParamArray { shape: s, data: ParamData::F32(v), .. }
                if s == shape && v.len() == s.iter().product::<usize>() =>
            {
                Ok(v.clone())
            }
            _ => Err(format!("array '{name}' must be f32 of shape {shape:?}")),
        }
    }
    fn shape(&self, name: &str) -> PResult<Vec<usize>> {
        Ok(self.get(name)?.shape.clone())
    }
    fn count_sketches(&self, hash: &str, sign: &str, k: usize, n: usize, m: usize) -> PResult<Vec<CountSketch>> {
        // No sketches (a degree-1 tree): the stored arrays are empty, whatever their width.
        if k == 0 {
            return match (self.get(hash)?, self.get(sign)?) {
                (ParamArray { data: ParamData::U32(h), .. }, ParamArray { data: ParamData::I8(g), .. })
                    if h.is_empty() && g.is_empty() =>
                {
                    Ok(Vec::new())
                }
                _ => Err(format!("arrays '{hash}' and '{sign}' must be empty for no sketches")),
            };
        }
        let h = self.u32(hash, &[k, n])?;
        let s = self.i8(sign, &[k, n])?;
        if h.iter().any(|&v| v as usize >= m) {
            return Err(format!("array '{hash}' has values outside [0, {m})"));
        }
        Ok((0..k)
            .map(|j| CountSketch { hash: h[j * n..(j + 1) * n].to_vec(), sign: s[j * n..(j + 1) * n].to_vec(), dim: m })
            .collect())
    }
    fn sub(&self, prefix: &str) -> Vec<ParamArray> {
        self.0
            .iter()
            .filter_map(|p| p.name.strip_prefix(prefix).map(|n| ParamArray { name: n.into(), ..p.clone() }))
            .collect()
    }
}

fn count_sketch_params(hash: &str, sign: &str, cs: &[CountSketch]) -> Vec<ParamArray> {
    let n = cs.first().map_or(0, CountSketch::input_dim);
    vec![
        ParamArray::u32(hash, vec![cs.len(), n], cs.iter().flat_map(|c| c.hash.clone()).collect()),
        ParamArray::i8(sign, vec![cs.len(), n], cs.iter().flat_map(|c| c.sign.clone()).collect()),
    ]
}

/// A built map whose random parameters can be exported.
pub trait Sketch: FeatureMap + std::fmt::Debug {
    /// The materialised random parameters.
    fn params(&self) -> Vec<ParamArray>;
}

impl Sketch for Identity {
    fn params(&self) -> Vec<ParamArray> {
        Vec::new()
    }
}

impl Sketch for TensorSketch {
    fn params(&self) -> Vec<ParamArray> {
        count_sketch_params("hash", "sign", self.sketches())
    }
}

impl Sketch for RandomMaclaurin {
    fn params(&self) -> Vec<ParamArray> {
        let mut v = vec![ParamArray::u32("orders", vec![self.orders.len()], self.orders.clone())];
        match &self.proj {
            Projections::Dense { signs } => v.push(ParamArray::i8(
                "signs",
                vec![self.d, self.total_order()],
                signs.iter().map(|&s| if s > 0.0 { 1 } else { -1 }).collect(),
            )),
            Projections::Hadamard { d_pad, zeta, perm } => {
                v.push(ParamArray::i8("zeta", vec![zeta.len() / d_pad, *d_pad], zeta.clone()));
                v.push(ParamArray::u32("perm", vec![perm.len()], perm.clone()));
            }
        }
        v
    }
}

impl Sketch for RecursivePoly {
    fn params(&self) -> Vec<ParamArray> {
        let t = &self.tree;
        let mut v = count_sketch_params("leaf_hash", "leaf_sign", &t.leaves);
        let nodes: Vec<CountSketch> = t.nodes.iter().flatten().flat_map(|(a, b)| [a.clone(), b.clone()]).collect();
        v.extend(count_sketch_params("node_hash", "node_sign", &nodes));
        v
    }
}

impl Sketch for Srht {
    fn params(&self) -> Vec<ParamArray> {
        vec![
            ParamArray::i8("zeta", vec![self.zeta.len()], self.zeta.clone()),
            ParamArray::u32("rows", vec![self.rows.len()], self.rows.clone()),
        ]
    }
}

impl Sketch for GaussianProjection {
    fn params(&self) -> Vec<ParamArray> {
        vec![ParamArray::f32("matrix", vec![self.d_in, self.e], self.at.clone())]
    }
}

impl Sketch for Rff {
    fn params(&self) -> Vec<ParamArray> {
        let f = self.wt.len() / self.d.max(1);
        let mut v = vec![ParamArray::f32("wt", vec![self.d, f], self.wt.clone())];
        if !self.phase.is_empty() {
            v.push(ParamArray::f32("phase", vec![f], self.phase.clone()));
        }
        v
    }
}

fn tree_params(prefix: &str, t: &RecursiveTensorSketch) -> Vec<ParamArray> {
    let mut v = count_sketch_params("leaf_hash", "leaf_sign", &t.leaves);
    let nodes: Vec<CountSketch> = t.nodes.iter().flatten().flat_map(|(a, b)| [a.clone(), b.clone()]).collect();
    if !nodes.is_empty() {
        v.extend(count_sketch_params("node_hash", "node_sign", &nodes));
    }
    v.into_iter().map(|p| p.prefixed(prefix)).collect()
}

#[allow(clippy::expect_used)] // Invariant: the tree consumes Σ⌊width/2⌋·2 ≤ 2(K−1) node sketches, and 2(K−1) were read above.
fn tree_from(p: &Params, prefix: &str, n: usize, k: usize, m: usize) -> PResult<RecursiveTensorSketch> {
    let sub = p.sub(prefix);
    let p = Params(&sub);
    let big_k = k.max(1).next_power_of_two();
    let leaves = p.count_sketches("leaf_hash", "leaf_sign", big_k, n, m)?;
    let mut nodes = Vec::new();
    if big_k > 1 {
        let mut flat = p.count_sketches("node_hash", "node_sign", 2 * (big_k - 1), m, m)?.into_iter();
        let mut width = big_k;
        while width > 1 {
            width /= 2;
            nodes.push((0..width).map(|_| (flat.next().expect("counted"), flat.next().expect("counted"))).collect());
        }
    }
    Ok(RecursiveTensorSketch::from_parts(n, k, m, leaves, nodes))
}

impl Sketch for GaussianSketch {
    fn params(&self) -> Vec<ParamArray> {
        tree_params("", &self.tree)
    }
}

impl Sketch for GaussianSketchHd {
    fn params(&self) -> Vec<ParamArray> {
        self.blocks
            .iter()
            .enumerate()
            .flat_map(|(j, b)| match b {
                HdBlock::Tree(t) => tree_params(&format!("b{}_", j + 1), t),
                HdBlock::Identity => Vec::new(),
            })
            .collect()
    }
}

fn preprocess(center: &[f64], sigma: Option<f64>) -> Result<Preprocess> {
    let sigma = fitted(sigma, "gaussian sketch sigma")?;
    Ok(Preprocess { center: center.to_vec(), scale: (1.0 / (2.0 * sigma * sigma)).sqrt() })
}

impl Sketch for Chi2Series {
    fn params(&self) -> Vec<ParamArray> {
        Vec::new()
    }
}

impl Sketch for Chi2Chebyshev {
    fn params(&self) -> Vec<ParamArray> {
        Vec::new()
    }
}

impl Sketch for ExpChi2 {
    fn params(&self) -> Vec<ParamArray> {
        self.rff.params().into_iter().map(|p| p.prefixed("rff_")).collect()
    }
}

fn rff_from(p: &Params, variant: RffVariant, d: usize, dim: usize) -> PResult<Rff> {
    let f = Rff::frequencies(variant, dim);
    let wt = p.f32("wt", &[d, f])?;
    let phase = match variant {
        RffVariant::Cos => p.f32("phase", &[f])?,
        RffVariant::CosSin => Vec::new(),
    };
    if wt.iter().chain(&phase).any(|v| !v.is_finite()) {
        return Err("RFF parameters must be finite".into());
    }
    Ok(Rff { d, wt, phase, variant })
}

/// The value of a fitted parameter, or an error for an unfitted spec.
fn fitted<T>(v: Option<T>, what: &str) -> Result<T> {
    v.ok_or_else(|| {
        Error::Internal(format!("stage {what} must be fitted on the pre-pass sample before the map is built"))
    })
}

impl Sketch for Craftmaps {
    fn params(&self) -> Vec<ParamArray> {
        let mut v: Vec<ParamArray> = self.up.params().into_iter().map(|p| p.prefixed("up_")).collect();
        v.extend(self.down.params().into_iter().map(|p| p.prefixed("down_")));
        v
    }
}

pub(crate) fn tensor_sketch(
    degree: u32,
    gamma: f64,
    offset: f64,
    d: usize,
    dim: usize,
    rng: &mut StageRng,
) -> TensorSketch {
    TensorSketch::draw(PolyKernel { degree, gamma, offset }, d, dim, rng)
}

fn recursive(degree: u32, gamma: f64, offset: f64, d: usize, dim: usize, rng: &mut StageRng) -> RecursivePoly {
    let n = d + usize::from(offset > 0.0);
    RecursivePoly { tree: RecursiveTensorSketch::draw(n, degree as usize, dim, rng), d, gamma, offset }
}

/// Builds the map of `spec` for inputs of dimension `d`, drawing from `rng`.
pub fn build_map(spec: &StageSpec, d: usize, rng: &mut StageRng) -> Result<Box<dyn Sketch>> {
    Ok(match spec {
        StageSpec::Identity(_) => Box::new(Identity { d }),
        StageSpec::TensorSketch(s) => Box::new(tensor_sketch(s.degree, s.gamma, s.offset, d, s.dim, rng)),
        StageSpec::RandomMaclaurin(s) => Box::new(RandomMaclaurin::draw(
            dot_kernel(s.kernel, s.degree, s.gamma, s.offset),
            d,
            s.dim,
            s.eta,
            s.h01,
            s.hadamard,
            rng,
        )),
        StageSpec::RecursiveTensorSketch(s) => Box::new(recursive(s.degree, s.gamma, s.offset, d, s.dim, rng)),
        StageSpec::Craftmaps(s) => craftmaps::build(s, d, rng),
        StageSpec::Rff(s) => {
            Box::new(Rff::draw(s.kernel, fitted(s.bandwidth(), "rff sigma")?, s.variant, d, s.dim, rng))
        }
        StageSpec::Chi2(s) => Box::new(Chi2Series { d, k: s.k.clone() }),
        StageSpec::Chi2Chebyshev(s) => Box::new(Chi2Chebyshev { d, q: s.terms }),
        StageSpec::GaussianSketch(s) => {
            let t = fitted(s.truncation, "gaussian_sketch truncation")?;
            Box::new(GaussianSketch {
                pre: preprocess(&s.center, s.sigma)?,
                s: t,
                tree: RecursiveTensorSketch::draw(t, d, s.dim, rng),
            })
        }
        StageSpec::GaussianSketchHd(s) => {
            let blocks = s
                .blocks
                .iter()
                .enumerate()
                .map(|(j, &m)| {
                    if j == 0 && s.identity_block {
                        HdBlock::Identity
                    } else {
                        HdBlock::Tree(RecursiveTensorSketch::draw(d, j + 1, m, rng))
                    }
                })
                .collect();
            Box::new(GaussianSketchHd { pre: preprocess(&s.center, s.sigma)?, blocks })
        }
        StageSpec::ExpChi2(s) => {
            let beta = fitted(s.beta, "exp_chi2 beta")?;
            let sigma = 1.0 / (2.0 * beta).sqrt();
            Box::new(ExpChi2 {
                series: Chi2Series { d, k: s.k.clone() },
                rff: Rff::draw(ShiftKernel::Gaussian, sigma, s.variant, d * s.terms, s.dim, rng),
            })
        }
    })
}

pub(crate) fn maclaurin_from(
    kernel: DotKernel,
    d: usize,
    dim: usize,
    eta: f64,
    h01: bool,
    hadamard: bool,
    p: &Params,
) -> PResult<RandomMaclaurin> {
    let h01 = h01 && dim > d + 1 && kernel.coef(0) + kernel.coef(1) > 0.0;
    let n_rand = p.shape("orders")?.first().copied().unwrap_or(0);
    let orders = p.u32("orders", &[n_rand])?;
    let n_min = if h01 { 2 } else { 0 };
    if orders.iter().any(|&n| n < n_min || kernel.coef(n) <= 0.0) {
        return Err("orders outside the kernel's support".into());
    }
    let total: usize = orders.iter().map(|&n| n as usize).sum();
    let proj = if hadamard {
        let zs = p.shape("zeta")?;
        let d_pad = next_pow2(d);
        let t = zs.first().copied().unwrap_or(0);
        let zeta = p.i8("zeta", &[t, d_pad])?;
        let perm = p.u32("perm", &[t * d_pad])?;
        let mut seen = vec![false; t * d_pad];
        if t * d_pad < total
            || perm.iter().any(|&k| k as usize >= seen.len() || std::mem::replace(&mut seen[k as usize], true))
        {
            return Err("perm must be a permutation of the slots".into());
        }
        Projections::Hadamard { d_pad, zeta, perm }
    } else {
        Projections::Dense { signs: p.i8("signs", &[d, total])?.into_iter().map(f32::from).collect() }
    };
    Ok(RandomMaclaurin::from_parts(kernel, d, h01, orders, proj, eta))
}

#[allow(clippy::expect_used)] // Invariant: the tree consumes Σ⌊width/2⌋·2 ≤ 2(K−1) node sketches, and 2(K−1) were read above.
fn recursive_from(degree: u32, gamma: f64, offset: f64, d: usize, m: usize, p: &Params) -> PResult<RecursivePoly> {
    let n = d + usize::from(offset > 0.0);
    let k = degree as usize;
    let big_k = k.next_power_of_two();
    let leaves = p.count_sketches("leaf_hash", "leaf_sign", big_k, n, m)?;
    let mut flat = p.count_sketches("node_hash", "node_sign", 2 * (big_k - 1), m, m)?.into_iter();
    let mut nodes = Vec::new();
    let mut width = big_k;
    while width > 1 {
        width /= 2;
        nodes.push((0..width).map(|_| (flat.next().expect("counted"), flat.next().expect("counted"))).collect());
    }
    Ok(RecursivePoly { tree: RecursiveTensorSketch::from_parts(n, k, m, leaves, nodes), d, gamma, offset })
}

/// Rebuilds the map of `spec` from stored arrays, checking every shape and range.
pub fn map_from_params(
    spec: &StageSpec,
    d: usize,
    params: &[ParamArray],
) -> std::result::Result<Box<dyn Sketch>, crate::container::ContainerError> {
    rebuild(spec, d, params).map_err(crate::container::ContainerError::Inconsistent)
}

fn rebuild(spec: &StageSpec, d: usize, params: &[ParamArray]) -> PResult<Box<dyn Sketch>> {
    let p = Params(params);
    Ok(match spec {
        StageSpec::Identity(_) => Box::new(Identity { d }),
        StageSpec::TensorSketch(s) => {
            let dp = d + usize::from(s.offset > 0.0);
            let sketches = p.count_sketches("hash", "sign", s.degree as usize, dp, s.dim)?;
            Box::new(TensorSketch::from_sketches(
                PolyKernel { degree: s.degree, gamma: s.gamma, offset: s.offset },
                d,
                s.dim,
                sketches,
            ))
        }
        StageSpec::RandomMaclaurin(s) => Box::new(maclaurin_from(
            dot_kernel(s.kernel, s.degree, s.gamma, s.offset),
            d,
            s.dim,
            s.eta,
            s.h01,
            s.hadamard,
            &p,
        )?),
        StageSpec::RecursiveTensorSketch(s) => Box::new(recursive_from(s.degree, s.gamma, s.offset, d, s.dim, &p)?),
        StageSpec::Craftmaps(s) => craftmaps::restore(s, d, &p)?,
        StageSpec::Rff(s) => Box::new(rff_from(&p, s.variant, d, s.dim)?),
        StageSpec::Chi2(s) => {
            if s.k.len() != s.terms {
                return Err("the χ² stage has no fitted k values".into());
            }
            Box::new(Chi2Series { d, k: s.k.clone() })
        }
        StageSpec::Chi2Chebyshev(s) => Box::new(Chi2Chebyshev { d, q: s.terms }),
        StageSpec::GaussianSketch(s) => {
            let t = s.truncation.ok_or("the Gaussian sketch has no fitted truncation")?;
            if s.center.len() != d || s.sigma.is_none() {
                return Err("the Gaussian sketch has no fitted centre or σ".into());
            }
            Box::new(GaussianSketch {
                pre: preprocess(&s.center, s.sigma).map_err(|e| e.to_string())?,
                s: t,
                tree: tree_from(&p, "", t, d, s.dim)?,
            })
        }
        StageSpec::GaussianSketchHd(s) => {
            if s.center.len() != d || s.sigma.is_none() || s.blocks.is_empty() {
                return Err("the Gaussian sketch has no fitted centre, σ or blocks".into());
            }
            let blocks = s
                .blocks
                .iter()
                .enumerate()
                .map(|(j, &m)| {
                    if j == 0 && s.identity_block {
                        Ok(HdBlock::Identity)
                    } else {
                        tree_from(&p, &format!("b{}_", j + 1), d, j + 1, m).map(HdBlock::Tree)
                    }
                })
                .collect::<PResult<Vec<_>>>()?;
            Box::new(GaussianSketchHd { pre: preprocess(&s.center, s.sigma).map_err(|e| e.to_string())?, blocks })
        }
        StageSpec::ExpChi2(s) => {
            if s.k.len() != s.terms || s.beta.is_none() {
                return Err("the exp-χ² stage has no fitted k values or β".into());
            }
            Box::new(ExpChi2 {
                series: Chi2Series { d, k: s.k.clone() },
                rff: rff_from(&Params(&p.sub("rff_")), s.variant, d * s.terms, s.dim)?,
            })
        }
    })
}

/// One built stage: spec and map.
#[derive(Debug)]
pub struct Stage {
    /// The spec it was built from.
    pub spec: StageSpec,
    /// The map with its random parameters.
    pub map: Box<dyn Sketch>,
}

impl Stage {
    /// Builds stage number `index` for inputs of dimension `d`, drawing its
    /// parameters from the stream `(seed, index)`.
    pub fn build(spec: &StageSpec, d: usize, seed: u64, index: usize) -> Result<Stage> {
        let mut rng = StageRng::new(seed, index as u64);
        Ok(Stage { spec: spec.clone(), map: build_map(spec, d, &mut rng)? })
    }

    /// The stage's random parameters as arrays.
    pub fn params(&self) -> Vec<ParamArray> {
        self.map.params()
    }

    /// Rebuilds a stage from its spec and stored arrays.
    pub fn from_params(
        spec: &StageSpec,
        d: usize,
        params: &[ParamArray],
    ) -> std::result::Result<Stage, crate::container::ContainerError> {
        Ok(Stage { spec: spec.clone(), map: map_from_params(spec, d, params)? })
    }

    /// Output dimension.
    pub fn output_dim(&self) -> usize {
        self.map.output_dim()
    }
}

/// The concatenation `z = [w_1 φ_1; …; w_l φ_l]` of a pipeline's stages (math.md §11).
#[derive(Debug)]
pub struct FeaturePipeline {
    stages: Vec<Stage>,
    d: usize,
}

impl FeaturePipeline {
    /// Builds every stage for inputs of dimension `d`.
    pub fn build(specs: &[StageSpec], d: usize, seed: u64) -> Result<Self> {
        let stages = specs.iter().enumerate().map(|(i, s)| Stage::build(s, d, seed, i)).collect::<Result<_>>()?;
        Ok(FeaturePipeline { stages, d })
    }

    /// Wraps already built stages.
    pub fn from_stages(stages: Vec<Stage>, d: usize) -> Self {
        FeaturePipeline { stages, d }
    }

    /// The stages.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// Input dimension.
    pub fn input_dim(&self) -> usize {
        self.d
    }

    /// Total output dimension `Σ D_i`.
    pub fn output_dim(&self) -> usize {
        self.stages.iter().map(Stage::output_dim).sum()
    }

    /// The first negative input (row, column) of a stage that needs non-negative inputs.
    pub fn first_negative(&self, x: &[f32], rows: usize) -> Option<(usize, usize, f32)> {
        if !self.stages.iter().any(|s| s.spec.needs_nonnegative()) {
            return None;
        }
        let d = self.d;
        x[..rows * d].iter().position(|&v| v < 0.0).map(|p| (p / d, p % d, x[p]))
    }

    /// Maps a chunk on up to `threads` threads (contiguous row blocks, so the result
    /// does not depend on the thread count).
    pub fn map_chunk(&self, x: &[f32], rows: usize, out: &mut [f32], threads: usize) {
        let (d, dz) = (self.d, self.output_dim());
        assert!(x.len() >= rows * d && out.len() >= rows * dz, "chunk buffers too small");
        let threads = threads.clamp(1, rows.max(1));
        // Small chunks are not worth a thread.
        if threads == 1 || rows * dz < 1 << 16 {
            self.map_block(&x[..rows * d], rows, &mut out[..rows * dz]);
            return;
        }
        let per = rows.div_ceil(threads);
        std::thread::scope(|scope| {
            for (xb, ob) in x[..rows * d].chunks(per * d).zip(out[..rows * dz].chunks_mut(per * dz)) {
                let n = ob.len() / dz;
                scope.spawn(move || self.map_block(xb, n, ob));
            }
        });
    }

    fn map_block(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (d, dz) = (self.d, self.output_dim());
        let mut normed: Vec<f32> = Vec::new();
        let mut tmp: Vec<f32> = Vec::new();
        let mut col = 0;
        for stage in &self.stages {
            let map = &stage.map;
            let ds = map.output_dim();
            let input: &[f32] = if stage.spec.normalize() == Normalize::None {
                x
            } else {
                normed.clear();
                normed.extend_from_slice(x);
                stage.spec.normalize().apply(&mut normed, d);
                &normed
            };
            let w = stage.spec.weight() as f32;
            if self.stages.len() == 1 {
                map.map(input, rows, out);
                if w != 1.0 {
                    out.iter_mut().for_each(|v| *v *= w);
                }
            } else {
                tmp.resize(rows * ds, 0.0);
                map.map(input, rows, &mut tmp);
                for r in 0..rows {
                    let dst = &mut out[r * dz + col..r * dz + col + ds];
                    for (o, &v) in dst.iter_mut().zip(&tmp[r * ds..(r + 1) * ds]) {
                        *o = v * w;
                    }
                }
            }
            col += ds;
        }
    }
}

#[cfg(test)]
mod defaults_tests {
    use super::*;

    #[test]
    fn code_defaults_equal_the_file_defaults_and_validate() {
        let all = [
            StageSpec::Identity(Default::default()),
            StageSpec::TensorSketch(Default::default()),
            StageSpec::RandomMaclaurin(Default::default()),
            StageSpec::RecursiveTensorSketch(Default::default()),
            StageSpec::Craftmaps(Default::default()),
            StageSpec::Rff(Default::default()),
            StageSpec::Chi2(Default::default()),
            StageSpec::Chi2Chebyshev(Default::default()),
            StageSpec::ExpChi2(Default::default()),
            StageSpec::GaussianSketch(Default::default()),
            StageSpec::GaussianSketchHd(Default::default()),
        ];
        assert_eq!(all.len(), KINDS.len());
        for (spec, kind) in all.iter().zip(KINDS) {
            let table = toml::Table::from_iter([("kind".to_string(), toml::Value::String(kind.to_string()))]);
            assert_eq!(&StageSpec::from_toml(&table, "t", "stages.0").unwrap(), spec, "{kind}");
            spec.validate("t", "stages.0").unwrap();
        }
    }
}
