//! The planner through the command line: the memory stated before the pass for each
//! solve path, in-place factorisation where a copy would not fit or the statistics are
//! on disk, and nothing allocated that the plan did not count. Facts the run reports are
//! read from its `--report` JSON, not from stderr.

use crate::common::*;
use sketchfit::Model;

#[test]
fn the_memory_statement_covers_the_solve_path_and_a_fixed_lambda_factors_in_place() {
    let dir = TempDir::new("memory");
    write_parquet(&dir.path("t.parquet"), good_columns(300), 100);
    // D = 4096: the Gram is 64 MiB, small chunks keep the buffers near the 32 MiB scratch:
    // the pass fits in 110 MiB, the Gram and a copy (128 MiB) do not. (300 rows ≤ D/2
    // would go to the dual path: the primal paths are named.)
    let p = sketch_pipeline(
        &dir,
        &["t.parquet"],
        "features = [\"a\", \"b\"]",
        "dim = 4096\n\n[ridge]\nlambda = 0.1\nsolver = \"cholesky\"\n\n[run]\nchunk_rows = 64\nmemory_limit_mib = 110",
    );
    std::fs::write(&p, std::fs::read_to_string(&p).unwrap().replace("dim = 16\n", "")).unwrap();
    let model = dir.path("m.sfm");
    // A copy of the Gram does not fit beside it: factored in place, after the
    // statistics were written to the checkpoint.
    let json = dir.path("m.json");
    let out = sketchfit(&["train", &p, "-o", model.to_str().unwrap(), "--report", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report(&json);
    assert_eq!(r["plan"]["mode"], "primal", "{r}");
    assert_eq!(r["plan"]["solve"], serde_json::json!({"path": "cholesky", "lambda": 0.1, "factor": "in_place"}));
    assert!(r["memory"]["line"].as_str().unwrap().contains("cholesky path, in place"), "{r}");
    assert!(r["memory"]["needed"].as_u64().unwrap() <= 110 << 20, "{r}");
    assert_eq!(r["checkpointed_before_solve"], true);
    assert_eq!(r["solve"]["in_place"], true);
    // The model records the solve that gave its weights as the plan decided it.
    let header: serde_json::Value =
        serde_json::from_str(&stdout(&sketchfit(&["inspect", model.to_str().unwrap(), "--json"]))).unwrap();
    assert_eq!(header["solve"], r["plan"]["solve"], "{header}");
    assert_eq!(header["solver"], "cholesky", "{header}");
    let read = |h: serde_json::Value| serde_json::from_value::<sketchfit::model::ModelHeader>(h).unwrap().solve;
    assert_eq!(serde_json::to_value(read(header.clone())).unwrap(), header["solve"]);
    // A header written before the solve was recorded reads, with none.
    let mut older = header;
    older.as_object_mut().unwrap().remove("solve");
    assert_eq!(read(older), None);
    assert!(model.exists() && !dir.path("m.sfm.ckpt").exists());
    // GCV needs a dense D × D (128 MiB): refused before the pass, naming the path.
    let gcv = ["--set", "ridge.lambda=\"gcv\"", "--set", "ridge.solver=\"tridiagonal\""];
    let out = sketchfit(&[&["train", &p, "-o", dir.path("g.sfm").to_str().unwrap()][..], &gcv[..]].concat());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not enough memory") && err.contains("tridiagonal"), "{err}");
    assert!(!err.contains("pass 1:"), "{err}");
    assert!(!dir.path("g.sfm").exists());
}

#[test]
fn a_large_fixed_lambda_solve_consumes_statistics_that_are_on_disk_and_equals_the_copy() {
    let dir = TempDir::new("on-disk");
    write_parquet(&dir.path("t.parquet"), good_columns(200), 100);
    // D = 8192: the Gram copy (277 MB) passes the 256 MiB a solve copies when the
    // statistics are safe on disk anyway.
    let p = sketch_pipeline(
        &dir,
        &["t.parquet"],
        "features = [\"a\", \"b\"]",
        "dim = 8192\n\n[ridge]\nlambda = 0.1\nsolver = \"cholesky\"",
    );
    std::fs::write(&p, std::fs::read_to_string(&p).unwrap().replace("dim = 16\n", "")).unwrap();
    let path = |name: &str| dir.path(name).to_string_lossy().into_owned();
    let in_place = |json: &str| {
        let r = report(&dir.path(json));
        let planned = r["plan"]["solve"]["factor"].as_str().unwrap();
        assert_eq!(planned == "in_place", r["solve"]["in_place"], "{r}");
        r["solve"]["in_place"].as_bool().unwrap()
    };
    // `train` keeps a checkpoint by default: written, factored in place, removed.
    let out = sketchfit(&["train", &p, "-o", &path("in.sfm"), "--report", &path("in.json")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(in_place("in.json"));
    assert_eq!(report(&dir.path("in.json"))["checkpointed_before_solve"], true);
    assert!(!dir.path("in.sfm.ckpt").exists());
    // Without a checkpoint the statistics exist only in memory: a copy is factored.
    let out = sketchfit(&[
        "train",
        &p,
        "-o",
        &path("copy.sfm"),
        "--set",
        "run.checkpoint_every=0",
        "--report",
        &path("copy.json"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!in_place("copy.json"));
    // `solve` from a part: the part is the copy on disk.
    let out = sketchfit(&["accumulate", &p, "--shard", "0/1", "-o", &path("p.stats"), "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = sketchfit(&["solve", &p, &path("p.stats"), "-o", &path("part.sfm"), "--report", &path("part.json")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(in_place("part.json"));
    assert!(dir.path("p.stats").exists());
    // The same arithmetic either way: the models are equal bit for bit.
    let load = |name: &str| sketchfit::model::Model::load(&dir.path(name)).unwrap();
    let (a, b, c) = (load("in.sfm"), load("copy.sfm"), load("part.sfm"));
    assert_eq!((&a.weights, &a.bias), (&b.weights, &b.bias));
    assert_eq!((&a.weights, &a.bias), (&c.weights, &c.bias));
    // The mixed-precision solve planned in place consumes the statistics only if it falls
    // back to the f64 factor: converged, nothing was written before the solve; fallen back,
    // the statistics went to the checkpoint just before the f64 factor consumed them. The
    // models are those of the same solves on a copy.
    let mixed = |name: &str, lambda: &str, extra: &[&str]| {
        let (model, json) = (path(&format!("{name}.sfm")), path(&format!("{name}.json")));
        let set = format!("ridge.lambda={lambda}");
        let args = ["train", &p, "-o", &model, "--set", "ridge.solver=\"cholesky_f32\"", "--set", &set];
        let out = sketchfit(&[&args[..], extra, &["--report", &json]].concat());
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let r = report(&dir.path(&format!("{name}.json")));
        assert!(!dir.path(&format!("{name}.sfm.ckpt")).exists());
        (load(&format!("{name}.sfm")), r["solve"]["in_place"].clone(), r["checkpointed_before_solve"].clone(), r)
    };
    let copy = ["--set", "run.checkpoint_every=0"];
    let (m, in_place, written, r) = mixed("mixed", "0.1", &[]);
    assert_eq!((in_place, written), (true.into(), false.into()), "{r}");
    assert_eq!(r["solve"]["refinement"]["fell_back"], false, "{r}");
    let (want, in_place, _, _) = mixed("mixed-copy", "0.1", &copy);
    assert_eq!(in_place, false);
    assert_eq!((&m.weights, &m.bias), (&want.weights, &want.bias));
    let (m, in_place, written, r) = mixed("fell", "1e-9", &[]);
    assert_eq!((in_place, written), (true.into(), true.into()), "{r}");
    assert_eq!(r["solve"]["refinement"]["fell_back"], true, "{r}");
    let (want, _, _, r) = mixed("fell-copy", "1e-9", &copy);
    assert_eq!(r["solve"]["refinement"]["fell_back"], true, "{r}");
    assert_eq!((&m.weights, &m.bias), (&want.weights, &want.bias));
}

#[test]
fn maps_whose_random_parameters_would_not_fit_are_refused_before_they_are_drawn() {
    // RFF at D = 2^20 over 4 inputs holds a 5 × 2^20 f32 matrix (20 MiB), drawn before
    // the plan: refused by a 16 MiB limit before anything is drawn, and counted in the
    // memory line where it fits.
    let dir = TempDir::new("map-params");
    four_columns(&dir.path("t.parquet"), 30, None, 0);
    let text = |dim: usize, limit: u64| {
        format!(
            "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"rff\"\ndim = {dim}\nsigma = 1.0\n\n[ridge]\nlambda = 0.1\n[run]\nmemory_limit_mib = {limit}\n"
        )
    };
    std::fs::write(dir.path("big.toml"), text(1 << 20, 16)).unwrap();
    let out = sketchfit(&["train", dir.path("big.toml").to_str().unwrap(), "-o", dir.path("b.sfm").to_str().unwrap()]);
    refused(&out, &["not enough memory", "random parameters"]);
    assert!(!stderr(&out).contains("memory: statistics"), "refused before the plan: {}", stderr(&out));
    std::fs::write(dir.path("small.toml"), text(1 << 12, 4096)).unwrap();
    let json = dir.path("s.json");
    let (p, m) = (dir.path("small.toml"), dir.path("s.sfm"));
    ok(&sketchfit(&["train", p.to_str().unwrap(), "-o", m.to_str().unwrap(), "--report", json.to_str().unwrap()]));
    let line = report(&json)["memory"]["line"].as_str().unwrap().to_string();
    assert!(line.contains("maps 0.1 MiB"), "{line}");
}

#[test]
fn an_in_range_dim_whose_gram_would_not_fit_never_allocates_it() {
    // 30 rows ≤ D/2 at D = 2^20: the plan keeps the rows (120 MiB) for the dual, and the
    // 4 TiB Gram it did not plan for must never be allocated.
    let dir = TempDir::new("huge-dim");
    four_columns(&dir.path("t.parquet"), 30, None, 0);
    let text = "[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\n[[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\ndim = 1048576\n\n[ridge]\nlambda = 0.1\n";
    std::fs::write(dir.path("p.toml"), text).unwrap();
    let model = dir.path("m.sfm");
    let json = dir.path("m.json");
    let out = sketchfit(&[
        "train",
        dir.path("p.toml").to_str().unwrap(),
        "-o",
        model.to_str().unwrap(),
        "--report",
        json.to_str().unwrap(),
    ]);
    ok(&out);
    let r = report(&json);
    assert_eq!(r["plan"]["mode"], "dual", "{r}");
    // The rows it kept, not the Gram: 30 × 2^20 f32.
    assert_eq!(r["statistics_bytes"].as_u64().unwrap(), 30 * (4 * (1 << 20) + 8 * 3), "{r}");
    let m = sketchfit::Model::load(&model).unwrap();
    assert_eq!(m.header.dim, 1 << 20);
    // With too little memory for the rows as well, refused before anything is allocated.
    let out = sketchfit(&[
        "train",
        dir.path("p.toml").to_str().unwrap(),
        "-o",
        dir.path("m2.sfm").to_str().unwrap(),
        "--set",
        "run.memory_limit_mib=64",
    ]);
    refused(&out, &["not enough memory"]);
}

#[test]
fn the_f32_factor_in_the_grams_own_memory_gives_the_f64_model_and_leaves_no_spill() {
    let dir = TempDir::new("spill");
    // More rows than D/2, so the dual does not take the run.
    write_parquet(&dir.path("t.parquet"), rings(4200, 8), 700);
    let text = "task = \"classification\"\n[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"a\", \"b\", \"c\", \"d\"]\nlabel = \"label\"\n[[stages]]\nkind = \"rff\"\ndim = 4096\nsigma = 1.5\n[ridge]\nlambda = 1.0\n[run]\nseed = 5\nthreads = 2\ngram = \"f32\"\nchunk_rows = 64\n";
    let p = dir.path("p.toml");
    std::fs::write(&p, text).unwrap();
    let train = |name: &str, set: &[&str]| {
        let (model, json) = (dir.path(&format!("{name}.sfm")), dir.path(&format!("{name}.json")));
        let mut args = vec!["train", p.to_str().unwrap(), "-o", model.to_str().unwrap()];
        args.extend(["--report", json.to_str().unwrap()]);
        args.extend(set);
        let out = sketchfit(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        (Model::load(&model).unwrap(), report(&json), stderr(&out))
    };
    let (f64m, r, _) = train("f64", &["--set", "ridge.solver=\"cholesky\""]);
    // What the run holds besides its solve: the f32 factor (34 MiB at D = 4096) does not
    // fit 16 MiB above it, the spilled solve's tile row and buffers (about 12 MiB) do.
    let m = &r["memory"];
    let resident = m["needed"].as_u64().unwrap() - m["solve"].as_u64().unwrap();
    let limit = format!("run.memory_limit_mib={}", (resident >> 20) + 16);
    let named = ["--set", "ridge.solver=\"cholesky_f32\""];
    let (spilled, r, err) = train("spilled", &[&named[..], &["--set", &limit]].concat());
    assert_eq!(r["plan"]["solve"], serde_json::json!({"path": "cholesky", "lambda": 1.0, "factor": "mixed_spilled"}));
    assert!(r["memory"]["line"].as_str().unwrap().contains("read back from the checkpoint"), "{r}");
    // The checkpoint written before the solve holds the Gram: it is read from there, not
    // written a second time.
    assert!(err.contains("read from the checkpoint") && err.contains("(block 'labeled')"), "{err}");
    assert_eq!(r["checkpointed_before_solve"], true, "{r}");
    let refinement = &r["solve"]["refinement"];
    assert_eq!(refinement["fell_back"], false, "{r}");
    assert!(refinement["residual"].as_f64().unwrap() <= 1e-12, "{r}");
    assert!(rel(&spilled.weights, &f64m.weights) < 1e-9, "{:e}", rel(&spilled.weights, &f64m.weights));
    assert!(rel(&spilled.bias, &f64m.bias) < 1e-9);
    let left: Vec<_> = std::fs::read_dir(dir.path(".")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().contains(".gram")), "the spill is removed: {left:?}");
    if cfg!(feature = "fault-injection") {
        // Killed inside that solve once the state is on disk (the test builds' hook), a
        // resume runs no pass, keeps the checkpoint it read as it is, and streams the Gram
        // from it: the uninterrupted run's bytes, and no spill written.
        let killed = dir.path("killed.sfm");
        let args =
            [&["train", p.to_str().unwrap(), "-o", killed.to_str().unwrap()][..], &named, &["--set", &limit]].concat();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sketchfit"))
            .args(&args)
            .env("SKETCHFIT_TEST_ABORT_IN_SOLVE", "1")
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "the hook must stop the run inside the solve");
        assert!(dir.path("killed.sfm.ckpt").exists() && !killed.exists());
        let out = sketchfit(&[&args[..], &["--resume"]].concat());
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stderr(&out).contains("read from the checkpoint"), "{}", stderr(&out));
        assert_eq!(std::fs::read(&killed).unwrap(), std::fs::read(dir.path("spilled.sfm")).unwrap());
        let left: Vec<_> = std::fs::read_dir(dir.path(".")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(
            !left.iter().any(|n| n.to_string_lossy().contains(".gram") || n.to_string_lossy().ends_with(".ckpt")),
            "{left:?}"
        );
    }
    // Without a checkpoint there is nowhere to spill: `auto` (which takes the f64 factor
    // at this D anyway) factors in place, the named path is refused before the pass.
    let no_checkpoint = ["--set", &limit, "--set", "run.checkpoint_every=0"];
    let (none, r, _) = train("none", &no_checkpoint);
    assert_eq!(r["plan"]["solve"], serde_json::json!({"path": "cholesky", "lambda": 1.0, "factor": "in_place"}), "{r}");
    assert!(rel(&none.weights, &f64m.weights) < 1e-12);
    let x = dir.path("x.sfm");
    let out =
        sketchfit(&[&["train", p.to_str().unwrap(), "-o", x.to_str().unwrap()][..], &named, &no_checkpoint].concat());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("memory"), "{}", stderr(&out));
}

#[test]
fn the_mixed_precision_solve_gives_the_f64_model_and_falls_back_saying_so() {
    let dir = TempDir::new("mixed");
    // 2,000 rows of D = 1024: primal statistics (the dual takes at most D/2 rows).
    write_parquet(&dir.path("t.parquet"), rings(2000, 8), 500);
    let text = |lambda: f64, solver: &str| {
        format!("task = \"classification\"\n[data]\ntrain = [\"t.parquet\"]\nfeatures = [\"a\", \"b\", \"c\", \"d\"]\nlabel = \"label\"\n[[stages]]\nkind = \"rff\"\ndim = 1024\nsigma = 1.5\n[ridge]\nlambda = {lambda:e}\nsolver = \"{solver}\"\n[run]\nseed = 5\nthreads = 2\ngram = \"f32\"\n")
    };
    let train = |name: &str, lambda: f64, solver: &str| {
        let p = dir.path(&format!("{name}.toml"));
        std::fs::write(&p, text(lambda, solver)).unwrap();
        let (model, json) = (dir.path(&format!("{name}.sfm")), dir.path(&format!("{name}.json")));
        let out = sketchfit(&[
            "train",
            p.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
            "--report",
            json.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        (Model::load(&model).unwrap(), report(&json), stderr(&out))
    };
    // A well-conditioned λ: refined to the tolerance; the model is the f64 Cholesky's.
    let (f64m, _, _) = train("f64", 1.0, "cholesky");
    let (mixed, r, err) = train("mixed", 1.0, "cholesky_f32");
    assert_eq!(r["plan"]["solve"]["factor"], "mixed", "{r}");
    assert_eq!(r["solve"]["path"], "cholesky_f32", "{r}");
    let refinement = &r["solve"]["refinement"];
    assert_eq!(refinement["fell_back"], false, "{r}");
    assert!(refinement["steps"].as_u64().unwrap() >= 1, "{r}");
    assert!(refinement["residual"].as_f64().unwrap() <= 1e-12, "{r}");
    assert!(err.contains("refined in"), "{err}");
    let header = mixed.header.refinement.expect("the header records the refinement");
    assert_eq!(serde_json::to_value(header).unwrap(), *refinement);
    assert_eq!(mixed.header.solver.as_deref(), Some("cholesky_f32"));
    assert!(rel(&mixed.weights, &f64m.weights) < 1e-9, "{:e}", rel(&mixed.weights, &f64m.weights));
    assert!(rel(&mixed.bias, &f64m.bias) < 1e-9);
    assert_eq!(f64m.header.refinement, None);
    // λ = 10⁻⁵, near the f64 factor's own floor (10⁻⁶ is refused): κ·2⁻²⁴ ≫ 1, so the
    // f64 factor solves, the run and the model say so, and it is the f64 model exactly.
    let (f64m, _, _) = train("f64-small", 1e-5, "cholesky");
    let (fell, r, err) = train("fell", 1e-5, "cholesky_f32");
    assert_eq!(r["solve"]["refinement"]["fell_back"], true, "{r}");
    assert!(err.contains("the f64 Cholesky solved instead"), "{err}");
    assert!(fell.header.refinement.is_some_and(|r| r.fell_back));
    assert_eq!(fell.weights, f64m.weights);
    assert_eq!(fell.bias, f64m.bias);
}
