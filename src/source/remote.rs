//! Parquet in an object store, read by range: the footer through parquet's push decoder
//! (the file's last bytes fetched first — 64 KiB, or as many as the glob's first footer
//! took — so a footer usually costs one request), then per
//! row group only the projected columns' chunks, fetched in one coalesced request set and
//! decoded from memory by the same reader as a local file. Memory per unit read is the
//! projected row group's compressed bytes.

use std::io::Cursor;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataPushDecoder};
use parquet::file::reader::{ChunkReader, Length};
use parquet::DecodeResult;

use crate::error::{Error, Location, Result};
use crate::remote::{Object, Pending};
use crate::session::Session;

/// The footer bytes asked for first when nothing better is known.
pub(super) const TAIL: u64 = 64 << 10;

/// Opens the object `path` names and decodes its footer, asking first for its last
/// `tail` bytes. Also returns the tail that would have held this footer whole: files of
/// one glob share a schema, so their footers are about one size, and a 784-column footer
/// (~660 KB) would cost every file two requests at the default.
pub(super) fn open(session: &Session, path: &Path, tail: u64) -> Result<(ArrowReaderMetadata, Arc<Object>, u64)> {
    let object = session.storage().open(path)?;
    let size = object.size();
    let loc = || Location::file(path);
    let parquet = |source: ParquetError| Error::Parquet { location: loc(), source };
    if size < 12 {
        return Err(Error::data(
            loc(),
            format!("an object of {size} bytes cannot be Parquet (it is truncated or empty)"),
        ));
    }
    let options = super::reader_options();
    let mut decoder = ParquetMetaDataPushDecoder::try_new(size)
        .map_err(parquet)?
        .with_page_index_policy(PageIndexPolicy::Skip)
        .with_metadata_options(Some(Arc::new(options.metadata_options().clone())));
    let tail = size.saturating_sub(tail.max(12))..size;
    let bytes = object.get_ranges(std::slice::from_ref(&tail))?;
    let footer = bytes.first().filter(|b| b.len() >= 8).map_or(0, |b| {
        let n = b.len();
        u64::from(u32::from_le_bytes([b[n - 8], b[n - 7], b[n - 6], b[n - 5]]))
    });
    // The footer plus its 8-byte trailer, and an eighth more for footers that differ a
    // little (other statistics, longer strings); at most 16 MiB whatever a damaged
    // trailer says.
    let fits = (footer + 8).saturating_add(footer / 8).clamp(TAIL, 16 << 20);
    decoder.push_ranges(vec![tail], bytes).map_err(parquet)?;
    let metadata = loop {
        match decoder.try_decode().map_err(parquet)? {
            DecodeResult::Data(m) => break m,
            DecodeResult::NeedsData(ranges) => {
                let bytes = object.get_ranges(&ranges)?;
                decoder.push_ranges(ranges, bytes).map_err(parquet)?;
            }
            DecodeResult::Finished => {
                return Err(Error::data(loc(), "the Parquet footer decoder ended without a footer"));
            }
        }
    };
    let meta = ArrowReaderMetadata::try_new(Arc::new(metadata), options).map_err(parquet)?;
    Ok((meta, Arc::new(object), fits))
}

/// The fetch of row group `rg`'s root columns `indices`, under way.
#[derive(Debug)]
pub(super) struct Prefetch {
    /// File, row group and columns.
    pub(super) key: (usize, usize, Vec<usize>),
    ranges: Vec<Range<u64>>,
    size: u64,
    pending: Pending,
}

impl Prefetch {
    /// Starts fetching row group `rg`'s chunks of the root columns `indices` of `file`.
    pub(super) fn start(
        object: &Object,
        meta: &ArrowReaderMetadata,
        file: usize,
        rg: usize,
        indices: &[usize],
    ) -> Result<Self> {
        let ranges = ranges(meta, rg, indices);
        let pending = object.spawn_ranges(ranges.clone())?;
        Ok(Prefetch { key: (file, rg, indices.to_vec()), ranges, size: object.size(), pending })
    }

