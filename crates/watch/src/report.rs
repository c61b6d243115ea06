//! `cadence watch report`: the standing of every target and its incidents over a
//! window, read offline from the database, as console text, Markdown, HTML or JSON.

use crate::board::{cell, standing, utc};
use crate::incident::{incidents, Incident};
use crate::shared::VantageProbe;
use crate::store::ProbeRow;

/// How the report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Text for a terminal.
    Console,
    /// Markdown.
    Markdown,
    /// One self-contained HTML page.
    Html,
    /// The same figures as data (`schema_version` 1): for a script, not a person.
    Json,
}

/// The JSON report's shape version.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// The JSON report: the window, then what the tables show.
fn json(since_ms: i64, now: i64, probes: usize, mut body: serde_json::Value) -> String {
    let head = serde_json::json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "since_ms": since_ms,
        "until_ms": now,
        "probes": probes,
    });
    if let (Some(b), serde_json::Value::Object(h)) = (body.as_object_mut(), head) {
        for (k, v) in h.into_iter().rev() {
            b.insert(k, v);
        }
    }
    // A `Value`'s alternate form is its pretty JSON (and cannot fail).
    format!("{body:#}\n")
}

/// A report's parts, laid out the same way in each format.
struct Doc<'a> {
    title: String,
    head: &'a [&'a str],
    rows: Vec<Vec<String>>,
    /// Words under the table (console and Markdown; the HTML table carries its own).
    note: Option<&'a str>,
    /// The incidents table's first column.
    incident_of: &'a str,
    incidents: Vec<Incident>,
    /// The HTML body between the title and the incidents: the table and the charts.
    html_body: String,
    /// The JSON report: the window (since, until, probes) and the tables as data.
    json: (i64, i64, usize, serde_json::Value),
}

impl Doc<'_> {
    fn render(&self, format: Format) -> String {
        let inc_head = [
            self.incident_of,
            "start (UTC)",
            "end (UTC)",
            "probes",
            "first breach",
        ];
        let inc_rows: Vec<Vec<String>> = self
            .incidents
            .iter()
            .map(|i| {
                vec![
                    i.target.clone(),
                    utc(i.start_ms),
                    i.end_ms.map_or("ongoing".into(), utc),
                    i.probes.to_string(),
                    i.cause.join("; "),
                ]
            })
            .collect();
        let n = self.incidents.len();
        let note = self.note.map_or(String::new(), |t| format!("\n{t}\n"));
        match format {
            Format::Json => {
                let (since_ms, now, probes, body) = &self.json;
                json(*since_ms, *now, *probes, body.clone())
            }
            Format::Console => {
                let mut s = format!("{}\n\n", self.title);
                s.push_str(&text_table(self.head, &self.rows));
                s.push_str(&format!("{note}\nIncidents ({n}):\n"));
                if !inc_rows.is_empty() {
                    s.push_str(&text_table(&inc_head, &inc_rows));
                }
                s
            }
            Format::Markdown => {
                let mut s = format!("# {}\n\n", self.title);
                s.push_str(&md_table(self.head, &self.rows));
                s.push_str(&format!("{note}\n## Incidents ({n})\n\n"));
                if inc_rows.is_empty() {
                    s.push_str("None.\n");
                } else {
                    s.push_str(&md_table(&inc_head, &inc_rows));
                }
                s
            }
            Format::Html => {
                let esc = cadence_report::svg::esc;
                let mut s = crate::page::head(&self.title, false);
                s.push_str(&format!("<h1>{}</h1>", esc(&self.title)));
                s.push_str(&self.html_body);
                s.push_str(&format!("<h2>Incidents ({n})</h2>"));
                s.push_str(&crate::page::incidents_table(&self.incidents));
                s.push_str("</body></html>\n");
                s
            }
        }
    }
}

