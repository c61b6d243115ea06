//! Incident webhooks: a JSON POST when a target's incident opens and when it closes.
//! The proxy's sender lives inside its server (not a shared piece), so this is a small
//! one of the same shape: in the background, 10 s timeout, failures logged with the
//! URL's credentials redacted. Credentials in the URL (`https://user:pass@host/…`) go
//! as HTTP basic auth; the posts in flight are kept, so a watcher that ends (`--once`)
//! can wait for them, bounded, and say which did not arrive.

use crate::incident::Change;
use crate::store::ProbeRow;
use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_transport::get::WEBHOOK_TIMEOUT;
use http::{HeaderMap, HeaderValue};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// What is posted.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Event<'a> {
    /// `incident_start` or `incident_end`.
    pub event: &'static str,
    /// The target's name.
    pub target: &'a str,
    /// The probe that opened or closed it (Unix ms).
    pub at_ms: i64,
    /// The probe as stored.
    pub probe: &'a ProbeRow,
}

/// Validates a webhook URL: http or https with a host.
pub fn parse(url: &str) -> Result<http::Uri, String> {
    let redacted = cadence_bench::target::redact_url(url);
    let u: http::Uri = url
        .parse()
        .map_err(|e| format!("webhook {redacted}: {e}"))?;
    match (u.scheme_str(), u.host()) {
        (Some("http") | Some("https"), Some(_)) => Ok(u),
        _ => Err(format!(
            "webhook {redacted}: an http:// or https:// URL with a host"
        )),
    }
}

/// How the posts still in flight at a watcher's end came out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Taken by the receiver (2xx).
    pub delivered: usize,
    /// Refused or failed (each already logged with its cause).
    pub failed: usize,
    /// Still unanswered when the wait ran out (dropped).
    pub unfinished: usize,
}

impl Settled {
    /// What a watcher's end says of the posts to `to` that did not arrive (none when
    /// every one did), having waited `waited` for them.
    pub fn said(&self, to: &str, waited: Duration) -> Vec<String> {
        let mut said = Vec::new();
        if self.failed > 0 {
            said.push(format!(
                "cadence watch: {} incident webhook(s) to {to} failed (see above); {} delivered at the end",
                self.failed, self.delivered
            ));
        }
        if self.unfinished > 0 {
            said.push(format!(
                "cadence watch: {} incident webhook(s) to {to} had no answer within {} s and were dropped at exit",
                self.unfinished,
                waited.as_secs()
            ));
        }
        said
    }
}

/// Posts incident changes.
#[derive(Clone, Debug)]
pub struct Webhook {
    /// The URL without its credentials.
    url: http::Uri,
    /// `Authorization: Basic …` from the URL's credentials, if it had any.
    auth: HeaderMap,
    client: HyperClient,
    in_flight: Arc<Mutex<Vec<JoinHandle<bool>>>>,
}

impl Webhook {
    /// Posts to `url`; its credentials, if any, go as basic auth.
    pub fn new(url: http::Uri) -> Webhook {
        let client = client::build(&ClientConfig {
            pool_size: 1,
            connect_timeout: Duration::from_secs(5),
            http2: false,
        });
        let (url, auth) = split_credentials(url);
        Webhook {
            url,
            auth,
            client,
            in_flight: Arc::default(),
        }
    }

    /// The URL as logs may show it.
    pub fn display(&self) -> String {
        cadence_bench::target::redact_url(&self.url.to_string())
    }

    /// Posts the change in the background (kept for [`Webhook::settle`]).
    pub fn post(&self, change: Change, probe: &ProbeRow) {
        let event = Event {
            event: match change {
                Change::Opened => "incident_start",
                Change::Closed => "incident_end",
            },
            target: &probe.target,
            at_ms: probe.started_ms,
            probe,
        };
        let body = serde_json::to_vec(&event).unwrap_or_default();
        let shown = self.display();
        let (http, url, auth) = (self.client.clone(), self.url.clone(), self.auth.clone());
        let task = tokio::spawn(async move {
            let sent =
                cadence_transport::get::post_json_with(&http, &url, &auth, body, WEBHOOK_TIMEOUT)
                    .await;
            if let Err(e) = &sent {
                let e = cadence_core::secret::redact_patterns(&e.to_string());
                tracing::warn!("cadence watch: the webhook {shown} failed: {e}");
            }
            sent.is_ok()
        });
        let mut in_flight = self.in_flight();
        in_flight.retain(|t| !t.is_finished());
        in_flight.push(task);
    }

