//! A hand-written scanner for the common chunk shape, several times cheaper than serde
//! on a typical chat chunk. It validates all the JSON it walks; the moment anything is
//! unusual (an error key, a non-string content, a duplicate key, a lone surrogate, deep
//! nesting...) it returns `None` and the serde path, which is the reference, decides.
//! `tests::fast_path_agrees_with_serde` checks that the two never disagree.

use super::{Api, ParsedChunk, Usage};
use std::borrow::Cow;

/// Nesting deeper than this is left to serde (which has its own limit).
const MAX_DEPTH: u32 = 64;

/// The validated opening of an earlier chunk, up to its `"choices":` key and the
/// whitespace after it, with the parser state there. The chunks of one stream usually
/// share it byte for byte (id, object, created, model), and identical bytes leave this
/// parser in an identical state (no lookahead reaches past it), so a chunk that starts
/// with it resumes right after instead of walking it again.
#[derive(Debug, Clone, Default)]
pub struct Prefix {
    bytes: Vec<u8>,
    /// `seen` key bits at that point.
    seen: u8,
}

/// Fill `out` (empty on entry) from a chunk. `None`: not decided here, use the serde
/// path (`out` may then hold part of the chunk).
pub(super) fn parse<'a>(
    api: Api,
    data: &'a str,
    out: &mut ParsedChunk<'a>,
    mut prefix: Option<&mut Prefix>,
) -> Option<()> {
    let mut c = Cur {
        s: data,
        b: data.as_bytes(),
        i: 0,
    };
    let mut choices_seen = false;
    let mut seen = 0u8;
    // A key whose value is next, when resuming after a cached prefix.
    let mut resume_key: Option<&'a str> = None;
    match prefix.as_deref() {
        Some(p) if !p.bytes.is_empty() && c.b.starts_with(&p.bytes) => {
            c.i = p.bytes.len();
            c.ws();
            seen = p.seen;
            resume_key = Some("choices");
        }
        _ => {
            c.ws();
            c.eat(b'{')?;
            c.ws();
            if c.peek_is(b'}') {
                return None; // `{}` has no recognised shape: serde says malformed
            }
        }
    }
    loop {
        let key = match resume_key.take() {
            Some(k) => k,
            None => {
                c.ws();
                let key = c.key()?;
                c.ws();
                c.eat(b':')?;
                c.ws();
                // Nothing before `choices` changed `out` (no usage): remember the opening.
                if key == "choices" && out.usage.is_none() {
                    if let Some(p) = prefix.as_deref_mut() {
                        p.bytes.clear();
                        p.bytes.extend_from_slice(&c.b[..c.i]);
                        p.seen = seen;
                    }
                }
                key
            }
        };
        choices_seen |= c.top_level_value(key, api, out, &mut seen)?;
        c.ws();
        if c.eat(b',').is_none() {
            break;
        }
    }
    c.eat(b'}')?;
    c.ws();
    if c.i != c.b.len() {
        return None;
    }
    if !choices_seen && out.usage.is_none() {
        return None;
    }
    Some(())
}

impl<'a> Cur<'a> {
    /// Reads the value of top-level `key` into `out`; `Some(true)` when it was a
    /// `choices` list. `None`: not decided here (an error object, a duplicate key).
    #[inline]
    fn top_level_value(
        &mut self,
        key: &str,
        api: Api,
        out: &mut ParsedChunk<'a>,
        seen: &mut u8,
    ) -> Option<bool> {
        match key {
            "choices" => {
                once(seen, 1)?;
                // `choices: null` is absent.
                if !self.null() {
                    self.choices(api, out)?;
                    return Some(true);
                }
            }
            "usage" => {
                once(seen, 2)?;
                if !self.null() {
                    out.usage = Some(self.usage()?);
                }
            }
            "error" => {
                once(seen, 4)?;
                if !self.null() {
                    return None;
                }
            }
            "object" => {
                once(seen, 8)?;
                if self.peek_is(b'"') {
                    if self.string()? == "error" {
                        return None;
                    }
                } else {
                    self.skip(0)?;
                }
            }
            "message" => {
                once(seen, 16)?;
                self.skip(0)?;
            }
            // The server's timing (vLLM's `metrics`, llama.cpp's `timings`), once a
            // stream: serde reads it.
            "metrics" | "timings" => return None,
            _ => self.skip(0)?,
        }
        Some(false)
    }
}

