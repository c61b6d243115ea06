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
    /// The dialect the endpoint speaks.
    pub api: Api,
}

/// Why a URL cannot be a target.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Not a URL: the text and the parser's reason.
    #[error("'{0}' is not a URL: {1} (expected something like http://127.0.0.1:8000/v1)")]
    Invalid(String, String),
    /// A URL without an http:// or https:// scheme.
    #[error("'{0}' has no http:// or https:// scheme (ws:// and wss:// are for --api websocket)")]
    Scheme(String),
    /// A dialect whose path cannot be guessed from a base URL: the URL and the dialect.
    #[error("'{0}': --api {1} needs the full endpoint URL, e.g. http://127.0.0.1:8000/v2/models/NAME/generate_stream")]
    NeedsEndpoint(String, &'static str),
}

/// The endpoint and model-list paths for `api`: `path` itself when it already names
/// the dialect's endpoint, else the dialect's endpoint under `path` (less any other
/// dialect's endpoint it ends in). `None` for KServe without its full endpoint.
fn endpoints(path: &str, api: Api) -> Option<(String, String)> {
    let named = |a: Api| {
        ENDPOINTS
            .iter()
            .find(|(x, s)| *x == a && path.ends_with(s))
            .map(|(_, s)| *s)
    };
    let inferred = Api::from_path(path);
    let base = match inferred.and_then(named) {
        Some(suffix) => &path[..path.len() - suffix.len()],
        None => path,
    };
    let endpoint = if inferred == Some(api) {
        path.to_string()
    } else if api == Api::Kserve {
        return None;
    } else {
        let base = if base.is_empty() && api.openai_style() {
            "/v1"
        } else {
            base
        };
        let (_, suffix) = ENDPOINTS.iter().find(|(a, _)| *a == api)?;
        format!("{base}{suffix}")
    };
    let base = if base.is_empty() && api.openai_style() {
        "/v1"
    } else {
        base
    };
    let models = match api {
        Api::Ollama => "/api/tags".to_string(),
        Api::Generate => "/info".to_string(),
        Api::Llamacpp => format!("{base}/v1/models"),
        // The model's own metadata: `{"name": ...}`.
        Api::Kserve => endpoint
            .rsplit_once('/')
            .map_or(endpoint.clone(), |(m, _)| m.to_string()),
        _ => format!("{base}/models"),
    };
    Some((endpoint, models))
}

/// The endpoints each dialect serves on, the default first.
const ENDPOINTS: [(Api, &str); 12] = [
    (Api::Chat, "/chat/completions"),
    (Api::Completions, "/completions"),
    (Api::Responses, "/responses"),
    (Api::Anthropic, "/messages"),
    (Api::Ollama, "/api/chat"),
    (Api::Ollama, "/api/generate"),
    (Api::Generate, "/generate_stream"),
    (Api::Generate, "/generate"),
    (Api::Kserve, "/generate_stream"),
    (Api::Kserve, "/generate"),
    (Api::Llamacpp, "/completion"),
    (Api::Websocket, "/realtime"),
];

impl Target {
    /// Resolves `url` for `api`. When `api` is `None`, it is inferred from a path that
    /// already names an endpoint ([`Api::from_path`]), else chat. A base URL gets the
    /// dialect's endpoint: `{base}/chat/completions`, `{base}/completions`,
    /// `{base}/responses`, `{base}/messages` (base `/v1` when none), and for the
    /// servers' native APIs `/api/chat`, `/generate_stream`, `/completion`. KServe
    /// needs the full endpoint (its path names the model).
    pub fn resolve(url: &str, api: Option<Api>) -> Result<Target, TargetError> {
        let uri: Uri = url.parse().map_err(|e: http::uri::InvalidUri| {
            TargetError::Invalid(redact_url(url), e.to_string())
        })?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            Some("ws") | Some("wss") if api.is_none() || api == Some(Api::Websocket) => {}
            _ => return Err(TargetError::Scheme(redact_url(url))),
        }
        let path = uri.path().trim_end_matches('/');
        let inferred = Api::from_path(path);
        let ws = matches!(uri.scheme_str(), Some("ws") | Some("wss"));
        let api = api
            .or(inferred)
            .unwrap_or(if ws { Api::Websocket } else { Api::Chat });
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
        let (endpoint, models) = endpoints(path, api)
            .ok_or_else(|| TargetError::NeedsEndpoint(redact_url(url), api.name()))?;
        Ok(Target {
            endpoint: build(&endpoint)?,
            models: build(&models)?,
            api,
        })
    }

    /// The endpoint as it may be shown or stored: no credentials, no query values.
    pub fn display(&self) -> String {
        redact_url(&self.endpoint.to_string())
    }
}

/// One URL redaction for every crate (kept here under its old path for bench's callers).
pub use cadence_core::secret::redact_url;

