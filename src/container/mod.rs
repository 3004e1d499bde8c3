//! The one file container of sketchfit, used by models, statistics parts and checkpoints:
//! safetensors arrays plus a JSON header under `__metadata__["sketchfit"]`, sealed by an
//! FNV-1a checksum over the header (serialised with its checksum field empty) and then
//! every array in name order, so one changed byte anywhere is refused. Writing reads the
//! bytes back before returning them; reading verifies before anything is used.

pub mod json_f64;

use std::collections::HashMap;

use safetensors::tensor::{SafeTensors, TensorView};
pub use safetensors::Dtype;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// The key under `__metadata__` that holds the JSON header.
const KEY: &str = "sketchfit";

/// What is wrong with a container's bytes. Callers attach the path.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// Not safetensors at all.
    #[error("not a safetensors file: {0}")]
    NotSafetensors(String),
    /// Safetensors, but without our header or with another format name.
    #[error("not a sketchfit {0} file (no sketchfit header)")]
    Foreign(&'static str),
    /// The header does not parse.
    #[error("bad {what} header: {message}")]
    BadHeader {
        /// "model" or "statistics".
        what: &'static str,
        /// The parser's message.
        message: String,
    },
    /// A version this build does not read.
    #[error("{what} format version {version} is not supported by this sketchfit (reads versions {oldest} to {newest}); {hint}")]
    Version {
        /// "model" or "statistics".
        what: &'static str,
        /// The file's version.
        version: u32,
        /// Oldest version read.
        oldest: u32,
        /// Newest version read.
        newest: u32,
        /// What to do.
        hint: &'static str,
    },
    /// The checksum does not match.
    #[error("checksum mismatch: the {0} file is damaged (its header or its arrays changed after it was written)")]
    Checksum(&'static str),
    /// A named array is absent.
    #[error("missing array '{0}'")]
    Missing(String),
    /// A named array has another type or size than its header says.
    #[error("array '{0}' has the wrong type or shape")]
    Shape(String),
    /// The header and arrays disagree in a format-specific way.
    #[error("{0}")]
    Inconsistent(String),
}

/// A container format: its header type, name and versions.
pub trait Header: Serialize + DeserializeOwned + Clone {
    /// "model" or "statistics" (for messages).
    const WHAT: &'static str;
    /// The `format` field's value.
    const FORMAT: &'static str;
    /// The version written.
    const VERSION: u32;
    /// The oldest version read.
    const OLDEST: u32;
    /// The first version whose checksum covers the header (older ones: arrays only).
    const SEALED_FROM: u32;
    /// The first version sealed by XXH64 (older ones: FNV-1a 64, a byte at a time, whose
    /// dependent multiply per byte held every write and read-back far below memory speed).
    const XXH_FROM: u32;
    /// What to do with a file of an unsupported version.
    const HINT: &'static str;
    /// The header's `format` field.
    fn format(&self) -> &str;
    /// The header's `version` field.
    fn version(&self) -> u32;
    /// The header's `checksum` field.
    fn checksum_mut(&mut self) -> &mut String;
}

/// One array to write.
#[derive(Debug, Clone)]
pub struct Array {
    /// Name (arrays are stored and checksummed in name order).
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Little-endian bytes.
    pub bytes: Vec<u8>,
}

impl Array {
    /// An f64 array.
    pub fn f64(name: impl Into<String>, shape: Vec<usize>, v: &[f64]) -> Array {
        Array { name: name.into(), dtype: Dtype::F64, shape, bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
    }
}

mod seal;
pub use seal::checksum;
#[cfg(test)]
use seal::Xxh64;
use seal::{Fnv, Sealer};

/// The header as the checksum sees it: serialised with its checksum field empty.
fn bare_json<H: Header>(header: &H) -> Result<String> {
    let mut bare = header.clone();
    bare.checksum_mut().clear();
    serde_json::to_string(&bare).map_err(|e| Error::bug_from("a container header serialises", e))
}

fn seal<'a, H: Header>(header: &H, arrays: impl IntoIterator<Item = &'a [u8]>) -> Result<String> {
    let mut h = Sealer::of::<H>(header.version());
    h.update(bare_json(header)?.as_bytes());
    for a in arrays {
        h.update(a);
    }
    Ok(h.hex())
}

/// An f64 array written straight from memory by [`write_f64`].
#[derive(Debug)]
pub struct F64Array<'a> {
    /// Name (arrays are stored and checksummed in name order).
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// The values.
    pub data: &'a [f64],
}

