//! The two-stage reduction of a symmetric matrix to tridiagonal form, `A = Q T Qᵀ` with
//! `Q = Q₁Q₂`, for the tridiagonal solve path (math.md §13.7).
//!
//! A one-stage Householder reduction spends half its flops in matrix–vector products
//! with the whole trailing matrix, so it runs at memory speed (profiled: 89 % of the GCV
//! solve at D = 4096). Here stage one takes the matrix to a band of half-width `b` by
//! blocked QR of `b`-column panels: each panel's `A V` is one pass over the trailing
//! triangle by tiles, and the symmetric rank-`2b` updates of four panels are applied
//! together as one rank-`8b` product by column strips — matrix–matrix products, near
//! the GEMM's rate. Stage two chases the
//! band down to tridiagonal form with length-`b` reflectors on `b × b` blocks near the
//! diagonal (`O(D²b)` flops, in cache).
//!
//! Nothing beyond the one dense `D × D` the caller hands over is needed to keep `Q`: the
//! stage-one reflectors stay below the band in the lower triangle (as LAPACK keeps them),
//! and the stage-two reflectors of sweep `j` (one value per row `j+1 … D−1`: each
//! reflector's τ in its first row's slot, its essentials after) go down column `D−1−j` of
//! the strict upper triangle, which has exactly that many slots and which the reduction
//! never reads (stage one leaves scratch in the upper part of the diagonal blocks). The band itself is chased in a separate `D × (2b+1)`.

use faer::reborrow::ReborrowMut;
use faer::{Mat, MatMut, MatRef, Par};

use super::panels::{apply_block, dot, householder, panel_basis, reflect, to_band, PANELS_PER_UPDATE};
use super::symmetric;

/// `A = Q T Qᵀ`: `T`'s diagonals and the reflectors of `Q`.
#[derive(Debug)]
pub(crate) struct TwoStage {
    /// The reflectors (see the module docs); nothing else of the matrix is kept.
    store: Mat<f64>,
    /// Stage one's block factors: panel `k` is `Q_k = I − V_k T_k V_kᵀ`.
    panel_t: Vec<Mat<f64>>,
    band: usize,
    /// `T`'s diagonal.
    pub diag: Vec<f64>,
    /// `T`'s subdiagonal (`offdiag[i] = T[i+1, i]`, the last one 0).
    pub offdiag: Vec<f64>,
}

/// The band half-width the solve uses: wide enough for the stage-one products to run
/// at the GEMM's rate, narrow enough for stage two to stay cheap (`6D²b` flops).
pub(crate) fn default_band(dim: usize) -> usize {
    if dim >= 2048 {
        48
    } else {
        32
    }
}

/// Bytes [`TwoStage::reduce`] allocates beside the dense matrix it is given: the band,
/// the stage-one panel's matrices, a group's deferred `[V Y]` and `[Y V]`, and the
/// symmetric product's partial sums of `A V`.
pub(crate) fn work_bytes(dim: usize, band: usize) -> u64 {
    let deferred = 2 * dim * 2 * band * PANELS_PER_UPDATE;
    8 * (dim * (2 * band + 1) + 4 * dim * band + deferred + 3 * dim * band) as u64 + symmetric::work_bytes(dim, band)
}

impl TwoStage {
    /// Reduces the symmetric matrix whose lower triangle `a` holds (the strict upper part
    /// is ignored and overwritten) with band half-width `band ≥ 1`, and turns `rhs` into
    /// `Qᵀ rhs`.
    pub(crate) fn reduce(mut a: Mat<f64>, band: usize, mut rhs: MatMut<'_, f64>, par: Par) -> TwoStage {
        let n = a.nrows();
        let b = band.max(1);
        let panel_t = to_band(a.as_mut(), b, rhs.rb_mut(), par);
        let ld = 2 * b + 1;
        let mut bd = vec![0.0; n * ld];
        for c in 0..n {
            for d in 0..=b.min(n - 1 - c) {
                bd[c * ld + d] = a[(c + d, c)];
            }
        }
        chase(&mut bd, n, b, &mut a, rhs);
        let diag = (0..n).map(|i| bd[i * ld]).collect();
        let offdiag = (0..n).map(|i| if i + 1 < n { bd[i * ld + 1] } else { 0.0 }).collect();
        TwoStage { store: a, panel_t, band: b, diag, offdiag }
    }

