//! The Cholesky factorisation of a lower triangle held as tiles (the layout of
//! [`TriGram`](super::TriGram), in any scalar type) and the triangular solves with its
//! factor. The statistics' fixed-λ solve, the mixed-precision solve's f32 copy and the
//! Nyström map's landmark kernel all factor through it: right-looking over `TILE × TILE`
//! tiles, so every step is a GEMM or a triangular solve of one tile and the rate is the
//! tile kernel's, well above a left-looking dense factor's at these sizes (the benchmarks
//! page, "Solves on the same statistics").

use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::{solve_lower_triangular_in_place, solve_upper_triangular_in_place};
use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{Accum, MatMut, MatRef, Par};

use super::tri::{parallel, tile_len, TILE};

/// `(I, J)` of the tile stored at each position, in storage order.
fn tile_index(nt: usize) -> Vec<(usize, usize)> {
    (0..nt).flat_map(|i| (0..=i).map(move |j| (i, j))).collect()
}

fn pos(i: usize, j: usize) -> usize {
    i * (i + 1) / 2 + j
}

/// The scalar types the tiled factorisation runs in: f64, and f32 for the
/// mixed-precision solve (`mixed.rs`).
pub trait Scalar:
    faer::traits::ComplexField
    + Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::iter::Sum
    + 'static
{
    /// The value of `v` in this type.
    fn of(v: f64) -> Self;
    /// The square root.
    fn root(self) -> Self;
    /// Neither NaN nor infinite.
    fn finite(self) -> bool;
    /// 1.
    fn one() -> Self {
        Self::of(1.0)
    }
}

