//! Keeps secrets (API keys, bearer tokens, key-like query parameters) out of records,
//! logs and reports: every string that leaves the client passes through here.

/// Scrubs known secret values and secret-shaped substrings from `text`.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

const MASK: &str = "[REDACTED]";

impl Redactor {
    /// A redactor that also removes each of `secrets` verbatim (values shorter than
    /// 4 characters are ignored: they would mask ordinary text).
    pub fn new<I: IntoIterator<Item = String>>(secrets: I) -> Self {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| s.len() >= 4).collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { secrets }
    }

    /// `text` with every known secret value and every secret-shaped substring (keys, bearer
    /// tokens, key-like query parameters) replaced by `[REDACTED]`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), MASK);
            }
        }
        redact_patterns(&out)
    }
}

/// Masks token-shaped values: `Bearer X`, `sk-…` keys, a URL's userinfo
/// (`scheme://user:PASS@host`), and parameters whose names say key, token, secret,
/// password or signature (`key=`, `api_key=`, `client_secret=`, `sig=` …), wherever
/// they stand in the text.
pub fn redact_patterns(text: &str) -> String {
    let fields = redact_secret_fields(text);
    let text = fields.as_str();
    // (marker, whether the marker is part of the secret itself)
    const MARKERS: [(&str, bool); 14] = [
        ("Bearer ", false),
        ("bearer ", false),
        ("sk-", true),
        ("key=", false),
        ("api_key=", false),
        ("api-key=", false),
        ("token=", false),
        ("secret=", false),
        ("password=", false),
        ("passwd=", false),
        ("pwd=", false),
        ("signature=", false),
        ("sig=", false),
        ("x-api-key: ", false),
    ];
    let is_end = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '&' | ',' | ';' | ')');
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    'scan: while i < text.len() {
        let rest = &text[i..];
        let at_word_start = text[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric());
        if let Some(len) = userinfo_len(rest) {
            // `://` kept, the userinfo up to its `@` masked.
            out.push_str("://");
            out.push_str(MASK);
            i += 3 + len;
            continue 'scan;
        }
        for (marker, inclusive) in MARKERS {
            if !rest.starts_with(marker) || (inclusive && !at_word_start) {
                continue;
            }
            let value = &rest[marker.len()..];
            let len = value.find(is_end).unwrap_or(value.len());
            if len == 0 || (inclusive && len < 8) {
                continue;
            }
            if !inclusive {
                out.push_str(marker);
            }
            out.push_str(MASK);
            i += marker.len() + len;
            continue 'scan;
        }
        let c = rest.chars().next().expect("non-empty");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// A URL as it may be shown or stored (a report's target, a command line, an error):
/// the userinfo masked (`scheme://[REDACTED]@host`, and `user:PASS@host` without a
/// scheme too: a mistyped URL is not a safe one), every query value masked (`?a=[REDACTED]`:
/// the names stay, so a user still sees which parameters were given), a fragment masked,
/// and the rest through [`redact_patterns`].
pub fn redact_url(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let (head, tail) = url.split_at(cut);
    let mut out = redact_patterns(&mask_userinfo(head));
    let (query, fragment) = match tail.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (tail, None),
    };
    if let Some(q) = query.strip_prefix('?') {
        out.push('?');
        let pairs: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) => format!("{k}={MASK}"),
                None => kv.to_string(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    match fragment {
        Some("") => out.push('#'),
        Some(_) => {
            out.push('#');
            out.push_str(MASK);
        }
        None => {}
    }
    out
}

/// `head` (a URL before its query) with the userinfo, up to the last `@`, masked.
fn mask_userinfo(head: &str) -> String {
    let start = head.find("://").map_or(0, |i| i + 3);
    match head.rfind('@') {
        Some(at) if at > start => format!("{}{MASK}{}", &head[..start], &head[at..]),
        _ => head.to_string(),
    }
}

/// Words in a JSON field's name that say its value is a secret (FAULTS 117).
const SECRET_NAMES: [&str; 8] = [
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "signature",
    "credential",
];

