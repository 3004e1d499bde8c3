//! `sketchfit._core`: the Python binding of the typed library API. It owns the crossing
//! only — Arrow C streams in (PyCapsules, zero copy), library errors out as Python
//! exceptions with the command line's messages, the GIL released around every
//! computation. The estimators, input normalisation and scikit-learn conventions are
//! the pure-Python package around it (`python/sketchfit/`).

use std::path::PathBuf;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{Array, RecordBatch};
use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyCapsule};
use sketchfit::api::{FeatureMap, InMemoryFit};
use sketchfit::source::Classes;
use sketchfit::{Error, Model, Pipeline, Session, Statistics};

/// The library's error as the Python exception a user expects: bad input or settings
/// are `ValueError` (a missing object or an existing output in a store among them), file
/// and network trouble `OSError`, a refused memory plan `MemoryError`.
fn py_err(e: Error) -> PyErr {
    py_err_in(&Session::new(), e)
}

/// [`py_err`] with the secrets of `session` redacted too.
fn py_err_in(session: &Session, e: Error) -> PyErr {
    let message = session.redact(&e.to_string());
    match e {
        Error::Io { .. } | Error::Remote { transient: true, .. } => PyOSError::new_err(message),
        Error::Memory { .. } => PyMemoryError::new_err(message),
        Error::Internal { .. } => PyRuntimeError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

/// The record batches of anything that speaks the Arrow PyCapsule stream interface
/// (pyarrow tables, batches and readers, polars frames): imported without copying.
fn batches(source: &Bound<'_, PyAny>) -> PyResult<Vec<RecordBatch>> {
    if !source.hasattr("__arrow_c_stream__")? {
        return Err(PyTypeError::new_err(format!(
            "expected an Arrow table or stream (an object with __arrow_c_stream__), got {}",
            source.get_type().name()?
        )));
    }
    let capsule = source.call_method1("__arrow_c_stream__", (py_none(source.py()),))?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let ptr = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: the capsule is named `arrow_array_stream`, so by the Arrow PyCapsule
    // protocol it holds an `ArrowArrayStream`; `from_raw` moves the stream out and
    // leaves a released one behind, which the capsule's destructor then skips.
    let reader = unsafe { RecordBatchStreamReader::from_raw(ptr.as_ptr().cast::<FFI_ArrowArrayStream>()) }
        .map_err(|e| PyValueError::new_err(format!("cannot import the Arrow stream: {e}")))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("cannot read the Arrow stream: {e}")))
}

fn py_none(py: Python<'_>) -> Bound<'_, PyAny> {
    py.None().into_bound(py)
}

/// A writable buffer NumPy wraps without a copy (`np.frombuffer`).
fn f64_bytes<'py>(py: Python<'py>, v: &[f64]) -> PyResult<Bound<'py, PyByteArray>> {
    PyByteArray::new_with(py, v.len() * 8, |buf| {
        for (dst, x) in buf.chunks_exact_mut(8).zip(v) {
            dst.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    })
}

fn f32_bytes<'py>(py: Python<'py>, v: &[f32]) -> PyResult<Bound<'py, PyByteArray>> {
    PyByteArray::new_with(py, v.len() * 4, |buf| {
        for (dst, x) in buf.chunks_exact_mut(4).zip(v) {
            dst.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    })
}

/// The address of the first column's values as imported: the zero-copy check compares
/// it with the NumPy array's data pointer.
#[pyfunction]
fn values_address(source: &Bound<'_, PyAny>) -> PyResult<usize> {
    let b = batches(source)?;
    let col = b.first().map(|b| b.column(0).to_data()).ok_or_else(|| PyValueError::new_err("no batches"))?;
    let data = if col.child_data().is_empty() { col } else { col.child_data()[0].clone() };
    let buf = data.buffers().first().ok_or_else(|| PyValueError::new_err("the column has no values buffer"))?;
    Ok(buf.as_ptr() as usize + data.offset() * data.data_type().primitive_width().unwrap_or(0))
}

/// A pipeline, from pipeline-file text.
#[pyclass(name = "Pipeline", module = "sketchfit._core", frozen)]
struct PyPipeline {
    inner: Pipeline,
}

