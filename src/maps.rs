//! Fitted feature maps as a file of their own: what a run's pre-pass decides — every
//! stage with its fitted keys and its materialised random parameters (Nyström's landmarks
//! and factor among them), the accumulator shift, the input columns, the class list and
//! output code — sealed in the container the models use. Runs given the file map their
//! rows alike whatever data they read, so their statistics are sums of one map and merge;
//! its digest (the seal's checksum) is what their parts record.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::container::{Array, ContainerError, Decoded, Dtype, Header};
use crate::error::{Error, Result};
use crate::session::Session;
use crate::sketch::{FeaturePipeline, ParamArray, ParamData, Stage, StageSpec};
use crate::source::{Classes, ResolvedFeatures};

/// Maps file format version.
pub const MAPS_VERSION: u32 = 1;
const MAPS_FORMAT: &str = "sketchfit-maps";

/// The JSON header of a maps file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MapsHeader {
    /// Always `sketchfit-maps`.
    pub format: String,
    /// [`MAPS_VERSION`].
    pub version: u32,
    /// The crate version that wrote it.
    pub written_by: String,
    /// The seal over header and arrays: the maps' digest.
    #[serde(default)]
    pub checksum: String,
    /// The pipeline seed the maps were drawn from.
    pub seed: u64,
    /// Feature columns and `d`.
    pub features: ResolvedFeatures,
    /// The stages, with their fitted keys.
    pub stages: Vec<StageSpec>,
    /// The class list (classification): labels outside it are refused.
    pub classes: Option<Classes>,
    /// The error-correcting output code's rows (absent: one-vs-all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Vec<Vec<i8>>>,
    /// The pipeline keys that decide the statistics, as the maps were fitted.
    pub keys: serde_json::Value,
    /// The inputs the pre-pass sampled (URLs redacted), for the record.
    pub fitted_on: Vec<String>,
}

impl Header for MapsHeader {
    const WHAT: &'static str = "maps";
    const FORMAT: &'static str = MAPS_FORMAT;
    const VERSION: u32 = MAPS_VERSION;
    const OLDEST: u32 = 1;
    const SEALED_FROM: u32 = 1;
    const XXH_FROM: u32 = 1;
    const HINT: &'static str = "fit the maps again with this sketchfit (`sketchfit fit-maps`)";
    fn format(&self) -> &str {
        &self.format
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn checksum_mut(&mut self) -> &mut String {
        &mut self.checksum
    }
}

/// Fitted maps: the header, the built stages and the shift.
#[derive(Debug)]
pub struct Maps {
    /// Header.
    pub header: MapsHeader,
    /// The feature map.
    pub pipeline: FeaturePipeline,
    /// The accumulator shift `μ` (length `D`).
    pub shift: Vec<f64>,
    /// The file it was read from, for messages.
    pub origin: Option<PathBuf>,
}

impl Maps {
    /// New maps (`header`'s format, version and checksum are set when written).
    pub fn new(header: MapsHeader, pipeline: FeaturePipeline, shift: Vec<f64>) -> Maps {
        Maps { header, pipeline, shift, origin: None }
    }

    /// The digest parts and models record: the seal of the file's header and arrays
    /// (empty until the maps were written or read).
    pub fn digest(&self) -> &str {
        &self.header.checksum
    }

    /// The file's bytes, read back (the stages rebuilt) before they are returned.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut arrays = stage_arrays(&self.pipeline);
        arrays.push(Array {
            name: "shift".into(),
            dtype: Dtype::F64,
            shape: vec![self.shift.len()],
            bytes: self.shift.iter().flat_map(|x| x.to_le_bytes()).collect(),
        });
        arrays.sort_by(|a, b| a.name.cmp(&b.name));
        let mut header = self.header.clone();
        header.format = MAPS_FORMAT.into();
        header.version = MAPS_VERSION;
        header.written_by = crate::atomic::written_by();
        let bytes = crate::container::encode(&header, arrays)?;
        Maps::from_bytes(&bytes).map_err(|e| Error::bug_from("maps just written load back", e))?;
        Ok(bytes)
    }

