//! What a failed store request means to the user, in one place: a setting or a name to
//! change (exit 2, saying which) or a network or server fault (exit 1, after the retry
//! budget, resumable). [`TABLE`] is the fault table the documentation shows; a test holds
//! the two to each other and to this classification.

use std::time::Duration;

use crate::error::Error;

/// The kinds of a failed request, by what the user must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A plain-http endpoint without `allow_http`: nothing was sent.
    PlainHttp,
    /// No such bucket or container (a listing's 404).
    NoSuchBucket,
    /// No such object (or bucket, where the store cannot tell).
    NoSuchObject,
    /// The credentials may not read or write here.
    Denied,
    /// The store refused the credentials.
    Unauthenticated,
    /// The output exists.
    Exists,
    /// A request this store does not take, or a key it cannot hold.
    Unsupported,
    /// The network or the server failed, after the retries.
    Transient,
}

/// One row of the fault table: the fault, its exit code and how its message starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultRow {
    /// The fault, as the table names it.
    pub fault: &'static str,
    /// The exit code: 2 for the user's to fix, 1 for the network's.
    pub exit: u8,
    /// What the message says (its fixed part).
    pub message: &'static str,
}

/// Every fault a store can give, with its exit code: the table the documentation shows.
/// The rows a request's error gives are `Kind`'s; the others (a glob that matches
/// nothing, an unreadable object, an unknown option or scheme) are refused before or
/// after any request, with the same exit code.
pub const TABLE: &[FaultRow] = &[
    FaultRow { fault: "no such key", exit: 2, message: "no such object (or no such bucket)" },
    FaultRow { fault: "no such bucket (a glob's listing)", exit: 2, message: "no such bucket (or container)" },
    FaultRow { fault: "no glob match", exit: 2, message: "no object matches this pattern" },
    FaultRow {
        fault: "plain http without allow_http",
        exit: 2,
        message: "the endpoint is plain http and allow_http is not set",
    },
    FaultRow { fault: "access denied", exit: 2, message: "access denied" },
    FaultRow { fault: "bad credentials", exit: 2, message: "the store refused the credentials" },
    FaultRow { fault: "truncated or non-Parquet object", exit: 2, message: "not a readable Parquet file" },
    FaultRow { fault: "output exists", exit: 2, message: "sketchfit never replaces an object" },
    FaultRow { fault: "unknown option", exit: 2, message: "is not a key of any store" },
    FaultRow { fault: "unknown scheme", exit: 2, message: "is not a storage scheme sketchfit reads" },
    FaultRow { fault: "server down, silent or cut mid-pass", exit: 1, message: "the request failed" },
];

#[cfg(test)]
impl Kind {
    /// The row of [`TABLE`] whose message this kind's says.
    pub(crate) fn row(self) -> Option<&'static FaultRow> {
        let fault = match self {
            Kind::PlainHttp => "plain http without allow_http",
            Kind::NoSuchBucket => "no such bucket (a glob's listing)",
            Kind::NoSuchObject => "no such key",
            Kind::Denied => "access denied",
            Kind::Unauthenticated => "bad credentials",
            Kind::Exists => "output exists",
            Kind::Unsupported | Kind::Transient => "server down, silent or cut mid-pass",
        };
        TABLE.iter().find(|r| r.fault == fault).filter(|_| self != Kind::Unsupported)
    }
}

