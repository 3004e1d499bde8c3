//! The state of a run: the running statistics of one or two passes (what checkpoints
//! and parts hold), and the solved problem the model is built from.

use crate::model::{Projection, ProjectionInfo};
use crate::pipeline::plan::stage_ranges;
use crate::pipeline::plan::Prepared;
use crate::pipeline::projection::StagePca;
use crate::pipeline::spec::PipelineSpec;
use crate::solve::{Ridge, SolvePath};
use crate::stats::GramStats;

/// The running statistics of a training run.
#[derive(Debug, Clone)]
pub enum State {
    /// One pass: labeled rows, and unlabeled rows when there are any.
    One {
        /// `L`.
        labeled: GramStats,
        /// `U` (PCA only).
        unlabeled: Option<GramStats>,
    },
    /// One pass with k-fold cross-validation: the statistics of each fold (their sum is
    /// the labeled statistics).
    Folds {
        /// One per fold.
        folds: Vec<GramStats>,
    },
    /// Kernel candidates (`stages.N.candidates`): one one-pass state per candidate, the
    /// prepared map's first.
    Candidates {
        /// One per candidate.
        states: Vec<State>,
    },
    /// One pass keeping the mapped rows themselves for the dual solve (at most `D/2`
    /// labeled rows; never written to a file: `paths::takes_dual`).
    Rows(crate::solve::dual::RowStats),
    /// Two passes: per-stage statistics over all rows, then the projected statistics.
    Two {
        /// Pass one, one per stage.
        pass1: Vec<GramStats>,
        /// Pass two (present once pass one is complete).
        pass2: Option<GramStats>,
    },
}

impl State {
    pub(crate) fn new(spec: &PipelineSpec, prep: &Prepared) -> State {
        if spec.candidates.is_some() {
            let shifts = std::iter::once(&prep.shift).chain(prep.alternatives.iter().map(|a| &a.shift));
            return State::Candidates { states: shifts.map(|s| State::one_pass(spec, s, prep.c, prep.semi)).collect() };
        }
        // The dual keeps the mapped rows instead of the Gram: never allocate the D × D
        // statistics it does not use (at D = 2^20 they are 4 TiB, which the plan, having
        // planned the rows, did not refuse).
        if prep.dual {
            let rows = usize::try_from(prep.labeled.total_rows()).unwrap_or(0);
            return State::Rows(crate::solve::dual::RowStats::new(prep.pipeline.output_dim(), prep.c, rows));
        }
        if spec.passes == 1 {
            return State::one_pass(spec, &prep.shift, prep.c, prep.semi);
        }
        let pass1 =
            stage_ranges(&prep.pipeline).into_iter().map(|r| GramStats::new(prep.shift[r].to_vec(), 0)).collect();
        State::Two { pass1, pass2: None }
    }

    /// Fresh one-pass statistics about `shift` (per fold with k-fold).
    fn one_pass(spec: &PipelineSpec, shift: &[f64], c: usize, semi: bool) -> State {
        match spec.ridge.cv {
            Some(k) => State::Folds { folds: (0..k).map(|_| GramStats::new(shift.to_vec(), c)).collect() },
            None => State::One {
                labeled: GramStats::new(shift.to_vec(), c),
                unlabeled: semi.then(|| GramStats::new(shift.to_vec(), 0)),
            },
        }
    }

    pub(crate) fn pass(&self) -> u32 {
        match self {
            State::Two { pass2: Some(_), .. } => 2,
            _ => 1,
        }
    }

    /// Named blocks for a statistics file. Kept rows are not statistics: a run that keeps
    /// them writes no file, and asking for their blocks is an internal error.
    pub(crate) fn blocks(&self) -> crate::error::Result<Vec<(String, &GramStats)>> {
        Ok(match self {
            State::Rows(_) => {
                return Err(crate::error::Error::Internal("kept rows reached a statistics writer".into()))
            }
            State::One { labeled, unlabeled } => {
                let mut v = vec![("labeled".to_string(), labeled)];
                if let Some(u) = unlabeled {
                    v.push(("unlabeled".into(), u));
                }
                v
            }
            State::Folds { folds } => folds.iter().enumerate().map(|(i, s)| (format!("fold{i}"), s)).collect(),
            State::Candidates { states } => {
                let mut v = Vec::new();
                for (i, s) in states.iter().enumerate() {
                    v.extend(s.blocks()?.into_iter().map(|(n, b)| (format!("candidate{i}.{n}"), b)));
                }
                v
            }
            State::Two { pass1, pass2 } => {
                let mut v: Vec<(String, &GramStats)> =
                    pass1.iter().enumerate().map(|(i, s)| (format!("pass1.stage{i}"), s)).collect();
                if let Some(p) = pass2 {
                    v.push(("pass2".into(), p));
                }
                v
            }
        })
    }

