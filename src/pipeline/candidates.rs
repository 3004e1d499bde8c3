//! Kernel parameters chosen in one pass (`stages.N.candidates = { sigma = [...] }`):
//! the pipeline expands into one candidate per value, the pass maps every row through
//! every candidate's map and keeps one set of statistics each (memory and time are K×
//! one candidate's), each candidate is solved and scored on held-out rows
//! (`data.validation` or `ridge.cv`) like a pipeline of its own, and the model is the
//! best candidate's, with every candidate's score in its header.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::Model;
use crate::pipeline::spec::PipelineSpec;
use crate::sketch::StageSpec;

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

/// Each candidate's score, as the model keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateTable {
    /// `stages.N.key`.
    pub key: String,
    /// The values tried.
    pub values: Vec<serde_json::Value>,
    /// The held-out metric of each candidate at its best λ.
    pub score: Vec<f64>,
    /// That λ.
    pub lambda: Vec<f64>,
    /// The index of the chosen candidate.
    pub chosen: usize,
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
    let values = values
        .into_iter()
        .map(|v| serde_json::to_value(v).map_err(|e| Error::config(file, format!("{at}.{key}"), e.to_string())))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(CandidateSpec { stage: i, key, values }))
}

impl PipelineSpec {
    /// The pipelines the candidates stand for, each without candidates.
    pub fn candidate_specs(&self) -> Result<Vec<PipelineSpec>> {
        let Some(c) = &self.candidates else { return Ok(vec![self.clone()]) };
        c.values
            .iter()
            .map(|v| {
                let at = format!("stages.{}.candidates.{}", c.stage, c.key);
                let stage =
                    self.stages.get(c.stage).ok_or_else(|| Error::config(&self.source, &at, "no such stage"))?;
                let mut value = serde_json::to_value(stage).map_err(|e| Error::Internal(e.to_string()))?;
                if let Some(o) = value.as_object_mut() {
                    o.insert(c.key.clone(), v.clone());
                }
                let varied: StageSpec = serde_json::from_value(value)
                    .map_err(|e| Error::config(&self.source, &at, format!("value {v}: {e}")))?;
                varied.validate(&self.source, &at)?;
                let mut spec = self.clone();
                spec.stages[c.stage] = varied;
                spec.candidates = None;
                Ok(spec)
            })
            .collect()
    }

    /// What candidates need: a held-out metric, one process, ridge.
    pub(crate) fn check_candidates(&self) -> Result<()> {
        let Some(c) = &self.candidates else { return Ok(()) };
        let at = format!("stages.{}.candidates", c.stage);
        let refuse = |why: &str| Err(Error::config(&self.source, &at, why.to_string()));
        if self.data.validation.is_empty() && self.ridge.cv.is_none() {
            return refuse("candidates are scored on held-out rows: give data.validation or ridge.cv");
        }
        if self.passes != 1 {
            return refuse("candidates need passes = 1");
        }
        if self.solver.kind != crate::pipeline::spec::SolverKind::Ridge {
            return refuse("candidates are for ridge");
        }
        if !self.data.unlabeled.is_empty() {
            return refuse("candidates need every row labeled (no unlabeled files)");
        }
        for s in self.candidate_specs()? {
            s.check()?;
        }
        Ok(())
    }
}

/// The best candidate's model (the highest accuracy or lowest RMSE at its own best λ;
/// ties to the earlier), with the table.
pub(crate) fn choose(spec: &PipelineSpec, models: Vec<Model>, say: &mut dyn FnMut(&str)) -> Result<Model> {
    let c = spec.candidates.as_ref().ok_or_else(|| Error::Internal("no candidates".into()))?;
    let mut score = Vec::new();
    let mut lambda = Vec::new();
    for m in &models {
        let t = m.header.validation.as_ref().ok_or_else(|| Error::Internal("a candidate without scores".into()))?;
        let i = t.grid.iter().position(|&l| l == t.chosen[0]).unwrap_or(0);
        score.push(t.score[i]);
        lambda.push(t.chosen[0]);
    }
    let accuracy = models.first().and_then(|m| m.header.validation.as_ref()).is_some_and(|t| t.metric == "accuracy");
    let mut best = 0;
    for i in 1..score.len() {
        if (accuracy && score[i] > score[best]) || (!accuracy && score[i] < score[best]) {
            best = i;
        }
    }
    for (i, v) in c.values.iter().enumerate() {
        say(&format!(
            "candidate stages.{}.{} = {v}: {} {:.6} at λ = {:.4e}{}",
            c.stage,
            c.key,
            if accuracy { "accuracy" } else { "RMSE" },
            score[i],
            lambda[i],
            if i == best { "  (chosen)" } else { "" }
        ));
    }
    let table = CandidateTable {
        key: format!("stages.{}.{}", c.stage, c.key),
        values: c.values.clone(),
        score,
        lambda,
        chosen: best,
    };
    let mut model = models.into_iter().nth(best).ok_or_else(|| Error::Internal("no candidate models".into()))?;
    model.header.candidates = Some(table);
    model.header.pipeline = serde_json::to_value(spec).unwrap_or_default();
    Ok(model)
}
