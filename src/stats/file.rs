//! The statistics file: named blocks of [`GramStats`] and a JSON `meta` value in the
//! checksummed container, written straight from the statistics and read back a block at
//! a time (no second copy of a Gram in memory), with every shape checked against the
//! header before anything is allocated and every sum checked finite.

use super::{GramStats, TriGram};
use crate::container::ContainerError;
use crate::error::{Error, Result};

/// Statistics file format version (2: the checksum covers the header too; 3: the seal is
/// XXH64, not FNV-1a; 4: a block may carry its rows' total weight, so a release that
/// would read weighted sums as counted ones refuses the file).
pub const STATS_VERSION: u32 = 4;
const STATS_FORMAT: &str = "sketchfit-stats";

/// FNV-1a 64 over byte slices, hex (see [`crate::container::checksum`]).
pub use crate::container::checksum;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct StatsHeader {
    format: String,
    version: u32,
    checksum: String,
    blocks: Vec<BlockHeader>,
    meta: serde_json::Value,
}

impl crate::container::Header for StatsHeader {
    const WHAT: &'static str = "statistics";
    const FORMAT: &'static str = STATS_FORMAT;
    const VERSION: u32 = STATS_VERSION;
    const OLDEST: u32 = 1;
    const SEALED_FROM: u32 = 2;
    const XXH_FROM: u32 = 3;
    const HINT: &'static str = "accumulate it again with this sketchfit";
    fn format(&self) -> &str {
        &self.format
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn checksum_mut(&mut self) -> &mut String {
        &mut self.checksum
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct BlockHeader {
    name: String,
    n: u64,
    /// The rows' total weight when it is not `n` (parts weighted by `solve --decay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weight: Option<f64>,
    dim: usize,
    c: usize,
}

/// Serialises named statistics and a JSON `meta` value (read back before returning).
pub fn stats_to_bytes(blocks: &[(&str, &GramStats)], meta: serde_json::Value) -> Result<Vec<u8>> {
    use crate::container::Array;
    let arrays = stats_arrays(blocks)?.into_iter().map(|a| Array::f64(a.name, a.shape, a.data)).collect::<Vec<Array>>();
    crate::container::encode(&stats_header(blocks, meta), arrays)
}

/// Writes a statistics file (the same container [`stats_to_bytes`] builds) straight from
/// the statistics, a block at a time: no copy of the Gram is made, and the file is read
/// back the same way before it is renamed into place.
pub fn stats_to_file(
    session: &crate::session::Session,
    path: &std::path::Path,
    blocks: &[(&str, &GramStats)],
    meta: serde_json::Value,
) -> Result<()> {
    crate::container::write_f64(session, path, &stats_header(blocks, meta), stats_arrays(blocks)?)
}

/// The arrays of a statistics file; a non-finite sum (the features overflowed them) is
/// refused before anything is written.
fn stats_arrays<'a>(blocks: &[(&str, &'a GramStats)]) -> Result<Vec<crate::container::F64Array<'a>>> {
    use crate::container::F64Array;
    let mut arrays = Vec::new();
    for (name, st) in blocks {
        let (dim, c) = (st.dim(), st.c);
        let array =
            |key: &str, shape: Vec<usize>, data: &'a [f64]| F64Array { name: format!("{name}.{key}"), shape, data };
        arrays.push(array("shift", vec![dim], &st.shift));
        arrays.push(array("s", vec![dim], &st.s));
        arrays.push(array("gram", vec![st.gram.raw().len()], st.gram.raw()));
        arrays.push(array("t", vec![dim, c], &st.t));
        arrays.push(array("u", vec![c], &st.u));
        arrays.push(array("v", vec![c], &st.v));
    }
    if let Some(a) = arrays.iter().find(|a| a.data.iter().any(|v| !v.is_finite())) {
        return Err(Error::NonFinite { what: a.name.clone() });
    }
    Ok(arrays)
}

