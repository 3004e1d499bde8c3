use std::path::PathBuf;

use sketchfit::api::commands::{mmd, MmdOptions, Sketching};
use sketchfit::error::{Error, Result};
use sketchfit::sketch::{GaussianSketchHdSpec, StageSpec};
use sketchfit::source::{ColumnSpec, FeatureColumns};
use sketchfit::Session;

/// Options shared by `mmd` and `embed`: which columns and which sketch.
#[derive(Debug, clap::Args)]
pub struct SketchArgs {
    /// Take the feature columns and stages from this pipeline file.
    #[arg(long)]
    pipeline: Option<PathBuf>,
    /// Feature columns by name or glob (default: every numeric column).
    #[arg(long, num_args = 1..)]
    features: Vec<String>,
    /// Bandwidth σ of the default GaussianSketchHD (default: median pairwise distance).
    #[arg(long)]
    sigma: Option<f64>,
    /// Dimension of the default GaussianSketchHD.
    #[arg(long, default_value_t = 4096)]
    dim: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rows in the pre-pass sample.
    #[arg(long, default_value_t = 10_000)]
    sample_rows: usize,
}

impl SketchArgs {
    pub fn setup(&self, session: &Session, threads: usize) -> Result<Sketching> {
        if let Some(p) = &self.pipeline {
            let spec = super::load_pipeline(session, p, &[])?;
            let cols = spec.check()?.feature_only_columns();
            return Ok(Sketching {
                cols,
                stages: spec.stages.clone(),
                seed: spec.run.seed,
                sample_rows: spec.run.sample_rows,
                chunk_rows: spec.run.chunk_rows,
                threads,
            });
        }
        let stage = StageSpec::GaussianSketchHd(GaussianSketchHdSpec {
            sigma: self.sigma,
            dim: self.dim,
            ..Default::default()
        });
        stage.validate("--sigma/--dim", "--sigma/--dim").map_err(|e| match e {
            Error::Config { message, .. } => Error::usage("--sigma/--dim", message),
            other => other,
        })?;
        Ok(Sketching {
            cols: ColumnSpec {
                features: FeatureColumns::Columns(self.features.clone()),
                label: None,
                targets: Vec::new(),
                keep: Vec::new(),
                null_labels_unlabeled: false,
            },
            stages: vec![stage],
            seed: self.seed,
            sample_rows: self.sample_rows,
            chunk_rows: 8192,
            threads,
        })
    }
}

/// `sketchfit mmd --a FILES --b FILES`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The first point set (Parquet files or globs).
    #[arg(long, required = true, num_args = 1..)]
    a: Vec<PathBuf>,
    /// The second point set.
    #[arg(long, required = true, num_args = 1..)]
    b: Vec<PathBuf>,
    #[command(flatten)]
    sketch: SketchArgs,
    /// Permutations of the two-sample test.
    #[arg(long, default_value_t = 999)]
    permutations: usize,
    /// Rows per set kept for the permutation test (a uniform subsample).
    #[arg(long, default_value_t = 2000)]
    cap: usize,
    /// Also compute the exact kernel distance (at most 20,000 rows in all).
    #[arg(long)]
    exact: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    if a.permutations == 0 || a.cap < 2 {
        return Err(Error::usage("--permutations/--cap", "need at least 1 permutation and 2 rows per set"));
    }
    let s = a.sketch.setup(session, super::threads(a.threads))?;
    let opts = MmdOptions { permutations: a.permutations, cap: a.cap, exact: a.exact, threads: s.threads };
    let r = mmd(session, &a.a, &a.b, &s, &opts)?;
    let text = if a.json {
        serde_json::to_string_pretty(&r).map_err(|e| Error::bug_from("the report serialises", e))? + "\n"
    } else {
        let mut t = format!(
            "rows: A {}, B {}\nsketch dimension: {}\nkernel distance D(A, B): {:.6e}\nD²: {:.6e}\nMMD²_u: {:.6e}\n",
            r.rows.0, r.rows.1, r.dim, r.kernel_distance, r.kernel_distance_sq, r.mmd2_unbiased
        );
        if let Some(sd) = r.relative_sd_estimate {
            t += &format!("relative SD of D² (from the blocks' contributions): {sd:.3e}\n");
        }
        if let Some(sd) = r.relative_sd_bound {
            t += &format!("relative SD of D² (worst-block bound): {sd:.3}\n");
        }
        t += &format!(
            "p-value: {:.4} ({} permutations of {} + {} rows)\n",
            r.p_value, r.permutations, r.test_rows.0, r.test_rows.1
        );
        if let Some(e) = r.exact_distance_sq {
            t += &format!("exact D²: {e:.6e} (sketched/exact {:.4})\n", r.kernel_distance_sq / e);
        }
        t
    };
    super::print_out(&text)
}
