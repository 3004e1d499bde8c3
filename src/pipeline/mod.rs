//! Pipeline files and the drivers that run them: a spec ([`spec`]) becomes a run of
//! passes over the data ([`train`]), with a reader thread, parallel chunk mapping,
//! progress on stderr and the memory stated before the first row is read.

pub mod kernel_error;
pub mod mmd;
pub mod predict;
pub mod run;
pub mod spec;
pub mod train;
