//! What a path or URL names, so that two spellings of one file or object compare equal:
//! the identity every check of "no output replaces an input, no output replaces another"
//! compares, and the redaction that keeps a URL's credentials out of every output.
//!
//! A local path is the file it resolves to (through symlinks and `..`, its directory's
//! resolution joined with its name when it does not exist yet) and, when it exists, its
//! device and inode (a hard link is the same file). An object is its store, bucket and key:
//! the scheme aliases of one store (`s3`/`s3a`, `az`/`azure`/`abfs`/`abfss`/`adl`) name
//! one store, an S3 endpoint given by option or environment is the same server as an
//! `http(s)://` URL at that endpoint (path-style), and a key is compared percent-decoded
//! with empty and `.` segments dropped. Credentials (userinfo) and query strings never
//! take part: they say how to reach an object, not which object it is.

use std::path::{Path, PathBuf};

/// What one path or URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// A local file: where it resolves to, and which file it is when it exists.
    Local { resolved: Option<PathBuf>, inode: Option<(u64, u64)> },
    /// An object: the store (scheme family and server), the bucket or container, the key.
    Object { store: String, bucket: String, key: String },
}

impl Identity {
    /// Whether both name the same file or object.
    pub(crate) fn same(&self, other: &Identity) -> bool {
        match (self, other) {
            (Identity::Local { resolved: a, inode: i }, Identity::Local { resolved: b, inode: j }) => {
                (a.is_some() && a == b) || (i.is_some() && i == j)
            }
            (a @ Identity::Object { .. }, b @ Identity::Object { .. }) => a == b,
            _ => false,
        }
    }
}

/// The identity of `path` (a local path, a `file://` URL or an object URL), under the
/// storage options in force (`options`, lower layers first).
pub(crate) fn of(path: &Path, options: &[(String, String)]) -> Identity {
    match path.to_str().filter(|_| crate::remote::is_remote(path)) {
        Some(url) => object(url, options),
        None => {
            let local = crate::remote::local(path);
            Identity::Local { resolved: resolve(&local), inode: inode(&local) }
        }
    }
}

