//! Random-feature maps ("sketches"), one file per family, and their composition.
//!
//! A map is a value built from its spec and a seed. It maps a whole chunk at a time
//! (`x: rows×d` → `z: rows×D`, row-major, caller-owned output), takes `&self` and is
//! `Send + Sync`, so worker threads share one map. Its random parameters are drawn
//! once when it is built and can be exported as arrays for the model file, so a
//! loaded model maps rows to exactly the same features.

pub mod count;
pub mod identity;
pub mod tensor;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rng::StageRng;
use count::CountSketch;
use identity::Identity;
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
    fn apply(self, x: &mut [f32], d: usize) {
        if self == Normalize::None || d == 0 {
            return;
        }
        for row in x.chunks_exact_mut(d) {
            let norm: f64 = match self {
                Normalize::L1 => row.iter().map(|&v| f64::from(v).abs()).sum(),
                Normalize::L2 => row
                    .iter()
                    .map(|&v| f64::from(v) * f64::from(v))
                    .sum::<f64>()
                    .sqrt(),
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

/// One stage of a pipeline, as written in the pipeline file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StageSpec {
    /// See [`IdentitySpec`].
    Identity(IdentitySpec),
    /// See [`TensorSketchSpec`].
    TensorSketch(TensorSketchSpec),
}

/// The largest output dimension a stage may ask for (2^20).
pub const MAX_DIM: usize = 1 << 20;

impl StageSpec {
    /// Builds a stage spec from its TOML table, with errors that name the key.
    pub fn from_toml(table: &toml::Table, file: &str, at: &str) -> Result<Self> {
        let kind = match table.get("kind") {
            Some(toml::Value::String(k)) => k.clone(),
            Some(_) => {
                return Err(Error::config(
                    file,
                    format!("{at}.kind"),
                    "must be a string",
                ))
            }
            None => {
                return Err(Error::config(
                    file,
                    format!("{at}.kind"),
                    "missing; every stage needs kind = \"identity\" or \"tensor_sketch\"",
                ))
            }
        };
        let mut rest = table.clone();
        rest.remove("kind");
        let value = toml::Value::Table(rest);
        let bad = |e: toml::de::Error| {
            Error::config(file, at, format!("stage kind '{kind}': {}", e.message()))
        };
        let spec = match kind.as_str() {
            "identity" => StageSpec::Identity(value.try_into().map_err(bad)?),
            "tensor_sketch" => StageSpec::TensorSketch(value.try_into().map_err(bad)?),
            other => {
                return Err(Error::config(
                    file,
                    format!("{at}.kind"),
                    format!("unknown stage kind '{other}'; known kinds: identity, tensor_sketch"),
                ))
            }
        };
        spec.validate(file, at)?;
        Ok(spec)
    }

    /// Checks every parameter's range.
    pub fn validate(&self, file: &str, at: &str) -> Result<()> {
        let err = |key: &str, msg: String| Err(Error::config(file, format!("{at}.{key}"), msg));
        let weight = match self {
            StageSpec::Identity(s) => s.weight,
            StageSpec::TensorSketch(s) => s.weight,
        };
        if !(weight.is_finite() && weight > 0.0) {
            return err("weight", format!("must be a positive number, got {weight}"));
        }
        if let StageSpec::TensorSketch(s) = self {
            if s.degree == 0 || s.degree > 16 {
                return err(
                    "degree",
                    format!("must be an integer from 1 to 16, got {}", s.degree),
                );
            }
            if !(s.gamma.is_finite() && s.gamma > 0.0) {
                return err(
                    "gamma",
                    format!("must be a positive number, got {}", s.gamma),
                );
            }
            if !(s.offset.is_finite() && s.offset >= 0.0) {
                return err("offset", format!("must be a number ≥ 0, got {}", s.offset));
            }
            if s.dim < 2 || s.dim > MAX_DIM {
                return err("dim", format!("must be from 2 to {MAX_DIM}, got {}", s.dim));
            }
        }
        Ok(())
    }

    fn normalize(&self) -> Normalize {
        match self {
            StageSpec::Identity(s) => s.normalize,
            StageSpec::TensorSketch(s) => s.normalize,
        }
    }

    fn weight(&self) -> f64 {
        match self {
            StageSpec::Identity(s) => s.weight,
            StageSpec::TensorSketch(s) => s.weight,
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
    /// Hash values.
    U32(Vec<u32>),
    /// Signs.
    I8(Vec<i8>),
}

/// The map of a stage.
#[derive(Debug)]
pub enum StageMap {
    /// `z = x`.
    Identity(Identity),
    /// Tensor sketch.
    TensorSketch(TensorSketch),
}

impl StageMap {
    fn as_map(&self) -> &dyn FeatureMap {
        match self {
            StageMap::Identity(m) => m,
            StageMap::TensorSketch(m) => m,
        }
    }
}

/// One built stage: normalisation, map, weight.
#[derive(Debug)]
pub struct Stage {
    /// The spec it was built from.
    pub spec: StageSpec,
    /// The map with its random parameters.
    pub map: StageMap,
}

impl Stage {
    /// Builds stage number `index` for inputs of dimension `d`, drawing its
    /// parameters from the stream `(seed, index)`.
    pub fn build(spec: &StageSpec, d: usize, seed: u64, index: usize) -> Stage {
        let mut rng = StageRng::new(seed, index as u64);
        let map = match spec {
            StageSpec::Identity(_) => StageMap::Identity(Identity { d }),
            StageSpec::TensorSketch(s) => StageMap::TensorSketch(TensorSketch::draw(
                PolyKernel {
                    degree: s.degree,
                    gamma: s.gamma,
                    offset: s.offset,
                },
                d,
                s.dim,
                &mut rng,
            )),
        };
        Stage {
            spec: spec.clone(),
            map,
        }
    }

    /// The stage's random parameters as arrays.
    pub fn params(&self) -> Vec<ParamArray> {
        match &self.map {
            StageMap::Identity(_) => Vec::new(),
            StageMap::TensorSketch(ts) => {
                let p = ts.sketches().len();
                let dp = ts.sketches().first().map_or(0, CountSketch::input_dim);
                vec![
                    ParamArray {
                        name: "hash".into(),
                        shape: vec![p, dp],
                        data: ParamData::U32(
                            ts.sketches().iter().flat_map(|c| c.hash.clone()).collect(),
                        ),
                    },
                    ParamArray {
                        name: "sign".into(),
                        shape: vec![p, dp],
                        data: ParamData::I8(
                            ts.sketches().iter().flat_map(|c| c.sign.clone()).collect(),
                        ),
                    },
                ]
            }
        }
    }

    /// Rebuilds a stage from its spec and stored arrays, checking every shape and range.
    pub fn from_params(
        spec: &StageSpec,
        d: usize,
        params: &[ParamArray],
    ) -> std::result::Result<Stage, String> {
        let find = |name: &str| {
            params
                .iter()
                .find(|p| p.name == name)
                .ok_or_else(|| format!("missing array '{name}'"))
        };
        let map = match spec {
            StageSpec::Identity(_) => StageMap::Identity(Identity { d }),
            StageSpec::TensorSketch(s) => {
                let dp = d + usize::from(s.offset > 0.0);
                let p = s.degree as usize;
                let (hash, sign) = (find("hash")?, find("sign")?);
                let (ParamData::U32(h), ParamData::I8(g)) = (&hash.data, &sign.data) else {
                    return Err("hash must be u32 and sign i8".into());
                };
                if hash.shape != [p, dp]
                    || sign.shape != [p, dp]
                    || h.len() != p * dp
                    || g.len() != p * dp
                {
                    return Err(format!("hash and sign must have shape [{p}, {dp}]"));
                }
                if h.iter().any(|&v| v as usize >= s.dim) || g.iter().any(|&v| v != 1 && v != -1) {
                    return Err("hash values must lie in [0, dim) and signs be ±1".into());
                }
                let sketches = (0..p)
                    .map(|j| CountSketch {
                        hash: h[j * dp..(j + 1) * dp].to_vec(),
                        sign: g[j * dp..(j + 1) * dp].to_vec(),
                        dim: s.dim,
                    })
                    .collect();
                let kernel = PolyKernel {
                    degree: s.degree,
                    gamma: s.gamma,
                    offset: s.offset,
                };
                StageMap::TensorSketch(TensorSketch::from_sketches(kernel, d, s.dim, sketches))
            }
        };
        Ok(Stage {
            spec: spec.clone(),
            map,
        })
    }

    /// Output dimension.
    pub fn output_dim(&self) -> usize {
        self.map.as_map().output_dim()
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
    pub fn build(specs: &[StageSpec], d: usize, seed: u64) -> Self {
        let stages = specs
            .iter()
            .enumerate()
            .map(|(i, s)| Stage::build(s, d, seed, i))
            .collect();
        FeaturePipeline { stages, d }
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

    /// Maps a chunk on up to `threads` threads (contiguous row blocks, so the result
    /// does not depend on the thread count).
    pub fn map_chunk(&self, x: &[f32], rows: usize, out: &mut [f32], threads: usize) {
        let (d, dz) = (self.d, self.output_dim());
        assert!(
            x.len() >= rows * d && out.len() >= rows * dz,
            "chunk buffers too small"
        );
        let threads = threads.clamp(1, rows.max(1));
        // Small chunks are not worth a thread.
        if threads == 1 || rows * dz < 1 << 16 {
            self.map_block(&x[..rows * d], rows, &mut out[..rows * dz]);
            return;
        }
        let per = rows.div_ceil(threads);
        std::thread::scope(|scope| {
            for (xb, ob) in x[..rows * d]
                .chunks(per * d)
                .zip(out[..rows * dz].chunks_mut(per * dz))
            {
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
            let map = stage.map.as_map();
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