/// The error's message and its causes', joined: a listing's missing bucket and a refused
/// plain-http request come as generic errors, told apart only by what their causes say.
fn causes(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(" | ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The kind of a failed request to `url`.
pub(crate) fn classify(url: &str, e: &object_store::Error) -> Kind {
    use object_store::Error as E;
    let causes = causes(e);
    let http = url.starts_with("http://") || causes.contains("http://");
    if causes.contains("URL scheme is not allowed") || (causes.contains("builder error") && http) {
        return Kind::PlainHttp;
    }
    match e {
        E::Generic { .. } if causes.contains("NoSuchBucket") || causes.contains("status code: 404") => {
            Kind::NoSuchBucket
        }
        E::NotFound { .. } => Kind::NoSuchObject,
        E::PermissionDenied { .. } => Kind::Denied,
        E::Unauthenticated { .. } => Kind::Unauthenticated,
        E::AlreadyExists { .. } | E::Precondition { .. } => Kind::Exists,
        E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::UnknownConfigurationKey { .. }
        | E::InvalidPath { .. } => Kind::Unsupported,
        _ => Kind::Transient,
    }
}

/// The user's error for a failed request to `url`, with the retry budget in force
/// (`retries`, `within`) stated where the fault is the network's.
pub(crate) fn error(url: &str, e: &object_store::Error, (retries, within): (usize, Duration)) -> Error {
    let kind = classify(url, e);
    let message = match kind {
        Kind::PlainHttp => "the endpoint is plain http and allow_http is not set, so no request was sent: give \
                            --storage-option allow_http=true (or AWS_ALLOW_HTTP=true, or allow_http in the \
                            pipeline's [storage]) for a server you trust, or use an https endpoint"
            .to_string(),
        Kind::NoSuchBucket => {
            "no such bucket (or container): check the bucket's name and the endpoint; list the store to see what is \
             there"
                .to_string()
        }
        Kind::NoSuchObject => {
            "no such object (or no such bucket): check the bucket and key; list the prefix to see what is there".into()
        }
        Kind::Denied => format!("access denied ({e}); give credentials allowed to read or write this bucket"),
        Kind::Unauthenticated => format!(
            "the store refused the credentials ({e}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the \
             GOOGLE_/AZURE_ variables), or give --storage-option"
        ),
        Kind::Exists => {
            "an object of this name exists; sketchfit never replaces an object: choose another name or delete it first"
                .into()
        }
        Kind::Unsupported => e.to_string(),
        Kind::Transient => format!(
            "the request failed ({e}) after up to {retries} retries within {}s; check the network and the endpoint, \
             then run again (a pass resumes from its checkpoint)",
            within.as_secs_f64()
        ),
    };
    Error::Remote { url: url.to_string(), message: super::redact(&message), transient: kind == Kind::Transient }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic { store: "S3", source: text.to_string().into() }
    }

    #[test]
    fn each_kind_gives_the_exit_and_message_its_table_row_states() {
        let budget = (3, Duration::from_secs(60));
        let path = || "k".to_string();
        let cases: Vec<(&str, object_store::Error, Kind)> = vec![
            ("s3://b/*.parquet", generic("Error performing list request: Server returned non-2xx status code: 404 Not Found: <Code>NoSuchBucket</Code>"), Kind::NoSuchBucket),
            ("http://h/x.parquet", generic("HTTP error: builder error"), Kind::PlainHttp),
            ("s3://b/x", generic("HTTP error: builder error for url (http://127.0.0.1:9/b/x): URL scheme is not allowed"), Kind::PlainHttp),
            ("s3://b/x", object_store::Error::NotFound { path: path(), source: "404".into() }, Kind::NoSuchObject),
            ("s3://b/x", object_store::Error::PermissionDenied { path: path(), source: "403".into() }, Kind::Denied),
            ("s3://b/x", object_store::Error::Unauthenticated { path: path(), source: "401".into() }, Kind::Unauthenticated),
            ("s3://b/x", object_store::Error::AlreadyExists { path: path(), source: "412".into() }, Kind::Exists),
            ("s3://b/x", generic("error sending request: connection reset"), Kind::Transient),
        ];
        for (url, e, kind) in cases {
            assert_eq!(classify(url, &e), kind, "{url}: {e}");
            let err = error(url, &e, budget);
            let row = kind.row().expect("every kind but an unsupported request has a row");
            assert_eq!(if err.is_user_error() { 2 } else { 1 }, row.exit, "{url}: {err}");
            assert!(err.to_string().contains(row.message), "{err} lacks '{}'", row.message);
        }
    }

    #[test]
    fn the_documented_fault_table_is_this_table() {
        // The object-storage page's table rows: `| fault | exit | message |`.
        let doc = include_str!("../../docs/src/guide/object-storage.md");
        let rows: Vec<(String, u8)> = doc
            .lines()
            .skip_while(|l| !l.starts_with("| fault | exit |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                Some((cells.get(1)?.to_string(), cells.get(2)?.parse().ok()?))
            })
            .collect();
        let ours: Vec<(String, u8)> = TABLE.iter().map(|r| (r.fault.to_string(), r.exit)).collect();
        assert_eq!(rows, ours, "the documented fault table and remote::fault::TABLE differ");
        for r in TABLE {
            assert!(doc.contains(r.message), "the documentation does not quote '{}'", r.message);
        }
    }
}
