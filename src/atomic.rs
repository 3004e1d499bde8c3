//! Outputs that appear whole or not at all, and never in place of an input: written
//! under a temporary name beside the target and renamed when complete. Dropping an
//! uncommitted output removes the temporary file, so an error or an interrupted run
//! leaves nothing behind.
//!
//! Every file a run reads (Parquet inputs, models, statistics parts) is registered in its
//! [`Session`] when it is opened; every output is checked against that registry — by
//! canonical path (through symlinks and globs) and by file identity (hard links) — when it
//! is created and again just before the rename. That one check covers every command, and
//! each session sees only its own files: two runs in one process never refuse, or miss,
//! each other's.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Result};
use crate::identity::Identity;
use crate::session::Session;

/// A file being written to a temporary name.
#[derive(Debug)]
pub struct AtomicFile {
    session: Session,
    tmp: PathBuf,
    target: PathBuf,
    file: Option<File>,
    /// The target is an object in a store: the commit is an upload.
    remote: bool,
}

/// Records that the session's run owns `path` (its checkpoint) and may replace it.
pub fn register_own(session: &Session, path: &Path) {
    if let Ok(mut own) = session.files().own.lock() {
        if !own.iter().any(|p| p == path) {
            own.push(path.to_path_buf());
        }
    }
}

fn is_own(session: &Session, path: &Path) -> bool {
    session.files().own.lock().map(|own| own.iter().any(|p| p == path)).unwrap_or(false)
}

/// Whether a file or object exists at `path`.
pub fn exists(session: &Session, path: &Path) -> Result<bool> {
    if crate::remote::is_remote(path) {
        return session.storage().exists(path);
    }
    Ok(crate::remote::local(path).exists())
}

