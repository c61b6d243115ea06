//! Prompt datasets: ShareGPT JSON (conversations) and generic JSON Lines (`prompt`,
//! chat `messages`, or a session's `turns`), turned into work items the request
//! factory sends. Length filters and a seeded shuffle happen here, once, before the run.

use crate::body::Message;
use crate::prompts::Counter;
use crate::workload::{TurnSpec, WorkItem};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::Value;

/// Why a dataset could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatasetError {
    /// A line of a JSON Lines dataset that cannot be read.
    #[error("line {line}: {why}")]
    Line {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A file that is not ShareGPT's layout, and why.
    #[error("not a ShareGPT file: {0}")]
    ShareGpt(String),
    /// No entry is left to send (the text says which filter dropped them, if any).
    #[error("the dataset has no usable entry{0}")]
    Empty(String),
}

/// How a dataset becomes requests.
#[derive(Debug, Clone, Default)]
pub struct DatasetOptions {
    /// Each user message of a conversation is a turn of one session (history grows
    /// with the server's live replies); otherwise only the first user message is sent.
    pub multi_turn: bool,
    /// Keep entries whose first prompt has at least / at most this many tokens.
    pub min_prompt_tokens: Option<usize>,
    /// The upper bound of the same filter.
    pub max_prompt_tokens: Option<usize>,
    /// Shuffle with this seed (None keeps file order).
    pub seed: Option<u64>,
}

/// Parses a ShareGPT file: a JSON array (or JSON Lines) of objects with
/// `conversations: [{from: human|gpt|system, value}]`. A turn's `max_tokens` is the
/// length of the recorded reply that followed it, counted with `counter`.
pub fn parse_sharegpt(text: &str, counter: &Counter) -> Result<Vec<WorkItem>, DatasetError> {
    let entries: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(a)) => a,
        Ok(other @ Value::Object(_)) => vec![other],
        Ok(_) => return Err(DatasetError::ShareGpt("expected a JSON array".into())),
        Err(_) => json_lines(text)?,
    };
    let mut items = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let Some(conv) = e.get("conversations").and_then(Value::as_array) else {
            return Err(DatasetError::ShareGpt(format!(
                "entry {i} has no 'conversations' array"
            )));
        };
        let id = e
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| i.to_string(), str::to_owned);
        let mut item = WorkItem {
            id,
            history: Vec::new(),
            turns: Vec::new(),
        };
        for m in conv {
            let from = m.get("from").and_then(Value::as_str).unwrap_or("");
            let value = m.get("value").and_then(Value::as_str).unwrap_or("");
            match from {
                "system" if item.turns.is_empty() => {
                    item.history.push(Message::new("system", value))
                }
                "human" | "user" => item.turns.push(TurnSpec {
                    user: value.to_owned(),
                    max_tokens: None,
                }),
                "gpt" | "assistant" | "chatgpt" | "bard" => {
                    if let Some(t) = item.turns.last_mut() {
                        if t.max_tokens.is_none() {
                            t.max_tokens = Some(counter.count(value).max(1) as u32);
                        }
                    }
                }
                _ => {}
            }
        }
        item.turns.retain(|t| !t.user.trim().is_empty());
        if !item.turns.is_empty() {
            items.push(item);
        }
    }
    Ok(items)
}

/// Parses generic JSON Lines: each line an object with `prompt` (a string), chat
/// `messages` (`[{role, content}]`, the last one the user's), or `turns` (a
/// session: strings or `{content|prompt, max_tokens}`); optional `max_tokens` and `id`.
pub fn parse_jsonl(text: &str) -> Result<Vec<WorkItem>, DatasetError> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let item =
            jsonl_item(line, line_no).map_err(|why| DatasetError::Line { line: line_no, why })?;
        items.push(item);
    }
    Ok(items)
}

/// One JSON Lines entry; the error is the reason, in words.
fn jsonl_item(line: &str, line_no: usize) -> Result<WorkItem, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let max_tokens = match v.get("max_tokens") {
        None | Some(Value::Null) => None,
        Some(m) => Some(
            m.as_u64()
                .filter(|&n| n >= 1 && n <= u64::from(u32::MAX))
                .ok_or("max_tokens must be a whole number of at least 1")? as u32,
        ),
    };
    let id = match v.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(x)) => x.to_string(),
        _ => line_no.to_string(),
    };
    let mut item = WorkItem {
        id,
        history: Vec::new(),
        turns: Vec::new(),
    };
    if let Some(p) = v.get("prompt") {
        let p = p.as_str().ok_or("'prompt' must be a string")?;
        item.turns.push(TurnSpec {
            user: p.to_owned(),
            max_tokens,
        });
    } else if let Some(ms) = v.get("messages") {
        let (history, user) = chat_messages(ms)?;
        item.history = history;
        item.turns.push(TurnSpec { user, max_tokens });
    } else if let Some(ts) = v.get("turns") {
        item.turns = session_turns(ts, max_tokens)?;
    } else {
        return Err("expected 'prompt', 'messages' or 'turns'".into());
    }
    if item.turns.is_empty() {
        return Err("no turn to send".into());
    }
    Ok(item)
}

