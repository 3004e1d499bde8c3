//! The best of kernel candidates, each already solved and scored on held-out rows at its
//! own best λ: the highest accuracy, or the lowest RMSE or log loss, ties to the earlier.

use super::{Choice, Fits, Select};
use crate::error::Result;
use crate::metrics::{best_index, Metric};
use crate::pipeline::solve_ctx::SolveCtx;

/// The candidates' held-out scores and λ, in candidate order.
pub(crate) struct Best<'a> {
    /// Each candidate's score at its chosen λ.
    pub scores: &'a [f64],
    /// Each candidate's chosen λ.
    pub lambdas: &'a [f64],
    /// The metric.
    pub metric: Metric,
    /// The key varied (`stages.N.key`) and its values, for messages.
    pub key: &'a str,
    /// The values tried.
    pub values: &'a [serde_json::Value],
}

impl Select for Best<'_> {
    fn select(&mut self, _fits: &dyn Fits, ctx: &mut SolveCtx<'_>) -> Result<Choice> {
        let best = best_index(self.scores, self.metric.higher_is_better(), false);
        let name = match self.metric {
            Metric::Accuracy => "accuracy",
            Metric::Rmse => "RMSE",
            Metric::LogLoss => "log loss",
        };
        for (i, v) in self.values.iter().enumerate() {
            ctx.report.say(format!(
                "candidate {} = {v}: {name} {:.6} at λ = {:.4e}{}",
                self.key,
                self.scores[i],
                self.lambdas[i],
                if i == best { "  (chosen)" } else { "" }
            ));
        }
        Ok(Choice {
            values: vec![self.lambdas[best]],
            index: best,
            score: Some(self.scores[best]),
            ..Choice::default()
        })
    }
}
