//! The pipeline file: TOML → [`PipelineSpec`]. Every key has a default
//! (docs/src/reference/pipeline.md); an unknown key is an error naming the key and the file;
//! `--set key=value` overrides any key before validation; relative paths are resolved
//! against the file's folder.

use std::path::Path;

use super::spec::PipelineSpec;
use crate::error::{Error, Result};
use crate::pipeline::spec::{DataSpec, Task};
use crate::session::Session;
use crate::sketch::StageSpec;

const TOP_KEYS: &[&str] = &["task", "passes", "data", "stages", "pca", "ridge", "solver", "run", "storage"];

impl PipelineSpec {
    /// Reads and validates a pipeline file with `--set` overrides (`key=value`); the file
    /// is read through `session` (it may be an object) and registered as an input.
    pub fn load(session: &Session, path: &Path, overrides: &[String]) -> Result<PipelineSpec> {
        let name = path.display().to_string();
        let bytes = crate::atomic::read_input(session, path).map_err(|e| match e {
            Error::Data { message, .. } => Error::config(&name, "-", format!("pipeline file: {message}")),
            other => other,
        })?;
        let text = String::from_utf8(bytes).map_err(|_| Error::config(&name, "-", "not UTF-8 text"))?;
        let mut table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| Error::config(&name, "-", format!("not valid TOML: {e}")))?;
        let base = path.parent().unwrap_or(Path::new("."));
        resolve_paths(&mut table, base);
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        Self::from_table(table, &name)
    }

    /// Parses and validates pipeline text (`name` stands for the file in messages;
    /// relative paths stay relative to the working directory).
    pub fn from_toml_str(text: &str, name: &str) -> Result<PipelineSpec> {
        let table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| Error::config(name, "-", format!("not valid TOML: {e}")))?;
        Self::parse_table(table, name, false)
    }

    /// Validates an already parsed table.
    pub fn from_table(table: toml::Table, file: &str) -> Result<PipelineSpec> {
        Self::parse_table(table, file, true)
    }

    /// A pipeline file needs `data.train`; the library's text does not (its data is
    /// what is passed to `fit`).
    fn parse_table(mut table: toml::Table, file: &str, need_train: bool) -> Result<PipelineSpec> {
        for key in table.keys() {
            if !TOP_KEYS.contains(&key.as_str()) {
                return Err(Error::config(
                    file,
                    key,
                    format!("unknown key; the top-level keys are {}", TOP_KEYS.join(", ")),
                ));
            }
        }
        fn section<T: serde::de::DeserializeOwned + Default>(t: &mut toml::Table, key: &str, file: &str) -> Result<T> {
            match t.remove(key) {
                None => Ok(T::default()),
                Some(v) => v.clone().try_into().map_err(|e: toml::de::Error| keyed::<T>(&v, key, file, &e)),
            }
        }
        // Names the key, not just the section: tries the keys one at a time and reports the
        // first that fails on its own.
        fn keyed<T: serde::de::DeserializeOwned>(v: &toml::Value, key: &str, file: &str, e: &toml::de::Error) -> Error {
            if let toml::Value::Table(inner) = v {
                for (k, kv) in inner {
                    let one = toml::Value::Table(toml::Table::from_iter([(k.clone(), kv.clone())]));
                    if let Err(e1) = one.try_into::<T>() {
                        if !e1.message().starts_with("missing field") {
                            return Error::config(file, format!("{key}.{k}"), e1.message().to_string());
                        }
                    }
                }
            }
            Error::config(file, key, e.message().to_string())
        }
        let storage = storage_options(table.remove("storage"), file)?;
        let task: Task = match table.remove("task") {
            None => Task::default(),
            Some(v) => {
                v.try_into().map_err(|_| Error::config(file, "task", "must be \"classification\" or \"regression\""))?
            }
        };
        let passes: u32 = match table.remove("passes") {
            None => 1,
            Some(toml::Value::Integer(1)) => 1,
            Some(toml::Value::Integer(2)) => 2,
            Some(_) => return Err(Error::config(file, "passes", "must be 1 or 2")),
        };
        let data: DataSpec = match table.remove("data") {
            None => return Err(Error::config(file, "data", "missing; [data] needs at least train = [\"…\"]")),
            Some(v) => v.clone().try_into().map_err(|e: toml::de::Error| keyed::<DataSpec>(&v, "data", file, &e))?,
        };
        let mut candidates = None;
        let stages = match table.remove("stages") {
            None => Vec::new(),
            Some(toml::Value::Array(a)) => a
                .into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    toml::Value::Table(mut t) => {
                        if let Some(c) = crate::pipeline::candidate_spec::take_candidates(&mut t, file, i)? {
                            if candidates.replace(c).is_some() {
                                return Err(Error::config(
                                    file,
                                    format!("stages[{i}].candidates"),
                                    "candidates on one stage at a time",
                                ));
                            }
                        }
                        StageSpec::from_toml(&t, file, &format!("stages[{i}]"))
                    }
                    _ => Err(Error::config(file, format!("stages[{i}]"), "each stage must be a table ([[stages]])")),
                })
                .collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(Error::config(file, "stages", "must be an array of tables ([[stages]])")),
        };
        let spec = PipelineSpec {
            source: file.to_string(),
            task,
            passes,
            data,
            stages,
            pca: section(&mut table, "pca", file)?,
            ridge: section(&mut table, "ridge", file)?,
            solver: section(&mut table, "solver", file)?,
            run: section(&mut table, "run", file)?,
            candidates,
            storage,
        };
        if need_train && spec.data.train.is_empty() {
            return Err(Error::config(file, "data.train", "no training files given"));
        }
        spec.check()?;
        Ok(spec)
    }
}

