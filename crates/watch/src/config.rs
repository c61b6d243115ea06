//! The watch config file (TOML): the targets to probe, each probe's shape and schedule,
//! and the SLOs a probe is judged by. Unknown keys are errors that name the key, so a
//! typo never silently leaves a default in force.

use cadence_core::Slo;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    webhook: Option<String>,
    #[serde(default)]
    probe: ProbeFile,
    #[serde(default, rename = "target")]
    targets: Vec<TargetFile>,
    #[serde(default)]
    builtin: Option<BuiltinFile>,
    #[serde(default)]
    vantage: Option<String>,
    #[serde(default)]
    shared: Option<SharedFile>,
}

/// `[shared]`: the PostgreSQL database several watchers feed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SharedFile {
    url: String,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default)]
    ca_file: Option<std::path::PathBuf>,
}

/// `[shared]` as given: the shared store's address (a `postgres://` URL or a libpq
/// `key=value` string), the variable holding its password, a private CA's PEM file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedSpec {
    /// The address: a `postgres://` URL or a libpq `key=value` string.
    pub url: String,
    /// The environment variable holding the password (never the password).
    pub password_env: Option<String>,
    /// A PEM file of a private CA trusted beside the public roots.
    pub ca_file: Option<std::path::PathBuf>,
}

/// The built-in simulator's fault schedule (targets with `url = "builtin"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BuiltinFile {
    freeze_at: Option<String>,
    freeze_for: Option<String>,
    slow_at: Option<String>,
    slow_for: Option<String>,
    slow_factor: Option<f64>,
}

/// A probe shape; every key optional (the `[probe]` table's, else the defaults).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeFile {
    prompt_tokens: Option<u32>,
    prompt: Option<String>,
    dataset: Option<std::path::PathBuf>,
    extra_body: Option<toml::Table>,
    max_tokens: Option<u32>,
    concurrency: Option<u32>,
    requests: Option<u32>,
    interval: Option<String>,
    jitter: Option<String>,
    deadline: Option<String>,
    max_error_rate: Option<f64>,
    hours: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    name: String,
    url: String,
    #[serde(default)]
    api: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    key_env: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    ca_file: Option<std::path::PathBuf>,
    #[serde(default)]
    slo: Vec<String>,
    #[serde(default)]
    probe: ProbeFile,
}

/// What a probe's requests ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompts {
    /// A synthetic prompt of `prompt_tokens` words.
    Synthetic,
    /// The user's prompt, in every request.
    Text(String),
    /// A file of prompts (`cadence bench --dataset`'s JSON Lines or ShareGPT): each
    /// probe sends its entries in order from the first, so every probe asks the same.
    Dataset(std::path::PathBuf),
}

/// What one probe sends and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// Prompt length in tokens (words, as the built-in simulator counts them) of the
    /// synthetic prompt.
    pub prompt_tokens: u32,
    /// What the requests ask: the synthetic prompt, the user's text, or a dataset.
    pub prompts: Prompts,
    /// Merged into every request body, as `cadence bench --extra-body` (sampling
    /// settings, `ignore_eos`, a provider's own fields).
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// The output tokens each request asks for at most.
    pub max_tokens: u32,
    /// Requests in flight at once (closed loop).
    pub concurrency: u32,
    /// Requests per probe.
    pub requests: u32,
    /// From one probe's start to the next one's, give or take `jitter`.
    pub interval: Duration,
    /// How far a probe's start may move from its interval, either way.
    pub jitter: Duration,
    /// A probe still running after this is stopped; its unfinished requests count as
    /// aborted (a hung target cannot stall the watcher).
    pub deadline: Duration,
    /// The share of failed requests a probe may have and still pass.
    pub max_error_rate: f64,
    /// Probe only within this time of day (UTC); `None`: all day.
    pub hours: Option<Hours>,
}

/// A daily window of UTC time, `HH:MM-HH:MM`, in minutes from midnight; it wraps past
/// midnight when `end < start` (`22:00-06:00`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hours {
    /// The window's start, in minutes from midnight UTC.
    pub start_min: u32,
    /// The window's end, in minutes from midnight UTC.
    pub end_min: u32,
}

