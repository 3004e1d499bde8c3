//! What a run reports beside its model: the plan and the memory it stated, each pass's
//! rows and time split, the solve (path, in place, PCA by block Krylov), how λ was settled
//! and every warning, as typed values ([`RunReport`]) that the command line prints (and
//! writes with `--report`) and tests assert on. The [`Reporter`] records them and hands
//! each line to the caller's sink as it happens, so a long run still shows progress.

use crate::solve::Refinement;
use serde::Serialize;

use crate::pipeline::plan::{MemoryPlan, Plan};

/// One pass over the data.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PassReport {
    /// 1 or 2.
    pub pass: u32,
    /// Rows added.
    pub rows: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Parquet decode (its own thread).
    pub decode: f64,
    /// Mapping (its own thread).
    pub map: f64,
    /// Folding into the statistics.
    pub fold: f64,
    /// The Gram's tile products within the fold.
    pub gemm: f64,
    /// The other kernel candidates' maps, run on the folding thread.
    pub other_maps: f64,
    /// The folding thread waiting for input.
    pub wait: f64,
}

/// A PCA as solved.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PcaReport {
    /// The stage (two passes), or none for the one PCA of a one-pass run.
    pub stage: Option<usize>,
    /// Components kept.
    pub components: usize,
    /// Found by block Krylov (else the dense decomposition).
    pub krylov: bool,
    /// Block products (block Krylov).
    pub iterations: usize,
    /// The worst residual of the kept pairs (block Krylov).
    pub worst_residual: Option<f64>,
}

/// How λ (or λ₁, or the candidate) was settled.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelectionReport {
    /// `fixed`, `gcv`, `validation`, `k-fold`, `path`, `candidates`.
    pub method: String,
    /// The values chosen (one per output).
    pub chosen: Vec<f64>,
    /// Rows scored (held-out methods).
    pub rows: u64,
    /// The refit's rows, when the model was solved again at the choice.
    pub refit_rows: Option<u64>,
}

/// The solve.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SolveReport {
    /// The path (`cholesky`, `tridiagonal`, `eigen`, `dual`, or the sparse learner's).
    pub path: String,
    /// The Cholesky factored the statistics' own Gram.
    pub in_place: bool,
    /// Wall seconds.
    pub seconds: f64,
    /// How the mixed-precision refinement ended (`cholesky_f32`).
    pub refinement: Option<Refinement>,
}

/// Where a resumed run started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResumeReport {
    /// The checkpoint.
    pub checkpoint: String,
    /// Its pass.
    pub pass: u32,
    /// Row groups it had done.
    pub units_done: usize,
}

/// What a run reports beside its model.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunReport {
    /// The plan it ran.
    pub plan: Option<Plan>,
    /// The memory it stated before the pass.
    pub memory: Option<MemoryPlan>,
    /// The checkpoint it resumed from.
    pub resumed: Option<ResumeReport>,
    /// Each pass.
    pub passes: Vec<PassReport>,
    /// Each PCA solved.
    pub pca: Vec<PcaReport>,
    /// The solve.
    pub solve: Option<SolveReport>,
    /// How λ was settled (for candidates, each candidate's, in order, then the choice).
    pub selections: Vec<SelectionReport>,
    /// Bytes the accumulated state held at the end of the passes (the plan stated
    /// `memory.statistics` before them).
    pub statistics_bytes: u64,
    /// The statistics were written to the checkpoint before an in-place solve.
    pub checkpointed_before_solve: bool,
    /// Warnings, as printed after `warning: `.
    pub warnings: Vec<String>,
    /// Every line the run printed, in order.
    pub lines: Vec<String>,
}

/// Where said lines go as they are said (stderr for the command line).
pub type Sink = Box<dyn FnMut(&str) + Send>;

/// Records a [`RunReport`] and passes each line on as it is said.
pub struct Reporter {
    /// What has been reported so far.
    pub report: RunReport,
    sink: Sink,
    prefix: Option<String>,
}

impl Default for Reporter {
    fn default() -> Self {
        Reporter::silent()
    }
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter").field("report", &self.report).finish()
    }
}

impl Reporter {
    /// A reporter that hands every line to `sink`.
    pub fn new(sink: Sink) -> Reporter {
        Reporter { report: RunReport::default(), sink, prefix: None }
    }

    /// A reporter that only records.
    pub fn silent() -> Reporter {
        Reporter::new(Box::new(|_| {}))
    }

    /// The report so far, leaving an empty one.
    pub fn take(&mut self) -> RunReport {
        std::mem::take(&mut self.report)
    }

    /// Says a line.
    pub fn say(&mut self, line: impl Into<String>) {
        // Every line passes the redaction on its way to the terminal and the report.
        let line = crate::remote::redact(&match &self.prefix {
            Some(p) => format!("{p}{}", line.into()),
            None => line.into(),
        });
        (self.sink)(&line);
        self.report.lines.push(line);
    }

    /// Records a warning and says it.
    pub fn warn(&mut self, warning: impl Into<String>) {
        let w = crate::remote::redact(&warning.into());
        self.say(format!("warning: {w}"));
        self.report.warnings.push(w);
    }

    /// Lines said while `f` runs carry `prefix` (a candidate's own solve).
    pub fn prefixed<T>(&mut self, prefix: String, f: impl FnOnce(&mut Self) -> T) -> T {
        let before = self.prefix.replace(prefix);
        let out = f(self);
        self.prefix = before;
        out
    }
}
