//! The planner's rules, one case each: every refusal the checked pipeline and the plan
//! make (naming its key), and every decision `auto` takes (path, in place, dual, PCA
//! method, refit).

use super::memory::available_memory;
use super::*;
use crate::pipeline::report::Reporter;
use crate::pipeline::spec::PipelineSpec;

const BASE: &str = "task = \"classification\"\n[[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\ndim = 256\n";
const DATA: &str = "[data]\ntrain = [\"t\"]\nlabel = \"y\"\n";

/// The pipeline text: `BASE`, its `[data]` (unless `extra` gives one: it names the
/// training files as `train = ["t"]`), then `extra`.
fn text(extra: &str) -> String {
    let extra = extra.replace("[data]\n", "[data]\ntrain = [\"t\"]\n");
    if extra.contains("[data]") {
        format!("{BASE}{extra}\n")
    } else {
        format!("{BASE}{DATA}{extra}\n")
    }
}

fn spec(extra: &str) -> std::result::Result<CheckedPipeline, Error> {
    PipelineSpec::from_toml_str(&text(extra), "rules.toml").and_then(|s| s.check())
}

fn refused(extra: &str) -> (String, String) {
    match spec(extra) {
        Err(Error::Config { key, message, .. }) => (key, message),
        Err(e) => panic!("{extra}: not a keyed refusal: {e}"),
        Ok(_) => panic!("{extra}: accepted"),
    }
}

fn facts(rows: u64, dim: usize) -> Facts {
    Facts {
        d: 8,
        dims: vec![dim],
        stage_dims: vec![dim],
        outputs: 3,
        labeled_rows: rows,
        unlabeled_rows: 0,
        files: 1,
        map_bytes: 0,
        fetch_bytes: 0,
    }
}

fn plan(extra: &str, facts: &Facts, opts: &RunOptions) -> Result<Plan> {
    let checked = spec(extra)?;
    let (plan, memory) = Plan::decide(&checked, facts, opts)?;
    memory.check()?;
    Ok(plan)
}