/// Removes this run's own output (a served checkpoint), locally or in a store; a missing
/// one is no fault. Only for a path [`check_outputs`] accepted as the run's checkpoint:
/// that check refused it if it held anything this run did not write.
pub fn remove_own(session: &Session, path: &Path) -> Result<()> {
    if crate::remote::is_remote(path) {
        return session.storage().delete(path);
    }
    match std::fs::remove_file(crate::remote::local(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

/// What `path` names under the session's storage options.
fn identity(session: &Session, path: &Path) -> Identity {
    crate::identity::of(path, &session.storage().options())
}

/// Opens a file this run reads, after registering it as an input. Everything that is not a
/// regular file is refused up front with a user error (exit 2) naming the path: a FIFO or
/// device would block or stream forever, a directory or symlink loop cannot be read. One
/// check for every input: Parquet files, models, statistics parts and pipeline files.
pub fn open_input(session: &Session, path: &Path) -> Result<File> {
    let file = open_regular(session, path)?;
    register_input(session, path);
    Ok(file)
}

/// Opens a regular file this run reads and will itself replace (its own checkpoint):
/// the same refusals as [`open_input`], without registering it as an input.
pub fn open_own(session: &Session, path: &Path) -> Result<File> {
    open_regular(session, path)
}

fn open_regular(session: &Session, path: &Path) -> Result<File> {
    if crate::remote::is_remote(path) {
        return download(session, path);
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
fn download(session: &Session, path: &Path) -> Result<File> {
    use std::io::{Seek, SeekFrom};
    crate::remote::check_scheme(path)?;
    let object = session.storage().open(path)?;
    let (tmp, mut file) = create_fresh(&std::env::temp_dir(), ".sketchfit-download-")?;
    let _ = std::fs::remove_file(&tmp);
    object.download(&mut file)?;
    file.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&tmp, e))?;
    Ok(file)
}

/// Reads a whole input file through [`open_input`].
pub fn read_input(session: &Session, path: &Path) -> Result<Vec<u8>> {
    read_all(open_input(session, path)?, path)
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

/// Records that the session's run reads `path`, so no output of it may replace it.
pub fn register_input(session: &Session, path: &Path) {
    let input = crate::session::Input { given: path.to_path_buf(), identity: identity(session, path) };
    if let Ok(mut inputs) = session.files().inputs.lock() {
        if !inputs.iter().any(|i| i.given == input.given && i.identity == input.identity) {
            inputs.push(input);
        }
    }
}

/// The registered input that `target` would replace, if any.
fn clashing_input(session: &Session, target: &Path) -> Option<PathBuf> {
    let id = identity(session, target);
    let inputs = session.files().inputs.lock().ok()?;
    inputs.iter().find(|i| i.identity.same(&id)).map(|i| i.given.clone())
}

/// Checks that `target` can be written: its directory exists, it is not a directory,
/// and it is none of this run's inputs. Commands call it before any long work, so a bad
/// output path costs nothing.
pub fn check_output(session: &Session, target: &Path) -> Result<()> {
    let bad = |message: String| Error::usage("output", message);
    if crate::remote::is_remote(target) {
        crate::remote::check_scheme(target)?;
        if let Some(input) = clashing_input(session, target) {
            return Err(bad(format!(
                "'{}' is also an input of this run ({}); sketchfit never replaces an input: choose another output",
                target.display(),
                input.display()
            )));
        }
        if !is_own(session, target) && session.storage().exists(target)? {
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
    if let Some(input) = clashing_input(session, target) {
        return Err(bad(format!(
            "'{}' is also an input of this run ({}); sketchfit never replaces an input: choose another output path",
            target.display(),
            input.display()
        )));
    }
    if target.exists() && !sketchfit_wrote(target) {
        return Err(bad(format!(
            "'{}' exists and is not a file sketchfit wrote; sketchfit replaces only its own outputs (a model, \
             statistics, a report or Parquet output it wrote): choose another path or remove it first",
            target.display()
        )));
    }
    Ok(())
}

/// A run's checkpoint, as [`check_outputs`] checks it.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointCheck<'a> {
    /// Where the checkpoint is written.
    pub path: &'a Path,
    /// Files beside it that the run writes and removes (the spilled Gram).
    pub companions: &'a [PathBuf],
    /// The run resumes from it (`--resume`): an existing one is this run's to continue.
    pub resume: bool,
}

/// The one check of everything a run writes, before its first row: every output (each
/// named by the flag or key that set it) can be written and is none of the run's inputs;
/// the checkpoint and the files beside it are no input either and, unless the run resumes,
/// hold nothing yet (a checkpoint is rewritten and removed at the end: whatever it held
/// would be lost); and no two of these name one file or object, however spelt. Every
/// command that writes goes through it, so a run deletes and replaces only what it made.
pub fn check_outputs(
    session: &Session,
    outputs: &[(&str, &Path)],
    checkpoint: Option<CheckpointCheck<'_>>,
) -> Result<()> {
    for (key, path) in outputs {
        check_output(session, path).map_err(|e| match e {
            Error::Usage { message, .. } => Error::usage(*key, message),
            e => e,
        })?;
    }
    let mut all: Vec<(String, PathBuf)> = outputs.iter().map(|(k, p)| (k.to_string(), p.to_path_buf())).collect();
    if let Some(c) = checkpoint {
        let key = "run.checkpoint";
        let beside = c.companions.iter().map(|p| (format!("{key} (the file beside it, {})", p.display()), p.clone()));
        for (name, path) in std::iter::once((key.to_string(), c.path.to_path_buf())).chain(beside) {
            if crate::remote::is_remote(&path) {
                crate::remote::check_scheme(&path)?;
            }
            if let Some(input) = clashing_input(session, &path) {
                return Err(Error::usage(
                    name,
                    format!(
                        "'{}' is also an input of this run ({}); a checkpoint is rewritten and removed: choose \
                         another path",
                        path.display(),
                        input.display()
                    ),
                ));
            }
            if !c.resume && exists(session, &path)? {
                return Err(Error::usage(
                    name,
                    format!(
                        "'{}' exists and this run did not write it; a checkpoint is rewritten and removed at the end, \
                         so sketchfit never starts one over something else: pass --resume to continue from it, or \
                         remove it or choose another run.checkpoint",
                        path.display()
                    ),
                ));
            }
            all.push((name, path));
        }
    }
    let ids: Vec<Identity> = all.iter().map(|(_, p)| identity(session, p)).collect();
    for (i, a) in ids.iter().enumerate() {
        if let Some(j) = ids.iter().skip(i + 1).position(|b| a.same(b)) {
            let (first, second) = (&all[i], &all[i + 1 + j]);
            return Err(Error::usage(
                second.0.clone(),
                format!(
                    "'{}' is the same file or object as {} ('{}'); every output of a run needs its own path",
                    second.1.display(),
                    first.0,
                    first.1.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The key of the mark sketchfit puts in the Parquet files it writes (key-value metadata)
/// and in its JSON reports.
pub const REPORT_MARK: &str = "written_by";

/// What the mark says: the program and its version.
pub fn written_by() -> String {
    format!("sketchfit {}", env!("CARGO_PKG_VERSION"))
}

/// The key-value entry that marks a Parquet file as sketchfit's output.
pub fn parquet_mark() -> parquet::file::metadata::KeyValue {
    parquet::file::metadata::KeyValue::new("sketchfit".into(), written_by())
}

/// Whether the local file at `path` is one sketchfit wrote, so that an output may replace
/// it: a sealed container (model, statistics, checkpoint) by its header, a Parquet output
/// by its mark, a report by its mark. Anything else — a file of the user's that happens to
/// carry the name — is never replaced.
fn sketchfit_wrote(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = File::open(path) else { return false };
    let size = f.metadata().map_or(0, |m| m.len());
    let mut head = [0u8; 8];
    if f.read_exact(&mut head).is_err() {
        return false;
    }
    // A container: an 8-byte header length, then JSON with `__metadata__.sketchfit`.
    let n = u64::from_le_bytes(head);
    if n > 1 && n <= 100 << 20 && 8 + n <= size {
        let mut json = vec![0u8; n as usize];
        if f.read_exact(&mut json).is_ok() {
            let meta: Option<serde_json::Value> = serde_json::from_slice(&json).ok();
            if meta.is_some_and(|m| m.get("__metadata__").and_then(|m| m.get("sketchfit")).is_some()) {
                return true;
            }
        }
    }
    // A Parquet file with the mark in its footer.
    if head.starts_with(b"PAR1") {
        let _ = f.seek(SeekFrom::Start(0));
        let meta = parquet::file::metadata::ParquetMetaDataReader::new().parse_and_finish(&f);
        return meta.is_ok_and(|m| {
            m.file_metadata().key_value_metadata().is_some_and(|kv| kv.iter().any(|e| e.key == "sketchfit"))
        });
    }
    // A report: a JSON object with the mark.
    if size <= 256 << 20 && head.first() == Some(&b'{') {
        let _ = f.seek(SeekFrom::Start(0));
        let mut text = Vec::new();
        if f.read_to_end(&mut text).is_ok() {
            let v: Option<serde_json::Value> = serde_json::from_slice(&text).ok();
            return v.and_then(|v| v.get(REPORT_MARK)?.as_str().map(|s| s.starts_with("sketchfit"))).unwrap_or(false);
        }
    }
    false
}

/// A new file `{prefix}{pid}-{k}` in `dir`, opened for reading and writing, never an
/// existing one: `create_new` refuses a name that is taken (a file of the user's, another
/// writer's in this process) and the next `k` is tried. `k` starts from the clock's
/// nanoseconds, so no process-wide counter is kept.
fn create_fresh(dir: &Path, prefix: &str) -> Result<(PathBuf, File)> {
    let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for k in 0..1000u32 {
        let tmp = dir.join(format!("{prefix}{}-{}", std::process::id(), start.wrapping_add(k)));
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(&tmp, e)),
        }
    }
    Err(Error::io(dir, std::io::Error::other("no free temporary name after 1,000 tries")))
}

impl AtomicFile {
    /// Starts writing `target` (its directory must exist; it must not be one of the
    /// session's inputs).
    pub fn create(session: &Session, target: &Path) -> Result<AtomicFile> {
        check_output(session, target)?;
        let session = session.clone();
        if crate::remote::is_remote(target) {
            // Written and verified locally first; the commit puts it whole.
            let (tmp, file) = create_fresh(&std::env::temp_dir(), ".sketchfit-upload-")?;
            return Ok(AtomicFile { session, tmp, target: target.to_path_buf(), file: Some(file), remote: true });
        }
        let target = &crate::remote::local(target);
        let name = target
            .file_name()
            .ok_or_else(|| Error::usage("output", format!("'{}' is not a file name", target.display())))?;
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let (tmp, file) = create_fresh(dir, &format!(".{}.tmp-", name.to_string_lossy()))?;
        Ok(AtomicFile { session, tmp, target: target.to_path_buf(), file: Some(file), remote: false })
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
            if let Some(input) = clashing_input(&self.session, &self.target) {
                return Err(Error::usage(
                    "output",
                    format!("'{}' is also an input of this run ({})", self.target.display(), input.display()),
                ));
            }
            let own = is_own(&self.session, &self.target);
            self.session.storage().upload(&self.tmp, &self.target, own)?;
            return Ok(()); // Drop removes the local copy.
        }
        check_output(&self.session, &self.target)?;
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
pub fn write_bytes(session: &Session, target: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = AtomicFile::create(session, target)?;
    let tmp = out.tmp.clone();
    out.file().write_all(bytes).and_then(|()| out.file().sync_all()).map_err(|e| Error::io(&tmp, e))?;
    let back = std::fs::read(&tmp).map_err(|e| Error::io(&tmp, e))?;
    if back != bytes {
        return Err(Error::io(&tmp, std::io::Error::other("the file read back differs from what was written")));
    }
    out.commit()
}
