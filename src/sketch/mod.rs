//! Random-feature maps ("sketches"), one file per family, and their composition.
//!
//! A map is a value built from its spec and a seed. It maps a whole chunk at a time
//! (`x: rows×d` → `z: rows×D`, row-major, caller-owned output), takes `&self` and is
//! `Send + Sync`, so worker threads share one map. Its random parameters are drawn
//! once when it is built and can be exported as arrays for the model file, so a
//! loaded model maps rows to exactly the same features.
//!
//! This module owns the registry: one `families!` line per family generates the
//! [`StageSpec`] enum, [`KINDS`] and every dispatch to the family's `Family` impl.
//! Adding a family is its file (spec struct, `impl Family`, map, `impl Sketch`), one
//! registry line, its section of docs/src/reference/pipeline.md and its tests.

pub mod chi2;
pub mod count;
pub mod craftmaps;
pub mod down;
pub mod exp_chi2;
mod family;
pub mod gaussian;
pub mod hadamard;
pub mod identity;
mod keys;
pub mod maclaurin;
pub mod nystrom;
mod params;
pub mod recursive;
pub mod rff;
mod spectrum;
mod stage;
pub mod tensor;

use serde::{Deserialize, Serialize};

pub use chi2::{chi2_distance, Chi2ChebyshevSpec, Chi2Spec};
pub use craftmaps::{CraftmapsSpec, UpKind};
pub use down::Downed;
pub use exp_chi2::ExpChi2Spec;
pub(crate) use family::{Family, Sample};
pub use gaussian::{GaussianSketchHdSpec, GaussianSketchSpec};
pub use identity::IdentitySpec;
pub(crate) use keys::CommonKeys;
pub use keys::{Checked, DownKind, KeyError, Normalize};
pub use maclaurin::{DotKernel, DotKind, RandomMaclaurinSpec};
pub use nystrom::{NystromKernel, NystromSpec};
pub(crate) use params::{PResult, Params};
pub use params::{ParamArray, ParamData};
pub use recursive::RecursiveSpec;
pub use rff::RffSpec;
pub use stage::{FeaturePipeline, Stage};
pub use tensor::TensorSketchSpec;

use crate::error::{Error, Result};
use crate::rng::StageRng;

/// A feature map over whole chunks.
pub trait ChunkMap: Send + Sync {
    /// Input dimension `d`.
    fn input_dim(&self) -> usize;
    /// Output dimension `D`.
    fn output_dim(&self) -> usize;
    /// Maps `rows` rows of `x` (row-major, `rows × d`) into `out` (`rows × D`).
    fn map(&self, x: &[f32], rows: usize, out: &mut [f32]);
    /// The fewest rows a call should map: more than 1 where each call reads parameters
    /// far larger than a row's features (Nyström's factor).
    fn min_block_rows(&self) -> usize {
        1
    }
    /// The mean of the features of `rows` rows, where the map is linear in something far
    /// cheaper to average than the features (Nyström: `L⁻¹` times the mean kernel row);
    /// `None` for the rest, whose mean is taken over their features.
    fn linear_mean(&self, _x: &[f32], _rows: usize) -> Option<Vec<f64>> {
        None
    }
}

/// A built map whose random parameters can be exported.
pub trait Sketch: ChunkMap + std::fmt::Debug {
    /// The materialised random parameters.
    fn params(&self) -> Vec<ParamArray>;

    /// What the run should say of a map built from data (Nyström's factor), if anything.
    fn fitted_note(&self) -> Option<String> {
        None
    }
}

/// The largest output dimension a stage may ask for (2^20).
pub const MAX_DIM: usize = 1 << 20;

/// The largest truncation the Gaussian sketches fit (math.md §9 warns above 64).
pub const MAX_TRUNCATION: usize = 96;

