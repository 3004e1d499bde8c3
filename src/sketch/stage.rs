//! Built stages and their concatenation: the per-row input normalisation, a stage
//! (spec and map), and the feature pipeline `z = [w_1 φ_1; …; w_l φ_l]` that maps
//! whole chunks on worker threads.

use super::keys::Normalize;
use super::{build_map, map_from_params, ParamArray, Sketch, StageSpec};
use crate::error::{Error, Result};
use crate::rng::StageRng;

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
        let map = build_map(spec, d, &mut rng).map_err(|e| match e {
            // `build_map` knows no index: name the stage (`stages.N.down_dim`).
            Error::Config { file, key, message } => {
                let key = key.strip_prefix("stage.").map_or(key.clone(), |k| format!("stages.{index}.{k}"));
                Error::Config { file, key, message }
            }
            other => other,
        })?;
        Ok(Stage { spec: spec.clone(), map })
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

    /// The mean features of the rows of `x` (the accumulator shift), stage by stage: by
    /// the map's linear mean where it has one (Nyström: `L⁻¹` times the mean kernel row,
    /// `2Md` flops a row instead of the features' `M²`), else over its features in blocks
    /// of at most 256 rows and 64 MiB, each block's rows over `threads`. The sums run row
    /// by row in order, so the mean is the same for any block size or thread count.
    pub fn mean_features(&self, x: &[f32], threads: usize) -> Vec<f64> {
        let d = self.d.max(1);
        let n = x.len() / d;
        let mut out = Vec::with_capacity(self.output_dim());
        let mut normed: Vec<f32> = Vec::new();
        for stage in &self.stages {
            let input: &[f32] = if stage.spec.normalize() == Normalize::None {
                &x[..n * d]
            } else {
                normed.clear();
                normed.extend_from_slice(&x[..n * d]);
                stage.spec.normalize().apply(&mut normed, d);
                &normed
            };
            let mut mean =
                stage.map.linear_mean(input, n).unwrap_or_else(|| feature_mean(&*stage.map, input, n, threads));
            let w = stage.spec.weight();
            mean.iter_mut().for_each(|v| *v *= w);
            out.extend(mean);
        }
        out
    }

    /// The fewest rows a mapping call should take (the largest any stage asks).
    pub fn min_block_rows(&self) -> usize {
        self.stages.iter().map(|s| s.map.min_block_rows()).max().unwrap_or(1)
    }

    /// Whether a stage needs non-negative inputs (the χ² family).
    pub fn needs_nonnegative(&self) -> bool {
        self.stages.iter().any(|s| s.spec.needs_nonnegative())
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

/// The mean of one map's features over the `n` rows of `x`: see
/// [`FeaturePipeline::mean_features`].
fn feature_mean(map: &dyn Sketch, x: &[f32], n: usize, threads: usize) -> Vec<f64> {
    let (d, ds) = (map.input_dim().max(1), map.output_dim());
    let mut sum = vec![0.0f64; ds];
    let block = ((64usize << 20) / (4 * ds.max(1))).clamp(1, 256);
    let mut z = vec![0f32; block * ds];
    for xb in x[..n * d].chunks(block * d) {
        let rows = xb.len() / d;
        let zb = &mut z[..rows * ds];
        let per = rows.div_ceil(threads.clamp(1, rows.max(1)));
        std::thread::scope(|scope| {
            for (xs, zs) in xb.chunks(per * d).zip(zb.chunks_mut(per * ds)) {
                scope.spawn(move || map.map(xs, xs.len() / d, zs));
            }
        });
        for row in zb.chunks_exact(ds.max(1)) {
            sum.iter_mut().zip(row).for_each(|(s, &v)| *s += f64::from(v));
        }
    }
    sum.iter_mut().for_each(|s| *s /= n.max(1) as f64);
    sum
}