/// The report of `probes` (every target's, since `since_ms`), at `now`.
pub fn render(probes: &[ProbeRow], since_ms: i64, now: i64, format: Format) -> String {
    let mut targets: Vec<&str> = probes.iter().map(|p| p.target.as_str()).collect();
    targets.sort();
    targets.dedup();

    let head = [
        "target", "probes", "TTFT p50", "ITL p50", "ITL p99", "tok/s", "success", "SLO met",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut data: Vec<serde_json::Value> = Vec::new();
    let mut html_body = String::new();
    for t in &targets {
        let mine: Vec<ProbeRow> = probes.iter().filter(|p| p.target == *t).cloned().collect();
        let s = standing(&mine, since_ms);
        data.push(serde_json::json!({"target": t, "window": s}));
        rows.push(vec![
            t.to_string(),
            s.probes.to_string(),
            cell(s.ttft_p50_ms, "ms"),
            cell(s.itl_p50_ms, "ms"),
            cell(s.itl_p99_ms, "ms"),
            cell(s.output_tok_s, ""),
            cell(s.success_rate, "%"),
            cell(s.slo_compliance, "%"),
        ]);
        html_body.push_str(&format!("<h2>{}</h2>", cadence_report::svg::esc(t)));
        html_body.push_str(&crate::page::board::charts(&mine, &[], now));
    }
    html_body.insert_str(0, &html_table(&head, &rows));
    let found = incidents(probes);
    Doc {
        title: format!(
            "cadence watch report: {} to {} UTC, {} probes of {} targets",
            utc(since_ms),
            utc(now),
            probes.len(),
            targets.len()
        ),
        head: &head,
        rows,
        note: None,
        incident_of: "target",
        json: (
            since_ms,
            now,
            probes.len(),
            serde_json::json!({"targets": data, "incidents": found}),
        ),
        incidents: found,
        html_body,
    }
    .render(format)
}

/// The report of every vantage's `probes` from the shared store: per target and
/// vantage, the window's standing and the gap to the best vantage, and each vantage's
/// incidents; the HTML adds the by-vantage charts of each target, with the SLOs the
/// vantages `announced`.
pub fn render_vantages(
    probes: &[VantageProbe],
    announced: &[crate::shared::Vantage],
    since_ms: i64,
    now: i64,
    format: Format,
) -> String {
    let compared = crate::vantage::compare(probes, since_ms, now);
    let mut vantages: Vec<&str> = probes.iter().map(|p| p.vantage.as_str()).collect();
    vantages.sort();
    vantages.dedup();

    let mut html_body = crate::page::vantage::table_html(&compared, false);
    let found = crate::vantage::incidents_by_vantage(probes);
    for (target, by_vantage) in crate::vantage::group(probes) {
        let mine: Vec<VantageProbe> = by_vantage
            .into_iter()
            .flat_map(|(v, list)| {
                list.into_iter().map(move |probe| VantageProbe {
                    vantage: v.clone(),
                    probe,
                })
            })
            .collect();
        html_body.push_str(&format!("<h2>{}</h2>", cadence_report::svg::esc(&target)));
        let slos = crate::vantage::target_slos(announced, &target);
        html_body.push_str(&crate::page::vantage::charts(&mine, &slos, since_ms, now));
    }
    Doc {
        title: format!(
            "cadence watch report: {} to {} UTC, {} probes from {} vantages ({})",
            utc(since_ms),
            utc(now),
            probes.len(),
            vantages.len(),
            vantages.join(", ")
        ),
        head: crate::vantage::head(),
        rows: crate::vantage::cells(&compared),
        note: Some("vs best: the gap to the vantage with the lowest median for that target. ITL that moves at every vantage together is the server; TTFT that moves at one vantage alone is the path to it."),
        incident_of: "target @ vantage",
        json: (
            since_ms,
            now,
            probes.len(),
            serde_json::json!({
                "vantages": vantages,
                "rows": compared,
                "incidents": found,
            }),
        ),
        incidents: found,
        html_body,
    }
    .render(format)
}

fn text_table(head: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| crate::untrusted::printable(c)).collect())
        .collect();
    let rows = &rows;
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut s = line(head.to_vec());
    for r in rows {
        s.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    s
}

/// `text` for a Markdown cell: printable, and no HTML tag passes (a `<` before a
/// letter, `/`, `!` or `?` is written `&lt;`; `<=` in an SLO stays as it is).
fn md_text(text: &str) -> String {
    let text = crate::untrusted::printable(text);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let tag = chars
            .peek()
            .is_some_and(|n| n.is_ascii_alphabetic() || "/!?".contains(*n));
        match c {
            '<' if tag => out.push_str("&lt;"),
            c => out.push(c),
        }
    }
    out
}

fn md_table(head: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |c: &str| md_text(c).replace('|', "\\|");
    let mut s = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| cell(c)).collect();
        s.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    s
}

