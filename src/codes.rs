//! Output codes of a classifier (math.md §13.9): which ±1 target each class gets on each
//! output, and how scores decode back to a class. One-vs-all is the default; an
//! error-correcting code gives every class a row of a seeded random ±1 matrix `M`
//! (`c × L`) and decodes to the nearest row, `argmin_k ‖f(x) − M_k‖² = argmax_k M_k·f(x)`.
//! Every output is a column of the same ridge problem, so all are solved from one
//! factorisation.

use serde::{Deserialize, Serialize};

use crate::rng::StageRng;

/// A class-to-targets code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputCode {
    /// One output per class (one output for two classes): `M = 2I − 11ᵀ`.
    OneVsAll {
        /// Classes.
        classes: usize,
    },
    /// An explicit ±1 matrix, row-major `classes × length`.
    Matrix {
        /// Classes (rows).
        classes: usize,
        /// Code length `L` (columns, the outputs).
        length: usize,
        /// The entries, ±1.
        m: Vec<i8>,
    },
}

/// Why a code cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    /// More columns asked for than distinct useful columns exist.
    #[error(
        "a code of length {length} for {classes} classes is impossible: {classes} classes have only {max} distinct non-constant columns up to sign; use code_length ≤ {max}"
    )]
    TooLong {
        /// Asked length.
        length: usize,
        /// Classes.
        classes: usize,
        /// The most columns there are.
        max: u64,
    },
    /// A given code is malformed.
    #[error("{0}")]
    Malformed(String),
}

/// Candidate matrices drawn; the one with the largest minimum row distance is kept.
const TRIES: usize = 16;

impl OutputCode {
    /// Outputs (columns).
    pub fn outputs(&self) -> usize {
        match self {
            OutputCode::OneVsAll { classes } if *classes == 2 => 1,
            OutputCode::OneVsAll { classes } => *classes,
            OutputCode::Matrix { length, .. } => *length,
        }
    }

    /// Classes (rows).
    pub fn classes(&self) -> usize {
        match self {
            OutputCode::OneVsAll { classes } | OutputCode::Matrix { classes, .. } => *classes,
        }
    }

    /// The code's entry for class `k`, output `l`.
    pub fn entry(&self, k: usize, l: usize) -> f64 {
        match self {
            OutputCode::OneVsAll { classes: 2 } => {
                if k == 1 {
                    1.0
                } else {
                    -1.0
                }
            }
            OutputCode::OneVsAll { .. } => {
                if k == l {
                    1.0
                } else {
                    -1.0
                }
            }
            OutputCode::Matrix { length, m, .. } => f64::from(m[k * length + l]),
        }
    }

    /// A seeded random code (math.md §13.9): no constant column, no column equal to
    /// another or to its negation, distinct rows, and of `TRIES` draws the one whose
    /// closest two rows are farthest apart (Hamming distance).
    pub fn random(classes: usize, length: usize, seed: u64) -> Result<OutputCode, CodeError> {
        // Columns up to sign that are not constant: 2^(c−1) − 1.
        let max = if classes >= 64 { u64::MAX } else { (1u64 << (classes - 1)).saturating_sub(1) };
        // Two classes have one useful column, [1, −1] (the sign of one-vs-all's output).
        if classes < 2 || length == 0 || length as u64 > max {
            return Err(CodeError::TooLong { length, classes, max: if classes < 2 { 0 } else { max } });
        }
        let mut rng = StageRng::new(seed, u64::MAX - 7);
        let mut best: Option<(usize, Vec<i8>)> = None;
        // The row-distance search is c²·L per draw; with many classes one draw is kept
        // once its rows are distinct (which random rows of a useful length are).
        let cheap = (classes * classes).saturating_mul(length) <= 50_000_000;
        for _ in 0..if cheap { TRIES } else { 1 } {
            let mut cols: Vec<Vec<i8>> = Vec::with_capacity(length);
            // Each column is redrawn until it is new; with length ≤ max this ends, and is
            // fast unless length is close to max (then the draws get rarer, still finite).
            let mut draws = 0u64;
            while cols.len() < length {
                draws += 1;
                if draws > 10_000 * length as u64 {
                    break;
                }
                let col: Vec<i8> = (0..classes).map(|_| if rng.below(2) == 1 { 1 } else { -1 }).collect();
                let constant = col.iter().all(|&v| v == col[0]);
                let seen = cols.iter().any(|c| c == &col || c.iter().zip(&col).all(|(a, b)| *a == -*b));
                if !constant && !seen {
                    cols.push(col);
                }
            }
            if cols.len() < length {
                continue;
            }
            let m: Vec<i8> = (0..classes).flat_map(|k| cols.iter().map(move |c| c[k])).collect();
            let d = if cheap { min_distance(&m, classes, length) } else { usize::from(distinct_rows(&m, length)) };
            if d > 0 && best.as_ref().is_none_or(|(b, _)| d > *b) {
                best = Some((d, m));
            }
        }
        let (_, m) = best.ok_or_else(|| {
            CodeError::Malformed(format!("no valid code of length {length} for {classes} classes was found"))
        })?;
        Ok(OutputCode::Matrix { classes, length, m })
    }