#[pymethods]
impl PyPipeline {
    /// `Pipeline(text, classes=None, maps=None)`: `classes`, a sorted list of ints or of
    /// strings, fixes the class set instead of scanning it; `maps`, the path or URL of a
    /// maps file, replaces the pre-pass (`run.maps`).
    #[new]
    #[pyo3(signature = (text, classes=None, maps=None))]
    fn new(text: &str, classes: Option<&Bound<'_, PyAny>>, maps: Option<PathBuf>) -> PyResult<Self> {
        let mut inner = Pipeline::from_toml_str(text, "pipeline").map_err(py_err)?;
        if let Some(m) = maps {
            inner = inner.maps(m);
        }
        if let Some(c) = classes {
            let given = if let Ok(v) = c.extract::<Vec<i64>>() {
                Classes::Int(v)
            } else {
                Classes::Str(c.extract::<Vec<String>>()?)
            };
            inner = inner.classes(given);
        }
        inner.check().map_err(py_err)?;
        Ok(PyPipeline { inner })
    }

    /// Fits on an Arrow stream held in memory.
    fn fit(&self, py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<PyModel> {
        let b = batches(source)?;
        let model = py.detach(|| self.inner.fit(b)).map_err(py_err)?;
        Ok(PyModel { inner: model })
    }

    /// Fits on Parquet files (paths or globs), streamed in bounded memory, in `session`.
    fn fit_files(&self, py: Python<'_>, paths: Vec<PathBuf>, session: &PySession) -> PyResult<PyModel> {
        let s = &session.inner;
        let model = py.detach(|| self.inner.fit_files_with(s, paths)).map_err(|e| py_err_in(s, e))?;
        Ok(PyModel { inner: model })
    }

    /// Fits the maps of the pre-pass on Parquet files and writes them to `output`, in
    /// `session`; returns their digest.
    fn fit_maps(&self, py: Python<'_>, paths: Vec<PathBuf>, output: PathBuf, session: &PySession) -> PyResult<String> {
        let s = &session.inner;
        py.detach(|| {
            let maps = self.inner.fit_maps_with(s, paths)?;
            maps.save_with(s, &output)?;
            Ok(sketchfit::maps::Maps::load_with(&Session::new(), &output)?.digest().to_string())
        })
        .map_err(|e| py_err_in(s, e))
    }

    /// Statistics of shard `(i, n)` of an Arrow stream's batches.
    #[pyo3(signature = (source, shard=(0, 1)))]
    fn accumulate(&self, py: Python<'_>, source: &Bound<'_, PyAny>, shard: (usize, usize)) -> PyResult<PyStatistics> {
        let b = batches(source)?;
        let s = py.detach(|| self.inner.accumulate(b, shard)).map_err(py_err)?;
        Ok(PyStatistics { inner: s })
    }

    /// A fit that keeps its continuation: `("model", Model)` when it trained in the dual
    /// (at most D/2 rows: the rows are the continuation), else `("statistics",
    /// Statistics)` of every row, to solve.
    fn fit_or_accumulate<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
    ) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
        let b = batches(source)?;
        match py.detach(|| self.inner.fit_or_accumulate(b)).map_err(py_err)? {
            InMemoryFit::Model(m) => Ok(("model", Bound::new(py, PyModel { inner: *m })?.into_any())),
            InMemoryFit::Statistics(s) => Ok(("statistics", Bound::new(py, PyStatistics { inner: *s })?.into_any())),
        }
    }

    /// Statistics of shard `(i, n)` of Parquet files' row groups, in `session`.
    fn accumulate_files(
        &self,
        py: Python<'_>,
        paths: Vec<PathBuf>,
        shard: (usize, usize),
        session: &PySession,
    ) -> PyResult<PyStatistics> {
        let s = &session.inner;
        let stats = py.detach(|| self.inner.accumulate_files_with(s, paths, shard)).map_err(|e| py_err_in(s, e))?;
        Ok(PyStatistics { inner: stats })
    }

    /// Adds an Arrow stream's rows to statistics, with their fitted parameters.
    fn add(&self, py: Python<'_>, stats: &mut PyStatistics, source: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = batches(source)?;
        let s = &mut stats.inner;
        py.detach(|| self.inner.add(s, b)).map_err(py_err)
    }

    /// Merges statistics and solves them into a model; parts over a maps file may be
    /// weighted by age (`decay`, a half-life in parts) or one weight each (`weights`).
    #[pyo3(signature = (parts, decay=None, weights=None))]
    fn solve(
        &self,
        py: Python<'_>,
        parts: Vec<PyRef<'_, PyStatistics>>,
        decay: Option<f64>,
        weights: Option<Vec<f64>>,
    ) -> PyResult<PyModel> {
        let parts: Vec<Statistics> = parts.iter().map(|p| p.inner.clone()).collect();
        let weighed = match (decay, weights) {
            (Some(_), Some(_)) => return Err(PyValueError::new_err("give decay or weights, not both")),
            (Some(h), None) => Some(sketchfit::PartWeights::HalfLife(h)),
            (None, Some(w)) => Some(sketchfit::PartWeights::Each(w)),
            (None, None) => None,
        };
        let model = py
            .detach(|| match weighed {
                Some(w) => self.inner.solve_weighted(parts, w),
                None => self.inner.solve(parts),
            })
            .map_err(py_err)?;
        Ok(PyModel { inner: model })
    }
}