fn html_table(head: &[&str], rows: &[Vec<String>]) -> String {
    let esc = cadence_report::svg::esc;
    let mut s = String::from("<table><tr>");
    for h in head {
        s.push_str(&format!("<th>{}</th>", esc(h)));
    }
    s.push_str("</tr>");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            s.push_str(&format!("<td>{}</td>", esc(c)));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::tests::probe;

    #[test]
    fn the_vantage_report_compares_vantages_in_each_format() {
        let at = |v: &str, t: i64, ttft: f64, ok: bool| {
            let mut p = probe("api", t, ok);
            p.ttft_p50_ms = Some(ttft);
            VantageProbe {
                vantage: v.into(),
                probe: p,
            }
        };
        let probes = vec![
            at("east", 1_000, 20.0, true),
            at("west", 1_100, 120.0, false),
            at("west", 2_100, 120.0, true),
        ];
        let text = render_vantages(&probes, &[], 0, 5_000, Format::Console);
        assert!(text.contains("from 2 vantages (east, west)"), "{text}");
        let west = text
            .lines()
            .find(|l| l.starts_with("api") && l.contains("west"))
            .unwrap();
        assert!(west.contains("+100.0 ms"), "{west}");
        assert!(text.contains("api @ west"), "{text}");
        let md = render_vantages(&probes, &[], 0, 5_000, Format::Markdown);
        assert!(md.contains("| api | east | 1 |"), "{md}");
        let html = render_vantages(&probes, &[], 0, 5_000, Format::Html);
        assert_eq!(html.matches("<svg").count(), 2, "the target's two charts");
        let j: serde_json::Value =
            serde_json::from_str(&render_vantages(&probes, &[], 0, 5_000, Format::Json)).unwrap();
        assert_eq!(j["probes"], 3);
        assert_eq!(j["vantages"], serde_json::json!(["east", "west"]));
        let west = j["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["vantage"] == "west")
            .unwrap();
        assert_eq!(west["ttft_p50_over_best_ms"], 100.0, "{west}");
        assert_eq!(j["incidents"][0]["target"], "api @ west", "{j}");
    }

    #[test]
    fn the_report_lists_targets_and_incidents_in_each_format() {
        let rows = vec![
            probe("a", 1_000, true),
            probe("a", 2_000, false),
            probe("a", 3_000, true),
            probe("b", 1_500, true),
        ];
        let c = render(&rows, 0, 4_000, Format::Console);
        assert!(c.contains("4 probes of 2 targets"), "{c}");
        assert!(c.contains("Incidents (1)"), "{c}");
        assert!(
            c.lines()
                .any(|l| l.starts_with("a ") && l.contains("66.7 %")),
            "{c}"
        );
        let m = render(&rows, 0, 4_000, Format::Markdown);
        assert!(m.contains("| a | 3 |"), "{m}");
        let h = render(&rows, 0, 4_000, Format::Html);
        assert!(h.contains("<svg") && h.contains("<h2>b</h2>"), "{h}");
        let j: serde_json::Value =
            serde_json::from_str(&render(&rows, 0, 4_000, Format::Json)).unwrap();
        assert_eq!(j["schema_version"], JSON_SCHEMA_VERSION);
        assert_eq!(
            (j["since_ms"].as_i64(), j["until_ms"].as_i64()),
            (Some(0), Some(4_000))
        );
        assert_eq!(j["probes"], 4);
        assert_eq!(j["targets"][0]["target"], "a");
        assert_eq!(j["targets"][0]["window"]["probes"], 3);
        let met = j["targets"][0]["window"]["slo_compliance"]
            .as_f64()
            .unwrap();
        assert!((met - 2.0 / 3.0).abs() < 1e-9, "{j}");
        assert_eq!(j["incidents"].as_array().unwrap().len(), 1, "{j}");
        assert_eq!(j["incidents"][0]["start_ms"], 2_000, "{j}");
    }

    #[test]
    fn f140_hostile_text_reaches_no_report_raw() {
        let mut p = probe("api", 1_000, false);
        p.slo_detail = vec!["<script>alert(1)</script> \u{1b}[2J itl.p50<=15ms".into()];
        let probes = vec![VantageProbe {
            vantage: "east".into(),
            probe: p,
        }];
        let md = render_vantages(&probes, &[], 0, 2_000, Format::Markdown);
        assert!(!md.contains("<script") && !md.contains('\u{1b}'), "{md}");
        assert!(
            md.contains("&lt;script>") && md.contains("itl.p50<=15ms"),
            "{md}"
        );
        let console = render_vantages(&probes, &[], 0, 2_000, Format::Console);
        assert!(!console.contains('\u{1b}'), "{console}");
    }
}