    /// A code given as rows of ±1 (one per class, in class order), checked like a drawn
    /// one: equal lengths, entries ±1, distinct rows, no constant column, and no column
    /// equal to another or to its negation (it would only repeat that output).
    pub fn from_rows(rows: &[Vec<i8>]) -> Result<OutputCode, CodeError> {
        let classes = rows.len();
        let length = rows.first().map_or(0, Vec::len);
        if classes < 2 || length == 0 {
            return Err(CodeError::Malformed("a code needs at least 2 rows of at least 1 entry".into()));
        }
        if let Some(k) = rows.iter().position(|r| r.len() != length) {
            return Err(CodeError::Malformed(format!("row {k} has {} entries, row 0 has {length}", rows[k].len())));
        }
        if rows.iter().flatten().any(|&v| v != 1 && v != -1) {
            return Err(CodeError::Malformed("every entry must be 1 or -1".into()));
        }
        let m: Vec<i8> = rows.iter().flatten().copied().collect();
        if let Some(l) = (0..length).find(|&l| (0..classes).all(|k| m[k * length + l] == m[l])) {
            return Err(CodeError::Malformed(format!("column {l} is constant: it tells no class apart")));
        }
        if !distinct_rows(&m, length) {
            return Err(CodeError::Malformed("two classes have the same row: they could not be told apart".into()));
        }
        let columns: Vec<Vec<i8>> = (0..length).map(|l| (0..classes).map(|k| m[k * length + l]).collect()).collect();
        for (l, col) in columns.iter().enumerate().skip(1) {
            let negated = |a: &Vec<i8>| a.iter().zip(col).all(|(x, y)| *x == -*y);
            if let Some(j) = columns[..l].iter().position(|a| a == col || negated(a)) {
                let how = if &columns[j] == col { "equal to" } else { "the negation of" };
                return Err(CodeError::Malformed(format!(
                    "column {l} is {how} column {j}: it repeats that output and adds nothing to tell classes apart"
                )));
            }
        }
        Ok(OutputCode::Matrix { classes, length, m })
    }