/// The `[storage]` table: `key = value` options of the object stores (strings, numbers or
/// booleans), applied to this process's remote reads and writes under the command line's.
fn storage_options(value: Option<toml::Value>, file: &str) -> Result<Vec<(String, String)>> {
    let table = match value {
        None => return Ok(Vec::new()),
        Some(toml::Value::Table(t)) => t,
        Some(_) => return Err(Error::config(file, "storage", "must be a table of key = \"value\" options")),
    };
    let mut pairs = Vec::new();
    for (k, v) in table {
        let v = match v {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => return Err(Error::config(file, format!("storage.{k}"), "must be a string, number or boolean")),
        };
        pairs.push((k, v));
    }
    crate::remote::check_keys(&pairs).map_err(|e| match e {
        Error::Remote { message, .. } => Error::config(file, "storage", message),
        other => other,
    })?;
    Ok(pairs)
}

/// `s` joined to the pipeline file's directory when it is a relative local path; URLs
/// (`s3://…`, `file://…`) and absolute paths as they are.
fn rebase(s: &mut String, base: &Path) {
    let url = s.contains("://");
    if !url && Path::new(s.as_str()).is_relative() {
        *s = base.join(&*s).to_string_lossy().into_owned();
    }
}

fn resolve_paths(table: &mut toml::Table, base: &Path) {
    for (section, key) in [("ridge", "code_file"), ("run", "maps")] {
        if let Some(toml::Value::Table(t)) = table.get_mut(section) {
            if let Some(toml::Value::String(s)) = t.get_mut(key) {
                rebase(s, base);
            }
        }
    }
    let Some(toml::Value::Table(data)) = table.get_mut("data") else {
        return;
    };
    for key in ["train", "test", "unlabeled", "validation"] {
        match data.get_mut(key) {
            Some(toml::Value::Array(a)) => {
                for v in a.iter_mut() {
                    if let toml::Value::String(s) = v {
                        rebase(s, base);
                    }
                }
            }
            Some(toml::Value::String(s)) => {
                let mut p = s.clone();
                rebase(&mut p, base);
                data.insert(key.into(), toml::Value::Array(vec![toml::Value::String(p)]));
            }
            _ => {}
        }
    }
}

/// Applies one `key=value` override; `value` is read as TOML (a number, bool, array,
/// quoted string) and otherwise taken as a bare string. `stages.N.key` addresses stage N.
pub fn apply_override(table: &mut toml::Table, item: &str) -> Result<()> {
    let (key, raw) = item.split_once('=').ok_or_else(|| Error::config("--set", item, "expected key=value"))?;
    let key = key.trim();
    let value = match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => t.remove("v").unwrap_or(toml::Value::String(raw.into())),
        Err(_) => toml::Value::String(raw.trim().to_string()),
    };
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config("--set", key, "empty key segment"));
    }
    let mut cur = table;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if *part == "stages" && !last {
            let idx: usize = parts[i + 1].parse().map_err(|_| {
                Error::config("--set", key, "stages must be followed by a stage number, e.g. stages.0.dim")
            })?;
            let Some(toml::Value::Array(stages)) = cur.get_mut("stages") else {
                return Err(Error::config("--set", key, "the pipeline has no stages"));
            };
            let n = stages.len();
            let Some(toml::Value::Table(t)) = stages.get_mut(idx) else {
                return Err(Error::config("--set", key, format!("there are {n} stages (numbered from 0)")));
            };
            let rest = &parts[i + 2..];
            if rest.len() != 1 {
                return Err(Error::config("--set", key, "expected stages.N.key"));
            }
            t.insert(rest[0].to_string(), value);
            return Ok(());
        }
        if last {
            cur.insert(part.to_string(), value);
            return Ok(());
        }
        let entry = cur.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(t) => t,
            _ => return Err(Error::config("--set", key, format!("'{part}' is not a table"))),
        };
    }
    Ok(())
}
