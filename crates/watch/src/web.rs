//! The watcher's page, served by axum: the routes of the leaderboard of targets (`/`),
//! a page per target (`/target/NAME`) and per probe, `/api/targets` and
//! `/api/vantages` (JSON) and `/metrics` (OpenMetrics). Each handler reads the
//! database through its own read-only connection (WAL: never blocking the writer) or
//! the shared store, and hands the figures to `page`, which writes the markup.

use crate::board::{self, Row, TargetInfo, DAY_MS, WEEK_MS};
use crate::incident::Incident;
use crate::metrics::Metrics;
use crate::page;
use crate::probe::now_ms;
use crate::shared::Remote;
use crate::store::Store;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the page and `/metrics` read: a watcher's own (its database, targets and
/// gauges, and the shared store it feeds, if any), or `watch serve`'s hub (the shared
/// store alone: no probes, no local file).
#[derive(Debug)]
pub enum PageState {
    /// A watcher's page.
    Watcher {
        /// The watcher's SQLite file (each handler opens it read-only).
        db: PathBuf,
        /// The targets it probes.
        targets: Vec<TargetInfo>,
        /// The gauges the probe loop updates.
        metrics: Arc<Metrics>,
        /// The shared store this watcher feeds: its page then compares vantages.
        remote: Option<Remote>,
    },
    /// `watch serve`: every vantage of the shared store.
    Hub(Remote),
}

impl PageState {
    /// The shared store the page compares vantages from, if any.
    fn remote(&self) -> Option<&Remote> {
        match self {
            PageState::Watcher { remote, .. } => remote.as_ref(),
            PageState::Hub(remote) => Some(remote),
        }
    }
}

/// A served page; dropped = shut down.
#[derive(Debug)]
pub struct Server {
    /// Where the page is served (the real port when bound to port 0).
    pub addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Listens on `addr` and serves in the background, its connections bounded by `limits`.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<PageState>,
    limits: crate::conn::PageLimits,
) -> std::io::Result<Server> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let listener = crate::conn::Bounded::new(listener, limits);
    let app = Router::new()
        .route("/", get(leaderboard))
        .route("/target/{name}", get(target_page))
        .route("/target/{name}/probe/{id}", get(probe_page))
        .route("/api/targets", get(api_targets))
        .route("/api/vantages", get(api_vantages))
        .route("/metrics", get(metrics))
        .with_state(state);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await;
    });
    Ok(Server { addr, _stop: tx })
}

/// Runs `f` on a read-only connection to the watcher's file, off the async workers.
async fn read<T: Send + 'static>(
    db: &Path,
    f: impl FnOnce(&Store) -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, Response> {
    let db = db.to_path_buf();
    let r = tokio::task::spawn_blocking(move || Store::open_read(&db).and_then(|s| f(&s))).await;
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()),
    }
}

/// Every target's row: its week read as points (a few numbers a probe), its latest
/// probe and its open incident's first probe whole.
async fn week_rows(db: &Path, targets: &[TargetInfo]) -> Result<Vec<Row>, Response> {
    let now = now_ms();
    let targets = targets.to_vec();
    read(db, move |s| {
        targets
            .iter()
            .map(|t| {
                let week = s.points(&t.name, now - WEEK_MS)?;
                let open = match board::open_run(&week) {
                    [] => None,
                    run => s.probe(run[0].id)?.map(|first| Incident {
                        target: t.name.clone(),
                        start_ms: first.started_ms,
                        end_ms: None,
                        probes: run.len() as u64,
                        cause: first.slo_detail,
                    }),
                };
                let last = s.last_probe(&t.name)?;
                Ok(board::row(t, &week, last, open, now))
            })
            .collect()
    })
    .await
}

async fn api_targets(State(state): State<Arc<PageState>>) -> Response {
    let PageState::Watcher { db, targets, .. } = &*state else {
        return (
            StatusCode::NOT_FOUND,
            "watch serve probes no targets of its own: every vantage's are at /api/vantages",
        )
            .into_response();
    };
    match week_rows(db, targets).await {
        Ok(rows) => Json(rows).into_response(),
        Err(r) => r,
    }
}

