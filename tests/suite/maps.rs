//! Fitted maps as a file: `fit-maps` writes what the pre-pass decides; `train --maps`
//! gives the model the run fitting them itself gives; parts accumulated over any data with
//! one maps file — the landmark map's too — merge in `solve`, never counting an input twice.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, UInt8Array};

use sketchfit::Model;

use crate::common::{rel, repo, sketchfit, stderr, stdout, write_parquet, TempDir};

fn pipeline(dir: &TempDir, seed: u64) -> String {
    let text = format!(
        "task = \"classification\"\n[data]\ntrain = [\"{}\"]\nfeatures = [\"px*\"]\nlabel = \"label\"\n\n\
         [[stages]]\nkind = \"nystrom\"\nkernel = \"polynomial\"\ndegree = 3\ngamma = 1.0\noffset = 1.0\ndim = 256\n\
         normalize = \"l2\"\n\n[ridge]\nlambda = 0.001\n\n[run]\nseed = {seed}\n",
        repo("data/digits_train.parquet")
    );
    let path = dir.path(&format!("p{seed}.toml"));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn ok(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    stdout(out)
}

fn refused(out: &std::process::Output, says: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    assert!(stderr(out).contains(says), "'{says}' not in: {}", stderr(out));
}

fn weights(path: &str) -> Vec<f64> {
    Model::load(path.as_ref()).unwrap().weights
}

#[test]
fn a_run_on_fitted_maps_gives_the_model_of_the_run_that_fitted_them() {
    let dir = TempDir::new("maps-train");
    let p = pipeline(&dir, 3);
    let maps = dir.path("m.maps");
    let said = ok(&sketchfit(&["fit-maps", &p, "-o", maps.to_str().unwrap(), "-q"]));
    assert!(said.contains("maps of 1 stage(s), D = 256") && said.contains("digest"), "{said}");
    // fit-maps fits the maps a pipeline's `run.maps` would name; it never reads that file.
    let set = format!("run.maps=\"{}\"", dir.path("not-yet.maps").display());
    ok(&sketchfit(&["fit-maps", &p, "--set", &set, "-o", dir.path("again.maps").to_str().unwrap(), "-q"]));
    let (a, b) = (dir.path("a.sfm"), dir.path("b.sfm"));
    ok(&sketchfit(&["train", &p, "-o", a.to_str().unwrap(), "-q"]));
    let run = sketchfit(&["train", &p, "--maps", maps.to_str().unwrap(), "-o", b.to_str().unwrap()]);
    ok(&run);
    assert!(stderr(&run).contains("no pre-pass"), "{}", stderr(&run));
    assert_eq!(weights(a.to_str().unwrap()), weights(b.to_str().unwrap()), "bit for bit");
    // The maps file is sealed: one changed byte is refused, naming it.
    let mut bytes = std::fs::read(&maps).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 1;
    let bad = dir.path("bad.maps");
    std::fs::write(&bad, bytes).unwrap();
    refused(
        &sketchfit(&["train", &p, "--maps", bad.to_str().unwrap(), "-o", dir.path("c.sfm").to_str().unwrap()]),
        "bad.maps",
    );
    // The maps file is an input of the run: no output may replace it.
    refused(&sketchfit(&["train", &p, "--maps", maps.to_str().unwrap(), "-o", maps.to_str().unwrap()]), "input");
}

#[test]
fn landmark_parts_over_other_days_merge_to_the_one_process_model() {
    let dir = TempDir::new("maps-days");
    let p = pipeline(&dir, 3);
    let maps = dir.path("m.maps").to_string_lossy().into_owned();
    ok(&sketchfit(&["fit-maps", &p, "-o", &maps, "-q"]));
    let (day1, day2) = (repo("data/digits_train.parquet"), repo("data/digits_test.parquet"));
    let part = |name: &str| dir.path(name).to_string_lossy().into_owned();
    ok(&sketchfit(&["accumulate", &p, "--maps", &maps, "-i", &day1, "-o", &part("d1.sfs"), "-q"]));
    ok(&sketchfit(&["accumulate", &p, "--maps", &maps, "-i", &day2, "-o", &part("d2.sfs"), "-q"]));
    let merged = part("merged.sfm");
    ok(&sketchfit(&["solve", &p, &part("d1.sfs"), &part("d2.sfs"), "--maps", &maps, "-o", &merged, "-q"]));
    let both = part("both.sfm");
    let set = format!("data.train=[\"{day1}\", \"{day2}\"]");
    ok(&sketchfit(&["train", &p, "--maps", &maps, "--set", &set, "-o", &both, "-q"]));
    let (m, b) = (weights(&merged), weights(&both));
    assert!(rel(&m, &b) < 1e-9, "merged days against one process: {:e}", rel(&m, &b));

    // The landmarks are in the maps, not the parts: the solve needs the file.
    refused(&sketchfit(&["solve", &p, &part("d1.sfs"), &part("d2.sfs"), "-o", &part("x.sfm")]), "--maps");
    // A day read twice would count its rows twice, however the parts were named.
    ok(&sketchfit(&["accumulate", &p, "--maps", &maps, "-i", &day1, "-o", &part("d1again.sfs"), "-q"]));
    let twice = sketchfit(&["solve", &p, &part("d1.sfs"), &part("d1again.sfs"), "--maps", &maps, "-o", &part("x.sfm")]);
    refused(&twice, "counted twice");
    // Parts of other maps never merge.
    let other = pipeline(&dir, 4);
    let maps4 = part("m4.maps");
    ok(&sketchfit(&["fit-maps", &other, "-o", &maps4, "-q"]));
    ok(&sketchfit(&["accumulate", &other, "--maps", &maps4, "-i", &day2, "-o", &part("d2other.sfs"), "-q"]));
    let mixed = sketchfit(&["solve", &p, &part("d1.sfs"), &part("d2other.sfs"), "--maps", &maps, "-o", &part("x.sfm")]);
    refused(&mixed, "one maps file");
    // Without a maps file, a landmark pipeline still cannot be sharded.
    refused(&sketchfit(&["accumulate", &p, "-o", &part("plain.sfs"), "-q"]), "landmarks");
}

#[test]
fn inputs_that_do_not_fit_the_maps_are_refused_by_name() {
    let dir = TempDir::new("maps-refusals");
    let p = pipeline(&dir, 3);
    let maps = dir.path("m.maps").to_string_lossy().into_owned();
    ok(&sketchfit(&["fit-maps", &p, "-o", &maps, "-q"]));
    // A label the maps' class list does not hold.
    let px: Vec<(String, ArrayRef)> =
        (0..64).map(|j| (format!("px{j}"), Arc::new(UInt8Array::from(vec![(j % 16) as u8; 40])) as ArrayRef)).collect();
    let mut cols: Vec<(&str, ArrayRef)> = px.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    cols.push(("label", Arc::new(Int64Array::from(vec![42i64; 40])) as ArrayRef));
    let odd = dir.path("odd.parquet");
    write_parquet(&odd, cols, 20);
    let out = sketchfit(&[
        "accumulate",
        &p,
        "--maps",
        &maps,
        "-i",
        odd.to_str().unwrap(),
        "-o",
        dir.path("o.sfs").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("42") && stderr(&out).contains("odd.parquet"), "{}", stderr(&out));
    // Fewer columns than the maps were fitted on.
    let narrow: Vec<(&str, ArrayRef)> = px.iter().take(10).map(|(n, a)| (n.as_str(), a.clone())).collect();
    let mut narrow = narrow;
    narrow.push(("label", Arc::new(Int64Array::from(vec![1i64; 40])) as ArrayRef));
    let small = dir.path("small.parquet");
    write_parquet(&small, narrow, 20);
    let out = sketchfit(&[
        "accumulate",
        &p,
        "--maps",
        &maps,
        "-i",
        small.to_str().unwrap(),
        "-o",
        dir.path("s.sfs").to_str().unwrap(),
    ]);
    refused(&out, "m.maps");
    // Another pipeline's keys.
    let out = sketchfit(&[
        "train",
        &p,
        "--maps",
        &maps,
        "--set",
        "stages.0.degree=2",
        "-o",
        dir.path("k.sfm").to_str().unwrap(),
    ]);
    refused(&out, "stages");
}

#[test]
fn the_library_fits_maps_and_merges_landmark_statistics_of_any_data() {
    use sketchfit::{Pipeline, Session};
    let dir = TempDir::new("maps-api");
    let text = std::fs::read_to_string(pipeline(&dir, 5)).unwrap();
    let session = Session::new();
    let base = Pipeline::from_toml_str(&text, "maps api").unwrap();
    let (day1, day2) = (repo("data/digits_train.parquet"), repo("data/digits_test.parquet"));
    let maps = base.fit_maps_with(&session, [day1.clone()]).unwrap();
    let path = dir.path("api.maps");
    maps.save_with(&session, &path).unwrap();
    let p = base.maps(&path);
    let first = p.accumulate_files([day1.clone()], (0, 1)).unwrap();
    let mut merged = p.accumulate_files([day2.clone()], (0, 1)).unwrap();
    merged.merge(first.clone()).unwrap();
    // The same rows again would count twice.
    let twice = merged.clone().merge(first).unwrap_err();
    assert!(twice.to_string().contains("counted twice"), "{twice}");
    let model = p.solve(vec![merged]).unwrap();
    let one = p.fit_files([day1, day2]).unwrap();
    assert!(rel(&model.weights, &one.weights) < 1e-9, "{:e}", rel(&model.weights, &one.weights));
}

#[test]
fn a_window_of_parts_and_merged_statistics_carry_a_long_window_forward() {
    let dir = TempDir::new("maps-window");
    let p = pipeline(&dir, 3);
    let part = |name: &str| dir.path(name).to_string_lossy().into_owned();
    let maps = part("m.maps");
    ok(&sketchfit(&["fit-maps", &p, "-o", &maps, "-q"]));
    let (day1, day2) = (repo("data/digits_train.parquet"), repo("data/digits_test.parquet"));
    ok(&sketchfit(&["accumulate", &p, "--maps", &maps, "-i", &day1, "-o", &part("d1.sfs"), "-q"]));
    ok(&sketchfit(&["accumulate", &p, "--maps", &maps, "-i", &day2, "-o", &part("d2.sfs"), "-q"]));
    // The last day alone.
    let last = ok(&sketchfit(&[
        "solve",
        &p,
        &part("d1.sfs"),
        &part("d2.sfs"),
        "--last",
        "1",
        "--maps",
        &maps,
        "-o",
        &part("last.sfm"),
        "-q",
    ]));
    assert!(last.contains("solved 450 rows from 1 part(s)"), "{last}");
    // Day 1 kept as one merged file, then solved with day 2: the model of both days.
    ok(&sketchfit(&[
        "solve",
        &p,
        &part("d1.sfs"),
        "--maps",
        &maps,
        "--statistics",
        &part("window.sfs"),
        "-o",
        &part("w.sfm"),
        "-q",
    ]));
    ok(&sketchfit(&[
        "solve",
        &p,
        &part("window.sfs"),
        &part("d2.sfs"),
        "--maps",
        &maps,
        "-o",
        &part("carried.sfm"),
        "-q",
    ]));
    ok(&sketchfit(&["solve", &p, &part("d1.sfs"), &part("d2.sfs"), "--maps", &maps, "-o", &part("both.sfm"), "-q"]));
    let (c, b) = (weights(&part("carried.sfm")), weights(&part("both.sfm")));
    assert!(rel(&c, &b) < 1e-12, "{:e}", rel(&c, &b));
    // The merged file remembers what it read: day 1 again is refused.
    let twice = sketchfit(&["solve", &p, &part("window.sfs"), &part("d1.sfs"), "--maps", &maps, "-o", &part("x.sfm")]);
    refused(&twice, "counted twice");
    refused(
        &sketchfit(&["solve", &p, &part("d1.sfs"), "--last", "0", "--maps", &maps, "-o", &part("x.sfm")]),
        "--last",
    );
}

#[test]
fn weighted_parts_are_weighted_ridge_and_a_decayed_window_carries_forward() {
    let dir = TempDir::new("maps-weights");
    let p = pipeline(&dir, 3);
    let part = |name: &str| dir.path(name).to_string_lossy().into_owned();
    let maps = part("m.maps");
    ok(&sketchfit(&["fit-maps", &p, "-o", &maps, "-q"]));
    // A copy of a day's file is another input: counting it is counting that day twice.
    let copy = part("copy_0to4.parquet");
    std::fs::copy(repo("data/digits_test_0to4.parquet"), &copy).unwrap();
    let days = [
        ("d1.sfs", repo("data/digits_test_0to4.parquet")),
        ("copy.sfs", copy.clone()),
        ("d2.sfs", repo("data/digits_test_5to9.parquet")),
        ("d3.sfs", repo("data/digits_train.parquet")),
    ];
    for (name, input) in &days {
        ok(&sketchfit(&["accumulate", &p, "--maps", &maps, "-i", input, "-o", &part(name), "-q"]));
    }
    let solve = |parts: &[&str], extra: &[&str], out: &str| {
        let mut args: Vec<String> = vec!["solve".into(), p.clone()];
        args.extend(parts.iter().map(|n| part(n)));
        args.extend(["--maps".into(), maps.clone(), "-o".into(), part(out)]);
        args.extend(extra.iter().map(|s| s.to_string()));
        sketchfit(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // A weight of 2 is the day counted twice: the weighted ridge model.
    let weighted = solve(&["d1.sfs", "d2.sfs"], &["--weights", "2,1"], "w.sfm");
    ok(&weighted);
    assert!(stderr(&weighted).contains("parts weighted, oldest first: 2.0000 1.0000"), "{}", stderr(&weighted));
    ok(&solve(&["d1.sfs", "copy.sfs", "d2.sfs"], &["-q"], "twice.sfm"));
    let (w, twice) = (weights(&part("w.sfm")), weights(&part("twice.sfm")));
    assert!(rel(&w, &twice) < 1e-10, "{:e}", rel(&w, &twice));
    // Weights go with the parts in the order given, whatever shards they hold: day 3 in
    // two shards given around day 2 is day 3 whole.
    for (name, shard) in [("t0.sfs", "0/2"), ("t1.sfs", "1/2")] {
        ok(&sketchfit(&[
            "accumulate",
            &p,
            "--maps",
            &maps,
            "-i",
            &repo("data/digits_train.parquet"),
            "--shard",
            shard,
            "-o",
            &part(name),
            "-q",
        ]));
    }
    ok(&solve(&["t1.sfs", "d2.sfs", "t0.sfs"], &["--weights", "2,1,2", "-q"], "sharded.sfm"));
    ok(&solve(&["d3.sfs", "d2.sfs"], &["--weights", "2,1", "-q"], "whole.sfm"));
    let (a, b) = (weights(&part("sharded.sfm")), weights(&part("whole.sfm")));
    assert!(rel(&a, &b) < 1e-10, "{:e}", rel(&a, &b));
    // Decay over three days = the first two decayed into one file, solved with the third.
    let all = solve(&["d1.sfs", "d2.sfs", "d3.sfs"], &["--decay", "1"], "all.sfm");
    ok(&all);
    assert!(stderr(&all).contains("oldest first: 0.2500 0.5000 1.0000"), "{}", stderr(&all));
    ok(&solve(&["d1.sfs", "d2.sfs"], &["--decay", "1", "--statistics", &part("win.sfs"), "-q"], "x.sfm"));
    ok(&solve(&["win.sfs", "d3.sfs"], &["--decay", "1", "-q"], "carried.sfm"));
    let (a, c) = (weights(&part("all.sfm")), weights(&part("carried.sfm")));
    assert!(rel(&a, &c) < 1e-10, "{:e}", rel(&a, &c));
    // Forgetting changes the model: the same three days unweighted are another one.
    ok(&solve(&["d1.sfs", "d2.sfs", "d3.sfs"], &["-q"], "flat.sfm"));
    assert!(rel(&a, &weights(&part("flat.sfm"))) > 1e-3);
    // Refusals name the flag.
    refused(&solve(&["d1.sfs", "d2.sfs"], &["--weights", "1"], "r.sfm"), "1 weight(s) for 2 part(s)");
    refused(&solve(&["d1.sfs", "d2.sfs"], &["--weights", "0,1"], "r.sfm"), "part 1 has weight 0");
    refused(&solve(&["d1.sfs", "d2.sfs"], &["--decay", "0"], "r.sfm"), "--decay");
    // A half-life so short that an older part's weight underflows to 0 names --decay.
    let tiny = solve(&["d1.sfs", "d2.sfs"], &["--decay", "1e-300"], "r.sfm");
    refused(&tiny, "part 1 has weight 0");
    assert!(stderr(&tiny).contains("--decay"), "{}", stderr(&tiny));
    refused(&solve(&["d1.sfs", "d2.sfs"], &["--decay", "1", "--weights", "1,1"], "r.sfm"), "--weights");
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection hooks: cargo test --features fault-injection (scripts/test.sh)"
)]
fn a_killed_accumulate_over_maps_resumes_to_the_same_part() {
    let dir = TempDir::new("maps-resume");
    let p = pipeline(&dir, 3);
    let part = |name: &str| dir.path(name).to_string_lossy().into_owned();
    let maps = part("m.maps");
    ok(&sketchfit(&["fit-maps", &p, "-o", &maps, "-q"]));
    let day = repo("data/digits_train.parquet"); // three row groups
    let accumulate = |out: &str, abort: Option<usize>, resume: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sketchfit"));
        cmd.args(["accumulate", &p, "--maps", &maps, "-i", &day, "-o", out, "-q", "--set", "run.checkpoint_every=1"]);
        if resume {
            cmd.arg("--resume");
        }
        if let Some(n) = abort {
            cmd.env("SKETCHFIT_TEST_ABORT_AFTER_UNITS", n.to_string());
        }
        cmd.output().unwrap()
    };
    ok(&accumulate(&part("whole.sfs"), None, false));
    for k in [1usize, 2] {
        let out = part(&format!("cut{k}.sfs"));
        let cut = accumulate(&out, Some(k), false);
        assert_ne!(cut.status.code(), Some(0), "the hook stops the pass after {k} row groups");
        assert!(std::path::Path::new(&format!("{out}.ckpt")).exists());
        ok(&accumulate(&out, None, true));
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(part("whole.sfs")).unwrap(), "resumed after {k}");
    }
}
