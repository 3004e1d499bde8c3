//! Golden vectors for the Hadamard tools, random Maclaurin (plain, H0/1, exact p = 1,
//! Hadamard-structured), CRAFTMaps and the recursive tensor sketch, each built from the
//! explicit random parameters of the numpy reference.

use serde_json::Value;
use sketchfit::sketch::count::CountSketch;
use sketchfit::sketch::craftmaps::Craftmaps;
use sketchfit::sketch::hadamard::{fwht, Srht};
use sketchfit::sketch::maclaurin::{DotKernel, OrderLaw, Projections, RandomMaclaurin};
use sketchfit::sketch::recursive::RecursiveTensorSketch;
use sketchfit::sketch::FeatureMap;

fn load(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn vec1(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn mat(v: &Value) -> (usize, usize, Vec<f64>) {
    let rows = v.as_array().unwrap();
    let cols = rows.first().map_or(0, |r| r.as_array().unwrap().len());
    (rows.len(), cols, rows.iter().flat_map(vec1).collect())
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn close_abs(got: &[f32], exp: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), exp.len(), "{what}: length");
    let err = got
        .iter()
        .zip(exp)
        .fold(0.0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs()));
    assert!(
        err <= tol,
        "{what}: max abs error {err:e} > {tol:e}\n got {got:?}\n exp {exp:?}"
    );
}

fn tol(c: &Value, exp: &[f64]) -> f64 {
    c.get("tol")
        .and_then(|t| t["f32_abs"].as_f64())
        .unwrap_or_else(|| 1e-5 * exp.iter().fold(1.0f64, |m, v| m.max(v.abs())))
}

#[test]
fn fwht_matches_the_sylvester_vectors() {
    for c in load("hadamard.json")
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("fwht_"))
    {
        let v = vec1(&c["inputs"]["v"]);
        let n = c["params"]["padded_length"].as_u64().unwrap() as usize;
        let mut buf = vec![0f32; n];
        buf[..v.len()].copy_from_slice(&f32s(&v));
        close_abs(&buf, &vec1(&c["expected"]["padded"]), 0.0, "pad");
        fwht(&mut buf);
        let exp = vec1(&c["expected"]["fwht"]);
        close_abs(
            &buf,
            &exp,
            1e-5 * exp.iter().fold(1.0f64, |m, v| m.max(v.abs())),
            c["name"].as_str().unwrap(),
        );
    }
}

fn srht_of(p: &Value) -> Srht {
    Srht {
        d_in: p["D"].as_u64().unwrap() as usize,
        zeta: vec1(&p["zeta"]).iter().map(|&v| v as i8).collect(),
        rows: vec1(&p["r"]).iter().map(|&v| v as u32).collect(),
    }
}

#[test]
fn srht_matches_golden_including_unsorted_rows_and_the_isometry() {
    for c in load("hadamard.json")
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("srht_"))
    {
        let s = srht_of(&c["params"]);
        s.validate().unwrap();
        let (rows, _, z) = mat(&c["inputs"]["Z"]);
        let mut got = vec![0f32; rows * s.output_dim()];
        s.map(&f32s(&z), rows, &mut got);
        let exp = mat(&c["expected"]["G"]).2;
        close_abs(&got, &exp, tol(c, &exp), c["name"].as_str().unwrap());
    }
}

fn kernel_of(p: &Value) -> DotKernel {
    match p["kernel"].as_str().unwrap() {
        "polynomial" => DotKernel::Polynomial {
            degree: p["p"].as_u64().unwrap() as u32,
            gamma: 1.0,
            offset: p["c"].as_f64().unwrap(),
        },
        _ => DotKernel::Exponential {
            gamma: p["gamma"].as_f64().unwrap(),
        },
    }
}

fn maclaurin_of(p: &Value, d: usize) -> RandomMaclaurin {
    let orders: Vec<u32> = vec1(&p["orders"]).iter().map(|&v| v as u32).collect();
    let total: usize = orders.iter().map(|&n| n as usize).sum();
    let mut signs = vec![0f32; d * total];
    let mut col = 0;
    for w in p["w"].as_array().unwrap() {
        for vector in w.as_array().unwrap() {
            for (row, s) in vec1(vector).iter().enumerate() {
                signs[row * total + col] = *s as f32;
            }
            col += 1;
        }
    }
    RandomMaclaurin::from_parts(
        kernel_of(p),
        d,
        p["h01"].as_bool().unwrap(),
        orders,
        Projections::Dense { signs },
        p["eta"].as_f64().unwrap(),
    )
}