/// Mark key `bit` as seen; a second time means a duplicate, which serde rejects.
fn once(seen: &mut u8, bit: u8) -> Option<()> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    Some(())
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Position of the first `"`, `\\` or control byte at or after `i`: the bytes that end
/// the plain run of a JSON string. Eight bytes at a time (SWAR): in each zero-byte test
/// the lowest flagged byte is exact (false flags only appear above a true one), so the
/// lowest flag of the union is the answer.
#[inline]
fn special(b: &[u8], mut i: usize) -> Option<usize> {
    while let Some(w) = b.get(i..i + 8) {
        let x = u64::from_le_bytes(w.try_into().ok()?);
        let q = x ^ (LO * u64::from(b'"'));
        let bs = x ^ (LO * u64::from(b'\\'));
        let m = (q.wrapping_sub(LO) & !q)
            | (bs.wrapping_sub(LO) & !bs)
            | (x.wrapping_sub(LO * 0x20) & !x);
        let m = m & HI;
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return Some(i);
        }
        i += 1;
    }
    None
}

struct Cur<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek_is(&self, c: u8) -> bool {
        self.b.get(self.i) == Some(&c)
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek_is(c) {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// Consume `null` if it is next.
    #[inline]
    fn null(&mut self) -> bool {
        if self.b[self.i..].starts_with(b"null") {
            self.i += 4;
            true
        } else {
            false
        }
    }

    /// A string value, borrowed when it has no escapes.
    #[inline]
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.i;
        let j = special(self.b, start)?;
        match self.b[j] {
            b'"' => {
                self.i = j + 1;
                // Both ends are ASCII quotes, so these are char boundaries.
                Some(Cow::Borrowed(&self.s[start..j]))
            }
            b'\\' => self.escaped_string(start),
            _ => None, // a control character: invalid JSON
        }
    }

    /// An object key; keys with escapes are left to serde.
    #[inline]
    fn key(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let j = special(self.b, start)?;
        if self.b[j] != b'"' {
            return None;
        }
        self.i = j + 1;
        Some(&self.s[start..j])
    }

