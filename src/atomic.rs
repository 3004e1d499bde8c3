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

use crate::error::{Error, Location, Result};

/// A file being written to a temporary name.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: PathBuf,
    target: PathBuf,
    file: Option<File>,
    /// The target is an object in a store: the commit is an upload.
    remote: bool,
}

/// A registered input: where it resolves to and, on Unix, which file it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Input {
    given: PathBuf,
    canonical: Option<PathBuf>,
    identity: Option<(u64, u64)>,
}

static INPUTS: Mutex<Vec<Input>> = Mutex::new(Vec::new());

/// Outputs this run writes more than once and may replace (its checkpoint): in an object
/// store these are put unconditionally, every other object never replaces one.
static OWN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Records that this run owns `path` (its checkpoint) and may replace it.
pub fn register_own(path: &Path) {
    if let Ok(mut own) = OWN.lock() {
        if !own.iter().any(|p| p == path) {
            own.push(path.to_path_buf());
        }
    }
}

fn is_own(path: &Path) -> bool {
    OWN.lock().map(|own| own.iter().any(|p| p == path)).unwrap_or(false)
}

/// Whether a file or object exists at `path`.
pub fn exists(path: &Path) -> Result<bool> {
    if crate::remote::is_remote(path) {
        return crate::remote::exists(path);
    }
    Ok(crate::remote::local(path).exists())
}

/// Removes this run's own output (a served checkpoint), locally or in a store; a missing
/// one is no fault.
pub fn remove_own(path: &Path) -> Result<()> {
    if crate::remote::is_remote(path) {
        return crate::remote::delete(path);
    }
    match std::fs::remove_file(crate::remote::local(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

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
    if crate::remote::is_remote(path) {
        return Some(path.to_path_buf());
    }
    let path = &crate::remote::local(path);
    if let Ok(c) = std::fs::canonicalize(path) {
        return Some(c);
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some(std::fs::canonicalize(dir).ok()?.join(path.file_name()?))
}

/// Opens a file this run reads, after registering it as an input. Everything that is not a
/// regular file is refused up front with a user error (exit 2) naming the path: a FIFO or
/// device would block or stream forever, a directory or symlink loop cannot be read. One
/// check for every input: Parquet files, models, statistics parts and pipeline files.
pub fn open_input(path: &Path) -> Result<File> {
    let file = open_regular(path)?;
    register_input(path);
    Ok(file)
}

/// Opens a regular file this run reads and will itself replace (its own checkpoint):
/// the same refusals as [`open_input`], without registering it as an input.
pub fn open_own(path: &Path) -> Result<File> {
    open_regular(path)
}

fn open_regular(path: &Path) -> Result<File> {
    if crate::remote::is_remote(path) {
        return download(path);
    }
    let path = &crate::remote::local(path);
    let refuse = |message: String| Error::Data { location: Location::file(path), message };
    let meta = std::fs::metadata(path).map_err(|e| refuse(open_failure(&e)))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device)" };
        return Err(refuse(format!("{kind}; give the path of a regular file")));
    }
    File::open(path).map_err(|e| refuse(open_failure(&e)))
}

/// An object downloaded whole into a temporary file that is unlinked at once, so it is
/// gone with the handle whatever ends the run.
fn download(path: &Path) -> Result<File> {
    use std::io::{Seek, SeekFrom};
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    crate::remote::check_scheme(path)?;
    let object = crate::remote::Object::open(path)?;
    let tmp = std::env::temp_dir().join(format!(
        ".sketchfit-download-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| Error::io(&tmp, e))?;
    let _ = std::fs::remove_file(&tmp);
    object.download(&mut file)?;
    file.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&tmp, e))?;
    Ok(file)
}

/// Reads a whole input file through [`open_input`].
pub fn read_input(path: &Path) -> Result<Vec<u8>> {
    read_all(open_input(path)?, path)
}

fn read_all(mut file: File, path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

fn open_failure(e: &std::io::Error) -> String {
    // ELOOP has no stable `ErrorKind` yet; Linux and the BSDs/macOS number it 40 and 62.
    let is_loop = matches!(e.raw_os_error(), Some(40) if cfg!(target_os = "linux"))
        || matches!(e.raw_os_error(), Some(62) if cfg!(target_vendor = "apple"));
    match e.kind() {
        std::io::ErrorKind::NotFound => "file not found".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied; make the file readable".into(),
        _ if is_loop => "a symlink loop; point the link at a real file".into(),
        _ => format!("cannot open ({e})"),
    }
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
    let bad = |message: String| Error::usage("output", message);
    if crate::remote::is_remote(target) {
        crate::remote::check_scheme(target)?;
        if let Some(input) = clashing_input(target) {
            return Err(bad(format!(
                "'{}' is also an input of this run ({}); sketchfit never replaces an input: choose another output",
                target.display(),
                input.display()
            )));
        }
        if !is_own(target) && crate::remote::exists(target)? {
            return Err(bad(format!(
                "'{}' exists; sketchfit never replaces an object: choose another name or delete it first",
                target.display()
            )));
        }
        return Ok(());
    }
    let target = &crate::remote::local(target);
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
        if crate::remote::is_remote(target) {
            // Written and verified locally first; the commit puts it whole.
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = std::env::temp_dir().join(format!(".sketchfit-upload-{}-{n}", std::process::id()));
            let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
            return Ok(AtomicFile { tmp, target: target.to_path_buf(), file: Some(file), remote: true });
        }
        let target = &crate::remote::local(target);
        let name = target
            .file_name()
            .ok_or_else(|| Error::usage("output", format!("'{}' is not a file name", target.display())))?;
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        Ok(AtomicFile { tmp, target: target.to_path_buf(), file: Some(file), remote: false })
    }

    /// The temporary file's path (to read what was written back before `commit`).
    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// The open temporary file.
    #[allow(clippy::expect_used)] // Invariant: the handle is only taken by `take_file`/`commit`, which callers use last.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file is open until commit")
    }

    /// Takes the file handle out (for writers that own it); `commit` still renames.
    #[allow(clippy::expect_used)] // Invariant: the handle is only taken once, by the writer that owns it.
    pub fn take_file(&mut self) -> File {
        self.file.take().expect("file is open until commit")
    }

    /// Flushes, syncs and renames onto the target (checked once more against the
    /// inputs: one may have been opened since the output was created).
    pub fn commit(mut self) -> Result<()> {
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(|e| Error::io(&self.tmp, e))?;
        }
        if self.remote {
            // The object must still be absent and no input: the put itself refuses an
            // object that appeared since, so no check-then-write race replaces one.
            if let Some(input) = clashing_input(&self.target) {
                return Err(Error::usage(
                    "output",
                    format!("'{}' is also an input of this run ({})", self.target.display(), input.display()),
                ));
            }
            crate::remote::upload(&self.tmp, &self.target, is_own(&self.target))?;
            return Ok(()); // Drop removes the local copy.
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

/// Writes `bytes` to `target` atomically, reading them back before the rename.
pub fn write_bytes(target: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = AtomicFile::create(target)?;
    let tmp = out.tmp.clone();
    out.file().write_all(bytes).and_then(|()| out.file().sync_all()).map_err(|e| Error::io(&tmp, e))?;
    let back = std::fs::read(&tmp).map_err(|e| Error::io(&tmp, e))?;
    if back != bytes {
        return Err(Error::io(&tmp, std::io::Error::other("the file read back differs from what was written")));
    }
    out.commit()
}
