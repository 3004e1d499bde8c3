//! Outputs that appear whole or not at all, and never in place of an input: written
//! under a temporary name beside the target and renamed when complete. Dropping an
//! uncommitted output removes the temporary file, so an error or an interrupted run
//! leaves nothing behind.
//!
//! Every file a run reads (Parquet inputs, models, statistics parts) is registered here
//! when it is opened; every output is checked against that registry — by canonical path
//! (through symlinks and globs) and by file identity (hard links) — when it is created
//! and again just before the rename. That one check covers every command.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// A file being written to a temporary name.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: PathBuf,
    target: PathBuf,
    file: Option<File>,
}

/// A registered input: where it resolves to and, on Unix, which file it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Input {
    given: PathBuf,
    canonical: Option<PathBuf>,
    identity: Option<(u64, u64)>,
}

static INPUTS: Mutex<Vec<Input>> = Mutex::new(Vec::new());

#[cfg(unix)]
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(_: &Path) -> Option<(u64, u64)> {
    None
}

/// Where `path` resolves to: itself when it exists, else its directory's resolution
/// joined with its name.
fn resolve(path: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(path) {
        return Some(c);
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some(std::fs::canonicalize(dir).ok()?.join(path.file_name()?))
}

/// Records that this process reads `path`, so no output may replace it.
pub fn register_input(path: &Path) {
    let input = Input { given: path.to_path_buf(), canonical: resolve(path), identity: identity(path) };
    if let Ok(mut inputs) = INPUTS.lock() {
        if !inputs.contains(&input) {
            inputs.push(input);
        }
    }
}

/// The registered input that `target` would replace, if any.
fn clashing_input(target: &Path) -> Option<PathBuf> {
    let canonical = resolve(target);
    let id = identity(target);
    let inputs = INPUTS.lock().ok()?;
    inputs
        .iter()
        .find(|i| (canonical.is_some() && i.canonical == canonical) || (id.is_some() && i.identity == id))
        .map(|i| i.given.clone())
}

/// Checks that `target` can be written: its directory exists, it is not a directory,
/// and it is none of this run's inputs. Commands call it before any long work, so a bad
/// output path costs nothing.
pub fn check_output(target: &Path) -> Result<()> {
    let bad = |message: String| Error::config("command line", "output", message);
    if target.file_name().is_none() {
        return Err(bad(format!("'{}' is not a file name", target.display())));
    }
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(bad(format!("directory '{}' does not exist", dir.display())));
    }
    if target.is_dir() {
        return Err(bad(format!("'{}' is a directory; give a file name", target.display())));
    }
    if let Some(input) = clashing_input(target) {
        return Err(bad(format!(
            "'{}' is also an input of this run ({}); sketchfit never replaces an input: choose another output path",
            target.display(),
            input.display()
        )));
    }
    Ok(())
}

impl AtomicFile {
    /// Starts writing `target` (its directory must exist; it must not be an input).
    pub fn create(target: &Path) -> Result<AtomicFile> {
        check_output(target)?;
        let name = target.file_name().ok_or_else(|| {
            Error::config("command line", "output", format!("'{}' is not a file name", target.display()))
        })?;
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
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

    /// Flushes, syncs and renames onto the target (checked once more against the
    /// inputs: one may have been opened since the output was created).
    pub fn commit(mut self) -> Result<()> {
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(|e| Error::io(&self.tmp, e))?;
        }
        check_output(&self.target)?;
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
