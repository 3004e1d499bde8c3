//! Selections that need no held-out rows: a fixed λ, and generalised cross-validation
//! over the grid from the spectrum the solve computed (math.md §13.6).

use super::{Choice, Fits, Select};
use crate::error::{Error, Result};
use crate::pipeline::solve_ctx::SolveCtx;
use crate::pipeline::stream::lambda_text;

/// A fixed λ.
pub(crate) struct Fixed(pub f64);

impl Select for Fixed {
    fn select(&mut self, fits: &dyn Fits, ctx: &mut SolveCtx<'_>) -> Result<Choice> {
        ctx.report.say(format!("ridge: λ = {:.4e} (fixed)", self.0));
        Ok(Choice { values: vec![self.0; fits.outputs()], ..Choice::default() })
    }
}

/// The GCV argmin, shared over outputs or one per output.
pub(crate) struct Gcv {
    /// One λ per output.
    pub per_output: bool,
}

impl Select for Gcv {
    fn select(&mut self, fits: &dyn Fits, ctx: &mut SolveCtx<'_>) -> Result<Choice> {
        let g = fits.gcv().ok_or_else(|| Error::bug("GCV asked of a path without a spectrum"))?;
        let i = g.chosen_shared;
        let values = if self.per_output {
            g.chosen_per_output.iter().map(|&k| g.grid[k]).collect()
        } else {
            vec![g.grid[i]; fits.outputs()]
        };
        ctx.report.say(format!(
            "ridge: λ = {} by GCV (grid {:.3e} … {:.3e}, GCV {:.6e}, df {:.1})",
            lambda_text(&values),
            g.grid[0],
            g.grid[g.grid.len() - 1],
            g.shared[i],
            g.df[i]
        ));
        Ok(Choice { values, index: i, ..Choice::default() })
    }
}
