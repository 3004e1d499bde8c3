//! Stage one of the band reduction (`band.rs`): a symmetric matrix's lower triangle to a
//! band of half-width `b` by blocked Householder QR of `b`-column panels, with the
//! reflector primitives both stages share. Each panel needs `A V` over the trailing
//! triangle (one pass by blocks, `symmetric::symmetric_times`) and leaves a symmetric rank-`2b`
//! update, which is deferred over [`PANELS_PER_UPDATE`] panels and applied as one
//! product by column strips ([`lower_update`]): both near the GEMM's rate, where a
//! rank-`2b` product per panel and two triangular products ran at half of it.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::reborrow::ReborrowMut;
use faer::{Accum, Mat, MatMut, MatRef, Par};

use super::symmetric::symmetric_times;

/// `x ← (I − τ v vᵀ) x`.
pub(super) fn reflect(v: &[f64], tau: f64, x: &mut [f64]) {
    let t = tau * dot(v, x);
    for (xi, vi) in x.iter_mut().zip(v) {
        *xi -= t * vi;
    }
}

/// `xᵀy` in eight independent sums: a single running sum is one dependent add per
/// element (the compiler may not reorder it), which made the bulge chase and the panel
/// factor wait on the adder's latency.
pub(super) fn dot(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let mut acc = [0.0f64; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let tail: f64 = xc.remainder().iter().zip(yc.remainder()).map(|(a, b)| a * b).sum();
    for (a, b) in xc.zip(yc) {
        for k in 0..8 {
            acc[k] += a[k] * b[k];
        }
    }
    let pairs = [acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]];
    (pairs[0] + pairs[2]) + (pairs[1] + pairs[3]) + tail
}

/// LAPACK's reflector: `H = I − τ v vᵀ` with `v₀ = 1` and `H x = β e₀`. `x` becomes
/// `v` (its first entry left as β); returns `(β, τ)`, τ = 0 when `x` is already `β e₀`.
pub(super) fn householder(x: &mut [f64]) -> (f64, f64) {
    let alpha = x[0];
    let tail = dot(&x[1..], &x[1..]).sqrt();
    if tail == 0.0 {
        return (alpha, 0.0);
    }
    let beta = -alpha.hypot(tail).copysign(alpha);
    let scale = 1.0 / (alpha - beta);
    for v in &mut x[1..] {
        *v *= scale;
    }
    x[0] = beta;
    (beta, (beta - alpha) / beta)
}

/// The unit lower trapezoidal basis `V` from the essentials below a panel's diagonal.
pub(super) fn panel_basis(stored: MatRef<'_, f64>) -> Mat<f64> {
    Mat::from_fn(stored.nrows(), stored.ncols(), |i, j| match i.cmp(&j) {
        std::cmp::Ordering::Equal => 1.0,
        std::cmp::Ordering::Greater => stored[(i, j)],
        std::cmp::Ordering::Less => 0.0,
    })
}

/// `x ← (I − V T Vᵀ) x`, or with `Tᵀ` when `transpose`.
pub(super) fn apply_block(v: MatRef<'_, f64>, t: MatRef<'_, f64>, transpose: bool, mut x: MatMut<'_, f64>, par: Par) {
    let r = v.ncols();
    let k = x.ncols();
    let mut w = Mat::<f64>::zeros(r, k);
    matmul(w.as_mut(), Accum::Replace, v.transpose(), x.as_ref(), 1.0, par);
    let tw = if transpose { t.transpose() * &w } else { t * &w };
    matmul(x.rb_mut(), Accum::Add, v, tw.as_ref(), -1.0, par);
}

/// Panels whose trailing updates [`to_band`] defers and applies as one product.
pub(super) const PANELS_PER_UPDATE: usize = 4;