    /// The fetched bytes, for [`reader`].
    pub(super) fn wait(self) -> Result<Fetched> {
        let bytes = self.pending.wait()?;
        Ok(Fetched { len: self.size, parts: self.ranges.iter().map(|r| r.start).zip(bytes).collect() })
    }
}

/// The compressed bytes of the largest row group's chunks of `indices`: what one unit
/// read or prefetched holds.
pub(super) fn largest_unit(meta: &ArrowReaderMetadata, indices: &[usize]) -> u64 {
    (0..meta.metadata().num_row_groups())
        .map(|rg| ranges(meta, rg, indices).iter().map(|r| r.end - r.start).sum::<u64>())
        .max()
        .unwrap_or(0)
}

/// A reader of row group `rg`'s fetched root columns `indices`, in batches of `batch`
/// rows, at most `limit` rows.
pub(super) fn reader(
    fetched: Fetched,
    meta: &ArrowReaderMetadata,
    (rg, indices): (usize, Vec<usize>),
    batch: usize,
    limit: Option<usize>,
    loc: &Location,
) -> Result<ParquetRecordBatchReader> {
    let mask = ProjectionMask::roots(meta.parquet_schema(), indices);
    let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(fetched, meta.clone())
        .with_projection(mask)
        .with_row_groups(vec![rg])
        .with_batch_size(batch.max(1));
    if let Some(l) = limit {
        builder = builder.with_limit(l);
    }
    builder.build().map_err(|source| Error::Parquet { location: loc.clone(), source })
}

/// The byte ranges of row group `rg`'s column chunks under the root columns `roots`.
fn ranges(meta: &ArrowReaderMetadata, rg: usize, roots: &[usize]) -> Vec<Range<u64>> {
    let schema = meta.parquet_schema();
    let group = meta.metadata().row_group(rg);
    let mut out: Vec<Range<u64>> = (0..schema.num_columns())
        .filter(|&leaf| roots.contains(&schema.get_column_root_idx(leaf)))
        .map(|leaf| {
            let (start, len) = group.column(leaf).byte_range();
            start..start.saturating_add(len)
        })
        .collect();
    out.sort_by_key(|r| r.start);
    out
}

/// The fetched column chunks of one row group, served to the Parquet reader as a file
/// whose other bytes are absent.
pub(super) struct Fetched {
    len: u64,
    parts: Vec<(u64, Bytes)>,
}

impl Fetched {
    fn slice(&self, start: u64, len: Option<usize>) -> parquet::errors::Result<Bytes> {
        for (at, b) in &self.parts {
            let end = at + b.len() as u64;
            // Adjacent chunks share an offset: the one that holds the bytes wanted.
            let fits = match len {
                Some(l) => *at <= start && start + l as u64 <= end,
                None => *at <= start && start < end,
            };
            if fits {
                let from = (start - at) as usize;
                return Ok(b.slice(from..from + len.unwrap_or(b.len() - from)));
            }
        }
        Err(ParquetError::General(format!("bytes at {start} were not fetched (the footer's column offsets disagree)")))
    }
}

impl Length for Fetched {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Fetched {
    type T = Cursor<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        self.slice(start, None).map(Cursor::new)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.slice(start, Some(length))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_chunks_are_told_apart_and_unfetched_bytes_refused() {
        // Column chunks end where the next begins: offset 8 is the second chunk's start,
        // not the first one's (empty) end.
        let fetched =
            Fetched { len: 100, parts: vec![(2, Bytes::from_static(b"abcdef")), (8, Bytes::from_static(b"ghij"))] };
        let mut s = String::new();
        std::io::Read::read_to_string(&mut fetched.get_read(8).expect("fetched"), &mut s).expect("utf-8");
        assert_eq!(s, "ghij");
        assert_eq!(fetched.get_bytes(4, 4).expect("within the first").as_ref(), b"cdef");
        assert_eq!(fetched.get_bytes(9, 3).expect("within the second").as_ref(), b"hij");
        assert!(fetched.get_bytes(6, 4).is_err(), "a span across two chunks was never one range");
        assert!(fetched.get_read(12).is_err() && fetched.get_bytes(0, 1).is_err(), "bytes never fetched");
        assert_eq!(fetched.len(), 100);
    }
}
