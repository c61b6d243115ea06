//! Incident webhooks: a JSON POST when a target's incident opens and when it closes.
//! The proxy's sender lives inside its server (not a shared piece), so this is a small
//! one of the same shape: fire and forget, 10 s timeout, failures logged with the URL's
//! credentials redacted.

use crate::incident::Change;
use crate::store::ProbeRow;
use cadence_transport::client::{self, ClientConfig, HyperClient};
use std::time::Duration;

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

/// Posts incident changes.
#[derive(Clone, Debug)]
pub struct Webhook {
    url: http::Uri,
    client: HyperClient,
}

impl Webhook {
    /// Posts to `url`.
    pub fn new(url: http::Uri) -> Webhook {
        let client = client::build(&ClientConfig {
            pool_size: 1,
            connect_timeout: Duration::from_secs(5),
            http2: false,
        });
        Webhook { url, client }
    }

    /// The URL as logs may show it.
    pub fn display(&self) -> String {
        cadence_bench::target::redact_url(&self.url.to_string())
    }

    /// Posts the change in the background.
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
        cadence_transport::get::post_json_in_background(&self.client, &self.url, body, move |e| {
            tracing::warn!("cadence watch: the webhook {shown} failed: {e}")
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