/// Values converted to little-endian bytes a block at a time: a 16 GiB Gram never has a
/// byte copy of its own.
fn le_blocks(data: &[f64], mut f: impl FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(8 * 8192);
    for block in data.chunks(8192) {
        buf.clear();
        buf.extend(block.iter().flat_map(|x| x.to_le_bytes()));
        f(&buf)?;
    }
    Ok(())
}

/// Writes a container of f64 arrays to `target` without building it in memory (the
/// statistics at D = 65,536 are 16 GiB; [`encode`] would hold them three times): the
/// checksum is taken over the arrays where they lie, the safetensors header written,
/// the arrays streamed after it, and the file read back and verified — again a block at
/// a time — before it is renamed into place.
pub fn write_f64<H: Header>(
    session: &crate::session::Session,
    target: &std::path::Path,
    header: &H,
    mut arrays: Vec<F64Array<'_>>,
) -> Result<()> {
    use std::io::Write;
    arrays.sort_by(|a, b| a.name.cmp(&b.name));
    let mut header = header.clone();
    let mut h = Sealer::of::<H>(header.version());
    h.update(bare_json(&header)?.as_bytes());
    for a in &arrays {
        let _ = le_blocks(a.data, |b| {
            h.update(b);
            Ok(())
        });
    }
    *header.checksum_mut() = h.hex();
    let json = serde_json::to_string(&header).map_err(|e| Error::bug_from("a container header serialises", e))?;
    let mut meta = serde_json::Map::new();
    meta.insert("__metadata__".into(), serde_json::json!({ KEY: json }));
    let mut offset = 0usize;
    for a in &arrays {
        let end = offset + 8 * a.data.len();
        meta.insert(
            a.name.clone(),
            serde_json::json!({ "dtype": "F64", "shape": a.shape, "data_offsets": [offset, end] }),
        );
        offset = end;
    }
    let mut head = serde_json::to_vec(&meta).map_err(|e| Error::bug_from("a container file serialises", e))?;
    head.resize(head.len().next_multiple_of(8), b' ');
    let mut out = crate::atomic::AtomicFile::create(session, target)?;
    let tmp = out.tmp_path().to_path_buf();
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, out.file());
        let io = |e| Error::io(&tmp, e);
        w.write_all(&(head.len() as u64).to_le_bytes()).map_err(io)?;
        w.write_all(&head).map_err(io)?;
        for a in &arrays {
            le_blocks(a.data, |b| w.write_all(b)).map_err(io)?;
        }
        w.flush().map_err(io)?;
    }
    verify_file::<H>(&tmp).map_err(|e| Error::bug_from("a file just written reads back", e))?;
    out.commit()
}

/// Verifies a container on disk a block at a time (format, version, checksum), without
/// holding it in memory.
pub fn verify_file<H: Header>(path: &std::path::Path) -> std::result::Result<H, ContainerError> {
    let f = std::fs::File::open(path).map_err(|e| ContainerError::NotSafetensors(e.to_string()))?;
    read_file::<H>(f, false).map(|(h, _)| h)
}

/// A container read from a file: its verified header and its f64 arrays by name.
pub type FileArrays<H> = (H, std::collections::BTreeMap<String, Vec<f64>>);

/// Reads a container of f64 arrays from an open file a block at a time, straight into the
/// arrays (no copy of the file in memory), and verifies it before returning anything; with
/// `keep` false only verifies. An array must lie within the file, so nothing larger than
/// the file is ever allocated.
pub fn read_file<H: Header>(f: std::fs::File, keep: bool) -> std::result::Result<FileArrays<H>, ContainerError> {
    let mut arrays = std::collections::BTreeMap::new();
    let header = scan_file::<H>(f, keep, |name, len, at, values| {
        if keep {
            let v: &mut Vec<f64> = arrays.entry(name.to_string()).or_default();
            if at == 0 {
                v.reserve_exact(len);
            }
            v.extend_from_slice(values);
        }
        Ok(())
    })?;
    Ok((header, arrays))
}

