//! The random parameters of a built map as named arrays: what a model file stores for
//! each stage, and the checked lookups a family's `restore` reads them back with.

use super::count::CountSketch;

/// A named array of a stage's materialised random parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamArray {
    /// Name within the stage (e.g. `hash`).
    pub name: String,
    /// Shape, row-major.
    pub shape: Vec<usize>,
    /// Values.
    pub data: ParamData,
}

/// The values of a [`ParamArray`].
#[derive(Debug, Clone, PartialEq)]
pub enum ParamData {
    /// Hash values, orders, indices.
    U32(Vec<u32>),
    /// Signs.
    I8(Vec<i8>),
    /// Real parameters.
    F32(Vec<f32>),
}

impl ParamArray {
    pub(crate) fn u32(name: &str, shape: Vec<usize>, v: Vec<u32>) -> Self {
        ParamArray { name: name.into(), shape, data: ParamData::U32(v) }
    }
    pub(crate) fn i8(name: &str, shape: Vec<usize>, v: Vec<i8>) -> Self {
        ParamArray { name: name.into(), shape, data: ParamData::I8(v) }
    }
    pub(crate) fn f32(name: &str, shape: Vec<usize>, v: Vec<f32>) -> Self {
        ParamArray { name: name.into(), shape, data: ParamData::F32(v) }
    }
    pub(crate) fn prefixed(mut self, p: &str) -> Self {
        self.name = format!("{p}{}", self.name);
        self
    }
}

/// Stored arrays of a stage, looked up by name with shape checks.
pub(crate) struct Params<'a>(pub(crate) &'a [ParamArray]);

pub(crate) type PResult<T> = std::result::Result<T, String>;

impl Params<'_> {
    pub(crate) fn get(&self, name: &str) -> PResult<&ParamArray> {
        self.0.iter().find(|p| p.name == name).ok_or_else(|| format!("missing array '{name}'"))
    }
    pub(crate) fn u32(&self, name: &str, shape: &[usize]) -> PResult<Vec<u32>> {
        match self.get(name)? {
            ParamArray { shape: s, data: ParamData::U32(v), .. }
                if s == shape && v.len() == s.iter().product::<usize>() =>
            {
                Ok(v.clone())
            }
            _ => Err(format!("array '{name}' must be u32 of shape {shape:?}")),
        }
    }
    pub(crate) fn i8(&self, name: &str, shape: &[usize]) -> PResult<Vec<i8>> {
        match self.get(name)? {
            ParamArray { shape: s, data: ParamData::I8(v), .. }
                if s == shape && v.len() == s.iter().product::<usize>() =>
            {
                if v.iter().any(|&x| x != 1 && x != -1) {
                    return Err(format!("array '{name}' must hold signs ±1"));
                }
                Ok(v.clone())
            }
            _ => Err(format!("array '{name}' must be i8 of shape {shape:?}")),
        }
    }
    pub(crate) fn f32(&self, name: &str, shape: &[usize]) -> PResult<Vec<f32>> {
        self.f32_ref(name, shape).map(<[f32]>::to_vec)
    }
    /// [`Params::f32`] without the copy: for arrays of gigabytes (Nyström's factor),
    /// which a model's read-back would otherwise hold twice.
    pub(crate) fn f32_ref(&self, name: &str, shape: &[usize]) -> PResult<&[f32]> {
        match self.get(name)? {
            ParamArray { shape: s, data: ParamData::F32(v), .. }
                if s == shape && v.len() == s.iter().product::<usize>() =>
            {
                Ok(v)
            }
            _ => Err(format!("array '{name}' must be f32 of shape {shape:?}")),
        }
    }
    pub(crate) fn shape(&self, name: &str) -> PResult<Vec<usize>> {
        Ok(self.get(name)?.shape.clone())
    }
    pub(crate) fn count_sketches(
        &self,
        hash: &str,
        sign: &str,
        k: usize,
        n: usize,
        m: usize,
    ) -> PResult<Vec<CountSketch>> {
        // No sketches (a degree-1 tree): the stored arrays are empty, whatever their width.
        if k == 0 {
            return match (self.get(hash)?, self.get(sign)?) {
                (ParamArray { data: ParamData::U32(h), .. }, ParamArray { data: ParamData::I8(g), .. })
                    if h.is_empty() && g.is_empty() =>
                {
                    Ok(Vec::new())
                }
                _ => Err(format!("arrays '{hash}' and '{sign}' must be empty for no sketches")),
            };
        }
        let h = self.u32(hash, &[k, n])?;
        let s = self.i8(sign, &[k, n])?;
        if h.iter().any(|&v| v as usize >= m) {
            return Err(format!("array '{hash}' has values outside [0, {m})"));
        }
        Ok((0..k)
            .map(|j| CountSketch { hash: h[j * n..(j + 1) * n].to_vec(), sign: s[j * n..(j + 1) * n].to_vec(), dim: m })
            .collect())
    }
    pub(crate) fn sub(&self, prefix: &str) -> Vec<ParamArray> {
        self.0
            .iter()
            .filter_map(|p| p.name.strip_prefix(prefix).map(|n| ParamArray { name: n.into(), ..p.clone() }))
            .collect()
    }
}

pub(crate) fn count_sketch_params(hash: &str, sign: &str, cs: &[CountSketch]) -> Vec<ParamArray> {
    let n = cs.first().map_or(0, CountSketch::input_dim);
    vec![
        ParamArray::u32(hash, vec![cs.len(), n], cs.iter().flat_map(|c| c.hash.clone()).collect()),
        ParamArray::i8(sign, vec![cs.len(), n], cs.iter().flat_map(|c| c.sign.clone()).collect()),
    ]
}