async fn metrics(State(state): State<Arc<PageState>>) -> Response {
    let text = match &*state {
        PageState::Watcher { metrics, .. } => metrics.encode(),
        // The hub's series come from the shared store, read at each scrape.
        PageState::Hub(remote) => match remote_day(remote, None).await {
            Ok(probes) => crate::metrics::encode_vantages(&probes),
            Err(e) => return (StatusCode::BAD_GATEWAY, e).into_response(),
        },
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn leaderboard(State(state): State<Arc<PageState>>) -> Response {
    let (db, targets, remote) = match &*state {
        PageState::Hub(remote) => return Html(hub_html(remote).await).into_response(),
        PageState::Watcher {
            db,
            targets,
            remote,
            ..
        } => (db, targets, remote),
    };
    match week_rows(db, targets).await {
        Ok(rows) => {
            let mut html = page::board::leaderboard_html(&rows, now_ms());
            if let Some(remote) = remote {
                let section = vantage_section(remote, None).await;
                html = page::with_section(&html, &section);
            }
            Html(html).into_response()
        }
        Err(r) => r,
    }
}

/// The day's probes of every vantage from the shared store (of one target or all).
async fn remote_day(
    remote: &Remote,
    target: Option<&str>,
) -> Result<Vec<crate::shared::VantageProbe>, String> {
    remote
        .probes(target, now_ms() - DAY_MS)
        .await
        .map_err(|e| e.to_string())
}

/// "From every vantage" from the shared store; its day's probes are not asked for
/// while the shipper has just failed to reach it (every page load would wait out a
/// connect timeout of its own).
async fn vantage_section(remote: &Remote, target: Option<&str>) -> String {
    let shipper_down = remote
        .ship
        .as_ref()
        .is_some_and(|ship| ship.last_error().is_some());
    let (day, slos) = if shipper_down {
        (None, Vec::new())
    } else {
        let slos = async {
            match target {
                // A store that cannot list its vantages says so in the day's probes.
                Some(name) => remote
                    .vantages()
                    .await
                    .map_or_else(|_| Vec::new(), |vs| crate::vantage::target_slos(&vs, name)),
                None => Vec::new(),
            }
        };
        let (day, slos) = tokio::join!(remote_day(remote, target), slos);
        (Some(day), slos)
    };
    let day = day.as_ref().map(|r| r.as_deref().map_err(String::as_str));
    page::vantage::section(remote, day, target.map(|t| (t, &slos[..])), now_ms())
}

/// `watch serve`'s front page.
async fn hub_html(remote: &Remote) -> String {
    let now = now_ms();
    let vantages = remote.vantages().await.map_err(|e| e.to_string());
    let section = vantage_section(remote, None).await;
    page::vantage::hub(now, vantages.as_deref().map_err(String::as_str), &section)
}

async fn api_vantages(State(state): State<Arc<PageState>>) -> Response {
    let Some(remote) = state.remote() else {
        return (
            StatusCode::NOT_FOUND,
            "this watcher feeds no shared store (--shared)",
        )
            .into_response();
    };
    let (vantages, probes) = tokio::join!(remote.vantages(), remote_day(remote, None));
    match (vantages, probes) {
        (Ok(vantages), Ok(probes)) => Json(serde_json::json!({
            "url_mismatches": crate::vantage::url_mismatches(&vantages),
            "vantages": vantages,
            "rows": crate::vantage::compare(&probes, now_ms() - DAY_MS, now_ms()),
        }))
        .into_response(),
        (Err(e), _) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
        (_, Err(e)) => (StatusCode::BAD_GATEWAY, e).into_response(),
    }
}

async fn target_page(
    State(state): State<Arc<PageState>>,
    UrlPath(name): UrlPath<String>,
) -> Response {
    let (db, targets, remote) = match &*state {
        PageState::Hub(remote) => {
            let section = vantage_section(remote, Some(&name)).await;
            return Html(page::vantage::hub_target(&name, &section)).into_response();
        }
        PageState::Watcher {
            db,
            targets,
            remote,
            ..
        } => (db, targets, remote),
    };
    let Some(info) = targets.iter().find(|t| t.name == name).cloned() else {
        return (StatusCode::NOT_FOUND, format!("no target {name:?}")).into_response();
    };
    let now = now_ms();
    let n = name.clone();
    // The day's probes whole (its charts and incidents), the week's as points (the
    // by-hour chart).
    let day_and_week = read(db, move |s| {
        Ok((
            s.probes(Some(&n), now - DAY_MS)?,
            s.points(&n, now - WEEK_MS)?,
        ))
    });
    match day_and_week.await {
        Ok((day, week)) => {
            let mut html = page::board::target_html(&info, &day, &week, now);
            if let Some(remote) = remote {
                let section = vantage_section(remote, Some(&name)).await;
                html = page::with_section(&html, &section);
            }
            Html(html).into_response()
        }
        Err(r) => r,
    }
}

/// One probe of a target and its requests, each as the database keeps it.
async fn probe_page(
    State(state): State<Arc<PageState>>,
    UrlPath((name, id)): UrlPath<(String, i64)>,
) -> Response {
    let db = match &*state {
        PageState::Watcher { db, targets, .. } if targets.iter().any(|t| t.name == name) => db,
        _ => return (StatusCode::NOT_FOUND, format!("no target {name:?}")).into_response(),
    };
    let found = read(db, move |s| {
        Ok(match s.probe(id)? {
            Some(p) => Some((s.requests(id)?, p)),
            None => None,
        })
    })
    .await;
    match found {
        Ok(Some((reqs, p))) if p.target == name => {
            Html(page::board::probe_html(&p, &reqs)).into_response()
        }
        Ok(_) => (
            StatusCode::NOT_FOUND,
            format!("no probe {id} of {name:?} (retention may have deleted it)"),
        )
            .into_response(),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{rows, HOUR_MS};
    use crate::rows::tests::probe;
    use crate::store::ProbeRow;

    fn info(name: &str) -> TargetInfo {
        TargetInfo {
            name: name.into(),
            url: "http://127.0.0.1:1/v1/chat/completions".into(),
            slos: vec!["itl.p50<=8ms".into()],
            interval_s: 60.0,
        }
    }

    /// The rows read as points (and the latest and the incident's first probe whole)
    /// are the rows of the week's whole probes (FAULTS 149).
    #[tokio::test]
    async fn the_rows_read_as_points_are_the_rows_of_whole_probes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let now = now_ms();
        let mut store = Store::open(&db).unwrap();
        let mut all: Vec<ProbeRow> = Vec::new();
        // a: an incident open since two days ago, after one that closed; b: all ok.
        let plan = [
            ("a", 100, true),
            ("a", 90, false),
            ("a", 80, true),
            ("a", 48, false),
            ("a", 30, false),
            ("a", 0, false),
            ("b", 150, true),
            ("b", 2, true),
        ];
        for (name, hours_ago, ok) in plan {
            let mut p = probe(name, now - hours_ago * HOUR_MS, ok);
            p.slo_detail = vec![format!("the probe {hours_ago} h ago")];
            p.itl_p50_ms = Some(hours_ago as f64 / 7.0);
            p.id = store.insert_probe(&p, &[]).unwrap();
            all.push(p);
        }
        drop(store);
        let targets = [info("a"), info("b"), info("c")];
        let Ok(got) = week_rows(&db, &targets).await else {
            panic!("the rows were not read")
        };
        let json = |r: &[Row]| serde_json::to_value(r).unwrap();
        assert_eq!(json(&got), json(&rows(&targets, &all, now)));
        let open = got[0].open_incident.as_ref().unwrap();
        assert_eq!((open.probes, &open.cause[0][..]), (3, "the probe 48 h ago"));
        assert_eq!(got[0].week.probes, 6);
        assert_eq!(got[2].last_probe, None);
    }
}
