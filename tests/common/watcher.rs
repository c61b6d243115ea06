//! A `cadence watch` process for the end-to-end tests: started on 127.0.0.1 port 0,
//! its page address read from stderr, stopped by SIGINT (killed if a test fails midway),
//! a plain HTTP/1.0 GET of its pages, and headless Chromium on them.
#![allow(dead_code)]

use super::chromium;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running watcher (or `watch serve`) and the page address it printed.
pub struct Watcher {
    pub child: Child,
    pub addr: String,
    pub stderr: mpsc::Receiver<String>,
    /// What it said before its page address (a shipper's first warning may come first).
    pub early: Vec<String>,
}

/// Runs `cadence ARGS` (a `watch` command line) until it prints its page address.
pub fn start_cadence(args: &[&std::ffi::OsStr]) -> Watcher {
    start_cadence_env(args, &[])
}

/// [`start_cadence`] with `env` set for it.
pub fn start_cadence_env(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Watcher {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut early = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the watcher prints its page address");
        if let Some(i) = line.find("page at http://") {
            let rest = &line[i + "page at http://".len()..];
            break rest.trim_end_matches('/').to_string();
        }
        early.push(line);
    };
    Watcher {
        child,
        addr,
        stderr: rx,
        early,
    }
}

/// `cadence watch CONFIG --db DB --listen 127.0.0.1:0 EXTRA…`, up to its page address.
pub fn start_watch(config: &Path, db: &Path, extra: &[&str]) -> Watcher {
    start_watch_env(config, db, extra, &[])
}