/// The registry. From one line per family come the [`StageSpec`] enum (tagged by `kind`
/// in pipeline files and model headers), [`KINDS`], the dispatch of every [`StageSpec`]
/// method to the family's [`Family`] impl, `From<…Spec>` for building pipelines in
/// code, and `Default` — the pipeline file's own defaults, read from an empty table with
/// the file's rules, so code and files never disagree.
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

            /// The family's `kind`.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(StageSpec::$variant(_) => $kind,)*
                }
            }

            fn common(&self) -> (Normalize, f64) {
                match self {
                    $(StageSpec::$variant(s) => s.common(),)*
                }
            }

            /// Checks every key; with the input width `d` known, also the keys sized by it.
            pub fn check(&self, d: Option<usize>) -> Checked {
                match self {
                    $(StageSpec::$variant(s) => s.check(d),)*
                }?;
                let (kind, dim) = self.down_keys();
                keys::down_keys_check(kind, dim)
            }

            /// `down` and `down_dim` as given (CRAFTMaps: none; it has its own).
            pub fn down_keys(&self) -> (Option<DownKind>, usize) {
                match self {
                    $(StageSpec::$variant(s) => s.down_keys(),)*
                }
            }

            /// The same stage with its down-projection replaced (`None, 0`: without one).
            pub fn with_down(&self, down: Option<DownKind>, down_dim: usize) -> StageSpec {
                match self {
                    $(StageSpec::$variant(s) => s.with_down(down, down_dim).into(),)*
                }
            }

            /// True when a parameter is still to be fitted on the pre-pass sample.
            pub fn needs_fit(&self) -> bool {
                match self {
                    $(StageSpec::$variant(s) => s.fitted().is_none(),)*
                }
            }

            /// An upper bound on the bytes of the stage's dense random parameters for
            /// inputs of width `d`, its Gaussian down-projection included.
            pub fn param_bytes(&self, d: usize) -> u64 {
                let own = match self {
                    $(StageSpec::$variant(s) => s.dense_param_bytes(d),)*
                };
                let width = match self {
                    $(StageSpec::$variant(s) => s.dim().unwrap_or(d),)*
                } as u64;
                match self.down_keys() {
                    (Some(DownKind::Gaussian), e) => own + 4 * width * e as u64,
                    _ => own,
                }
            }

            /// [`StageSpec::param_bytes`] while the map is being built, where that is
            /// more (a Nyström stage's f64 factor, freed once it is in f32).
            pub fn build_peak_bytes(&self, d: usize) -> u64 {
                let (own, peak) = match self {
                    $(StageSpec::$variant(s) => (s.dense_param_bytes(d), s.build_peak_bytes(d)),)*
                };
                self.param_bytes(d) - own + peak.max(own)
            }

            /// True for stages whose inputs must be non-negative (the χ² family).
            pub fn needs_nonnegative(&self) -> bool {
                match self {
                    $(StageSpec::$variant(_) => <$spec as Family>::NONNEGATIVE,)*
                }
            }

            /// True when the fit leaves arrays that only a built map and a model hold
            /// (Nyström's landmarks): the stage cannot be redrawn from its spec and seed.
            pub fn array_fitted(&self) -> bool {
                match self {
                    $(StageSpec::$variant(_) => <$spec as Family>::ARRAY_FITTED,)*
                }
            }

            /// The sample rows the stage's fit needs at least.
            pub fn sample_rows(&self) -> usize {
                match self {
                    $(StageSpec::$variant(s) => s.sample_rows(),)*
                }
            }

            fn fit_sample(&self, sample: &Sample) -> StageSpec {
                match self {
                    $(StageSpec::$variant(s) => <$spec>::settled(&s.fit(sample)).into(),)*
                }
            }

            /// The kernel the stage approximates (an error before it is fitted).
            pub fn kernel(&self) -> Result<Kernel> {
                match self {
                    $(StageSpec::$variant(s) => s.stored().map(|f| <$spec>::kernel(&f)),)*
                }
                .ok_or_else(|| unfitted(self))
            }

            /// The same stage with output dimension `dim` (for error-versus-dimension sweeps).
            pub fn with_dim(&self, dim: usize) -> StageSpec {
                match self {
                    $(StageSpec::$variant(s) => s.with_dim(dim).into(),)*
                }
            }

            /// The output dimension the stage asks for (identity: none).
            pub fn dim(&self) -> Option<usize> {
                match self {
                    $(StageSpec::$variant(s) => s.dim(),)*
                }
            }

            fn draw(&self, d: usize, rng: &mut StageRng) -> Option<std::result::Result<Box<dyn Sketch>, KeyError>> {
                let map = match self {
                    $(StageSpec::$variant(s) => s.fitted().map(|f| <$spec>::build(&f, d, rng)),)*
                }?;
                Some(down::then_draw(map, self.down_keys(), rng))
            }

            fn restore(&self, d: usize, p: &Params) -> Option<PResult<Box<dyn Sketch>>> {
                let map = match self {
                    $(StageSpec::$variant(s) => s.stored().map(|f| <$spec>::restore(&f, d, p)),)*
                }?;
                Some(map.and_then(|m| down::then_restore(m, self.down_keys(), p)))
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
    "nystrom" => Nystrom(NystromSpec),
}