    /// Skip a string, validating it.
    #[inline]
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.i = special(self.b, self.i)?;
            match self.b[self.i] {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    self.i += 1;
                    match *self.b.get(self.i)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        // \u escapes (and their surrogate rules) are left to serde.
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    fn escaped_string(&mut self, start: usize) -> Option<Cow<'a, str>> {
        let mut out = String::new();
        let mut run = start;
        self.i = start;
        loop {
            self.i = special(self.b, self.i)?;
            if self.b[self.i] < 0x20 {
                return None;
            }
            out.push_str(&self.s[run..self.i]);
            if self.b[self.i] == b'"' {
                self.i += 1;
                return Some(Cow::Owned(out));
            }
            self.i += 1; // the backslash
            let e = *self.b.get(self.i)?;
            self.i += 1;
            match e {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let hi = self.hex4()?;
                    let cp = if (0xD800..0xDC00).contains(&hi) {
                        if !self.b[self.i..].starts_with(b"\\u") {
                            return None;
                        }
                        self.i += 2;
                        let lo = self.hex4()?;
                        if !(0xDC00..0xE000).contains(&lo) {
                            return None;
                        }
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    } else if (0xDC00..0xE000).contains(&hi) {
                        return None;
                    } else {
                        hi
                    };
                    out.push(char::from_u32(cp)?);
                }
                _ => return None,
            }
            run = self.i;
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.i..self.i + 4)?;
        let mut v = 0u32;
        for &c in h {
            v = v * 16 + (c as char).to_digit(16)?;
        }
        self.i += 4;
        Some(v)
    }

    /// A string or null; anything else is left to serde.
    fn opt_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null() {
            Some(None)
        } else if self.peek_is(b'"') {
            self.string().map(Some)
        } else {
            None
        }
    }

    /// Skip any JSON value, validating it.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match *self.b.get(self.i)? {
            b'"' => self.skip_string(),
            b'{' => {
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.ws();
                    self.skip_string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.skip(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_none() {
                        return self.eat(b'}');
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.ws();
                    self.skip(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_none() {
                        return self.eat(b']');
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(drop),
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(lit) {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// A JSON number; returns the span of its digits when it is a plain non-negative
    /// integer.
    fn number(&mut self) -> Option<Option<(usize, usize)>> {
        let start = self.i;
        let neg = self.eat(b'-').is_some();
        let int_start = self.i;
        match *self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let int_end = self.i;
        let mut integer = !neg;
        if self.eat(b'.').is_some() {
            integer = false;
            let d = self.i;
            self.digits();
            if self.i == d {
                return None;
            }
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            integer = false;
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            let d = self.i;
            self.digits();
            if self.i == d {
                return None;
            }
        }
        debug_assert!(self.i > start);
        Some(integer.then_some((int_start, int_end)))
    }

    fn digits(&mut self) {
        while matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    /// Generic `{ key: value, ... }` walk; `f` handles each key (having consumed its
    /// value) and returns `None` to bail out.
    fn object(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.ws();
            let key = self.key()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            f(self, key)?;
            self.ws();
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    fn usage(&mut self) -> Option<Usage> {
        let mut u = Usage::default();
        let mut seen = 0u8;
        self.object(|c, key| match key {
            "prompt_tokens" => {
                once(&mut seen, 1)?;
                u.prompt_tokens = c.opt_u64()?;
                Some(())
            }
            "completion_tokens" => {
                once(&mut seen, 2)?;
                u.completion_tokens = c.opt_u64()?;
                Some(())
            }
            "prompt_tokens_details" => {
                once(&mut seen, 4)?;
                u.cached_prompt_tokens = c.cached_tokens()?;
                Some(())
            }
            _ => c.skip(1),
        })?;
        Some(u)
    }

    /// `prompt_tokens_details`: its `cached_tokens`, or null; any other shape is left
    /// to serde.
    fn cached_tokens(&mut self) -> Option<Option<u64>> {
        if self.null() {
            return Some(None);
        }
        let mut cached = None;
        let mut seen = 0u8;
        self.object(|c, key| match key {
            "cached_tokens" => {
                once(&mut seen, 1)?;
                cached = c.opt_u64()?;
                Some(())
            }
            _ => c.skip(2),
        })?;
        Some(cached)
    }

    /// A u64 or null; anything else is left to serde.
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.null() {
            return Some(None);
        }
        let (a, z) = self.number()??;
        self.s[a..z].parse::<u64>().ok().map(Some)
    }

    /// A token-id array's length, or null.
    fn opt_count(&mut self) -> Option<Option<u32>> {
        if self.null() {
            return Some(None);
        }
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(Some(0));
        }
        let mut n: u32 = 0;
        loop {
            self.ws();
            self.skip(2)?;
            n = n.saturating_add(1);
            self.ws();
            if self.eat(b',').is_none() {
                self.eat(b']')?;
                return Some(Some(n));
            }
        }
    }

    fn choices(&mut self, api: Api, out: &mut ParsedChunk<'a>) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        let mut content = None;
        let mut text = None;
        loop {
            self.ws();
            self.choice(out, &mut content, &mut text)?;
            self.ws();
            if self.eat(b',').is_none() {
                self.eat(b']')?;
                break;
            }
        }
        out.content = match api {
            Api::Chat => content,
            _ => text,
        };
        Some(())
    }

    fn choice(
        &mut self,
        out: &mut ParsedChunk<'a>,
        content: &mut Option<Cow<'a, str>>,
        text: &mut Option<Cow<'a, str>>,
    ) -> Option<()> {
        let mut seen = 0u8;
        let mut token_ids = None;
        let mut tokens = None;
        let mut finish = None;
        self.object(|c, key| {
            match key {
                "delta" => {
                    once(&mut seen, 1)?;
                    if !c.null() {
                        c.delta(out, content)?;
                    }
                }
                "text" => {
                    once(&mut seen, 2)?;
                    super::append(text, c.opt_string()?);
                }
                "finish_reason" => {
                    once(&mut seen, 4)?;
                    finish = c.opt_string()?;
                }
                "token_ids" => {
                    once(&mut seen, 8)?;
                    token_ids = c.opt_count()?;
                }
                "tokens" => {
                    once(&mut seen, 16)?;
                    tokens = c.opt_count()?;
                }
                // A whole (non-streamed) answer: serde's to read.
                "message" => return None,
                _ => c.skip(1)?,
            }
            Some(())
        })?;
        if out.finish_reason.is_none() {
            out.finish_reason = finish.filter(|f| !f.is_empty());
        }
        if let Some(n) = token_ids.or(tokens) {
            out.tokens = Some(out.tokens.unwrap_or(0).saturating_add(n));
        }
        Some(())
    }

    fn delta(
        &mut self,
        out: &mut ParsedChunk<'a>,
        content: &mut Option<Cow<'a, str>>,
    ) -> Option<()> {
        let mut seen = 0u8;
        let mut c_content = None;
        let mut refusal = None;
        let mut reasoning_content = None;
        let mut reasoning = None;
        self.object(|c, key| {
            match key {
                "content" => {
                    once(&mut seen, 1)?;
                    c_content = c.opt_string()?;
                }
                "refusal" => {
                    once(&mut seen, 2)?;
                    refusal = c.opt_string()?;
                }
                "reasoning_content" => {
                    once(&mut seen, 4)?;
                    reasoning_content = c.opt_string()?;
                }
                "reasoning" => {
                    once(&mut seen, 8)?;
                    reasoning = c.opt_string()?;
                }
                "tool_calls" | "function_call" => {
                    // Rare and structured: serde handles them unless null.
                    once(&mut seen, if key == "tool_calls" { 16 } else { 32 })?;
                    if !c.null() {
                        return None;
                    }
                }
                _ => c.skip(2)?,
            }
            Some(())
        })?;
        super::append(content, c_content);
        super::append(content, refusal);
        let r = reasoning_content.filter(|t| !t.is_empty()).or(reasoning);
        super::append(&mut out.reasoning, r);
        Some(())
    }
}
