//! The documentation holds together: every relative link in README.md, BENCHMARKS.md
//! and every Markdown file under docs/ points at a file that exists, and, when it
//! names an anchor in a Markdown file, at a heading that file has (anchors derived as
//! GitHub and mdBook derive them: lowercase, spaces to `-`, other punctuation dropped,
//! `-1`, `-2` … for repeats). Every page of the book (docs/src) is listed in its
//! SUMMARY.md and every SUMMARY entry exists; the introduction's guide names SUMMARY's
//! parts and pages, in its order. And the pages hold no lab-notebook
//! references: no dated notes, no issue or item numbers (another project's
//! `name#123` is a citation and fine).
//!
//! Links inside fenced code blocks and inline code spans are text, not links, and are
//! not checked. Std only: a small scanner rather than a Markdown crate.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, BENCHMARKS.md and every `.md` under docs/, sorted.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    markdown_under(&root.join("docs"), &mut docs);
    docs.sort();
    docs
}

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // mdBook's output, when someone built the book locally.
            if path.file_name().is_some_and(|n| n == "book") {
                continue;
            }
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The document's prose: paragraphs (runs of non-blank lines outside fenced code
/// blocks), each with the number of its first line. Code spans can run over a line
/// break, so they are removed from whole paragraphs, not line by line.
fn paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        if let Some(open) = &fence {
            if marker.len() >= open.len() && marker.starts_with(&open[..1]) {
                fence = None;
            }
            continue;
        }
        if marker.len() >= 3
            && (marker.chars().all(|c| c == '`') || marker.chars().all(|c| c == '~'))
        {
            out.extend(current.take());
            fence = Some(marker);
            continue;
        }
        if line.trim().is_empty() {
            out.extend(current.take());
            continue;
        }
        match &mut current {
            Some((_, p)) => {
                p.push('\n');
                p.push_str(line);
            }
            None => current = Some((i + 1, line.to_string())),
        }
    }
    out.extend(current);
    out
}

/// `text` with inline code spans removed (a run of n backticks up to the next run of
/// exactly n; an unmatched run is literal text). A span's line breaks stay, so line
/// numbers still count.
fn without_code_spans(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let run_at = |i: usize| b[i..].iter().take_while(|&&c| c == '`').count();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != '`' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let mut close = None;
        while j < b.len() {
            if b[j] == '`' {
                let m = run_at(j);
                if m == n {
                    close = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.push(' ');
                out.extend(b[i..end].iter().filter(|&&c| c == '\n'));
                i = end;
            }
            None => {
                out.extend(&b[i..i + n]);
                i += n;
            }
        }
    }
    out
}

/// The destinations of the inline links `[text](dest)` (images too) and reference
/// definitions `[name]: dest` in the document, each with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (first, para) in paragraphs(text) {
        let prose = without_code_spans(&para);
        let c: Vec<char> = prose.chars().collect();
        let mut line = first;
        for i in 1..c.len() {
            if c[i - 1] == '\n' {
                line += 1;
            }
            if !(c[i - 1] == ']' && c[i] == '(') {
                continue;
            }
            // The `]` must close a `[` of the same paragraph.
            let mut depth = 0i32;
            let opened = (0..i - 1).rev().any(|k| {
                match c[k] {
                    ']' => depth += 1,
                    '[' if depth == 0 => return true,
                    '[' => depth -= 1,
                    _ => {}
                }
                false
            });
            if !opened {
                continue;
            }
            let rest = &c[i + 1..];
            let dest: String = if rest.first() == Some(&'<') {
                rest[1..].iter().take_while(|&&ch| ch != '>').collect()
            } else {
                let mut depth = 0i32;
                rest.iter()
                    .take_while(|&&ch| {
                        match ch {
                            '(' => depth += 1,
                            ')' if depth == 0 => return false,
                            ')' => depth -= 1,
                            _ => {}
                        }
                        !ch.is_whitespace()
                    })
                    .collect()
            };
            out.push((line, dest));
        }
        for (k, l) in prose.lines().enumerate() {
            let t = l.trim_start();
            if l.len() - t.len() > 3 || !t.starts_with('[') {
                continue;
            }
            if let Some((label, dest)) = t[1..].split_once("]:") {
                if !label.is_empty() && !label.contains(']') {
                    if let Some(d) = dest.split_whitespace().next() {
                        out.push((first + k, d.trim_matches(['<', '>']).to_string()));
                    }
                }
            }
        }
    }
    out
}

