//! `kernel-error`: how well each stage's features reproduce its exact kernel on a
//! uniform sample of rows, as `NRMS = ‖K̂ − K‖_F / ‖K‖_F` (math.md §14) with its spread
//! over seeds, the mean and max absolute error and the mapping time per row, and
//! optionally the NRMS against the output dimension.

use crate::session::Session;
use std::fmt::Write as _;
use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::stream::reservoir;
use crate::plot::{Chart, Series, XAxis};
use crate::sketch::{Stage, StageSpec};
use crate::source::Dataset;

/// Errors of one stage at one dimension.
#[derive(Debug, Clone, Serialize)]
pub struct StageError {
    /// Stage position.
    pub stage: usize,
    /// Stage kind and parameters.
    pub spec: StageSpec,
    /// Output dimension.
    pub dim: usize,
    /// NRMS per seed.
    pub nrms: Vec<f64>,
    /// Mean NRMS.
    pub nrms_mean: f64,
    /// Standard deviation of the NRMS over seeds.
    pub nrms_sd: f64,
    /// Mean absolute error of `K̂` (averaged over seeds).
    pub mean_abs: f64,
    /// Largest absolute error of `K̂` over seeds.
    pub max_abs: f64,
    /// Microseconds per row to map (mean over seeds, one thread).
    pub us_per_row: f64,
    /// With a down-projection: the mean NRMS of the stage's own map without it, so the
    /// error the projection adds is `nrms_mean − before_down`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_down: Option<f64>,
    /// On a sweep point: the dimension the sweep asked for, when the fitted map came out
    /// at another (`dim` is always what was measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<usize>,
}

/// The report of `kernel-error`.
#[derive(Debug, Clone, Serialize)]
pub struct KernelErrorReport {
    /// Rows in the sample.
    pub rows: usize,
    /// Seeds per stage.
    pub seeds: usize,
    /// One entry per stage at its own dimension.
    pub stages: Vec<StageError>,
    /// NRMS against dimension (when asked for): every stage at `D/16 … D`.
    pub sweep: Vec<StageError>,
}

fn normalized(spec: &StageSpec, x: &[f32], d: usize) -> Vec<f32> {
    let mut v = x.to_vec();
    spec.normalize().apply(&mut v, d);
    v
}

/// The sample and the exact kernel matrix of one stage.
struct Sample<'a> {
    x: &'a [f32],
    n: usize,
    d: usize,
    exact: &'a [f64],
}

#[allow(clippy::expect_used)] // Invariant: the sample's features are n × dim by construction.
fn measure(spec: &StageSpec, index: usize, sample: &Sample, seeds: usize, base_seed: u64) -> Result<StageError> {
    let Sample { x, n, d, exact } = *sample;
    let w2 = spec.weight() * spec.weight();
    let xn = normalized(spec, x, d);
    let (mut nrms, mut mean_abs, mut max_abs, mut secs) = (Vec::new(), 0.0, 0.0f64, 0.0);
    let mut dim = 0;
    let den: f64 = exact.iter().map(|k| (w2 * k).powi(2)).sum::<f64>().sqrt();
    for s in 0..seeds {
        let stage = Stage::build(spec, d, base_seed.wrapping_add(s as u64), index)?;
        dim = stage.output_dim();
        let mut z = vec![0f32; n * dim];
        let t = Instant::now();
        stage.map.map(&xn, n, &mut z);
        secs += t.elapsed().as_secs_f64();
        let w = stage.spec.weight() as f32;
        z.iter_mut().for_each(|v| *v *= w);
        let zv = ndarray::ArrayView2::from_shape((n, dim), &z[..]).expect("shape");
        let khat = zv.dot(&zv.t());
        let (mut num, mut abs) = (0.0, 0.0);
        for (i, &e) in exact.iter().enumerate() {
            let err = (f64::from(khat[(i / n, i % n)]) - w2 * e).abs();
            num += err * err;
            abs += err;
            max_abs = max_abs.max(err);
        }
        nrms.push(if den > 0.0 { num.sqrt() / den } else { 0.0 });
        mean_abs += abs / exact.len() as f64;
    }
    let m = nrms.iter().sum::<f64>() / seeds as f64;
    let sd =
        if seeds > 1 { (nrms.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (seeds - 1) as f64).sqrt() } else { 0.0 };
    Ok(StageError {
        stage: index,
        spec: spec.clone(),
        dim,
        nrms,
        nrms_mean: m,
        nrms_sd: sd,
        mean_abs: mean_abs / seeds as f64,
        max_abs,
        us_per_row: secs / seeds as f64 / n as f64 * 1e6,
        before_down: None,
        requested: None,
    })
}