/// Sufficient statistics (a shard's part file in memory).
#[pyclass(name = "Statistics", module = "sketchfit._core")]
struct PyStatistics {
    inner: Statistics,
}

#[pymethods]
impl PyStatistics {
    /// Reads and verifies a part file, in `session`.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf, session: &PySession) -> PyResult<Self> {
        let s = &session.inner;
        Ok(PyStatistics { inner: py.detach(|| Statistics::load_with(s, &path)).map_err(|e| py_err_in(s, e))? })
    }

    /// Verifies and reads a part file's bytes.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: Vec<u8>) -> PyResult<Self> {
        Ok(PyStatistics { inner: py.detach(|| Statistics::from_bytes(&data, "statistics bytes")).map_err(py_err)? })
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py.detach(|| self.inner.to_bytes()).map_err(py_err)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Writes the part file atomically (the same file as the command's `accumulate`), in
    /// `session`.
    fn save(&self, py: Python<'_>, path: PathBuf, session: &PySession) -> PyResult<()> {
        let s = &session.inner;
        py.detach(|| self.inner.save_with(s, &path)).map_err(|e| py_err_in(s, e))
    }

    /// Merges another part of the same run into this one (the other is left as it was).
    fn merge(&mut self, py: Python<'_>, other: &PyStatistics) -> PyResult<()> {
        let o = other.inner.clone();
        let s = &mut self.inner;
        py.detach(|| s.merge(o)).map_err(py_err)
    }

    /// No rows, these fitted parameters, as shard `(i, n)`.
    fn empty_like(&self, shard: (usize, usize)) -> PyResult<Self> {
        Ok(PyStatistics { inner: self.inner.empty_like(shard).map_err(py_err)? })
    }

    #[getter]
    fn rows(&self) -> u64 {
        self.inner.rows()
    }

    #[getter]
    fn shard(&self) -> (usize, usize) {
        self.inner.shard()
    }

    #[getter]
    fn shards_held(&self) -> Vec<usize> {
        self.inner.shards_held()
    }
}

/// A trained model.
#[pyclass(name = "Model", module = "sketchfit._core", frozen)]
struct PyModel {
    inner: Model,
}

