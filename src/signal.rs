//! The signal that stops a run: `bench` and `proxy` both end on Ctrl-C or SIGTERM (what
//! CI and Kubernetes send), so the one listener lives here, shared.

/// Resolves on the first Ctrl-C or SIGTERM.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