#[test]
fn random_maclaurin_plain_h01_and_exact_cases_match_golden() {
    let cases = load("maclaurin.json");
    assert_eq!(cases.len(), 7);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let p = &c["params"];
        let (rows, d, x) = mat(&c["inputs"]["X"]);
        let k = kernel_of(p);
        let a9: Vec<f64> = (0..9).map(|n| k.coef(n)).collect();
        let exp_a = vec1(&c["expected"]["a_n_first9"]);
        for (a, b) in a9.iter().zip(&exp_a) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{name}: a_n");
        }
        let law = OrderLaw::new(
            k,
            p["eta"].as_f64().unwrap(),
            if p["h01"].as_bool().unwrap() { 2 } else { 0 },
        );
        for (n, q) in vec1(&p["orders"])
            .iter()
            .zip(vec1(&c["expected"]["q_of_orders"]))
        {
            assert!(
                (law.unwrap().q(*n as u32) - q).abs() <= 1e-12 * q,
                "{name}: q"
            );
        }
        let m = maclaurin_of(p, d);
        assert_eq!(
            m.output_dim() as u64,
            p["D"].as_u64().unwrap(),
            "{name}: output dimension"
        );
        let mut got = vec![0f32; rows * m.output_dim()];
        m.map(&f32s(&x), rows, &mut got);
        let exp = mat(&c["expected"]["Z"]).2;
        close_abs(&got, &exp, tol(c, &exp), name);
        if p["h01"].as_bool().unwrap() {
            // The exact block is bit-identical to [√a0; √a1 x] as f32.
            let a0 = k.coef(0);
            let ex = d + usize::from(a0 > 0.0);
            let mut want = Vec::new();
            if a0 > 0.0 {
                want.push(a0.sqrt() as f32);
            }
            want.extend(x[..d].iter().map(|&v| k.coef(1).sqrt() as f32 * v as f32));
            assert_eq!(&got[..ex], &want[..], "{name}: exact block");
        }
    }
}

#[test]
fn craftmaps_rm_h01_to_srht_matches_golden() {
    let cases = load("hadamard.json");
    let c = cases
        .iter()
        .find(|c| c["name"] == "craftmaps_rm_h01_D12_to_E5")
        .unwrap();
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let up = maclaurin_of(&c["params"]["up"], d);
    let craft = Craftmaps {
        up: Box::new(up),
        down: Box::new(srht_of(&c["params"]["down"])),
    };
    let mut zup = vec![0f32; rows * craft.up.output_dim()];
    craft.up.map(&f32s(&x), rows, &mut zup);
    let eu = mat(&c["inputs"]["Z_up"]).2;
    close_abs(&zup, &eu, tol(c, &eu), "Z_up");
    let mut got = vec![0f32; rows * craft.output_dim()];
    craft.map(&f32s(&x), rows, &mut got);
    let exp = mat(&c["expected"]["Z"]).2;
    close_abs(&got, &exp, tol(c, &exp), "CRAFTMaps");
}

#[test]
fn hadamard_structured_up_projection_matches_golden() {
    let cases = load("hadamard.json");
    let c = cases
        .iter()
        .find(|c| c["name"] == "craftmaps_structured_up_exp_h01")
        .unwrap();
    let p = &c["params"];
    let (rows, d, x) = mat(&c["inputs"]["X"]);
    let (_, _, zeta) = mat(&p["zeta"]);
    let m = RandomMaclaurin::from_parts(
        kernel_of(p),
        d,
        true,
        vec1(&p["orders"]).iter().map(|&v| v as u32).collect(),
        Projections::Hadamard {
            d_pad: p["d_prime"].as_u64().unwrap() as usize,
            zeta: zeta.iter().map(|&v| v as i8).collect(),
            perm: vec1(&p["pi"]).iter().map(|&v| v as u32).collect(),
        },
        p["eta"].as_f64().unwrap(),
    );
    let mut got = vec![0f32; rows * m.output_dim()];
    m.map(&f32s(&x), rows, &mut got);
    let exp = mat(&c["expected"]["Z"]).2;
    close_abs(&got, &exp, tol(c, &exp), "structured");
}

fn cs(v: &Value, hk: &str, sk: &str, m: usize) -> CountSketch {
    CountSketch {
        hash: vec1(&v[hk]).iter().map(|&x| x as u32).collect(),
        sign: vec1(&v[sk]).iter().map(|&x| x as i8).collect(),
        dim: m,
    }
}

#[test]
fn recursive_tensor_sketch_tree_matches_golden() {
    let cases = load("gaussian_sketch.json");
    let mut checked = 0;
    for c in cases
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("recursive_ts_"))
    {
        let p = &c["params"];
        let (n, k, m) = (
            p["n"].as_u64().unwrap() as usize,
            p["k"].as_u64().unwrap() as usize,
            p["m"].as_u64().unwrap() as usize,
        );
        let leaves = p["leaves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| cs(l, "h", "s", m))
            .collect();
        let nodes = p["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|level| {
                level
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|nd| (cs(nd, "h1", "s1", m), cs(nd, "h2", "s2", m)))
                    .collect()
            })
            .collect();
        let t = RecursiveTensorSketch::from_parts(n, k, m, leaves, nodes);
        let (_, _, u) = mat(&c["inputs"]["u"]);
        let u = f32s(&u);
        let mut s = t.scratch();
        let mut got = vec![0f32; m];
        t.sketch(|i| &u[i * n..(i + 1) * n], &mut s, &mut got);
        let exp = vec1(&c["expected"]["T"]);
        close_abs(
            &got,
            &exp,
            1e-5 * exp.iter().fold(1.0f64, |a, v| a.max(v.abs())),
            c["name"].as_str().unwrap(),
        );
        checked += 1;
    }
    assert_eq!(checked, 4);
}