#[pymethods]
impl PyModel {
    /// Reads and verifies a model file (the command line's), in `session`.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf, session: &PySession) -> PyResult<Self> {
        let s = &session.inner;
        Ok(PyModel { inner: py.detach(|| Model::load_with(s, &path)).map_err(|e| py_err_in(s, e))? })
    }

    /// Verifies and reads a model file's bytes.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: Vec<u8>) -> PyResult<Self> {
        let m = py
            .detach(|| Model::from_bytes(&data))
            .map_err(|e| PyValueError::new_err(format!("not a valid sketchfit model: {e}")))?;
        Ok(PyModel { inner: m })
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py.detach(|| self.inner.to_bytes()).map_err(py_err)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Writes the model file atomically, in `session`.
    fn save(&self, py: Python<'_>, path: PathBuf, session: &PySession) -> PyResult<()> {
        let s = &session.inner;
        py.detach(|| self.inner.save_with(s, &path)).map_err(|e| py_err_in(s, e))
    }

    /// The header as JSON (task, classes, features, stages, λ, …).
    fn header_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.inner.header).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Class indices (little-endian i64 bytes, for `np.frombuffer`) of row-major
    /// per-class decision values as `scores` returns them (the sign for two classes
    /// one-vs-all, else the argmax; for ECOC the argmax of the class scores is the
    /// nearest code word). Bytes both ways: a list of 12M floats cost a second each way.
    fn classify<'py>(&self, py: Python<'py>, scores: &Bound<'py, PyByteArray>) -> PyResult<Bound<'py, PyByteArray>> {
        let bytes = scores.to_vec();
        let code = self.inner.output_code();
        let k = code.score_columns();
        if self.inner.header.classes.is_none() || !bytes.len().is_multiple_of(8 * k) {
            return Err(PyValueError::new_err("not the scores of a classifier"));
        }
        let values: Vec<f64> = bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect();
        let classes = py.detach(|| code.classify_scores(&values));
        PyByteArray::new_with(py, classes.len() * 8, |buf| {
            for (dst, &c) in buf.chunks_exact_mut(8).zip(&classes) {
                dst.copy_from_slice(&(c as i64).to_le_bytes());
            }
            Ok(())
        })
    }

    /// `(bytes of f64, rows, columns)`: decision values, or with `pca` the PCA features.
    #[pyo3(signature = (source, pca=false))]
    fn scores<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
        pca: bool,
    ) -> PyResult<(Bound<'py, PyByteArray>, usize, usize)> {
        let b = batches(source)?;
        let (v, rows) = py.detach(|| self.inner.score_batches(&b, pca)).map_err(py_err)?;
        let cols = v.len().checked_div(rows).unwrap_or(0);
        Ok((f64_bytes(py, &v)?, rows, cols))
    }

    /// [`PyModel::scores`] of row-major features in the model's order, given as one
    /// `FixedSizeList<float32>` column (a NumPy array, imported without a copy): no
    /// column is looked up or gathered, so a C-ordered array is scored where it lies.
    #[pyo3(signature = (source, pca=false))]
    fn scores_rows<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
        pca: bool,
    ) -> PyResult<(Bound<'py, PyByteArray>, usize, usize)> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::Float32Type;
        let mut out = Vec::new();
        let mut rows = 0;
        for batch in batches(source)? {
            let bad = || PyTypeError::new_err("expected one FixedSizeList<float32> column of rows");
            let list = batch.columns().first().and_then(|c| c.as_fixed_size_list_opt()).ok_or_else(bad)?;
            let values = list.values().as_primitive_opt::<Float32Type>().ok_or_else(bad)?;
            if list.null_count() > 0 || values.null_count() > 0 {
                return Err(PyValueError::new_err("rows with missing values cannot be scored"));
            }
            let d = usize::try_from(list.value_length()).map_err(|_| bad())?;
            let x = values.values().get(..list.len() * d).ok_or_else(bad)?;
            let v = py
                .detach(|| if pca { self.inner.pca_features(x) } else { self.inner.decision_function(x) })
                .map_err(py_err)?;
            out.extend_from_slice(&v);
            rows += list.len();
        }
        let cols = out.len().checked_div(rows).unwrap_or(0);
        Ok((f64_bytes(py, &out)?, rows, cols))
    }
}

/// A fitted feature map (a sketch transformer's state).
#[pyclass(name = "FeatureMap", module = "sketchfit._core", frozen)]
struct PyFeatureMap {
    inner: FeatureMap,
}

#[pymethods]
impl PyFeatureMap {
    /// Fits the pipeline's stages on an Arrow stream.
    #[staticmethod]
    fn fit(py: Python<'_>, pipeline: &PyPipeline, source: &Bound<'_, PyAny>) -> PyResult<Self> {
        let b = batches(source)?;
        Ok(PyFeatureMap { inner: py.detach(|| FeatureMap::fit(&pipeline.inner, b)).map_err(py_err)? })
    }

    /// Rebuilds a fitted map from [`PyFeatureMap::to_json`].
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<Self> {
        Ok(PyFeatureMap { inner: FeatureMap::from_json(text).map_err(py_err)? })
    }

    fn to_json(&self) -> PyResult<String> {
        self.inner.to_json().map_err(py_err)
    }

    /// The fitted keys and feature columns, without the fitted arrays (Nyström's).
    fn spec_json(&self) -> PyResult<String> {
        self.inner.spec_json().map_err(py_err)
    }

