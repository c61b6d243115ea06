//! https:// endpoints behind a private CA: `cadence bench --ca-file`, a watch target's
//! `ca_file` and `cadence proxy --upstream-ca-file` trust its certificates beside the
//! public roots, with checks on. The server is a TLS listener on 127.0.0.1 whose
//! certificate a CA made here signed (with `openssl`, which scripts/test.sh installs).

mod common;

use common::watcher::start_watch;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

/// A CA, and a server certificate it signed for 127.0.0.1: (ca.pem, server.crt,
/// server.key) in `dir`.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is needed for this test (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=cadence test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.crt"),
        dir.join("server.key"),
    )
}

/// A TLS listener on 127.0.0.1 presenting `crt`: each session goes to `serve` on a
/// runtime of its own thread (a client that does not trust the certificate never gets
/// there). Its address; it serves until the test ends.
fn tls_listener<F, Fut>(crt: &Path, key: &Path, serve: F) -> std::net::SocketAddr
where
    F: Fn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(crt)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    common::serve_on_own_thread(move |listener| async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let session = acceptor.accept(tcp);
            let serve = serve(match session.await {
                Ok(tls) => tls,
                Err(_) => continue,
            });
            tokio::spawn(serve);
        }
    })
}

/// A chat endpoint over TLS on 127.0.0.1: each request gets a stream of two chunks and
/// the connection closes. Its `https://` URL.
fn serve_tls(crt: &Path, key: &Path) -> String {
    let addr = tls_listener(crt, key, |mut tls| async move {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The request: its headers, then its body (content-length).
        let body_end = loop {
            let n = tls.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            seen.extend_from_slice(&buf[..n]);
            let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            break end + 4 + len;
        };
        while seen.len() < body_end {
            let n = tls.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let chunk = |t: &str| {
            format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n")
        };
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{}{}data: [DONE]\n\n",
            chunk("ok"),
            chunk(" fine")
        );
        let _ = tls.write_all(reply.as_bytes()).await;
        let _ = tls.shutdown().await;
    });
    format!("https://{addr}/v1/chat/completions")
}

/// TLS in front of a plain server (`host:port`): the session ends here and its bytes
/// go on to `plain`. Its address.
fn tls_terminator(crt: &Path, key: &Path, plain: &str) -> std::net::SocketAddr {
    let plain = plain.to_string();
    tls_listener(crt, key, move |mut tls| {
        let plain = plain.clone();
        async move {
            let mut tcp = tokio::net::TcpStream::connect(plain).await.unwrap();
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut tcp).await;
        }
    })
}

/// `cadence bench URL` of two requests with `extra` flags, its records in `dir/NAME`:
/// exit code, records, stderr.
fn bench(
    url: &str,
    dir: &Path,
    name: &str,
    extra: &[&str],
) -> (Option<i32>, Vec<serde_json::Value>, String) {
    let records = dir.join(name);
    let out = common::cadence()
        .args([
            "bench", url, "--model", "m", "-n", "2", "-c", "1", "--quiet",
        ])
        .arg("--records")
        .arg(&records)
        .args(extra)
        .output()
        .unwrap();
    let recs = if records.exists() {
        common::read_records(&records)
    } else {
        Vec::new()
    };
    (
        out.status.code(),
        recs,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bench_trusts_a_private_ca_only_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, crt, key) = certificates(dir.path());
    let url = serve_tls(&crt, &key);

    // The public roots alone: the handshake is refused, and said so per request.
    let (_, recs, err) = bench(&url, dir.path(), "public.jsonl", &[]);
    assert_eq!(recs.len(), 2, "{err}");
    for r in &recs {
        assert_eq!(r["outcome"], "tls_error", "{r}");
    }

    // The CA given: both streams measured.
    let (code, recs, err) = bench(
        &url,
        dir.path(),
        "ca.jsonl",
        &["--ca-file", ca.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(recs.len(), 2, "{err}");
    for r in &recs {
        assert_eq!(r["outcome"], "succeeded", "{r}");
        assert_eq!(r["chunks"].as_array().map(Vec::len), Some(2), "{r}");
    }

    // A file that holds no certificate is a usage error naming it.
    let (code, _, err) = bench(
        &url,
        dir.path(),
        "key.jsonl",
        &["--ca-file", key.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--ca-file") && err.contains("server.key"),
        "{err}"
    );
}

#[test]
fn a_watch_target_behind_a_private_ca_is_probed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, crt, key) = certificates(dir.path());
    let url = serve_tls(&crt, &key);
    // ca_file relative to the config file.
    let cfg = dir.path().join("watch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[probe]\nrequests = 2\ninterval = \"300ms\"\njitter = \"0s\"\n\
             [[target]]\nname = \"private\"\nurl = \"{url}\"\nmodel = \"m\"\nca_file = \"ca.pem\"\n"
        ),
    )
    .unwrap();
    let db = dir.path().join("w.db");
    let w = start_watch(&cfg, &db, &["--quiet"]);
    w.wait_for("/api/targets", Duration::from_secs(30), |b| {
        b.contains("\"name\":\"private\"") && !b.contains("\"probes\":0")
    });
    let (status, said) = w.stop();
    assert!(status.success(), "{said}");
    let store = cadence_watch::Store::open_read(&db).unwrap();
    let probes = store.probes(None, 0).unwrap();
    assert!(!probes.is_empty());
    for p in &probes {
        assert_eq!((p.sent, p.succeeded), (2, 2), "{p:?}");
    }
}

/// A chat request to `base` (http://host:port) over HTTP/1.1: status and body.
fn post_chat(base: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

#[test]
fn the_proxy_forwards_to_an_upstream_behind_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, crt, key) = certificates(dir.path());
    let url = serve_tls(&crt, &key);
    let upstream = url.trim_end_matches("/v1/chat/completions");
    let proxy = |extra: &[&str]| {
        let mut args = vec!["proxy", "--listen", "127.0.0.1:0", "--upstream", upstream];
        args.extend(extra);
        common::spawn_listening(&args)
    };

    // The public roots alone: the upstream is refused, and the client gets a 502.
    let (_p, base) = proxy(&[]);
    let (status, text) = post_chat(&base);
    assert_eq!(status, 502, "{text}");

    // With the CA, the stream comes through whole.
    let (_p, base) = proxy(&["--upstream-ca-file", ca.to_str().unwrap()]);
    let (status, text) = post_chat(&base);
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains(" fine") && text.contains("data: [DONE]"),
        "{text}"
    );

    let out = common::cadence()
        .args(["proxy", "--listen", "127.0.0.1:0", "--upstream", upstream])
        .arg("--upstream-ca-file")
        .arg(&key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--upstream-ca-file") && err.contains("server.key"),
        "{err}"
    );
}

#[test]
fn bench_speaks_wss_with_the_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, crt, key) = certificates(dir.path());
    let (_sim, sim) = common::fast_sim();
    let front = tls_terminator(&crt, &key, sim.trim_start_matches("http://"));
    let url = format!("wss://{front}/v1/realtime");
    let (_, recs, err) = bench(&url, dir.path(), "ws-public.jsonl", &[]);
    assert_eq!(recs.len(), 2, "{err}");
    for r in &recs {
        assert_eq!(r["outcome"], "tls_error", "{r}");
    }
    let ca = ca.to_str().unwrap();
    let (code, recs, err) = bench(&url, dir.path(), "ws-ca.jsonl", &["--ca-file", ca]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(recs.len(), 2, "{err}");
    for r in &recs {
        assert_eq!(r["outcome"], "succeeded", "{r}");
        assert!(r["chunks"].as_array().unwrap().len() >= 2, "{r}");
    }
}
