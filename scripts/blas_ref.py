"""The references the benchmarks put the pass and the factorisations beside, on the
machine's BLAS through numpy and scipy (OpenBLAS in the PyPI wheels):

    blas_ref.py gram ROWS D      OpenBLAS's SYRK of z.T z (one triangle; what numpy's z.T @ z
                                 runs) in f64 and f32
    blas_ref.py factor D         scipy.linalg.cho_factor of an SPD D x D in f64 and f32
    blas_ref.py tiles ROWS D     the pass's 256 x 256 tile products (tiles on and below
                                 the diagonal of a ROWS x D block) on one core, f64 and
                                 f32: what examples/tile_ref does on faer

Prints seconds and the BLAS kernel threadpoolctl reports (OpenBLAS picks it by CPU;
OPENBLAS_CORETYPE forces one). Timings of the Cholesky do not depend on the values, so
the matrix is a well-conditioned random Gram of the same size as the statistics'.
"""

import subprocess
import sys
import time

import numpy as np


def kernel():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    return ", ".join(f"{i.get('internal_api')} {i.get('architecture')} x{i.get('num_threads')}" for i in threadpool_info())


def gram(rows, dim):
    # OpenBLAS's SYRK called directly (scipy's BLAS) and numpy's z.T @ z, which dispatches
    # to its own OpenBLAS's SYRK, each in a child process: on an AVX-512 Xeon (SkylakeX
    # kernel) both OpenBLAS builds (0.3.30, 0.3.31) segfaulted on the f64 60,000 x 16,384
    # product, and a crash is reported rather than ending the benchmark.
    calls = {
        "OpenBLAS SYRK z.T z (scipy)": "from scipy.linalg import blas; f = blas.{p}syrk; run = lambda: f(1.0, z.T)",
        "numpy z.T @ z": "run = lambda: z.T @ z",
    }
    for dt, p in ((np.float64, "d"), (np.float32, "s")):
        for label, call in calls.items():
            code = (
                "import numpy as np, time\n"
                f"z = np.random.default_rng(0).standard_normal(({rows}, {dim})).astype(np.{np.dtype(dt).name})\n"
                + call.format(p=p)
                + "\nt = time.perf_counter(); run(); print(time.perf_counter() - t)\n"
            )
            child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            what = f"{label}, {np.dtype(dt).name}, {rows} x {dim}"
            if child.returncode == 0:
                e = float(child.stdout.strip())
                print(f"{what}: {e:.2f} s ({rows * dim * dim / e / 1e9:.0f} GFLOP/s as SYRK)")
            else:
                print(f"{what}: failed (exit {child.returncode})")


def tiles(rows, dim, tile=256):
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    nt = dim // tile
    for dt in (np.float64, np.float32):
        zt = rng.standard_normal((nt * tile, rows)).astype(dt)  # feature by feature
        with threadpool_limits(1):
            t = time.perf_counter()
            for i in range(nt):
                for j in range(i + 1):
                    zt[i * tile:(i + 1) * tile] @ zt[j * tile:(j + 1) * tile].T
            e = time.perf_counter() - t
        flops = 2 * tile * tile * rows * nt * (nt + 1) / 2
        print(f"numpy tile products, {np.dtype(dt).name}, one core, {rows} x {nt * tile}: {e:.2f} s ({flops / e / 1e9:.1f} GFLOP/s)")


def factor(dim):
    from scipy.linalg import cho_factor

    rng = np.random.default_rng(0)
    # A Gram of 2D random rows plus a ridge: SPD and well conditioned, built blockwise.
    a = np.zeros((dim, dim))
    for _ in range(2):
        z = rng.standard_normal((dim, dim)).astype(np.float32)
        a += (z.T @ z).astype(np.float64)
    a[np.diag_indices(dim)] += dim
    for dt in (np.float64, np.float32):
        m = a.astype(dt)
        t = time.perf_counter()
        cho_factor(m, lower=True, overwrite_a=True, check_finite=False)
        e = time.perf_counter() - t
        print(f"scipy cho_factor, {np.dtype(dt).name}, D = {dim}: {e:.2f} s ({dim ** 3 / 3 / e / 1e9:.0f} GFLOP/s)")


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "gram":
        gram(int(sys.argv[2]), int(sys.argv[3]))
    elif what == "factor":
        factor(int(sys.argv[2]))
    elif what == "tiles":
        tiles(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(f"unknown reference {what!r}: gram, factor or tiles")
    print(f"BLAS: {kernel()}")
