//! Keeping a run's statistics before a solve takes their memory: the one place that
//! decides where they go. The driver builds a [`Keeper`] from the plan and the
//! checkpointer (only a plan whose solve consumes the statistics gets one); an
//! accumulation leases its state to a solve through a [`StateLease`], which the solver
//! calls (the `solve::Lease` interface) just before it consumes the Gram — the checkpoint
//! is written then, so a failed or killed solve costs no pass — or spills it — the Gram
//! streamed back from the checkpoint that now holds it, or from a verified file beside
//! the checkpoint where the statistics are not the checkpoint's (a refit's merge with the
//! held-out rows). Spill files are read and written here, never in `solve/`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
use crate::pipeline::checkpoint::{spill_beside, Checkpointer};
use crate::solve::{GramSource, Lease};
use crate::stats::{gram_from_file, gram_tiles_from_file, stats_to_file, GramStats, TriGram};

/// The run's checkpoint, written by the solve just before a factorisation consumes the
/// state.
pub(crate) struct Keeper<'a> {
    pub(crate) checkpointer: Checkpointer<'a>,
    pass: u32,
    done: &'a [usize],
    /// The checkpoint the run resumed from holds this state already (every unit of the
    /// last pass was done): writing it again would copy it onto itself.
    pub(crate) on_disk: bool,
    written: AtomicBool,
}

impl<'a> Keeper<'a> {
    pub(crate) fn new(checkpointer: Checkpointer<'a>, pass: u32, done: &'a [usize], on_disk: bool) -> Keeper<'a> {
        Keeper { checkpointer, pass, done, on_disk, written: false.into() }
    }

    /// A solve handed the state over and it was written.
    pub(crate) fn written(&self) -> bool {
        self.written.load(Ordering::Relaxed)
    }

    /// Keeps the run's whole state `blocks` (as its accumulation names them); answers the
    /// local file that now holds them, if the checkpoint is one.
    pub(crate) fn keep(&self, blocks: &[(&str, &GramStats)]) -> Result<Option<PathBuf>> {
        if !self.on_disk {
            self.checkpointer.write_blocks(blocks, self.pass, self.done)?;
            self.written.store(true, Ordering::Relaxed);
        }
        if cfg!(feature = "fault-injection") && std::env::var_os("SKETCHFIT_TEST_ABORT_IN_SOLVE").is_some() {
            // The test hook's kill inside the factorisation, once the state is on disk.
            std::process::abort();
        }
        let path = self.checkpointer.path;
        Ok((!crate::remote::is_remote(path)).then(|| crate::remote::local(path)))
    }
}

/// What a solve's statistics are to the run.
enum Held<'a> {
    /// One block of the run's state, the others beside it, all named as the checkpoint
    /// names them (`None` marks the leased block's place).
    State(Vec<(&'a str, Option<&'a GramStats>)>),
    /// A sum the state does not hold (a refit's merge with the held-out rows), the state
    /// kept before it was made.
    Merged,
}

/// A run's statistics leased to one solve.
pub(crate) struct StateLease<'a> {
    keeper: Option<&'a Keeper<'a>>,
    held: Held<'a>,
    /// What the run should be told of where the Gram went.
    pub(crate) said: Vec<String>,
}

impl<'a> StateLease<'a> {
    /// The block of the state named `blocks[i].0` where `blocks[i].1` is `None`, leased
    /// with the rest of the state beside it.
    pub(crate) fn state(keeper: Option<&'a Keeper<'a>>, blocks: Vec<(&'a str, Option<&'a GramStats>)>) -> Self {
        StateLease { keeper, held: Held::State(blocks), said: Vec::new() }
    }

    /// Statistics nothing keeps (a candidate's, a copy): consumed as they are.
    pub(crate) fn unkept() -> Self {
        StateLease::merged(None)
    }

    /// Statistics the state does not hold: consuming them keeps nothing more.
    pub(crate) fn merged(keeper: Option<&'a Keeper<'a>>) -> Self {
        StateLease { keeper, held: Held::Merged, said: Vec::new() }
    }

