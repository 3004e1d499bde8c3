//! What a solve that takes the statistics' own memory asks of whoever owns them. A
//! factorisation in place consumes the Gram: the owner keeps the statistics first (the
//! run writes its checkpoint). The mixed-precision factor in the Gram's memory frees the
//! Gram while it still needs products with it: the owner keeps it somewhere it can be
//! streamed back from. The solver decides neither where nor how — that is the owner's
//! ([`Lease`]); it only says when, so no solver reads or writes a file.

use crate::error::Result;
use crate::stats::{GramStats, TriGram};

/// The owner's side of statistics a solve may consume. Each call comes before the memory
/// is taken, with the statistics still whole; an error stops the solve and leaves them so.
pub trait Lease {
    /// The Gram of `stats` is about to be factored in place: keep the statistics.
    fn consume(&mut self, stats: &GramStats) -> Result<()>;

    /// The Gram of `stats` is about to be freed while the solve still multiplies by it
    /// (and, should it fall back, factors it): keep it where it can be read back, and
    /// answer that place.
    fn spill(&mut self, stats: &GramStats) -> Result<Box<dyn GramSource + '_>>;
}

/// A Gram kept outside memory, read back tile by tile.
pub trait GramSource {
    /// Each stored tile `(I, J, values)` of the lower triangle in storage order. On an
    /// error nothing computed from the tiles may be used.
    fn tiles(&self, each: &mut dyn FnMut(usize, usize, &[f64])) -> Result<()>;

    /// The whole Gram, read back.
    fn gram(&self) -> Result<TriGram>;
}

/// Statistics nothing keeps: consumed as they are (the run has no checkpoint, or the
/// statistics are a copy). They cannot be spilled: a plan spills only beside a
/// checkpoint.
pub struct Unkept;

impl Lease for Unkept {
    fn consume(&mut self, _: &GramStats) -> Result<()> {
        Ok(())
    }

    fn spill(&mut self, _: &GramStats) -> Result<Box<dyn GramSource + '_>> {
        Err(crate::error::Error::bug("a Gram is spilled only where the run keeps its statistics"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A lease that records what it was asked and keeps a copy of the Gram in memory
    /// (the solver's side of a spill, without a file); `refuse` fails every call.
    #[derive(Default)]
    pub(crate) struct Recording {
        pub consumed: Vec<GramStats>,
        pub spilled: Vec<GramStats>,
        pub refuse: bool,
    }

    pub(crate) struct Copied(pub TriGram);

    impl GramSource for Copied {
        fn tiles(&self, each: &mut dyn FnMut(usize, usize, &[f64])) -> Result<()> {
            for (i, j, t) in self.0.tiles() {
                each(i, j, t);
            }
            Ok(())
        }
        fn gram(&self) -> Result<TriGram> {
            Ok(self.0.clone())
        }
    }

    impl Lease for Recording {
        fn consume(&mut self, stats: &GramStats) -> Result<()> {
            if self.refuse {
                return Err(crate::error::Error::bug("disk full"));
            }
            self.consumed.push(stats.clone());
            Ok(())
        }
        fn spill(&mut self, stats: &GramStats) -> Result<Box<dyn GramSource + '_>> {
            if self.refuse {
                return Err(crate::error::Error::bug("disk full"));
            }
            self.spilled.push(stats.clone());
            Ok(Box::new(Copied(stats.gram.clone())))
        }
    }
}