fn stats_header(blocks: &[(&str, &GramStats)], meta: serde_json::Value) -> StatsHeader {
    StatsHeader {
        format: STATS_FORMAT.into(),
        version: STATS_VERSION,
        checksum: String::new(),
        blocks: blocks
            .iter()
            .map(|(n, s)| BlockHeader {
                name: n.to_string(),
                n: s.n,
                weight: (s.weight != s.n as f64).then_some(s.weight),
                dim: s.dim(),
                c: s.c,
            })
            .collect(),
        meta,
    }
}

/// Parses a statistics file: the named blocks and the `meta` value. Any damage (a
/// checksum mismatch, wrong shapes, another format) is an error, never used.
pub fn stats_from_bytes(
    bytes: &[u8],
) -> std::result::Result<(Vec<(String, GramStats)>, serde_json::Value), ContainerError> {
    let file = crate::container::decode::<StatsHeader>(bytes)?;
    let header = file.header.clone();
    stats_blocks(header, |name, len| file.f64(name, len))
}

/// [`stats_from_bytes`] from an open file, read a block at a time straight into the
/// statistics: one copy of them in memory, not two.
pub fn stats_from_file(
    file: std::fs::File,
) -> std::result::Result<(Vec<(String, GramStats)>, serde_json::Value), ContainerError> {
    let (header, mut arrays) = crate::container::read_file::<StatsHeader>(file, true)?;
    stats_blocks(header, |name, len| match arrays.remove(name) {
        Some(v) if v.len() == len => Ok(v),
        Some(_) => Err(ContainerError::Shape(name.to_string())),
        None => Err(ContainerError::Missing(name.to_string())),
    })
}

/// Streams the Gram of block `block` (side `dim`) of the statistics file `path` tile by
/// tile in storage order, `tile(I, J, values)`, a few tiles' memory at a time (the
/// mixed-precision solve's product with statistics kept on disk). The file is read and
/// verified on a thread of its own, [`TILES_IN_FLIGHT`] tiles ahead of `tile`, so the
/// read and the checksum overlap the caller's work. On an error, nothing `tile`
/// computed may be used.
pub fn gram_tiles_from_file(
    path: &std::path::Path,
    block: &str,
    dim: usize,
    mut tile: impl FnMut(usize, usize, &[f64]),
) -> std::result::Result<(), ContainerError> {
    use std::sync::mpsc::sync_channel;
    let f = std::fs::File::open(path).map_err(|e| ContainerError::NotSafetensors(e.to_string()))?;
    let name = format!("{block}.gram");
    let nt = dim.div_ceil(super::TILE);
    let tiles: Vec<(usize, usize, usize)> =
        (0..nt).flat_map(|i| (0..=i).map(move |j| (i, j, super::tile_len(dim, i) * super::tile_len(dim, j)))).collect();
    // Full tiles go one way, emptied buffers come back: no allocation per tile.
    let (full_tx, full_rx) = sync_channel::<(usize, usize, Vec<f64>)>(TILES_IN_FLIGHT);
    let (empty_tx, empty_rx) = sync_channel::<Vec<f64>>(TILES_IN_FLIGHT + 1);
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let (mut k, mut found) = (0, false);
            let mut buf = Vec::with_capacity(super::TILE * super::TILE);
            crate::container::scan_file::<StatsHeader>(f, true, |array, len, _, mut values| {
                if array != name {
                    return Ok(());
                }
                if len != TriGram::len_for(dim) {
                    return Err(ContainerError::Shape(array.to_string()));
                }
                found = true;
                while let Some(&(i, j, want)) = tiles.get(k) {
                    let take = (want - buf.len()).min(values.len());
                    buf.extend_from_slice(&values[..take]);
                    values = &values[take..];
                    if buf.len() < want {
                        break;
                    }
                    let next = empty_rx.try_recv().unwrap_or_else(|_| Vec::with_capacity(super::TILE * super::TILE));
                    // The consumer stops only when its side is dropped (it never is early).
                    let _ = full_tx.send((i, j, std::mem::replace(&mut buf, next)));
                    k += 1;
                }
                Ok(())
            })?;
            if !found {
                return Err(ContainerError::Missing(name));
            }
            Ok(())
        });
        for (i, j, mut values) in full_rx {
            tile(i, j, &values);
            values.clear();
            let _ = empty_tx.try_send(values);
        }
        reader.join().unwrap_or_else(|_| Err(ContainerError::Inconsistent("the reading thread panicked".into())))
    })
}

