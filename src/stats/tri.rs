//! The lower triangle of a symmetric `D × D` matrix as square tiles: the storage of the
//! Gram and of its in-place Cholesky factor, and the thread fan-out their tile
//! operations share.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, MatMut, MatRef, Par};

use ndarray::ArrayView2;

/// Side of the square Gram tiles. 256 keeps a tile pair in L2 and the tile count
/// small enough that the GEMM calls dominate.
pub const TILE: usize = 256;

/// The lower triangle of a symmetric `D × D` matrix as square tiles `(I, J)`, `J ≤ I`,
/// each stored row-major. Memory ≈ `D²/2 + D·TILE/2` f64.
#[derive(Debug, Clone, PartialEq)]
pub struct TriGram {
    dim: usize,
    data: Vec<f64>,
}

impl TriGram {
    /// A zero matrix of side `dim`, its pages mapped. Zeroed allocations come back as the
    /// kernel's shared zero page; the tile products' first `+=` reads it and then writes,
    /// a second fault per page that flushes every core's TLB (4.6 % of the CPU of a
    /// 4,096-row pass at D = 65,536). A write to each page first maps it once.
    pub fn zeros(dim: usize) -> Self {
        let mut data = vec![0.0; Self::len_for(dim)];
        // `black_box`: the store must happen, although it writes the value already there.
        data.iter_mut().step_by(512).for_each(|v| *v = std::hint::black_box(0.0));
        TriGram { dim, data }
    }

    /// Number of f64 values stored for side `dim`.
    pub fn len_for(dim: usize) -> usize {
        let nt = dim.div_ceil(TILE);
        (0..nt)
            .map(|i| {
                let hi = tile_len(dim, i);
                (0..=i).map(|j| hi * tile_len(dim, j)).sum::<usize>()
            })
            .sum()
    }

    /// Side of the matrix.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The stored values, tile by tile.
    pub fn raw(&self) -> &[f64] {
        &self.data
    }

    /// The stored values, tile by tile, taken.
    pub(crate) fn into_raw(self) -> Vec<f64> {
        self.data
    }

    /// Builds from stored values (a statistics file).
    pub fn from_raw(dim: usize, data: Vec<f64>) -> Option<Self> {
        (data.len() == Self::len_for(dim)).then_some(TriGram { dim, data })
    }

    /// Mutable tiles `(I, J, block)` in storage order.
    pub(crate) fn tiles_mut(&mut self) -> Vec<(usize, usize, &mut [f64])> {
        split_tiles(&mut self.data, self.dim)
    }

    /// Tiles `(I, J, block)` in storage order.
    pub(crate) fn tiles(&self) -> Vec<(usize, usize, &[f64])> {
        split_tiles_ref(&self.data, self.dim)
    }

    /// The diagonal of `G`.
    pub fn diagonal(&self) -> Vec<f64> {
        let dim = self.dim;
        let mut out = Vec::with_capacity(dim);
        for (i, j, block) in self.tiles() {
            if i == j {
                let h = tile_len(dim, i);
                out.extend((0..h).map(|r| block[r * h + r]));
            }
        }
        out
    }

    /// `G += α I`.
    pub(crate) fn add_diagonal(&mut self, alpha: f64) {
        let dim = self.dim;
        for (i, j, block) in self.tiles_mut() {
            if i == j {
                let h = tile_len(dim, i);
                (0..h).for_each(|r| block[r * h + r] += alpha);
            }
        }
    }

    /// `G += Zᵀ Z` for a row-major f64 block `z` (`rows × D`), one GEMM per tile on and
    /// below the diagonal, spread over `threads` threads. Each tile is computed by one
    /// sequential GEMM whatever the thread count, so the sums are bit-identical for any
    /// `threads`.
    pub fn syrk(&mut self, z: ArrayView2<'_, f64>, threads: usize) {
        assert_eq!(z.ncols(), self.dim);
        let Some(zs) = z.as_slice() else {
            let owned = z.to_owned();
            return self.syrk(owned.view(), threads);
        };
        let (rows, dim) = (z.nrows(), self.dim);
        self.add_products(MatRef::from_row_major_slice(zs, rows, dim), threads);
    }

    /// `G += ZᵀZ` for a block given feature by feature (`zt`: `D × rows`, each feature's
    /// `rows` values contiguous: `Z` column-major), one GEMM per tile on and below the
    /// diagonal. faer packs this layout faster than a row-major block (`examples/tile_ref`
    /// runs the layouts side by side), so the pass hands its blocks over this way. Bit-identical for any `threads`, as [`TriGram::syrk`].
    pub fn syrk_cols(&mut self, zt: &[f64], rows: usize, threads: usize) {
        let dim = self.dim;
        self.add_products(MatRef::from_column_major_slice(&zt[..rows * dim], rows, dim), threads);
    }

