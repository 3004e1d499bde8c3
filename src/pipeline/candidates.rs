//! Kernel candidates expanded: the pipeline each value of `stages.N.candidates` stands
//! for (the checked pipeline holds one per value; the planner plans each, the
//! candidates' accumulation maps and solves each, and the best is kept).

use crate::error::{Error, Result};
use crate::pipeline::candidate_spec::CandidateSpec;
use crate::pipeline::spec::PipelineSpec;
use crate::sketch::StageSpec;

impl CandidateSpec {
    /// The pipelines the candidates stand for: `spec` with the key set to each value,
    /// each without candidates (and each checked as a stage).
    pub(crate) fn pipelines(&self, spec: &PipelineSpec) -> Result<Vec<PipelineSpec>> {
        let c = self;
        c.values
            .iter()
            .map(|v| {
                let at = format!("stages.{}.candidates.{}", c.stage, c.key);
                let stage =
                    spec.stages.get(c.stage).ok_or_else(|| Error::config(&spec.source, &at, "no such stage"))?;
                let mut value = serde_json::to_value(stage)
                    .map_err(|e| Error::config(&spec.source, &at, format!("value {v}: {e}")))?;
                if let Some(o) = value.as_object_mut() {
                    o.insert(c.key.clone(), v.clone());
                }
                let varied: StageSpec = serde_json::from_value(value)
                    .map_err(|e| Error::config(&spec.source, &at, format!("value {v}: {e}")))?;
                varied.validate(&spec.source, &at)?;
                let mut one = spec.clone();
                one.stages[c.stage] = varied;
                one.candidates = None;
                Ok(one)
            })
            .collect()
    }
}
