//! Where a path names an object in a store (`s3://`, `gs://`, `az://`, `abfs://`,
//! `https://`) rather than a local file: the recognition of such URLs, the storage
//! options a session was given (environment < pipeline `[storage]` < `--storage-option`),
//! and the store operations the rest of the crate needs — a head, coalesced range reads,
//! a whole-object download, a prefix listing for globs, and an upload that never
//! replaces an object. `file://` URLs are local paths and never reach a store.
//!
//! The operations live in `store.rs` over the `object_store` crate (cargo feature
//! `remote`, on by default); without the feature the same functions refuse every URL, so
//! the callers need no feature switches.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};

#[cfg(feature = "remote")]
pub mod fault;
#[cfg(feature = "remote")]
mod store;
#[cfg(feature = "remote")]
pub use store::{check_keys, Object, Pending};

#[cfg(not(feature = "remote"))]
mod disabled;
#[cfg(not(feature = "remote"))]
pub use disabled::{check_keys, Object, Pending};

/// The schemes that name an object in a store.
pub const SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "http", "https"];

/// The scheme of `s` when it is written as a URL (`scheme://…`).
fn scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let ok =
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.');
    ok.then_some(scheme)
}

/// True when `path` names an object in a store rather than a local file.
pub fn is_remote(path: &Path) -> bool {
    path.to_str().and_then(scheme).is_some_and(|s| s != "file")
}

/// `file:///a/b` as the local path `/a/b`; every other path as it is given.
pub fn local(path: &Path) -> PathBuf {
    match path.to_str().and_then(|s| s.strip_prefix("file://")) {
        Some(rest) => PathBuf::from(rest),
        None => path.to_path_buf(),
    }
}

/// Refuses a URL whose scheme no store reads (a typo such as `s4://`), naming the
/// schemes that are read.
pub fn check_scheme(path: &Path) -> Result<()> {
    if let Some(s) = path.to_str().and_then(scheme) {
        if s != "file" && !SCHEMES.contains(&s) {
            return Err(Error::Remote {
                url: path.display().to_string(),
                message: format!(
                    "'{s}://' is not a storage scheme sketchfit reads; use file://, {}",
                    SCHEMES.iter().map(|s| format!("{s}://")).collect::<Vec<_>>().join(", ")
                ),
                transient: false,
            });
        }
    }
    Ok(())
}

/// Where a storage option came from; a later layer overrides an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// The pipeline file's `[storage]` table.
    Pipeline,
    /// `--storage-option key=value` on the command line, or Python's `storage_options`.
    CommandLine,
}

/// A session's storage: the options given to it, by layer (the environment is read by
/// the stores), and — with the `remote` feature — the store clients made under them, the
/// runtime that drives their requests, the fetch buffers kept for reuse and the sizes a
/// listing found. A cheap handle: clones share all of it. Nothing here is process-wide,
/// so two sessions in one process (two threads, two estimators) never see each other's
/// options or credentials.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    inner: std::sync::Arc<StorageState>,
}

#[derive(Debug, Default)]
struct StorageState {
    options: Mutex<Vec<(Layer, String, String)>>,
    #[cfg(feature = "remote")]
    io: store::Io,
}

impl Storage {
    /// Sets the storage options of one layer (replacing that layer's earlier ones). Keys
    /// are the `object_store` configuration keys, as polars and delta-rs spell them
    /// (`aws_endpoint`, `aws_region`, `allow_http`, `timeout`, …), plus `max_retries` and
    /// `retry_timeout`. A key no store knows is refused here, before any work.
    pub fn set_options(&self, layer: Layer, pairs: &[(String, String)]) -> Result<()> {
        check_keys(pairs)?;
        let mut all = self.inner.options.lock().map_err(|_| Error::bug("the storage options' lock is held"))?;
        let new: Vec<(Layer, String, String)> =
            pairs.iter().map(|(k, v)| (layer, k.to_ascii_lowercase(), v.clone())).collect();
        let old: Vec<&(Layer, String, String)> = all.iter().filter(|(l, _, _)| *l == layer).collect();
        if old.len() == new.len() && old.iter().zip(&new).all(|(a, b)| *a == b) {
            return Ok(()); // The same options: the stores made under them still serve.
        }
        all.retain(|(l, _, _)| *l != layer);
        all.extend(new);
        all.sort_by_key(|(l, _, _)| *l);
        #[cfg(feature = "remote")]
        self.inner.io.forget_stores();
        Ok(())
    }

    /// The options one layer holds.
    pub fn layer_options(&self, layer: Layer) -> Vec<(String, String)> {
        self.inner
            .options
            .lock()
            .map(|all| all.iter().filter(|(l, _, _)| *l == layer).map(|(_, k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// The options in force, lower layers first (so a later pair overrides an earlier one).
    pub(crate) fn options(&self) -> Vec<(String, String)> {
        self.inner
            .options
            .lock()
            .map(|all| all.iter().map(|(_, k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    #[cfg(feature = "remote")]
    fn io(&self) -> &store::Io {
        &self.inner.io
    }

    /// `text` with every secret option value of this storage replaced by `***`, and every
    /// URL's userinfo and query values too: no credential reaches a log line, an error
    /// message, a model or a part.
    pub fn redact(&self, text: &str) -> String {
        let mut out = redact(text);
        for (k, v) in self.options() {
            if is_secret(&k) && v.len() >= 4 {
                out = out.replace(&v, "***");
            }
        }
        out
    }
}

/// Parses `key=value` pairs as the command line and Python give them.
pub fn parse_pairs(items: &[String], flag: &str) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(Error::usage(flag, format!("'{}' is not key=value", redact(item)))),
        })
        .collect()
}

/// `text` with every URL's userinfo and query values replaced by `***`, and the values of
/// the credential variables in the environment too. [`Storage::redact`] also hides the
/// secret options a session was given.
pub fn redact(text: &str) -> String {
    let mut out = crate::identity::redact_urls(text);
    for var in ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY"] {
        if let Ok(v) = std::env::var(var) {
            if v.len() >= 4 {
                out = out.replace(&v, "***");
            }
        }
    }
    out
}

/// Whether an option's value is a credential.
pub fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["secret", "token", "password", "sas", "access_key", "account_key", "service_account_key", "credential"]
        .iter()
        .any(|s| k.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_remote(Path::new("s3://b/k.parquet")));
        assert!(is_remote(Path::new("https://h/x")));
        assert!(!is_remote(Path::new("file:///tmp/x")));
        assert!(!is_remote(Path::new("/tmp/a://b")));
        assert!(!is_remote(Path::new("data/x.parquet")));
        assert_eq!(local(Path::new("file:///tmp/x")), PathBuf::from("/tmp/x"));
        assert!(check_scheme(Path::new("s4://b/k")).is_err());
        assert!(check_scheme(Path::new("gs://b/k")).is_ok());
    }

    #[test]
    fn secrets_are_redacted_and_pairs_parsed() {
        let pairs = parse_pairs(&["aws_secret_access_key=hunter22".into(), "aws_region=x".into()], "--storage-option")
            .expect("pairs");
        let storage = Storage::default();
        storage.set_options(Layer::CommandLine, &pairs).expect("known keys");
        assert!(storage.set_options(Layer::Pipeline, &[("no_such_key".into(), "1".into())]).is_err());
        assert_eq!(storage.redact("key hunter22 in a message"), "key *** in a message");
        assert_eq!(Storage::default().redact("key hunter22"), "key hunter22", "another session's secret");
        assert!(parse_pairs(&["novalue".into()], "--storage-option").is_err());
    }
}
