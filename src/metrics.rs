//! Held-out metrics of several weight sets at once: squared errors per output, right
//! answers (decoded by the output code) and the logistic loss of the ±1 scores, and the
//! one argmax/argmin with its tie rule that every selection uses.

use serde::{Deserialize, Serialize};

/// How held-out rows score a weight set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Share of rows classified right (classification only).
    Accuracy,
    /// Root mean squared error of the scores.
    Rmse,
    /// Mean logistic loss `log(1 + exp(−t·f))` of the ±1 scores (classification only).
    #[serde(rename = "log_loss")]
    LogLoss,
}

impl Metric {
    /// The name a model header and messages use.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Accuracy => "accuracy",
            Metric::Rmse => "rmse",
            Metric::LogLoss => "log_loss",
        }
    }

    /// Larger is better.
    pub fn higher_is_better(self) -> bool {
        self == Metric::Accuracy
    }
}

/// `log(1 + exp(−m))` without overflow.
pub fn logistic_loss(margin: f64) -> f64 {
    if margin > 0.0 {
        (-margin).exp().ln_1p()
    } else {
        -margin + margin.exp().ln_1p()
    }
}

/// The held-out rows' squared errors and right answers under several weight sets.
#[derive(Debug, Clone)]
pub struct SetScores {
    /// Rows scored.
    pub rows: u64,
    /// Per set, per output: Σ (score − target)².
    pub sq: Vec<Vec<f64>>,
    /// Per set: rows classified right (classification).
    pub right: Vec<u64>,
    /// Per set: Σ over rows and outputs of `log(1 + exp(−t·f))` (classification).
    pub logistic: Vec<f64>,
}

impl SetScores {
    /// No rows yet, for `sets` weight sets of `c` outputs.
    pub fn new(sets: usize, c: usize) -> SetScores {
        SetScores { rows: 0, sq: vec![vec![0.0; c]; sets], right: vec![0; sets], logistic: vec![0.0; sets] }
    }

    /// Adds set `li`'s scores of some rows (row-major `rows × c`) against their coded
    /// targets `y` and, for classification, the classes predicted and the true ones.
    pub fn add(&mut self, li: usize, scores: &[f64], y: &[f64], classes: Option<(&[usize], &[u32])>) {
        let c = self.sq[li].len().max(1);
        for (i, (s, t)) in scores.iter().zip(y).enumerate() {
            self.sq[li][i % c] += (s - t).powi(2);
            self.logistic[li] += logistic_loss(s * t);
        }
        if let Some((predicted, truth)) = classes {
            self.right[li] += predicted.iter().zip(truth).filter(|(p, t)| **p == **t as usize).count() as u64;
        }
    }

    /// Per set, per output: the RMSE.
    pub fn rmse(&self) -> Vec<Vec<f64>> {
        let n = self.rows.max(1) as f64;
        self.sq.iter().map(|v| v.iter().map(|s| (s / n).sqrt()).collect()).collect()
    }

    /// Per set: accuracy, the mean RMSE over outputs, or the mean logistic loss.
    pub fn score(&self, metric: Metric) -> Vec<f64> {
        let n = self.rows.max(1) as f64;
        match metric {
            Metric::Accuracy => self.right.iter().map(|&r| r as f64 / n).collect(),
            Metric::Rmse => self.rmse().iter().map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64).collect(),
            Metric::LogLoss => {
                let c = self.sq.first().map_or(1, Vec::len).max(1) as f64;
                self.logistic.iter().map(|l| l / (n * c)).collect()
            }
        }
    }
}

/// The index of the best score (`higher` is better, else lower); ties go to the later
/// entry when `ties_later`, else to the earlier. The one argmax of the crate: class
/// decoding, held-out selection and candidates all use it.
pub fn best_index(score: &[f64], higher: bool, ties_later: bool) -> usize {
    best_of(score.iter().copied(), higher, ties_later)
}

/// [`best_index`] over values as they come (no allocation per row when decoding).
pub fn best_of(values: impl IntoIterator<Item = f64>, higher: bool, ties_later: bool) -> usize {
    let better =
        |a: f64, b: f64| if higher { a > b || (ties_later && a == b) } else { a < b || (ties_later && a == b) };
    let mut best: Option<(usize, f64)> = None;
    for (i, v) in values.into_iter().enumerate() {
        match best {
            Some((_, b)) if !better(v, b) => {}
            _ => best = Some((i, v)),
        }
    }
    best.map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_where_asked_and_the_direction_is_the_metrics() {
        let s = [1.0, 3.0, 3.0, 2.0];
        assert_eq!(best_index(&s, true, false), 1);
        assert_eq!(best_index(&s, true, true), 2);
        assert_eq!(best_index(&s, false, false), 0);
        let t = [2.0, 1.0, 1.0];
        assert_eq!(best_index(&t, false, true), 2);
        assert_eq!(best_index(&[], true, true), 0);
    }

    #[test]
    fn the_logistic_loss_never_overflows_and_matches_the_direct_form() {
        for m in [-800.0, -30.0, -1.0, 0.0, 0.5, 30.0, 800.0] {
            let v = logistic_loss(m);
            assert!(v.is_finite() && v >= 0.0, "{m}: {v}");
            if m.abs() < 30.0 {
                assert!((v - (1.0 + (-m).exp()).ln()).abs() < 1e-12, "{m}");
            }
        }
    }
}
