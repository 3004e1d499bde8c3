//! The seals of the container: XXH64 from each format's `XXH_FROM` version, FNV-1a 64
//! before it (still read), and FNV-1a as the project's short identity hash of small
//! values (fingerprints, inputs).

use super::Header;

/// FNV-1a 64, fed piece by piece.
pub(super) struct Fnv(u64);

impl Fnv {
    pub(super) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }

    pub(super) fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// XXH64 (seed 0), fed piece by piece: four independent lanes over 32-byte stripes, so
/// the multiplies overlap, near memory speed where FNV-1a's chain of one multiply per
/// byte is an order of magnitude slower. The same digest as the reference implementation for any split of
/// the input (tested against its published values).
pub(super) struct Xxh64 {
    lanes: [u64; 4],
    stripe: [u8; 32],
    held: usize,
    total: u64,
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

fn xxh_round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(std::array::from_fn(|i| b[i]))
}

impl Xxh64 {
    pub(super) fn new() -> Xxh64 {
        Xxh64 { lanes: [P1.wrapping_add(P2), P2, 0, P1.wrapping_neg()], stripe: [0; 32], held: 0, total: 0 }
    }

    fn stripe(lanes: &mut [u64; 4], s: &[u8]) {
        for (k, lane) in lanes.iter_mut().enumerate() {
            *lane = xxh_round(*lane, le64(&s[8 * k..]));
        }
    }

    pub(super) fn update(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.held > 0 {
            let take = (32 - self.held).min(bytes.len());
            self.stripe[self.held..self.held + take].copy_from_slice(&bytes[..take]);
            self.held += take;
            bytes = &bytes[take..];
            if self.held < 32 {
                return;
            }
            let stripe = self.stripe;
            Self::stripe(&mut self.lanes, &stripe);
            self.held = 0;
        }
        let mut stripes = bytes.chunks_exact(32);
        for s in &mut stripes {
            Self::stripe(&mut self.lanes, s);
        }
        let rest = stripes.remainder();
        self.stripe[..rest.len()].copy_from_slice(rest);
        self.held = rest.len();
    }

    pub(super) fn digest(&self) -> u64 {
        let [v1, v2, v3, v4] = self.lanes;
        let mut h = if self.total >= 32 {
            let mut h = v1.rotate_left(1).wrapping_add(v2.rotate_left(7)).wrapping_add(v3.rotate_left(12));
            h = h.wrapping_add(v4.rotate_left(18));
            for v in self.lanes {
                h = (h ^ xxh_round(0, v)).wrapping_mul(P1).wrapping_add(P4);
            }
            h
        } else {
            // Fewer than 32 bytes: the lanes never ran (`v3` is the seed).
            v3.wrapping_add(P5)
        };
        h = h.wrapping_add(self.total);
        let mut rest = &self.stripe[..self.held];
        while rest.len() >= 8 {
            h = (h ^ xxh_round(0, le64(rest))).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
            rest = &rest[8..];
        }
        if rest.len() >= 4 {
            let w = u32::from_le_bytes(std::array::from_fn(|i| rest[i]));
            h = (h ^ u64::from(w).wrapping_mul(P1)).rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
            rest = &rest[4..];
        }
        for &b in rest {
            h = (h ^ u64::from(b).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(P2);
        h ^= h >> 29;
        h = h.wrapping_mul(P3);
        h ^ (h >> 32)
    }
}

/// A container's seal, by the version that wrote it: XXH64 from `XXH_FROM`, FNV-1a before.
pub(super) enum Sealer {
    Fnv(Fnv),
    Xxh(Box<Xxh64>),
}

impl Sealer {
    pub(super) fn of<H: Header>(version: u32) -> Sealer {
        if version >= H::XXH_FROM {
            Sealer::Xxh(Box::new(Xxh64::new()))
        } else {
            Sealer::Fnv(Fnv::new())
        }
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        match self {
            Sealer::Fnv(h) => h.update(bytes),
            Sealer::Xxh(h) => h.update(bytes),
        }
    }

    pub(super) fn hex(&self) -> String {
        match self {
            Sealer::Fnv(h) => h.hex(),
            Sealer::Xxh(h) => format!("{:016x}", h.digest()),
        }
    }
}

/// FNV-1a 64 over byte slices, hex.
pub fn checksum<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut h = Fnv::new();
    for p in parts {
        h.update(p);
    }
    h.hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seal_is_xxh64_as_the_reference_gives_it_for_any_split_of_the_input() {
        // Digests of the reference implementation (python-xxhash 3, seed 0).
        let long: Vec<u8> = (0..768).map(|i| (i % 256) as u8).collect();
        let cases: [(&[u8], u64); 5] = [
            (b"", 0xef46_db37_51d8_e999),
            (b"a", 0xd24e_c4f1_a98c_6e5b),
            (b"abc", 0x44bc_2cf5_ad77_0999),
            (&long, 0x8e03_c838_c596_036f),
            (&long[..37], 0xd93f_a2df_ee5c_24c9),
        ];
        for (bytes, want) in cases {
            for split in [0, 1, 5, 31, 32, 33, 100].into_iter().filter(|&s| s <= bytes.len()) {
                let mut h = Xxh64::new();
                h.update(&bytes[..split]);
                h.update(&bytes[split..]);
                assert_eq!(h.digest(), want, "{} bytes split at {split}", bytes.len());
            }
        }
    }
}