    /// `G += ZᵀZ` for `zm` (`rows × D`, either layout): one sequential GEMM per tile on
    /// and below the diagonal, so the sums are bit-identical for any `threads`.
    fn add_products(&mut self, zm: MatRef<'_, f64>, threads: usize) {
        let dim = self.dim;
        parallel(self.tiles_mut(), threads, |(i, j, block): (usize, usize, &mut [f64])| {
            let (ri, rj) = (tile_range(dim, i), tile_range(dim, j));
            let a = zm.subcols(ri.start, ri.len()).transpose();
            let b = zm.subcols(rj.start, rj.len());
            let c = MatMut::from_row_major_slice_mut(block, ri.len(), rj.len());
            if i == j {
                // Only the lower half of a diagonal tile is ever read: skip the rest.
                let rect = BlockStructure::Rectangular;
                triangular::matmul(c, BlockStructure::TriangularLower, Accum::Add, a, rect, b, rect, 1.0, Par::Seq);
            } else {
                matmul(c, Accum::Add, a, b, 1.0, Par::Seq);
            }
        });
    }

    /// [`TriGram::syrk_cols`] with the products in f32 (one block of rows at a time),
    /// each tile's product added into the f64 sums: f32 FMA runs at twice the f64 rate,
    /// and rounding stays that of one block, whatever the row count. Each thread keeps
    /// one product buffer for all its tiles.
    pub fn syrk_f32_cols(&mut self, zt: &[f32], rows: usize, threads: usize) {
        let dim = self.dim;
        let zm = MatRef::from_column_major_slice(&zt[..rows * dim], rows, dim);
        let tiles = self.tiles_mut();
        let scratch = || vec![0f32; TILE * TILE];
        parallel_with(tiles, threads, scratch, |prod: &mut Vec<f32>, (i, j, block): (usize, usize, &mut [f64])| {
            let (ri, rj) = (tile_range(dim, i), tile_range(dim, j));
            let a = zm.subcols(ri.start, ri.len()).transpose();
            let b = zm.subcols(rj.start, rj.len());
            let prod = &mut prod[..ri.len() * rj.len()];
            let out = MatMut::from_row_major_slice_mut(prod, ri.len(), rj.len());
            if i == j {
                let rect = BlockStructure::Rectangular;
                let lower = BlockStructure::TriangularLower;
                triangular::matmul(out, lower, Accum::Replace, a, rect, b, rect, 1.0, Par::Seq);
                // The product's upper half holds an earlier tile's values: add the lower
                // half only, so the stored upper half stays zero.
                let h = ri.len();
                for (r, (row, prow)) in block.chunks_mut(h).zip(prod.chunks(h)).enumerate() {
                    row[..=r].iter_mut().zip(&prow[..=r]).for_each(|(v, &p)| *v += f64::from(p));
                }
            } else {
                matmul(out, Accum::Replace, a, b, 1.0, Par::Seq);
                block.iter_mut().zip(prod.iter()).for_each(|(v, &p)| *v += f64::from(p));
            }
        });
    }

    /// Bytes [`TriGram::syrk_f32_cols`] holds besides its input: one tile product per thread.
    pub fn f32_scratch_bytes(threads: usize) -> u64 {
        (4 * TILE * TILE * threads.max(1)) as u64
    }

    /// Entry `(r, c)` for `c ≤ r`.
    pub fn get_lower(&self, r: usize, c: usize) -> f64 {
        debug_assert!(c <= r);
        let (i, j) = (r / TILE, c / TILE);
        let off = self.tile_offset(i, j);
        off.map_or(0.0, |o| self.data[o + (r - i * TILE) * tile_len(self.dim, j) + (c - j * TILE)])
    }

    fn tile_offset(&self, i: usize, j: usize) -> Option<usize> {
        let mut off = 0;
        for ii in 0..i {
            off += tile_len(self.dim, ii) * (0..=ii).map(|jj| tile_len(self.dim, jj)).sum::<usize>();
        }
        off += tile_len(self.dim, i) * (0..j).map(|jj| tile_len(self.dim, jj)).sum::<usize>();
        Some(off)
    }