/// Stage one: the lower triangle of `a` to half-width `b`, panel by panel; returns each
/// panel's `T`. The reflectors stay below the band; `rhs ← Q₁ᵀ rhs`.
///
/// Panel `p` changes the trailing matrix by `−(V_p Y_pᵀ + Y_p V_pᵀ)`. Applied panel by
/// panel that is a rank-`2b` product over the whole trailing triangle for every panel,
/// which runs well below the GEMM's rate at `b = 48`; so the updates of
/// [`PANELS_PER_UPDATE`] panels are kept as `[V Y]` and applied as one rank-`2bG`
/// product (as LAPACK's `sytrd` defers its rank-2 updates). Until then a panel's own
/// columns are brought up to date before they are factored, and `A V` for the next
/// panel takes the pending updates as the small products `V_q (Y_qᵀ V) + Y_q (V_qᵀ V)`.
pub(super) fn to_band(mut a: MatMut<'_, f64>, b: usize, mut rhs: MatMut<'_, f64>, par: Par) -> Vec<Mat<f64>> {
    let n = a.nrows();
    let threads = par.degree();
    let mut ts = Vec::new();
    let mut k0 = 0;
    while k0 + b + 1 < n {
        // The group's pending updates, on rows `base..n` (zero above each panel's rows).
        let base = k0 + b;
        // As `L = [V₀…V_{G−1} Y₀…Y_{G−1}]` and `R = [Y₀… V₀…]`, so that they are
        // `Σ V_q Y_qᵀ + Y_q V_qᵀ = L Rᵀ`; the columns of panels not yet factored are 0.
        let g = b * PANELS_PER_UPDATE;
        let mut l = Mat::<f64>::zeros(n - base, 2 * g);
        let mut rr = Mat::<f64>::zeros(n - base, 2 * g);
        let mut p = 0;
        while p < PANELS_PER_UPDATE && k0 + b + 1 < n {
            let m = n - k0 - b;
            let r = b.min(m);
            if p > 0 {
                // This panel's columns, rows k0.., with the group's earlier updates. (The
                // strict upper part of their diagonal block is written too: never read.)
                let (off, h) = (k0 - base, n - k0);
                for c in [0, g] {
                    matmul(
                        a.rb_mut().submatrix_mut(k0, k0, h, b),
                        Accum::Add,
                        l.as_ref().submatrix(off, c, h, p * b),
                        rr.as_ref().submatrix(off, c, b, p * b).transpose(),
                        -1.0,
                        Par::Seq,
                    );
                }
            }
            // The panel, factored contiguously and written back (R in the band, V below).
            let mut panel: Vec<f64> =
                (0..b).flat_map(|j| (0..m).map(move |i| (i, j))).map(|(i, j)| a[(k0 + b + i, k0 + j)]).collect();
            let taus = panel_qr(&mut panel, m, b);
            for j in 0..b {
                for i in 0..m {
                    a[(k0 + b + i, k0 + j)] = panel[j * m + i];
                }
            }
            let v = panel_basis(a.as_ref().submatrix(k0 + b, k0, m, r));
            let t = block_factor(v.as_ref(), &taus[..r]);
            // A V with the pending updates: the matrix in memory is the group's start.
            let mut av = symmetric_times(&a.as_ref().submatrix(k0 + b, k0 + b, m, m), v.as_ref(), threads);
            if p > 0 {
                let off = k0 + b - base;
                for c in [0, g] {
                    let (lq, rq) = (l.as_ref().submatrix(off, c, m, p * b), rr.as_ref().submatrix(off, c, m, p * b));
                    av -= lq * (rq.transpose() * &v);
                }
            }
            // With X = A V T and Y = X − ½ V (Tᵀ Vᵀ X), QᵀAQ = A − V Yᵀ − Y Vᵀ.
            let x = &av * &t;
            let mm = t.transpose() * (v.transpose() * &x);
            let y = &x - &v * (&mm * 0.5);
            let off = k0 + b - base;
            for (dst, col) in [(&mut l, p * b), (&mut rr, g + p * b)] {
                dst.as_mut().submatrix_mut(off, col, m, r).copy_from(&v);
            }
            for (dst, col) in [(&mut l, g + p * b), (&mut rr, p * b)] {
                dst.as_mut().submatrix_mut(off, col, m, r).copy_from(&y);
            }
            apply_block(v.as_ref(), t.as_ref(), true, rhs.rb_mut().subrows_mut(k0 + b, m), par);
            ts.push(t);
            k0 += b;
            p += 1;
        }
        // The group's updates on the rest of the triangle, rows and columns k0.., at once.
        if k0 < n {
            let (off, h) = (k0 - base, n - k0);
            let (left, right) = (l.as_ref().subrows(off, h), rr.as_ref().subrows(off, h));
            lower_update(a.rb_mut().submatrix_mut(k0, k0, h, h), left, right, threads);
        }
    }
    ts
}

/// Column width of [`lower_update`]'s strips.
const UPDATE_TILE: usize = 256;

/// The lower triangle of `c` ← `c − L Rᵀ`, by strips of [`UPDATE_TILE`] columns: each
/// strip's diagonal block by a triangular product and the rest below it by one GEMM,
/// strips dealt to the threads alternately (the strips shrink down the triangle). One
/// sequential product per strip runs at the kernel's rate, where a parallel triangular
/// product splits into small parallel calls.
fn lower_update(c: MatMut<'_, f64>, left: MatRef<'_, f64>, right: MatRef<'_, f64>, threads: usize) {
    let h = c.nrows();
    let mut strips = Vec::new();
    let mut rest = c;
    let mut j0 = 0;
    while rest.ncols() > 0 {
        let w = UPDATE_TILE.min(rest.ncols());
        let (head, tail) = rest.split_at_col_mut(w);
        strips.push((j0, head));
        rest = tail;
        j0 += w;
    }
    crate::stats::parallel(strips, threads, |(j0, strip)| {
        let w = strip.ncols();
        let (top, below) = strip.split_at_row_mut(j0 + w);
        let diag = top.submatrix_mut(j0, 0, w, w);
        let r_top = right.subrows(j0, w);
        triangular::matmul(
            diag,
            BlockStructure::TriangularLower,
            Accum::Add,
            left.subrows(j0, w),
            BlockStructure::Rectangular,
            r_top.transpose(),
            BlockStructure::Rectangular,
            -1.0,
            Par::Seq,
        );
        if j0 + w < h {
            matmul(below, Accum::Add, left.subrows(j0 + w, h - j0 - w), r_top.transpose(), -1.0, Par::Seq);
        }
    });
}

