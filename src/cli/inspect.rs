use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::model::Model;

/// `sketchfit inspect MODEL`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file.
    model: PathBuf,
    /// Print the whole header as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let model = Model::load(&a.model)?;
    let h = &model.header;
    if a.json {
        let text = serde_json::to_string_pretty(h).map_err(|e| Error::Numerical(e.to_string()))?;
        return super::print_out(&(text + "\n"));
    }
    let size = std::fs::metadata(&a.model).map(|m| m.len()).unwrap_or(0);
    let mut s = format!(
        "model: {} ({size} bytes, format {} v{}, written by sketchfit {})\n",
        a.model.display(),
        h.format,
        h.version,
        h.written_by
    );
    s += &format!("task: {:?}, trained on {} rows, seed {}\n", h.task, h.rows, h.seed);
    let f = &h.features;
    let cols = if f.list {
        format!("list column '{}'", f.columns[0])
    } else if f.columns.len() > 6 {
        format!("{} … {} ({} columns)", f.columns[..3].join(", "), f.columns[f.columns.len() - 1], f.columns.len())
    } else {
        f.columns.join(", ")
    };
    s += &format!("features: d = {}, {cols}\n", f.dim);
    if let Some(c) = &h.classes {
        s += &format!("classes ({}): {}\n", c.len(), (0..c.len()).map(|k| c.name(k)).collect::<Vec<_>>().join(", "));
    } else {
        s += &format!("targets: {}\n", h.targets.join(", "));
    }
    for (i, st) in h.stages.iter().enumerate() {
        s += &format!("stage {i}: {}\n", serde_json::to_string(st).unwrap_or_default());
    }
    s += &format!(
        "features D = {}, PCA components {} (asked {}), outputs {}\n",
        h.dim, h.components, h.components_requested, h.outputs
    );
    s += &format!(
        "lambda: {}{}\n",
        crate::pipeline::train::lambda_text(&h.lambdas),
        if h.gcv.is_some() { " (GCV)" } else { " (fixed)" }
    );
    let ev = &model.eigenvalues;
    let total: f64 = ev.iter().sum();
    if total > 0.0 {
        let share = |k: usize| ev[..k.min(ev.len())].iter().sum::<f64>() / total;
        s += &format!(
            "spectrum: λ_max {:.4e}, total {:.4e}; share of variance in the top 1/10/100/E: {:.4} / {:.4} / {:.4} / {:.4}\n",
            ev[0],
            total,
            share(1),
            share(10),
            share(100),
            share(h.components)
        );
        let top: Vec<String> = ev.iter().take(8).map(|v| format!("{v:.3e}")).collect();
        s += &format!("top eigenvalues: {}\n", top.join(" "));
    }
    super::print_out(&s)
}