    /// Parses a code file: one line per class, entries `1`/`-1` (or `+1`) separated by
    /// spaces or commas; blank lines and lines starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<OutputCode, CodeError> {
        let mut rows = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let row = line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|t| !t.is_empty())
                .map(|t| match t {
                    "1" | "+1" => Ok(1i8),
                    "-1" => Ok(-1i8),
                    other => Err(CodeError::Malformed(format!("line {}: '{other}' is not 1 or -1", n + 1))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            rows.push(row);
        }
        OutputCode::from_rows(&rows)
    }

    /// The ±1 targets of rows of class indices, row-major `rows × outputs`.
    pub fn targets(&self, classes: &[u32], y: &mut Vec<f64>) {
        let c = self.outputs();
        y.clear();
        for &k in classes {
            y.extend((0..c).map(|l| self.entry(k as usize, l)));
        }
    }

    /// The class of every row of scores (`rows × outputs`): the nearest code row, ties
    /// to the lowest class.
    pub fn decode(&self, scores: &[f64]) -> Vec<usize> {
        match self {
            OutputCode::OneVsAll { classes: 2 } => scores.iter().map(|&s| usize::from(s > 0.0)).collect(),
            // argmax_k (2f_k − Σf) = argmax_k f_k, without the sum's rounding.
            OutputCode::OneVsAll { classes } => {
                scores.chunks_exact(*classes).map(|s| argmax(s.iter().copied())).collect()
            }
            OutputCode::Matrix { classes, length, m } => scores
                .chunks_exact(*length)
                .map(|f| {
                    argmax((0..*classes).map(|k| {
                        m[k * length..(k + 1) * length].iter().zip(f).map(|(&a, &b)| f64::from(a) * b).sum::<f64>()
                    }))
                })
                .collect(),
        }
    }

    /// How many per-class score columns [`OutputCode::class_scores`] gives: one for
    /// binary one-vs-all (the score of the second class), else one per class.
    pub fn score_columns(&self) -> usize {
        match self {
            OutputCode::OneVsAll { classes: 2 } => 1,
            OutputCode::OneVsAll { classes } | OutputCode::Matrix { classes, .. } => *classes,
        }
    }

    /// Per-class scores of rows of output scores (`rows × outputs` →
    /// `rows × score_columns()`). One-vs-all's are the outputs themselves. A code's are
    /// each class's mean agreement with the outputs, `s_k = (1/L) Σ_l M_kl f_l`: since
    /// `‖f − m_k‖² = ‖f‖² + L − 2L·s_k`, their argmax is the nearest code row, so the
    /// prediction is always the argmax of these scores (math.md §13.9).
    pub fn class_scores(&self, scores: &[f64]) -> Vec<f64> {
        match self {
            OutputCode::OneVsAll { .. } => scores.to_vec(),
            OutputCode::Matrix { classes, length, m } => scores
                .chunks_exact(*length)
                .flat_map(|f| {
                    (0..*classes).map(move |k| {
                        let agree: f64 =
                            m[k * length..(k + 1) * length].iter().zip(f).map(|(&a, &b)| f64::from(a) * b).sum();
                        agree / *length as f64
                    })
                })
                .collect(),
        }
    }

    /// The class of every row of per-class scores ([`OutputCode::class_scores`]): the
    /// sign for binary one-vs-all, else the argmax (ties to the lowest class).
    pub fn classify_scores(&self, class_scores: &[f64]) -> Vec<usize> {
        match self.score_columns() {
            1 => class_scores.iter().map(|&s| usize::from(s > 0.0)).collect(),
            k => class_scores.chunks_exact(k).map(|s| argmax(s.iter().copied())).collect(),
        }
    }

    /// The rows, for the model header (`None` for one-vs-all).
    pub fn rows(&self) -> Option<Vec<Vec<i8>>> {
        match self {
            OutputCode::OneVsAll { .. } => None,
            OutputCode::Matrix { length, m, .. } => Some(m.chunks_exact(*length).map(<[i8]>::to_vec).collect()),
        }
    }
}

/// The index of the largest value, ties to the lowest (`metrics::best_index`).
fn argmax(v: impl Iterator<Item = f64>) -> usize {
    crate::metrics::best_of(v, true, false)
}

/// Whether no two rows are equal (sorting, so many classes stay cheap).
fn distinct_rows(m: &[i8], length: usize) -> bool {
    let mut rows: Vec<&[i8]> = m.chunks_exact(length).collect();
    rows.sort_unstable();
    rows.windows(2).all(|w| w[0] != w[1])
}