/// A heading's anchor as GitHub and mdBook make it: lowercase; letters, digits, `-`
/// and `_` kept, each space a `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as rendered: link destinations and trailing `#`s gone.
fn heading_text(raw: &str) -> String {
    let raw = raw.trim().trim_end_matches('#').trim_end();
    let mut out = String::new();
    let mut rest = raw;
    while let Some(start) = rest.find("](") {
        out.push_str(&rest[..start]);
        rest = &rest[start + 2..];
        rest = rest.find(')').map_or("", |end| &rest[end + 1..]);
    }
    out.push_str(rest);
    out.replace('[', "")
}

/// Every anchor a Markdown document defines: its headings' slugs (repeats numbered
/// `-1`, `-2` …) and explicit `id="…"`/`name="…"` attributes.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, para) in paragraphs(text) {
        for line in para.lines() {
            let t = line.trim_start();
            let hashes = t.chars().take_while(|&c| c == '#').count();
            if (1..=6).contains(&hashes)
                && line.len() - t.len() <= 3
                && t[hashes..].starts_with(' ')
            {
                // Code in a heading keeps its text (the backticks are dropped as
                // punctuation), unlike code in prose.
                let base = slug(&heading_text(&t[hashes..]));
                let n = seen.entry(base.clone()).or_insert(0);
                out.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
            for attr in ["id=\"", "name=\""] {
                let mut rest = line;
                while let Some(at) = rest.find(attr) {
                    rest = &rest[at + attr.len()..];
                    if let Some(end) = rest.find('"') {
                        out.insert(rest[..end].to_string());
                    }
                }
            }
        }
    }
    out
}