/// Runs the comparison on `inputs` (or the pipeline's training files).
pub fn kernel_error(
    session: &Session,
    checked: &CheckedPipeline,
    inputs: &[std::path::PathBuf],
    sample: usize,
    seeds: usize,
    sweep: bool,
) -> Result<KernelErrorReport> {
    if sample < 2 || seeds == 0 {
        return Err(Error::usage("--sample/--seeds", "need at least 2 rows and 1 seed"));
    }
    let spec = checked.spec();
    let files = if inputs.is_empty() { &spec.data.train } else { inputs };
    let ds = Dataset::open(session, files, checked.feature_only_columns())?;
    let d = ds.dim();
    let x = reservoir(&ds, sample, spec.run.seed, spec.run.chunk_rows, &mut |_| Ok(()))?;
    let n = x.len() / d;
    let mut stages = Vec::new();
    let mut curve = Vec::new();
    for (i, st) in spec.stages.iter().enumerate() {
        let st = &st.fit(&x, d, spec.run.seed, i)?;
        let xn = normalized(st, &x, d);
        let k = st.kernel()?;
        let exact: Vec<f64> = (0..n * n)
            .map(|ij| k.eval(&xn[(ij / n) * d..(ij / n + 1) * d], &xn[(ij % n) * d..(ij % n + 1) * d]))
            .collect();
        let smp = Sample { x: &x, n, d, exact: &exact };
        let mut e = measure(st, i, &smp, seeds, spec.run.seed)?;
        let (down, down_dim) = st.down_keys();
        if down.is_some() {
            e.before_down = Some(measure(&st.with_down(None, 0), i, &smp, seeds, spec.run.seed)?.nrms_mean);
        }
        if sweep {
            // With a down-projection the sweep varies its dimension, the stage's own map
            // fixed; otherwise the stage's dimension. The last point is the stage itself.
            let full = if down.is_some() { Some(down_dim) } else { st.dim() };
            if let Some(full) = full {
                let own = e.dim;
                let mut points: Vec<StageError> = Vec::new();
                for j in (1..=4).rev() {
                    let dim = (full >> j).max(2);
                    // A smaller dimension can clear fitted sizes (the HD sketch's blocks):
                    // fit again, so every sweep point measures the map it names.
                    let s = if down.is_some() { st.with_down(down, dim) } else { st.with_dim(dim) };
                    let s = s.fit(&x, d, spec.run.seed, i)?;
                    if s.validate("kernel-error", "stage").is_err() {
                        continue;
                    }
                    let mut p = measure(&s, i, &smp, seeds, spec.run.seed)?;
                    // A family with a floor (the HD sketch's degree-1 block has d + 1
                    // features) can come out larger than asked: keep the point under
                    // the size it has, and only while it is a smaller map than the next.
                    if p.dim != dim {
                        p.requested = Some(dim);
                    }
                    if p.dim < own && points.last().is_none_or(|q| q.dim < p.dim) {
                        points.push(p);
                    }
                }
                points.push(e.clone());
                curve.extend(points);
            }
        }
        stages.push(e);
    }
    Ok(KernelErrorReport { rows: n, seeds, stages, sweep: curve })
}

impl KernelErrorReport {
    /// A text table.
    pub fn to_text(&self) -> String {
        let mut s = format!("{} rows, {} seeds per stage\n", self.rows, self.seeds);
        s += "stage  kind                      D      NRMS mean ± sd        mean |err|   max |err|    µs/row\n";
        for e in &self.stages {
            let _ = writeln!(
                s,
                "{:>5}  {:<24} {:>6}  {:.4e} ± {:.2e}  {:.3e}   {:.3e}   {:8.2}",
                e.stage,
                e.spec.kind(),
                e.dim,
                e.nrms_mean,
                e.nrms_sd,
                e.mean_abs,
                e.max_abs,
                e.us_per_row
            );
            if let Some(b) = e.before_down {
                let _ = writeln!(
                    s,
                    "       without its down-projection: NRMS {b:.4e}; the projection adds {:.4e}",
                    e.nrms_mean - b
                );
            }
        }
        let resized: Vec<&StageError> = self.sweep.iter().filter(|e| e.requested.is_some()).collect();
        if !resized.is_empty() {
            s += "sweep points measured at another dimension than asked (the family's fitted minimum):\n";
            for e in resized {
                let _ =
                    writeln!(s, "  stage {} asked D = {}, measured D = {}", e.stage, e.requested.unwrap_or(0), e.dim);
            }
        }
        s
    }

    /// An SVG plot of NRMS against dimension (log–log), one line per stage.
    pub fn to_svg(&self) -> String {
        // A stage that is exact everywhere (NRMS 0) has nothing to draw on a log axis.
        let mut stages: Vec<usize> = self.sweep.iter().filter(|e| e.nrms_mean > 0.0).map(|e| e.stage).collect();
        stages.dedup();
        let series = stages
            .iter()
            .map(|&st| {
                let of: Vec<&StageError> = self.sweep.iter().filter(|e| e.stage == st).collect();
                Series {
                    name: format!("stage {st}: {}", of.first().map(|e| e.spec.kind()).unwrap_or_default()),
                    points: of.iter().map(|e| (e.dim as f64, e.nrms_mean)).collect(),
                    mark: None,
                    dots: true,
                }
            })
            .collect();
        Chart {
            title: format!("kernel approximation error ({} rows, {} seeds)", self.rows, self.seeds),
            x_label: "output dimension D".into(),
            y_label: "NRMS ‖K̂−K‖/‖K‖".into(),
            x_axis: XAxis::Log2,
            series,
            max_decades: f64::INFINITY,
        }
        .svg()
    }
}
