use std::path::PathBuf;

use sketchfit::error::{Error, Result};
use sketchfit::model::Model;
use sketchfit::plot::{Chart, Series, XAxis};
use sketchfit::Session;

/// `sketchfit inspect MODEL`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file.
    model: PathBuf,
    /// Print the whole header as JSON.
    #[arg(long)]
    json: bool,
    /// Draw the eigenvalue spectrum (log scale) of each kernel's covariance to this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(session: &Session, a: Args) -> Result<()> {
    let model = Model::load_with(session, &a.model)?;
    let h = &model.header;
    if let Some(p) = &a.plot {
        let spectra: Vec<(String, &[f64], usize)> = if model.projections.is_empty() {
            vec![("all features".to_string(), &model.eigenvalues[..], h.components)]
        } else {
            model
                .projections
                .iter()
                .zip(&h.projections)
                .enumerate()
                .map(|(i, (p, info))| {
                    let name = if h.passes == 2 { format!("stage {i}") } else { "all stages".to_string() };
                    (name, &p.eigenvalues[..], info.components)
                })
                .collect()
        };
        sketchfit::atomic::write_bytes(session, p, scree_svg(&spectra).as_bytes())?;
    }
    if a.json {
        let text = serde_json::to_string_pretty(h).map_err(|e| Error::bug_from("the report serialises", e))?;
        return super::print_out(&(text + "\n"));
    }
    let size = if sketchfit::remote::is_remote(&a.model) {
        session.storage().open(&a.model).map(|o| o.size()).unwrap_or(0)
    } else {
        std::fs::metadata(sketchfit::remote::local(&a.model)).map(|m| m.len()).unwrap_or(0)
    };
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
    let how = match (&h.validation, &h.gcv) {
        _ if h.sparse.is_some() => String::new(),
        (Some(v), _) if v.folds.is_some() => format!(
            " (by {} over {}-fold cross-validation of {} rows, then refitted on all)",
            v.metric,
            v.folds.unwrap_or(0),
            v.rows
        ),
        (Some(v), _) => format!(
            " (by {} on {} validation rows{})",
            v.metric,
            v.rows,
            v.refit_rows.map_or(String::new(), |n| format!(", then refitted on {n} rows"))
        ),
        (None, Some(_)) => " (GCV)".into(),
        (None, None) => " (fixed)".into(),
    };
    match &h.sparse {
        None => s += &format!("lambda: {}{how}\n", sketchfit::api::commands::lambda_text(&h.lambdas)),
        Some(t) => s += &sparse_text(t),
    }
    if let Some(t) = &h.candidates {
        for (i, v) in t.values.iter().enumerate() {
            s += &format!(
                "candidate {} = {v}: held-out score {:.6} at λ {:.4e}{}\n",
                t.key,
                t.score[i],
                t.lambda[i],
                if i == t.chosen { " (chosen)" } else { "" }
            );
        }
    }
    if let Some(rows) = &h.code {
        let len = rows.first().map_or(0, Vec::len);
        let closest = (0..rows.len())
            .flat_map(|a| (a + 1..rows.len()).map(move |b| (a, b)))
            .take(1_000_000)
            .map(|(a, b)| rows[a].iter().zip(&rows[b]).filter(|(x, y)| x != y).count())
            .min()
            .unwrap_or(0);
        s += &format!("output code: ECOC, {} classes × L = {len}, closest two rows {closest} apart\n", rows.len());
    }
    if let Some(path) = &h.solver {
        s += &format!("solve path: {path}\n");
    }
    for (i, info) in h.projections.iter().enumerate() {
        if let Some(r) = info.residual {
            s += &format!(
                "pca {i}: {} components by block Krylov on the tiled Gram, worst residual ‖Cu − θu‖/θ_max = {r:.2e}\n",
                info.components
            );
        }
    }
    let ev = &model.eigenvalues;
    // With iterative PCA only the top E are known; the share is of the true total.
    let total: f64 = h.projections.first().and_then(|p| p.variance_total).unwrap_or_else(|| ev.iter().sum());
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

/// The sparse learner's path: λ₁, the choice, and where along the path the active set
/// of groups changes.
fn sparse_text(t: &sketchfit::model::SparseTable) -> String {
    let mut s = format!("solver: {} in the {} basis", t.kind, t.basis);
    if t.l2 > 0.0 {
        s += &format!(", λ₂ = {:.4e}", t.l2);
    }
    let l1 = t.path.get(t.chosen).copied().unwrap_or(f64::NAN);
    match &t.metric {
        Some(m) => {
            s += &format!(
                "\nlambda₁: {l1:.4e} (point {} of a {}-point path from {:.4e}, by {m} {:.6} on {} validation rows{})",
                t.chosen + 1,
                t.path.len(),
                t.path.first().copied().unwrap_or(f64::NAN),
                t.score.get(t.chosen).copied().unwrap_or(f64::NAN),
                t.validation_rows,
                t.refit_rows.map_or(String::new(), |n| format!(", then refitted on {n} rows"))
            )
        }
        None => s += &format!("\nlambda₁: {l1:.4e} (fixed)"),
    }
    s += &format!(
        "; {} nonzero coefficients, duality gap {:.1e} of c_yy\n",
        t.nonzeros.get(t.chosen).copied().unwrap_or(0),
        t.gap.get(t.chosen).copied().unwrap_or(f64::NAN)
    );
    if !t.groups.is_empty() {
        let mut last: Option<&Vec<usize>> = None;
        for (i, act) in t.active.iter().enumerate() {
            if last != Some(act) {
                let names: Vec<&str> = act.iter().filter_map(|&g| t.groups.get(g).map(String::as_str)).collect();
                s += &format!(
                    "  from λ₁ = {:.4e}: active groups {}\n",
                    t.path[i],
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                );
                last = Some(act);
            }
        }
    }
    s
}

/// A scree plot: eigenvalue against index, log₁₀ scale, one line per spectrum, with a
/// mark at the number of components kept.
fn scree_svg(spectra: &[(String, &[f64], usize)]) -> String {
    let series = spectra
        .iter()
        .map(|(name, ev, e)| {
            // At most about 1,500 points a line: a D = 65,536 spectrum would be megabytes.
            let step = (ev.len() / 1500).max(1);
            Series {
                name: format!("{name}: E = {e}"),
                points: ev.iter().enumerate().filter(|(i, _)| i % step == 0).map(|(i, &v)| (i as f64, v)).collect(),
                mark: (*e > 0 && *e <= ev.len()).then(|| (*e - 1) as f64),
                dots: false,
            }
        })
        .collect();
    Chart {
        title: "eigenvalue spectrum of the feature covariance".into(),
        x_label: "component".into(),
        y_label: "eigenvalue".into(),
        x_axis: XAxis::Index,
        series,
        max_decades: 16.0,
    }
    .svg()
}