/// Streams a container's f64 arrays from an open file a block at a time, in name order:
/// `visit(name, len, at, values)` gets `values` of the array `name` (`len` values in all)
/// from index `at`. The checksum is known only at the end, so nothing computed from the
/// values may be used before this returns `Ok` (a damaged file is refused then, as the
/// whole-file readers refuse it). `f64_only`: an array of another type is refused
/// (otherwise it is checksummed and never visited).
pub fn scan_file<H: Header>(
    mut f: std::fs::File,
    f64_only: bool,
    mut visit: impl FnMut(&str, usize, usize, &[f64]) -> std::result::Result<(), ContainerError>,
) -> std::result::Result<H, ContainerError> {
    use std::io::{Read, Seek, SeekFrom};
    let bad = |e: std::io::Error| ContainerError::NotSafetensors(e.to_string());
    let size = f.metadata().map_err(bad)?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(bad)?;
    let n = u64::from_le_bytes(n);
    if n > 100 << 20 || 8 + n > size {
        return Err(ContainerError::NotSafetensors("the header length does not fit the file".into()));
    }
    let mut head = vec![0u8; n as usize];
    f.read_exact(&mut head).map_err(bad)?;
    let meta: serde_json::Value =
        serde_json::from_slice(&head).map_err(|e| ContainerError::NotSafetensors(e.to_string()))?;
    let json = meta
        .get("__metadata__")
        .and_then(|m| m.get(KEY))
        .and_then(|v| v.as_str())
        .ok_or(ContainerError::Foreign(H::WHAT))?;
    let mut header = check_header::<H>(json)?;
    let mut ranges: Vec<(String, u64, u64, bool)> = Vec::new();
    for (name, info) in meta.as_object().into_iter().flatten().filter(|(k, _)| *k != "__metadata__") {
        let off = info.get("data_offsets").and_then(|o| o.as_array());
        let at = |i: usize| off.and_then(|o| o.get(i)).and_then(|v| v.as_u64());
        let dtype = info.get("dtype").and_then(|d| d.as_str());
        // The shape must account for the bytes, as the in-memory reader requires.
        let elements = info
            .get("shape")
            .and_then(|s| s.as_array())
            .map(|dims| dims.iter().map(|d| d.as_u64()).try_fold(1u64, |p, d| d.and_then(|d| p.checked_mul(d))));
        let width = match dtype {
            Some("F64" | "I64" | "U64") => 8,
            Some("F32" | "I32" | "U32") => 4,
            Some("F16" | "BF16" | "I16" | "U16") => 2,
            _ => 1,
        };
        let fits = |a: u64, b: u64| elements.flatten().and_then(|e| e.checked_mul(width)) == Some(b - a);
        let is_f64 = dtype == Some("F64");
        match (at(0), at(1)) {
            (Some(a), Some(b)) if a <= b && 8 + n + b <= size && fits(a, b) && (!f64_only || is_f64) => {
                ranges.push((name.clone(), a, b, is_f64))
            }
            (Some(_), Some(_)) if f64_only && !is_f64 => return Err(ContainerError::Shape(name.clone())),
            _ => return Err(ContainerError::NotSafetensors(format!("array '{name}' does not lie within the file"))),
        }
    }
    ranges.sort();
    let mut h = Sealer::of::<H>(header.version());
    if header.version() >= H::SEALED_FROM {
        let bare = bare_json(&header).map_err(|e| ContainerError::Inconsistent(e.to_string()))?;
        h.update(bare.as_bytes());
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut values = Vec::with_capacity(buf.len() / 8);
    for (name, a, b, is_f64) in &ranges {
        f.seek(SeekFrom::Start(8 + n + a)).map_err(bad)?;
        let mut left = b - a;
        let len = (left / 8) as usize;
        let mut at = 0;
        if *is_f64 && len == 0 {
            // An empty array is visited too (an unlabeled block's targets), once.
            visit(name, 0, 0, &[])?;
        }
        while left > 0 {
            // Whole f64s per block (the buffer is a multiple of 8, an F64 array's bytes too).
            let take = left.min(buf.len() as u64) as usize;
            f.read_exact(&mut buf[..take]).map_err(bad)?;
            h.update(&buf[..take]);
            if *is_f64 {
                values.clear();
                values.extend(buf[..take].chunks_exact(8).map(|c| f64::from_le_bytes(std::array::from_fn(|i| c[i]))));
                visit(name, len, at, &values)?;
                at += values.len();
            }
            left -= take as u64;
        }
    }
    if *header.checksum_mut() != h.hex() {
        return Err(ContainerError::Checksum(H::WHAT));
    }
    Ok(header)
}

/// FNV-1a 64 of a whole file, read a block at a time (a file's identity, as
/// [`checksum`] gives it for the file's bytes).
pub fn file_checksum(session: &crate::session::Session, path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    // Through the run's input path, so a part in an object store is read as any other.
    let mut f = crate::atomic::open_own(session, path).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut h = Fnv::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Ok(h.hex());
        }
        h.update(&buf[..got]);
    }
}

