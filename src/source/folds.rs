//! Which of `K` folds a row belongs to: a seeded hash of its position (file, row group,
//! row within the row group), so the same row lands in the same fold in every shard,
//! chunking and run (math.md §13.8).

/// The fold of a row, from `0` to `k − 1`.
pub fn fold_of(seed: u64, file: usize, row_group: usize, row: usize, k: usize) -> usize {
    let mut h = seed ^ 0x243F_6A88_85A3_08D3;
    for v in [file as u64, row_group as u64, row as u64] {
        h = splitmix(h ^ v);
    }
    (h % k.max(1) as u64) as usize
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
