//! Kernel parameters chosen in one pass (`stages.N.candidates = { sigma = [...] }`):
//! the pipeline expands into one candidate per value, the pass maps every row through
//! every candidate's map and keeps one set of statistics each (memory and time are K×
//! one candidate's), each candidate is solved and scored on held-out rows
//! (`data.validation` or `ridge.cv`) like a pipeline of its own, and the model is the
//! best candidate's, with every candidate's score in its header.

use crate::error::{Error, Result};
pub use crate::model::CandidateTable;
use crate::model::Model;
pub use crate::pipeline::candidate_spec::CandidateSpec;
use crate::pipeline::spec::PipelineSpec;
use crate::sketch::StageSpec;

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
        // Each candidate is scored at its own best λ of the grid; a fixed λ scores none.
        if matches!(self.lambda()?, crate::solve::LambdaChoice::Fixed(_)) {
            return Err(Error::config(
                &self.source,
                "ridge.lambda",
                format!(
                    "{at} are scored at each one's best λ on held-out rows: leave ridge.lambda = \"gcv\" (the default)"
                ),
            ));
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