/// Parses a header and checks its format name and version.
fn check_header<H: Header>(json: &str) -> std::result::Result<H, ContainerError> {
    // The format name is checked before the whole header, so a file of another kind is
    // named as such rather than as a header that does not parse.
    let format = serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("format").and_then(|f| f.as_str()).map(str::to_string));
    if format.as_deref().is_some_and(|f| f != H::FORMAT) {
        return Err(ContainerError::Foreign(H::WHAT));
    }
    let header: H =
        serde_json::from_str(json).map_err(|e| ContainerError::BadHeader { what: H::WHAT, message: e.to_string() })?;
    if header.format() != H::FORMAT {
        return Err(ContainerError::Foreign(H::WHAT));
    }
    if !(H::OLDEST..=H::VERSION).contains(&header.version()) {
        return Err(ContainerError::Version {
            what: H::WHAT,
            version: header.version(),
            oldest: H::OLDEST,
            newest: H::VERSION,
            hint: H::HINT,
        });
    }
    Ok(header)
}

/// The bytes of a container holding `header` (its version and checksum set here) and
/// `arrays`, verified by reading them back.
pub fn encode<H: Header>(header: &H, mut arrays: Vec<Array>) -> Result<Vec<u8>> {
    arrays.sort_by(|a, b| a.name.cmp(&b.name));
    let mut header = header.clone();
    *header.checksum_mut() = seal(&header, arrays.iter().map(|a| a.bytes.as_slice()))?;
    let json = serde_json::to_string(&header).map_err(|e| Error::bug_from("a container header serialises", e))?;
    let views = arrays
        .iter()
        .map(|a| TensorView::new(a.dtype, a.shape.clone(), &a.bytes).map(|v| (a.name.clone(), v)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::bug_from("container arrays serialise", e))?;
    let bytes = safetensors::serialize(views, Some(HashMap::from([(KEY.to_string(), json)])))
        .map_err(|e| Error::bug_from("a container file serialises", e))?;
    decode::<H>(&bytes).map_err(|e| Error::bug_from("a file just built reads back", e))?;
    Ok(bytes)
}

/// A verified container: its header and its arrays, borrowed from the bytes.
pub struct Decoded<'a, H> {
    /// The header, checksum verified.
    pub header: H,
    tensors: SafeTensors<'a>,
}

impl<H> std::fmt::Debug for Decoded<'_, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoded").field("arrays", &self.tensors.len()).finish()
    }
}

/// Parses and verifies a container: format, version and checksum.
pub fn decode<H: Header>(bytes: &[u8]) -> std::result::Result<Decoded<'_, H>, ContainerError> {
    let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| ContainerError::NotSafetensors(e.to_string()))?;
    let json = meta.metadata().as_ref().and_then(|m| m.get(KEY)).ok_or(ContainerError::Foreign(H::WHAT))?;
    let mut header = check_header::<H>(json)?;
    let tensors = SafeTensors::deserialize(bytes).map_err(|e| ContainerError::NotSafetensors(e.to_string()))?;
    let mut names: Vec<&str> = tensors.names();
    names.sort_unstable();
    let mut datas = Vec::with_capacity(names.len());
    for n in &names {
        datas.push(tensors.tensor(n).map_err(|_| ContainerError::Missing(n.to_string()))?.data());
    }
    let want = if header.version() >= H::SEALED_FROM {
        seal(&header, datas.iter().copied()).map_err(|e| ContainerError::Inconsistent(e.to_string()))?
    } else {
        checksum(datas.iter().copied())
    };
    if *header.checksum_mut() != want {
        return Err(ContainerError::Checksum(H::WHAT));
    }
    Ok(Decoded { header, tensors })
}