/// What is wrong with the relative links of `doc`: one line each, naming the
/// document, the line and the link.
fn broken_links(root: &Path, doc: &Path) -> Vec<String> {
    let text = fs::read_to_string(doc).unwrap();
    let name = doc.strip_prefix(root).unwrap_or(doc).display().to_string();
    let mut problems = Vec::new();
    for (line, dest) in links(&text) {
        let scheme = dest.split_once(':').is_some_and(|(s, _)| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        });
        if dest.is_empty() || scheme || dest.starts_with("//") {
            continue;
        }
        let (path, anchor) = dest.split_once('#').unwrap_or((dest.as_str(), ""));
        let path = path.split('?').next().unwrap_or_default();
        let target = if path.is_empty() {
            doc.to_path_buf()
        } else if path.starts_with('/') {
            root.join(path.trim_start_matches('/'))
        } else {
            doc.parent().unwrap().join(path)
        };
        if !target.exists() {
            problems.push(format!(
                "{name}:{line}: `{dest}`: no such file {}",
                target.display()
            ));
            continue;
        }
        if anchor.is_empty() || target.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let defined = anchors(&fs::read_to_string(&target).unwrap());
        if !defined.contains(anchor) {
            problems.push(format!(
                "{name}:{line}: `{dest}`: no heading with the anchor #{anchor} in {} (it has: {})",
                target.display(),
                defined.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    problems
}

#[test]
fn every_relative_link_in_readme_benchmarks_and_docs_resolves() {
    let root = root();
    let docs = documents(&root);
    assert!(
        docs.iter().any(|d| d.ends_with("docs/src/SUMMARY.md")),
        "the book is missing: {docs:?}"
    );
    let mut problems = Vec::new();
    let mut relative = 0;
    for doc in &docs {
        let text = fs::read_to_string(doc).unwrap();
        relative += links(&text)
            .iter()
            .filter(|(_, d)| !d.contains("://"))
            .count();
        problems.extend(broken_links(&root, doc));
    }
    // The front door and the book link to each other by the dozen; finding none
    // means the scanner broke, not that the links are fine.
    assert!(
        relative > 100,
        "only {relative} relative links found in {} documents",
        docs.len()
    );
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_book_page_is_in_the_summary_and_every_entry_exists() {
    let src = root().join("docs/src");
    let summary_path = src.join("SUMMARY.md");
    let summary = fs::read_to_string(&summary_path).unwrap();
    let mut listed = BTreeSet::new();
    for (line, dest) in links(&summary) {
        let page = dest.split('#').next().unwrap_or_default().to_string();
        assert!(
            src.join(&page).is_file(),
            "SUMMARY.md:{line}: the entry {dest} is not a page in docs/src"
        );
        listed.insert(src.join(page));
    }
    let mut pages = Vec::new();
    markdown_under(&src, &mut pages);
    let unlisted: Vec<_> = pages
        .iter()
        .filter(|p| **p != summary_path && !listed.contains(*p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(pages.len() > 10, "{} pages in docs/src", pages.len());
    assert!(unlisted.is_empty(), "pages not in SUMMARY.md: {unlisted:?}");
}

/// The book's parts as SUMMARY.md lays them out: each `# Part` heading with the pages
/// listed under it, in order (the pages before the first part, such as the
/// introduction, have part "").
fn summary_parts(summary: &str) -> Vec<(String, Vec<String>)> {
    let mut parts = vec![(String::new(), Vec::new())];
    // The first heading is the title (`# Summary`), not a part.
    for line in summary.lines().skip_while(|l| !l.starts_with("# ")).skip(1) {
        if let Some(h) = line.strip_prefix("# ") {
            parts.push((h.trim().to_string(), Vec::new()));
        } else if line.trim_start().starts_with("- [") || line.starts_with('[') {
            for (_, dest) in links(line) {
                parts.last_mut().unwrap().1.push(dest);
            }
        }
    }
    parts.retain(|(h, pages)| !h.is_empty() || !pages.is_empty());
    parts
}

/// The introduction's guide to the book: each `- **Part**: …` bullet with the book's
/// pages it links (links out of docs/src, like the README, are not pages).
fn introduction_parts(intro: &str) -> Vec<(String, Vec<String>)> {
    let mut parts: Vec<(String, Vec<String>)> = Vec::new();
    for para in intro.split("\n- ").skip(1) {
        let Some(rest) = para.strip_prefix("**") else {
            continue;
        };
        let Some((name, _)) = rest.split_once("**") else {
            continue;
        };
        let pages = links(para)
            .into_iter()
            .map(|(_, dest)| dest)
            .filter(|d| !d.starts_with("../") && !d.contains("://"))
            .collect();
        parts.push((name.to_string(), pages));
    }
    parts
}

#[test]
fn the_introduction_guides_to_every_part_and_page_of_the_summary() {
    let src = root().join("docs/src");
    let summary = fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let intro = fs::read_to_string(src.join("introduction.md")).unwrap();
    let mut want = summary_parts(&summary);
    // The introduction itself stands before the first part.
    assert_eq!(
        want.remove(0),
        (String::new(), vec!["introduction.md".to_string()])
    );
    let have = introduction_parts(&intro);
    assert!(want.len() >= 4, "{want:?}");
    assert_eq!(
        have, want,
        "docs/src/introduction.md's bullets (part, pages) differ from SUMMARY.md's parts"
    );
}

#[test]
fn the_guide_check_reads_parts_and_pages() {
    let summary = "# Summary\n\n[Intro](introduction.md)\n\n# One\n\n- [A](a.md)\n- [B](b.md)\n\n# Two\n\n- [C](c.md)\n";
    assert_eq!(
        summary_parts(summary),
        [
            (String::new(), vec!["introduction.md".to_string()]),
            ("One".into(), vec!["a.md".into(), "b.md".into()]),
            ("Two".into(), vec!["c.md".into()]),
        ]
    );
    let intro = "Text [README](../../README.md).\n\n- **One**: [a](a.md), [the\n  b](b.md).\n- **Two**: [c](c.md) and [x](https://x.org).\n\nMore.";
    assert_eq!(
        introduction_parts(intro),
        [
            ("One".to_string(), vec!["a.md".to_string(), "b.md".into()]),
            ("Two".into(), vec!["c.md".into()]),
        ]
    );
}

/// The words that give a page away as a lab notebook: an issue or item number
/// (`issue 12`, `#31`, `item 3`) or a date (`2026-11-25`). `project#123` (another
/// project's tracker) is a citation and passes.
fn notebook_marks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (first, para) in paragraphs(text) {
        let prose = without_code_spans(&para);
        let c: Vec<char> = prose.chars().collect();
        let line_of = |k: usize| first + c[..k].iter().filter(|&&ch| ch == '\n').count();
        let digit = |k: usize| c.get(k).is_some_and(|ch| ch.is_ascii_digit());
        let word_before =
            |k: usize| k > 0 && (c[k - 1].is_alphanumeric() || "_-/.&".contains(c[k - 1]));
        for i in 0..c.len() {
            let at = |w: &str| {
                let w: Vec<char> = w.chars().collect();
                c.len() >= i + w.len()
                    && c[i..i + w.len()]
                        .iter()
                        .zip(&w)
                        .all(|(a, b)| a.to_ascii_lowercase() == *b)
            };
            let mark = if c[i] == '#' && digit(i + 1) && !word_before(i) {
                Some("an issue number")
            } else if (at("issue ") && digit(i + 6)) || (at("item ") && digit(i + 5)) {
                (!word_before(i)).then_some("an issue or item number")
            } else if (0..4).all(|k| digit(i + k))
                && !word_before(i)
                && c.get(i + 4) == Some(&'-')
                && digit(i + 5)
                && digit(i + 6)
                && c.get(i + 7) == Some(&'-')
                && digit(i + 8)
                && digit(i + 9)
            {
                Some("a date")
            } else {
                None
            };
            if let Some(what) = mark {
                let context: String = c[i.saturating_sub(20)..(i + 20).min(c.len())]
                    .iter()
                    .collect();
                out.push((
                    line_of(i),
                    format!("{what}: …{}…", context.replace('\n', " ")),
                ));
            }
        }
    }
    out
}

#[test]
fn the_docs_hold_no_dated_notes_nor_issue_numbers() {
    let root = root();
    let mut found = Vec::new();
    for doc in documents(&root) {
        let name = doc.strip_prefix(&root).unwrap().display().to_string();
        let text = fs::read_to_string(&doc).unwrap();
        for (line, what) in notebook_marks(&text) {
            found.push(format!("{name}:{line}: {what}"));
        }
    }
    assert!(
        found.is_empty(),
        "lab-notebook marks:\n{}",
        found.join("\n")
    );
}

/// The checker itself, on a small tree of its own: a broken file link and a broken
/// anchor are caught; good links, repeated headings, punctuation in headings, and
/// links inside code are not reported.
#[test]
fn the_checker_catches_a_missing_file_and_a_missing_anchor() {
    let dir = std::env::temp_dir().join(format!("cadence-docs-links-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(
        dir.join("sub/page.md"),
        "# The page\n\n## Kernel vs user clock: `--timestamps` (why)\n\n## Notes\n\n## Notes\n",
    )
    .unwrap();
    let doc = dir.join("index.md");
    fs::write(
        &doc,
        "# Index\n\n\
         See [the page](sub/page.md), [its clocks](sub/page.md#kernel-vs-user-clock---timestamps-why)\n\
         and [the second notes](sub/page.md#notes-1), [here](#index) and [a site](https://example.com/x).\n\n\
         A [missing page](sub/gone.md) and [a missing anchor](sub/page.md#clocks).\n\n\
         ```\n[in a fence](nowhere.md)\n```\n\n\
         Code: `[in a span](nowhere.md)` and ``[two\nlines](nowhere.md)``.\n\n\
         [ref]: sub/page.md#notes\n[bad ref]: sub/none.md\n",
    )
    .unwrap();
    let problems = broken_links(&dir, &doc);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("sub/gone.md") && problems[0].starts_with("index.md:6:"));
    assert!(problems[1].starts_with("index.md:6:"), "{problems:#?}");
    assert!(problems[2].starts_with("index.md:16:"), "{problems:#?}");
    assert!(problems[1].contains("#clocks") && problems[1].contains("kernel-vs-user-clock"));
    assert!(problems[2].contains("sub/none.md"), "{problems:#?}");
    assert_eq!(
        slug("A fleet: sizing and the merge's cost"),
        "a-fleet-sizing-and-the-merges-cost"
    );
    assert_eq!(
        slug("CPU per chunk at 1,000 streams"),
        "cpu-per-chunk-at-1000-streams"
    );
}

#[test]
fn notebook_marks_are_found_and_citations_pass() {
    let text = "Fixed in issue 12 and #31 (item 3),\nmeasured 2026-11-25.\n\n\
                As guidellm#1145 says; rows 1–26; `#7` in code; a `2026-11-25` flag.\n";
    let marks = notebook_marks(text);
    let lines: Vec<_> = marks.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, [1, 1, 1, 2]);
    let whats: Vec<_> = marks
        .iter()
        .map(|(_, w)| w.split(':').next().unwrap())
        .collect();
    assert_eq!(
        whats,
        [
            "an issue or item number",
            "an issue number",
            "an issue or item number",
            "a date"
        ],
        "{marks:#?}"
    );
}
