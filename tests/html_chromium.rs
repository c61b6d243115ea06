//! The HTML report of a sweep against the built-in simulator, opened in a real headless
//! Chromium: the page loads with no script error and every chart drew marks (the page's
//! own self-check writes its verdict into the DOM). A screenshot is kept at
//! `target/tmp/cadence-html-report.png` for people to look at. CI installs Debian's
//! `chromium` (`scripts/test.sh`, which runs this ignored test); without it the
//! test fails and says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs Chromium headless on `page` with `args`, in a throwaway profile.
fn headless(page: &Path, profile: &Path, args: &[&str]) -> Output {
    common::chromium(&format!("file://{}", page.display()), profile, args)
}

#[test]
#[ignore = "needs Chromium; scripts/test.sh installs it and runs this"]
fn html_report_of_a_sweep_draws_every_chart_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    common::cadence()
        .args([
            "bench",
            "-c",
            "1,2,4",
            "-n",
            "8",
            "--max-tokens",
            "24",
            "--quiet",
        ])
        .args(["--slo", "itl.p99<=1s"])
        .arg("--html")
        .arg(&html)
        .assert()
        .code(0);

    let profile = dir.path().join("profile");
    let dom = headless(
        &html,
        &profile,
        &[
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ],
    );
    let page = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    let check = page
        .split(r#"id="cadence-check""#)
        .nth(1)
        .and_then(|s| s.split("</span>").next())
        .unwrap_or_else(|| panic!("no self-check in the dumped DOM:\n{page}\n{log}"));
    assert!(
        check.contains(r#"data-charts="8""#) && check.contains(r#"data-missing="""#),
        "every chart must draw marks: {check}"
    );
    assert!(
        check.contains(r#"data-errors="0""#),
        "script errors: {check}"
    );
    assert!(check.contains("self-check: ok, 8 charts"), "{check}");
    for line in log.lines().filter(|l| l.contains("CONSOLE")) {
        assert!(
            !line.to_lowercase().contains("error") && !line.contains("Uncaught"),
            "console error: {line}"
        );
    }
    // Every figure reports its count of marks; none is 0.
    let marks: Vec<u64> = page
        .split(r#"data-marks=""#)
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
        .collect();
    assert_eq!(marks.len(), 8, "{check}");
    assert!(marks.iter().all(|&m| m > 0), "{marks:?}");

    // A screenshot for people to look at.
    let shot_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let shot = shot_dir.join("cadence-html-report.png");
    let _ = std::fs::remove_file(&shot);
    std::fs::copy(&html, shot_dir.join("cadence-html-report.html")).unwrap();
    let out = headless(
        &html,
        &profile,
        &[
            "--window-size=1280,2600",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "no screenshot written: {out:?}");
}