impl<H> Decoded<'_, H> {
    /// Names of every array, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.tensors.names().into_iter().map(str::to_string).collect();
        n.sort();
        n
    }
    /// An array's type, shape and bytes.
    pub fn array(&self, name: &str) -> std::result::Result<(Dtype, Vec<usize>, &[u8]), ContainerError> {
        let t = self.tensors.tensor(name).map_err(|_| ContainerError::Missing(name.to_string()))?;
        Ok((t.dtype(), t.shape().to_vec(), t.data()))
    }
    /// Element count of an array, 0 when absent.
    pub fn len_of(&self, name: &str) -> usize {
        self.tensors.tensor(name).map_or(0, |t| t.shape().iter().product())
    }
    /// An f64 array of exactly `len` values.
    pub fn f64(&self, name: &str, len: usize) -> std::result::Result<Vec<f64>, ContainerError> {
        let (dtype, _, bytes) = self.array(name)?;
        if dtype != Dtype::F64 || bytes.len() != 8 * len {
            return Err(ContainerError::Shape(name.to_string()));
        }
        Ok(bytes.chunks_exact(8).map(|c| f64::from_le_bytes(std::array::from_fn(|i| c[i]))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Serialize, serde::Deserialize)]
    struct Toy {
        format: String,
        version: u32,
        checksum: String,
        note: String,
    }
    impl Header for Toy {
        const WHAT: &'static str = "toy";
        const FORMAT: &'static str = "toy-format";
        const VERSION: u32 = 3;
        const OLDEST: u32 = 1;
        const SEALED_FROM: u32 = 2;
        const XXH_FROM: u32 = 3;
        const HINT: &'static str = "rebuild it";
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

    fn toy() -> Vec<u8> {
        let h = Toy { format: "toy-format".into(), version: 2, checksum: String::new(), note: "abc".into() };
        encode(&h, vec![Array::f64("b", vec![2], &[1.5, -2.0]), Array::f64("a", vec![1], &[3.0])]).unwrap()
    }

    #[test]
    fn a_streamed_file_reads_as_the_built_one_and_its_read_back_refuses_any_changed_byte() {
        let dir = std::env::temp_dir().join(format!("sketchfit-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("toy.bin");
        // More than one conversion block, so block edges are crossed.
        let big: Vec<f64> = (0..20_000).map(|i| (i as f64).sin() * 1e3).collect();
        // Version 2 sealed by FNV-1a (still read), 3 by XXH64.
        for version in [2, 3] {
            let h = Toy { format: "toy-format".into(), version, checksum: String::new(), note: "abc".into() };
            let arrays = vec![
                F64Array { name: "b".into(), shape: vec![2], data: &[1.5, -2.0] },
                F64Array { name: "a".into(), shape: vec![100, 200], data: &big },
            ];
            write_f64(&crate::session::Session::new(), &path, &h, arrays).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            // The in-memory reader takes it: the same header, arrays and checksum as `encode`.
            let d = decode::<Toy>(&bytes).unwrap();
            assert_eq!((d.header.note.as_str(), d.f64("b", 2).unwrap()), ("abc", vec![1.5, -2.0]));
            assert_eq!(d.f64("a", 20_000).unwrap(), big);
            let built = decode::<Toy>(
                &encode(&h, vec![Array::f64("b", vec![2], &[1.5, -2.0]), Array::f64("a", vec![100, 200], &big)])
                    .unwrap(),
            )
            .unwrap()
            .header
            .checksum;
            assert_eq!(d.header.checksum, built);
            assert!(verify_file::<Toy>(&path).is_ok());
            // One changed byte in the header or deep in an array: the streamed check refuses.
            for at in [bytes.len() / 2, bytes.len() - 1, String::from_utf8_lossy(&bytes).find("abc").unwrap()] {
                let mut changed = bytes.clone();
                changed[at] ^= 1;
                std::fs::write(&path, &changed).unwrap();
                assert!(verify_file::<Toy>(&path).is_err(), "byte {at}");
            }
            // Sealed by the hash its version names, over the bare header and the arrays.
            let mut want = if version >= 3 { Sealer::Xxh(Box::new(Xxh64::new())) } else { Sealer::Fnv(Fnv::new()) };
            want.update(bare_json(&d.header).unwrap().as_bytes());
            for name in ["a", "b"] {
                want.update(d.array(name).unwrap().2);
            }
            assert_eq!(want.hex(), d.header.checksum, "version {version}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn round_trip_and_every_changed_byte_of_header_or_arrays_is_refused() {
        let bytes = toy();
        let d = decode::<Toy>(&bytes).unwrap();
        assert_eq!(d.header.note, "abc");
        assert_eq!(d.f64("b", 2).unwrap(), vec![1.5, -2.0]);
        assert!(matches!(d.f64("b", 3), Err(ContainerError::Shape(_))));
        assert!(matches!(d.f64("zz", 1), Err(ContainerError::Missing(_))));
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let at = text.find("abc").unwrap();
        let mut header_changed = bytes.clone();
        header_changed[at] = b'x';
        assert!(matches!(decode::<Toy>(&header_changed), Err(ContainerError::Checksum("toy"))));
        let mut array_changed = bytes.clone();
        let n = array_changed.len();
        array_changed[n - 1] ^= 1;
        assert!(matches!(decode::<Toy>(&array_changed), Err(ContainerError::Checksum("toy"))));
        assert!(matches!(decode::<Toy>(b"not at all"), Err(ContainerError::NotSafetensors(_))));
    }
}
