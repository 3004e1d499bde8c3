//! `fit-maps`: a run's pre-pass alone, its fitted maps written as a maps file
//! ([`crate::maps`]) that later runs over any data take instead of a pre-pass of their own.

use crate::error::{Error, Result};
use crate::maps::{Maps, MapsHeader};
use crate::pipeline::check::CheckedPipeline;
use crate::pipeline::keys::statistics_keys;
use crate::pipeline::prepare::prepare_fresh;
use crate::pipeline::report::Reporter;
use crate::session::Session;

/// Opens the pipeline's training inputs, scans the classes, draws or reads the output
/// code, and fits the stages and the shift on the pre-pass sample — exactly what `train`
/// does before its pass — and returns them as maps (a `run.maps` the pipeline names is
/// not read: these are the maps it would name).
pub fn fit_maps(session: &Session, checked: &CheckedPipeline, report: &mut Reporter) -> Result<Maps> {
    let spec = checked.spec();
    if checked.candidates.is_some() {
        return Err(Error::config(
            &spec.source,
            "stages.candidates",
            "kernel candidates fit one map each and choose among them: a maps file holds one map; fix the stage's key",
        ));
    }
    let prep = prepare_fresh(session, checked, report)?;
    let fitted_on = prep
        .labeled
        .files
        .iter()
        .chain(prep.unlabeled.iter().flat_map(|u| &u.files))
        .map(|f| crate::identity::redact_urls(&f.path.display().to_string()))
        .collect();
    let header = MapsHeader {
        format: String::new(),
        version: 0,
        written_by: String::new(),
        checksum: String::new(),
        seed: spec.run.seed,
        features: prep.labels.features.clone(),
        stages: Vec::new(),
        classes: prep.labels.classes.clone(),
        code: prep.labels.code.as_ref().and_then(crate::codes::OutputCode::rows),
        keys: serde_json::Value::Object(statistics_keys(spec)),
        fitted_on,
    };
    let map = prep.maps.into_iter().next().ok_or_else(|| Error::bug("a prepared run has a map"))?;
    Ok(Maps::new(MapsHeader { stages: map.stages, ..header }, map.pipeline, map.shift))
}