    pub(crate) fn from_blocks(passes: u32, mut blocks: Vec<(String, GramStats)>) -> std::result::Result<State, String> {
        if blocks.iter().any(|(n, _)| n.starts_with("candidate0.")) {
            let mut states = Vec::new();
            loop {
                let prefix = format!("candidate{}.", states.len());
                let (mine, rest): (Vec<_>, Vec<_>) = blocks.into_iter().partition(|(n, _)| n.starts_with(&prefix));
                blocks = rest;
                if mine.is_empty() {
                    break;
                }
                let inner = mine.into_iter().map(|(n, s)| (n[prefix.len()..].to_string(), s)).collect();
                states.push(State::from_blocks(1, inner)?);
            }
            return Ok(State::Candidates { states });
        }
        let mut take = |name: &str| blocks.iter().position(|(n, _)| n == name).map(|i| blocks.remove(i).1);
        if let Some(first) = take("fold0") {
            let mut folds = vec![first];
            while let Some(s) = take(&format!("fold{}", folds.len())) {
                folds.push(s);
            }
            return Ok(State::Folds { folds });
        }
        if passes == 2 {
            let mut pass1 = Vec::new();
            while let Some(s) = take(&format!("pass1.stage{}", pass1.len())) {
                pass1.push(s);
            }
            if pass1.is_empty() {
                return Err("no pass-one statistics".into());
            }
            Ok(State::Two { pass1, pass2: take("pass2") })
        } else {
            let labeled = take("labeled").ok_or("no labeled statistics")?;
            Ok(State::One { labeled, unlabeled: take("unlabeled") })
        }
    }

    pub(crate) fn merge(&mut self, other: &State) -> std::result::Result<(), String> {
        match (self, other) {
            (State::One { labeled, unlabeled }, State::One { labeled: l2, unlabeled: u2 }) => {
                if labeled.dim() != l2.dim() || labeled.c != l2.c {
                    return Err("statistics of different shapes".into());
                }
                labeled.merge(l2).map_err(|e| e.to_string())?;
                match (unlabeled, u2) {
                    (Some(a), Some(b)) => a.merge(b).map_err(|e| e.to_string())?,
                    (None, None) => {}
                    _ => return Err("one part has unlabeled statistics and the other not".into()),
                }
                Ok(())
            }
            (State::Candidates { states: a }, State::Candidates { states: b }) => {
                if a.len() != b.len() {
                    return Err(format!("statistics of {} and {} candidates do not merge", a.len(), b.len()));
                }
                for (x, y) in a.iter_mut().zip(b) {
                    x.merge(y)?;
                }
                Ok(())
            }
            (State::Folds { folds: a }, State::Folds { folds: b }) => {
                if a.len() != b.len() {
                    return Err(format!("statistics of {} and {} folds do not merge", a.len(), b.len()));
                }
                for (x, y) in a.iter_mut().zip(b) {
                    x.merge(y).map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            (State::Two { pass1: a, pass2: pa }, State::Two { pass1: b, pass2: pb }) => {
                match (pa, pb) {
                    (Some(x), Some(y)) => x.merge(y).map_err(|e| e.to_string())?,
                    (None, None) => {
                        if a.len() != b.len() {
                            return Err("parts with different stage counts".into());
                        }
                        for (x, y) in a.iter_mut().zip(b) {
                            x.merge(y).map_err(|e| e.to_string())?;
                        }
                    }
                    _ => return Err("pass-one and pass-two statistics do not merge".into()),
                }
                Ok(())
            }
            (State::Rows(_), _) | (_, State::Rows(_)) => Err("kept rows do not merge with statistics".into()),
            _ => Err("one-pass and two-pass statistics do not merge".into()),
        }
    }
}

/// What the solve produced besides the weights: the rotated problem for validation.
pub(crate) struct Solved {
    pub(crate) ridge: Ridge,
    pub(crate) path: SolvePath,
    pub(crate) labeled: crate::stats::Centered,
    pub(crate) projections: Vec<(ProjectionInfo, Projection)>,
    pub(crate) eigenvalues: Vec<f64>,
    pub(crate) pcas: Option<Vec<StagePca>>,
    pub(crate) rows: u64,
    pub(crate) unlabeled_rows: u64,
    pub(crate) components: usize,
    pub(crate) components_requested: usize,
}

impl Solved {
    /// Ridge on all `D` features of the labeled rows (no projection, no unlabeled rows).
    pub(crate) fn on_all_features(
        ridge: Ridge,
        path: SolvePath,
        labeled: crate::stats::Centered,
        eigenvalues: Vec<f64>,
    ) -> Solved {
        let dim = labeled.mean.len();
        Solved {
            ridge,
            path,
            rows: labeled.n,
            labeled,
            projections: Vec::new(),
            eigenvalues,
            pcas: None,
            unlabeled_rows: 0,
            components: dim,
            components_requested: dim,
        }
    }
}
