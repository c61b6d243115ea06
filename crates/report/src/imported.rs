//! The section of a report rebuilt from another tool's saved output: which tool wrote
//! it, what the file lacks and which figures are therefore blank, and the tool's own
//! figures beside Cadence's rebuild under the tool's definition. One table for the
//! console, Markdown and HTML, so what each format says about an import is the same.
//! Times are written by the caller's millisecond format (the console's).

use crate::svg::esc;
use cadence_core::{ImportedFigure, ImportedRun, Report};
use std::fmt::Write;

/// A millisecond formatter (`console::fmt_ms`).
pub type Ms = fn(f64) -> String;

fn value(v: Option<f64>, unit: &str, fmt_ms: Ms) -> String {
    match v {
        None => "–".into(),
        Some(x) if unit == "ms" => fmt_ms(x),
        Some(x) if x != 0.0 && (x.abs() >= 1e5 || x.abs() < 1e-3) => format!("{x:.4e} {unit}"),
        Some(x) => format!("{} {unit}", sig(x)),
    }
    .trim_end()
    .to_string()
}

/// Five significant digits.
fn sig(x: f64) -> String {
    let digits = if x == 0.0 {
        0
    } else {
        (4 - x.abs().log10().floor() as i32).max(0) as usize
    };
    format!("{x:.digits$}")
}

fn diff(f: &ImportedFigure) -> String {
    f.difference()
        .map_or("–".into(), |d| format!("{:+.3}%", d * 100.0))
}

fn title(i: &ImportedRun) -> String {
    match &i.version {
        Some(v) => format!("{} {v}", i.tool),
        None => i.tool.clone(),
    }
}

/// The console form (empty for Cadence's own runs).
pub fn console(r: &Report, ms: Ms) -> String {
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
        let w = i
            .figures
            .iter()
            .map(|f| f.name.len())
            .max()
            .unwrap_or(0)
            .max(20);
        let _ = writeln!(
            o,
            "  {:<w$}  {:>14}  {:>14}  {:>9}  {}'s definition",
            format!("{}'s figure", i.tool),
            "saved",
            "rebuilt",
            "diff",
            i.tool
        );
        for f in &i.figures {
            let _ = writeln!(
                o,
                "  {:<w$}  {:>14}  {:>14}  {:>9}  {}",
                f.name,
                value(f.printed, &f.unit, ms),
                value(f.rebuilt, &f.unit, ms),
                diff(f),
                f.definition
            );
        }
    }
    o
}

/// The Markdown form.
pub fn markdown(r: &Report, ms: Ms) -> String {
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
        let _ = writeln!(
            o,
            "\n| {}'s figure | saved | rebuilt | diff | definition |\n|---|---:|---:|---:|---|",
            i.tool
        );
        for f in &i.figures {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                f.name,
                value(f.printed, &f.unit, ms),
                value(f.rebuilt, &f.unit, ms),
                diff(f),
                f.definition
            );
        }
    }
    o
}

/// The HTML form.
pub fn html(r: &Report, o: &mut String, ms: Ms) {
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
        let _ = write!(
            o,
            "<table><tr><th>{}'s figure</th><th>saved</th><th>rebuilt</th><th>diff</th><th>definition</th></tr>",
            esc(&i.tool)
        );
        for f in &i.figures {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&f.name),
                esc(&value(f.printed, &f.unit, ms)),
                esc(&value(f.rebuilt, &f.unit, ms)),
                esc(&diff(f)),
                esc(&f.definition)
            );
        }
        o.push_str("</table>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_unit_and_absent_ones_a_dash() {
        let ms: Ms = |x| format!("{x:.2} ms");
        assert_eq!(value(None, "ms", ms), "–");
        assert_eq!(value(Some(12.5), "ms", ms), "12.50 ms");
        assert_eq!(value(Some(14.5004), "req/s", ms), "14.500 req/s");
        assert_eq!(value(Some(2.0), "", ms), "2.0000");
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
