//! The documentation cannot drift from the code: every relative link and `math.md §`
//! reference resolves, every pipeline key the code reads is in the pipeline reference,
//! every flag of every command is in the commands reference, and the console examples
//! of Getting started run with the output they show.

use std::path::{Path, PathBuf};

use crate::common::*;

/// Every Markdown file of the book, the README and the changelog.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let root = PathBuf::from(repo(""));
    let mut out = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    walk(&root.join("docs/src"), &mut out);
    out.sort();
    out
}

/// The text of a page without its fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A heading's anchor as GitHub and mdBook make it.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut links = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let body = prose(&text);
        let mut rest = body.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            rest = &rest[end..];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (file, frag) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if !frag.is_empty() && path.extension().is_some_and(|x| x == "md") {
                let anchors: Vec<String> = std::fs::read_to_string(&path)
                    .unwrap()
                    .lines()
                    .filter(|l| l.starts_with('#'))
                    .map(|l| anchor(l.trim_start_matches('#')))
                    .collect();
                if !anchors.iter().any(|a| a == frag) {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(links > 40, "only {links} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_math_section_the_code_and_docs_cite_exists() {
    let math = std::fs::read_to_string(repo("docs/src/explanation/math.md")).unwrap();
    let sections: Vec<String> = math
        .lines()
        .filter(|l| l.starts_with("## ") || l.starts_with("### "))
        .filter_map(|l| {
            l.trim_start_matches('#').split_whitespace().next().map(|n| n.trim_end_matches('.').to_string())
        })
        .collect();
    let mut files = pages();
    fn rust(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs" || x == "py") {
                out.push(p);
            }
        }
    }
    for d in ["src", "tests", "python/src", "python/sketchfit", "scripts"] {
        rust(&PathBuf::from(repo(d)), &mut files);
    }
    let mut missing = Vec::new();
    let mut cited = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices("math.md §") {
            let tail = &text[i + "math.md §".len()..];
            let n: String = tail.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let n = n.trim_end_matches('.');
            if n.is_empty() {
                continue; // `math.md §N` as a pattern, not a citation
            }
            cited += 1;
            if !sections.iter().any(|s| s == n) {
                missing.push(format!("{}: §{n}", f.display()));
            }
        }
    }
    assert!(cited > 50, "only {cited} citations found: is the search looking in the right places?");
    assert!(missing.is_empty(), "citations of sections math.md does not have:\n{}", missing.join("\n"));
}

/// Every key path of a JSON value (`run.seed`, `data.train`, …): a table as `[name]`,
/// every other value by its path.
fn keys(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
    if let Some(o) = v.as_object() {
        for (k, v) in o {
            let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            if v.is_object() && prefix.is_empty() {
                out.push(format!("[{k}]"));
            } else {
                out.push(path.clone());
            }
            keys(&path, v, out);
        }
    }
}

#[test]
fn every_pipeline_key_is_in_the_pipeline_reference() {
    let reference = std::fs::read_to_string(repo("docs/src/reference/pipeline.md")).unwrap();
    // Every key of the file's sections, as the code serialises a pipeline and every stage
    // kind with its defaults.
    let spec = sketchfit::pipeline::spec::PipelineSpec::from_toml_str(
        "task = \"classification\"\n[data]\ntrain = [\"t\"]\nlabel = \"y\"\n[[stages]]\nkind = \"identity\"\n",
        "keys.toml",
    )
    .unwrap();
    let mut all = Vec::new();
    let mut value = serde_json::to_value(&spec).unwrap();
    value.as_object_mut().unwrap().remove("stages");
    value.as_object_mut().unwrap().remove("source");
    keys("", &value, &mut all);
    for kind in sketchfit::sketch::KINDS {
        let stage: sketchfit::sketch::StageSpec = toml::from_str(&format!("kind = \"{kind}\"")).unwrap();
        keys("stages", &serde_json::to_value(&stage).unwrap(), &mut all);
    }
    assert!(all.len() > 80, "only {} keys collected: {all:?}", all.len());
    let mut missing: Vec<String> = all
        .into_iter()
        .filter(|k| {
            if k.starts_with('[') {
                return !reference.contains(k.as_str());
            }
            let leaf = k.rsplit('.').next().unwrap();
            // A key is documented where the reference sets it (`leaf =`) or names it.
            !(reference.contains(&format!("{leaf} =")) || reference.contains(&format!("`{leaf}`")))
        })
        .collect();
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "pipeline keys missing from docs/src/reference/pipeline.md: {missing:?}");
}