impl Hours {
    /// Parses `HH:MM-HH:MM`; an error in words.
    pub fn parse(s: &str) -> Result<Hours, String> {
        let hm = |t: &str| -> Option<u32> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
            (h <= 24 && m < 60 && h * 60 + m <= 1440).then_some(h * 60 + m)
        };
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| format!("{s:?} is not HH:MM-HH:MM (UTC), e.g. 08:00-20:00"))?;
        match (hm(a), hm(b)) {
            (Some(start_min), Some(end_min)) if start_min != end_min => {
                Ok(Hours { start_min, end_min })
            }
            _ => Err(format!(
                "{s:?} is not HH:MM-HH:MM (UTC) with two different times, e.g. 08:00-20:00"
            )),
        }
    }

    /// How long from `now_ms` (Unix ms) until the window is open: zero inside it.
    pub fn wait_ms(&self, now_ms: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        let t = now_ms.rem_euclid(DAY);
        let (a, b) = (
            i64::from(self.start_min) * 60_000,
            i64::from(self.end_min) * 60_000,
        );
        let inside = if a < b {
            t >= a && t < b
        } else {
            t >= a || t < b
        };
        if inside {
            0
        } else {
            (a - t).rem_euclid(DAY)
        }
    }
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            prompt_tokens: 64,
            prompts: Prompts::Synthetic,
            extra_body: None,
            max_tokens: 64,
            concurrency: 1,
            requests: 4,
            interval: Duration::from_secs(60),
            jitter: Duration::from_secs(5),
            deadline: Duration::from_secs(60),
            max_error_rate: 0.0,
            hours: None,
        }
    }
}

/// One endpoint to watch.
#[derive(Debug, Clone)]
pub struct Target {
    /// Unique; the label of its rows, series and page.
    pub name: String,
    /// The endpoint: a base URL or a full one (or `builtin`).
    pub url: String,
    /// `--api`'s names (`chat`, `completions`, `anthropic`, …); `None`: from the path.
    pub api: Option<cadence_wire::Api>,
    /// `None`: the built-in simulator's (only there may it be left out).
    pub model: Option<String>,
    /// The name of the environment variable holding the API key (never the key).
    pub key_env: Option<String>,
    /// The user's own headers, name and value (the values are secrets).
    pub headers: Vec<(String, String)>,
    /// A PEM file of CA certificates trusted beside the public roots on https:// (an
    /// endpoint behind a private CA).
    pub ca_file: Option<std::path::PathBuf>,
    /// The SLOs each probe is judged by.
    pub slos: Vec<Slo>,
    /// What each probe sends and when.
    pub probe: Probe,
}

/// The whole watch: its targets and where incidents are posted.
#[derive(Debug, Clone)]
pub struct Config {
    /// The endpoints to watch.
    pub targets: Vec<Target>,
    /// Where incidents are posted (a URL), if anywhere.
    pub webhook: Option<String>,
    /// `[builtin]`: the built-in simulator stops producing tokens from `.0` after the
    /// watcher starts, for `.1` (a fault to watch an incident open and close).
    pub builtin_freeze: Option<(Duration, Duration)>,
    /// `[builtin]`: the built-in simulator runs slower for a while.
    pub builtin_slow: Option<BuiltinSlow>,
    /// This watcher's name among several (`vantage`); `None`: the host's name.
    pub vantage: Option<String>,
    /// `[shared]`: where the shared store is.
    pub shared: Option<SharedSpec>,
}

/// Whether `name` may name a target or a vantage (it is a URL path and a label): `.`
/// and `..` are not, as a path segment means the directory or its parent.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// The built-in simulator runs `factor` times slower (every inter-token gap takes
/// `factor` times as long) from `at` after the watcher starts, for `duration`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuiltinSlow {
    /// When the slowdown starts, after the watcher does.
    pub at: Duration,
    /// How long it lasts.
    pub duration: Duration,
    /// How many times slower each gap is.
    pub factor: f64,
}