impl Scalar for f64 {
    fn of(v: f64) -> Self {
        v
    }
    fn root(self) -> Self {
        self.sqrt()
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
}

impl Scalar for f32 {
    fn of(v: f64) -> Self {
        v as f32
    }
    fn root(self) -> Self {
        self.sqrt()
    }
    fn finite(self) -> bool {
        self.is_finite()
    }
}

/// Factors the lower triangle of side `dim` given as its tiles (storage order) in place
/// into its lower Cholesky factor, in any scalar type: right-looking over the tiles, one
/// sequential faer call per tile whatever the thread count (so bit-identical for any
/// `threads`). Fails with the index of the first pivot at or below `min_pivot`.
pub fn factor_tiles<T: Scalar>(
    mut tiles: Vec<&mut [T]>,
    dim: usize,
    min_pivot: f64,
    threads: usize,
) -> std::result::Result<(), usize> {
    let nt = dim.div_ceil(TILE);
    let index = tile_index(nt);
    let threads = threads.max(1);
    let minus_one = T::of(-1.0);
    for k in 0..nt {
        let hk = tile_len(dim, k);
        factor_tile(&mut tiles[pos(k, k)][..], hk, T::of(min_pivot)).map_err(|p| k * TILE + p)?;
        // Disjoint borrows of the storage: the factored diagonal tile (shared) and the
        // panel below it (each tile mutable, so every solve can run on its own thread).
        {
            let (head, tail) = tiles.split_at_mut(pos(k, k) + 1);
            let diag = MatRef::from_row_major_slice(&*head[pos(k, k)], hk, hk);
            let panel: Vec<(usize, &mut [T])> = index[pos(k, k) + 1..]
                .iter()
                .zip(tail.iter_mut())
                .filter(|((_, j), _)| *j == k)
                .map(|(&(i, _), t)| (i, &mut **t))
                .collect();
            parallel(panel, threads, |(i, t)| {
                // L_ik L_kkᵀ = A_ik  ⇔  L_kk L_ikᵀ = A_ikᵀ.
                let ta = MatMut::from_row_major_slice_mut(t, tile_len(dim, i), hk).transpose_mut();
                solve_lower_triangular_in_place(diag, ta, Par::Seq);
            });
        }
        // The panel (shared) and the trailing triangle (each tile mutable).
        let mut panel: Vec<&[T]> = vec![&[]; nt];
        let mut rest: Vec<(usize, usize, &mut [T])> = Vec::new();
        for (&(i, j), t) in index.iter().zip(tiles.iter_mut()) {
            if j == k && i > k {
                panel[i] = &**t;
            } else if j > k {
                rest.push((i, j, &mut **t));
            }
        }
        let lk = |i: usize| MatRef::from_row_major_slice(panel[i], tile_len(dim, i), hk);
        parallel(rest, threads, |(i, j, t)| {
            let c = MatMut::from_row_major_slice_mut(t, tile_len(dim, i), tile_len(dim, j));
            matmul(c, Accum::Add, lk(i), lk(j).transpose(), minus_one, Par::Seq);
        });
    }
    Ok(())
}

/// Cholesky of one row-major `n × n` diagonal tile in place (lower part), or the first
/// pivot below `min_pivot`. In exact arithmetic every pivot of `C + λI` is at least λ, so
/// a pivot below λ/2 means rounding has swamped the regularisation.
fn factor_tile<T: Scalar>(a: &mut [T], n: usize, min_pivot: T) -> std::result::Result<(), usize> {
    for j in 0..n {
        let rj = &mut a[j * n..(j + 1) * n];
        let d = rj[j] - rj[..j].iter().map(|&v| v * v).sum::<T>();
        if d <= min_pivot || !d.finite() {
            return Err(j);
        }
        let d = d.root();
        rj[j] = d;
        for i in j + 1..n {
            let (upper, lower) = a.split_at_mut(i * n);
            let rj = &upper[j * n..j * n + j];
            let ri = &mut lower[..n];
            let s = ri[j] - ri[..j].iter().zip(rj).map(|(&x, &y)| x * y).sum::<T>();
            ri[j] = s / d;
        }
    }
    Ok(())
}

/// Solves `L Y = B` in place for a factor given as its tiles and a column-major
/// `dim × c` right side (each tile row: the products with the rows above, then the
/// diagonal tile's triangular solve).
pub fn forward_tiles<T: Scalar>(tiles: &[&[T]], dim: usize, mut b: MatMut<'_, T>) {
    let nt = dim.div_ceil(TILE);
    let tile = |i: usize, j: usize| MatRef::from_row_major_slice(tiles[pos(i, j)], tile_len(dim, i), tile_len(dim, j));
    let minus_one = T::of(-1.0);
    for i in 0..nt {
        let hi = tile_len(dim, i);
        for j in 0..i {
            let (top, mut bottom) = b.rb_mut().split_at_row_mut(i * TILE);
            let yj = top.rb().subrows(j * TILE, tile_len(dim, j));
            matmul(bottom.rb_mut().subrows_mut(0, hi), Accum::Add, tile(i, j), yj, minus_one, Par::Seq);
        }
        solve_lower_triangular_in_place(tile(i, i), b.rb_mut().subrows_mut(i * TILE, hi), Par::Seq);
    }
}

/// Solves `Lᵀ X = Y` in place, the second half of [`solve_tiles`].
pub fn backward_tiles<T: Scalar>(tiles: &[&[T]], dim: usize, mut b: MatMut<'_, T>) {
    let nt = dim.div_ceil(TILE);
    let tile = |i: usize, j: usize| MatRef::from_row_major_slice(tiles[pos(i, j)], tile_len(dim, i), tile_len(dim, j));
    let minus_one = T::of(-1.0);
    for i in (0..nt).rev() {
        let hi = tile_len(dim, i);
        for j in i + 1..nt {
            let (mut top, bottom) = b.rb_mut().split_at_row_mut(j * TILE);
            let xj = bottom.rb().subrows(0, tile_len(dim, j));
            matmul(top.rb_mut().subrows_mut(i * TILE, hi), Accum::Add, tile(j, i).transpose(), xj, minus_one, Par::Seq);
        }
        solve_upper_triangular_in_place(tile(i, i).transpose(), b.rb_mut().subrows_mut(i * TILE, hi), Par::Seq);
    }
}

/// Solves `LLᵀ X = B` in place for a factor given as its tiles.
pub fn solve_tiles<T: Scalar>(tiles: &[&[T]], dim: usize, b: MatMut<'_, T>) {
    let mut b = b;
    forward_tiles(tiles, dim, b.rb_mut());
    backward_tiles(tiles, dim, b);
}
