#!/usr/bin/env python3
"""The exact kernel's MNIST test error: what a random-feature map of the pipelines' kernel
approaches as E grows, so that the pipelines' figures can be read against it.

Kernel ridge regression with the kernel of pipelines/mnist*.toml, (γ<x,y> + c)^p on
unit-length rows (γ = c = 1, p = 7), one-vs-all ±1 targets and an unpenalised intercept
(the primal ridge sketchfit solves, written in the dual: centre the kernel matrix and the
targets, solve (K_c + λI) α = Y_c; λ is on the sum of squares in both), trained on the
60,000 training rows and scored once on the test rows. λ is given, never chosen here:
the default is the pipelines' 11.25 (their choice on the holdout rows). This is a
reference for docs/src/accuracy.md, not a choice of anything in a pipeline.

    python3 scripts/mnist_exact.py [--lambdas 11.25] [--degree 7] [--rows 60000]
    python3 scripts/mnist_exact.py --nystrom 8192 16384 [--seed 1]
    python3 scripts/mnist_exact.py --f64 --block 3000 --lambdas 0.032913

With --nystrom, ridge on the Nyström features of M uniformly drawn landmark rows instead
(see `nystrom`): with M = n it is the exact kernel's model, and at M = E it shows what a
landmark-based map would give against the random maps at equal width.

The n × n kernel matrix is built in f64 a block of rows at a time and kept in f32
(14.4 GB at n = 60,000), centred in place and factored in place by LAPACK's SPOTRF; steps
of iterative refinement against the kernel rebuilt in f64 (one by default; `--refine N`
takes up to N, stopping below 10⁻¹²: at a small λ the f32 factor needs several) take the
solution towards f64 accuracy, each residual printed; the first, from a fresh f64 kernel, is the
independent check of the LAPACK solve (at n = 60,000, with numpy 2.4 / scipy 1.17 on
OpenBLAS, the process aborted in the allocator at exit after printing). Needs numpy, scipy and pyarrow and data/mnist/{train,test}.parquet
(scripts/get_mnist.py). Not run by CI.
"""

import argparse
import json
import sys
import time

import numpy as np


def load(path, rows=None):
    """Unit-length rows and labels, as scripts/mnist_vs_sklearn.py reads them."""
    from mnist_vs_sklearn import load as unit_rows

    x, y = unit_rows(path)
    return (x, y) if rows is None else (x[:rows], y[:rows])