#[test]
fn every_flag_of_every_command_is_in_the_commands_reference() {
    let reference = std::fs::read_to_string(repo("docs/src/reference/commands.md")).unwrap();
    let help = stdout(&sketchfit(&["--help"]));
    let commands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 10, "{help}");
    let mut missing = Vec::new();
    for c in &commands {
        if !reference.contains(&format!("sketchfit {c}")) {
            missing.push(format!("the command {c}"));
        }
        let text = stdout(&sketchfit(&[c, "--help"]));
        for flag in text.split_whitespace().filter(|w| w.starts_with("--")) {
            let flag = flag.trim_end_matches([',', '.', ')', ']']);
            let flag = flag.split(['=', '[', '<']).next().unwrap();
            if flag != "--help" && !reference.contains(flag) {
                missing.push(format!("{c} {flag}"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "flags missing from docs/src/reference/commands.md: {missing:?}");
}

/// Runs every `console` block of a page: each `$ sketchfit …` line as a command (paths
/// into `pipelines/` and `data/` are the repository's, other `.sfm` and `.parquet` paths a
/// temporary folder's, shell quotes removed), each line after it a line its output must
/// hold (`...` stands for lines left out). Returns the blocks run.
fn run_console_blocks(page: &str, dir: &TempDir) -> usize {
    let text = std::fs::read_to_string(repo(page)).unwrap();
    let root = repo("");
    let mut blocks = 0;
    let mut in_console = false;
    let mut expected: Vec<String> = Vec::new();
    let mut output = String::new();
    let check = |output: &str, expected: &[String]| {
        for e in expected.iter().filter(|e| e.as_str() != "...") {
            let found = output.lines().any(|l| l.trim_end() == e.trim_end());
            assert!(found, "{page}: '{e}' is not in the output:\n{output}");
        }
    };
    for line in text.lines() {
        if line.starts_with("```console") {
            in_console = true;
            blocks += 1;
            continue;
        }
        if !in_console {
            continue;
        }
        if line.starts_with("```") || line.starts_with("$ ") {
            check(&output, &expected);
            expected.clear();
            output.clear();
        }
        if line.starts_with("```") {
            in_console = false;
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            let args: Vec<String> = cmd
                .split_whitespace()
                .skip(1) // `sketchfit`
                .map(|a| {
                    let a = a.trim_matches('\'');
                    if a.starts_with("pipelines/") || a.starts_with("data/") {
                        format!("{root}/{a}")
                    } else if [".sfm", ".parquet", ".sfs", ".maps"].iter().any(|e| a.ends_with(e)) {
                        dir.path(a).to_string_lossy().into_owned()
                    } else {
                        a.to_string()
                    }
                })
                .collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = sketchfit(&args);
            assert_eq!(out.status.code(), Some(0), "{page}: {cmd}: {}", stderr(&out));
            // The page shows the path as given; the run prints the temporary one.
            output = stdout(&out).replace(&format!("{}/", dir.path("").to_string_lossy().trim_end_matches('/')), "");
        } else if !line.trim().is_empty() {
            expected.push(line.to_string());
        }
    }
    blocks
}

#[test]
fn the_console_examples_of_getting_started_and_the_guide_run_as_shown() {
    let dir = TempDir::new("docs-console");
    assert!(run_console_blocks("docs/src/getting-started.md", &dir) >= 3, "getting started's examples were not found");
    let mut guide = 0;
    for entry in std::fs::read_dir(repo("docs/src/guide")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        // A shell block that runs a command on the shipped data must be a `console`
        // block, so that it runs here.
        let mut in_shell = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_shell = !in_shell && matches!(line.trim_end(), "```sh" | "```bash" | "```shell");
            }
            let shipped = line.contains("pipelines/") || line.contains("data/");
            assert!(
                !(in_shell && shipped && line.contains("sketchfit ")),
                "{}: run it as a console block: {line}",
                path.display()
            );
        }
        let page = format!("docs/src/guide/{}", path.file_name().unwrap().to_string_lossy());
        guide += run_console_blocks(&page, &dir);
    }
    assert!(guide >= 1, "the guide's console examples were not found");
}
