//! JSON for f64 fields that may hold NaN or ±∞ (GCV at λ where df ≥ n, scores that
//! overflow): JSON has no such numbers and serde_json would write `null`, which does not
//! read back. These write `"NaN"`, `"inf"`, `"-inf"` and read those, numbers, and the
//! `null` of older files (as NaN).

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One number that may be non-finite.
#[derive(Debug, Clone, Copy)]
pub struct Num(pub f64);

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            v if v.is_finite() => s.serialize_f64(v),
            v if v.is_nan() => s.serialize_str("NaN"),
            v if v > 0.0 => s.serialize_str("inf"),
            _ => s.serialize_str("-inf"),
        }
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, \"NaN\", \"inf\" or \"-inf\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
                Ok(Num(f64::NAN))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
                match v {
                    "NaN" => Ok(Num(f64::NAN)),
                    "inf" => Ok(Num(f64::INFINITY)),
                    "-inf" => Ok(Num(f64::NEG_INFINITY)),
                    other => Err(E::custom(format!("'{other}' is not a number"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `Vec<f64>`.
pub mod vec {
    use super::*;
    /// Serialises.
    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&x| Num(x)))
    }
    /// Deserialises.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        Ok(Vec::<Num>::deserialize(d)?.into_iter().map(|n| n.0).collect())
    }
}

/// `Vec<Vec<f64>>`.
pub mod vec2 {
    use super::*;
    /// Serialises.
    pub fn serialize<S: Serializer>(v: &[Vec<f64>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|r| r.iter().map(|&x| Num(x)).collect::<Vec<_>>()))
    }
    /// Deserialises.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f64>>, D::Error> {
        Ok(Vec::<Vec<Num>>::deserialize(d)?.into_iter().map(|r| r.into_iter().map(|n| n.0).collect()).collect())
    }
}

/// `f64`.
pub mod one {
    use super::*;
    /// Serialises.
    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        Num(*v).serialize(s)
    }
    /// Deserialises.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Num::deserialize(d)?.0)
    }
}