/// Householder QR of a column-major `m × w` panel in place (LAPACK's `geqr2`): `R` on
/// and above the diagonal, each reflector's essentials below it; returns the τ's.
fn panel_qr(p: &mut [f64], m: usize, w: usize) -> Vec<f64> {
    let r = m.min(w);
    let mut taus = vec![0.0; r];
    let mut v = vec![0.0; m];
    for j in 0..r {
        let (_, tau) = householder(&mut p[j * m + j..(j + 1) * m]);
        taus[j] = tau;
        if tau == 0.0 {
            continue;
        }
        v[j] = 1.0;
        v[j + 1..].copy_from_slice(&p[j * m + j + 1..(j + 1) * m]);
        for q in j + 1..w {
            reflect(&v[j..], tau, &mut p[q * m + j..(q + 1) * m]);
        }
    }
    taus
}

/// The upper triangular `T` with `H₀H₁⋯H_{r−1} = I − V T Vᵀ` (LAPACK's `larft`).
fn block_factor(v: MatRef<'_, f64>, taus: &[f64]) -> Mat<f64> {
    let r = taus.len();
    let mut vtv = Mat::<f64>::zeros(r, r);
    matmul(vtv.as_mut(), Accum::Replace, v.transpose(), v, 1.0, Par::Seq);
    let mut t = Mat::<f64>::zeros(r, r);
    for j in 0..r {
        t[(j, j)] = taus[j];
        // T[..j, j] = −τ_j T[..j, ..j] Vᵀ v_j.
        for i in 0..j {
            let s: f64 = (i..j).map(|l| t[(i, l)] * vtv[(l, j)]).sum();
            t[(i, j)] = -taus[j] * s;
        }
    }
    t
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A symmetric test matrix with a spread spectrum, lower triangle only.
    pub(crate) fn matrix(n: usize, seed: u64) -> Mat<f64> {
        let mut r = crate::rng::StageRng::new(seed, 3);
        let g = Mat::<f64>::from_fn(n, n, |_, _| r.uniform() - 0.5);
        let s = &g * g.transpose();
        Mat::from_fn(n, n, |i, j| if i >= j { s[(i, j)] + if i == j { (i % 7) as f64 } else { 0.0 } } else { 0.0 })
    }

    pub(crate) fn full(lower: &Mat<f64>) -> Mat<f64> {
        Mat::from_fn(lower.nrows(), lower.ncols(), |i, j| if i >= j { lower[(i, j)] } else { lower[(j, i)] })
    }

    #[test]
    fn the_deferred_update_changes_the_lower_triangle_only() {
        let (h, k) = (2 * UPDATE_TILE + 41, 9);
        let c = Mat::<f64>::from_fn(h, h, |i, j| (i * 31 + j * 17) as f64 % 11.0);
        let l = Mat::<f64>::from_fn(h, k, |i, j| ((i + 3 * j) % 7) as f64 - 3.0);
        let r = Mat::<f64>::from_fn(h, k, |i, j| ((2 * i + j) % 5) as f64 - 2.0);
        let product = &l * r.transpose();
        for threads in [1, 3] {
            let mut got = c.clone();
            lower_update(got.as_mut(), l.as_ref(), r.as_ref(), threads);
            for j in 0..h {
                for i in 0..h {
                    let want = if i >= j { c[(i, j)] - product[(i, j)] } else { c[(i, j)] };
                    assert!((got[(i, j)] - want).abs() < 1e-9, "({i}, {j}), threads = {threads}");
                }
            }
        }
    }

    #[test]
    fn the_split_dot_product_is_the_dot_product() {
        for n in 0..20 {
            let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
            let y: Vec<f64> = (0..n + 2).map(|i| (i as f64 * 0.91).cos()).collect();
            let naive: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            assert!((dot(&x, &y) - naive).abs() < 1e-14, "n = {n}");
        }
    }

    #[test]
    fn panel_factor_reproduces_the_product_of_its_reflectors() {
        let (m, w) = (9, 4);
        let mut p: Vec<f64> = (0..m * w).map(|i| ((i * 7919) % 23) as f64 - 11.0).collect();
        let orig = Mat::<f64>::from_fn(m, w, |i, j| p[j * m + i]);
        let taus = panel_qr(&mut p, m, w);
        let stored = Mat::<f64>::from_fn(m, w, |i, j| p[j * m + i]);
        let v = panel_basis(stored.as_ref());
        let t = block_factor(v.as_ref(), &taus);
        let q = Mat::<f64>::identity(m, m) - &v * &t * v.transpose();
        let r = Mat::<f64>::from_fn(m, w, |i, j| if i <= j { stored[(i, j)] } else { 0.0 });
        assert!((&q * &r - &orig).norm_max() < 1e-12 * orig.norm_max());
    }
}