#[test]
fn every_rule_the_file_alone_decides_refuses_naming_its_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("[data]\nlabel=\"y\"\nfeatures=[\"a\"]\nfeature_list=\"f\"", "data.feature_list", "either"),
        ("[pca]\ncomponents = 4\nvariance = 0.9", "pca", "either components or variance"),
        ("[pca]\ncomponents = 0", "pca.components", "≥ 1"),
        ("[pca]\nvariance = 1.5", "pca.variance", "(0, 1]"),
        ("[pca]\nvariance = 0.9\nmethod = \"subspace\"", "pca.method", "whole spectrum"),
        ("[pca]\ncomponents = 4\ntolerance = 2.0", "pca.tolerance", "(0, 1)"),
        ("[ridge]\nlambda = -1.0", "ridge.lambda", "≥ 0"),
        ("[ridge]\nlambda = \"loo\"", "ridge.lambda", "\"gcv\""),
        ("[ridge]\nlambda = 1.0\nper_output = true", "ridge.per_output", "gcv"),
        ("[pca]\nper_stage = [4]", "pca.per_stage", "passes = 2"),
        ("[ridge]\ncv = 11", "ridge.cv", "2 to 10"),
        ("[ridge]\ncv = 3\n[pca]\ncomponents = 4", "ridge.cv", "all D features"),
        ("[data]\nlabel=\"y\"\nvalidation=[\"v.parquet\"]\n[ridge]\ncv = 3", "ridge.cv", "not both"),
        ("[data]\nlabel=\"y\"\nunlabeled=[\"u.parquet\"]\n[ridge]\ncv = 3", "ridge.cv", "every row labeled"),
        ("[ridge]\ncv = 3\nlambda = 1.0", "ridge.cv", "from the grid"),
        ("[ridge]\ncv = 3\nper_output = true", "ridge.cv", "one shared λ"),
        ("[ridge]\ncv = 3\n[solver]\nkind = \"lasso\"\nlambda = 0.1", "ridge.cv", "for ridge"),
        ("[ridge]\nmetric = \"log_loss\"\ncodes = \"ecoc\"\ncode_length = 0", "ridge.code_length", "≥ 1"),
        ("[ridge]\ncode_file = \"c.txt\"", "ridge.code_file", "ecoc"),
        ("[solver]\nl2 = 0.5", "solver.kind", "lasso, elastic_net"),
        ("[solver]\nkind = \"lasso\"\nlambda = 0.0", "solver.lambda", "> 0"),
        ("[solver]\nkind = \"lasso\"", "solver.lambda", "validation"),
        ("[solver]\nkind = \"elastic_net\"\nlambda = 0.1\nl2 = -1.0", "solver.l2", "≥ 0"),
        ("[solver]\nkind = \"lasso\"\nlambda = 0.1\nl2 = 1.0", "solver.l2", "the lasso has none"),
        ("[solver]\nkind = \"lasso\"\nlambda = 0.1\npath = 1", "solver.path", "2 to 1000"),
        ("[solver]\nkind = \"lasso\"\nlambda = 0.1\nratio = 1.0", "solver.ratio", "(0, 1)"),
        ("[solver]\nkind = \"lasso\"\nlambda = 0.1\ntolerance = 0.0", "solver.tolerance", "(0, 1)"),
        ("[solver]\nkind = \"lasso\"\nlambda = 0.1\nmax_sweeps = 0", "solver.max_sweeps", "≥ 1"),
        ("[pca]\ncomponents = 4\n[solver]\nkind = \"group_lasso\"\nlambda = 0.1", "solver.kind", "raw basis"),
        (
            "[data]\nlabel=\"y\"\nunlabeled=[\"u.parquet\"]\n[solver]\nkind = \"lasso\"\nlambda = 0.1",
            "data.unlabeled",
            "PCA",
        ),
        ("[pca]\ncomponents = 4\n[ridge]\nlambda = 1.0\nsolver = \"cholesky\"", "ridge.solver", "PCA"),
        ("[ridge]\nsolver = \"cholesky\"", "ridge.solver", "fixed ridge.lambda > 0"),
        ("[pca]\ncomponents = 4\n[ridge]\nlambda = 1.0\nsolver = \"cholesky_f32\"", "ridge.solver", "PCA"),
        ("[ridge]\nlambda = 0.0\nsolver = \"cholesky_f32\"", "ridge.solver", "\"cholesky_f32\" needs a fixed"),
        ("[pca]\ncomponents = 4\n[ridge]\nsolver = \"tridiagonal\"", "ridge.solver", "PCA"),
        ("[ridge]\nlambda = 0.0\nsolver = \"tridiagonal\"", "ridge.solver", "pseudo-inverse"),
        ("[pca]\ncomponents = 4\n[ridge]\nsolver = \"dual\"", "ridge.solver", "at most D/2"),
        ("[ridge]\nlambda = 0.0\nsolver = \"dual\"", "ridge.solver", "at most D/2"),
        ("[run]\nchunk_rows = 0", "run.chunk_rows", "from 1"),
        ("[run]\nthreads = 2000", "run.threads", "1024"),
    ];
    for (extra, key, says) in cases {
        let (k, m) = refused(extra);
        assert_eq!(&k, key, "{extra}: {m}");
        assert!(m.contains(says), "{extra}: '{m}' does not say '{says}'");
    }
    // The task's own columns.
    // The task's own columns, the stages, and the two-pass keys.
    let stage = "[[stages]]\nkind = \"identity\"\n";
    let reg = "task = \"regression\"\n";
    let train = "[data]\ntrain = [\"t\"]\n";
    for (text, says) in [
        (format!("{stage}{train}"), "data.label: classification needs a label column"),
        (format!("{stage}{train}targets = [\"t\"]\nlabel = \"y\"\n"), "data.targets: targets are for"),
        (format!("{reg}{stage}{train}"), "data.targets: regression needs"),
        (format!("{reg}{stage}{train}targets = [\"t\"]\nlabel = \"y\"\n"), "data.label: label is for"),
        (format!("{train}label = \"y\"\n"), "stages: no sketch stages"),
        (format!("passes = 2\n{BASE}{DATA}"), "pca: two-pass mode needs a PCA size"),
        (format!("passes = 2\n{BASE}{DATA}[pca]\nper_stage = [4, 4]\n"), "pca.per_stage: has 2 entries for 1 stages"),
        (format!("passes = 2\n{BASE}{DATA}[pca]\nper_stage = [0]\n"), "pca.per_stage: every entry"),
        (
            format!("passes = 2\n{BASE}{DATA}[pca]\ncomponents = 4\n[solver]\nkind = \"lasso\"\nlambda = 0.1\n"),
            "solver.kind: the sparse learners run on one pass",
        ),
        (format!("{reg}{stage}{train}targets = [\"t\"]\n[ridge]\nmetric = \"accuracy\"\n"), "ridge.metric"),
        (format!("{reg}{stage}{train}targets = [\"t\"]\n[ridge]\ncodes = \"ecoc\"\n"), "ridge.codes"),
        (format!("{reg}{stage}{train}targets = [\"t\"]\nnull_labels = \"unlabeled\"\n"), "data.null_labels"),
    ] {
        let e = PipelineSpec::from_toml_str(&text, "t.toml").unwrap_err();
        assert!(e.to_string().contains(says), "{text}: {e}");
    }
}

