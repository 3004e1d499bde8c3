//! Outputs and inputs: no output ever replaces an input (by name, link or glob match),
//! a missing output directory is refused before the pass, and only regular files are
//! read (a FIFO, socket, directory or symlink loop is refused, never waited on).

use crate::common::*;

#[test]
fn outputs_never_replace_inputs_by_name_link_or_glob() {
    let dir = TempDir::new("clobber");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    write_parquet(&dir.path("te.parquet"), good_columns(30), 20);
    let p = sketch_pipeline(&dir, &["t*.parquet"], "features = [\"a\", \"b\"]", "[pca]\ncomponents = 4");
    let model = dir.path("m.sfm");
    let ok = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "--quiet"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    std::os::unix::fs::symlink(dir.path("t.parquet"), dir.path("alias.parquet")).unwrap();
    std::fs::hard_link(dir.path("te.parquet"), dir.path("hard.parquet")).unwrap();
    let snapshot = |d: &TempDir| -> Vec<(String, Vec<u8>)> {
        d.files().into_iter().map(|f| (f.clone(), std::fs::read(d.path(&f)).unwrap())).collect()
    };
    let before = snapshot(&dir);
    let s = |f: &str| dir.path(f).to_string_lossy().into_owned();
    let cases: Vec<Vec<String>> = vec![
        // The glob t*.parquet matches both files: either is an input.
        vec!["train".into(), p.clone(), "-o".into(), s("te.parquet"), "--quiet".into()],
        vec!["train".into(), p.clone(), "-o".into(), s("alias.parquet"), "--quiet".into()],
        vec!["train".into(), p.clone(), "-o".into(), s("hard.parquet"), "--quiet".into()],
        vec!["predict".into(), s("m.sfm"), "-i".into(), s("te.parquet"), "-o".into(), s("te.parquet")],
        vec!["predict".into(), s("m.sfm"), "-i".into(), s("te.parquet"), "-o".into(), s("m.sfm")],
        vec!["predict".into(), s("m.sfm"), "-i".into(), s("hard.parquet"), "-o".into(), s("te.parquet")],
        vec!["transform".into(), s("m.sfm"), "-i".into(), s("t.parquet"), "-o".into(), s("alias.parquet")],
    ];
    for args in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sketchfit(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("never replaces an input"), "{args:?}: {err}");
        assert_eq!(snapshot(&dir), before, "{args:?} changed a file");
    }
}

#[test]
fn a_missing_output_directory_is_refused_before_the_pass() {
    let dir = TempDir::new("no-out-dir");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let out = sketchfit(&["train", &p, "-o", dir.path("nope/m.sfm").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("does not exist"), "{err}");
    // Refused before any pass: no pass line was printed.
    assert!(!err.contains("pass 1:"), "the pass ran before the output was checked: {err}");
}

#[cfg(unix)]
#[test]
fn fifos_directories_and_symlink_loops_are_refused_not_waited_on() {
    let dir = TempDir::new("non-regular");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let fifo = dir.path("f.parquet");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());
    std::os::unix::fs::symlink(dir.path("b.parquet"), dir.path("a.parquet")).unwrap();
    std::os::unix::fs::symlink(dir.path("a.parquet"), dir.path("b.parquet")).unwrap();
    std::fs::create_dir(dir.path("d.parquet")).unwrap();
    for (name, needle) in
        [("f.parquet", "not a regular file"), ("a.parquet", "symlink loop"), ("d.parquet", "a directory")]
    {
        let p = sketch_pipeline(&dir, &[name], "features = [\"a\", \"b\"]", "");
        // A FIFO opened for reading would block this test forever: the refusal comes first.
        train_fails(&dir, &p, &[name, needle]);
    }
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "");
    let model = dir.path("m.sfm");
    assert_eq!(sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "-q"]).status.code(), Some(0));
    let (f, t, x) = (fifo.to_str().unwrap(), dir.path("t.parquet"), dir.path("x.out"));
    let (t, x) = (t.to_str().unwrap(), x.to_str().unwrap());
    for args in [
        vec!["predict", f, "-i", t, "-o", x],
        vec!["inspect", f],
        vec!["train", f, "-o", x],
        vec!["solve", &p, f, "-o", x],
    ] {
        let out = sketchfit(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("f.parquet") && stderr(&out).contains("not a regular file"), "{}", stderr(&out));
    }
}

