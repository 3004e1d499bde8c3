//! Kernel candidates in one pass (`stages.N.candidates`): every row is mapped through
//! every candidate's map and each keeps statistics of its own (memory and time are K×
//! one candidate's; the other candidates map on the folding thread, timed apart). Each
//! candidate is solved and scored on held-out rows like a pipeline of its own, and the
//! best one's solution is the model's, with every candidate's score in its header.

use std::time::Instant;

use super::{Accumulation, Batch, PassEnv};
use crate::error::{Error, Result};
use crate::model::CandidateTable;
use crate::pipeline::report::SelectionReport;
use crate::pipeline::select::{Best, Fits, Select, Space};
use crate::pipeline::solve_ctx::{Solution, SolveCtx};
use crate::solve::GcvCurve;
use crate::stats::GramStats;

/// One state per candidate, the first the pipeline's own map's.
#[derive(Debug)]
pub(crate) struct CandidateRun {
    inner: Vec<Box<dyn Accumulation>>,
    z: Vec<f32>,
    other_maps: f64,
}

impl CandidateRun {
    pub(crate) fn new(inner: Vec<Box<dyn Accumulation>>) -> CandidateRun {
        CandidateRun { inner, z: Vec::new(), other_maps: 0.0 }
    }
}

/// The candidates as a family of fits: their indices.
struct Indices(usize);

impl Fits for Indices {
    fn grid(&self) -> Vec<f64> {
        (0..self.0).map(|i| i as f64).collect()
    }
    fn outputs(&self) -> usize {
        1
    }
    fn weights(&self, _sets: &[Vec<f64>]) -> Vec<(Vec<f64>, Vec<f64>)> {
        Vec::new()
    }
    fn gcv(&self) -> Option<GcvCurve> {
        None
    }
    fn space(&self) -> Space<'_> {
        Space { pcas: None, mean: &[], ymean: &[], shift: &[] }
    }
}

impl Accumulation for CandidateRun {
    fn update(&mut self, b: &Batch<'_>, env: &PassEnv) -> Result<()> {
        for (i, inner) in self.inner.iter_mut().enumerate() {
            if i == 0 {
                inner.update(b, env)?;
                continue;
            }
            let map = b.maps.get(i).ok_or_else(|| Error::bug("a candidate without its map"))?;
            let (ch, w) = (b.chunk, map.dim());
            self.z.resize(ch.rows * w, 0.0);
            let t = Instant::now();
            map.pipeline.map_chunk(&ch.x, ch.rows, &mut self.z, env.threads);
            self.other_maps += t.elapsed().as_secs_f64();
            inner.update(&Batch { z: &self.z, dim: w, ..*b }, env)?;
        }
        Ok(())
    }

    fn state(&self) -> Result<Vec<(String, &GramStats)>> {
        let mut v = Vec::new();
        for (i, s) in self.inner.iter().enumerate() {
            v.extend(s.state()?.into_iter().map(|(n, b)| (format!("candidate{i}.{n}"), b)));
        }
        Ok(v)
    }

    fn into_state(self: Box<Self>) -> Result<Vec<(String, GramStats)>> {
        let mut v = Vec::new();
        for (i, s) in self.inner.into_iter().enumerate() {
            v.extend(s.into_state()?.into_iter().map(|(n, b)| (format!("candidate{i}.{n}"), b)));
        }
        Ok(v)
    }

    fn size_bytes(&self) -> u64 {
        self.inner.iter().map(|s| s.size_bytes()).sum()
    }

    fn rows(&self) -> u64 {
        self.inner.first().map_or(0, |s| s.rows())
    }

    fn side_map_seconds(&self) -> f64 {
        self.other_maps
    }

    fn solve(self: Box<Self>, ctx: &mut SolveCtx<'_>) -> Result<Solution> {
        let set =
            ctx.checked.candidates.as_ref().ok_or_else(|| Error::bug("candidate statistics without candidates"))?;
        if set.pipelines.len() != self.inner.len() || ctx.maps.len() != self.inner.len() {
            return Err(Error::bug("candidate statistics do not match the candidates"));
        }
        // Each candidate solved and scored as a pipeline of its own.
        let mut solutions = Vec::with_capacity(self.inner.len());
        for (i, (inner, checked)) in self.inner.into_iter().zip(&set.pipelines).enumerate() {
            let solution = ctx.report.prefixed(format!("candidate {i}: "), |report| {
                let mut own = SolveCtx {
                    session: ctx.session,
                    checked,
                    maps: ctx.maps,
                    candidate: i,
                    labels: ctx.labels,
                    training: ctx.training,
                    training_units: ctx.training_units,
                    threads: ctx.threads,
                    report,
                    gram: ctx.gram,
                    keeper: None,
                };
                inner.solve(&mut own)
            })?;
            solutions.push(solution);
        }
        let score: Vec<f64> = solutions
            .iter()
            .map(|s| s.score.ok_or_else(|| Error::bug("a candidate without scores")))
            .collect::<Result<_>>()?;
        let lambda: Vec<f64> = solutions.iter().map(|s| s.settled.lambdas.first().copied().unwrap_or(0.0)).collect();
        let mut best =
            Best { scores: &score, lambdas: &lambda, metric: ctx.checked.metric, key: &set.key, values: &set.values };
        let choice = best.select(&Indices(score.len()), ctx)?;
        ctx.report.report.selections.push(SelectionReport {
            method: "candidates".into(),
            chosen: vec![choice.index as f64],
            rows: 0,
            refit_rows: None,
        });
        let table =
            CandidateTable { key: set.key.clone(), values: set.values.clone(), score, lambda, chosen: choice.index };
        let mut chosen = solutions.swap_remove(choice.index);
        chosen.settled.candidates = Some(table);
        Ok(chosen)
    }
}