    /// `x ← Q x` for a column-major `n × k` block, its columns split over `threads`.
    pub(crate) fn apply_q(&self, mut x: MatMut<'_, f64>, threads: usize) {
        let n = self.store.nrows();
        let k = x.ncols();
        if n < 2 || k == 0 {
            return;
        }
        // Q₂ first (its reflectors in reverse order), then Q₁'s panels in reverse.
        let threads = threads.clamp(1, k);
        let per = k.div_ceil(threads);
        let mut blocks = Vec::new();
        let mut rest = x.rb_mut();
        while rest.ncols() > 0 {
            let take = per.min(rest.ncols());
            let (head, tail) = rest.split_at_col_mut(take);
            blocks.push(head);
            rest = tail;
        }
        crate::stats::parallel(blocks, threads, |mut block| {
            let mut rows = RowMajor::from(block.as_ref());
            for j in (0..n.saturating_sub(2)).rev() {
                let sweep = self.sweep(j);
                for &(s, len) in segments(j, n, self.band).iter().rev() {
                    let at = s - j - 1;
                    rows.reflect(s, &sweep[at + 1..at + len], sweep[at]);
                }
            }
            rows.write_to(block.rb_mut());
        });
        let b = self.band;
        for (p, t) in self.panel_t.iter().enumerate().rev() {
            let k0 = p * b;
            let m = n - k0 - b;
            let v = panel_basis(self.store.as_ref().submatrix(k0 + b, k0, m, t.nrows()));
            apply_block(v.as_ref(), t.as_ref(), false, x.rb_mut().subrows_mut(k0 + b, m), Par::rayon(threads));
        }
    }
}

impl TwoStage {
    /// Sweep `j`'s stage-two reflectors: the value for row `r` at `r − j − 1`.
    fn sweep(&self, j: usize) -> &[f64] {
        let n = self.store.nrows();
        &self.store.col_as_slice(n - 1 - j)[..n - 1 - j]
    }
}

/// A row-major copy of a block, so that a reflector on rows `s..s+len` works on
/// `len` contiguous rows with long vector loops (one pass for `vᵀX`, one for the update).
struct RowMajor {
    data: Vec<f64>,
    k: usize,
    w: Vec<f64>,
}

impl RowMajor {
    fn from(x: MatRef<'_, f64>) -> RowMajor {
        let k = x.ncols();
        let data = (0..x.nrows()).flat_map(|i| (0..k).map(move |j| x[(i, j)])).collect();
        RowMajor { data, k, w: vec![0.0; k] }
    }

    fn write_to(&self, mut x: MatMut<'_, f64>) {
        for i in 0..x.nrows() {
            for j in 0..self.k {
                x[(i, j)] = self.data[i * self.k + j];
            }
        }
    }

    /// Rows `s…` ← `(I − τ v vᵀ)` rows `s…`, with `v = (1, essentials)`.
    fn reflect(&mut self, s: usize, essentials: &[f64], tau: f64) {
        if tau == 0.0 || essentials.is_empty() {
            return;
        }
        let k = self.k;
        let x = &mut self.data[s * k..(s + 1 + essentials.len()) * k];
        let (head, tail) = x.split_at_mut(k);
        self.w.copy_from_slice(head);
        for (row, &v) in tail.chunks_exact(k).zip(essentials) {
            for (w, x) in self.w.iter_mut().zip(row) {
                *w += v * x;
            }
        }
        for w in &mut self.w {
            *w *= tau;
        }
        for (x, w) in head.iter_mut().zip(&self.w) {
            *x -= w;
        }
        for (row, &v) in tail.chunks_exact_mut(k).zip(essentials) {
            for (x, w) in row.iter_mut().zip(&self.w) {
                *x -= v * w;
            }
        }
    }
}