/// [`start_watch`] with `env` set for it.
pub fn start_watch_env(config: &Path, db: &Path, extra: &[&str], env: &[(&str, &str)]) -> Watcher {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "watch".as_ref(),
        config.as_os_str(),
        "--db".as_ref(),
        db.as_os_str(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    start_cadence_env(&args, env)
}

/// A test that fails midway leaves no watcher behind.
impl Drop for Watcher {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Watcher {
    /// SIGINT, then the exit status and everything it said on stderr (read to the end:
    /// the reader thread may still hold the last lines when the process has exited).
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-INT", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the watcher did not stop on SIGINT"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut said = std::mem::take(&mut self.early);
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(line) = self
            .stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            said.push(line);
        }
        (status, said.join("\n"))
    }

    /// Polls `path` until `done` holds for its body (or panics after `within`).
    pub fn wait_for(&self, path: &str, within: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let (_, body) = get(&self.addr, path);
            if done(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "{path} never held: {body}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Polls the database at `db` until it holds at least `n` probes (of `target`, or of
/// any), and gives how many it holds then; panics after `within`. A database not yet
/// made, or busy, counts as none.
pub fn wait_for_probes(db: &Path, target: Option<&str>, n: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let held = cadence_watch::Store::open_read(db)
            .and_then(|s| s.probes(target, 0))
            .map_or(0, |p| p.len());
        if held >= n {
            return held;
        }
        assert!(
            Instant::now() < deadline,
            "{} held {held} probes of {target:?} after {within:?}, {n} expected",
            db.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// GET over HTTP/1.0: (status, body).
pub fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (status, body)
}

/// Renders `url` in headless Chromium (past the page's 10 s update) and returns its DOM
/// and every URL the page itself asked for (requests whose initiator is `origin`; the
/// browser's own background requests have none), read from Chromium's net log.
pub fn render(url: &str, origin: &str, dir: &Path, name: &str) -> (String, Vec<String>) {
    let net = dir.join(format!("net-{name}.json"));
    let profile = dir.join(format!("profile-{name}"));
    let dom = chromium(
        url,
        &profile,
        &[
            "--virtual-time-budget=12000",
            "--dump-dom",
            &format!("--log-net-log={}", net.display()),
        ],
    );
    let log: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&net).expect("a net log"))
            .expect("the net log is JSON");
    let own = origin.trim_end_matches('/');
    let mut asked = Vec::new();
    for e in log["events"].as_array().unwrap() {
        let p = &e["params"];
        if let (Some(u), Some(from)) = (p["url"].as_str(), p["initiator"].as_str()) {
            if from == own {
                asked.push(u.to_string());
            }
        }
    }
    (String::from_utf8_lossy(&dom.stdout).into_owned(), asked)
}

/// The series names of a `/metrics` text (its sample lines').
pub fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every `cadence_watch_…` name the deploy kit's watch rules and Grafana dashboard use.
pub fn deploy_metric_names(root: &Path) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for file in [
        "deploy/prometheus/cadence-watch-rules.yml",
        "deploy/grafana/cadence-watch-dashboard.json",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for (i, _) in text.match_indices("cadence_watch_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// What [`layout`] measured of a page in Chromium at 1280 px wide.
#[derive(Debug)]
pub struct Layout {
    /// The document's `scrollWidth` (px): over 1280, something overflows.
    pub scroll_width: f64,
    /// The first elements whose right edge passes the window's, if any.
    pub wide: String,
    /// The `figure.chart`s on the page.
    pub figures: usize,
    /// Each chart missing its axes (a tick on each, beside the two titles) or an SLO
    /// line its figure's `data-slos` promises.
    pub bad: String,
    /// The tallest chart text (a tick label, the x title; the rotated y title aside)
    /// in px, as drawn.
    pub chart_text_px: f64,
    /// The page's `h2` font size in px.
    pub h2_px: f64,
    /// The dumped DOM.
    pub dom: String,
}

/// Measures the page `html` in headless Chromium at 1280 px wide: written to a file in
/// `dir` (the page is self-contained, so its copy renders as served) with a script that,
/// once loaded, writes the figures into a `#layout-check` element the DOM dump carries.
pub fn layout(html: &str, dir: &Path, name: &str) -> Layout {
    const CHECK: &str = "<script>addEventListener('load',function(){\
var d=document.documentElement,wide=[],bad=[],text=0;\
document.querySelectorAll('body *').forEach(function(e){var r=e.getBoundingClientRect();\
if(r.width>0&&r.right>d.clientWidth+0.5){wide.push(e.tagName+(e.id?'#'+e.id:''));}});\
var figs=document.querySelectorAll('figure.chart');\
figs.forEach(function(f){var s=f.querySelector('svg');if(!s){return;}\
var x=s.querySelectorAll('g.axes text[text-anchor=middle]').length,\
y=s.querySelectorAll('g.axes text[text-anchor=end]').length,\
lines=s.querySelectorAll('g.slo line').length,want=+f.getAttribute('data-slos');\
if(x<3||y<2||lines!==want){bad.push(f.id+': '+x+' x texts, '+y+' y ticks, '+lines+' SLO lines of '+want);}\
s.querySelectorAll('g.axes text:not([transform])').forEach(function(t){text=Math.max(text,t.getBoundingClientRect().height);});});\
var h2=document.querySelector('h2'),c=document.createElement('div');c.id='layout-check';\
c.setAttribute('data-scroll-width',String(d.scrollWidth));c.setAttribute('data-wide',wide.slice(0,6).join(' '));\
c.setAttribute('data-figures',String(figs.length));c.setAttribute('data-bad',bad.join('; '));\
c.setAttribute('data-text',String(text));\
c.setAttribute('data-h2',h2?getComputedStyle(h2).fontSize.replace('px',''):'0');\
document.body.appendChild(c);});</script>";
    let file = dir.join(format!("{name}.html"));
    std::fs::write(&file, html.replace("</body>", &format!("{CHECK}</body>"))).unwrap();
    let out = chromium(
        &format!("file://{}", file.display()),
        &dir.join(format!("profile-layout-{name}")),
        &[
            "--window-size=1280,2000",
            "--virtual-time-budget=3000",
            "--dump-dom",
        ],
    );
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let check = dom
        .find("id=\"layout-check\"")
        .map(|i| &dom[i..])
        .unwrap_or_else(|| panic!("{name}: no layout check in the DOM: {dom}"));
    let attr = |a: &str| -> String {
        let at = check.find(&format!("{a}=\"")).unwrap() + a.len() + 2;
        check[at..].split('"').next().unwrap().to_string()
    };
    Layout {
        scroll_width: attr("data-scroll-width").parse().unwrap(),
        wide: attr("data-wide"),
        figures: attr("data-figures").parse().unwrap(),
        bad: attr("data-bad"),
        chart_text_px: attr("data-text").parse().unwrap(),
        h2_px: attr("data-h2").parse().unwrap(),
        dom,
    }
}
