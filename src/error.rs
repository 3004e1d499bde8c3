//! The crate's error type, grouped by fault so the binary can map each group to an
//! exit code: bad usage and bad input exit 2, everything else exits 1.

use std::path::PathBuf;

/// Where in the input a data fault sits. Every field that is known is reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The file, if the fault is in one.
    pub file: Option<PathBuf>,
    /// The Parquet row group, 0-based.
    pub row_group: Option<usize>,
    /// The column name.
    pub column: Option<String>,
    /// The row within the row group, 0-based.
    pub row: Option<usize>,
    /// The rows are record batches in memory (`file` names them, `row_group` is the batch).
    pub in_memory: bool,
}

impl Location {
    /// A location in `file`.
    pub fn file(file: impl Into<PathBuf>) -> Self {
        Location { file: Some(file.into()), ..Location::default() }
    }
    /// Record batches in memory, named `name`.
    pub fn memory(name: impl Into<PathBuf>) -> Self {
        Location { file: Some(name.into()), in_memory: true, ..Location::default() }
    }
    /// The same location, in row group `rg`.
    pub fn row_group(mut self, rg: usize) -> Self {
        self.row_group = Some(rg);
        self
    }
    /// The same location, in `column`.
    pub fn column(mut self, c: impl Into<String>) -> Self {
        self.column = Some(c.into());
        self
    }
    /// The same location, at `row` of the row group.
    pub fn row(mut self, r: usize) -> Self {
        self.row = Some(r);
        self
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        match (&self.file, self.in_memory) {
            (Some(p), false) => parts.push(format!("file {}", p.display())),
            (Some(p), true) => parts.push(p.display().to_string()),
            (None, _) => {}
        }
        match (self.row_group, self.in_memory) {
            (Some(rg), false) => parts.push(format!("row group {rg}")),
            (Some(b), true) => parts.push(format!("batch {b}")),
            (None, _) => {}
        }
        if let Some(r) = self.row {
            parts.push(format!("row {r}"));
        }
        if let Some(c) = &self.column {
            parts.push(format!("column '{c}'"));
        }
        if parts.is_empty() {
            f.write_str("input")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// Everything that can go wrong in sketchfit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pipeline file or command-line setting is wrong.
    #[error("{file}: {key}: {message}")]
    Config {
        /// The pipeline file (or `--set` / command line).
        file: String,
        /// The dotted key.
        key: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A command-line flag or argument is wrong.
    #[error("{flag}: {message}")]
    Usage {
        /// The flag or argument (`--shard`, `PART`).
        flag: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The input data does not fit what the pipeline asks for.
    #[error("{location}: {message}")]
    Data {
        /// Where.
        location: Location,
        /// What is wrong and what to do.
        message: String,
    },
    /// A Parquet file cannot be read as Parquet (truncated, corrupt, not Parquet).
    #[error("{location}: not a readable Parquet file ({source}); check that the file is complete and really Parquet")]
    Parquet {
        /// Where.
        location: Location,
        /// The decoder's error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A model or statistics file is not one sketchfit wrote, or is damaged.
    #[error("{path}: {message}")]
    BadModel {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The operating system refused a read or a write.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An object store refused or failed a request (after its bounded retries). The URL
    /// is the one given, without credentials.
    #[error("{url}: {message}")]
    Remote {
        /// The object or prefix.
        url: String,
        /// What happened and what to do.
        message: String,
        /// A network or server fault (exit 1), rather than the user's (a missing object,
        /// refused credentials, an existing output: exit 2).
        transient: bool,
    },
    /// A broken invariant: a bug in sketchfit, never the input's fault.
    #[error("internal error (please report): {invariant}")]
    Internal {
        /// The invariant that broke.
        invariant: &'static str,
        /// What reported it, when it came from below.
        #[source]
        cause: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A mapped feature the f64 sums cannot take: not finite, or too large to square. The
    /// pass places it at its chunk (file, row group); the fix is in the input's scale.
    #[error("feature {feature} of chunk row {row} is {}", feature_fault(*.value, *.too_large))]
    BadFeature {
        /// The row within the rows added.
        row: usize,
        /// The feature (column of `z`).
        feature: usize,
        /// Its value.
        value: f64,
        /// Finite but beyond what the sums can square (`|z| > 1e100`).
        too_large: bool,
    },
    /// Sums that are not finite (features too large for them): refused before they are
    /// written or solved.
    #[error("the statistics' sums '{what}' are not finite (features too large for the sums); normalise the rows or scale the inputs")]
    NonFinite {
        /// Which sums.
        what: String,
    },
    /// An iterative method did not converge.
    #[error("{method} did not converge{}", at.map(|a| format!(" at eigenvalue {a}")).unwrap_or_default())]
    NoConvergence {
        /// The method.
        method: &'static str,
        /// Where it stopped, when it says.
        at: Option<usize>,
    },
    /// `C + λI` is not positive definite to working precision at a fixed λ.
    #[error(
        "the centred Gram plus λ = {lambda:e} is not positive definite to working precision (pivot {pivot}); {hint}"
    )]
    NotPositiveDefinite {
        /// The λ tried.
        lambda: f64,
        /// The feature index of the first failing pivot.
        pivot: usize,
        /// What to do.
        hint: String,
    },
    /// The run needs more memory than the limit allows.
    #[error("not enough memory: {needed} bytes needed, {limit} allowed; {hint}")]
    Memory {
        /// Bytes needed.
        needed: u64,
        /// Bytes allowed.
        limit: u64,
        /// What to change.
        hint: String,
    },
}

fn feature_fault(value: f64, too_large: bool) -> String {
    if too_large {
        format!(
            "{value:e}, too large to square in the f64 sums; normalise the rows (normalize = \"l2\") or scale the inputs"
        )
    } else {
        format!(
            "{value}, not finite; the input values are too large for the sketch (normalise the rows or lower gamma)"
        )
    }
}

impl Error {
    /// A bug: the invariant that broke.
    pub fn bug(invariant: &'static str) -> Self {
        Error::Internal { invariant, cause: None }
    }
    /// A bug reported from below.
    pub fn bug_from(invariant: &'static str, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Internal { invariant, cause: Some(Box::new(cause)) }
    }
    /// A configuration error.
    pub fn config(file: impl Into<String>, key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config { file: file.into(), key: key.into(), message: message.into() }
    }
    /// A command-line usage error.
    pub fn usage(flag: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Usage { flag: flag.into(), message: message.into() }
    }
    /// A data error at `location`.
    pub fn data(location: Location, message: impl Into<String>) -> Self {
        Error::Data { location, message: message.into() }
    }
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    /// A configuration error raised below the pipeline (where the file is not known,
    /// named `"pipeline"` there) placed in the pipeline file `file`, and, for a kernel
    /// candidate, with the candidate named. Any other error is returned as it is.
    pub fn in_pipeline(self, file: &str, candidate: Option<&str>) -> Self {
        match self {
            Error::Config { file: f, key, message } if f == "pipeline" => Error::Config {
                file: file.to_string(),
                key,
                message: match candidate {
                    Some(c) => format!("{message} (for the candidate {c})"),
                    None => message,
                },
            },
            other => other,
        }
    }
    /// True when the fault is in what the user gave (exit code 2).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Error::Config { .. }
                | Error::Usage { .. }
                | Error::Data { .. }
                | Error::Parquet { .. }
                | Error::BadModel { .. }
                | Error::Memory { .. }
                | Error::NotPositiveDefinite { .. }
                | Error::BadFeature { .. }
                | Error::NonFinite { .. }
        ) || matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            || matches!(self, Error::Remote { transient: false, .. })
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