/// The reflector segments of sweep `j` in stage two: `(first row, length)`.
fn segments(j: usize, n: usize, b: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = j + 1;
    while s < n {
        let len = b.min(n - s);
        out.push((s, len));
        s += len;
    }
    out
}

/// Stage two: bulge chasing on the lower band `bd` (column-major, leading dimension
/// `2b + 1`: entry `(r, c)`, `r ≥ c`, at `c·ld + r − c`) from half-width `b` to
/// tridiagonal. Sweep `j` clears column `j` below its subdiagonal with one reflector on
/// rows `j+1 … j+b`, which fills a block below; each fill's first column is cleared
/// by the next reflector, `b` rows further down, to the end (its other columns are
/// cleared by later sweeps). Reflectors are applied to `rhs` and kept in `store`.
fn chase(bd: &mut [f64], n: usize, b: usize, store: &mut Mat<f64>, mut rhs: MatMut<'_, f64>) {
    let ld = 2 * b + 1;
    let at = |r: usize, c: usize| c * ld + r - c;
    let mut v = vec![0.0; b];
    let mut prev = vec![0.0; b];
    let mut w = vec![0.0; b];
    let mut rows = RowMajor::from(rhs.as_ref());
    for j in 0..n.saturating_sub(2) {
        let sweep = store.col_as_slice_mut(n - 1 - j);
        let mut prev_tau = 0.0;
        let (mut ps, mut pl) = (0, 0);
        for (seg, &(s, len)) in segments(j, n, b).iter().enumerate() {
            // The column this reflector clears: column j for the first, else the first
            // column of the block the previous reflector filled (rows s.., cols ps..).
            let col = if seg == 0 { j } else { ps };
            if seg > 0 {
                // Fill: the block rows s..s+len, cols ps..ps+pl times the previous H.
                let h = Reflector { v: &prev[..pl], tau: prev_tau };
                right_apply(bd, ld, (s..s + len, ps..ps + pl), h, &mut w);
            }
            let x = &mut bd[at(s, col)..at(s, col) + len];
            let (_, tau) = householder(x);
            v[0] = 1.0;
            v[1..len].copy_from_slice(&x[1..len]);
            x[1..].iter_mut().for_each(|e| *e = 0.0);
            let slot = s - j - 1;
            sweep[slot] = tau;
            sweep[slot + 1..slot + len].copy_from_slice(&v[1..len]);
            if tau != 0.0 && len > 1 {
                if seg > 0 {
                    // The rest of the filled block from the left.
                    for q in 1..pl {
                        let cq = ps + q;
                        reflect(&v[..len], tau, &mut bd[at(s, cq)..at(s, cq) + len]);
                    }
                }
                two_sided(bd, ld, s..s + len, Reflector { v: &v[..len], tau }, &mut w);
                rows.reflect(s, &v[1..len], tau);
            }
            prev[..len].copy_from_slice(&v[..len]);
            prev_tau = if len > 1 { tau } else { 0.0 };
            (ps, pl) = (s, len);
        }
    }
    rows.write_to(rhs.rb_mut());
}

/// A Householder reflector `I − τ v vᵀ`.
#[derive(Clone, Copy)]
struct Reflector<'a> {
    v: &'a [f64],
    tau: f64,
}

/// `B ← B (I − τ v vᵀ)` for the block `(rows, columns)` of the band.
fn right_apply(
    bd: &mut [f64],
    ld: usize,
    block: (std::ops::Range<usize>, std::ops::Range<usize>),
    h: Reflector<'_>,
    u: &mut [f64],
) {
    let (r0, rl, c0, cl) = (block.0.start, block.0.len(), block.1.start, block.1.len());
    let Reflector { v, tau } = h;
    if tau == 0.0 {
        return;
    }
    let u = &mut u[..rl];
    u.iter_mut().for_each(|x| *x = 0.0);
    for (q, &vq) in v.iter().enumerate().take(cl) {
        let c = c0 + q;
        let col = &bd[c * ld + r0 - c..c * ld + r0 - c + rl];
        for (ui, bi) in u.iter_mut().zip(col) {
            *ui += bi * vq;
        }
    }
    for (q, &vq) in v.iter().enumerate().take(cl) {
        let c = c0 + q;
        let f = tau * vq;
        for (bi, ui) in bd[c * ld + r0 - c..c * ld + r0 - c + rl].iter_mut().zip(u.iter()) {
            *bi -= f * ui;
        }
    }
}

