//! The one list of the pipeline keys that decide what statistics hold. Part files record
//! them and `solve` compares them key by key ([`statistics_keys`]); the fingerprint of a
//! run (what a checkpoint and the parts of one run share) is derived from the same list
//! plus what identifies the run itself: the resolved input files, the fitted stages, the
//! code file's rows and the candidates ([`fingerprint`]).

use serde_json::{json, Map, Value};

use crate::codes::OutputCode;
use crate::pipeline::spec::PipelineSpec;
use crate::sketch::StageSpec;

/// The keys that decide the statistics, with their values in `spec`.
pub(crate) fn statistics_keys(spec: &PipelineSpec) -> Map<String, Value> {
    let d = &spec.data;
    let mut keys = Map::new();
    for (k, v) in [
        ("task", json!(spec.task)),
        ("passes", json!(spec.passes)),
        ("features", json!(d.features)),
        ("feature_list", json!(d.feature_list)),
        ("label", json!(d.label)),
        ("targets", json!(d.targets)),
        ("null_labels", json!(d.null_labels)),
        ("stages", json!(spec.stages)),
        ("seed", json!(spec.run.seed)),
        ("sample_rows", json!(spec.run.sample_rows)),
        ("shift", json!(spec.run.shift)),
        ("codes", json!(spec.ridge.codes)),
        ("code_length", json!(spec.ridge.code_length)),
        // In two passes the per-stage PCA decides what pass two accumulated.
        ("pca", if spec.passes == 2 { serde_json::to_value(&spec.pca).unwrap_or_default() } else { Value::Null }),
    ] {
        keys.insert(k.into(), v);
    }
    // The fold layout decides what the parts hold; without k-fold the keys are as before.
    if let Some(k) = spec.ridge.cv {
        keys.insert("ridge.cv".into(), k.into());
    }
    keys
}

/// A fingerprint of everything that decides the statistics of one run: shards and
/// checkpoints must agree on it. A code file enters by its rows (`code`), not its path:
/// an edit between two shards or between a kill and `--resume` changes the targets the
/// statistics hold, so it must change the fingerprint.
pub(crate) fn fingerprint(
    spec: &PipelineSpec,
    fitted: &[StageSpec],
    files: &[String],
    code: Option<&OutputCode>,
) -> String {
    let mut v = statistics_keys(spec);
    v.insert("stages".into(), json!(fitted));
    v.insert("files".into(), json!(files));
    v.insert("code_file".into(), json!(spec.ridge.code_file));
    if let Some(k) = v.remove("ridge.cv") {
        v.insert("cv".into(), k);
    }
    if let Some(c) = &spec.candidates {
        v.insert("candidates".into(), serde_json::to_value(c).unwrap_or_default());
    }
    // Drawn codes follow from the seed, length and classes already in the keys.
    if spec.ridge.code_file.is_some() {
        v.insert("code".into(), serde_json::to_value(code.and_then(OutputCode::rows)).unwrap_or_default());
    }
    crate::stats::checksum([Value::Object(v).to_string().as_bytes()])
}

/// The first key whose value in `spec` differs from what a part recorded (`recorded`),
/// with the recorded value. Keys a part did not record (older parts) are not compared.
pub(crate) fn first_difference(spec: &PipelineSpec, recorded: &Value) -> Option<(String, Value)> {
    difference_but(spec, recorded, |_| false)
}

