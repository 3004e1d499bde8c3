//! Sufficient statistics (math.md §12): f64 sums about a fixed shift `μ`.
//!
//! `n`, `s = Σ(z−μ)`, `G = Σ(z−μ)(z−μ)ᵀ` (lower triangle, tiled), `T = Σ(z−μ)yᵀ`,
//! `u = Σy`, `v = Σy∘y`. They add chunk by chunk, merge across shards and threads,
//! and are all that the solvers see.

use crate::error::Result;
mod add;
mod file;
mod tri;
mod tri_factor;

pub use add::Blocks;

/// Rows the Gram multiplies per block (the f32 path's block; the f64 path's is half of
/// it): fewer rows per chunk than this pay the per-block pass over the triangle more often.
pub const PRODUCT_ROWS: usize = ROW_BLOCK_F32;
pub use file::{
    checksum, gram_from_file, gram_tiles_from_file, stats_from_bytes, stats_from_file, stats_to_bytes, stats_to_file,
    STATS_VERSION, TILES_IN_FLIGHT,
};
pub(crate) use tri::{parallel, split_tiles, split_tiles_ref, tile_len, tile_range};
pub use tri::{TriGram, TILE};
pub use tri_factor::{backward_tiles, factor_tiles, forward_tiles, solve_tiles, Scalar};

use add::{FALLBACK_ROWS, GROUP, ROW_BLOCK, ROW_BLOCK_F32};

/// The precision of the Gram products (`run.gram`). Sums are f64 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f64 products (the default).
    #[default]
    F64,
    /// f32 products over blocks of at most 2,048 rows, added into the f64 sums.
    F32,
}

/// The statistics of one row set with `c` targets.
#[derive(Debug, Clone, PartialEq)]
pub struct GramStats {
    /// Shift `μ` (length `D`).
    pub shift: Vec<f64>,
    /// Row count.
    pub n: u64,
    /// The rows' total weight `W`: `n` unless parts were weighted when they merged
    /// (`solve --decay`, `--weights`), when every sum below is a weighted sum and `W`
    /// takes `n`'s place in the centring.
    pub weight: f64,
    /// `Σ(z−μ)`.
    pub s: Vec<f64>,
    /// `Σ(z−μ)(z−μ)ᵀ`, lower triangle.
    pub gram: TriGram,
    /// Target count `c`.
    pub c: usize,
    /// `Σ(z−μ)yᵀ`, row-major `D × c`.
    pub t: Vec<f64>,
    /// `Σy`.
    pub u: Vec<f64>,
    /// `Σy∘y`.
    pub v: Vec<f64>,
}

/// Shift-free quantities derived from [`GramStats`] (math.md §12), dense.
#[derive(Debug, Clone)]
pub struct Centered {
    /// Rows.
    pub n: u64,
    /// The rows' total weight (`n` when unweighted).
    pub weight: f64,
    /// `z̄`.
    pub mean: Vec<f64>,
    /// `C = G − ssᵀ/n`, full row-major `D × D`.
    pub cov: Vec<f64>,
    /// `C_zy = T − s uᵀ/n`, row-major `D × c`.
    pub czy: Vec<f64>,
    /// `ȳ`.
    pub ymean: Vec<f64>,
    /// `c_yy = v − u∘u/n`.
    pub cyy: Vec<f64>,
    /// Largest diagonal entry of the shifted `G` (for the rank threshold).
    pub max_g_diag: f64,
}

impl GramStats {
    /// Empty statistics for `D = shift.len()` features and `c` targets.
    pub fn new(shift: Vec<f64>, c: usize) -> Self {
        let dim = shift.len();
        GramStats {
            n: 0,
            weight: 0.0,
            s: vec![0.0; dim],
            gram: TriGram::zeros(dim),
            c,
            t: vec![0.0; dim * c],
            u: vec![0.0; c],
            v: vec![0.0; c],
            shift,
        }
    }

    /// Feature dimension `D`.
    pub fn dim(&self) -> usize {
        self.shift.len()
    }

    /// Bytes held for `D` features and `c` targets (the figure stated before a run).
    pub fn bytes_for(dim: usize, c: usize) -> u64 {
        8 * (TriGram::len_for(dim) + dim * (2 + c) + 2 * c) as u64
    }

