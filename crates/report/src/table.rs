//! One table, written as aligned console text, Markdown or HTML (as hyperfine's
//! exporters share one markup table): a command builds its heads and rows once, so
//! what each format says is the same, cell for cell. Cells are text made by
//! [`crate::cell`].

use crate::svg::esc;
use std::fmt::Write;

/// Which side of its column a cell sits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text: names, definitions, verdicts.
    Left,
    /// Figures.
    Right,
}

#[derive(Debug, Clone)]
struct Column {
    head: String,
    align: Align,
    min: usize,
    gap: usize,
}

/// A table: its columns (head, alignment, the console's minimum width and the spaces
/// before each) and its rows of cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    indent: usize,
    cols: Vec<Column>,
    rows: Vec<Vec<String>>,
    /// The rows that are a note after their first cell.
    notes: Vec<usize>,
}

impl Table {
    /// An empty table whose console lines start with `indent` spaces.
    pub fn new(indent: usize) -> Self {
        Table {
            indent,
            ..Table::default()
        }
    }

    /// Adds a left-aligned column at least `min` characters wide on the console, one
    /// space after the column before it.
    pub fn left(self, head: &str, min: usize) -> Self {
        self.col(head, Align::Left, min)
    }

    /// Adds a right-aligned column (figures), as [`Table::left`].
    pub fn right(self, head: &str, min: usize) -> Self {
        self.col(head, Align::Right, min)
    }

    fn col(mut self, head: &str, align: Align, min: usize) -> Self {
        let gap = usize::from(!self.cols.is_empty());
        self.cols.push(Column {
            head: head.to_string(),
            align,
            min,
            gap,
        });
        self
    }

    /// Sets the spaces on the console before the column added last.
    pub fn gap(mut self, spaces: usize) -> Self {
        if let Some(c) = self.cols.last_mut() {
            c.gap = spaces;
        }
        self
    }

