//! The store operations over `object_store`, driven from synchronous code: one small
//! tokio runtime (one worker) that reader threads block on, one store per scheme and
//! host (its connection pool shared by every file there), bounded timeouts and retries so
//! a server that stops answering ends in an error, never a hang.

use std::fs::File;
use std::io::{Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, GetOptions, ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutMode, PutOptions, PutPayload,
    RetryConfig,
};

use super::{redact, Storage};
use crate::error::{Error, Result};

/// Retries of a request that failed transiently (a 5xx, a timeout, a reset connection).
const MAX_RETRIES: usize = 3;
/// No retry starts later than this after a request's first attempt.
const RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// One request's limit, and its connection's.
const TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Objects up to this size are put in one conditional request; larger ones by a
/// multipart upload of parts this size.
const PART: usize = 16 << 20;

type Stores = Vec<(String, Arc<dyn ObjectStore>)>;

/// Fetch buffers a reader has finished with, kept for the next fetch: a pass over many
/// row groups would otherwise fault in fresh pages for each, a large share of a remote
/// `predict`'s system time (`SECTIONS=remote scripts/bench.sh`).
type Spare = Arc<Mutex<Vec<Vec<u8>>>>;

/// A storage's clients and the machinery they run on: one small tokio runtime (one
/// worker, made on first use) that reader threads block on, one store per scheme and host
/// (its connection pool shared by every file there), the spare fetch buffers, and what
/// the globs listed and nothing has opened yet (URL, size and ETag: the objects are
/// opened right after, so their head requests — a round trip each — are not needed).
#[derive(Default)]
pub(super) struct Io {
    runtime: OnceLock<std::result::Result<tokio::runtime::Runtime, String>>,
    stores: Mutex<Stores>,
    spare: Spare,
    listed: Mutex<Vec<(String, u64, Option<String>)>>,
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stores = self.stores.lock().map(|s| s.iter().map(|(b, _)| b.clone()).collect::<Vec<_>>());
        f.debug_struct("Io").field("stores", &stores.unwrap_or_default()).finish_non_exhaustive()
    }
}

impl Io {
    fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        self.runtime
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("sketchfit-io")
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| Error::io("object store runtime", std::io::Error::other(e.clone())))
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> Result<F::Output> {
        Ok(self.runtime()?.block_on(f))
    }

    /// Drops the stores made so far (their options changed).
    pub(super) fn forget_stores(&self) {
        if let Ok(mut s) = self.stores.lock() {
            s.clear();
        }
    }
}

/// A URL split into the store's base (`scheme://host`) and the key within it.
fn split(url: &str) -> Result<(String, String)> {
    let bad = |m: &str| Error::Remote { url: url.to_string(), message: m.to_string(), transient: false };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("not a URL"))?;
    let (host, key) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(bad("no bucket or host in the URL; write scheme://bucket/key"));
    }
    Ok((format!("{scheme}://{host}"), key.to_string()))
}

fn store_for(storage: &Storage, base: &str) -> Result<Arc<dyn ObjectStore>> {
    let stores = &storage.io().stores;
    if let Some((_, s)) = stores.lock().ok().and_then(|s| s.iter().find(|(b, _)| b == base).cloned()) {
        return Ok(s);
    }
    let store = build(storage, base)?;
    if let Ok(mut s) = stores.lock() {
        s.push((base.to_string(), store.clone()));
    }
    Ok(store)
}

fn config_fault(base: &str, message: String) -> Error {
    Error::Remote { url: base.to_string(), message: redact(&message), transient: false }
}

fn seconds(key: &str, value: &str, base: &str) -> Result<Duration> {
    value
        .trim_end_matches('s')
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e6)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| config_fault(base, format!("storage option {key} = '{value}': give seconds, e.g. 30 or 30s")))
}

/// The retry budget in force: the defaults under the `max_retries` and `retry_timeout`
/// options (one reading, for the stores and for the messages that state the budget).
fn retry(options: &[(String, String)], base: &str) -> Result<RetryConfig> {
    let mut retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
    };
    for (k, v) in options {
        match k.as_str() {
            "max_retries" => {
                retry.max_retries = v.trim().parse().ok().filter(|n| *n <= 100).ok_or_else(|| {
                    config_fault(base, format!("storage option max_retries = '{v}': give a count from 0 to 100"))
                })?
            }
            "retry_timeout" => retry.retry_timeout = seconds(k, v, base)?,
            _ => {}
        }
    }
    Ok(retry)
}

