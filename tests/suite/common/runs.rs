//! Running the command in tests: exit codes, stderr needles, and a run stopped by the
//! fault-injection hook.

use super::{sketchfit, stderr, stdout, TempDir};

/// Runs sketchfit, expects exit 0, returns stdout.
pub fn run_ok(args: &[&str]) -> String {
    let out = sketchfit(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// Expects exit 0.
pub fn ok(out: &std::process::Output) {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
}

/// Expects exit 2 with every `needles` in stderr.
pub fn refused(out: &std::process::Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks '{n}': {err}");
    }
}

/// Runs `train`, expects exit 2 with every `needles` in stderr and no model left.
pub fn train_fails(dir: &TempDir, pipeline: &str, needles: &[&str]) {
    let before = dir.files();
    let model = dir.path("m.sfm");
    let out = sketchfit(&["train", pipeline, "-o", model.to_str().unwrap(), "--quiet"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks '{n}': {err}");
    }
    assert_eq!(dir.files(), before, "output left behind");
}

/// `train` with a checkpoint after every row group, stopped by the test hook after
/// `units` of them (only in builds with debug assertions).
pub fn killed_train(pipeline: &str, model: &str, units: usize) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sketchfit"))
        .args(["train", pipeline, "-o", model, "-q", "--set", "run.checkpoint_every=1"])
        .env("SKETCHFIT_TEST_ABORT_AFTER_UNITS", units.to_string())
        .output()
        .unwrap()
}