fn unfitted(spec: &StageSpec) -> Error {
    if spec.array_fitted() {
        return array_fitted(spec);
    }
    Error::bug("a stage is fitted on the pre-pass sample before its map is built or its kernel read")
}

/// What is said where a map would be redrawn from its spec alone (statistics, parts,
/// incremental batches, a feature map's JSON) but a stage's fit left arrays.
pub fn array_fitted(spec: &StageSpec) -> Error {
    Error::config(
        "pipeline",
        "stages",
        format!(
            "the {} stage's landmarks are drawn from the data and live in a model or a maps file, not in statistics, parts or a spec: train it in one run (sketchfit train), or fit a maps file once (sketchfit fit-maps; Pipeline.fit_maps) and give it to every run (--maps, run.maps; maps= in Python)",
            spec.kind()
        ),
    )
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
            Kernel::ExpChi2 { beta } => (-beta * chi2::chi2_distance(x, y)).exp(),
        }
    }
}

/// A family as the registry holds it: its kind, the keys of its stage table (its own,
/// then `normalize`, `weight`, and `down`/`down_dim` where it takes a down-projection),
/// and whether its inputs must be non-negative. Bindings build their transformers from
/// this list, so they never keep a copy of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FamilyInfo {
    /// `kind` in pipeline files.
    pub kind: &'static str,
    /// The stage keys, sorted.
    pub keys: Vec<String>,
    /// Its inputs must be non-negative (the χ² family).
    pub nonnegative: bool,
    /// The pipeline file's default of each key that has one (keys fitted or derived
    /// when absent, such as `sigma`, have none).
    pub defaults: serde_json::Map<String, serde_json::Value>,
}