fn build(storage: &Storage, base: &str) -> Result<Arc<dyn ObjectStore>> {
    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
    use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
    use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
    use object_store::http::HttpBuilder;
    use object_store::ClientConfigKey;

    // TLS's cryptography is a process-level choice in rustls: ring, unless the process
    // embedding this library chose one first (then that one serves). rustls marks ring's
    // provider deprecated for lacking post-quantum key exchange; its classical X25519 and
    // P-256 exchanges are what the stores' TLS needs, and ring builds in seconds where
    // AWS-LC's C library took most of a fresh clone's first compile.
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = url::Url::parse(&format!("{base}/")).map_err(|e| config_fault(base, format!("not a valid URL ({e})")))?;
    let (scheme, _) = ObjectStoreScheme::parse(&url).map_err(|e| config_fault(base, e.to_string()))?;
    let options = storage.options();
    let retry = retry(&options, base)?;
    let keyed = options.into_iter().filter(|(k, _)| !matches!(k.as_str(), "max_retries" | "retry_timeout"));
    // The timeouts go in as keys, under the ones given: a `with_client_options` would
    // reset what the environment set (AWS_ALLOW_HTTP among it).
    let mut settings: Vec<(String, String)> = vec![
        ("timeout".into(), format!("{}s", TIMEOUT.as_secs())),
        ("connect_timeout".into(), format!("{}s", CONNECT_TIMEOUT.as_secs())),
    ];
    settings.extend(keyed);
    let fail = |e: object_store::Error| config_fault(base, format!("cannot make the store: {e}"));
    let store: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let b = AmazonS3Builder::from_env().with_url(url.as_str()).with_retry(retry);
            Arc::new(keyed_into(b, &settings, |b, k: AmazonS3ConfigKey, v| b.with_config(k, v)).build().map_err(fail)?)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let b = GoogleCloudStorageBuilder::from_env().with_url(url.as_str()).with_retry(retry);
            Arc::new(keyed_into(b, &settings, |b, k: GoogleConfigKey, v| b.with_config(k, v)).build().map_err(fail)?)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let b = MicrosoftAzureBuilder::from_env().with_url(url.as_str()).with_retry(retry);
            Arc::new(keyed_into(b, &settings, |b, k: AzureConfigKey, v| b.with_config(k, v)).build().map_err(fail)?)
        }
        ObjectStoreScheme::Http => {
            let b = HttpBuilder::new().with_url(base).with_retry(retry);
            Arc::new(keyed_into(b, &settings, |b, k: ClientConfigKey, v| b.with_config(k, v)).build().map_err(fail)?)
        }
        _ => return Err(config_fault(base, "not an object store URL".into())),
    };
    Ok(store)
}

/// Refuses a storage option no store knows, naming it.
pub fn check_keys(pairs: &[(String, String)]) -> Result<()> {
    use object_store::aws::AmazonS3ConfigKey;
    use object_store::azure::AzureConfigKey;
    use object_store::gcp::GoogleConfigKey;
    use object_store::ClientConfigKey;
    for (k, _) in pairs {
        let k = k.to_ascii_lowercase();
        let known = matches!(k.as_str(), "max_retries" | "retry_timeout")
            || k.parse::<AmazonS3ConfigKey>().is_ok()
            || k.parse::<GoogleConfigKey>().is_ok()
            || k.parse::<AzureConfigKey>().is_ok()
            || k.parse::<ClientConfigKey>().is_ok();
        if !known {
            return Err(Error::Remote {
                url: "storage".into(),
                message: format!(
                    "storage option '{k}' is not a key of any store; see the object_store configuration keys \
                     (aws_endpoint, aws_region, allow_http, timeout, google_service_account, \
                     azure_storage_account_name, …) and max_retries, retry_timeout"
                ),
                transient: false,
            });
        }
    }
    Ok(())
}

/// A builder given each setting whose key its scheme knows (the rest belong to other
/// schemes: every key was checked to belong to one).
fn keyed_into<B, K: std::str::FromStr>(b: B, settings: &[(String, String)], with: fn(B, K, String) -> B) -> B {
    settings.iter().fold(b, |b, (k, v)| match k.parse::<K>() {
        Ok(key) => with(b, key, v.clone()),
        Err(_) => b,
    })
}

