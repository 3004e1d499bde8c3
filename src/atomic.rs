//! Outputs that appear whole or not at all: written under a temporary name beside
//! the target and renamed when complete. Dropping an uncommitted output removes the
//! temporary file, so an error or an interrupted run leaves nothing behind.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A file being written to a temporary name.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: PathBuf,
    target: PathBuf,
    file: Option<File>,
}

impl AtomicFile {
    /// Starts writing `target` (its directory must exist).
    pub fn create(target: &Path) -> Result<AtomicFile> {
        let name = target.file_name().ok_or_else(|| {
            Error::config("command line", "output", format!("'{}' is not a file name", target.display()))
        })?;
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(Error::config(
                "command line",
                "output",
                format!("directory '{}' does not exist", dir.display()),
            ));
        }
        let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        Ok(AtomicFile { tmp, target: target.to_path_buf(), file: Some(file) })
    }

    /// The open temporary file.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file is open until commit")
    }

    /// Takes the file handle out (for writers that own it); `commit` still renames.
    pub fn take_file(&mut self) -> File {
        self.file.take().expect("file is open until commit")
    }

    /// Flushes, syncs and renames onto the target.
    pub fn commit(mut self) -> Result<()> {
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(|e| Error::io(&self.tmp, e))?;
        }
        std::fs::rename(&self.tmp, &self.target).map_err(|e| Error::io(&self.target, e))?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `target` atomically.
pub fn write_bytes(target: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = AtomicFile::create(target)?;
    let tmp = out.tmp.clone();
    out.file().write_all(bytes).map_err(|e| Error::io(tmp, e))?;
    out.commit()
}