/// Every family of the registry, in its order.
pub fn families() -> Vec<FamilyInfo> {
    KINDS
        .iter()
        .filter_map(|&kind| {
            let table = |extra: &[(&str, toml::Value)]| {
                let mut t = toml::Table::new();
                t.insert("kind".into(), toml::Value::String(kind.into()));
                for (k, v) in extra {
                    t.insert((*k).into(), v.clone());
                }
                t
            };
            // With a down-projection asked, the keys a family takes it by serialise too.
            let down = [("down", toml::Value::String("srht".into())), ("down_dim", toml::Value::Integer(1))];
            let spec = StageSpec::from_toml(&table(&down), "registry", "stage")
                .or_else(|_| StageSpec::from_toml(&table(&[]), "registry", "stage"))
                .ok()?;
            let value = serde_json::to_value(&spec).ok()?;
            let keys = value.as_object()?.keys().filter(|k| *k != "kind").cloned().collect();
            let plain = StageSpec::from_toml(&table(&[]), "registry", "stage").ok()?;
            let mut defaults = serde_json::to_value(&plain).ok()?.as_object()?.clone();
            defaults.retain(|k, v| k != "kind" && !v.is_null());
            Some(FamilyInfo { kind, keys, nonnegative: spec.needs_nonnegative(), defaults })
        })
        .collect()
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
        let value = toml::Value::Table(rest.clone());
        // Names the key, not just the stage: the first key that fails on its own.
        let bad = |e: toml::de::Error| {
            for (k, v) in &rest {
                let one = toml::Value::Table(toml::Table::from_iter([(k.clone(), v.clone())]));
                if let Some(Err(e1)) = StageSpec::parse_kind(&kind, one) {
                    return Error::config(file, format!("{at}.{k}"), format!("stage kind '{kind}': {}", e1.message()));
                }
            }
            Error::config(file, at, format!("stage kind '{kind}': {}", e.message()))
        };
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

    /// Checks every key's range (without the input width), naming the key on failure.
    pub fn validate(&self, file: &str, at: &str) -> Result<()> {
        self.check(None).map_err(|e| Error::config(file, format!("{at}.{}", e.key), e.message))
    }

    /// Checks every key for stage `index` of a pipeline over `d` input columns.
    pub fn check_width(&self, d: usize, index: usize) -> Result<()> {
        self.check(Some(d)).map_err(|e| Error::config("pipeline", format!("stages.{index}.{}", e.key), e.message))
    }

    /// Fills the data-dependent parameters from the pre-pass sample `x` (`n × d`, raw
    /// rows; the stage's normalisation is applied here), drawing the sample's pairs from
    /// the stream `(seed, 2^32 + index)`. A fitted stage comes back as it is.
    pub fn fit(&self, x: &[f32], d: usize, seed: u64, index: usize) -> Result<StageSpec> {
        self.check_width(d, index)?;
        if !self.needs_fit() {
            return Ok(self.clone());
        }
        let sample = Sample::new(x, d, self.normalize(), seed, index);
        if sample.n < self.sample_rows() {
            return Err(Error::config(
                "pipeline",
                format!("stages.{index}.dim"),
                format!(
                    "{} landmarks need as many sample rows, but the sample has {} (all the rows of data this small): lower dim to at most {}",
                    self.sample_rows(),
                    sample.n,
                    sample.n
                ),
            ));
        }
        Ok(self.fit_sample(&sample))
    }

    /// Input normalisation.
    pub fn normalize(&self) -> Normalize {
        self.common().0
    }

    /// Weight in a concatenation.
    pub fn weight(&self) -> f64 {
        self.common().1
    }
}

/// Builds the map of a fitted `spec` for inputs of dimension `d`, drawing from `rng`.
pub fn build_map(spec: &StageSpec, d: usize, rng: &mut StageRng) -> Result<Box<dyn Sketch>> {
    let key = |e: KeyError| Error::config("pipeline", format!("stage.{}", e.key), e.message);
    spec.check(Some(d)).map_err(key)?;
    spec.draw(d, rng).ok_or_else(|| unfitted(spec))?.map_err(key)
}

/// Rebuilds the map of `spec` from stored arrays, checking every shape and range.
pub fn map_from_params(
    spec: &StageSpec,
    d: usize,
    params: &[ParamArray],
) -> std::result::Result<Box<dyn Sketch>, crate::container::ContainerError> {
    use crate::container::ContainerError::Inconsistent;
    spec.check(Some(d)).map_err(|e| Inconsistent(format!("stage key '{}' {}", e.key, e.message)))?;
    match spec.restore(d, &Params(params)) {
        Some(map) => map.map_err(Inconsistent),
        None => Err(Inconsistent(format!("the {} stage has no fitted parameters", spec.kind()))),
    }
}

#[cfg(test)]
mod defaults_tests;
