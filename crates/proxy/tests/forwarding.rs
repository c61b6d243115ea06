//! Byte-identical forwarding: what a client gets through the proxy equals what it gets
//! straight from the sim, for chat, completions, NDJSON and every sim fault (the sim is
//! seeded and `x-cadence-request` pins the schedule, so both requests get one answer).

mod common;

use cadence_sim::Fault;
use common::*;

/// Only `created` (wall-clock seconds) may differ between two sim answers; the two
/// requests run concurrently, and a pair that straddled a second is asked again.
async fn compare(
    c: &TestClient,
    direct: &str,
    proxied: &str,
    path: &str,
    fault: Option<&str>,
    n: u64,
) {
    let body = if path.ends_with("/chat/completions") {
        chat_body(6, true)
    } else {
        completions_body(6)
    };
    let req = n.to_string();
    let mut headers = vec![
        ("x-cadence-request", req.as_str()),
        ("x-cadence-stall-ms", "20"),
    ];
    if let Some(f) = fault {
        headers.push(("x-cadence-fault", f));
    }
    if fault == Some("reset") {
        // A TCP reset discards data the receiver has not read yet; space the tokens so
        // both readers have read them before the cut, and the comparison is about the
        // proxy, not about a race in the kernel.
        headers.push(("x-cadence-itl-ms", "20"));
    }
    let mut last = None;
    let (du, pu) = (format!("{direct}{path}"), format!("{proxied}{path}"));
    for _attempt in 0..3 {
        let (a, b) = tokio::join!(
            fetch(c, "POST", &du, &headers, &body),
            fetch(c, "POST", &pu, &headers, &body),
        );
        let same = a.status == b.status
            && a.body == b.body
            && a.error.is_some() == b.error.is_some()
            && a.headers.get("content-type") == b.headers.get("content-type");
        if same {
            if fault.is_none() {
                assert!(a.text().contains("[DONE]"), "{path}: {}", a.text());
            }
            return;
        }
        last = Some((a, b));
    }
    let (a, b) = last.unwrap();
    panic!(
        "{path} fault {fault:?}: direct {} {:?} ({} bytes, error {:?}) vs proxied {} {:?} ({} bytes, error {:?})\n{}\n---\n{}",
        a.status, a.headers.get("content-type"), a.body.len(), a.error,
        b.status, b.headers.get("content-type"), b.body.len(), b.error,
        a.text().chars().take(600).collect::<String>(),
        b.text().chars().take(600).collect::<String>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_is_byte_identical_for_chat_completions_ndjson_and_every_fault() {
    let s = sim(fast_sim_config()).await;
    let p = proxy(&s.url(), |_| {}).await;
    let c = client();
    let (direct, proxied) = (s.url(), p.url());
    let mut n = 1000;
    for path in ["/v1/chat/completions", "/v1/completions"] {
        compare(&c, &direct, &proxied, path, None, n).await;
        n += 1;
        for (fault, name) in Fault::ALL {
            if fault.chat_only() && path == "/v1/completions" {
                continue;
            }
            compare(&c, &direct, &proxied, path, Some(name), n).await;
            n += 1;
        }
    }
    // The faults include `ndjson` (FAULTS 25) and `reset` (cut mid-body), whose
    // proxied answer must end in an error exactly like the direct one.
    let reset = fetch(
        &c,
        "POST",
        &format!("{proxied}/v1/chat/completions"),
        &[("x-cadence-fault", "reset")],
        &chat_body(6, true),
    )
    .await;
    assert!(reset.error.is_some());
    // Non-streamed answers pass through too.
    let plain = |base: String| {
        let c = c.clone();
        async move {
            fetch(
                &c,
                "POST",
                &format!("{base}/v1/chat/completions"),
                &[("x-cadence-request", "77")],
                &chat_body(4, false),
            )
            .await
        }
    };
    let (a, b) = tokio::join!(plain(direct.clone()), plain(proxied.clone()));
    assert_eq!(a.status, b.status);
    let strip = |t: String| {
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        v["choices"].clone()
    };
    assert_eq!(strip(a.text()), strip(b.text()));
    let models = fetch(&c, "GET", &format!("{proxied}/v1/models"), &[], "").await;
    assert_eq!(models.status, 200);
    assert!(models.text().contains("cadence-sim"));
    p.shutdown().await.unwrap();
}
