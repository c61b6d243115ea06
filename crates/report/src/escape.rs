//! Strings in a report may come from a server (its model id, its error messages): each
//! renderer escapes them for its medium before drawing (FAULTS 118), so a terminal
//! escape cannot retitle or clear the console and a `<script>` cannot run in Markdown.

use cadence_core::Report;
use serde_json::Value;

/// `report` with every string passed through `f`; the report itself when its strings
/// need nothing.
fn with_strings(report: &Report, f: fn(&str) -> Option<String>) -> std::borrow::Cow<'_, Report> {
    let Ok(mut v) = serde_json::to_value(report) else {
        return std::borrow::Cow::Borrowed(report);
    };
    if !walk(&mut v, f) {
        return std::borrow::Cow::Borrowed(report);
    }
    match serde_json::from_value(v) {
        Ok(r) => std::borrow::Cow::Owned(r),
        Err(_) => std::borrow::Cow::Borrowed(report),
    }
}

/// Rewrites the strings of `v` that `f` changes; true when any was.
fn walk(v: &mut Value, f: fn(&str) -> Option<String>) -> bool {
    match v {
        Value::String(s) => match f(s) {
            Some(e) => {
                *s = e;
                true
            }
            None => false,
        },
        Value::Array(a) => a.iter_mut().fold(false, |any, x| walk(x, f) | any),
        Value::Object(o) => o.values_mut().fold(false, |any, x| walk(x, f) | any),
        _ => false,
    }
}

/// Whether `c` would act on a terminal rather than print: C0 controls but newline
/// and tab, DEL, and the C1 controls (`U+009B` is a CSI on its own).
fn is_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c)
}

/// `s` with each control character written out (`\x1b`, `\u{9b}`), or `None` when it
/// holds none.
pub fn console_str(s: &str) -> Option<String> {
    if !s.chars().any(is_control) {
        return None;
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_control(c) {
            o.push(c);
        } else if (c as u32) < 0x100 {
            o.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            o.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    Some(o)
}

/// `s` for Markdown: HTML-significant characters as entities (so no tag or attribute
/// is read from it) and control characters written out; `None` when it holds none.
pub fn markdown_str(s: &str) -> Option<String> {
    if !s
        .chars()
        .any(|c| matches!(c, '<' | '>' | '&') || is_control(c))
    {
        return None;
    }
    let s = console_str(s).unwrap_or_else(|| s.to_string());
    Some(
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;"),
    )
}

/// The report with every string made safe for a terminal.
pub fn for_console(report: &Report) -> std::borrow::Cow<'_, Report> {
    with_strings(report, console_str)
}

/// The report with every string made safe for Markdown.
pub fn for_markdown(report: &Report) -> std::borrow::Cow<'_, Report> {
    with_strings(report, markdown_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f118_controls_and_tags_are_written_out() {
        assert_eq!(console_str("plain ✓\n"), None);
        assert_eq!(
            console_str("m\x1b]0;owned\x07\x1b[2J\u{9b}31m").unwrap(),
            "m\\x1b]0;owned\\x07\\x1b[2J\\x9b31m"
        );
        assert_eq!(
            markdown_str("<script>alert(1)</script> & <img src=x onerror=y>").unwrap(),
            "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;img src=x onerror=y&gt;"
        );
        assert_eq!(markdown_str("rate=40/s"), None);
    }
}
