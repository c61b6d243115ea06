//! Where requests go: turns what the user typed (a base URL such as
//! `http://host:8000/v1`, or a full endpoint) into the endpoint for the chosen API,
//! and a display form with credentials and query secrets removed.

use cadence_wire::Api;
use http::Uri;

/// A resolved endpoint.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URI requests are sent to.
    pub endpoint: Uri,
    /// The URI of the model list (`…/v1/models`).
    pub models: Uri,
    pub api: Api,
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("'{0}' is not a URL: {1} (expected something like http://127.0.0.1:8000/v1)")]
    Invalid(String, String),
    #[error("'{0}' has no http:// or https:// scheme")]
    Scheme(String),
}

impl Target {
    /// Resolves `url` for `api`. When `api` is `None`, it is inferred from a path that
    /// already names an endpoint, else chat.
    pub fn resolve(url: &str, api: Option<Api>) -> Result<Target, TargetError> {
        let uri: Uri = url.parse().map_err(|e: http::uri::InvalidUri| {
            TargetError::Invalid(redact_url(url), e.to_string())
        })?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => return Err(TargetError::Scheme(redact_url(url))),
        }
        let path = uri.path().trim_end_matches('/');
        let (base, inferred) = if let Some(b) = path.strip_suffix("/chat/completions") {
            (b.to_string(), Some(Api::Chat))
        } else if let Some(b) = path.strip_suffix("/completions") {
            (b.to_string(), Some(Api::Completions))
        } else if path.is_empty() {
            ("/v1".to_string(), None)
        } else {
            (path.to_string(), None)
        };
        let api = api.or(inferred).unwrap_or(Api::Chat);
        let suffix = match api {
            Api::Chat => "/chat/completions",
            Api::Completions => "/completions",
        };
        let build = |p: &str| -> Result<Uri, TargetError> {
            let pq = match uri.query() {
                Some(q) => format!("{p}?{q}"),
                None => p.to_string(),
            };
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(pq.parse().map_err(|e: http::uri::InvalidUri| {
                TargetError::Invalid(redact_url(url), e.to_string())
            })?);
            Uri::from_parts(parts).map_err(|e| TargetError::Invalid(redact_url(url), e.to_string()))
        };
        Ok(Target {
            endpoint: build(&format!("{base}{suffix}"))?,
            models: build(&format!("{base}/models"))?,
            api,
        })
    }

    /// The endpoint as it may be shown or stored: no credentials, no query values.
    pub fn display(&self) -> String {
        redact_url(&self.endpoint.to_string())
    }
}

/// Removes `user:pass@` and every query value from a URL-ish string.
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let head = match head.split_once("://") {
        Some((scheme, rest)) => {
            let (auth, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => head.to_string(),
    };
    match query {
        Some(q) => {
            let keys: Vec<String> = q
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) => format!("{k}=[REDACTED]"),
                    None => kv.to_string(),
                })
                .collect();
            format!("{head}?{}", keys.join("&"))
        }
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_gets_endpoint_for_api() {
        let t = Target::resolve("http://127.0.0.1:8000/v1", None).unwrap();
        assert_eq!(
            t.endpoint.to_string(),
            "http://127.0.0.1:8000/v1/chat/completions"
        );
        assert_eq!(t.models.to_string(), "http://127.0.0.1:8000/v1/models");
        let t = Target::resolve("http://127.0.0.1:8000/v1/", Some(Api::Completions)).unwrap();
        assert_eq!(
            t.endpoint.to_string(),
            "http://127.0.0.1:8000/v1/completions"
        );
    }

    #[test]
    fn bare_host_gets_v1() {
        let t = Target::resolve("http://localhost:8000", None).unwrap();
        assert_eq!(t.endpoint.path(), "/v1/chat/completions");
    }

    #[test]
    fn full_endpoint_infers_api() {
        let t = Target::resolve("https://h/openai/v1/completions", None).unwrap();
        assert_eq!(t.api, Api::Completions);
        assert_eq!(t.endpoint.path(), "/openai/v1/completions");
        assert_eq!(t.models.path(), "/openai/v1/models");
    }

    #[test]
    fn query_is_kept_for_requests_but_redacted_for_display() {
        let t = Target::resolve("https://h/v1?key=s3cret", None).unwrap();
        assert_eq!(t.endpoint.query(), Some("key=s3cret"));
        assert!(!t.display().contains("s3cret"));
    }

    #[test]
    fn userinfo_is_redacted() {
        assert_eq!(redact_url("http://u:pw@h:1/v1"), "http://h:1/v1");
    }

    #[test]
    fn rejects_non_http() {
        assert!(matches!(
            Target::resolve("ftp://h/v1", None),
            Err(TargetError::Scheme(_))
        ));
        assert!(Target::resolve("not a url", None).is_err());
    }
}