    /// Waits up to `within` for the posts in flight, and says how they came out; any
    /// still unanswered then are dropped.
    pub async fn settle(&self, within: Duration) -> Settled {
        let tasks = std::mem::take(&mut *self.in_flight());
        let deadline = tokio::time::Instant::now() + within;
        let mut settled = Settled::default();
        for mut task in tasks {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(Ok(true)) => settled.delivered += 1,
                Ok(_) => settled.failed += 1,
                Err(_) => {
                    task.abort();
                    settled.unfinished += 1;
                }
            }
        }
        settled
    }

    /// The posts in flight; a poisoned lock still holds a whole list.
    fn in_flight(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<bool>>> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `url` without its userinfo, and the `Authorization` header it stands for (basic
/// auth of the percent-decoded user and password), marked sensitive.
fn split_credentials(url: http::Uri) -> (http::Uri, HeaderMap) {
    let mut headers = HeaderMap::new();
    let Some(authority) = url.authority() else {
        return (url, headers);
    };
    let Some((userinfo, host)) = authority.as_str().rsplit_once('@') else {
        return (url, headers);
    };
    let credentials = match userinfo.split_once(':') {
        Some((user, pass)) => [decode(user), decode(pass)].join(":"),
        None => decode(userinfo) + ":",
    };
    let mut parts = url.clone().into_parts();
    let Ok(host) = host.parse() else {
        return (url, headers);
    };
    parts.authority = Some(host);
    let Ok(bare) = http::Uri::from_parts(parts) else {
        return (url, headers);
    };
    if let Ok(mut v) = HeaderValue::from_str(&format!("Basic {}", base64(credentials.as_bytes()))) {
        v.set_sensitive(true);
        headers.insert(http::header::AUTHORIZATION, v);
    }
    (bare, headers)
}

/// `%XX` escapes decoded (a URL's userinfo); anything else kept as written.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (b[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (RFC 4648), for a basic-auth header: a few lines here
/// rather than a crate for one header.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn webhook_urls_are_checked_and_shown_without_credentials() {
        assert!(parse("ftp://x/y").is_err());
        let u = parse("https://user:s3cret@hooks.example/x?token=T0K").unwrap();
        let shown = Webhook::new(u).display();
        assert!(
            !shown.contains("s3cret") && !shown.contains("T0K"),
            "{shown}"
        );
    }

    #[test]
    fn base64_is_rfc_4648() {
        let cases = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v")];
        for (plain, coded) in cases {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(
            base64(b"Aladdin:open sesame"),
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
    }

    /// A receiver on 127.0.0.1 port 0 that waits `accept_after` before reading one
    /// request, answers 200, and hands back the request's head and body.
    fn receiver(accept_after: Duration) -> (u16, std::sync::mpsc::Receiver<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            std::thread::sleep(accept_after);
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if text.contains("\r\n\r\n") && text.ends_with('}') {
                    break;
                }
            }
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
        });
        (port, rx)
    }

    fn breached() -> ProbeRow {
        crate::rows::tests::probe("api", 1_000, false)
    }

    #[tokio::test]
    async fn f136_webhook_url_credentials_go_as_basic_auth_not_in_the_url() {
        let (port, got) = receiver(Duration::ZERO);
        let url = parse(&format!("http://hook%40user:pa%3Ass@127.0.0.1:{port}/in")).unwrap();
        let hook = Webhook::new(url);
        assert!(!hook.display().contains("pa"), "{}", hook.display());
        hook.post(Change::Opened, &breached());
        let s = hook.settle(Duration::from_secs(5)).await;
        assert_eq!(s.delivered, 1, "{s:?}");
        let head = got.recv_timeout(Duration::from_secs(5)).unwrap();
        let want = format!("authorization: Basic {}", base64(b"hook@user:pa:ss"));
        assert!(
            head.to_ascii_lowercase()
                .contains(&want.to_ascii_lowercase()),
            "{head}"
        );
        assert!(head.starts_with("POST /in HTTP/1.1"), "{head}");
        assert!(!head.contains("pa%3Ass@"), "{head}");
    }

    /// Posts one incident to 127.0.0.1:`port` and waits up to `within` for it.
    async fn post_and_settle(port: u16, within: Duration) -> (usize, usize, usize) {
        let hook = Webhook::new(parse(&format!("http://127.0.0.1:{port}/in")).unwrap());
        hook.post(Change::Opened, &breached());
        let s = hook.settle(within).await;
        (s.delivered, s.failed, s.unfinished)
    }

    #[tokio::test]
    async fn f135_posts_in_flight_are_waited_for_and_counted_at_the_end() {
        // A receiver slow to accept still gets the incident within the wait.
        let (port, got) = receiver(Duration::from_millis(800));
        assert_eq!(
            post_and_settle(port, Duration::from_secs(5)).await,
            (1, 0, 0)
        );
        let body = got.recv_timeout(Duration::from_secs(1)).unwrap();
        assert!(body.contains("incident_start"), "{body}");
        // Nothing listens: failed (and logged). A receiver that never answers: unfinished.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        assert_eq!(
            post_and_settle(port, Duration::from_secs(5)).await,
            (0, 1, 0)
        );
        let (port, _never) = receiver(Duration::from_secs(60));
        assert_eq!(
            post_and_settle(port, Duration::from_millis(300)).await,
            (0, 0, 1)
        );
    }
}
