//! Checkpoints: the pass state written at unit boundaries, verified and resumed from, and
//! the test hook that stops a run after a number of units.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::pipeline::accumulate::Accumulation;
use crate::pipeline::parts::{read_stats, FileKind};
use crate::pipeline::plan::{Plan, RunOptions};
use crate::stats::{stats_to_file, GramStats};

/// Writes checkpoints at unit boundaries.
pub(crate) struct Checkpointer<'a> {
    pub(crate) session: &'a crate::session::Session,
    pub(crate) path: &'a Path,
    pub(crate) every: usize,
    pub(crate) since: usize,
    pub(crate) fingerprint: &'a str,
    pub(crate) passes: u32,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct CheckpointMeta {
    pub(crate) kind: FileKind,
    pub(crate) fingerprint: String,
    pub(crate) passes: u32,
    pub(crate) pass: u32,
    pub(crate) done: Vec<usize>,
}

impl Checkpointer<'_> {
    pub(crate) fn write(&self, acc: &dyn Accumulation, done: &[usize]) -> Result<()> {
        let blocks = acc.state()?;
        let named: Vec<(&str, &GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        self.write_blocks(&named, acc.pass(), done)
    }

    /// Writes the named statistics blocks of `pass` (an accumulation's state, handed over
    /// by a solve about to consume them).
    pub(crate) fn write_blocks(&self, named: &[(&str, &GramStats)], pass: u32, done: &[usize]) -> Result<()> {
        let meta = CheckpointMeta {
            kind: FileKind::Checkpoint,
            fingerprint: self.fingerprint.to_string(),
            passes: self.passes,
            pass,
            done: done.to_vec(),
        };
        stats_to_file(self.session, self.path, named, serde_json::to_value(&meta).unwrap_or_default())
    }
}

/// Where the Gram is spilled beside a local checkpoint (none beside an object: the
/// planner spills only to a local file).
pub(crate) fn spill_beside(checkpoint: &Path) -> Option<std::path::PathBuf> {
    (!crate::remote::is_remote(checkpoint)).then(|| {
        let mut spill = crate::remote::local(checkpoint).into_os_string();
        spill.push(".gram");
        spill.into()
    })
}

/// The one output check of a run (see [`crate::atomic::check_outputs`]): its result under
/// `result_key`, its report, and its checkpoint with the spill file beside it. A command
/// calls it once its inputs are registered and again just before the pass (the inputs are
/// all open then).
pub fn check_run_outputs(opts: &RunOptions, result_key: &str) -> Result<()> {
    let mut outputs: Vec<(&str, &Path)> = Vec::new();
    if let Some(o) = &opts.output {
        outputs.push((result_key, o));
    }
    if let Some(r) = &opts.report {
        outputs.push(("--report", r));
    }
    let companions: Vec<std::path::PathBuf> = opts.checkpoint.as_deref().and_then(spill_beside).into_iter().collect();
    let checkpoint = opts.checkpoint.as_deref().map(|path| crate::atomic::CheckpointCheck {
        path,
        companions: &companions,
        resume: opts.resume,
    });
    crate::atomic::check_outputs(&opts.session, &outputs, checkpoint)
}

/// The state a checkpoint holds, for `plan`, and the units it had done. The fingerprint
/// must be the run's: another pipeline, seed or set of inputs never resumes.
pub(crate) fn load_checkpoint(
    session: &crate::session::Session,
    path: &Path,
    fingerprint: &str,
    plan: &Plan,
) -> Result<(Box<dyn Accumulation>, Vec<usize>)> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    // Callers resume only from a checkpoint that exists; the shared reader names any other fault.
    let (blocks, meta) = read_stats(session, path, false)?;
    let meta: CheckpointMeta = serde_json::from_value(meta).map_err(|e| bad(format!("bad checkpoint header: {e}")))?;
    if meta.kind != FileKind::Checkpoint {
        return Err(bad("not a checkpoint".into()));
    }
    if meta.fingerprint != fingerprint {
        return Err(
            bad("the checkpoint was written by a different pipeline or data; remove it to start afresh".into()),
        );
    }
    let acc = plan.accumulation_from(blocks, meta.pass).map_err(bad)?;
    if acc.pass() != meta.pass {
        return Err(bad("the checkpoint's pass does not match its statistics".into()));
    }
    Ok((acc, meta.done))
}

/// Units (over all passes of the session) a run completes before the test hook aborts
/// the process, simulating a kill at an exact point. Only in builds with the cargo
/// feature `fault-injection` (the test script's): a default or release build has no
/// fault injection at all.
pub(crate) fn abort_after() -> Option<usize> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    std::env::var("SKETCHFIT_TEST_ABORT_AFTER_UNITS").ok().and_then(|v| v.parse().ok())
}