/// A failed request as the user's error: classified by [`super::fault`], the retry
/// budget in force stated where the fault is the network's.
fn fault(budget: Budget, url: &str, e: object_store::Error) -> Error {
    super::fault::error(url, &e, budget)
}

/// The retry budget a fault message states: retries and their time limit.
type Budget = (usize, Duration);

fn budget(storage: &Storage) -> Budget {
    retry(&storage.options(), "").map_or((MAX_RETRIES, RETRY_TIMEOUT), |r| (r.max_retries, r.retry_timeout))
}

/// One object, as of the head request that opened it.
#[derive(Debug, Clone)]
pub struct Object {
    storage: Storage,
    budget: Budget,
    store: Arc<dyn ObjectStore>,
    key: Key,
    url: String,
    size: u64,
    etag: Option<String>,
}

fn locate(storage: &Storage, path: &Path) -> Result<(Arc<dyn ObjectStore>, Key, String)> {
    let url = path.to_string_lossy().to_string();
    let (base, key) = split(&url)?;
    let key =
        Key::parse(&key).map_err(|e| Error::Remote { url: url.clone(), message: e.to_string(), transient: false })?;
    Ok((store_for(storage, &base)?, key, url))
}

impl Storage {
    /// Opens the object `path` names: its size and ETag from the listing a glob just
    /// made, else from a head request.
    pub fn open(&self, path: &Path) -> Result<Object> {
        let (store, key, url) = locate(self, path)?;
        let (storage, budget) = (self.clone(), budget(self));
        // Taken, not read: a later open (a long-lived Python process) asks the store again.
        let listed = self
            .io()
            .listed
            .lock()
            .ok()
            .and_then(|mut l| l.iter().position(|(u, _, _)| *u == url).map(|i| l.swap_remove(i)));
        if let Some((_, size, etag)) = listed {
            return Ok(Object { storage, budget, store, key, url, size, etag });
        }
        let meta = self.io().block_on(store.head(&key))?.map_err(|e| fault(budget, &url, e))?;
        Ok(Object { storage, budget, store, key, url, size: meta.size, etag: meta.e_tag })
    }
}

impl Object {
    /// The URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its ETag, when the store gives one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// The bytes of `ranges`, fetched in one coalesced request set; a short answer (an
    /// object truncated or replaced since it was opened) is an error.
    pub fn get_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.spawn_ranges(ranges.to_vec())?.wait()
    }

    /// Starts fetching `ranges` on the runtime (a prefetch); [`Pending::wait`] takes the
    /// bytes.
    pub fn spawn_ranges(&self, ranges: Vec<Range<u64>>) -> Result<Pending> {
        if let Some(r) = ranges.iter().find(|r| r.end > self.size) {
            return Err(Error::Remote {
                url: self.url.clone(),
                message: format!(
                    "bytes {}..{} asked of an object of {} bytes: it is truncated",
                    r.start, r.end, self.size
                ),
                transient: false,
            });
        }
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url.clone());
        let (spare, budget) = (self.storage.io().spare.clone(), self.budget);
        let handle = self.storage.io().runtime()?.spawn(async move {
            let fetch = |r: Range<u64>| fetch_into(&spare, budget, store.as_ref(), &key, r, &url);
            let got = object_store::coalesce_ranges(&ranges, fetch, object_store::OBJECT_STORE_COALESCE_DEFAULT).await?;
            for (r, b) in ranges.iter().zip(&got) {
                if b.len() as u64 != r.end - r.start {
                    return Err(Error::Remote {
                        url: url.clone(),
                        message: format!(
                            "the store answered {} bytes for bytes {}..{}: the object changed or is truncated; run again",
                            b.len(),
                            r.start,
                            r.end
                        ),
                        transient: true,
                    });
                }
            }
            Ok(got)
        });
        Ok(Pending { storage: self.storage.clone(), handle })
    }

    /// Streams the whole object into `file`; the byte count must be the head's size.
    pub fn download(&self, file: &mut File) -> Result<()> {
        let (url, budget) = (self.url.clone(), self.budget);
        let written = self.storage.io().block_on(async {
            let mut stream = self.store.get(&self.key).await.map_err(|e| fault(budget, &url, e))?.into_stream();
            let mut n = 0u64;
            while let Some(b) = stream.next().await {
                let b = b.map_err(|e| fault(budget, &url, e))?;
                file.write_all(&b).map_err(|e| Error::io("temporary download", e))?;
                n += b.len() as u64;
            }
            Ok::<u64, Error>(n)
        })??;
        if written != self.size {
            return Err(Error::Remote {
                url,
                message: format!(
                    "read {written} bytes of an object of {}: it changed while read; run again",
                    self.size
                ),
                transient: true,
            });
        }
        Ok(())
    }
}