/// `A ← H A H` on the symmetric diagonal block `s..s+len` (lower part stored).
fn two_sided(bd: &mut [f64], ld: usize, block: std::ops::Range<usize>, h: Reflector<'_>, w: &mut [f64]) {
    let (s, len) = (block.start, block.len());
    let Reflector { v, tau } = h;
    let w = &mut w[..len];
    w.iter_mut().for_each(|x| *x = 0.0);
    // w = τ A v from the lower triangle: column q contributes A[q.., q] v[q] to w[q..]
    // and A[q+1.., q]·v[q+1..] to w[q].
    for q in 0..len {
        let col = &bd[(s + q) * ld..(s + q) * ld + len - q];
        let vq = v[q];
        for (wi, a) in w[q..].iter_mut().zip(col) {
            *wi += a * vq;
        }
        w[q] += dot(col, &v[q..]) - col[0] * vq;
    }
    let alpha = -0.5 * tau * tau * dot(w, v);
    for (wi, vi) in w.iter_mut().zip(v) {
        *wi = tau * *wi + alpha * vi;
    }
    for q in 0..len {
        let col = &mut bd[(s + q) * ld..(s + q) * ld + len - q];
        let (vq, wq) = (v[q], w[q]);
        for (i, a) in col.iter_mut().enumerate() {
            *a -= v[q + i] * wq + w[q + i] * vq;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::solve::panels::tests::{full, matrix};

    #[test]
    fn two_stage_reduction_is_an_orthogonal_similarity_for_any_band() {
        // Groups of deferred updates cut short at the end, and (n ≥ 300) several tiles of
        // the symmetric product and the update strips on two threads.
        let seq = [(1, 4), (2, 4), (5, 8), (40, 1), (40, 3), (61, 8), (64, 16), (97, 7)].map(|c| (c, Par::Seq));
        let par = [(300, 8), (333, 48), (140, 3)].map(|c| (c, Par::rayon(2)));
        for ((n, b), par) in seq.into_iter().chain(par) {
            let a = matrix(n, n as u64 + b as u64);
            let dense = full(&a);
            let mut rhs = Mat::<f64>::from_fn(n, 3, |i, k| (i * 3 + k) as f64 - 7.0);
            let orig = rhs.clone();
            let form = TwoStage::reduce(a, b, rhs.as_mut(), par);
            // Q T Qᵀ = A: build Q from the identity, compare column by column.
            let mut q = Mat::<f64>::identity(n, n);
            form.apply_q(q.as_mut(), 2);
            let t = Mat::<f64>::from_fn(n, n, |i, j| match i.abs_diff(j) {
                0 => form.diag[i],
                1 => form.offdiag[i.min(j)],
                _ => 0.0,
            });
            let back = &q * &t * q.transpose();
            let scale = dense.norm_max();
            assert!((&back - &dense).norm_max() < 1e-12 * scale * n as f64, "n = {n}, b = {b}");
            assert!((q.transpose() * &q - Mat::<f64>::identity(n, n)).norm_max() < 1e-13 * n as f64);
            // rhs became Qᵀ rhs.
            assert!((&rhs - q.transpose() * &orig).norm_max() < 1e-12 * orig.norm_max() * n as f64, "n = {n}, b = {b}");
        }
    }

    #[test]
    fn a_zero_column_gives_the_identity_reflector() {
        let mut x = [2.5, 0.0, 0.0];
        assert_eq!(householder(&mut x), (2.5, 0.0));
        let a = Mat::<f64>::from_fn(6, 6, |i, j| if i == j { i as f64 } else { 0.0 });
        let mut rhs = Mat::<f64>::from_fn(6, 1, |i, _| i as f64);
        let form = TwoStage::reduce(a, 2, rhs.as_mut(), Par::Seq);
        assert_eq!(form.diag, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!(form.offdiag.iter().all(|&e| e == 0.0));
    }
}