    /// Adds a row: one cell per column (missing ones are blank, extra ones dropped).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut r: Vec<String> = cells.into_iter().map(Into::into).collect();
        r.resize(self.cols.len(), String::new());
        self.rows.push(r);
    }

    /// Adds a row whose first cell is followed by one note across the other columns
    /// (a row that has no figures to give, and says why).
    pub fn note_row(&mut self, first: &str, note: &str) {
        self.notes.push(self.rows.len());
        self.row([first, note]);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The console form: the heads, then each row, every column as wide as its widest
    /// cell (at least its minimum), lines ending with no spaces.
    pub fn text(&self) -> String {
        self.text_painted(|_, _, cell| cell)
    }

    /// [`Table::text`] with each padded cell passed through `paint(row, column, cell)`
    /// (`row` is `None` for the heads), so a terminal's colours leave the widths alone.
    pub fn text_painted(&self, paint: impl Fn(Option<usize>, usize, String) -> String) -> String {
        let widths: Vec<usize> = self
            .cols
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.rows
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| i == 0 || !self.notes.contains(k))
                    .map(|(_, r)| r[i].chars().count())
                    .chain([c.head.chars().count(), c.min])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |row: Option<usize>, cells: &mut dyn Iterator<Item = &str>| {
            let mut l = " ".repeat(self.indent);
            for (i, ((c, w), cell)) in self.cols.iter().zip(&widths).zip(cells).enumerate() {
                l.push_str(&" ".repeat(c.gap));
                let padded = match c.align {
                    Align::Left => format!("{cell:<w$}"),
                    Align::Right => format!("{cell:>w$}"),
                };
                l.push_str(&paint(row, i, padded));
            }
            l.trim_end().to_string() + "\n"
        };
        let mut o = line(None, &mut self.cols.iter().map(|c| c.head.as_str()));
        for (k, r) in self.rows.iter().enumerate() {
            if self.notes.contains(&k) {
                // The first cell as its column holds it, then the note unpadded.
                let first = line(Some(k), &mut r.iter().take(1).map(String::as_str));
                let first = first.trim_end_matches('\n');
                let shown = first.chars().count().saturating_sub(self.indent);
                let pad = widths[0].saturating_sub(shown);
                let gap = self.cols.get(1).map_or(1, |c| c.gap);
                let _ = writeln!(o, "{first}{}{}", " ".repeat(pad + gap), r[1]);
            } else {
                o.push_str(&line(Some(k), &mut r.iter().map(String::as_str)));
            }
        }
        o
    }

    /// The Markdown form: a pipe table, figures right-aligned, `|` in a cell escaped.
    pub fn markdown(&self) -> String {
        let cell = |s: &str| s.replace('|', "\\|");
        let heads: Vec<String> = self.cols.iter().map(|c| cell(&c.head)).collect();
        let rule: Vec<&str> = self
            .cols
            .iter()
            .map(|c| match c.align {
                Align::Left => "---",
                Align::Right => "---:",
            })
            .collect();
        let mut o = format!("| {} |\n|{}|\n", heads.join(" | "), rule.join("|"));
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|s| cell(s)).collect();
            let _ = writeln!(o, "| {} |", cells.join(" | "));
        }
        o
    }

    /// The HTML form: a `<table>` whose heads and cells are escaped text, text columns
    /// of class `l` (left-aligned in the report's style).
    pub fn html(&self) -> String {
        // Figures sit right (the report's style); text columns carry class "l".
        let class: Vec<&str> = self
            .cols
            .iter()
            .map(|c| match c.align {
                Align::Left => r#" class="l""#,
                Align::Right => "",
            })
            .collect();
        let mut o = String::from("<table><tr>");
        for (c, class) in self.cols.iter().zip(&class) {
            let _ = write!(o, "<th{class}>{}</th>", esc(&c.head));
        }
        o.push_str("</tr>");
        for (k, r) in self.rows.iter().enumerate() {
            o.push_str("<tr>");
            if self.notes.contains(&k) {
                let span = self.cols.len().saturating_sub(1);
                let _ = write!(
                    o,
                    r#"<td{}>{}</td><td class="l" colspan="{span}">{}</td>"#,
                    class[0],
                    esc(&r[0]),
                    esc(&r[1])
                );
            } else {
                for (cell, class) in r.iter().zip(&class) {
                    let _ = write!(o, "<td{class}>{}</td>", esc(cell));
                }
            }
            o.push_str("</tr>");
        }
        o.push_str("</table>");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(2)
            .left("metric", 8)
            .right("A", 6)
            .left("verdict", 0)
            .gap(2);
        t.row(["ttft.p50", "12.00 ms", "better"]);
        t.row(["a|b", "–", "?"]);
        t
    }

    #[test]
    fn a_note_row_runs_across_the_figures_without_widening_them() {
        let mut t = sample();
        t.note_row("e2e", "no request succeeded");
        let text = t.text();
        assert!(
            text.ends_with("\n  e2e      no request succeeded\n"),
            "{text}"
        );
        assert!(text.starts_with("  metric          A  verdict\n"), "{text}");
        assert!(t
            .markdown()
            .ends_with("| e2e | no request succeeded |  |\n"));
        assert!(t.html().ends_with(
            r#"<tr><td class="l">e2e</td><td class="l" colspan="2">no request succeeded</td></tr></table>"#
        ));
    }

    #[test]
    fn console_columns_take_their_widest_cell_and_lines_end_without_spaces() {
        assert_eq!(
            sample().text(),
            "  metric          A  verdict\n  ttft.p50 12.00 ms  better\n  a|b             –  ?\n"
        );
    }

    #[test]
    fn a_note_after_a_right_aligned_first_cell_keeps_its_padding_in_front() {
        let mut t = Table::new(2).right("shard", 5).left("level", 4).gap(2);
        t.row(["0", "c=1"]);
        t.note_row("3", "missing: no records");
        assert_eq!(
            t.text(),
            "  shard  level\n      0  c=1\n      3  missing: no records\n"
        );
    }

    #[test]
    fn painting_wraps_padded_cells_and_keeps_the_widths() {
        let t = sample().text_painted(|row, col, cell| match (row, col) {
            (Some(0), 1) => format!("<{cell}>"),
            _ => cell,
        });
        assert!(t.contains("\n  ttft.p50 <12.00 ms>  better\n"), "{t}");
        assert!(t.contains("\n  a|b             –  ?\n"), "{t}");
    }

    #[test]
    fn markdown_aligns_figures_right_and_escapes_pipes() {
        assert_eq!(
            sample().markdown(),
            "| metric | A | verdict |\n|---|---:|---|\n| ttft.p50 | 12.00 ms | better |\n| a\\|b | – | ? |\n"
        );
    }

    #[test]
    fn html_escapes_every_cell() {
        let mut t = Table::new(0).left("<x>", 0);
        t.row(["a & b"]);
        assert_eq!(
            t.html(),
            r#"<table><tr><th class="l">&lt;x&gt;</th></tr><tr><td class="l">a &amp; b</td></tr></table>"#
        );
        assert!(!t.is_empty());
    }
}