    /// `(bytes of f32, rows, D)`: the random features of every row.
    fn transform<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyByteArray>, usize, usize)> {
        let b = batches(source)?;
        let (v, rows) = py.detach(|| self.inner.transform(b)).map_err(py_err)?;
        Ok((f32_bytes(py, &v)?, rows, self.inner.dim()))
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }
}

/// The sketch families of the Rust registry, as JSON: `[{kind, keys, nonnegative,
/// defaults, help}, …]`, `help` holding each key's line from the pipeline reference. The
/// Python transformers (their signatures and numpydoc docstrings) are built from it, so
/// the package keeps no copy of the list or of the keys' meanings.
#[pyfunction]
fn kinds() -> PyResult<String> {
    let help = key_help(include_str!("../../docs/src/reference/pipeline.md"));
    let families: Vec<serde_json::Value> = sketchfit::sketch::families()
        .into_iter()
        .map(|f| {
            let of = |k: &String| {
                let line = help.iter().find(|(kind, key, _)| kind == f.kind && key == k);
                let any = help.iter().find(|(_, key, text)| key == k && !text.is_empty());
                (k.clone(), serde_json::Value::String(line.or(any).map_or(String::new(), |(_, _, t)| t.clone())))
            };
            let text: serde_json::Map<String, serde_json::Value> = f.keys.iter().map(of).collect();
            let mut v = serde_json::to_value(&f).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("help".into(), text.into());
            }
            v
        })
        .collect();
    serde_json::to_string(&families).map_err(|e| PyRuntimeError::new_err(format!("the family list as JSON: {e}")))
}

/// `(kind, key, comment)` of every stage key the pipeline reference's example file shows
/// (`key = value  # comment`, commented-out keys included, continued comments joined).
fn key_help(reference: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut kind = String::new();
    let mut in_toml = false;
    for line in reference.lines() {
        if line.starts_with("```") {
            in_toml = line.trim_end() == "```toml";
            kind.clear();
            continue;
        }
        if !in_toml {
            continue;
        }
        let (code, comment) = match line.split_once('#') {
            Some((c, m)) if !c.trim().is_empty() => (c.trim(), m.trim()),
            Some((_, rest)) => match rest.split_once('#') {
                Some((c, m)) if c.contains('=') => (c.trim(), m.trim()),
                _ if rest.starts_with("   ") && !rest.trim().is_empty() => {
                    // A comment continued on the next line.
                    if let Some(last) = out.last_mut() {
                        last.2 = format!("{} {}", last.2, rest.trim());
                    }
                    continue;
                }
                _ => (rest.trim(), ""),
            },
            None => (line.trim(), ""),
        };
        if code.starts_with("[[stages]]") {
            kind.clear();
            continue;
        }
        let Some((key, value)) = code.split_once('=') else { continue };
        let key = key.trim();
        if key == "kind" {
            kind = value.trim().trim_matches('"').to_string();
        } else if !kind.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            out.push((kind.clone(), key.to_string(), comment.to_string()));
        }
    }
    out
}

/// The engine value of one call: its object-store options (`storage_options`, the
/// command line's `--storage-option` layer) and the files it reads and writes. Nothing is
/// process-wide: calls on other threads, with other options, never see this one's.
#[pyclass(name = "Session", module = "sketchfit._core", frozen)]
struct PySession {
    inner: Session,
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (storage_options=Vec::new()))]
    fn new(storage_options: Vec<(String, String)>) -> PyResult<Self> {
        Ok(PySession { inner: Session::with_storage_options(&storage_options).map_err(py_err)? })
    }
}

/// The header of a maps file (JSON), verified: its seed, stages and keys, which an
/// estimator given `maps=` takes as its own where its parameters leave them open.
#[pyfunction]
fn maps_header(py: Python<'_>, path: PathBuf, session: &PySession) -> PyResult<String> {
    let s = &session.inner;
    let maps = py.detach(|| sketchfit::maps::Maps::load_with(s, &path)).map_err(|e| py_err_in(s, e))?;
    serde_json::to_string(&maps.header).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPipeline>()?;
    m.add_class::<PyStatistics>()?;
    m.add_class::<PyModel>()?;
    m.add_class::<PyFeatureMap>()?;
    m.add_function(wrap_pyfunction!(values_address, m)?)?;
    m.add_function(wrap_pyfunction!(kinds, m)?)?;
    m.add_function(wrap_pyfunction!(maps_header, m)?)?;
    m.add_class::<PySession>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