/// The most requests a probe may run at once: a probe samples, it does not load.
pub const MAX_CONCURRENCY: u32 = 1_000;

/// The most requests a probe may send.
pub const MAX_REQUESTS: u32 = 100_000;

/// Why a config cannot be used; the message names the key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn duration(key: &str, s: &str) -> Result<Duration, ConfigError> {
    cadence_core::parse_duration(s).map_err(|e| ConfigError(format!("{key} = {s:?}: {e}")))
}

impl ProbeFile {
    /// `self` over `base`, each key checked.
    fn resolve(&self, base: &Probe, at: &str) -> Result<Probe, ConfigError> {
        let mut p = base.clone();
        let positive = |key: &str, v: Option<u32>, max: u32, into: &mut u32| match v {
            Some(0) => Err(ConfigError(format!("{at}.{key} must be at least 1"))),
            Some(n) if n > max => Err(ConfigError(format!("{at}.{key} = {n}: at most {max}"))),
            Some(n) => {
                *into = n;
                Ok(())
            }
            None => Ok(()),
        };
        let tokens = cadence_bench::prompts::MAX_LENGTH;
        positive(
            "prompt_tokens",
            self.prompt_tokens,
            tokens,
            &mut p.prompt_tokens,
        )?;
        self.resolve_prompts(&mut p, at)?;
        positive("max_tokens", self.max_tokens, tokens, &mut p.max_tokens)?;
        positive(
            "concurrency",
            self.concurrency,
            MAX_CONCURRENCY,
            &mut p.concurrency,
        )?;
        positive("requests", self.requests, MAX_REQUESTS, &mut p.requests)?;
        if let Some(s) = &self.interval {
            p.interval = duration(&format!("{at}.interval"), s)?;
            if p.interval.is_zero() {
                return Err(ConfigError(format!("{at}.interval must be above zero")));
            }
        }
        if let Some(s) = &self.jitter {
            p.jitter = duration(&format!("{at}.jitter"), s)?;
        }
        if let Some(s) = &self.deadline {
            p.deadline = duration(&format!("{at}.deadline"), s)?;
            if p.deadline.is_zero() {
                return Err(ConfigError(format!("{at}.deadline must be above zero")));
            }
        }
        if let Some(r) = self.max_error_rate {
            if !(0.0..=1.0).contains(&r) {
                return Err(ConfigError(format!(
                    "{at}.max_error_rate = {r}: a share between 0 and 1"
                )));
            }
            p.max_error_rate = r;
        }
        if let Some(h) = &self.hours {
            p.hours = Some(Hours::parse(h).map_err(|e| ConfigError(format!("{at}.hours: {e}")))?);
        }
        if p.jitter >= p.interval {
            return Err(ConfigError(format!(
                "{at}.jitter ({:?}) must be shorter than its interval ({:?})",
                p.jitter, p.interval
            )));
        }
        Ok(p)
    }
}

impl ProbeFile {
    /// The table that says anything of the prompt decides it: `prompt_tokens` (the
    /// synthetic prompt), `prompt` or `dataset`, one of them; `extra_body` replaces the
    /// inherited one.
    fn resolve_prompts(&self, p: &mut Probe, at: &str) -> Result<(), ConfigError> {
        match (&self.prompt, &self.dataset, self.prompt_tokens) {
            (Some(_), Some(_), _) => {
                return Err(ConfigError(format!(
                    "{at}: prompt and dataset are both given: a probe asks one prompt or a file of them"
                )))
            }
            (Some(_), None, Some(_)) | (None, Some(_), Some(_)) => {
                return Err(ConfigError(format!(
                    "{at}.prompt_tokens sizes the synthetic prompt: with prompt or dataset the text is yours, leave it out"
                )))
            }
            (Some(text), None, None) if text.trim().is_empty() => {
                return Err(ConfigError(format!("{at}.prompt is empty")))
            }
            (Some(text), None, None) => p.prompts = Prompts::Text(text.clone()),
            (None, Some(path), None) => p.prompts = Prompts::Dataset(path.clone()),
            (None, None, Some(_)) => p.prompts = Prompts::Synthetic,
            (None, None, None) => {}
        }
        if let Some(t) = &self.extra_body {
            let v = serde_json::to_value(t)
                .map_err(|e| ConfigError(format!("{at}.extra_body: {e}")))?;
            p.extra_body = v.as_object().cloned();
        }
        Ok(())
    }
}