    /// The full symmetric matrix, row-major `D × D`.
    pub fn to_full(&self) -> Vec<f64> {
        let dim = self.dim;
        let mut full = vec![0.0; dim * dim];
        let nt = dim.div_ceil(TILE);
        let mut off = 0;
        for i in 0..nt {
            for j in 0..=i {
                let (ri, rj) = (tile_range(dim, i), tile_range(dim, j));
                let hj = rj.len();
                for (a, r) in ri.clone().enumerate() {
                    for (b, c) in rj.clone().enumerate() {
                        if c <= r {
                            let v = self.data[off + a * hj + b];
                            full[r * dim + c] = v;
                            full[c * dim + r] = v;
                        }
                    }
                }
                off += ri.len() * hj;
            }
        }
        full
    }

    /// `self += other`.
    pub fn add_assign(&mut self, other: &TriGram) {
        self.data.iter_mut().zip(&other.data).for_each(|(a, b)| *a += b);
    }

    /// `G *= w` (weighted parts).
    pub fn scale(&mut self, w: f64) {
        self.data.iter_mut().for_each(|a| *a *= w);
    }

    /// `G −= G'` (the statistics of all rows but some).
    pub fn sub_assign(&mut self, other: &TriGram) {
        self.data.iter_mut().zip(&other.data).for_each(|(a, b)| *a -= b);
    }

    /// `G += α a bᵀ + α b aᵀ` on the lower triangle (a change of shift, centring).
    pub(crate) fn add_sym_rank2(&mut self, a: &[f64], b: &[f64], alpha: f64) {
        let dim = self.dim;
        for (i, j, block) in self.tiles_mut() {
            let (ri, rj) = (tile_range(dim, i), tile_range(dim, j));
            let hj = rj.len();
            for (x, r) in ri.clone().enumerate() {
                for (y, c) in rj.clone().enumerate() {
                    block[x * hj + y] += alpha * (a[r] * b[c] + b[r] * a[c]);
                }
            }
        }
    }
}

/// Runs `f` on every item over `threads` scoped threads, items interleaved so each
/// thread gets a similar share of the large ones. Each item is one call, so the
/// arithmetic of a tile does not depend on the thread count (the Gram update and the
/// tiled Cholesky share this).
pub(crate) fn parallel<T: Send>(items: Vec<T>, threads: usize, f: impl Fn(T) + Sync) {
    parallel_with(items, threads, || (), |_: &mut (), t| f(t));
}

/// [`parallel`] with a scratch value per thread (made by `init`), handed to every call
/// on that thread: a buffer the calls would otherwise each allocate.
pub(crate) fn parallel_with<T: Send, S>(
    items: Vec<T>,
    threads: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, T) + Sync,
) {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        let mut s = init();
        items.into_iter().for_each(|t| f(&mut s, t));
        return;
    }
    let mut groups: Vec<Vec<T>> = (0..threads).map(|_| Vec::new()).collect();
    for (k, t) in items.into_iter().enumerate() {
        groups[k % threads].push(t);
    }
    std::thread::scope(|scope| {
        for g in groups {
            let (f, init) = (&f, &init);
            scope.spawn(move || {
                let mut s = init();
                g.into_iter().for_each(|t| f(&mut s, t));
            });
        }
    });
}

/// The tiles `(I, J, block)` of a lower triangle of side `dim` stored tile by tile in
/// `data` (the layout of [`TriGram`], in any scalar type: the mixed-precision solve keeps
/// an f32 copy the same way).
pub(crate) fn split_tiles<T>(data: &mut [T], dim: usize) -> Vec<(usize, usize, &mut [T])> {
    let nt = dim.div_ceil(TILE);
    let mut out = Vec::with_capacity(nt * (nt + 1) / 2);
    let mut rest: &mut [T] = data;
    for i in 0..nt {
        for j in 0..=i {
            let len = tile_len(dim, i) * tile_len(dim, j);
            let (head, tail) = rest.split_at_mut(len);
            out.push((i, j, head));
            rest = tail;
        }
    }
    out
}

/// [`split_tiles`] for shared reading.
pub(crate) fn split_tiles_ref<T>(data: &[T], dim: usize) -> Vec<(usize, usize, &[T])> {
    let nt = dim.div_ceil(TILE);
    let mut out = Vec::with_capacity(nt * (nt + 1) / 2);
    let mut rest: &[T] = data;
    for i in 0..nt {
        for j in 0..=i {
            let (head, tail) = rest.split_at(tile_len(dim, i) * tile_len(dim, j));
            out.push((i, j, head));
            rest = tail;
        }
    }
    out
}

pub(crate) fn tile_len(dim: usize, i: usize) -> usize {
    TILE.min(dim - i * TILE)
}

pub(crate) fn tile_range(dim: usize, i: usize) -> std::ops::Range<usize> {
    i * TILE..(i * TILE + TILE).min(dim)
}
