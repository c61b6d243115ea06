//! The import picture of `src/`: modules depend on each other without cycles, the
//! argument types depend on nothing of the crate, and no subcommand depends on another
//! (shared pieces live in shared modules). Read from the `crate::…` paths in the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The modules of the crate a source text names through `crate::` paths, in `use`
/// lines (`use crate::a::b;`, `use crate::{a, b::c};`) or inline (`crate::a::f()`).
/// Comments are skipped.
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let preceded_by_ident = rest[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            rest = &rest[i + "crate::".len()..];
            if preceded_by_ident {
                continue; // e.g. `cadence_core::…`, `my_crate::…`
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    out.extend(ident(item.trim()));
                }
            } else {
                out.extend(ident(rest));
            }
        }
    }
    out
}

/// The identifier `s` starts with, if any.
fn ident(s: &str) -> Option<String> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| s[..end].to_string())
}

/// Module → the modules it imports, for every `src/*.rs` but the roots (`lib.rs`,
/// `main.rs`), keeping only names that are modules of `src/`.
fn src_graph() -> Graph {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut texts = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "rs") && stem != "lib" && stem != "main" {
            texts.insert(stem, std::fs::read_to_string(&path).unwrap());
        }
    }
    texts
        .iter()
        .map(|(m, text)| {
            let deps = imports(text)
                .into_iter()
                .filter(|d| d != m && texts.contains_key(d))
                .collect();
            (m.clone(), deps)
        })
        .collect()
}

/// A cycle of `g` as the path that closes it (`a → b → a`), if there is one.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        g: &Graph,
        m: &str,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|p| p == m).expect("on the path");
                let mut cycle = path[start..].to_vec();
                cycle.push(m.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(m.to_string(), Mark::Open);
        path.push(m.to_string());
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, d, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(m.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut marks, &mut Vec::new()))
}

/// A subcommand's module: `*_cmd`, and `fidelity`.
fn is_subcommand(m: &str) -> bool {
    m.ends_with("_cmd") || m == "fidelity"
}

fn graph(edges: &[(&str, &str)]) -> Graph {
    let mut g = Graph::new();
    for (a, b) in edges {
        g.entry(a.to_string()).or_default().insert(b.to_string());
        g.entry(b.to_string()).or_default();
    }
    g
}

#[test]
fn imports_are_read_from_use_lines_groups_and_inline_paths() {
    let text = "use crate::cli::{BenchArgs, SearchAxis};\n\
                use crate::{assemble, output::write_outputs};\n\
                use cadence_core::report::RunInfo;\n\
                // use crate::commented_out;\n\
                let w = crate::workload::prepare(&a)?;\n\
                #[arg(value_parser = crate::cli::parse_duration)]\n";
    let want: BTreeSet<String> = ["cli", "assemble", "output", "workload"]
        .map(String::from)
        .into();
    assert_eq!(imports(text), want);
}

#[test]
fn a_cycle_is_found_and_an_acyclic_graph_passes() {
    // The knot `src/` had: plan_cmd → bench_cmd → cli → plan_cmd.
    let knot = graph(&[
        ("plan_cmd", "bench_cmd"),
        ("bench_cmd", "cli"),
        ("cli", "plan_cmd"),
        ("report_cmd", "cli"),
    ]);
    let cycle = find_cycle(&knot).expect("the knot is a cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4, "{cycle:?}");
    for m in ["plan_cmd", "bench_cmd", "cli"] {
        assert!(cycle.iter().any(|c| c == m), "{cycle:?}");
    }
    // Two modules importing each other (bench_cmd ↔ report_cmd) are a cycle too.
    assert!(find_cycle(&graph(&[
        ("bench_cmd", "report_cmd"),
        ("report_cmd", "bench_cmd")
    ]))
    .is_some());
    // A diamond is not.
    let diamond = graph(&[
        ("plan_cmd", "assemble"),
        ("plan_cmd", "cli"),
        ("assemble", "exit"),
        ("cli", "exit"),
    ]);
    assert_eq!(find_cycle(&diamond), None);
}

#[test]
fn src_imports_have_no_cycle() {
    let g = src_graph();
    assert!(
        g.contains_key("cli") && g.contains_key("bench_cmd"),
        "{g:?}"
    );
    assert_eq!(find_cycle(&g), None, "src/ imports in a cycle: {g:#?}");
    // Adding an edge back from the arguments to a subcommand would be caught.
    let mut knotted = g.clone();
    knotted
        .get_mut("cli")
        .unwrap()
        .insert("plan_cmd".to_string());
    assert!(find_cycle(&knotted).is_some());
}

#[test]
fn arguments_depend_on_nothing_and_subcommands_not_on_each_other() {
    let g = src_graph();
    assert_eq!(g["cli"], BTreeSet::new(), "cli.rs imports {:?}", g["cli"]);
    for (m, deps) in &g {
        for d in deps {
            assert!(
                !is_subcommand(d),
                "{m} imports the subcommand {d}: move what they share to a shared module"
            );
        }
    }
    let subcommands = g.keys().filter(|m| is_subcommand(m)).count();
    assert!(subcommands >= 7, "{g:?}");
}
