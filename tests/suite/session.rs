//! The engine value: runs on several threads of one process, each in its own session,
//! give the models they give alone and see only their own options, secrets and files.

use std::path::Path;
use std::sync::Barrier;

use sketchfit::remote::Layer;
use sketchfit::{Model, Pipeline, Session};

use crate::common::{repo, TempDir};

const PIPELINE: &str = r#"
task = "classification"
[data]
train = []
features = ["px*"]
label = "label"
[[stages]]
kind = "rff"
dim = 256
[ridge]
lambda = 0.01
[run]
seed = 5
"#;

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn fit(session: &Session, seed: u64) -> Model {
    let pipeline = Pipeline::from_toml_str(PIPELINE, "session test").unwrap().seed(seed);
    pipeline.fit_files_with(session, [repo("data/digits_train.parquet")]).unwrap()
}

#[test]
fn two_fits_on_two_threads_each_give_their_model_alone_and_see_only_their_own_files() {
    let dir = TempDir::new("sessions");
    let (a_out, shared) = (dir.path("a.sfm"), dir.path("shared.sfm"));
    // Alone, one after the other, each in a fresh session.
    let alone_a = fit(&Session::new(), 1).to_bytes().unwrap();
    let alone_b = fit(&Session::new(), 2).to_bytes().unwrap();
    assert_ne!(alone_a, alone_b, "the two runs differ (their seeds), so a mix-up would show");
    fit(&Session::new(), 3).save(Path::new(&shared)).unwrap();

    let a = Session::with_storage_options(&pairs(&[
        ("aws_endpoint", "http://127.0.0.1:9"),
        ("aws_secret_access_key", "secret-of-a"),
    ]))
    .unwrap();
    let b =
        Session::with_storage_options(&pairs(&[("aws_region", "eu-west-3"), ("aws_secret_access_key", "secret-of-b")]))
            .unwrap();
    let barrier = Barrier::new(2);
    let (model_a, model_b) = std::thread::scope(|scope| {
        let ta = scope.spawn(|| {
            barrier.wait();
            let m = fit(&a, 1);
            m.save_with(&a, Path::new(&a_out)).unwrap();
            barrier.wait(); // B has read `shared` as its input by now.
                            // B's input is no input of A's: A replaces the model file B read.
            m.save_with(&a, Path::new(&shared)).unwrap();
            m
        });
        let tb = scope.spawn(|| {
            barrier.wait();
            let old = Model::load_with(&b, Path::new(&shared)).unwrap();
            let m = fit(&b, 2);
            barrier.wait();
            assert_eq!(old.header.rows, m.header.rows);
            m
        });
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert_eq!(model_a.to_bytes().unwrap(), alone_a, "thread A's model is its model alone, bit for bit");
    assert_eq!(model_b.to_bytes().unwrap(), alone_b, "thread B's model is its model alone, bit for bit");
    assert_eq!(std::fs::read(&shared).unwrap(), std::fs::read(&a_out).unwrap(), "A replaced the file B read");

    // B's checks still hold B's own input: its output onto it is refused.
    let refused = model_b.save_with(&b, Path::new(&shared)).unwrap_err();
    assert!(refused.is_user_error() && refused.to_string().contains("also an input"), "{refused}");
    // And A's output is no input of B's: B may write over it (a file sketchfit wrote).
    model_b.save_with(&b, Path::new(&a_out)).unwrap();

    // Options and secrets stay with their session; a new session has neither.
    assert_eq!(a.storage().layer_options(Layer::CommandLine)[0].1, "http://127.0.0.1:9");
    assert_eq!(b.storage().layer_options(Layer::CommandLine)[0], ("aws_region".into(), "eu-west-3".into()));
    assert!(Session::new().storage().layer_options(Layer::CommandLine).is_empty());
    assert_eq!(a.redact("key secret-of-a"), "key ***");
    assert_eq!(b.redact("key secret-of-a"), "key secret-of-a", "B never saw A's secret");
    assert_eq!(Session::new().redact("secret-of-b"), "secret-of-b");
}

#[test]
fn a_pipelines_storage_table_stays_in_the_session_that_ran_it() {
    let session = Session::new();
    let text = PIPELINE.replace("[run]", "[storage]\naws_region = \"ap-south-1\"\n[run]");
    let pipeline = Pipeline::from_toml_str(&text, "storage table").unwrap();
    pipeline.fit_files_with(&session, [repo("data/digits_train.parquet")]).unwrap();
    assert_eq!(
        session.storage().layer_options(Layer::Pipeline),
        [("aws_region".to_string(), "ap-south-1".to_string())]
    );
    let other = Session::new();
    Pipeline::from_toml_str(PIPELINE, "no storage")
        .unwrap()
        .fit_files_with(&other, [repo("data/digits_train.parquet")])
        .unwrap();
    assert!(other.storage().layer_options(Layer::Pipeline).is_empty(), "another run never inherits the table");
    // Parsing alone sets nothing anywhere: a key no store knows is refused by name.
    let bad = PIPELINE.replace("[run]", "[storage]\nno_such_key = \"1\"\n[run]");
    let e = Pipeline::from_toml_str(&bad, "bad storage").unwrap_err();
    assert!(e.to_string().contains("no_such_key"), "{e}");
}