    /// Bytes of the scratch one [`GramStats::add_with`] call allocates in the given
    /// precision on `threads` threads: the block copy, and in f32 a block of f32
    /// features, per thread a group of them widened and a tile product, and the rare
    /// f64 fallback's block.
    pub fn scratch_bytes(dim: usize, precision: Precision, threads: usize) -> u64 {
        match precision {
            Precision::F64 => 8 * (ROW_BLOCK * dim) as u64,
            Precision::F32 => {
                let per_thread = 8 * GROUP * ROW_BLOCK_F32;
                (4 * ROW_BLOCK_F32 * dim + 8 * FALLBACK_ROWS * dim + per_thread * threads.max(1)) as u64
                    + TriGram::f32_scratch_bytes(threads)
            }
        }
    }

    /// Bytes held.
    pub fn size_bytes(&self) -> u64 {
        Self::bytes_for(self.dim(), self.c)
    }

    /// Adds `rows` rows: features `z` (`rows × D`, f32) and targets `y` (`rows × c`).
    /// Non-finite features are an error, never accumulated.
    pub fn add(&mut self, z: &[f32], y: &[f64], rows: usize, threads: usize) -> Result<()> {
        self.add_rows(z, y, rows, (threads, Precision::F64), &mut Blocks::default())
    }

    /// [`GramStats::add`] for f64 features (two-pass mode's projected features).
    pub fn add_f64(&mut self, z: &[f64], y: &[f64], rows: usize, threads: usize) -> Result<()> {
        self.add_rows(z, y, rows, (threads, Precision::F64), &mut Blocks::default())
    }

    /// [`GramStats::add`] with the Gram products in the given precision.
    pub fn add_with(&mut self, z: &[f32], y: &[f64], rows: usize, threads: usize, precision: Precision) -> Result<()> {
        self.add_rows(z, y, rows, (threads, precision), &mut Blocks::default())
    }

    /// [`GramStats::add_with`] in `blocks`' buffers, which a pass keeps from chunk to chunk.
    pub fn add_reusing(
        &mut self,
        z: &[f32],
        y: &[f64],
        rows: usize,
        (threads, precision): (usize, Precision),
        blocks: &mut Blocks,
    ) -> Result<()> {
        self.add_rows(z, y, rows, (threads, precision), blocks)
    }

    /// The same statistics without the targets (`c = 0`).
    pub fn without_targets(&self) -> GramStats {
        GramStats {
            shift: self.shift.clone(),
            n: self.n,
            weight: self.weight,
            s: self.s.clone(),
            gram: self.gram.clone(),
            c: 0,
            t: Vec::new(),
            u: Vec::new(),
            v: Vec::new(),
        }
    }

    /// Moves the shift to `new` exactly: `G' = G − sδᵀ − δsᵀ + Wδδᵀ`, `s' = s − Wδ`,
    /// `T' = T − δuᵀ` with `δ = μ' − μ`.
    pub fn reshift(&mut self, new: &[f64]) {
        assert_eq!(new.len(), self.dim());
        let n = self.weight;
        let delta: Vec<f64> = new.iter().zip(&self.shift).map(|(a, b)| a - b).collect();
        // −sδᵀ − δsᵀ + nδδᵀ = −(s − nδ/2)δᵀ − δ(s − nδ/2)ᵀ
        let half: Vec<f64> = self.s.iter().zip(&delta).map(|(s, d)| s - 0.5 * n * d).collect();
        self.gram.add_sym_rank2(&half, &delta, -1.0);
        for (i, d) in delta.iter().enumerate() {
            self.s[i] -= n * d;
            for k in 0..self.c {
                self.t[i * self.c + k] -= d * self.u[k];
            }
        }
        self.shift = new.to_vec();
    }

    /// Adds `other` (re-shifting a copy of it first if its shift differs).
    pub fn merge(&mut self, other: &GramStats) -> std::result::Result<(), ShapeMismatch> {
        self.combine(other, false)
    }

    /// Removes rows merged in before (`other` must be a part of `self`): the statistics
    /// of the rest, as k-fold cross-validation needs them. Exact up to rounding.
    pub fn subtract(&mut self, other: &GramStats) -> std::result::Result<(), ShapeMismatch> {
        self.combine(other, true)
    }