/// What every request to a target carries, and what must never be shown: the headers
/// (the key as a bearer token, or the Messages API's `x-api-key`, beside the user's
/// own) and the redactor that knows the key and every header value. The one assembly
/// for `cadence bench` and the watch's probes.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The headers every request carries.
    pub headers: http::HeaderMap,
    /// Masks the key and the user's header values wherever text is kept or shown.
    pub redactor: cadence_core::secret::Redactor,
}

impl Credentials {
    /// For `api`, with the key `api_key` (`None`: no key) and the user's own `extra`
    /// headers (which win over the defaults). An error in words when the key cannot be
    /// a header value.
    pub fn new(
        api: Api,
        api_key: Option<&str>,
        extra: &[(http::HeaderName, http::HeaderValue)],
    ) -> Result<Credentials, String> {
        use cadence_transport::client;
        let mut secrets: Vec<String> = api_key.iter().map(|k| k.to_string()).collect();
        secrets.extend(
            extra
                .iter()
                .filter_map(|(_, v)| v.to_str().ok().map(str::to_string)),
        );
        let mut headers = client::base_headers(api_key, extra)?;
        if api == Api::Anthropic {
            client::anthropic_headers(&mut headers, api_key, extra);
        }
        Ok(Credentials {
            headers,
            redactor: cadence_core::secret::Redactor::new(secrets),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_carry_the_key_for_the_api_and_mask_every_secret() {
        let extra = [cadence_transport::client::parse_header("X-Team:  t-secret-9 ").unwrap()];
        let c = Credentials::new(Api::Chat, Some("k-secret-1"), &extra).unwrap();
        assert_eq!(c.headers["authorization"], "Bearer k-secret-1");
        assert_eq!(c.headers["x-team"], "t-secret-9");
        let shown = c.redactor.redact("key k-secret-1, team t-secret-9");
        assert!(
            !shown.contains("k-secret-1") && !shown.contains("t-secret-9"),
            "{shown}"
        );
        // The Messages API takes the key in x-api-key, with its version header.
        let c = Credentials::new(Api::Anthropic, Some("k-secret-1"), &[]).unwrap();
        assert_eq!(c.headers["x-api-key"], "k-secret-1");
        assert!(c.headers.get("authorization").is_none());
        assert!(c.headers.contains_key("anthropic-version"));
        // No key: no authorization, and nothing to mask but what was given.
        let c = Credentials::new(Api::Chat, None, &[]).unwrap();
        assert!(c.headers.get("authorization").is_none());
        assert_eq!(c.redactor.redact("plain words"), "plain words");
        // A key that cannot be a header value is refused in words.
        assert!(Credentials::new(Api::Chat, Some("bad\nkey"), &[]).is_err());
    }

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
        assert_eq!(redact_url("http://u:pw@h:1/v1"), "http://[REDACTED]@h:1/v1");
    }

    #[test]
    fn each_dialect_gets_its_endpoint_and_model_list() {
        let cases = [
            ("http://h:1", Api::Responses, "/v1/responses", "/v1/models"),
            (
                "http://h:1/v1",
                Api::Anthropic,
                "/v1/messages",
                "/v1/models",
            ),
            ("http://h:1", Api::Ollama, "/api/chat", "/api/tags"),
            (
                "http://h:1/api/generate",
                Api::Ollama,
                "/api/generate",
                "/api/tags",
            ),
            ("http://h:1", Api::Generate, "/generate_stream", "/info"),
            ("http://h:1/generate", Api::Generate, "/generate", "/info"),
            ("http://h:1", Api::Llamacpp, "/completion", "/v1/models"),
            (
                "http://h:1/v2/models/m/generate_stream",
                Api::Kserve,
                "/v2/models/m/generate_stream",
                "/v2/models/m",
            ),
            (
                "ws://h:1/v1/realtime",
                Api::Websocket,
                "/v1/realtime",
                "/v1/models",
            ),
            // A path naming another dialect's endpoint is a base for this one.
            (
                "http://h:1/v1/chat/completions",
                Api::Responses,
                "/v1/responses",
                "/v1/models",
            ),
        ];
        for (url, api, endpoint, models) in cases {
            for given in [Some(api), None] {
                let path = url.parse::<Uri>().unwrap().path().to_string();
                if given.is_none() && Api::from_path(&path) != Some(api) {
                    continue;
                }
                let t = Target::resolve(url, given).unwrap();
                assert_eq!(
                    (t.api, t.endpoint.path(), t.models.path()),
                    (api, endpoint, models),
                    "{url}"
                );
            }
        }
        assert!(matches!(
            Target::resolve("http://h:1", Some(Api::Kserve)),
            Err(TargetError::NeedsEndpoint(..))
        ));
        assert!(Target::resolve("ws://h:1/x", Some(Api::Chat)).is_err());
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