    /// Keeps the state with `leased` in its place; answers the file holding it and the
    /// leased block's name there, where one does.
    fn keep(&mut self, leased: &GramStats) -> Result<Option<(PathBuf, String)>> {
        let (Some(keeper), Held::State(blocks)) = (self.keeper, &self.held) else { return Ok(None) };
        let whole: Vec<(&str, &GramStats)> = blocks.iter().map(|&(n, s)| (n, s.unwrap_or(leased))).collect();
        let name = blocks.iter().find(|(_, s)| s.is_none()).map(|(n, _)| n.to_string());
        Ok(keeper.keep(&whole)?.zip(name))
    }
}

impl Lease for StateLease<'_> {
    fn consume(&mut self, stats: &GramStats) -> Result<()> {
        self.keep(stats).map(drop)
    }

    fn spill(&mut self, stats: &GramStats) -> Result<Box<dyn GramSource + '_>> {
        let source = match self.keep(stats)? {
            Some((path, block)) => {
                self.said
                    .push(format!("read from the checkpoint {} (block '{block}'), not written again", path.display()));
                FileGram { path, block, dim: stats.dim(), remove: false }
            }
            None => {
                let keeper = self.keeper.ok_or_else(|| Error::bug("a Gram is spilled only beside a checkpoint"))?;
                let path = spill_beside(keeper.checkpointer.path)
                    .ok_or_else(|| Error::bug("a Gram is spilled only beside a local checkpoint"))?;
                // A scratch file of this solve: the run checked its path against the run's
                // inputs and outputs before the pass (`check_run_outputs`); the write still
                // refuses a file it did not make.
                let scratch = crate::session::Session::new();
                let meta = serde_json::json!({ "kind": "spilled Gram" });
                stats_to_file(&scratch, &path, &[(SPILLED, stats)], meta)?;
                self.said.push(format!("spilled to {}", path.display()));
                FileGram { path, block: SPILLED.into(), dim: stats.dim(), remove: true }
            }
        };
        Ok(Box::new(source))
    }
}

/// The block name of a spill file's one set of statistics.
const SPILLED: &str = "spilled";

/// A Gram kept in a statistics file, verified as it is read back; a spill file of the
/// solve's own is removed when the solve is done with it, however it ends.
struct FileGram {
    path: PathBuf,
    block: String,
    dim: usize,
    remove: bool,
}

impl FileGram {
    fn bad(path: &Path) -> impl Fn(crate::container::ContainerError) -> Error + '_ {
        move |e| Error::BadModel {
            path: path.to_path_buf(),
            message: format!("the Gram kept for the mixed-precision solve: {e}"),
        }
    }
}

impl GramSource for FileGram {
    fn tiles(&self, each: &mut dyn FnMut(usize, usize, &[f64])) -> Result<()> {
        gram_tiles_from_file(&self.path, &self.block, self.dim, each).map_err(Self::bad(&self.path))
    }

    fn gram(&self) -> Result<TriGram> {
        gram_from_file(&self.path, &self.block, self.dim).map_err(Self::bad(&self.path))
    }
}

