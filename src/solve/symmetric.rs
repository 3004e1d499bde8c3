//! `A V` for a symmetric `A` held as its lower triangle — a dense matrix's (the band
//! reduction's trailing matrix) or the Gram's tiles (block Krylov's `C X`) — in one pass:
//! each block below the diagonal is read once for both `A_IJ V_J` and `A_IJᵀ V_I`, so the
//! triangle streams through memory once, where a product per output block row reads it
//! twice. The column blocks are dealt to a fixed number of partial sums, so the result
//! is the same for any thread count.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::reborrow::ReborrowMut;
use faer::{Accum, Mat, MatRef, Par};

use crate::stats::{tile_len, TriGram, TILE};

/// Column width of the blocks: the fastest of 64, 128, 192, 256 and 512 in the band
/// reduction (`SECTIONS=solve scripts/bench.sh`, the eigen path).
const COLS: usize = 128;

// The Gram's tiles are split into column blocks, never across two tiles.
const _: () = assert!(TILE.is_multiple_of(COLS));

/// Rows of a block below the diagonal at most: a `ROWS × COLS` f64 block (512 KiB)
/// stays in a core's L2 for both of its products.
const ROWS: usize = 512;

/// The partial sums the column blocks are dealt to, whatever the thread count: each is
/// an `m × r` (counted by [`work_bytes`]), and more threads than this share them.
pub(super) const GROUPS: usize = 8;

/// A lower triangle to multiply by: blocks of it by position. `COLS` divides the Gram's
/// `TILE`, so a column block never crosses a tile.
pub(super) trait Lower: Sync {
    /// The side `m`.
    fn side(&self) -> usize;
    /// Rows `i0 .. i0 + hi`, columns `j0 .. j0 + hj`, inside the stored lower triangle
    /// (on the diagonal only its lower part is read) and inside one stored unit: a
    /// block of rows at most [`Lower::rows_from`]`(i0)` tall, and of columns within an
    /// aligned run of [`COLS`].
    fn block(&self, i0: usize, j0: usize, hi: usize, hj: usize) -> MatRef<'_, f64>;
    /// The most rows one block starting at row `i0` may span.
    fn rows_from(&self, i0: usize) -> usize;
}

impl Lower for MatRef<'_, f64> {
    fn side(&self) -> usize {
        self.nrows()
    }

    fn block(&self, i0: usize, j0: usize, hi: usize, hj: usize) -> MatRef<'_, f64> {
        self.submatrix(i0, j0, hi, hj)
    }

    fn rows_from(&self, _: usize) -> usize {
        usize::MAX
    }
}

/// The Gram's tiles: row-major `TILE × TILE` blocks `(I, J ≤ I)` in storage order, the
/// last row and column of tiles possibly narrower.
impl Lower for TriGram {
    fn side(&self) -> usize {
        self.dim()
    }

    fn block(&self, i0: usize, j0: usize, hi: usize, hj: usize) -> MatRef<'_, f64> {
        let dim = self.dim();
        let (ti, tj) = (i0 / TILE, j0 / TILE);
        let (h, w) = (tile_len(dim, ti), tile_len(dim, tj));
        // Every tile before row I is full; row I's tiles are `h` tall.
        let at = TILE * TILE * (ti * (ti + 1) / 2) + tj * TILE * h;
        MatRef::from_row_major_slice(&self.raw()[at..at + h * w], h, w).submatrix(
            i0 - ti * TILE,
            j0 - tj * TILE,
            hi,
            hj,
        )
    }

    fn rows_from(&self, i0: usize) -> usize {
        TILE - i0 % TILE
    }
}

/// Bytes [`symmetric_times`] allocates for an `m × r` product: the partial sums.
pub(super) fn work_bytes(m: usize, r: usize) -> u64 {
    (8 * GROUPS * m * r) as u64
}