/// The first recorded key, other than the `skipped` ones, whose value `spec` changes.
fn difference_but(spec: &PipelineSpec, recorded: &Value, skipped: impl Fn(&str) -> bool) -> Option<(String, Value)> {
    let now = statistics_keys(spec);
    let recorded = recorded.as_object()?;
    recorded
        .iter()
        .filter(|(k, _)| !skipped(k))
        .find(|(k, v)| now.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
}

/// [`first_difference`] for a run over a maps file, which compares the feature columns
/// as they resolve (`px*` and the list of the same columns are one map) and skips the
/// pre-pass sample size, which decides nothing the maps file does not already hold. A
/// regression over maps takes their map and nothing of their labels (RF-PCA over the maps
/// of a classifier), so its task, label, targets and code are not compared; parts of
/// either kind still merge only with parts of the same keys.
pub(crate) fn first_difference_over_maps(spec: &PipelineSpec, recorded: &Value) -> Option<(String, Value)> {
    let regression = spec.task == crate::model::Task::Regression;
    let labels = |k: &str| matches!(k, "task" | "label" | "targets" | "null_labels" | "codes" | "code_length");
    difference_but(spec, recorded, |k| {
        matches!(k, "features" | "feature_list" | "sample_rows") || (regression && labels(k))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PipelineSpec {
        PipelineSpec::from_toml_str(
            "task = \"classification\"\n[data]\ntrain = [\"t.parquet\"]\nlabel = \"y\"\n[[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\ndim = 64\n",
            "keys.toml",
        )
        .unwrap()
    }

    #[test]
    fn the_fingerprint_covers_every_statistics_key_and_the_runs_identity() {
        let base = spec();
        let fitted = base.stages.clone();
        let f = |s: &PipelineSpec, files: &[String]| fingerprint(s, &fitted, files, None);
        let here = f(&base, &["a".into()]);
        assert_eq!(here, f(&base, &["a".into()]));
        assert_ne!(here, f(&base, &["b".into()]));
        for change in ["run.seed=2", "run.sample_rows=7", "run.shift=\"zero\"", "ridge.codes=\"ecoc\"", "ridge.cv=3"] {
            let mut changed = base.clone();
            match change {
                "run.seed=2" => changed.run.seed = 2,
                "run.sample_rows=7" => changed.run.sample_rows = 7,
                "run.shift=\"zero\"" => changed.run.shift = crate::pipeline::spec::ShiftMode::Zero,
                "ridge.codes=\"ecoc\"" => changed.ridge.codes = crate::pipeline::spec::Codes::Ecoc,
                _ => changed.ridge.cv = Some(3),
            }
            assert_ne!(f(&changed, &["a".into()]), here, "{change}");
            // A key the recorded set lacks is not compared (parts of older releases);
            // the fold layout is checked apart for that reason (`check_parts_match`).
            let recorded = Value::Object(statistics_keys(&base));
            match first_difference(&changed, &recorded) {
                Some((key, _)) => assert!(change.contains(key.trim_start_matches("ridge.")), "{change}: {key}"),
                None => assert_eq!(change, "ridge.cv=3"),
            }
            let (key, _) = first_difference(&base, &Value::Object(statistics_keys(&changed))).unwrap();
            assert!(change.contains(key.trim_start_matches("ridge.")), "{change}: {key}");
        }
        // λ does not decide the statistics: parts solve at any λ.
        let mut other = base.clone();
        other.ridge.lambda = crate::pipeline::spec::LambdaValue::Number(0.5);
        assert_eq!(f(&other, &["a".into()]), here);
        assert!(first_difference(&other, &Value::Object(statistics_keys(&base))).is_none());
    }

    #[test]
    fn over_maps_the_columns_count_as_resolved_and_the_sample_size_not_at_all() {
        let base = spec();
        let recorded = Value::Object(statistics_keys(&base));
        let mut spelt = base.clone();
        spelt.data.features = vec!["x0".into(), "x1".into()];
        spelt.run.sample_rows = 7;
        assert_eq!(first_difference(&spelt, &recorded).map(|d| d.0).as_deref(), Some("features"));
        assert!(first_difference_over_maps(&spelt, &recorded).is_none());
        spelt.run.seed = 9;
        assert_eq!(first_difference_over_maps(&spelt, &recorded).map(|d| d.0).as_deref(), Some("seed"));
        // A regression takes a classifier's map, not its labels; a classifier's code counts.
        let mut regression = base.clone();
        regression.task = crate::model::Task::Regression;
        regression.data.label = None;
        regression.data.targets = vec!["t".into()];
        assert!(first_difference_over_maps(&regression, &recorded).is_none());
        let mut ecoc = base.clone();
        ecoc.ridge.codes = crate::pipeline::spec::Codes::Ecoc;
        assert_eq!(first_difference_over_maps(&ecoc, &recorded).map(|d| d.0).as_deref(), Some("codes"));
    }
}
