//! `stages.N.candidates` as the pipeline file gives it: one key of one stage and the
//! values tried, taken out of the stage's table before the family parses the rest.
//! A leaf below the spec; what candidates do is `candidates`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// `stages.N.candidates`: one key of one stage and the values tried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateSpec {
    /// The stage.
    pub stage: usize,
    /// The stage key varied (`sigma`, `beta`, `gamma`, `offset`, `degree`, …).
    pub key: String,
    /// The values, in the order given.
    pub values: Vec<serde_json::Value>,
}

/// Takes `candidates` out of stage `i`'s table (the family parses the rest).
pub(crate) fn take_candidates(t: &mut toml::Table, file: &str, i: usize) -> Result<Option<CandidateSpec>> {
    let Some(v) = t.remove("candidates") else { return Ok(None) };
    let at = format!("stages[{i}].candidates");
    let toml::Value::Table(c) = v else {
        return Err(Error::config(
            file,
            at,
            "must be a table of one key and its values, e.g. { sigma = [0.5, 1.0, 2.0] }",
        ));
    };
    let mut it = c.into_iter();
    let (Some((key, values)), None) = (it.next(), it.next()) else {
        return Err(Error::config(file, at, "vary one key at a time, e.g. { sigma = [0.5, 1.0, 2.0] }"));
    };
    let toml::Value::Array(values) = values else {
        return Err(Error::config(file, format!("{at}.{key}"), "must be a list of values"));
    };
    if !(2..=16).contains(&values.len()) {
        return Err(Error::config(file, format!("{at}.{key}"), format!("give 2 to 16 values, got {}", values.len())));
    }
    if key == "kind" || key == "candidates" {
        return Err(Error::config(file, format!("{at}.{key}"), "the family itself is not a candidate key"));
    }
    // JSON has no NaN or ∞: serde_json would turn one into null, which then reads as
    // "the default" and runs a candidate nobody asked for. A stage key refuses them; a
    // candidate must too.
    if let Some((j, bad)) = values.iter().enumerate().find_map(|(j, v)| non_finite(v).map(|b| (j, b))) {
        return Err(Error::config(
            file,
            format!("{at}.{key}"),
            format!("value {} is {bad}: every candidate must be a finite number", j + 1),
        ));
    }
    let values = values
        .into_iter()
        .map(|v| serde_json::to_value(v).map_err(|e| Error::config(file, format!("{at}.{key}"), e.to_string())))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(CandidateSpec { stage: i, key, values }))
}

/// The first non-finite float anywhere in `v` (lists and tables included).
fn non_finite(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Float(x) if !x.is_finite() => Some(*x),
        toml::Value::Array(a) => a.iter().find_map(non_finite),
        toml::Value::Table(t) => t.values().find_map(non_finite),
        _ => None,
    }
}