/// Fetched bytes that go back to the spare buffers when the last slice of them is
/// dropped. One is kept: the pass's reader takes it for the fetch it starts after
/// finishing a unit.
struct Pooled(Vec<u8>, Spare);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        if let Ok(mut spare) = self.1.lock() {
            match spare.first() {
                Some(kept) if kept.capacity() >= buf.capacity() => {}
                _ => *spare = vec![buf],
            }
        }
    }
}

/// The bytes of one range, streamed into a kept buffer when one is large enough.
async fn fetch_into(
    spare: &Spare,
    budget: Budget,
    store: &dyn ObjectStore,
    key: &Key,
    range: Range<u64>,
    url: &str,
) -> Result<Bytes> {
    let len = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
    let opts = GetOptions { range: Some(range.into()), ..GetOptions::default() };
    let mut stream = store.get_opts(key, opts).await.map_err(|e| fault(budget, url, e))?.into_stream();
    let kept = spare.lock().ok().and_then(|mut s| s.pop_if(|b| b.capacity() >= len));
    let mut buf = kept.unwrap_or_default();
    buf.clear();
    buf.try_reserve_exact(len).map_err(|_| Error::Remote {
        url: url.to_string(),
        message: format!("no memory for a fetch of {len} bytes"),
        transient: false,
    })?;
    while let Some(b) = stream.next().await {
        buf.extend_from_slice(&b.map_err(|e| fault(budget, url, e))?);
    }
    Ok(Bytes::from_owner(Pooled(buf, spare.clone())))
}

/// Bytes being fetched.
#[derive(Debug)]
pub struct Pending {
    storage: Storage,
    handle: tokio::task::JoinHandle<Result<Vec<Bytes>>>,
}

impl Pending {
    /// Waits for the bytes.
    pub fn wait(mut self) -> Result<Vec<Bytes>> {
        self.storage.io().block_on(&mut self.handle)?.map_err(|e| Error::bug_from("a fetch task ends", e))?
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A prefetch nobody waits for any more stops, so its bytes are not held.
        self.handle.abort();
    }
}