    /// Parses and verifies a maps file's bytes: the seal, every stage rebuilt from its
    /// arrays, the shift's length.
    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<Maps, ContainerError> {
        let file = crate::container::decode::<MapsHeader>(bytes)?;
        let header = file.header.clone();
        let d = header.features.dim;
        let stages = stages_from(&file, &header.stages, d)?;
        let pipeline = FeaturePipeline::from_stages(stages, d);
        let shift = file.f64("shift", pipeline.output_dim())?;
        Ok(Maps { header, pipeline, shift, origin: None })
    }

    /// Writes the maps file atomically in `session` (never over one of its inputs).
    pub fn save_with(&self, session: &Session, path: &Path) -> Result<()> {
        crate::atomic::write_bytes(session, path, &self.to_bytes()?)
    }

    /// Reads and verifies a maps file in `session`, which registers it as an input.
    pub fn load_with(session: &Session, path: &Path) -> Result<Maps> {
        let bytes = crate::atomic::read_input(session, path)?;
        let mut maps =
            Maps::from_bytes(&bytes).map_err(|e| Error::BadModel { path: path.into(), message: e.to_string() })?;
        maps.origin = Some(path.to_path_buf());
        Ok(maps)
    }

    /// An error about these maps, naming their file.
    pub fn refuse(&self, message: impl Into<String>) -> Error {
        let path = self.origin.clone().unwrap_or_else(|| PathBuf::from("(maps in memory)"));
        Error::BadModel { path, message: message.into() }
    }
}

/// Every stage's random parameters as the container's arrays, `stage{i}.{name}`: what a
/// model file and a maps file store.
pub(crate) fn stage_arrays(pipeline: &FeaturePipeline) -> Vec<Array> {
    let mut out = Vec::new();
    for (i, stage) in pipeline.stages().iter().enumerate() {
        for p in stage.params() {
            let (dtype, bytes) = match &p.data {
                ParamData::U32(v) => (Dtype::U32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                ParamData::I8(v) => (Dtype::I8, v.iter().map(|&x| x as u8).collect()),
                ParamData::F32(v) => (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            };
            out.push(Array { name: format!("stage{i}.{}", p.name), dtype, shape: p.shape, bytes });
        }
    }
    out
}

/// The stages of `specs` rebuilt from a container's `stage{i}.*` arrays, every shape and
/// range checked.
pub(crate) fn stages_from<H>(
    file: &Decoded<'_, H>,
    specs: &[StageSpec],
    d: usize,
) -> std::result::Result<Vec<Stage>, ContainerError> {
    let names = file.names();
    let mut stages = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let prefix = format!("stage{i}.");
        let mut params = Vec::new();
        for n in names.iter().filter(|n| n.starts_with(&prefix)) {
            let (dtype, shape, data) = file.array(n)?;
            let data = match dtype {
                Dtype::U32 => ParamData::U32(
                    data.chunks_exact(4).map(|b| u32::from_le_bytes(std::array::from_fn(|i| b[i]))).collect(),
                ),
                Dtype::I8 => ParamData::I8(data.iter().map(|&b| b as i8).collect()),
                Dtype::F32 => ParamData::F32(
                    data.chunks_exact(4).map(|b| f32::from_le_bytes(std::array::from_fn(|i| b[i]))).collect(),
                ),
                other => {
                    return Err(ContainerError::Inconsistent(format!("array '{n}' has unsupported type {other:?}")))
                }
            };
            params.push(ParamArray { name: n[prefix.len()..].to_string(), shape, data });
        }
        let stage = Stage::from_params(spec, d, &params)
            .map_err(|e| ContainerError::Inconsistent(format!("stage {i}: {e}")))?;
        stages.push(stage);
    }
    Ok(stages)
}
