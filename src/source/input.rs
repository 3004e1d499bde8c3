//! Opening the inputs: each Parquet file's footer (local, or by range from an object
//! store, several objects at once), the reader options every footer is read with, and what an opened file says of itself
//! (schema, row groups, the identity a resume or a shard is checked against).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};

use super::{remote, Backing, InputFile};
use crate::error::{Error, Location, Result};
use crate::session::Session;

/// How footers are read: the column, page-encoding and size statistics are never used
/// here, so they are not decoded. Besides saving the time on wide files, this reads files
/// whose writers typed those fields otherwise than the format says (a Dremio-written size
/// statistic as a list of i16 where the format has i64), which other readers skip too.
pub(super) fn reader_options() -> ArrowReaderOptions {
    use parquet::file::metadata::ParquetStatisticsPolicy;
    ArrowReaderOptions::new()
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
}

/// Objects whose footers are fetched at once.
const OPENERS: usize = 8;

/// Opens every file in order. Objects in a store are opened [`OPENERS`] at a time (each
/// costs a head and a footer request, which would otherwise wait on each other), the
/// first alone so the others' footer requests can be sized by it; the first failure in
/// path order is the one reported.
pub(super) fn open_files(session: &Session, paths: &[PathBuf]) -> Result<Vec<InputFile>> {
    let Some((first, rest)) = paths.split_first() else { return Ok(Vec::new()) };
    let (file, tail) = open_file(session, first, remote::TAIL)?;
    let mut files = vec![file];
    if !rest.iter().any(|p| crate::remote::is_remote(p)) {
        for p in rest {
            files.push(open_file(session, p, tail)?.0);
        }
        return Ok(files);
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<InputFile>>>> = rest.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..OPENERS.min(rest.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let (Some(path), Some(slot)) = (rest.get(i), slots.get(i)) else { break };
                let opened = open_file(session, path, tail).map(|(f, _)| f);
                if let Ok(mut s) = slot.lock() {
                    *s = Some(opened);
                }
            });
        }
    });
    for slot in slots {
        let opened = slot.into_inner().ok().flatten();
        files.push(opened.unwrap_or_else(|| Err(Error::bug("an input was left unopened")))?);
    }
    Ok(files)
}

/// Opens one file; for an object, its footer request asks for `tail` bytes, and the
/// tail its footer needed comes back beside it (`tail` for a local file).
fn open_file(session: &Session, path: &Path, tail: u64) -> Result<(InputFile, u64)> {
    if crate::remote::is_remote(path) {
        let (meta, object, fits) = remote::open(session, path, tail)?;
        crate::atomic::register_input(session, path);
        let meta = with_row_group_count(meta, path)?;
        return Ok((InputFile { path: path.to_path_buf(), backing: Backing::Remote(meta, object) }, fits));
    }
    let file = crate::atomic::open_input(session, path)?;
    let meta = ArrowReaderMetadata::load(&file, reader_options()).map_err(|source| {
        // A footer field whose thrift type differs from the one the spec gives it, outside
        // the statistics this reader skips, fails its strict decoder although other
        // readers may skip it: say so, and how to get a readable file.
        if source.to_string().contains("Expected list element type") {
            return Error::data(
                Location::file(path),
                format!(
                    "the file's footer has a field this Parquet reader cannot decode ({source}); other readers may \
                     skip it: rewrite the file, e.g. pyarrow.parquet.write_table(pyarrow.parquet.read_table(IN), OUT)"
                ),
            );
        }
        Error::Parquet { location: Location::file(path), source }
    })?;
    Ok((InputFile { path: path.to_path_buf(), backing: Backing::Parquet(with_row_group_count(meta, path)?) }, tail))
}