impl Storage {
    /// Deletes the object at `path` (a missing one is no fault).
    pub fn delete(&self, path: &Path) -> Result<()> {
        let budget = budget(self);
        let (store, key, url) = locate(self, path)?;
        match self.io().block_on(store.delete(&key))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(fault(budget, &url, e)),
        }
    }

    /// Whether an object exists at `path`.
    pub fn exists(&self, path: &Path) -> Result<bool> {
        let budget = budget(self);
        let (store, key, url) = locate(self, path)?;
        match self.io().block_on(store.head(&key))? {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(fault(budget, &url, e)),
        }
    }

    /// The objects a URL pattern matches (`*`, `?`, `[…]` within one path segment, as local
    /// globs), sorted: the prefix before the first wildcard's segment is listed, then each
    /// key matched. An empty match is an error, as for local globs.
    pub fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>> {
        let budget = budget(self);
        let (base, key_pattern) = split(pattern)?;
        let bad = |m: String| Error::Remote { url: pattern.to_string(), message: m, transient: false };
        let matcher = glob::Pattern::new(&key_pattern).map_err(|e| bad(format!("bad glob: {e}")))?;
        let first = key_pattern.find(['*', '?', '[']).unwrap_or(key_pattern.len());
        let prefix = key_pattern[..first].rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        let store = store_for(self, &base)?;
        let prefix = (!prefix.is_empty()).then(|| Key::from(prefix));
        let opts = glob::MatchOptions { require_literal_separator: true, ..Default::default() };
        let found = self.io().block_on(async {
            let mut listing = store.list(prefix.as_ref());
            let mut found = Vec::new();
            while let Some(meta) = listing.next().await {
                let meta = meta.map_err(|e| fault(budget, pattern, e))?;
                if matcher.matches_with(meta.location.as_ref(), opts) {
                    found.push((format!("{base}/{}", meta.location), meta.size, meta.e_tag));
                }
            }
            Ok::<_, Error>(found)
        })??;
        let mut urls: Vec<PathBuf> = found.iter().map(|(u, _, _)| PathBuf::from(u)).collect();
        if let Ok(mut listed) = self.io().listed.lock() {
            listed.retain(|(u, _, _)| !found.iter().any(|(f, _, _)| f == u));
            listed.extend(found);
        }
        urls.sort();
        if urls.is_empty() {
            return Err(bad("no object matches this pattern".into()));
        }
        Ok(urls)
    }

    /// Puts the local file `local` at `target`, never replacing an object unless `replace`
    /// (the run's own checkpoint): up to one part's size in one conditional put
    /// (`PutMode::Create`), larger after a check that no object is there by a multipart
    /// upload, aborted on any error. The object is then read back and compared with the
    /// file; one that differs is deleted and reported.
    pub fn upload(&self, local: &Path, target: &Path, replace: bool) -> Result<()> {
        let budget = budget(self);
        let (store, key, url) = locate(self, target)?;
        let size = std::fs::metadata(local).map_err(|e| Error::io(local, e))?.len();
        let io = |e: std::io::Error| Error::io(local, e);
        if size <= PART as u64 {
            let bytes = std::fs::read(local).map_err(io)?;
            let mode = if replace { PutMode::Overwrite } else { PutMode::Create };
            let opts = PutOptions { mode, ..Default::default() };
            self.io()
                .block_on(store.put_opts(&key, PutPayload::from(bytes), opts))?
                .map_err(|e| fault(budget, &url, e))?;
        } else {
            if !replace && self.exists(target)? {
                return Err(fault(
                    budget,
                    &url,
                    object_store::Error::AlreadyExists { path: url.clone(), source: "exists".into() },
                ));
            }
            let mut file = File::open(local).map_err(io)?;
            self.io().block_on(async {
                let mut upload = store.put_multipart(&key).await.map_err(|e| fault(budget, &url, e))?;
                let sent = async {
                    loop {
                        let mut part = Vec::with_capacity(PART);
                        (&mut file).take(PART as u64).read_to_end(&mut part).map_err(io)?;
                        if part.is_empty() {
                            break;
                        }
                        upload.put_part(PutPayload::from(part)).await.map_err(|e| fault(budget, &url, e))?;
                    }
                    upload.complete().await.map_err(|e| fault(budget, &url, e))?;
                    Ok::<(), Error>(())
                }
                .await;
                if sent.is_err() {
                    let _ = upload.abort().await;
                }
                sent
            })??;
        }
        let same = self.io().block_on(async {
            let mut stream = store.get(&key).await.map_err(|e| fault(budget, &url, e))?.into_stream();
            let mut file = File::open(local).map_err(io)?;
            let mut n = 0u64;
            let mut mine = Vec::new();
            while let Some(b) = stream.next().await {
                let b = b.map_err(|e| fault(budget, &url, e))?;
                mine.resize(b.len(), 0);
                if file.read_exact(&mut mine).is_err() || mine != b {
                    return Ok(false);
                }
                n += b.len() as u64;
            }
            Ok::<bool, Error>(n == size)
        })??;
        if !same {
            let _ = self.io().block_on(store.delete(&key));
            return Err(Error::Remote {
                url,
                message: "the object read back differs from what was written; it was deleted: run again".into(),
                transient: true,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_fetch_buffer_serves_the_next_fetch_of_its_size_or_less() {
        let buf = vec![7u8; 1 << 16];
        let at = buf.as_ptr();
        let pool = Spare::default();
        let bytes = Bytes::from_owner(Pooled(buf, pool.clone()));
        let slice = bytes.slice(10..20);
        drop(bytes);
        assert!(pool.lock().expect("spare").iter().all(|b| b.as_ptr() != at), "a slice still holds it");
        drop(slice);
        let mut spare = pool.lock().expect("spare");
        assert!(spare.pop_if(|b| b.capacity() >= 1 << 17).is_none(), "too small for a larger fetch");
        let kept = spare.pop_if(|b| b.capacity() >= 1 << 10).expect("kept for a smaller one");
        assert_eq!(kept.as_ptr(), at);
    }
}
