//! Kernel parameters chosen in one pass (`stages.N.candidates`): every candidate's
//! held-out score equals a separate run with that value, the model is the best one's,
//! and what candidates cannot do is refused by key.

use sketchfit::pipeline::spec::PipelineSpec;
use sketchfit::{Model, Pipeline};

use crate::common::*;

const PIPELINE: &str = r#"
task = "classification"
[data]
train = ["TRAIN"]
features = ["a", "b", "c", "d"]
label = "label"
VALIDATION
[[stages]]
kind = "tensor_sketch"
degree = 2
dim = 32
[[stages]]
kind = "rff"
dim = 96
CANDIDATES
[ridge]
SELECT
[run]
seed = 4
threads = 2
"#;

/// `select`: `"cv = 3"` for k-fold, or `""` for the validation file.
fn spec(dir: &TempDir, candidates: &str, select: &str) -> PipelineSpec {
    let train = dir.path("train.parquet");
    if !train.exists() {
        write_parquet(&train, rings(900, 8), 300);
        write_parquet(&dir.path("val.parquet"), rings(300, 9), 300);
    }
    let text = PIPELINE
        .replace("TRAIN", &train.display().to_string())
        .replace("CANDIDATES", candidates)
        .replace("SELECT", select)
        .replace(
            "VALIDATION",
            &if select.is_empty() {
                format!("validation = [\"{}\"]", dir.path("val.parquet").display())
            } else {
                String::new()
            },
        );
    PipelineSpec::from_toml_str(&text, "candidates.toml").unwrap()
}

fn fit(spec: PipelineSpec) -> Model {
    let files = spec.data.train.clone();
    let mut p = Pipeline::from_toml_str(
        "task = \"regression\"\n[data]\ntrain = []\ntargets = [\"y\"]\n[[stages]]\nkind = \"identity\"\n",
        "x",
    )
    .unwrap();
    *p.spec_mut() = spec;
    p.fit_files(files).unwrap()
}

#[test]
fn each_candidate_scores_as_its_own_run_and_the_best_is_the_model() {
    let dir = TempDir::new("candidates");
    for (select, sigmas) in [("cv = 3", [0.25, 1.0, 4.0]), ("", [0.5, 2.0, 8.0])] {
        let base = spec(&dir, &format!("candidates = {{ sigma = {sigmas:?} }}"), select);
        let model = fit(base.clone());
        let table = model.header.candidates.clone().expect("the candidate table");
        assert_eq!(table.key, "stages.1.sigma");
        assert_eq!(table.values.len(), 3);
        let mut separate = Vec::new();
        for (i, s) in sigmas.iter().enumerate() {
            let m = fit(spec(&dir, &format!("sigma = {s}"), select));
            let t = m.header.validation.clone().unwrap();
            let j = t.grid.iter().position(|&l| l == t.chosen[0]).unwrap();
            assert_eq!(table.score[i], t.score[j], "candidate {i} ({select:?})");
            assert_eq!(table.lambda[i], t.chosen[0]);
            separate.push(m);
        }
        let best = table.chosen;
        assert!(table.score.iter().all(|&s| s <= table.score[best]), "{:?}", table.score);
        // The model is the chosen candidate's own run, bit for bit.
        assert_eq!(model.weights, separate[best].weights);
        assert_eq!(model.header.stages, separate[best].header.stages);
        assert!(model.header.pipeline.get("candidates").is_some(), "the header records the candidates asked");
    }
}

#[test]
fn candidates_need_a_held_out_metric_one_process_and_one_key() {
    let dir = TempDir::new("candidates-keys");
    let err =
        |text: &str| PipelineSpec::from_toml_str(&text.replace("VALIDATION", ""), "c.toml").unwrap_err().to_string();
    let gcv = PIPELINE.replace("CANDIDATES", "candidates = { sigma = [1.0, 2.0] }").replace("SELECT", "");
    assert!(err(&gcv).contains("stages.1.candidates: candidates are scored on held-out rows"), "{}", err(&gcv));
    let two = PIPELINE
        .replace("CANDIDATES", "candidates = { sigma = [1.0, 2.0], dim = [8, 16] }")
        .replace("SELECT", "cv = 3");
    assert!(err(&two).contains("vary one key at a time"));
    let one = PIPELINE.replace("CANDIDATES", "candidates = { sigma = [1.0] }").replace("SELECT", "cv = 3");
    assert!(err(&one).contains("give 2 to 16 values"));
    let bad = PIPELINE.replace("CANDIDATES", "candidates = { sigma = [1.0, -2.0] }").replace("SELECT", "cv = 3");
    assert!(err(&bad).contains("stages.1.candidates.sigma"), "{}", err(&bad));
    let unknown = PIPELINE.replace("CANDIDATES", "candidates = { sigmaa = [1.0, 2.0] }").replace("SELECT", "cv = 3");
    assert!(err(&unknown).contains("stages.1.candidates.sigmaa"), "{}", err(&unknown));
    // One process only: a shard would have to carry every candidate's map.
    let s = spec(&dir, "candidates = { sigma = [1.0, 2.0] }", "cv = 3");
    let files = s.data.train.clone();
    let mut p = Pipeline::classification("label");
    *p.spec_mut() = s;
    let e = p.accumulate_files(files, (0, 1)).unwrap_err().to_string();
    assert!(e.contains("candidates run in one process"), "{e}");
}

#[test]
fn landmark_candidates_each_fit_on_their_own_runs_sample_so_the_chosen_model_is_its_own_run() {
    // `run.sample_rows` below the larger `dim`: a Nyström stage enlarges the pre-pass sample
    // to its landmarks, so each candidate's sample is as large as its own run's.
    let dir = TempDir::new("candidates-nystrom");
    let landmarks = |dim: &str| {
        let nystrom = format!("[[stages]]\nkind = \"nystrom\"\nkernel = \"gaussian\"\nsigma = 1.5\n{dim}\n");
        let s = spec(&dir, "", "");
        let text = PIPELINE
            .replace("TRAIN", &s.data.train[0].display().to_string())
            .replace("VALIDATION", &format!("validation = [\"{}\"]", dir.path("val.parquet").display()))
            .replace("[[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\ndim = 32\n[[stages]]\nkind = \"rff\"\ndim = 96\nCANDIDATES\n", &nystrom)
            .replace("SELECT", "")
            .replace("seed = 4", "seed = 4\nsample_rows = 24");
        PipelineSpec::from_toml_str(&text, "nystrom-candidates.toml").unwrap()
    };
    let model = fit(landmarks("candidates = { dim = [16, 96] }"));
    let table = model.header.candidates.clone().expect("the candidate table");
    let own = fit(landmarks(&format!("dim = {}", [16, 96][table.chosen])));
    assert_eq!(model.header.stages, own.header.stages, "the chosen candidate's landmarks are its own run's");
    assert_eq!(model.weights, own.weights);
    assert_eq!(model.header.lambdas, own.header.lambdas);
    // And the other candidate's score is its own run's too.
    let other = 1 - table.chosen;
    let m = fit(landmarks(&format!("dim = {}", [16, 96][other])));
    let t = m.header.validation.clone().unwrap();
    assert_eq!(table.score[other], t.score[t.grid.iter().position(|&l| l == t.chosen[0]).unwrap()]);
}
