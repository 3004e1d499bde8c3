//! Checkpoints and resume: a killed run (the test hook and a real SIGKILL) resumes to
//! the same bytes as an uninterrupted one in one- and two-pass mode, and from inside an
//! in-place factorisation, and a resume after the inputs changed is refused.

use crate::common::*;

fn train_with_abort(
    p: &str,
    model: &std::path::Path,
    abort_after: Option<usize>,
    resume: bool,
) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sketchfit"));
    cmd.args(["train", p, "-o", model.to_str().unwrap(), "-q", "--set", "run.checkpoint_every=1"]);
    if resume {
        cmd.arg("--resume");
    }
    if let Some(n) = abort_after {
        cmd.env("SKETCHFIT_TEST_ABORT_AFTER_UNITS", n.to_string());
    }
    cmd.output().unwrap()
}

/// `train` (resuming if asked) stopped by the test hook inside the in-place solve, once
/// the state is on disk.
fn killed_in_solve(p: &str, model: &std::path::Path, resume: bool) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sketchfit"));
    cmd.args(["train", p, "-o", model.to_str().unwrap(), "-q"]);
    if resume {
        cmd.arg("--resume");
    }
    cmd.env("SKETCHFIT_TEST_ABORT_IN_SOLVE", "1").output().unwrap()
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection hooks: cargo test --features fault-injection (scripts/test.sh)"
)]
fn killed_runs_resume_to_the_same_model_in_one_and_two_pass_mode() {
    let dir = TempDir::new("resume");
    write_data(&dir.path("train.parquet"), 2000, 200, 2);
    for (name, body, kills) in [
        ("one", CLASSIFY.to_string(), vec![1usize, 4, 9]),
        ("two", format!("passes = 2\n{}", CLASSIFY.replace("components = 40", "per_stage = [20, 5]")), vec![3, 10, 14]),
    ] {
        let p = pipeline_file(&dir, &body);
        let whole = dir.path(&format!("{name}-whole.sfm"));
        let out = train_with_abort(&p, &whole, None, false);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let want = std::fs::read(&whole).unwrap();
        for k in kills {
            let model = dir.path(&format!("{name}-{k}.sfm"));
            let out = train_with_abort(&p, &model, Some(k), false);
            assert_ne!(out.status.code(), Some(0), "{name}: the hook must stop the run after {k} row groups");
            assert!(!model.exists(), "{name}: a killed run leaves no model");
            let ckpt = dir.path(&format!("{name}-{k}.sfm.ckpt"));
            assert!(ckpt.exists(), "{name}: checkpoint after {k} row groups");
            let out = train_with_abort(&p, &model, None, true);
            assert_eq!(out.status.code(), Some(0), "{name} resume after {k}: {}", stderr(&out));
            assert_eq!(std::fs::read(&model).unwrap(), want, "{name}: resumed after {k} row groups, the model differs");
            assert!(!ckpt.exists(), "the checkpoint is removed once the model is written");
        }
    }
    // A damaged checkpoint is detected, never used.
    let p = pipeline_file(&dir, CLASSIFY);
    let model = dir.path("bad.sfm");
    train_with_abort(&p, &model, Some(3), false);
    let ckpt = dir.path("bad.sfm.ckpt");
    let mut bytes = std::fs::read(&ckpt).unwrap();
    let k = bytes.len() - 5;
    bytes[k] ^= 0x10;
    std::fs::write(&ckpt, bytes).unwrap();
    let out = train_with_abort(&p, &model, None, true);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("checksum mismatch"), "{}", stderr(&out));
    assert!(!model.exists());
}

#[test]
fn a_resume_after_the_inputs_changed_is_refused() {
    let dir = TempDir::new("resume-glob");
    write_data(&dir.path("train-0.parquet"), 1200, 200, 2);
    let p = pipeline_file(&dir, &CLASSIFY.replace("train.parquet", "train-*.parquet"));
    let model = dir.path("m.sfm");
    let out = train_with_abort(&p, &model, Some(2), false);
    assert_ne!(out.status.code(), Some(0));
    assert!(dir.path("m.sfm.ckpt").exists());
    // The glob gains a file between the kill and the resume.
    write_data(&dir.path("train-1.parquet"), 400, 200, 3);
    let out = train_with_abort(&p, &model, None, true);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("different pipeline or data"), "{}", stderr(&out));
    assert!(!model.exists());
}

