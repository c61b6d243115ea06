//! The section of a report rebuilt from another tool's saved output: which tool wrote
//! it, what the file lacks and which figures are therefore blank, and the tool's own
//! figures beside Cadence's rebuild under the tool's definition. One table for the
//! console, Markdown and HTML, so what each format says about an import is the same.

use crate::cell::{self, Unit};
use crate::svg::esc;
use crate::table::Table;
use cadence_core::{ImportedFigure, ImportedRun, Report};
use std::fmt::Write;

/// A saved or rebuilt figure as every command writes it.
fn value(v: Option<f64>, unit: &str) -> String {
    cell::named(v, unit)
}

/// How far Cadence's rebuild is from the saved figure (three decimals: they agree to
/// rounding, or they do not).
fn diff(f: &ImportedFigure) -> String {
    cell::cell(f.difference(), Unit::Change(3))
}

/// Each figure: the tool's, Cadence's rebuild, the difference and the definition.
fn figures(i: &ImportedRun) -> Table {
    let mut t = Table::new(2)
        .left(&format!("{}'s figure", i.tool), 20)
        .right("saved", 14)
        .gap(2)
        .right("rebuilt", 14)
        .gap(2)
        .right("diff", 9)
        .gap(2)
        .left(&format!("{}'s definition", i.tool), 0)
        .gap(2);
    for f in &i.figures {
        t.row([
            f.name.clone(),
            value(f.printed, &f.unit),
            value(f.rebuilt, &f.unit),
            diff(f),
            f.definition.clone(),
        ]);
    }
    t
}

fn title(i: &ImportedRun) -> String {
    match &i.version {
        Some(v) => format!("{} {v}", i.tool),
        None => i.tool.clone(),
    }
}

/// The console form (empty for Cadence's own runs).
pub fn console(r: &Report) -> String {
    let Some(i) = &r.imported else {
        return String::new();
    };
    let mut o = format!("\nImported from {} ({})\n", title(i), i.files.join(", "));
    for l in &i.lacks {
        let _ = writeln!(o, "  lacks        {l}");
    }
    for n in &i.not_rebuilt {
        let _ = writeln!(o, "  not rebuilt  {n} (left blank)");
    }
    if !i.figures.is_empty() {
        o.push_str(&figures(i).text());
    }
    o
}

/// The Markdown form.
pub fn markdown(r: &Report) -> String {
    let Some(i) = &r.imported else {
        return String::new();
    };
    let mut o = format!(
        "\n**Imported from {}** (`{}`)\n\n",
        title(i),
        i.files.join("`, `")
    );
    for l in &i.lacks {
        let _ = writeln!(o, "- lacks: {l}");
    }
    for n in &i.not_rebuilt {
        let _ = writeln!(o, "- not rebuilt (left blank): {n}");
    }
    if !i.figures.is_empty() {
        o.push('\n');
        o.push_str(&figures(i).markdown());
    }
    o
}

/// The HTML form.
pub fn html(r: &Report, o: &mut String) {
    let Some(i) = &r.imported else {
        return;
    };
    let _ = write!(
        o,
        r#"<h2>Imported from {}</h2><p class="sub">{}</p><ul>"#,
        esc(&title(i)),
        esc(&i.files.join(", "))
    );
    for l in &i.lacks {
        let _ = write!(o, "<li>lacks: {}</li>", esc(l));
    }
    for n in &i.not_rebuilt {
        let _ = write!(
            o,
            r#"<li class="warn">not rebuilt (left blank): {}</li>"#,
            esc(n)
        );
    }
    o.push_str("</ul>");
    if !i.figures.is_empty() {
        o.push_str(&figures(i).html());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_unit_and_absent_ones_a_dash() {
        assert_eq!(value(None, "ms"), "–");
        assert_eq!(value(Some(12.5), "ms"), "12.50 ms");
        assert_eq!(value(Some(14.5004), "req/s"), "14.50 req/s");
        assert_eq!(value(Some(2.0), ""), "2.000");
        let f = ImportedFigure {
            name: "x".into(),
            unit: "ms".into(),
            printed: Some(10.0),
            rebuilt: None,
            definition: String::new(),
        };
        assert_eq!(diff(&f), "–");
    }
}