/// Where a local path resolves to: itself when it exists, else its directory's
/// resolution joined with its name (a name of `..` or none resolves as a directory).
fn resolve(path: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(path) {
        return Some(c);
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some(std::fs::canonicalize(dir).ok()?.join(path.file_name()?))
}

#[cfg(unix)]
fn inode(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn inode(_: &Path) -> Option<(u64, u64)> {
    None
}

/// The first value of the first key present, options over the environment.
fn setting(options: &[(String, String)], keys: &[&str], env: &[&str]) -> Option<String> {
    let given = options.iter().rev().find(|(k, _)| keys.contains(&k.as_str())).map(|(_, v)| v.clone());
    given.or_else(|| env.iter().find_map(|v| std::env::var(v).ok())).filter(|v| !v.trim().is_empty())
}

/// An origin (`scheme://host[:port]`) lower-cased, with its default port and any
/// trailing slash dropped, and the loopback host spelt one way.
fn origin(text: &str) -> String {
    let text = text.trim().trim_end_matches('/').to_ascii_lowercase();
    let (scheme, rest) = text.split_once("://").unwrap_or(("https", text.as_str()));
    let host = rest.split('/').next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = match (scheme, host.rsplit_once(':')) {
        ("http", Some((h, "80"))) | ("https", Some((h, "443"))) => h,
        _ => host,
    };
    let host = host.replacen("localhost", "127.0.0.1", 1);
    format!("{scheme}://{host}")
}

/// A key percent-decoded, with empty and `.` segments dropped.
fn key(segments: &str) -> String {
    let decoded = percent_decode(segments);
    decoded.split('/').filter(|s| !s.is_empty() && *s != ".").collect::<Vec<_>>().join("/")
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn object(url: &str, options: &[(String, String)]) -> Identity {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let scheme = scheme.to_ascii_lowercase();
    // Query and fragment say how to reach the object, not which it is.
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_ascii_lowercase();
    let s3_endpoint = || {
        setting(
            options,
            &["aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url"],
            &["AWS_ENDPOINT_URL", "AWS_ENDPOINT"],
        )
        .map(|e| origin(&e))
        .unwrap_or_else(|| "aws".into())
    };
    let azure_account = || {
        setting(options, &["azure_storage_account_name", "account_name"], &["AZURE_STORAGE_ACCOUNT_NAME"])
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    let at = |store: String, bucket: &str, key_path: &str| Identity::Object {
        store,
        bucket: bucket.to_ascii_lowercase(),
        key: key(key_path),
    };
    match scheme.as_str() {
        "s3" | "s3a" => at(format!("s3 {}", s3_endpoint()), &authority, path),
        "gs" => at("gs".into(), &authority, path),
        "az" | "azure" | "adl" => at(format!("az {}", azure_account()), &authority, path),
        "abfs" | "abfss" => {
            // container@account.dfs.core.windows.net/key, or az-style container/key.
            let whole = rest.split_once('/').map_or(rest, |(a, _)| a);
            match whole.split_once('@') {
                Some((container, host)) => {
                    let account = host.split('.').next().unwrap_or("").to_ascii_lowercase();
                    at(format!("az {account}"), container, path)
                }
                None => at(format!("az {}", azure_account()), &authority, path),
            }
        }
        _ => {
            let here = origin(&format!("{scheme}://{authority}"));
            let (first, tail) = path.split_once('/').unwrap_or((path, ""));
            if here == s3_endpoint() {
                return at(format!("s3 {here}"), first, tail);
            }
            if let Some(account) =
                authority.strip_suffix(".blob.core.windows.net").or(authority.strip_suffix(".dfs.core.windows.net"))
            {
                return at(format!("az {account}"), first, tail);
            }
            if authority == "storage.googleapis.com" {
                return at("gs".into(), first, tail);
            }
            if let Some(bucket) = authority.split_once(".s3.").filter(|(_, h)| h.ends_with("amazonaws.com")) {
                return at("s3 aws".into(), bucket.0, path);
            }
            if authority.starts_with("s3.") && authority.ends_with("amazonaws.com") {
                return at("s3 aws".into(), first, tail);
            }
            at(format!("http {here}"), "", path)
        }
    }
}

/// Query parameters whose value is always hidden: every one, since a signed URL's
/// signature, credential, token or SAS fields (`X-Amz-Signature`, `sig`, `sv`, …) are
/// spelt differently by every store and a query never names an object.
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !v.is_empty() => format!("{k}=***"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Where a URL written inside text ends.
fn url_end(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\'' | '"' | '`' | ')' | ']' | '>' | '<' | ',' | '}' | '\\')
}

/// `text` with every URL in it redacted: the userinfo (`user:password@`) becomes `***@`
/// and every query value `***`. What remains names the object and nothing more.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after.find(url_end).unwrap_or(after.len());
        let (url, tail) = after.split_at(end);
        let (main, query) = url.split_once('?').map_or((url, None), |(m, q)| (m, Some(q)));
        let authority_end = main.find('/').unwrap_or(main.len());
        let (authority, path) = main.split_at(authority_end);
        match authority.rsplit_once('@') {
            Some((_, host)) => {
                out.push_str("***@");
                out.push_str(host);
            }
            None => out.push_str(authority),
        }
        out.push_str(path);
        if let Some(q) = query {
            out.push('?');
            out.push_str(&redact_query(q));
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// A JSON value with every string in it passed through [`redact_urls`].
pub fn redact_json(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(redact_urls(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(redact_json).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, redact_json(v))).collect()),
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(url: &str, options: &[(&str, &str)]) -> Identity {
        let o: Vec<(String, String)> = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        of(Path::new(url), &o)
    }

    #[test]
    fn aliases_of_one_store_name_one_object() {
        let ep = [("aws_endpoint", "http://LOCALHOST:9000/")];
        assert!(id("s3://b/k/x.parquet", &ep).same(&id("s3a://b/k/x.parquet", &ep)));
        assert!(id("s3://b/k/x.parquet", &ep).same(&id("s3a://b//k/./x%2Eparquet", &ep)));
        assert!(id("s3://b/k/x.parquet", &ep).same(&id("http://127.0.0.1:9000/b/k/x.parquet", &ep)));
        assert!(id("s3://b/k/x.parquet", &ep).same(&id("http://user:pw@127.0.0.1:9000/b/k/x.parquet?sig=1", &ep)));
        assert!(!id("s3://b/k/x.parquet", &ep).same(&id("s3://b/k/y.parquet", &ep)));
        assert!(!id("s3://b/k/x.parquet", &ep).same(&id("gs://b/k/x.parquet", &ep)));
        assert!(id("az://c/k", &[("azure_storage_account_name", "acct")])
            .same(&id("abfss://c@acct.dfs.core.windows.net/k", &[])));
        assert!(id("az://c/k", &[("azure_storage_account_name", "acct")])
            .same(&id("https://acct.blob.core.windows.net/c/k", &[])));
        assert!(id("gs://b/k", &[]).same(&id("https://storage.googleapis.com/b/k", &[])));
    }

    #[test]
    fn local_spellings_of_one_file_are_one_file() {
        let dir = std::env::temp_dir().join(format!("sketchfit-identity-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let file = dir.join("a.bin");
        std::fs::write(&file, b"x").unwrap();
        std::fs::hard_link(&file, dir.join("hard.bin")).unwrap();
        let a = id(file.to_str().unwrap(), &[]);
        assert!(a.same(&id(dir.join("sub/../a.bin").to_str().unwrap(), &[])));
        assert!(a.same(&id(&format!("file://{}", file.display()), &[])));
        assert!(a.same(&id(dir.join("hard.bin").to_str().unwrap(), &[])));
        assert!(!a.same(&id(dir.join("b.bin").to_str().unwrap(), &[])));
        // A file that does not exist yet is still named by where it would be.
        assert!(id(dir.join("new").to_str().unwrap(), &[]).same(&id(dir.join("sub/../new").to_str().unwrap(), &[])));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn credentials_and_signatures_are_redacted_wherever_a_url_is_written() {
        assert_eq!(
            redact_urls("read 'http://user:PASSWORD@host:9/b/k.parquet' failed"),
            "read 'http://***@host:9/b/k.parquet' failed"
        );
        assert_eq!(
            redact_urls("https://h/k?X-Amz-Signature=abc&X-Amz-Credential=AK%2F1&plain"),
            "https://h/k?X-Amz-Signature=***&X-Amz-Credential=***&plain"
        );
        assert_eq!(redact_urls("az://c/k?sv=2020&sig=SECRET, then"), "az://c/k?sv=***&sig=***, then");
        assert_eq!(redact_urls("no url here: a/b@c"), "no url here: a/b@c");
        let v = redact_json(serde_json::json!({"data": {"train": ["s3://k:s@b/x"]}, "n": 1}));
        assert_eq!(v, serde_json::json!({"data": {"train": ["s3://***@b/x"]}, "n": 1}));
    }
}