#[test]
fn a_real_sigkill_then_resume_gives_the_same_model() {
    let dir = TempDir::new("sigkill");
    write_data(&dir.path("train.parquet"), 24_000, 500, 3);
    let p = pipeline_file(&dir, &CLASSIFY.replace("dim = 96", "dim = 1024"));
    let whole = dir.path("whole.sfm");
    assert_eq!(train_with_abort(&p, &whole, None, false).status.code(), Some(0));
    let want = std::fs::read(&whole).unwrap();
    for delay_ms in [150u64, 400, 900] {
        let model = dir.path(&format!("k{delay_ms}.sfm"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sketchfit"))
            .args(["train", &p, "-o", model.to_str().unwrap(), "-q", "--set", "run.checkpoint_every=1"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Wherever the kill landed (before the first checkpoint, between two, or after
        // the end), resuming gives the same model.
        let out = train_with_abort(&p, &model, None, true);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(std::fs::read(&model).unwrap(), want, "killed at {delay_ms} ms");
    }
}

/// 1,200 rows at D = 4096, a fixed λ by the f64 Cholesky in 110 MiB: the Gram (68 MiB)
/// and a copy do not fit together, so the factor consumes the statistics in place, and
/// the run hands them to its checkpoint just before.
fn in_place_pipeline(dir: &TempDir) -> String {
    write_data(&dir.path("train.parquet"), 1200, 200, 4);
    let body = CLASSIFY
        .replace("dim = 96", "dim = 4096")
        .replace("[[stages]]\nkind = \"identity\"\n[pca]\ncomponents = 40\n", "")
        + "[ridge]\nlambda = 0.1\nsolver = \"cholesky\"\n[run]\nchunk_rows = 64\nmemory_limit_mib = 110\n";
    pipeline_file(dir, &body)
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection hooks: cargo test --features fault-injection (scripts/test.sh)"
)]
fn a_kill_inside_an_in_place_factorisation_resumes_from_the_state_it_wrote_first() {
    // (About 19 chunks: the default checkpoint interval, 256, writes none during the pass.)
    // D = 4096 in 110 MiB: the Gram (68 MiB) and a copy do not fit together, so the
    // Cholesky factors the statistics' own Gram, and the run hands them to its checkpoint
    // just before. A kill inside the factorisation then costs no pass: the resume reads
    // the whole state back and solves to the uninterrupted run's bytes.
    let dir = TempDir::new("resume-in-place");
    let p = in_place_pipeline(&dir);
    let whole = dir.path("whole.sfm");
    let json = dir.path("whole.json");
    let out = sketchfit(&["train", &p, "-o", whole.to_str().unwrap(), "-q", "--report", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report(&json);
    assert_eq!(r["plan"]["solve"], serde_json::json!({"path": "cholesky", "lambda": 0.1, "factor": "in_place"}), "{r}");
    assert_eq!(r["checkpointed_before_solve"], true, "{r}");
    let want = std::fs::read(&whole).unwrap();
    let model = dir.path("killed.sfm");
    let out = killed_in_solve(&p, &model, false);
    assert_ne!(out.status.code(), Some(0), "the hook must stop the run inside the solve");
    assert!(!model.exists(), "a killed run leaves no model");
    assert!(dir.path("killed.sfm.ckpt").exists(), "the state went to the checkpoint before the factorisation");
    // A resume runs no pass (every row group is done) and factors what it read, without
    // writing the checkpoint onto itself: killed inside the factor again, the file is the
    // same one (inode and time), and the next resume gives the uninterrupted run's bytes.
    use std::os::unix::fs::MetadataExt;
    let ckpt = dir.path("killed.sfm.ckpt");
    let stamp = |path: &std::path::Path| {
        let m = std::fs::metadata(path).unwrap();
        (m.ino(), m.mtime(), m.mtime_nsec())
    };
    let before = stamp(&ckpt);
    let out = killed_in_solve(&p, &model, true);
    assert_ne!(out.status.code(), Some(0), "the hook must stop the resumed run inside the solve");
    assert_eq!(stamp(&ckpt), before, "the resumed run rewrote the checkpoint it had read");
    let json = dir.path("resumed.json");
    let out =
        sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q", "--resume", "--report", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report(&json);
    assert_eq!(r["resumed"]["units_done"], 6, "{r}");
    assert_eq!((&r["solve"]["in_place"], &r["checkpointed_before_solve"]), (&true.into(), &false.into()), "{r}");
    assert_eq!(std::fs::read(&model).unwrap(), want, "resumed from the pre-solve checkpoint, the model differs");
    assert!(!ckpt.exists());
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection hooks: cargo test --features fault-injection (scripts/test.sh)"
)]
fn a_refit_in_place_keeps_the_pass_without_the_held_out_rows() {
    // λ by validation rows, then the refit at that λ on training ∪ validation: at
    // D = 8192 its copy (277 MB) passes what a solve copies when the statistics are on
    // disk, so it merges the validation rows into the pass's statistics and factors them
    // in place. The pass (training rows only) goes to the checkpoint first; a kill inside
    // the factor resumes from it, with no pass, to a model of 1,500 rows — a checkpoint of
    // the merged statistics would count the validation rows twice.
    let dir = TempDir::new("resume-refit");
    write_data(&dir.path("train.parquet"), 1200, 200, 5);
    write_data(&dir.path("valid.parquet"), 300, 300, 6);
    let body = CLASSIFY
        .replace("train = [\"train.parquet\"]", "train = [\"train.parquet\"]\nvalidation = [\"valid.parquet\"]")
        .replace("dim = 96", "dim = 8192")
        .replace("[[stages]]\nkind = \"identity\"\n[pca]\ncomponents = 40\n", "")
        + "[ridge]\nlambda = \"gcv\"\n";
    let p = pipeline_file(&dir, &body);
    let model = dir.path("m.sfm");
    let out = killed_in_solve(&p, &model, false);
    assert_ne!(out.status.code(), Some(0), "the hook must stop the run inside the refit");
    assert!(!model.exists() && dir.path("m.sfm.ckpt").exists(), "{}", stderr(&out));
    let json = dir.path("m.json");
    let out =
        sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q", "--resume", "--report", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report(&json);
    assert_eq!(r["plan"]["refit"], serde_json::json!({"path": "cholesky", "factor": "in_place"}), "{r}");
    assert_eq!((&r["resumed"]["units_done"], &r["solve"]["in_place"]), (&6.into(), &true.into()), "{r}");
    let m = sketchfit::Model::load(&model).unwrap();
    assert_eq!(m.header.rows, 1500, "training and validation rows, each once");
    assert!(!dir.path("m.sfm.ckpt").exists());
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection hooks: cargo test --features fault-injection (scripts/test.sh)"
)]
fn auto_resumes_on_the_statistics_its_checkpoint_holds() {
    // 1,200 rows at D = 4096: a fresh run under `auto` keeps its rows for the dual
    // (n ≤ D/2). A run killed inside its Cholesky left statistics; auto is a choice and the
    // checkpoint a fact, so `--resume` under auto solves them, to the Cholesky's weights.
    let dir = TempDir::new("resume-auto");
    let p = in_place_pipeline(&dir);
    let whole = dir.path("whole.sfm");
    let out = sketchfit(&["train", &p, "-o", whole.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let model = dir.path("killed.sfm");
    assert_ne!(killed_in_solve(&p, &model, false).status.code(), Some(0));
    assert!(dir.path("killed.sfm.ckpt").exists());
    let json = dir.path("auto.json");
    let auto = ["--set", "ridge.solver=\"auto\"", "--resume", "--report", json.to_str().unwrap()];
    let out = sketchfit(&[&["train", &p, "-o", model.to_str().unwrap(), "-q"][..], &auto[..]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report(&json);
    assert_eq!(r["resumed"]["units_done"], 6, "{r}");
    assert_eq!(r["plan"]["solve"]["path"], "cholesky", "{r}");
    let (a, b) = (sketchfit::Model::load(&model).unwrap(), sketchfit::Model::load(&whole).unwrap());
    assert_eq!(a.weights, b.weights);
    assert!(!dir.path("killed.sfm.ckpt").exists());
}