/// The smallest Hamming distance between two rows.
fn min_distance(m: &[i8], classes: usize, length: usize) -> usize {
    let mut best = usize::MAX;
    for a in 0..classes {
        for b in a + 1..classes {
            let d = (0..length).filter(|&l| m[a * length + l] != m[b * length + l]).count();
            best = best.min(d);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drawn_code_has_distinct_rows_and_useful_distinct_columns() {
        let code = OutputCode::random(10, 200, 3).unwrap();
        let rows = code.rows().unwrap();
        assert_eq!((rows.len(), rows[0].len()), (10, 200));
        let (c, l) = (10, 200);
        let cols: Vec<Vec<i8>> = (0..l).map(|j| rows.iter().map(|r| r[j]).collect()).collect();
        for (j, col) in cols.iter().enumerate() {
            assert!(col.iter().any(|&v| v != col[0]), "column {j} constant");
            for (i, other) in cols[..j].iter().enumerate() {
                assert!(col != other && col.iter().zip(other).any(|(a, b)| *a != -*b), "columns {i} and {j}");
            }
        }
        // Random ±1 rows of length 200 sit about 100 apart; the best of the draws is kept.
        let m: Vec<i8> = rows.iter().flatten().copied().collect();
        assert!(min_distance(&m, c, l) > 70, "min distance {}", min_distance(&m, c, l));
        assert_eq!(OutputCode::random(10, 200, 3).unwrap(), code, "seeded");
        assert_ne!(OutputCode::random(10, 200, 4).unwrap(), code);
        // 4 classes have 2^3 − 1 = 7 useful columns; 3 classes 3.
        assert!(OutputCode::random(4, 7, 1).is_ok());
        assert!(matches!(OutputCode::random(4, 8, 1), Err(CodeError::TooLong { max: 7, .. })));
        // 2 classes have 2^1 − 1 = 1: the column [1, −1] up to sign (the limit the pipeline reference states).
        let two = OutputCode::random(2, 1, 1).unwrap().rows().unwrap();
        assert!(two == vec![vec![1], vec![-1]] || two == vec![vec![-1], vec![1]], "{two:?}");
        assert!(matches!(OutputCode::random(2, 2, 1), Err(CodeError::TooLong { max: 1, .. })));
        assert!(matches!(OutputCode::random(1, 1, 1), Err(CodeError::TooLong { max: 0, .. })));
        // Many classes: one draw, rows checked distinct by sorting.
        let big = OutputCode::random(10_000, 200, 1).unwrap();
        assert_eq!((big.classes(), big.outputs()), (10_000, 200));
    }

    #[test]
    fn decoding_is_the_nearest_row_and_one_vs_all_is_the_argmax() {
        let code = OutputCode::random(6, 20, 9).unwrap();
        let rows = code.rows().unwrap();
        // A noisy copy of each row decodes to its class; the nearest row in squared loss.
        let mut r = StageRng::new(1, 1);
        for (k, row) in rows.iter().enumerate() {
            let f: Vec<f64> = row.iter().map(|&v| f64::from(v) * 0.8 + 0.3 * (r.uniform() - 0.5)).collect();
            let nearest = (0..6)
                .min_by(|&a, &b| {
                    let d = |i: usize| rows[i].iter().zip(&f).map(|(&m, x)| (x - f64::from(m)).powi(2)).sum::<f64>();
                    d(a).total_cmp(&d(b))
                })
                .unwrap();
            assert_eq!(code.decode(&f), vec![k]);
            assert_eq!(nearest, k);
        }
        let ova = OutputCode::OneVsAll { classes: 4 };
        assert_eq!(ova.decode(&[0.1, 0.7, -0.2, 0.7, 1.0, 0.0, 0.0, 0.0]), vec![1, 0]);
        // The identity code 2I − 11ᵀ as a matrix decodes like one-vs-all.
        let ident: Vec<Vec<i8>> = (0..4).map(|k| (0..4).map(|l| if k == l { 1 } else { -1 }).collect()).collect();
        let m = OutputCode::from_rows(&ident).unwrap();
        let mut y = Vec::new();
        m.targets(&[2, 0], &mut y);
        let mut want = Vec::new();
        ova.targets(&[2, 0], &mut want);
        assert_eq!(y, want);
        let s: Vec<f64> = (0..400).map(|i| ((i * 37 % 101) as f64 / 50.0) - 1.0).collect();
        assert_eq!(m.decode(&s), ova.decode(&s));
    }

    #[test]
    fn a_code_file_is_checked() {
        assert!(OutputCode::parse("1 -1 1\n-1 1 1\n# c\n\n+1,1,-1\n").is_ok());
        for (text, needle) in [
            ("1 -1\n1 -1\n-1 1\n", "same row"),
            ("1 -1\n1 1\n", "column 0 is constant"),
            ("1 2\n-1 1\n", "'2' is not 1 or -1"),
            ("1 -1\n1\n", "row 1 has 1 entries"),
            ("1 1 -1\n-1 -1 1\n1 1 1\n", "column 1 is equal to column 0"),
            ("1 -1 1\n-1 1 1\n1 -1 -1\n", "column 1 is the negation of column 0"),
        ] {
            let e = OutputCode::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