def kernel_rows(a, b, degree, gamma, offset):
    return (gamma * (a @ b.T) + offset) ** degree


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lambdas", type=float, nargs="+", default=[11.25])
    ap.add_argument("--degree", type=int, default=7)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--offset", type=float, default=1.0)
    ap.add_argument("--rows", type=int, default=None, help="train on the first ROWS training rows")
    ap.add_argument("--block", type=int, default=2000)
    ap.add_argument(
        "--nystrom",
        type=int,
        nargs="+",
        default=None,
        help="instead: the Nyström approximation with M uniformly drawn training rows as landmarks",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--f64", action="store_true", help="factor in f64 by blocks of --block rows (see exact_f64)")
    ap.add_argument("--refine", type=int, default=1, help="at most this many refinement steps (the last residual is printed)")
    args = ap.parse_args()
    from scipy.linalg import lapack

    t0 = time.time()
    x, y = load("data/mnist/train.parquet", args.rows)
    xt, yt = load("data/mnist/test.parquet")
    n, classes = len(x), 10
    targets = np.where(y[:, None] == np.arange(classes)[None, :], 1.0, -1.0)
    ybar = targets.mean(axis=0)
    yc = targets - ybar
    kern = lambda a, b: kernel_rows(a, b, args.degree, args.gamma, args.offset)  # noqa: E731
    blocks = [(s, min(s + args.block, n)) for s in range(0, n, args.block)]
    if args.nystrom:
        for m in args.nystrom:
            for lam in args.lambdas:
                nystrom(args, m, lam, x, yc, ybar, xt, yt, kern, blocks)
        return
    if args.f64:
        for lam in args.lambdas:
            exact_f64(args, lam, x, yc, ybar, xt, yt, kern)
        return
    for lam in args.lambdas:
        t1 = time.time()
        k = np.empty((n, n), dtype=np.float32)
        m = np.empty(n)
        for s, e in blocks:
            kb = kern(x[s:e], x)
            m[s:e] = kb.mean(axis=1)
            k[s:e] = kb
        mbar = m.mean()
        # K_c = K − m1ᵀ − 1mᵀ + m̄, then + λI: the centred kernel of the primal with an
        # unpenalised intercept.
        for s, e in blocks:
            kb = k[s:e].astype(np.float64) - m[s:e, None] - m[None, :] + mbar
            kb[np.arange(e - s), np.arange(s, e)] += lam
            k[s:e] = kb
        built = time.time() - t1
        t2 = time.time()
        # K is symmetric, so its C-ordered storage is the Fortran-ordered transpose:
        # SPOTRF factors it in place without a copy.
        c, info = lapack.spotrf(k.T, lower=1, clean=0, overwrite_a=1)
        if info != 0:
            sys.exit(f"SPOTRF failed at λ = {lam}: info {info}")
        factored = time.time() - t2

        def solve(r):
            z, info = lapack.spotrs(c, np.asfortranarray(r, dtype=np.float32), lower=1)
            if info != 0:
                sys.exit(f"SPOTRS failed: info {info}")
            return z.astype(np.float64)

        refine_and_score(args, lam, "f32 (SPOTRF)", solve, x, yc, ybar, m, mbar, xt, yt, kern, blocks, built, factored, t1)
        del k, c
    print(f"# done in {time.time() - t0:.0f} s", file=sys.stderr)


def exact_f64(args, lam, x, yc, ybar, xt, yt, kern):
    """The same dual solve with the centred kernel factored in f64: the lower triangle
    kept as b × b blocks (n²/2 f64, 14.4 GB at n = 60,000) and factored block by block
    (right-looking: each block column's diagonal factored, the panel solved against it,
    the trailing blocks updated by products), so no LAPACK call sees more than b rows.
    For a small λ, where an f32 factor's refinement need not converge (it does only while
    κ·2⁻²⁴ < 1), and where LAPACK's 32-bit indexing fails on the whole n × n matrix
    (SPOTRF at n = 60,000 ended in a segmentation fault here)."""
    from scipy.linalg import cholesky, solve_triangular

    n, b = len(x), args.block
    edges = [(s, min(s + b, n)) for s in range(0, n, b)]
    nb = len(edges)
    t1 = time.time()
    m = np.zeros(n)
    for s, e in edges:
        m[s:e] = kern(x[s:e], x).mean(axis=1)
    mbar = m.mean()

    def centred(i, j):
        (s, e), (u, v) = edges[i], edges[j]
        return kern(x[s:e], x[u:v]) - m[s:e, None] - m[None, u:v] + mbar

    low = {}
    for i in range(nb):
        for j in range(i + 1):
            low[i, j] = centred(i, j)
        low[i, i][np.diag_indices_from(low[i, i])] += lam
    built = time.time() - t1
    t2 = time.time()
    for k in range(nb):
        low[k, k] = cholesky(low[k, k], lower=True, overwrite_a=True, check_finite=False)
        for i in range(k + 1, nb):
            # L_ik = A_ik L_kk⁻ᵀ
            low[i, k] = solve_triangular(low[k, k], low[i, k].T, lower=True, check_finite=False).T.copy()
        for i in range(k + 1, nb):
            for j in range(k + 1, i + 1):
                low[i, j] -= low[i, k] @ low[j, k].T
    factored = time.time() - t2

    def solve(r):
        z = r.copy()
        for i in range(nb):
            s, e = edges[i]
            for j in range(i):
                u, v = edges[j]
                z[s:e] -= low[i, j] @ z[u:v]
            z[s:e] = solve_triangular(low[i, i], z[s:e], lower=True, check_finite=False)
        for i in reversed(range(nb)):
            s, e = edges[i]
            for j in range(i + 1, nb):
                u, v = edges[j]
                z[s:e] -= low[j, i].T @ z[u:v]
            z[s:e] = solve_triangular(low[i, i], z[s:e], lower=True, trans="T", check_finite=False)
        return z

    factor = "f64, blocks of %d" % b
    refine_and_score(args, lam, factor, solve, x, yc, ybar, m, mbar, xt, yt, kern, edges, built, factored, t1)


def refine_and_score(args, lam, factor, solve, x, yc, ybar, m, mbar, xt, yt, kern, blocks, built, factored, t1):
    """Solves (K_c + λI) α = Y_c by the factor's `solve`, refines against the centred
    kernel rebuilt in f64 (at a small λ an f32 factor alone is far from the solution: K's
    condition number times 2⁻²⁴; each step gains about that factor's accuracy again),
    scores the test rows and prints the result."""
    alpha = solve(yc)
    residuals = []
    for _ in range(args.refine + 1):
        resid = yc - lam * alpha
        for s, e in blocks:
            resid[s:e] -= (kern(x[s:e], x) - m[s:e, None] - m[None, :] + mbar) @ alpha
        residuals.append(float(np.linalg.norm(resid) / np.linalg.norm(yc)))
        print(f"# λ = {lam} ({factor}): relative residual {residuals[-1]:.3g}", file=sys.stderr, flush=True)
        if len(residuals) > args.refine or residuals[-1] < 1e-12:
            break
        alpha += solve(resid)
    # f(x) = Σ_i (k(x, x_i) − m_i) α_i + ȳ: the test row's own centring multiplies
    # Σα = 0 (1ᵀ(K_c + λI)α = λ1ᵀα = 1ᵀY_c = 0).
    shift = ybar - m @ alpha
    wrong = 0
    for s in range(0, len(xt), args.block):
        scores = kern(xt[s : s + args.block], x) @ alpha + shift
        wrong += int((scores.argmax(axis=1) != yt[s : s + args.block]).sum())
    print(
        json.dumps(
            {
                "rows": len(x),
                "degree": args.degree,
                "lambda": lam,
                "factor": factor,
                "test_error_pct": 100.0 * wrong / len(xt),
                "wrong": wrong,
                "residual_before_refinement": residuals[0],
                "refinement_steps": len(residuals) - 1,
                "residual_after": residuals[-1],
                "build_s": round(built, 1),
                "factor_s": round(factored, 1),
                "total_s": round(time.time() - t1, 1),
            }
        ),
        flush=True,
    )


def nystrom(args, m, lam, x, yc, ybar, xt, yt, kern, blocks):
    """Ridge on the Nyström features z(x) = L⁻¹ k_m(x), K_mm + εI = LLᵀ, of M landmarks
    drawn uniformly from the training rows (ε = 10⁻⁹ of K_mm's mean diagonal, raised
    tenfold until the factor exists): the kernel a landmark-based method approximates
    with M features, for comparison with the random maps at E = M."""
    from scipy.linalg import cholesky, solve_triangular

    t1 = time.time()
    rng = np.random.default_rng(args.seed)
    marks = x[np.sort(rng.choice(len(x), size=m, replace=False))]
    kmm = kern(marks, marks)
    eps = 1e-9 * float(np.mean(np.diag(kmm)))
    while True:
        try:
            low = cholesky(kmm + eps * np.eye(m), lower=True)
            break
        except np.linalg.LinAlgError:
            eps *= 10.0
    del kmm

    def features(rows):
        return solve_triangular(low, kern(marks, rows), lower=True).T.astype(np.float32)

    z = np.empty((len(x), m), dtype=np.float32)
    for s, e in blocks:
        z[s:e] = features(x[s:e])
    mapped = time.time() - t1
    mean = z.mean(axis=0, dtype=np.float64)
    # The centred Gram from the f32 product, centred in f64: ZᵀZ − n·z̄z̄ᵀ.
    gram = (z.T @ z).astype(np.float64) - len(x) * np.outer(mean, mean)
    gram[np.diag_indices(m)] += lam
    rhs = sum(z[s:e].T.astype(np.float64) @ yc[s:e] for s, e in blocks)
    w = np.linalg.solve(gram, rhs)
    shift = ybar - mean @ w
    wrong = 0
    for s in range(0, len(xt), args.block):
        scores = features(xt[s : s + args.block]).astype(np.float64) @ w + shift
        wrong += int((scores.argmax(axis=1) != yt[s : s + args.block]).sum())
    print(
        json.dumps(
            {
                "rows": len(x),
                "degree": args.degree,
                "nystrom_landmarks": m,
                "jitter": eps,
                "lambda": lam,
                "test_error_pct": 100.0 * wrong / len(xt),
                "wrong": wrong,
                "features_s": round(mapped, 1),
                "total_s": round(time.time() - t1, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