    fn combine(&mut self, other: &GramStats, minus: bool) -> std::result::Result<(), ShapeMismatch> {
        if (self.dim(), self.c) != (other.dim(), other.c) || (minus && other.n > self.n) {
            return Err(ShapeMismatch { dim: (self.dim(), other.dim()), outputs: (self.c, other.c) });
        }
        let shifted;
        let other = if other.shift == self.shift {
            other
        } else {
            let mut o = other.clone();
            o.reshift(&self.shift);
            shifted = o;
            &shifted
        };
        let sign = if minus { -1.0 } else { 1.0 };
        if minus {
            self.n -= other.n;
            self.weight -= other.weight;
            self.gram.sub_assign(&other.gram);
        } else {
            self.n += other.n;
            self.weight += other.weight;
            self.gram.add_assign(&other.gram);
        }
        for (a, b) in
            [(&mut self.s, &other.s), (&mut self.t, &other.t), (&mut self.u, &other.u), (&mut self.v, &other.v)]
        {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += sign * y);
        }
        Ok(())
    }

    /// `1 / W`, or 0 for no rows: the centring's factor.
    pub fn inv_weight(&self) -> f64 {
        if self.weight > 0.0 {
            1.0 / self.weight
        } else {
            0.0
        }
    }

    /// Scales every sum and the total weight by `w > 0` (the row count stays): the
    /// statistics of the same rows, each weighing `w` times as much.
    pub fn scale(&mut self, w: f64) {
        self.weight *= w;
        self.gram.scale(w);
        for v in [&mut self.s, &mut self.t, &mut self.u, &mut self.v] {
            v.iter_mut().for_each(|x| *x *= w);
        }
    }

    /// The shift-free quantities, with the dense covariance `C` (`D × D`).
    pub fn centered(&self) -> Centered {
        let dim = self.dim();
        let n = self.weight;
        let mut out = self.moments();
        let mut cov = self.gram.to_full();
        if n > 0.0 {
            for i in 0..dim {
                for j in 0..dim {
                    cov[i * dim + j] -= self.s[i] * self.s[j] / n;
                }
            }
        }
        out.cov = cov;
        out
    }

    /// The shift-free quantities without the dense covariance (`cov` left empty): what
    /// the solve paths that work on the tiled Gram need.
    pub fn moments(&self) -> Centered {
        let (dim, c) = (self.dim(), self.c);
        let inv = self.inv_weight();
        let max_g_diag = self.gram.diagonal().into_iter().fold(0.0, f64::max);
        let mean = self.shift.iter().zip(&self.s).map(|(m, s)| m + s * inv).collect();
        let mut czy = self.t.clone();
        for i in 0..dim {
            for k in 0..c {
                czy[i * c + k] -= self.s[i] * self.u[k] * inv;
            }
        }
        let ymean = self.u.iter().map(|u| u * inv).collect();
        let cyy = self.v.iter().zip(&self.u).map(|(v, u)| v - u * u * inv).collect();
        Centered { n: self.n, weight: self.weight, mean, cov: Vec::new(), czy, ymean, cyy, max_g_diag }
    }
}