/// Masks the values of JSON fields whose names say key, token, secret, password or
/// signature (`"api_key": "…"`, `"auth_token":"…"`; not a `…_tokens` count), at any
/// depth, in JSON or in text that quotes it (a command line's `--extra-body`, a body
/// echoed in an error). A string value becomes `"[REDACTED]"`; a bare value (a number) `[REDACTED]`.
pub fn redact_secret_fields(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while let Some(q) = text[i..].find('"').map(|q| q + i) {
        // A quoted name: up to its closing quote (escapes skipped).
        let Some(close) = string_end(b, q + 1) else {
            break;
        };
        let name = text[q + 1..close].to_ascii_lowercase();
        let mut j = close + 1;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        // `max_tokens`, `prompt_tokens`: counts, not secrets.
        let secret = SECRET_NAMES.iter().any(|w| name.contains(w)) && !name.contains("tokens");
        if j >= b.len() || b[j] != b':' || !secret {
            i = close + 1;
            continue;
        }
        j += 1;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        let (start, end, quoted) = match b.get(j) {
            Some(b'"') => match string_end(b, j + 1) {
                Some(e) => (j + 1, e, true),
                None => (j + 1, b.len(), true),
            },
            Some(b'{') | Some(b'[') | None => {
                i = j;
                continue;
            }
            Some(_) => {
                let e = text[j..]
                    .find(|c: char| matches!(c, ',' | '}' | ']') || c.is_whitespace())
                    .map_or(b.len(), |e| e + j);
                (j, e, false)
            }
        };
        if end > start {
            out.push_str(&text[copied..start]);
            out.push_str(MASK);
            copied = end;
        }
        i = if quoted { (end + 1).min(b.len()) } else { end };
        if i >= b.len() {
            break;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The index of the quote closing a JSON string whose text starts at `from`.
fn string_end(b: &[u8], from: usize) -> Option<usize> {
    let mut k = from;
    while k < b.len() {
        match b[k] {
            b'\\' => k += 2,
            b'"' => return Some(k),
            _ => k += 1,
        }
    }
    None
}

/// When `rest` starts with `://` and a userinfo (`user:pass@`): the userinfo's length.
/// The userinfo runs to the last `@` before the URL's query, fragment or end (a password
/// may hold `/` or `@`).
fn userinfo_len(rest: &str) -> Option<usize> {
    let after = rest.strip_prefix("://")?;
    let end = after
        .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '?' | '#' | '<' | '>'))
        .unwrap_or(after.len());
    let at = after[..end].rfind('@')?;
    (at > 0).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f117_secret_named_json_fields_are_masked_at_any_depth() {
        let got = redact_secret_fields(
            r#"--extra-body {"api_key": "K1-abcdef", "n": {"authToken":"T2-xyz", "max_tokens": 9}, "seed": 3, "password": 12345, "\"key\"": "q"}"#,
        );
        assert_eq!(
            got,
            r#"--extra-body {"api_key": "[REDACTED]", "n": {"authToken":"[REDACTED]", "max_tokens": 9}, "seed": 3, "password": [REDACTED], "\"key\"": "[REDACTED]"}"#
        );
        // Not a field: left alone; a cut string ends masked.
        assert_eq!(
            redact_secret_fields(r#"the "key" is lost"#),
            r#"the "key" is lost"#
        );
        assert_eq!(
            redact_secret_fields(r#"{"token": "abc"#),
            r#"{"token": "[REDACTED]"#
        );
    }

    #[test]
    fn removes_known_secret_anywhere() {
        let r = Redactor::new(["canary-secret-123".to_string()]);
        let got = r.redact("server said: bad key canary-secret-123!");
        assert!(!got.contains("canary-secret-123"), "{got}");
        assert!(got.contains("[REDACTED]"));
    }

    #[test]
    fn masks_bearer_and_query_keys() {
        let got = redact_patterns("Authorization: Bearer abc.def and https://x/y?key=zzz&q=1");
        assert!(!got.contains("abc.def"), "{got}");
        assert!(!got.contains("zzz"), "{got}");
        assert!(got.contains("&q=1"), "{got}");
    }

    #[test]
    fn masks_openai_style_keys() {
        let got = redact_patterns("invalid key sk-proj-ABCDEFGHIJKLMNOP here");
        assert!(!got.contains("ABCDEFGH"), "{got}");
        assert!(got.ends_with(" here"), "{got}");
    }

    #[test]
    fn masks_url_userinfo_and_secret_named_parameters() {
        for (text, secrets) in [
            (
                "invalid URL \"http://user:PASS1234@h:80/v1\"",
                &["PASS1234", "user:"][..],
            ),
            ("at https://bot:T/K@N@hooks.example/x?q=1", &["T/K", "K@N"]),
            ("user:PW99@h and ftp://:PW77@h", &["PW77"]),
            (
                "x?client_secret=S1&password=S2&sig=S3&signature=S4&pwd=S5&q=keep",
                &["S1", "S2", "S3", "S4", "S5"],
            ),
        ] {
            let got = redact_patterns(text);
            for s in secrets {
                assert!(!got.contains(s), "{s} in {got}");
            }
        }
        let got = redact_patterns("see http://h:8000/v1/models?q=keep and a@b");
        assert_eq!(got, "see http://h:8000/v1/models?q=keep and a@b");
        let got = redact_patterns("http://u:p@h/x?q=1");
        assert_eq!(got, "http://[REDACTED]@h/x?q=1");
    }

    #[test]
    fn urls_lose_userinfo_every_query_value_and_the_fragment() {
        for (url, shown) in [
            ("http://u:pw@h:1/v1", "http://[REDACTED]@h:1/v1"),
            ("user:PASS1234@127.0.0.1:9", "[REDACTED]@127.0.0.1:9"),
            ("http://u:PA/S@W@h:9/v1", "http://[REDACTED]@h:9/v1"),
            (
                "https://h/v1?key=s3cret&api-version=2024&flag",
                "https://h/v1?key=[REDACTED]&api-version=[REDACTED]&flag",
            ),
            ("https://h/x#access_token=T", "https://h/x#[REDACTED]"),
            ("https://h/x?a=1#", "https://h/x?a=[REDACTED]#"),
            ("https://h/sk-ABCDEFGHIJKL/v1", "https://h/[REDACTED]"),
            ("http://h:9/v1", "http://h:9/v1"),
            ("http://@h/v1", "http://@h/v1"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn leaves_plain_text_alone() {
        let t = "a task-force of 5 tokens, müßig";
        assert_eq!(redact_patterns(t), t);
    }
}
