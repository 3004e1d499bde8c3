//! Checkpoints: the pass state written at unit boundaries, verified and resumed from, and
//! the test hook that stops a run after a number of units.

use crate::error::{Error, Result};
use crate::pipeline::state::State;
use crate::stats::stats_from_file;
use crate::stats::{stats_to_file, GramStats};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Writes checkpoints at unit boundaries.
pub(crate) struct Checkpointer<'a> {
    pub(crate) path: &'a Path,
    pub(crate) every: usize,
    pub(crate) since: usize,
    pub(crate) fingerprint: &'a str,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct CheckpointMeta {
    pub(crate) kind: String,
    pub(crate) fingerprint: String,
    pub(crate) passes: u32,
    pub(crate) pass: u32,
    pub(crate) done: Vec<usize>,
}

impl Checkpointer<'_> {
    pub(crate) fn write(&self, state: &State, done: &[usize]) -> Result<()> {
        let meta = CheckpointMeta {
            kind: "checkpoint".into(),
            fingerprint: self.fingerprint.to_string(),
            passes: if matches!(state, State::Two { .. }) { 2 } else { 1 },
            pass: state.pass(),
            done: done.to_vec(),
        };
        let blocks = state.blocks()?;
        let named: Vec<(&str, &GramStats)> = blocks.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        stats_to_file(self.path, &named, serde_json::to_value(&meta).unwrap_or_default())
    }
}

pub(crate) fn load_checkpoint(path: &Path, fingerprint: &str) -> Result<(State, Vec<usize>)> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    // Callers resume only from a checkpoint that exists; the shared reader names any other fault.
    let (blocks, meta) = read_stats(path, false)?;
    let meta: CheckpointMeta = serde_json::from_value(meta).map_err(|e| bad(format!("bad checkpoint header: {e}")))?;
    if meta.kind != "checkpoint" {
        return Err(bad("not a checkpoint".into()));
    }
    if meta.fingerprint != fingerprint {
        return Err(
            bad("the checkpoint was written by a different pipeline or data; remove it to start afresh".into()),
        );
    }
    let state = State::from_blocks(meta.passes, blocks).map_err(bad)?;
    if state.pass() != meta.pass {
        return Err(bad("the checkpoint's pass does not match its statistics".into()));
    }
    Ok((state, meta.done))
}

/// Units (over all passes) this process completes before the test hook aborts it,
/// simulating a kill at an exact point. Only in builds with debug assertions (the
/// profile `cargo test` builds): a release binary has no fault injection at all.
pub(crate) fn abort_after() -> Option<usize> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var("SKETCHFIT_TEST_ABORT_AFTER_UNITS").ok().and_then(|v| v.parse().ok())
}

pub(crate) static UNITS_DONE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A statistics file: its named blocks and its meta value.
pub(crate) type StatsFile = (Vec<(String, GramStats)>, serde_json::Value);

/// `input`: a file this run only reads (parts), as opposed to its own checkpoint. Read a
/// block at a time into the statistics (a 16 GiB part needs 16 GiB, not 32).
pub(crate) fn read_stats(path: &Path, input: bool) -> Result<StatsFile> {
    let bad = |message: String| Error::BadModel { path: path.into(), message };
    let file = if input { crate::atomic::open_input(path)? } else { crate::atomic::open_own(path)? };
    stats_from_file(file).map_err(|e| bad(e.to_string()))
}