/// The Gram of block `block` (side `dim`) of the statistics file `path`, read and
/// verified without the file's other arrays (a checkpoint's other blocks stay on disk).
pub fn gram_from_file(path: &std::path::Path, block: &str, dim: usize) -> std::result::Result<TriGram, ContainerError> {
    let mut raw = Vec::with_capacity(TriGram::len_for(dim));
    gram_tiles_from_file(path, block, dim, |_, _, tile| raw.extend_from_slice(tile))?;
    if raw.iter().any(|v| !v.is_finite()) {
        return Err(ContainerError::Inconsistent(format!("array '{block}.gram' holds a non-finite value")));
    }
    TriGram::from_raw(dim, raw).ok_or_else(|| ContainerError::Shape(format!("{block}.gram")))
}

/// Tiles the reading thread of [`gram_tiles_from_file`] may be ahead (512 KiB each).
pub const TILES_IN_FLIGHT: usize = 8;

/// The blocks a verified statistics header names, their arrays taken by `get(name, len)`.
fn stats_blocks(
    header: StatsHeader,
    mut get: impl FnMut(&str, usize) -> std::result::Result<Vec<f64>, ContainerError>,
) -> std::result::Result<(Vec<(String, GramStats)>, serde_json::Value), ContainerError> {
    let mut out = Vec::new();
    // Checksums prove the bytes are the ones written, not that the numbers are usable: a
    // non-finite sum would reach the solve.
    let mut get = |name: &str, len: usize| {
        let v = get(name, len)?;
        if v.iter().any(|x| !x.is_finite()) {
            return Err(ContainerError::Inconsistent(format!("array '{name}' holds a non-finite value")));
        }
        Ok(v)
    };
    for b in &header.blocks {
        let (dim, c) = (b.dim, b.c);
        let weight = b.weight.unwrap_or(b.n as f64);
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(ContainerError::Inconsistent(format!("block '{}' has weight {weight}", b.name)));
        }
        let gram = TriGram::from_raw(dim, get(&format!("{}.gram", b.name), TriGram::len_for(dim))?)
            .ok_or_else(|| ContainerError::Inconsistent("the Gram array does not match its dimension".into()))?;
        out.push((
            b.name.clone(),
            GramStats {
                shift: get(&format!("{}.shift", b.name), dim)?,
                n: b.n,
                weight,
                s: get(&format!("{}.s", b.name), dim)?,
                gram,
                c,
                t: get(&format!("{}.t", b.name), dim * c)?,
                u: get(&format!("{}.u", b.name), c)?,
                v: get(&format!("{}.v", b.name), c)?,
            },
        ));
    }
    Ok((out, header.meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Session;

    fn data(rows: usize, dim: usize, c: usize) -> (Vec<f32>, Vec<f64>) {
        let mut r = crate::rng::StageRng::new(3, 9);
        let z = (0..rows * dim).map(|_| (r.uniform() * 4.0 - 1.0 + 100.0) as f32).collect();
        let y = (0..rows * c).map(|_| r.uniform() - 0.5).collect();
        (z, y)
    }

    #[test]
    fn a_statistics_file_streams_out_and_in_as_the_bytes_do_and_damage_is_refused() {
        let (dim, c, rows) = (300, 2, 50);
        let (z, y) = data(rows, dim, c);
        let mut st = GramStats::new(vec![0.25; dim], c);
        st.add(&z, &y, rows, 2).unwrap();
        let dir = std::env::temp_dir().join(format!("sketchfit-stats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.stats");
        let meta = serde_json::json!({ "kind": "test" });
        stats_to_file(&Session::new(), &path, &[("labeled", &st)], meta.clone()).unwrap();
        let open = || std::fs::File::open(&path).unwrap();
        let (blocks, back_meta) = stats_from_file(open()).unwrap();
        assert_eq!((blocks[0].1.clone(), back_meta.clone()), (st.clone(), meta.clone()));
        // The in-memory reader and writer agree with the streamed ones.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(stats_from_bytes(&bytes).unwrap().0[0].1, st);
        let built = stats_to_bytes(&[("labeled", &st)], meta).unwrap();
        std::fs::write(&path, &built).unwrap();
        assert_eq!(stats_from_file(open()).unwrap().0[0].1, st);
        // A changed byte, a cut file, an array said to lie past the end: refused, and
        // nothing larger than the file is allocated.
        let mut changed = bytes.clone();
        let at = changed.len() - 100;
        changed[at] ^= 4;
        std::fs::write(&path, &changed).unwrap();
        assert!(matches!(stats_from_file(open()), Err(ContainerError::Checksum(_))));
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(stats_from_file(open()).is_err());
        let end = format!(",{}]", 8 * (TriGram::len_for(dim) + 2 * dim + dim * c + 2 * c));
        let pos = bytes.windows(end.len()).position(|w| w == end.as_bytes()).unwrap() + 1;
        let mut past = bytes.clone();
        past[pos] = b'9';
        std::fs::write(&path, &past).unwrap();
        assert!(matches!(stats_from_file(open()), Err(ContainerError::NotSafetensors(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_grams_tiles_stream_from_its_file_in_storage_order_and_damage_is_refused_at_the_end() {
        let (dim, c, rows) = (2 * super::super::TILE + 9, 1, 40);
        let (z, y) = data(rows, dim, c);
        let mut st = GramStats::new(vec![0.5; dim], c);
        st.add(&z, &y, rows, 2).unwrap();
        let dir = std::env::temp_dir().join(format!("sketchfit-tiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("g.stats");
        let blocks = [("other", &GramStats::new(vec![0.0; 3], 0)), ("g", &st)];
        stats_to_file(&Session::new(), &path, &blocks, serde_json::json!({})).unwrap();
        let mut seen = Vec::new();
        gram_tiles_from_file(&path, "g", dim, |i, j, t| seen.push((i, j, t.to_vec()))).unwrap();
        let want: Vec<_> = st.gram.tiles().into_iter().map(|(i, j, t)| (i, j, t.to_vec())).collect();
        assert_eq!(seen, want);
        // Another side, a block not there, a changed byte: refused.
        assert!(matches!(gram_tiles_from_file(&path, "g", dim + 1, |_, _, _| ()), Err(ContainerError::Shape(_))));
        assert!(matches!(gram_tiles_from_file(&path, "h", dim, |_, _, _| ()), Err(ContainerError::Missing(_))));
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - 8 * (dim + 3);
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(gram_tiles_from_file(&path, "g", dim, |_, _, _| ()), Err(ContainerError::Checksum(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn non_finite_sums_are_never_written_and_refused_when_read() {
        let (z, y) = data(20, 8, 1);
        let mut st = GramStats::new(vec![0.0; 8], 1);
        st.add(&z, &y, 20, 1).unwrap();
        st.s[3] = f64::INFINITY;
        let err = stats_to_bytes(&[("labeled", &st)], serde_json::json!({})).unwrap_err();
        assert!(err.to_string().contains("'labeled.s' are not finite"), "{err}");
        // A file sealed around a NaN (its checksum is valid) is refused on reading.
        st.s[3] = f64::NAN;
        let arrays = [("labeled", &st)]
            .iter()
            .flat_map(|(n, s)| {
                [("shift", &s.shift[..]), ("s", &s.s), ("gram", s.gram.raw()), ("t", &s.t), ("u", &s.u), ("v", &s.v)]
                    .map(|(k, d)| crate::container::Array::f64(format!("{n}.{k}"), vec![d.len()], d))
            })
            .collect();
        let bytes =
            crate::container::encode(&stats_header(&[("labeled", &st)], serde_json::json!({})), arrays).unwrap();
        let err = stats_from_bytes(&bytes).unwrap_err();
        assert!(err.to_string().contains("labeled.s") && err.to_string().contains("non-finite"), "{err}");
    }
}