/// A `messages` array: the history before the last message, and the last message,
/// which must be the user's.
fn chat_messages(ms: &Value) -> Result<(Vec<Message>, String), String> {
    let ms = ms.as_array().ok_or("'messages' must be an array")?;
    let mut msgs = Vec::with_capacity(ms.len());
    for m in ms {
        let role = m.get("role").and_then(Value::as_str);
        let content = m.get("content").and_then(Value::as_str);
        match (role, content) {
            (Some(r), Some(c)) => msgs.push(Message::new(r, c)),
            _ => return Err("each message needs a string 'role' and 'content'".into()),
        }
    }
    match msgs.pop() {
        Some(last) if last.role == "user" => Ok((msgs, last.content)),
        _ => Err("the last message must be the user's".into()),
    }
}

/// A `turns` array: strings, or objects with `content` (or `prompt`) and their own
/// `max_tokens` (else the entry's).
fn session_turns(ts: &Value, max_tokens: Option<u32>) -> Result<Vec<TurnSpec>, String> {
    let ts = ts.as_array().ok_or("'turns' must be an array")?;
    let mut turns = Vec::with_capacity(ts.len());
    for t in ts {
        let (user, mt) = match t {
            Value::String(s) => (s.clone(), max_tokens),
            Value::Object(o) => (
                o.get("content")
                    .or_else(|| o.get("prompt"))
                    .and_then(Value::as_str)
                    .ok_or("a turn needs 'content' or 'prompt'")?
                    .to_owned(),
                o.get("max_tokens")
                    .and_then(Value::as_u64)
                    .map(|n| n.clamp(1, u64::from(u32::MAX)) as u32)
                    .or(max_tokens),
            ),
            _ => return Err("a turn is a string or an object".into()),
        };
        turns.push(TurnSpec {
            user,
            max_tokens: mt,
        });
    }
    Ok(turns)
}

/// Parses a dataset in the format its text shows: ShareGPT when it is a JSON array or
/// its first entry has `conversations`, else generic JSON Lines.
pub fn parse_auto(text: &str, counter: &Counter) -> Result<Vec<WorkItem>, DatasetError> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if text.trim_start().starts_with('[') || first.contains("\"conversations\"") {
        parse_sharegpt(text, counter)
    } else {
        parse_jsonl(text)
    }
}

/// Applies the options: single-turn keeps only each item's first turn; the length
/// filter looks at the first turn's prompt; then the seeded shuffle.
pub fn prepare(
    mut items: Vec<WorkItem>,
    opts: &DatasetOptions,
    counter: &Counter,
) -> Result<Vec<WorkItem>, DatasetError> {
    let total = items.len();
    if !opts.multi_turn {
        for it in &mut items {
            it.turns.truncate(1);
        }
    }
    if opts.min_prompt_tokens.is_some() || opts.max_prompt_tokens.is_some() {
        let lo = opts.min_prompt_tokens.unwrap_or(0);
        let hi = opts.max_prompt_tokens.unwrap_or(usize::MAX);
        items.retain(|it| {
            let n = counter.count(&it.turns[0].user);
            n >= lo && n <= hi
        });
    }
    if items.is_empty() {
        return Err(DatasetError::Empty(if total > 0 {
            format!(" after the length filter ({total} entries read)")
        } else {
            String::new()
        }));
    }
    if let Some(seed) = opts.seed {
        items.shuffle(&mut SmallRng::seed_from_u64(seed));
    }
    Ok(items)
}

