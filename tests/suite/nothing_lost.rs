//! A run deletes and replaces only what it made: the checkpoint never names the model,
//! an input or a file the run did not write (unless `--resume` names it), a command that
//! keeps no checkpoint removes none, and every numeric key that becomes a size is refused
//! by name past what the code can hold. Each case fails on a build without the check.

use crate::common::*;

fn snapshot(d: &TempDir) -> Vec<(String, Vec<u8>)> {
    let files = d.files().into_iter().filter(|f| d.path(f).is_file());
    files.map(|f| (f.clone(), std::fs::read(d.path(&f)).unwrap())).collect()
}

/// Runs `args`, expects exit 2 naming `key`, with every file of `dir` as it was.
fn refused_keeping_everything(dir: &TempDir, args: &[&str], key: &str) {
    let before = snapshot(dir);
    let out = sketchfit(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(key), "{args:?}: the refusal does not name {key}: {err}");
    assert_eq!(snapshot(dir), before, "{args:?} changed or removed a file");
}

#[test]
fn a_checkpoint_that_names_the_model_an_input_or_a_stranger_is_refused_and_nothing_is_lost() {
    let dir = TempDir::new("ckpt-clobber");
    std::fs::create_dir(dir.path("sub")).unwrap();
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let s = |f: &str| dir.path(f).to_string_lossy().into_owned();
    // A model of an earlier run, and a file of the user's that is no input.
    let ok = sketchfit(&["train", &p, "-o", &s("m.sfm"), "--quiet"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    std::fs::write(dir.path("notes.txt"), b"someone's notes").unwrap();
    let set = |target: &str| format!("run.checkpoint=\"{target}\"");
    for (output, checkpoint) in [
        // The checkpoint is the new model itself.
        (s("new.sfm"), s("new.sfm")),
        (s("new.sfm"), s("sub/../new.sfm")),
        // The training data, spelt another way.
        (s("new.sfm"), s("sub/../t.parquet")),
        (s("new.sfm"), format!("file://{}", s("t.parquet"))),
        // An existing file this run did not write: the earlier model, the notes.
        (s("new.sfm"), s("m.sfm")),
        (s("new.sfm"), s("notes.txt")),
    ] {
        let ck = set(&checkpoint);
        let args = ["train", &p, "-o", &output, "--set", &ck, "--quiet"];
        refused_keeping_everything(&dir, &args, "run.checkpoint");
    }
    // `--resume` names an existing checkpoint as the run's own; a file that is no
    // checkpoint is refused as such, and kept.
    let ck = set(&s("notes.txt"));
    let before = snapshot(&dir);
    let out = sketchfit(&["train", &p, "-o", &s("new.sfm"), "--set", &ck, "--resume", "--quiet"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(snapshot(&dir), before);
    // The report is an output too: never the model's path.
    let args = ["train", &p, "-o", &s("new.sfm"), "--report", &s("sub/../new.sfm"), "--quiet"];
    refused_keeping_everything(&dir, &args, "--report");
}

#[test]
fn a_command_that_keeps_no_checkpoint_removes_none() {
    let dir = TempDir::new("ckpt-none");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "[run]\ncheckpoint_every = 0");
    // Named as accumulate's default checkpoint would be, but this run keeps none.
    std::fs::write(dir.path("part.sfs.ckpt"), b"kept").unwrap();
    let part = dir.path("part.sfs");
    let out = sketchfit(&["accumulate", &p, "-o", part.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read(dir.path("part.sfs.ckpt")).unwrap(), b"kept");
    // With checkpoints, the same stranger is refused before the pass.
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let part2 = dir.path("part2.sfs");
    std::fs::write(dir.path("part2.sfs.ckpt"), b"kept too").unwrap();
    refused_keeping_everything(&dir, &["accumulate", &p, "-o", part2.to_str().unwrap(), "--quiet"], "run.checkpoint");
}

#[test]
fn a_memory_limit_past_what_a_byte_count_holds_is_refused_by_its_key() {
    let dir = TempDir::new("mem-wrap");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let m = dir.path("m.sfm");
    // 2⁴⁴ MiB is 2⁶⁴ bytes: the conversion wrapped to 0 and the run was refused "0 allowed".
    let args = ["train", &p, "-o", m.to_str().unwrap(), "--set", "run.memory_limit_mib=17592186044416", "-q"];
    refused_keeping_everything(&dir, &args, "run.memory_limit_mib");
    // The largest accepted limit trains.
    let out = sketchfit(&["train", &p, "-o", m.to_str().unwrap(), "--set", "run.memory_limit_mib=1099511627776", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_sample_past_what_memory_holds_is_refused_by_its_key() {
    let dir = TempDir::new("sample-wrap");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let m = dir.path("m.sfm");
    // 2⁶² rows: four times it wrapped (a panic in builds with overflow checks).
    let args = ["train", &p, "-o", m.to_str().unwrap(), "--set", "run.sample_rows=4611686018427387904", "-q"];
    refused_keeping_everything(&dir, &args, "run.sample_rows");
}

#[test]
fn an_output_replaces_only_a_file_sketchfit_wrote() {
    let dir = TempDir::new("replace-own");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let s = |f: &str| dir.path(f).to_string_lossy().into_owned();
    // A model, a report and predictions sketchfit wrote are replaced by the next run's.
    for _ in 0..2 {
        let out = sketchfit(&["train", &p, "-o", &s("m.sfm"), "--report", &s("r.json"), "-q"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let out = sketchfit(&["predict", &s("m.sfm"), "-i", &s("t.parquet"), "-o", &s("pred.parquet")]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    // A file of the user's under any output's name is never replaced.
    std::fs::write(dir.path("notes.txt"), b"someone's notes").unwrap();
    write_parquet(&dir.path("theirs.parquet"), good_columns(10), 10);
    for args in [
        vec!["train", &p, "-o", &s("notes.txt"), "-q"],
        vec!["train", &p, "-o", &s("m2.sfm"), "--report", &s("notes.txt"), "-q"],
        vec!["predict", &s("m.sfm"), "-i", &s("t.parquet"), "-o", &s("theirs.parquet")],
        vec!["accumulate", &p, "-o", &s("notes.txt"), "-q"],
    ] {
        refused_keeping_everything(&dir, &args, "not a file sketchfit wrote");
    }
}