impl Drop for FileGram {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::cholesky::ridge_fixed;
    use crate::solve::cholesky::tests::{stats, stats_with_noise};
    use crate::solve::mixed::{ridge_refined, MixedMemory, TOLERANCE};
    use crate::stats::TILE;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sketchfit-keep-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-9 * scale)
    }

    fn checkpointer<'a>(session: &'a crate::session::Session, path: &'a Path) -> Checkpointer<'a> {
        Checkpointer { session, path, every: 0, since: 0, fingerprint: "f", passes: 1 }
    }

    #[test]
    fn a_state_kept_in_the_checkpoint_is_streamed_from_it_and_not_spilled_again() {
        let (dim, c) = (2 * TILE + 37, 3);
        let (st, other) = (stats(900, dim, c, 4), stats(50, 7, 1, 5));
        let (want_w, want_b) = ridge_fixed(&st, st.gram.clone(), 0.5, 2).unwrap();
        let d = dir("kept");
        let ckpt = d.join("m.sfm.ckpt");
        let session = crate::session::Session::new();
        let keeper = Keeper::new(checkpointer(&session, &ckpt), 1, &[], false);
        let mut lease = StateLease::state(Some(&keeper), vec![("unlabeled", Some(&other)), ("labeled", None)]);
        let mut leased = st.clone();
        let (w, b, r) = ridge_refined(&mut leased, MixedMemory::Spilled, &mut lease, 0.5, 2).unwrap();
        assert!(!r.fell_back && r.residual.is_some_and(|x| x <= TOLERANCE), "{r:?}");
        assert!(close(&w, &want_w) && close(&b, &want_b));
        assert!(keeper.written() && ckpt.exists(), "the state is kept in the checkpoint first");
        assert!(!d.join("m.sfm.ckpt.gram").exists(), "nothing spilled beside it");
        assert!(lease.said[0].contains("read from the checkpoint") && lease.said[0].contains("'labeled'"));
        // The checkpoint holds the whole state under its names, the leased block whole.
        let (blocks, _) = crate::pipeline::parts::read_stats(&crate::session::Session::new(), &ckpt, true).unwrap();
        let names: Vec<&str> = blocks.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["unlabeled", "labeled"]);
        assert_eq!(blocks[1].1, st);
        // An ill-conditioned λ falls back to the f64 factor of the Gram read back: exactly
        // the f64 model.
        let ill = stats_with_noise(600, TILE + 5, c, 7, 1e-5);
        let lambda = 1e-9 * ill.gram.diagonal().into_iter().sum::<f64>();
        let want = ridge_fixed(&ill, ill.gram.clone(), lambda, 2).unwrap();
        let mut lease = StateLease::state(Some(&keeper), vec![("labeled", None)]);
        let (w, b, r) = ridge_refined(&mut ill.clone(), MixedMemory::Spilled, &mut lease, lambda, 2).unwrap();
        assert!(r.fell_back, "{r:?}");
        assert_eq!((w, b), want, "the fallback factors the kept Gram read back");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_sum_the_state_does_not_hold_is_spilled_beside_the_checkpoint_and_removed() {
        let (dim, c) = (2 * TILE + 37, 3);
        let st = stats(900, dim, c, 4);
        let (want_w, want_b) = ridge_fixed(&st, st.gram.clone(), 0.5, 2).unwrap();
        let d = dir("merged");
        let ckpt = d.join("m.sfm.ckpt");
        let session = crate::session::Session::new();
        let keeper = Keeper::new(checkpointer(&session, &ckpt), 1, &[], false);
        let mut lease = StateLease::merged(Some(&keeper));
        let (w, b, _) = ridge_refined(&mut st.clone(), MixedMemory::Spilled, &mut lease, 0.5, 2).unwrap();
        assert!(close(&w, &want_w) && close(&b, &want_b));
        assert!(!keeper.written() && !ckpt.exists(), "a merged sum is not the checkpoint's state");
        assert!(lease.said[0].contains("spilled to"), "{:?}", lease.said);
        assert!(!d.join("m.sfm.ckpt.gram").exists(), "the spill file is removed when the solve ends");
        // Consuming a merged sum keeps nothing.
        let mut consumed = st.clone();
        let mut lease = StateLease::merged(Some(&keeper));
        ridge_refined(&mut consumed, MixedMemory::InPlace, &mut lease, 0.5, 2).unwrap();
        assert!(!keeper.written());
        // Nowhere to write the spill: the solve stops before it takes the Gram.
        let nowhere = d.join("missing").join("m.sfm.ckpt");
        let keeper = Keeper::new(checkpointer(&session, &nowhere), 1, &[], false);
        let mut whole = st.clone();
        let got = ridge_refined(&mut whole, MixedMemory::Spilled, &mut StateLease::merged(Some(&keeper)), 0.5, 2);
        assert!(got.is_err());
        assert_eq!(whole, st, "a spill that failed left the statistics whole");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_kept_gram_damaged_on_disk_is_refused_never_used() {
        let (dim, c) = (TILE + 9, 2);
        let st = stats(300, dim, c, 3);
        let d = dir("damaged");
        let path = d.join("s.stats");
        stats_to_file(&crate::session::Session::new(), &path, &[("labeled", &st)], serde_json::json!({})).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 8] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let source = FileGram { path: path.clone(), block: "labeled".into(), dim, remove: false };
        assert!(matches!(source.gram(), Err(Error::BadModel { .. })));
        assert!(matches!(source.tiles(&mut |_, _, _| {}), Err(Error::BadModel { .. })));
        drop(source);
        assert!(path.exists(), "a file the solve did not write is left");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
