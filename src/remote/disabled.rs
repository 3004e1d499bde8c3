//! A binary built without the `remote` feature: every URL is refused with what to do.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::Storage;
use crate::error::{Error, Result};

fn refuse<T>(path: &Path) -> Result<T> {
    Err(Error::Remote {
        url: path.display().to_string(),
        message: "this sketchfit was built without remote storage (cargo feature `remote`); build it with the \
                  default features, or copy the object to a local file"
            .into(),
        transient: false,
    })
}

/// No object can be opened in this build.
#[derive(Debug, Clone)]
pub enum Object {}

impl Object {
    /// Never called: no object exists.
    pub fn url(&self) -> &str {
        match *self {}
    }
    /// Never called: no object exists.
    pub fn size(&self) -> u64 {
        match *self {}
    }
    /// Never called: no object exists.
    pub fn etag(&self) -> Option<&str> {
        match *self {}
    }
    /// Never called: no object exists.
    pub fn get_ranges(&self, _: &[Range<u64>]) -> Result<Vec<Bytes>> {
        match *self {}
    }
    /// Never called: no object exists.
    pub fn spawn_ranges(&self, _: Vec<Range<u64>>) -> Result<Pending> {
        match *self {}
    }
    /// Never called: no object exists.
    pub fn download(&self, _: &mut File) -> Result<()> {
        match *self {}
    }
}

/// No fetch can be pending in this build.
#[derive(Debug)]
pub enum Pending {}

impl Pending {
    /// Never called: no fetch exists.
    pub fn wait(self) -> Result<Vec<Bytes>> {
        match self {}
    }
}

/// Refuses any option: no store in this build takes one.
pub fn check_keys(pairs: &[(String, String)]) -> Result<()> {
    match pairs.first() {
        Some((k, _)) => refuse(Path::new(&format!("storage option {k}"))),
        None => Ok(()),
    }
}

impl Storage {
    /// Refuses: no store in this build.
    pub fn open(&self, path: &Path) -> Result<Object> {
        refuse(path)
    }

    /// Refuses: no store in this build.
    pub fn exists(&self, path: &Path) -> Result<bool> {
        refuse(path)
    }

    /// Refuses: no store in this build.
    pub fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>> {
        refuse(Path::new(pattern))
    }

    /// Refuses: no store in this build.
    pub fn delete(&self, path: &Path) -> Result<()> {
        refuse(path)
    }

    /// Refuses: no store in this build.
    pub fn upload(&self, _: &Path, target: &Path, _: bool) -> Result<()> {
        refuse(target)
    }
}