fn json_lines(text: &str) -> Result<Vec<Value>, DatasetError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str(l).map_err(|e| DatasetError::Line {
                line: n + 1,
                why: format!("not valid JSON: {e}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAREGPT: &str = r#"[
      {"id": "a", "conversations": [
        {"from": "system", "value": "be brief"},
        {"from": "human", "value": "one two three"},
        {"from": "gpt", "value": "four five"},
        {"from": "human", "value": "six"},
        {"from": "gpt", "value": "seven eight nine ten"}]},
      {"id": "b", "conversations": [{"from": "human", "value": "only a question here"}]},
      {"id": "c", "conversations": [{"from": "gpt", "value": "no question"}]}
    ]"#;

    #[test]
    fn the_format_is_read_from_the_text() {
        let c = Counter::Words;
        let share = parse_auto(SHAREGPT, &c).unwrap();
        assert_eq!(share[0].turns[0].user, "one two three");
        let lines = parse_auto("{\"prompt\": \"hello there\"}\n", &c).unwrap();
        assert_eq!(lines[0].turns[0].user, "hello there");
        let one_share_line = r#"{"conversations": [{"from": "human", "value": "q"}]}"#;
        assert_eq!(
            parse_auto(one_share_line, &c).unwrap()[0].turns[0].user,
            "q"
        );
    }
    #[test]
    fn sharegpt_turns_take_their_output_length_from_the_recorded_reply() {
        let items = parse_sharegpt(SHAREGPT, &Counter::Words).unwrap();
        assert_eq!(items.len(), 2, "an entry without a human turn is skipped");
        let a = &items[0];
        assert_eq!(a.id, "a");
        assert_eq!(a.history, vec![Message::new("system", "be brief")]);
        assert_eq!(a.turns.len(), 2);
        assert_eq!(
            (a.turns[0].user.as_str(), a.turns[0].max_tokens),
            ("one two three", Some(2))
        );
        assert_eq!(
            (a.turns[1].user.as_str(), a.turns[1].max_tokens),
            ("six", Some(4))
        );
        assert_eq!(items[1].turns[0].max_tokens, None);
        let err = parse_sharegpt(r#"[{"x": 1}]"#, &Counter::Words).unwrap_err();
        assert!(err.to_string().contains("no 'conversations'"), "{err}");
    }

    #[test]
    fn jsonl_reads_prompts_messages_and_turns_and_names_bad_lines() {
        let text = concat!(
            r#"{"prompt": "hello there", "max_tokens": 5}"#,
            "\n\n",
            r#"{"id": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}"#,
            "\n",
            r#"{"turns": ["first", {"content": "second", "max_tokens": 3}], "max_tokens": 9}"#,
            "\n"
        );
        let items = parse_jsonl(text).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].turns[0].max_tokens, Some(5));
        assert_eq!(items[0].id, "1");
        assert_eq!(items[1].id, "m");
        assert_eq!(items[1].history, vec![Message::new("system", "s")]);
        assert_eq!(items[1].turns[0].user, "q");
        let t: Vec<_> = items[2]
            .turns
            .iter()
            .map(|t| (t.user.as_str(), t.max_tokens))
            .collect();
        assert_eq!(t, vec![("first", Some(9)), ("second", Some(3))]);
        for (bad, why) in [
            ("{\"prompt\": 3}", "'prompt' must be a string"),
            ("not json", "not valid JSON"),
            ("{\"other\": 1}", "expected 'prompt'"),
            ("{\"prompt\": \"x\", \"max_tokens\": 0}", "at least 1"),
            (
                r#"{"messages": [{"role": "assistant", "content": "a"}]}"#,
                "the last message must be the user's",
            ),
        ] {
            let e = parse_jsonl(&format!("{{\"prompt\": \"ok\"}}\n{bad}")).unwrap_err();
            assert_eq!(
                e,
                DatasetError::Line {
                    line: 2,
                    why: e.to_string().trim_start_matches("line 2: ").to_owned()
                }
            );
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn prepare_filters_by_length_keeps_first_turns_and_shuffles_by_seed() {
        let text: String = (1..=20)
            .map(|n| {
                let words = vec!["w"; n].join(" ");
                format!("{{\"turns\": [\"{words}\", \"more\"]}}\n")
            })
            .collect();
        let items = parse_jsonl(&text).unwrap();
        let opts = DatasetOptions {
            min_prompt_tokens: Some(5),
            max_prompt_tokens: Some(10),
            seed: Some(1),
            ..DatasetOptions::default()
        };
        let a = prepare(items.clone(), &opts, &Counter::Words).unwrap();
        assert_eq!(a.len(), 6);
        assert!(
            a.iter().all(|it| it.turns.len() == 1),
            "single-turn by default"
        );
        let b = prepare(items.clone(), &opts, &Counter::Words).unwrap();
        assert_eq!(a, b, "same seed, same order");
        let lens: Vec<usize> = a
            .iter()
            .map(|it| it.turns[0].user.split(' ').count())
            .collect();
        assert_ne!(lens, vec![5, 6, 7, 8, 9, 10], "shuffled");
        let multi = DatasetOptions {
            multi_turn: true,
            ..DatasetOptions::default()
        };
        assert!(prepare(items.clone(), &multi, &Counter::Words)
            .unwrap()
            .iter()
            .all(|it| it.turns.len() == 2));
        let none = DatasetOptions {
            min_prompt_tokens: Some(100),
            ..DatasetOptions::default()
        };
        let e = prepare(items, &none, &Counter::Words).unwrap_err();
        assert!(
            e.to_string()
                .contains("after the length filter (20 entries read)"),
            "{e}"
        );
    }
}