impl BuiltinFile {
    /// The freeze, given whole (both keys) or not at all.
    fn freeze(&self) -> Result<Option<(Duration, Duration)>, ConfigError> {
        Ok(match (&self.freeze_at, &self.freeze_for) {
            (None, None) => None,
            (Some(at), Some(d)) => Some((
                duration("builtin.freeze_at", at)?,
                duration("builtin.freeze_for", d)?,
            )),
            _ => {
                return Err(ConfigError(
                    "[builtin]: freeze_at and freeze_for go together".into(),
                ))
            }
        })
    }

    /// The slow-down, given whole (all three keys) or not at all.
    fn slow(&self) -> Result<Option<BuiltinSlow>, ConfigError> {
        Ok(match (&self.slow_at, &self.slow_for, self.slow_factor) {
            (None, None, None) => None,
            (Some(at), Some(d), Some(factor)) => {
                if !(factor.is_finite() && factor > 0.0) {
                    return Err(ConfigError(format!(
                        "builtin.slow_factor = {factor}: a finite number above zero (2.0 doubles every inter-token gap)"
                    )));
                }
                Some(BuiltinSlow {
                    at: duration("builtin.slow_at", at)?,
                    duration: duration("builtin.slow_for", d)?,
                    factor,
                })
            }
            _ => {
                return Err(ConfigError(
                    "[builtin]: slow_at, slow_for and slow_factor go together".into(),
                ))
            }
        })
    }
}

/// libpq's variable for a PostgreSQL password: never a target's key.
pub const STORE_PASSWORD_ENV: &str = "PGPASSWORD";

/// Refuses a target's `key_env` that names the shared store's password variable
/// (`PGPASSWORD`, or `store_pw`: `[shared].password_env` or `--shared-password-env`):
/// the store's password would go to the target as its bearer token.
pub fn key_env_is_not_the_stores(
    at: &str,
    key_env: &str,
    store_pw: Option<&str>,
) -> Result<(), ConfigError> {
    if key_env == STORE_PASSWORD_ENV || Some(key_env) == store_pw {
        return Err(ConfigError(format!(
            "{at}: key_env = {key_env:?} names the shared store's password variable: it would be sent to the target as its key; give the target its own variable"
        )));
    }
    Ok(())
}