#[test]
fn candidates_need_held_out_rows_one_pass_ridge_and_the_grid() {
    let cand = "[[stages]]\nkind = \"rff\"\ndim = 64\ncandidates = { sigma = [0.5, 1.0] }\n";
    let with =
        |extra: &str| PipelineSpec::from_toml_str(&text(extra).replace(BASE, &format!("{BASE}{cand}")), "c.toml");
    let key = |r: std::result::Result<PipelineSpec, Error>| match r {
        Err(Error::Config { key, .. }) => key,
        other => panic!("not refused by key: {other:?}"),
    };
    assert_eq!(key(with("")), "stages.1.candidates");
    assert_eq!(key(with("[ridge]\ncv = 3\nlambda = 1.0\n")), "ridge.cv");
    assert_eq!(key(with("[data]\nlabel=\"y\"\nvalidation=[\"v\"]\n[ridge]\nlambda = 1.0\n")), "ridge.lambda");
    assert_eq!(key(with("[data]\nlabel=\"y\"\nvalidation=[\"v\"]\nunlabeled=[\"u\"]\n")), "stages.1.candidates");
    assert_eq!(
        key(with("[data]\nlabel=\"y\"\nvalidation=[\"v\"]\n[solver]\nkind = \"lasso\"\n")),
        "stages.1.candidates"
    );
    // Accepted with k-fold; refused where its statistics would go to parts.
    let ok = with("[ridge]\ncv = 3\n").unwrap().check().unwrap();
    assert_eq!(ok.candidates.as_ref().map(|c| c.pipelines.len()), Some(2));
    let facts = Facts { dims: vec![64, 64], stage_dims: vec![64, 256], ..facts(1000, 64) };
    for opts in [
        RunOptions { keep_statistics: true, ..RunOptions::default() },
        RunOptions { from_parts: true, ..RunOptions::default() },
    ] {
        match Plan::decide(&ok, &facts, &opts) {
            Err(Error::Config { key, message, .. }) => {
                assert_eq!(key, "stages.1.candidates");
                assert!(message.contains("one process"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    let (plan, _) = Plan::decide(&ok, &facts, &RunOptions::default()).unwrap();
    assert!(
        matches!(&plan, Plan::Candidates { plans } if plans.len() == 2 && plans.iter().all(|p| matches!(p, Plan::KFold(_))))
    );
}

#[test]
fn auto_takes_the_cheapest_path_that_answers() {
    let opts = RunOptions::default();
    let f = facts(100_000, 256);
    let path = |extra: &str| plan(extra, &f, &opts).unwrap().path();
    assert_eq!(path("[ridge]\nlambda = 0.1"), SolvePath::Cholesky);
    assert_eq!(path(""), SolvePath::Tridiagonal);
    assert_eq!(path("[ridge]\nlambda = 0.0"), SolvePath::Eigen);
    assert_eq!(path("[pca]\ncomponents = 8\n[ridge]\nlambda = 0.1"), SolvePath::Eigen);
    assert_eq!(path("[data]\nlabel=\"y\"\nnull_labels = \"unlabeled\"\n[ridge]\nlambda = 0.1"), SolvePath::Eigen);
    assert_eq!(path("[ridge]\nlambda = 0.1\nsolver = \"eigen\""), SolvePath::Eigen);
    // Held-out selection refits at a shared λ by one Cholesky; per output, on the grid.
    let held = "[data]\nlabel=\"y\"\nvalidation=[\"v\"]\n";
    match plan(held, &f, &opts).unwrap() {
        Plan::Primal(p) => assert_eq!(p.refit.map(|r| r.path()), Some(SolvePath::Cholesky)),
        other => panic!("{other:?}"),
    }
    match plan(&format!("{held}[ridge]\nper_output = true\n"), &f, &opts).unwrap() {
        Plan::Primal(p) => assert_eq!(p.refit.map(|r| r.path()), Some(SolvePath::Tridiagonal)),
        other => panic!("{other:?}"),
    }
    match plan(&format!("{held}[ridge]\nrefit = false\n"), &f, &opts).unwrap() {
        Plan::Primal(p) => assert_eq!(p.refit, None),
        other => panic!("{other:?}"),
    }
    // With an f32 Gram at large D the refit's one factor is the mixed-precision one, as a
    // fixed λ's is; where only the f64 factor in place fits, that one.
    let refit = |extra: &str, dim: usize| match plan(&format!("{held}{extra}"), &facts(100_000, dim), &opts).unwrap() {
        Plan::Primal(p) => p.refit.map(|r| r.path()),
        other => panic!("{other:?}"),
    };
    assert_eq!(refit("[run]\ngram = \"f32\"", 8192), Some(SolvePath::CholeskyF32));
    assert_eq!(refit("[run]\ngram = \"f32\"", 4096), Some(SolvePath::Cholesky));
    assert_eq!(refit("", 8192), Some(SolvePath::Cholesky));
}

#[test]
fn the_dual_takes_few_rows_unless_statistics_are_the_product() {
    let gcv = "";
    let dual = |rows: u64, opts: &RunOptions| plan(gcv, &facts(rows, 256), opts).map(|p| p.keeps_rows());
    let plain = RunOptions::default();
    assert!(dual(128, &plain).unwrap(), "128 rows ≤ D/2 = 128");
    assert!(!dual(129, &plain).unwrap());
    assert!(!dual(1, &plain).unwrap(), "one row solves nothing");
    assert!(!dual(100, &RunOptions { keep_statistics: true, ..plain.clone() }).unwrap());
    assert!(!dual(100, &RunOptions { from_parts: true, ..plain.clone() }).unwrap());
    // Asked for where it cannot run: refused, naming the key.
    let asked = "[ridge]\nsolver = \"dual\"";
    for (rows, opts) in [(129, plain.clone()), (100, RunOptions { keep_statistics: true, ..plain.clone() })] {
        match plan(asked, &facts(rows, 256), &opts) {
            Err(Error::Config { key, message, .. }) => {
                assert_eq!(key, "ridge.solver");
                assert!(message.contains("at most D/2"), "{message}");
            }
            other => panic!("{rows}: {other:?}"),
        }
    }
    assert!(plan(asked, &facts(100, 256), &plain).unwrap().keeps_rows());
    // Validation or PCA questions are not the dual's.
    assert!(!plan("[pca]\ncomponents = 4", &facts(100, 256), &plain).unwrap().keeps_rows());
}

#[test]
fn a_fixed_lambda_factors_in_place_where_a_copy_does_not_fit_or_the_statistics_are_on_disk() {
    let fixed = "[ridge]\nlambda = 0.1\n";
    let in_place = |extra: &str, dim: usize, opts: &RunOptions| {
        plan(&format!("{fixed}{extra}"), &facts(100_000, dim), opts).unwrap().factors_in_place()
    };
    let plain = RunOptions::default();
    // D = 4096: a Gram of 64 MiB and a copy of as much.
    assert!(!in_place("[run]\nmemory_limit_mib = 1000", 4096, &plain));
    assert!(in_place("[run]\nmemory_limit_mib = 110\nchunk_rows = 64", 4096, &plain));
    // On disk, a copy past 256 MiB is not worth its memory (D = 4096: 64 MiB; 16384: 1 GiB).
    let disk = RunOptions { stats_on_disk: true, ..plain.clone() };
    assert!(!in_place("", 4096, &disk));
    assert!(in_place("", 16384, &disk));
    assert!(!in_place("", 16384, &plain) || available_memory().is_some_and(|m| m < 3 << 30));
}

#[test]
fn the_mixed_precision_factor_is_asked_for_or_taken_where_the_gram_is_f32_and_large() {
    let plain = RunOptions::default();
    let fixed = "[ridge]\nlambda = 0.1\n";
    let path = |extra: &str, dim: usize| plan(&format!("{fixed}{extra}"), &facts(100_000, dim), &plain).unwrap().path();
    assert_eq!(path("solver = \"cholesky_f32\"", 256), SolvePath::CholeskyF32);
    assert_eq!(path("[run]\ngram = \"f32\"", 8192), SolvePath::CholeskyF32);
    assert_eq!(path("[run]\ngram = \"f32\"", 4096), SolvePath::Cholesky, "small D: both factor in under a second");
    assert_eq!(path("", 8192), SolvePath::Cholesky, "an f64 Gram keeps the f64 factor");
    // D = 8192: statistics of 256 MiB, a copy as much, the f32 factor half that. At
    // 400 MiB only the f64 factor in place fits: auto takes it, a named path is refused.
    let tight = "[run]\ngram = \"f32\"\nmemory_limit_mib = 400\nchunk_rows = 64";
    assert_eq!(path(tight, 8192), SolvePath::Cholesky);
    let named = plan(&format!("{fixed}solver = \"cholesky_f32\"\n{tight}"), &facts(100_000, 8192), &plain);
    assert!(matches!(named, Err(Error::Memory { .. })), "{named:?}");
    // At 500 MiB a copy does not fit and the f32 factor does: in place, and the line
    // states the factor's bytes, not 0.
    let checked =
        spec(&format!("{fixed}solver = \"cholesky_f32\"\n[run]\nmemory_limit_mib = 500\nchunk_rows = 64")).unwrap();
    let (p, memory) = Plan::decide(&checked, &facts(100_000, 8192), &plain).unwrap();
    assert!(p.factors_in_place(), "{}", memory.line);
    let factor = 4 * crate::stats::TriGram::len_for(8192) as u64;
    assert!(memory.solve >= factor && memory.solve < factor + (8 << 20), "{}", memory.line);
    assert!(memory.line.contains("cholesky_f32 path, in place"), "{}", memory.line);
    memory.check().unwrap();
    // Beside a local checkpoint, where the f32 factor does not fit beside the statistics,
    // it takes the Gram's own memory (the Gram spilled to disk), named or taken by auto;
    // beside a checkpoint in an object store there is nowhere to spill: as without one.
    let local = RunOptions { stats_on_disk: true, checkpoint: Some("m.sfm.ckpt".into()), ..plain.clone() };
    let remote = RunOptions { checkpoint: Some("s3://b/m.sfm.ckpt".into()), ..local.clone() };
    for extra in ["", "solver = \"cholesky_f32\"\n"] {
        let checked = spec(&format!("{fixed}{extra}{tight}")).unwrap();
        let (p, memory) = Plan::decide(&checked, &facts(100_000, 8192), &local).unwrap();
        assert!((p.path(), p.factors_in_place(), p.spills()) == (SolvePath::CholeskyF32, true, true), "{p:?}");
        assert_eq!(memory.solve, SolvePath::spilled_bytes(8192, 3), "{}", memory.line);
        assert!(memory.solve < 24 << 20 && memory.line.contains("read back from the checkpoint"), "{}", memory.line);
        memory.check().unwrap();
    }
    let remote_auto = plan(&format!("{fixed}{tight}"), &facts(100_000, 8192), &remote).unwrap();
    assert_eq!((remote_auto.path(), remote_auto.spills()), (SolvePath::Cholesky, false));
    // Where the f32 factor fits beside the statistics, nothing is spilled.
    let roomy = format!("{fixed}[run]\ngram = \"f32\"\nmemory_limit_mib = 2000");
    assert!(!plan(&roomy, &facts(100_000, 8192), &local).unwrap().spills());
}

#[test]
fn a_plan_that_does_not_fit_is_refused_before_the_pass_with_its_memory_stated() {
    let checked = spec("[run]\nmemory_limit_mib = 8\n").unwrap();
    let (plan, memory) = Plan::decide(&checked, &facts(100_000, 4096), &RunOptions::default()).unwrap();
    assert_eq!(plan.path(), SolvePath::Tridiagonal);
    assert!(
        memory.line.starts_with("memory: statistics ") && memory.line.contains("tridiagonal path"),
        "{}",
        memory.line
    );
    assert_eq!(memory.limit, Some(8 << 20));
    match memory.check() {
        Err(Error::Memory { needed, limit, hint }) => {
            assert!(needed > limit && hint.contains("fix ridge.lambda"), "{hint}");
        }
        other => panic!("{other:?}"),
    }
    // The report records the line, the plan and the refusal's memory.
    let mut report = Reporter::silent();
    report.say(memory.line.clone());
    assert_eq!(report.report.lines, vec![memory.line.clone()]);
}

/// The memory plan of `extra`'s pipeline over 100,000 rows at D = 256 beside maps of
/// `map_bytes` already built.
fn memory_beside_maps(extra: &str, map_bytes: u64) -> MemoryPlan {
    let f = Facts { map_bytes, ..facts(100_000, 256) };
    Plan::decide(&spec(extra).unwrap(), &f, &RunOptions::default()).unwrap().1
}

#[test]
fn a_model_whose_maps_are_large_counts_its_write_and_read_back() {
    // A Nyström map of gigabytes beside a small Gram: writing the model (its arrays
    // encoded, decoded and rebuilt, beside the map) is the run's peak, and is what the
    // limit is checked against.
    let memory = memory_beside_maps("", 1 << 30);
    assert!(memory.line.ends_with("the model's write and read-back 3072.0 MiB beside the maps"), "{}", memory.line);
    assert!(memory.needed >= 4 << 30, "{}", memory.needed);
    // Without such a map the pass is the peak, and the line says nothing of the write.
    let small = memory_beside_maps("", 0);
    assert!(!small.line.contains("read-back") && small.needed < 1 << 30, "{}", small.line);
}

#[test]
fn the_machines_memory_counts_the_maps_already_built_once() {
    // The plan's total counts the maps, which are resident when it is made and so are
    // missing from the machine's available memory: the default limit adds them back.
    let memory = memory_beside_maps("", 1 << 40);
    if available_memory().is_some() {
        assert!(memory.limit.is_some_and(|l| l >= 1 << 40), "{:?}", memory.limit);
    }
    // A limit the file sets is the run's whole budget, maps included.
    let memory = memory_beside_maps("[run]\nmemory_limit_mib = 4000\n", 1 << 40);
    assert_eq!(memory.limit, Some(4000 << 20));
    assert!(memory.check().is_err());
}

#[test]
fn block_krylov_takes_few_components_of_a_large_map() {
    let opts = RunOptions::default();
    let pca = |e: usize, dim: usize, method: &str| match plan(
        &format!("[pca]\ncomponents = {e}\nmethod = \"{method}\"\n"),
        &facts(100_000, dim),
        &opts,
    )
    .unwrap()
    {
        Plan::Primal(p) => p.pca.and_then(|p| p.krylov),
        other => panic!("{other:?}"),
    };
    assert_eq!(pca(256, 2048, "auto"), Some(256), "E = D/8 from D = 2048");
    assert_eq!(pca(257, 2048, "auto"), None);
    assert_eq!(pca(64, 1024, "auto"), None, "below D = 2048 dense is exact and fast");
    assert_eq!(pca(64, 1024, "subspace"), Some(64));
    assert_eq!(pca(64, 4096, "dense"), None);
}

#[test]
fn a_pca_counts_its_own_memory_block_krylov_a_basis_and_two_passes_each_stages_decomposition() {
    let opts = RunOptions::default();
    let dim = 16384;
    let dense_bytes = (3 * 8 * dim * dim) as u64;
    // 1024 of 16,384 components by block Krylov: a basis of about 3E columns, where the
    // dense decomposition's three D × D matrices would be 6 GiB, which must not refuse a
    // Krylov run.
    let krylov = spec("[pca]\ncomponents = 1024\n[run]\nmemory_limit_mib = 4000\n").unwrap();
    let (plan, memory) = Plan::decide(&krylov, &facts(100_000, dim), &opts).unwrap();
    assert!(matches!(&plan, Plan::Primal(p) if p.pca.and_then(|p| p.krylov) == Some(1024)), "{plan:?}");
    assert!(memory.line.contains("MiB (block Krylov PCA of 1024 components)"), "{}", memory.line);
    let basis = (2 * 8 * dim * 3 * 1024) as u64;
    assert!(memory.solve > basis && memory.solve < dense_bytes / 3, "{}", memory.solve);
    memory.check().unwrap();
    // Refused where even the basis does not fit, naming what to lower.
    let small = spec("[pca]\ncomponents = 1024\n[run]\nmemory_limit_mib = 2000\n").unwrap();
    let (_, memory) = Plan::decide(&small, &facts(100_000, dim), &opts).unwrap();
    match memory.check() {
        Err(Error::Memory { hint, .. }) => assert!(hint.starts_with("lower pca.components"), "{hint}"),
        other => panic!("{other:?}"),
    }
    let dense = spec("[pca]\ncomponents = 1024\nmethod = \"dense\"\n[run]\nmemory_limit_mib = 4000\n").unwrap();
    let (_, memory) = Plan::decide(&dense, &facts(100_000, dim), &opts).unwrap();
    assert_eq!(memory.solve, dense_bytes);
    assert!(matches!(memory.check(), Err(Error::Memory { .. })));
    // Two passes decompose stage one's 4096 × 4096 covariance (densely, as asked) before
    // pass two's solve of 4 components: that decomposition is the solve's peak.
    let text = format!("passes = 2\n{BASE}{DATA}[pca]\ncomponents = 4\nmethod = \"dense\"\n");
    let two = PipelineSpec::from_toml_str(&text, "rules.toml").and_then(|s| s.check()).unwrap();
    let (plan, memory) = Plan::decide(&two, &facts(100_000, 4096), &opts).unwrap();
    assert!(matches!(plan, Plan::TwoPass(_)), "{plan:?}");
    assert!(memory.solve >= (3 * 8 * 4096 * 4096) as u64, "{}", memory.line);
    assert!(memory.line.contains("or a stage's PCA before it"), "{}", memory.line);
}

#[test]
fn chunks_stay_within_128_mib_of_features_but_never_below_one_product_block() {
    let block = crate::stats::PRODUCT_ROWS;
    // The 128 MiB cap: 8,192 rows at D = 4,096, 2,048 at 16,384.
    assert_eq!(chunk_rows_for(100_000, 4096, false), 8192);
    assert_eq!(chunk_rows_for(100_000, 16_384, false), 2048);
    // Past D = 16,384 the cap would give fewer rows than a product block: the floor holds.
    for dim in [32_768, 65_536, 131_072] {
        assert_eq!(chunk_rows_for(8192, dim, false), block, "D = {dim}");
    }
    // A smaller `run.chunk_rows` is the user's, and a run keeping its rows takes 64.
    assert_eq!(chunk_rows_for(300, 65_536, false), 300);
    assert_eq!(chunk_rows_for(8192, 65_536, true), 64);
    assert_eq!(chunk_rows_for(0, 4096, false), 1);
}

/// The plan and its memory at a limit of `mib` MiB.
fn at_limit(extra: &str, dim: usize, mib: u64, opts: &RunOptions) -> (Plan, MemoryPlan) {
    let checked = spec(&format!("{extra}[run]\nmemory_limit_mib = {mib}\n")).unwrap();
    Plan::decide(&checked, &facts(100_000, dim), opts).unwrap()
}

#[test]
fn copy_in_place_and_spill_are_chosen_by_the_line_the_run_prints_at_their_exact_boundaries() {
    let fixed = "[ridge]\nlambda = 0.1\n";
    let plain = RunOptions::default();
    let local = RunOptions { stats_on_disk: true, checkpoint: Some("m.sfm.ckpt".into()), ..plain.clone() };
    let mib_of = |bytes: u64| bytes.div_ceil(1 << 20);
    for (extra, dim, opts) in [
        (fixed.to_string(), 2048, &plain),
        (format!("{fixed}solver = \"cholesky_f32\"\n"), 4096, &plain),
        (format!("{fixed}solver = \"cholesky_f32\"\n"), 4096, &local),
        ("[ridge]\nlambda = 0.1\n".to_string(), 4096, &local),
    ] {
        // Each option the planner can take, from the most memory to the least: the
        // smallest limit that runs it runs it, and one MiB less takes the next or refuses.
        let mut mib = 1 << 30;
        let mut taken = Vec::new();
        loop {
            let (p, memory) = at_limit(&extra, dim, mib, opts);
            let needed = mib_of(memory.needed);
            let (p_at, m_at) = at_limit(&extra, dim, needed, opts);
            assert_eq!(p_at, p, "{extra} D = {dim}: the smallest limit of {needed} MiB takes the same plan");
            m_at.check().unwrap_or_else(|e| panic!("{extra} D = {dim} at {needed} MiB: {e}: {}", m_at.line));
            taken.push((p.path(), p.factors_in_place(), p.spills(), needed));
            let (below, m_below) = at_limit(&extra, dim, needed - 1, opts);
            if m_below.check().is_err() {
                // Refused with the figure of the least plan, which is the one just taken.
                assert_eq!(below, p, "{extra} D = {dim}: past the last option the least is kept");
                assert!(matches!(m_below.check(), Err(Error::Memory { needed: n, .. }) if n == memory.needed));
                break;
            }
            assert_ne!(below, p, "{extra} D = {dim}: one MiB less than {needed} took the same plan and fitted");
            mib = needed - 1;
        }
        assert!(taken.len() >= 2, "{extra} D = {dim}: a copy and then in place: {taken:?}");
        assert!(!taken[0].1 && taken.last().is_some_and(|t| t.1), "{taken:?}");
        // Every limit between fits exactly when it is at least the least plan's need.
        let least = taken.last().map_or(0, |t| t.3);
        for mib in least.saturating_sub(3)..taken[0].3 + 3 {
            let (_, memory) = at_limit(&extra, dim, mib, opts);
            assert_eq!(memory.check().is_ok(), mib >= least, "{extra} D = {dim} at {mib} MiB: {}", memory.line);
        }
    }
}

#[test]
fn the_gram_precision_travels_in_the_plan_of_every_mode_that_accumulates_a_gram() {
    let f = facts(100_000, 256);
    let opts = RunOptions::default();
    for extra in ["", "[ridge]\nlambda = 0.1", "[ridge]\ncv = 3", "[pca]\ncomponents = 8\n[ridge]\nlambda = 0.1"] {
        for (key, want) in [("f32", crate::stats::Precision::F32), ("f64", crate::stats::Precision::F64)] {
            let p = plan(&format!("{extra}\n[run]\ngram = \"{key}\""), &f, &opts).unwrap();
            assert_eq!(p.gram(), want, "{extra}: {p:?}");
        }
    }
}