/// `A V` for the symmetric `A` whose lower triangle `a` holds (`m × m`; `v` is `m × r`),
/// on up to `threads` threads.
pub(super) fn symmetric_times(a: &impl Lower, v: MatRef<'_, f64>, threads: usize) -> Mat<f64> {
    let (m, r) = (a.side(), v.ncols());
    let nt = m.div_ceil(COLS);
    let groups = GROUPS.min(nt.max(1));
    // Column block j touches the nt − j blocks on and below its diagonal: deal them by
    // that load, the heaviest first to the lightest group (depends on `m` alone).
    let mut load = vec![0usize; groups];
    let mut cols: Vec<Vec<usize>> = vec![Vec::new(); groups];
    for j in 0..nt {
        let g = (0..groups).min_by_key(|&g| (load[g], g)).unwrap_or(0);
        load[g] += nt - j;
        cols[g].push(j);
    }
    let mut sums: Vec<Mat<f64>> = (0..groups).map(|_| Mat::zeros(m, r)).collect();
    let items: Vec<(&mut Mat<f64>, Vec<usize>)> = sums.iter_mut().zip(cols).collect();
    crate::stats::parallel(items, threads.max(1), |(out, cols)| {
        for j in cols {
            let j0 = j * COLS;
            let hj = COLS.min(m - j0);
            let vj = v.subrows(j0, hj);
            let d = a.block(j0, j0, hj, hj);
            let mut oj = out.as_mut().subrows_mut(j0, hj);
            for (block, structure) in
                [(d, BlockStructure::TriangularLower), (d.transpose(), BlockStructure::StrictTriangularUpper)]
            {
                triangular::matmul(
                    oj.rb_mut(),
                    BlockStructure::Rectangular,
                    Accum::Add,
                    block,
                    structure,
                    vj,
                    BlockStructure::Rectangular,
                    1.0,
                    Par::Seq,
                );
            }
            let mut i0 = j0 + hj;
            while i0 < m {
                let hi = ROWS.min(a.rows_from(i0)).min(m - i0);
                let tile = a.block(i0, j0, hi, hj);
                matmul(out.as_mut().subrows_mut(i0, hi), Accum::Add, tile, vj, 1.0, Par::Seq);
                matmul(
                    out.as_mut().subrows_mut(j0, hj),
                    Accum::Add,
                    tile.transpose(),
                    v.subrows(i0, hi),
                    1.0,
                    Par::Seq,
                );
                i0 += hi;
            }
        }
    });
    // In group order, so the sum does not depend on which thread ran which group.
    let mut parts = sums.into_iter();
    let mut sum = parts.next().unwrap_or_else(|| Mat::zeros(m, r));
    for p in parts {
        sum += p;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lower triangle stored as row-major `t × t` tiles, like the Gram's.
    struct Tiles {
        side: usize,
        t: usize,
        data: Vec<Vec<f64>>,
    }

    impl Tiles {
        fn pos(&self, i: usize, j: usize) -> usize {
            i * (i + 1) / 2 + j
        }
        fn len(&self, i: usize) -> usize {
            self.t.min(self.side - i * self.t)
        }
    }

    impl Lower for Tiles {
        fn side(&self) -> usize {
            self.side
        }
        fn block(&self, i0: usize, j0: usize, hi: usize, hj: usize) -> MatRef<'_, f64> {
            let (ti, tj) = (i0 / self.t, j0 / self.t);
            let tile = MatRef::from_row_major_slice(&self.data[self.pos(ti, tj)], self.len(ti), self.len(tj));
            tile.submatrix(i0 - ti * self.t, j0 - tj * self.t, hi, hj)
        }
        fn rows_from(&self, i0: usize) -> usize {
            self.t - i0 % self.t
        }
    }

    fn symmetric(m: usize) -> Mat<f64> {
        let g = Mat::<f64>::from_fn(m, m, |i, j| ((i * 7 + j * 13) % 17) as f64 / 17.0 - 0.5);
        &g + g.transpose()
    }

    fn assert_close(got: &Mat<f64>, want: &Mat<f64>) {
        let scale = want.norm_max().max(1.0);
        let err = (got - want).norm_max();
        assert!(err <= 1e-12 * scale, "error {err:.3e} of scale {scale:.3e}");
    }

    #[test]
    fn the_product_reads_only_the_lower_triangle_and_is_the_same_for_any_thread_count() {
        // Past one block of rows, several column blocks and a partial one at the end.
        let m = 3 * COLS + ROWS / 2 + 37;
        let sym = symmetric(m);
        let v = Mat::<f64>::from_fn(m, 5, |i, j| ((i + 3 * j) % 11) as f64 - 5.0);
        let want = &sym * &v;
        let lower = Mat::<f64>::from_fn(m, m, |i, j| if j <= i { sym[(i, j)] } else { f64::NAN });
        let one = symmetric_times(&lower.as_ref(), v.as_ref(), 1);
        assert_close(&one, &want);
        for threads in [2, 3, GROUPS + 1] {
            let many = symmetric_times(&lower.as_ref(), v.as_ref(), threads);
            assert_eq!(many, one, "threads = {threads}");
        }
    }

    #[test]
    fn the_grams_tiles_give_the_dense_product() {
        // Three tile rows, the last one partial; the diagonal tiles' upper parts stale.
        let m = 2 * TILE + 77;
        let sym = symmetric(m);
        let mut gram = TriGram::zeros(m);
        for (ti, tj, t) in gram.tiles_mut() {
            let w = tile_len(m, tj);
            for (k, x) in t.iter_mut().enumerate() {
                let (r, c) = (ti * TILE + k / w, tj * TILE + k % w);
                *x = if c <= r { sym[(r, c)] } else { f64::NAN };
            }
        }
        let v = Mat::<f64>::from_fn(m, 4, |i, j| ((3 * i + j) % 7) as f64 - 3.0);
        assert_close(&symmetric_times(&gram, v.as_ref(), 2), &(&sym * &v));
    }

    #[test]
    fn tiles_split_at_their_boundaries_give_the_dense_product() {
        // Tiles of 2·COLS with a partial last one: blocks stop at each tile's rows.
        let t = 2 * COLS;
        let m = 2 * t + 70;
        let sym = symmetric(m);
        let nt = m.div_ceil(t);
        let mut data = Vec::new();
        for i in 0..nt {
            for j in 0..=i {
                let (hi, hj) = (t.min(m - i * t), t.min(m - j * t));
                data.push(
                    (0..hi * hj)
                        .map(|k| {
                            let (r, c) = (i * t + k / hj, j * t + k % hj);
                            if c <= r {
                                sym[(r, c)]
                            } else {
                                f64::NAN
                            }
                        })
                        .collect(),
                );
            }
        }
        let tiles = Tiles { side: m, t, data };
        let v = Mat::<f64>::from_fn(m, 3, |i, j| ((2 * i + j) % 5) as f64 - 2.0);
        assert_close(&symmetric_times(&tiles, v.as_ref(), 2), &(&sym * &v));
    }
}