/// Statistics that cannot be merged: their feature or output counts differ.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("statistics of different shapes do not merge: D = {} and {}, outputs = {} and {}", dim.0, dim.1, outputs.0, outputs.1)]
pub struct ShapeMismatch {
    /// The two feature counts.
    pub dim: (usize, usize),
    /// The two output counts.
    pub outputs: (usize, usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn data(rows: usize, dim: usize, c: usize) -> (Vec<f32>, Vec<f64>) {
        let mut r = crate::rng::StageRng::new(3, 9);
        let z = (0..rows * dim).map(|_| (r.uniform() * 4.0 - 1.0 + 100.0) as f32).collect();
        let y = (0..rows * c).map(|_| r.uniform() - 0.5).collect();
        (z, y)
    }

    fn dense_gram(z: &[f32], rows: usize, dim: usize, mu: &[f64]) -> Vec<f64> {
        let mut g = vec![0.0; dim * dim];
        for r in 0..rows {
            for i in 0..dim {
                for j in 0..dim {
                    g[i * dim + j] += (f64::from(z[r * dim + i]) - mu[i]) * (f64::from(z[r * dim + j]) - mu[j]);
                }
            }
        }
        g
    }

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    #[test]
    fn tiled_syrk_matches_dense_across_tile_edges_and_threads() {
        // D = 2·TILE + 3 forces partial tiles; rows > ROW_BLOCK forces two blocks.
        for &(rows, dim) in &[(1usize, 1usize), (5, 7), (ROW_BLOCK + 17, 2 * TILE + 3)] {
            let (z, y) = data(rows, dim, 2);
            let mu = vec![100.0; dim];
            let want = dense_gram(&z, rows, dim, &mu);
            let mut results = Vec::new();
            for threads in [1, 2, 3] {
                let mut st = GramStats::new(mu.clone(), 2);
                st.add(&z, &y, rows, threads).unwrap();
                assert!(max_rel(&st.gram.to_full(), &want) < 1e-12);
                results.push(st);
            }
            assert_eq!(results[0], results[1], "thread count changed the sums");
            assert_eq!(results[0], results[2]);
            let g = &results[0].gram;
            assert_eq!(g.get_lower(dim - 1, 0), want[(dim - 1) * dim]);
        }
    }

    #[test]
    fn statistics_of_other_shapes_are_refused_not_merged() {
        let mut a = GramStats::new(vec![0.0; 4], 2);
        let b = GramStats::new(vec![0.0; 5], 2);
        let c = GramStats::new(vec![0.0; 4], 1);
        assert_eq!(a.merge(&b), Err(ShapeMismatch { dim: (4, 5), outputs: (2, 2) }));
        assert_eq!(a.merge(&c), Err(ShapeMismatch { dim: (4, 4), outputs: (2, 1) }));
        assert_eq!(a.n, 0);
    }

    #[test]
    fn merge_equals_union_and_reshift_is_exact() {
        let (rows, dim, c) = (300, 40, 3);
        let (z, y) = data(rows, dim, c);
        let mut whole = GramStats::new(vec![100.0; dim], c);
        whole.add(&z, &y, rows, 1).unwrap();
        let mut a = GramStats::new(vec![100.0; dim], c);
        a.add(&z[..120 * dim], &y[..120 * c], 120, 1).unwrap();
        let mut b = GramStats::new(vec![99.5; dim], c);
        b.add(&z[120 * dim..], &y[120 * c..], rows - 120, 2).unwrap();
        a.merge(&b).unwrap();
        assert_eq!(a.n, whole.n);
        assert!(max_rel(&a.gram.to_full(), &whole.gram.to_full()) < 1e-12);
        assert!(max_rel(&a.s, &whole.s) < 1e-10);
        assert!(max_rel(&a.t, &whole.t) < 1e-10);
        let ca = a.centered();
        let cw = whole.centered();
        assert!(max_rel(&ca.cov, &cw.cov) < 1e-10);
        assert!(max_rel(&ca.czy, &cw.czy) < 1e-10);
    }

    #[test]
    fn f32_gram_stays_within_the_rounding_bound_of_one_block() {
        // Three full blocks and a partial one, D over two tiles. Each f32 block product
        // of k ≤ ROW_BLOCK_F32 terms errs by at most γ_k Σ|z_ri z_rj| (γ_k ≈ k·u, u = 2⁻²⁴),
        // the rounding of z − μ to f32 adds 2u, and the blocks are summed in f64: so the
        // bound is per entry, relative to Σ|z_ri z_rj| over all rows, not growing with them.
        let (rows, dim) = (3 * ROW_BLOCK_F32 + 17, TILE + 9);
        let (z, y) = data(rows, dim, 2);
        let mu = vec![100.0; dim];
        let mut exact = GramStats::new(mu.clone(), 2);
        exact.add(&z, &y, rows, 2).unwrap();
        let mut fast = GramStats::new(mu.clone(), 2);
        fast.add_with(&z, &y, rows, 2, Precision::F32).unwrap();
        let u = f64::from(f32::EPSILON) / 2.0;
        let gamma = (ROW_BLOCK_F32 as f64 + 2.0) * u;
        let mut abs = vec![0.0; dim * dim];
        for r in 0..rows {
            for i in 0..dim {
                let zi = (f64::from(z[r * dim + i]) - mu[i]).abs();
                for j in 0..=i {
                    abs[i * dim + j] += zi * (f64::from(z[r * dim + j]) - mu[j]).abs();
                }
            }
        }
        let mut worst = 0.0f64;
        for i in 0..dim {
            for j in 0..=i {
                let err = (fast.gram.get_lower(i, j) - exact.gram.get_lower(i, j)).abs();
                assert!(err <= gamma * abs[i * dim + j], "entry ({i}, {j}): {err:e} > {:e}", gamma * abs[i * dim + j]);
                worst = worst.max(err / abs[i * dim + j]);
            }
        }
        // Not exact either: the option really multiplies in f32.
        assert!(worst > 0.0);
        assert_eq!(fast.n, exact.n);
    }

    #[test]
    fn f32_gram_and_sums_are_the_same_bits_for_any_thread_count() {
        // Two f32 blocks, features over several thread parts, groups and partial tiles.
        let (rows, dim) = (ROW_BLOCK_F32 + 17, 2 * TILE + 3);
        let (z, y) = data(rows, dim, 3);
        let runs: Vec<GramStats> = [1, 2, 3]
            .iter()
            .map(|&threads| {
                let mut st = GramStats::new(vec![100.0; dim], 3);
                st.add_with(&z, &y, rows, threads, Precision::F32).unwrap();
                st
            })
            .collect();
        for r in &runs[1..] {
            assert!(r.s == runs[0].s, "thread count changed s");
            assert!(r.t == runs[0].t, "thread count changed T");
            assert!(r.gram == runs[0].gram, "thread count changed the Gram");
            assert_eq!((r.n, &r.u, &r.v), (runs[0].n, &runs[0].u, &runs[0].v));
        }
        // s and T sum the f32-rounded values: within f32 rounding of the f64 ones.
        let mut exact = GramStats::new(vec![100.0; dim], 3);
        exact.add(&z, &y, rows, 2).unwrap();
        assert!(max_rel(&runs[0].t, &exact.t) < 1e-5);
        assert!(max_rel(&runs[0].s, &exact.s) < 1e-5);
    }

    #[test]
    fn an_f32_block_that_could_overflow_is_multiplied_in_f64() {
        // |z| ≈ 1e18: its squares overflow f32 (3.4e38), so the block goes through the f64
        // fallback, in sub-blocks of FALLBACK_ROWS rows (rows spans several, and a partial one).
        let (rows, dim) = (2 * FALLBACK_ROWS + 5, 7);
        let (z, y) = data(rows, dim, 1);
        let big: Vec<f32> = z.iter().map(|v| (v - 100.0) * 1e18).collect();
        let mut fast = GramStats::new(vec![0.0; dim], 1);
        fast.add_with(&big, &y, rows, 2, Precision::F32).unwrap();
        let mut exact = GramStats::new(vec![0.0; dim], 1);
        exact.add(&big, &y, rows, 2).unwrap();
        let g = fast.gram.to_full();
        assert!(g.iter().all(|v| v.is_finite()), "the f32 products overflowed");
        // The inputs are f32 already, so the f64 products of the same values agree closely.
        assert!(max_rel(&g, &exact.gram.to_full()) < 1e-12);
    }

    #[test]
    fn non_finite_features_are_refused() {
        let mut st = GramStats::new(vec![0.0; 2], 0);
        assert!(st.add(&[1.0, f32::NAN], &[], 1, 1).is_err());
        assert_eq!(st.n, 0);
        // Past the scan's first parts, the first fault is the one named, in f32 and f64.
        let (rows, dim) = (300, 37);
        let (mut z, _) = data(rows, dim, 0);
        z[250 * dim + 5] = f32::INFINITY;
        z[260 * dim + 1] = f32::NAN;
        let mut st = GramStats::new(vec![0.0; dim], 0);
        let found = |e| matches!(e, Error::BadFeature { row: 250, feature: 5, too_large: false, .. });
        assert!(found(st.add_with(&z, &[], rows, 2, Precision::F32).unwrap_err()));
        let mut wide: Vec<f64> = z.iter().map(|&v| f64::from(v)).collect();
        assert!(found(st.add_f64(&wide, &[], rows, 2).unwrap_err()));
        // 1e100 squares within the f64 sums; the NaN after it is the first fault, then a
        // larger value before that.
        wide[250 * dim + 5] = 1e100;
        let e = st.add_f64(&wide, &[], rows, 2).unwrap_err();
        assert!(matches!(e, Error::BadFeature { row: 260, feature: 1, too_large: false, .. }), "{e:?}");
        wide[255 * dim + 2] = -1e101;
        let e = st.add_f64(&wide, &[], rows, 2).unwrap_err();
        assert!(matches!(e, Error::BadFeature { row: 255, feature: 2, too_large: true, .. }), "{e:?}");
        assert_eq!(st.n, 0);
    }

    #[test]
    fn blocks_kept_from_chunk_to_chunk_give_the_sums_of_fresh_ones() {
        // A pass reuses one set of block buffers for chunks of any size and for
        // statistics of other widths: nothing of an earlier, larger block may leak.
        for precision in [Precision::F32, Precision::F64] {
            let mut blocks = Blocks::default();
            for (dim, chunks) in [(2 * TILE + 3, vec![ROW_BLOCK_F32 + 17, 40, 3]), (TILE - 9, vec![5, 700])] {
                let mut kept = GramStats::new(vec![100.0; dim], 2);
                let mut fresh = GramStats::new(vec![100.0; dim], 2);
                for (k, &rows) in chunks.iter().enumerate() {
                    let (mut z, y) = data(rows, dim, 2);
                    z.iter_mut().for_each(|v| *v += k as f32);
                    kept.add_reusing(&z, &y, rows, (2, precision), &mut blocks).unwrap();
                    fresh.add_with(&z, &y, rows, 2, precision).unwrap();
                }
                assert!(kept == fresh, "{precision:?}, D = {dim}: reused blocks changed the sums");
            }
        }
    }
}
