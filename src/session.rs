//! The engine value: everything a run holds beyond its pipeline — the storage options and
//! the store clients made under them, the files it reads and the outputs it owns (for the
//! check that no output replaces an input), and its counters. The command line makes one
//! per command; every library entry point takes one, or makes a fresh one from the
//! environment; a Python call makes one from its `storage_options`. The library keeps no
//! mutable process-wide state, so runs on several threads of one process, each with its
//! own session, see only their own options, credentials and files.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::identity::Identity;
use crate::remote::{Layer, Storage};

/// The state of one run (or of one embedding caller's runs). A cheap handle: clones share
/// it, so a session given to a run is the one whose files it registers.
#[derive(Debug, Clone, Default)]
pub struct Session {
    inner: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    storage: Storage,
    files: Registry,
    units_done: AtomicUsize,
}

impl Session {
    /// A session with no storage options beyond the environment's.
    pub fn new() -> Session {
        Session::default()
    }

    /// A session with these storage options (the command line's `--storage-option`
    /// layer, Python's `storage_options`), above the environment and a pipeline's
    /// `[storage]` table. A key no store knows is refused, naming it.
    pub fn with_storage_options(pairs: &[(String, String)]) -> Result<Session> {
        let session = Session::new();
        session.storage().set_options(Layer::CommandLine, pairs)?;
        Ok(session)
    }

    /// Its storage: options, store clients, the operations on objects.
    pub fn storage(&self) -> &Storage {
        &self.inner.storage
    }

    /// `text` with every credential this session knows (its secret options, the
    /// environment's, every URL's userinfo and query values) replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        self.inner.storage.redact(text)
    }

    /// The inputs and own outputs registered so far.
    pub(crate) fn files(&self) -> &Registry {
        &self.inner.files
    }

    /// Counts one finished unit of work (a row group read into the statistics, over every
    /// pass of the session) and returns the count so far.
    pub(crate) fn count_unit(&self) -> usize {
        self.inner.units_done.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// A registered input: as it was given, and what it names.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    pub(crate) given: PathBuf,
    pub(crate) identity: Identity,
}

/// A session's inputs and its own outputs, which `atomic`'s output check reads.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) inputs: Mutex<Vec<Input>>,
    /// Outputs the run writes more than once and may replace (its checkpoint): in an
    /// object store these are put unconditionally, every other object never replaces one.
    pub(crate) own: Mutex<Vec<PathBuf>>,
}