/// The metadata with the file-level row count set to its row groups' sum where a writer
/// left it otherwise (early parquet-rs wrote 0 beside a repeated struct): the decoder
/// caps its batch size at that count, so a 0 reads no rows at all.
fn with_row_group_count(meta: ArrowReaderMetadata, path: &Path) -> Result<ArrowReaderMetadata> {
    use parquet::file::metadata::{FileMetaData, ParquetMetaDataBuilder};
    let md = meta.metadata();
    let rows: i64 = md.row_groups().iter().map(|rg| rg.num_rows().max(0)).sum();
    let f = md.file_metadata();
    if f.num_rows() == rows {
        return Ok(meta);
    }
    let fixed = FileMetaData::new(
        f.version(),
        rows,
        f.created_by().map(str::to_string),
        f.key_value_metadata().cloned(),
        f.schema_descr_ptr(),
        f.column_orders().cloned(),
    );
    let md = ParquetMetaDataBuilder::new(fixed).set_row_groups(md.row_groups().to_vec()).build();
    ArrowReaderMetadata::try_new(std::sync::Arc::new(md), reader_options())
        .map_err(|source| Error::Parquet { location: Location::file(path), source })
}

impl InputFile {
    /// The Arrow schema.
    pub fn schema(&self) -> &Schema {
        match &self.backing {
            Backing::Parquet(meta) | Backing::Remote(meta, _) => meta.schema(),
            Backing::Memory { schema, .. } => schema,
        }
    }
    /// Rows in the file: the sum of its row groups' counts, which are what is read.
    /// Not the file-level `num_rows`, which some writers leave at 0 (early parquet-rs,
    /// beside a repeated struct) for a file whose row groups hold rows.
    pub fn rows(&self) -> u64 {
        match &self.backing {
            Backing::Parquet(meta) | Backing::Remote(meta, _) => {
                meta.metadata().row_groups().iter().map(|rg| rg.num_rows().max(0) as u64).sum()
            }
            Backing::Memory { batches, .. } => batches.iter().map(|b| b.num_rows() as u64).sum(),
        }
    }
    /// Row counts per row group (per batch in memory).
    pub fn row_groups(&self) -> Vec<usize> {
        match &self.backing {
            Backing::Parquet(meta) | Backing::Remote(meta, _) => {
                meta.metadata().row_groups().iter().map(|rg| rg.num_rows().max(0) as usize).collect()
            }
            Backing::Memory { batches, .. } => batches.iter().map(RecordBatch::num_rows).collect(),
        }
    }
    /// Where its rows are, for messages.
    pub fn location(&self) -> Location {
        match self.backing {
            Backing::Parquet(_) | Backing::Remote(..) => Location::file(&self.path),
            Backing::Memory { .. } => Location::memory(&self.path),
        }
    }
    pub(super) fn field(&self, name: &str) -> Option<&Field> {
        self.schema().fields().iter().find(|f| f.name() == name).map(|f| f.as_ref())
    }
}

impl InputFile {
    /// What identifies this file's content for a resume or a shard: its path, size, and
    /// footer (row count and each row group's rows, bytes and first column offset); for an
    /// object, its URL, size, ETag and footer.
    pub fn identity(&self) -> String {
        let (meta, size) = match &self.backing {
            Backing::Parquet(meta) => (meta, std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0).to_string()),
            Backing::Remote(meta, object) => (meta, format!("{}|{}", object.size(), object.etag().unwrap_or("-"))),
            // Batches in memory cannot be resumed from or sharded; their row layout is
            // what they are.
            Backing::Memory { batches, .. } => {
                let rows: Vec<String> = batches.iter().map(|b| b.num_rows().to_string()).collect();
                return format!("{}|memory|{}", self.path.display(), rows.join(","));
            }
        };
        let md = meta.metadata();
        let mut footer = format!("{}:{}", md.file_metadata().num_rows(), md.num_row_groups());
        for rg in md.row_groups() {
            let first = rg.columns().first().map_or(0, |c| c.data_page_offset());
            footer += &format!(";{},{},{first}", rg.num_rows(), rg.total_byte_size());
        }
        format!("{}|{size}|{}", self.path.display(), crate::stats::checksum([footer.as_bytes()]))
    }
}