/// `file://` URLs are local paths everywhere (inputs, globs, models, outputs, the
/// checkpoint); a scheme no store reads is refused by name before anything is read.
#[test]
fn file_urls_are_local_paths_and_unknown_schemes_are_refused() {
    let dir = TempDir::new("urls");
    write_parquet(&dir.path("t.parquet"), good_columns(60), 20);
    let url = |f: &str| format!("file://{}", dir.path(f).to_string_lossy());
    let p = sketch_pipeline(&dir, &["t.parquet"], "features = [\"a\", \"b\"]", "[pca]\ncomponents = 4");
    let plain = sketchfit(&["train", &p, "-o", dir.path("a.sfm").to_str().unwrap(), "-q"]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let glob = format!("data.train=[\"{}\"]", url("t*.parquet"));
    let via = sketchfit(&["train", &p, "--set", &glob, "-o", &url("b.sfm"), "-q"]);
    assert_eq!(via.status.code(), Some(0), "{}", stderr(&via));
    let (a, b) = (std::fs::read(dir.path("a.sfm")).unwrap(), std::fs::read(dir.path("b.sfm")).unwrap());
    let arrays = |m: &[u8]| m[8 + u64::from_le_bytes(m[..8].try_into().unwrap()) as usize..].to_vec();
    assert_eq!(arrays(&a), arrays(&b), "the same data through a file:// URL trains the same model");
    let pred = sketchfit(&["predict", &url("b.sfm"), "-i", &url("t.parquet"), "-o", &url("p.parquet")]);
    assert_eq!(pred.status.code(), Some(0), "{}", stderr(&pred));
    assert!(dir.path("p.parquet").exists());

    let s4 = sketchfit(&["train", &p, "--set", "data.train=[\"s4://bucket/t.parquet\"]", "-o", &url("c.sfm")]);
    assert_eq!(s4.status.code(), Some(2));
    assert!(stderr(&s4).contains("'s4://' is not a storage scheme"), "{}", stderr(&s4));
    let ck = format!("run.checkpoint=\"{}\"", url("c.ckpt"));
    let every = sketchfit(&["train", &p, "--set", &ck, "--set", "run.checkpoint_every=1", "-o", &url("f.sfm"), "-q"]);
    assert_eq!(every.status.code(), Some(0), "{}", stderr(&every));
    assert!(dir.path("f.sfm").exists() && !dir.path("c.ckpt").exists(), "a served checkpoint is removed");
    let opt = sketchfit(&["train", &p, "--storage-option", "novalue", "-o", &url("c.sfm")]);
    assert_eq!(opt.status.code(), Some(2));
    assert!(stderr(&opt).contains("--storage-option"), "{}", stderr(&opt));
    let bogus = sketchfit(&["train", &p, "--storage-option", "bogus_key=1", "-o", &url("c.sfm")]);
    assert_eq!(bogus.status.code(), Some(2));
    assert!(stderr(&bogus).contains("'bogus_key' is not a key of any store"), "{}", stderr(&bogus));
    assert!(!dir.path("c.sfm").exists());

    // A [storage] table: its keys are checked, and its values (credentials) never reach
    // the model, whose pipeline record omits the table.
    let text = std::fs::read_to_string(&p).unwrap();
    let secret = "do-not-store-this-secret-4711";
    std::fs::write(&p, format!("{text}\n[storage]\naws_secret_access_key = \"{secret}\"\naws_region = \"x\"\n"))
        .unwrap();
    let stored = sketchfit(&["train", &p, "-o", &url("d.sfm"), "-q"]);
    assert_eq!(stored.status.code(), Some(0), "{}", stderr(&stored));
    let model = std::fs::read(dir.path("d.sfm")).unwrap();
    assert!(!model.windows(secret.len()).any(|w| w == secret.as_bytes()), "a credential in the model");
    std::fs::write(&p, format!("{text}\n[storage]\nno_such_option = 1\n")).unwrap();
    let bad = sketchfit(&["train", &p, "-o", &url("e.sfm"), "-q"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("storage") && stderr(&bad).contains("no_such_option"), "{}", stderr(&bad));
}