impl Config {
    /// Parses a config file's text. `builtin`: the URL every target named `builtin`
    /// stands for is filled in by the caller, so only its model may be missing.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        let base = file.probe.resolve(&Probe::default(), "probe")?;
        if file.targets.is_empty() {
            return Err(ConfigError(
                "no [[target]]: the config must list at least one target".into(),
            ));
        }
        let mut targets: Vec<Target> = Vec::new();
        for (i, t) in file.targets.into_iter().enumerate() {
            let at = format!("target[{i}]");
            if !valid_name(&t.name) {
                return Err(ConfigError(format!(
                    "{at}.name = {:?}: letters, digits, '-', '_' and '.' only, not '.' or '..' (it is a URL path and a label)",
                    t.name
                )));
            }
            if targets.iter().any(|o| o.name == t.name) {
                return Err(ConfigError(format!(
                    "{at}.name = {:?}: two targets have that name",
                    t.name
                )));
            }
            let at = format!("target {:?}", t.name);
            let api = match &t.api {
                None => None,
                Some(a) => cadence_wire::Api::parse_or_auto(a)
                    .map_err(|e| ConfigError(format!("{at}: api: {e}")))?,
            };
            let slos = t
                .slo
                .iter()
                .map(|s| {
                    s.parse::<Slo>()
                        .map_err(|e| ConfigError(format!("{at}: slo: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(k) = &t.key_env {
                if k.is_empty() || k.chars().any(|c| !(c.is_ascii_alphanumeric() || c == '_')) {
                    return Err(ConfigError(format!(
                        "{at}: key_env = {k:?} must name an environment variable (the key itself never goes in the file)"
                    )));
                }
                let store_pw = file.shared.as_ref().and_then(|s| s.password_env.as_deref());
                key_env_is_not_the_stores(&at, k, store_pw)?;
            }
            let probe = t.probe.resolve(&base, &format!("{at}: probe"))?;
            targets.push(Target {
                name: t.name,
                url: t.url,
                api,
                model: t.model,
                key_env: t.key_env,
                headers: t.headers.into_iter().collect(),
                ca_file: t.ca_file,
                slos,
                probe,
            });
        }
        let (builtin_freeze, builtin_slow) = match &file.builtin {
            None => (None, None),
            Some(b) => (b.freeze()?, b.slow()?),
        };
        if let Some(v) = &file.vantage {
            if !valid_name(v) {
                return Err(ConfigError(format!(
                    "vantage = {v:?}: letters, digits, '-', '_' and '.' only (it is a label)"
                )));
            }
        }
        if let Some(sh) = &file.shared {
            if sh.url.trim().is_empty() {
                return Err(ConfigError(
                    "[shared].url is empty: a postgres:// URL or a libpq key=value string".into(),
                ));
            }
        }
        Ok(Config {
            targets,
            webhook: file.webhook,
            builtin_freeze,
            builtin_slow,
            vantage: file.vantage,
            shared: file.shared.map(|s| SharedSpec {
                url: s.url,
                password_env: s.password_env,
                ca_file: s.ca_file,
            }),
        })
    }

    /// Reads and parses a config file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text =
            cadence_core::input::read_text(path, cadence_core::input::CONFIG.named("watch config"))
                .map_err(|e| ConfigError(e.to_string()))?;
        let mut config =
            Config::parse(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        // A dataset's or CA file's relative path is the config file's neighbour,
        // wherever the watcher was started.
        let dir = path.parent().unwrap_or(std::path::Path::new(""));
        let near = |p: &mut std::path::PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        for t in &mut config.targets {
            if let Prompts::Dataset(d) = &mut t.probe.prompts {
                near(d);
            }
            if let Some(ca) = &mut t.ca_file {
                near(ca);
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
webhook = "http://127.0.0.1:9/hook"
[probe]
requests = 3
interval = "30s"
jitter = "2s"
[[target]]
name = "a"
url = "http://127.0.0.1:1/v1/chat/completions"
model = "m"
key_env = "A_KEY"
headers = { "x-team" = "t" }
slo = ["itl.p99<=50ms", "ttft.p50 <= 1s"]
[target.probe]
interval = "10s"
[[target]]
name = "b"
url = "http://127.0.0.1:2/v1/completions"
api = "completions"
[builtin]
freeze_at = "30s"
freeze_for = "20s"
slow_at = "1m"
slow_for = "1500ms"
slow_factor = 2.5
"#;

    #[test]
    fn a_full_config_parses_with_defaults_and_overrides() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.webhook.as_deref(), Some("http://127.0.0.1:9/hook"));
        assert_eq!(c.targets.len(), 2);
        let a = &c.targets[0];
        assert_eq!(a.probe.interval, Duration::from_secs(10));
        assert_eq!(a.probe.requests, 3, "from [probe]");
        assert_eq!(a.probe.max_tokens, 64, "the default");
        assert_eq!(a.slos.len(), 2);
        assert_eq!(a.slos[1].text, "ttft.p50<=1s");
        assert_eq!(a.headers, vec![("x-team".into(), "t".into())]);
        assert_eq!(c.targets[1].probe.interval, Duration::from_secs(30));
        assert_eq!(c.targets[1].api, Some(cadence_wire::Api::Completions));
        assert_eq!(
            c.builtin_freeze,
            Some((Duration::from_secs(30), Duration::from_secs(20)))
        );
        assert_eq!(
            c.builtin_slow,
            Some(BuiltinSlow {
                at: Duration::from_secs(60),
                duration: Duration::from_millis(1500),
                factor: 2.5,
            })
        );
    }

    #[test]
    fn the_builtin_slow_down_is_whole_with_a_positive_factor() {
        const T: &str = "[[target]]\nname=\"a\"\nurl=\"builtin\"\n";
        let parse = |b: &str| Config::parse(&format!("[builtin]\n{b}{T}"));
        let c = parse("slow_at=\"2s\"\nslow_for=\"3s\"\nslow_factor=2\n").unwrap();
        assert_eq!(c.builtin_freeze, None, "a slow-down alone");
        assert_eq!(c.builtin_slow.map(|s| s.factor), Some(2.0));
        let c = parse("freeze_at=\"2s\"\nfreeze_for=\"3s\"\n").unwrap();
        assert!(c.builtin_freeze.is_some() && c.builtin_slow.is_none());
        const WINDOW: &str = "slow_at=\"2s\"\nslow_for=\"3s\"\n";
        for factor in ["0", "-2.0", "inf", "nan", "\"2x\""] {
            let e = parse(&format!("{WINDOW}slow_factor={factor}\n")).unwrap_err();
            assert!(e.to_string().contains("slow_factor"), "{factor}: {e}");
        }
        for (b, says) in [
            ("slow_at=\"2s\"\nslow_factor=2\n", "go together"),
            (
                "slow_at=\"soon\"\nslow_for=\"3s\"\nslow_factor=2\n",
                "slow_at",
            ),
            (
                "slow_at=\"2s\"\nslow_for=\"3\"\nslow_factor=2\n",
                "slow_for",
            ),
            ("freeze_at=\"2s\"\n", "go together"),
            ("slowfactor=2\n", "slowfactor"),
        ] {
            let e = parse(b).unwrap_err().to_string();
            assert!(e.contains(says), "{b:?}: {e}");
        }
    }

    fn err(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn f137_dot_names_and_the_stores_password_as_a_key_are_refused() {
        for name in [".", "..", "a/b", "../x"] {
            let e = err(&format!("[[target]]\nname={name:?}\nurl=\"http://x\"\n"));
            assert!(
                e.contains("target[0].name") && e.contains("'..'"),
                "{name}: {e}"
            );
        }
        assert!(valid_name("v1.2") && valid_name("...a") && !valid_name(".."));
        let t = "[[target]]\nname=\"a\"\nurl=\"http://x\"\n";
        let e = err(&format!("{t}key_env=\"PGPASSWORD\"\n"));
        assert!(e.contains("shared store's password variable"), "{e}");
        let e = err(&format!(
            "[shared]\nurl=\"postgres://h/d\"\npassword_env=\"STORE_PW\"\n{t}key_env=\"STORE_PW\"\n"
        ));
        assert!(e.contains("key_env = \"STORE_PW\""), "{e}");
        assert!(Config::parse(&format!("{t}key_env=\"API_KEY\"\n")).is_ok());
    }

    #[test]
    fn sizes_past_their_ceiling_are_refused_naming_key_value_and_ceiling() {
        let probe = |kv: &str| {
            err(&format!(
                "[[target]]\nname=\"a\"\nurl=\"http://x\"\n[target.probe]\n{kv}\n"
            ))
        };
        let e = probe("prompt_tokens = 4294967295");
        assert!(
            e.contains("prompt_tokens = 4294967295: at most 16777216"),
            "{e}"
        );
        let e = probe("max_tokens = 16777217");
        assert!(e.contains("max_tokens = 16777217: at most 16777216"), "{e}");
        let e = probe("concurrency = 1001");
        assert!(e.contains("concurrency = 1001: at most 1000"), "{e}");
        let e = probe("requests = 100001");
        assert!(e.contains("requests = 100001: at most 100000"), "{e}");
        let fine =
            "[[target]]\nname=\"a\"\nurl=\"http://x\"\n[target.probe]\nprompt_tokens = 16777216\n";
        assert_eq!(
            Config::parse(fine).unwrap().targets[0].probe.prompt_tokens,
            1 << 24
        );
    }

    #[test]
    fn bad_keys_are_errors_that_name_the_key() {
        let e = err("[probe]\nintervall = \"1s\"\n[[target]]\nname=\"a\"\nurl=\"http://x\"\n");
        assert!(e.contains("intervall"), "{e}");
        let e = err("[[target]]\nname=\"a\"\nurl=\"http://x\"\napi_key=\"sk-123\"\n");
        assert!(e.contains("api_key"), "{e}");
        let e = err("[[target]]\nname=\"a\"\nurl=\"http://x\"\nslo=[\"itl.p99<=fast\"]\n");
        assert!(e.contains("slo") && e.contains("itl.p99<=fast"), "{e}");
        let e =
            err("[[target]]\nname=\"a\"\nurl=\"http://x\"\n[target.probe]\ninterval=\"soon\"\n");
        assert!(e.contains("interval"), "{e}");
        let e = err("[[target]]\nname=\"a\"\nurl=\"http://x\"\n[target.probe]\nrequests=0\n");
        assert!(e.contains("requests"), "{e}");
        let e = err(
            "[[target]]\nname=\"a\"\nurl=\"http://x\"\n[[target]]\nname=\"a\"\nurl=\"http://y\"\n",
        );
        assert!(e.contains("two targets"), "{e}");
        let e = err("[[target]]\nname=\"a/b\"\nurl=\"http://x\"\n");
        assert!(e.contains("name"), "{e}");
        let e = err("[[target]]\nname=\"a\"\nurl=\"http://x\"\nkey_env=\"sk-live 123\"\n");
        assert!(e.contains("key_env"), "{e}");
        let e = err("[[target]]\nname=\"a\"\nurl=\"http://x\"\napi=\"smoke\"\n");
        assert!(e.contains("api"), "{e}");
        assert!(err("").contains("[[target]]"));
        let e = err("[builtin]\nfreeze_at=\"1s\"\nfreze_for=\"1s\"\n[[target]]\nname=\"a\"\nurl=\"http://x\"\n");
        assert!(e.contains("freze_for"), "{e}");
    }

    #[test]
    fn hours_are_a_daily_utc_window_that_may_wrap_midnight() {
        let h = Hours::parse("08:00-20:00").unwrap();
        let at = |hh: i64, mm: i64| 3 * 86_400_000 + (hh * 60 + mm) * 60_000;
        assert_eq!(h.wait_ms(at(8, 0)), 0);
        assert_eq!(h.wait_ms(at(19, 59)), 0);
        assert_eq!(h.wait_ms(at(20, 0)), 12 * 3_600_000);
        assert_eq!(h.wait_ms(at(7, 30)), 30 * 60_000);
        let night = Hours::parse("22:00-06:00").unwrap();
        assert_eq!(night.wait_ms(at(23, 0)), 0);
        assert_eq!(night.wait_ms(at(5, 0)), 0);
        assert_eq!(night.wait_ms(at(6, 0)), 16 * 3_600_000);
        assert!(Hours::parse("8-20").is_err());
        assert!(Hours::parse("08:00-08:00").is_err());
        let e = err(
            "[[target]]\nname=\"a\"\nurl=\"http://x\"\n[target.probe]\nhours=\"25:00-26:00\"\n",
        );
        assert!(e.contains("hours"), "{e}");
    }

    #[test]
    fn the_example_config_parses() {
        let text = include_str!("../../../examples/watch.toml");
        let c = Config::parse(text).unwrap();
        assert!(!c.targets.is_empty());
        let p = |i: usize| &c.targets[i].probe;
        assert!(matches!(p(0).prompts, Prompts::Dataset(_)));
        assert!(matches!(p(1).prompts, Prompts::Text(_)));
        assert!(p(0).extra_body.is_some() && p(1).extra_body.is_some());
        assert!(c.targets[0].ca_file.is_some() && c.targets[1].ca_file.is_none());
        assert_eq!(c.vantage.as_deref(), Some("eu-west"));
        let sh = c.shared.unwrap();
        assert!(sh.url.starts_with("postgres://"));
        assert_eq!(
            sh.password_env.as_deref(),
            Some("CADENCE_WATCH_DB_PASSWORD")
        );
        assert!(sh.ca_file.is_some());
    }

    #[test]
    fn a_vantage_is_a_label_and_the_shared_table_wants_a_url() {
        let target = "[[target]]\nname=\"a\"\nurl=\"http://x\"\n";
        let e = err(&format!("vantage = \"eu west\"\n{target}"));
        assert!(e.contains("vantage") && e.contains("letters"), "{e}");
        let e = err(&format!("[shared]\nurl = \"\"\n{target}"));
        assert!(e.contains("[shared].url"), "{e}");
        let e = err(&format!(
            "[shared]\nurl = \"postgres://h/d\"\npasword_env = \"X\"\n{target}"
        ));
        assert!(e.contains("pasword_env"), "{e}");
    }

    #[test]
    fn the_table_that_names_the_prompt_decides_it() {
        let two = |base: &str, own: &str| {
            Config::parse(&format!(
                "[probe]\n{base}\n[[target]]\nname=\"a\"\nurl=\"http://x\"\n\
                 [[target]]\nname=\"b\"\nurl=\"http://x\"\n[target.probe]\n{own}\n"
            ))
            .map(|c| (c.targets[0].probe.clone(), c.targets[1].probe.clone()))
        };
        let (a, b) = two("dataset = \"p.jsonl\"", "prompt = \"hi there\"").unwrap();
        assert_eq!(a.prompts, Prompts::Dataset("p.jsonl".into()));
        assert_eq!(b.prompts, Prompts::Text("hi there".into()));
        let (a, b) = two("prompt = \"hi\"", "prompt_tokens = 32").unwrap();
        assert_eq!(a.prompts, Prompts::Text("hi".into()));
        assert_eq!((b.prompts, b.prompt_tokens), (Prompts::Synthetic, 32));
        // extra_body: a TOML table as the JSON object bench's --extra-body takes; a
        // target's replaces the inherited one.
        let (a, b) = two(
            "extra_body = { temperature = 0.5, stop = [\"\\n\"], chat_template_kwargs = { thinking = false } }",
            "extra_body = { seed = 7 }",
        )
        .unwrap();
        let extra = serde_json::Value::Object(a.extra_body.unwrap());
        assert_eq!(
            extra,
            serde_json::json!({"temperature": 0.5, "stop": ["\n"], "chat_template_kwargs": {"thinking": false}})
        );
        assert_eq!(
            serde_json::Value::Object(b.extra_body.unwrap()),
            serde_json::json!({"seed": 7})
        );
        let e = two("", "prompt = \"x\"\ndataset = \"p.jsonl\"").unwrap_err();
        assert!(e.to_string().contains("prompt and dataset"), "{e}");
        let e = two("", "prompt = \"x\"\nprompt_tokens = 8").unwrap_err();
        assert!(e.to_string().contains("prompt_tokens"), "{e}");
        let e = two("prompt = \"  \"", "").unwrap_err();
        assert!(e.to_string().contains("prompt is empty"), "{e}");
    }

    #[test]
    fn a_relative_dataset_or_ca_file_is_the_config_files_neighbour() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        let text = "[[target]]\nname=\"a\"\nurl=\"http://x\"\nca_file=\"ca.pem\"\n[target.probe]\ndataset=\"p.jsonl\"\n\
                    [[target]]\nname=\"b\"\nurl=\"http://x\"\n[target.probe]\ndataset=\"/abs/p.jsonl\"\n";
        std::fs::write(&path, text).unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(
            c.targets[0].probe.prompts,
            Prompts::Dataset(dir.path().join("p.jsonl"))
        );
        assert_eq!(
            c.targets[1].probe.prompts,
            Prompts::Dataset("/abs/p.jsonl".into())
        );
        assert_eq!(c.targets[0].ca_file, Some(dir.path().join("ca.pem")));
        assert_eq!(c.targets[1].ca_file, None);
    }
}
