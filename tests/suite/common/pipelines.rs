//! Pipelines the tests share: built in code, or written as a file beside the data.

use sketchfit::sketch::{RffSpec, TensorSketchSpec};
use sketchfit::{Lambda, Pipeline};

use super::TempDir;

/// Three-class rings through a tensor sketch and RFF, PCA and GCV (the API tests' pipeline).
pub fn rings_pipeline() -> Pipeline {
    Pipeline::classification("label")
        .features(["a", "b", "c", "d"])
        .stage(TensorSketchSpec { degree: 2, dim: 128, ..Default::default() })
        .stage(RffSpec { dim: 128, sigma: Some(1.0), ..Default::default() })
        .pca(64)
        .lambda(Lambda::Gcv)
        .seed(11)
        .threads(2)
}

/// A pipeline file `p.toml` over `train` with a small tensor sketch, `data_extra` in
/// `[data]` and `rest` after the stage.
pub fn sketch_pipeline(dir: &TempDir, train: &[&str], data_extra: &str, rest: &str) -> String {
    let files: Vec<String> = train.iter().map(|f| format!("\"{f}\"")).collect();
    let text = format!(
        "[data]\ntrain = [{}]\nlabel = \"label\"\n{data_extra}\n\n[[stages]]\nkind = \"tensor_sketch\"\ndim = 16\n{rest}\n",
        files.join(", ")
    );
    let p = dir.path("p.toml");
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// `body` written as the pipeline file `p.toml`.
pub fn pipeline_file(dir: &TempDir, body: &str) -> String {
    let p = dir.path("p.toml");
    std::fs::write(&p, body).unwrap();
    p.to_string_lossy().into_owned()
}

/// A classifier over `train.parquet`'s `x*` columns ([`write_data`]): a tensor sketch
/// beside the identity, and PCA.
pub const CLASSIFY: &str = "[data]\ntrain = [\"train.parquet\"]\nfeatures = [\"x*\"]\nlabel = \"label\"\n\
    [[stages]]\nkind = \"tensor_sketch\"\ndegree = 2\noffset = 1.0\ndim = 96\n\
    [[stages]]\nkind = \"identity\"\n[pca]\ncomponents = 40\n";
