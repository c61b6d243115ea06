//! The TLS client configuration every HTTPS connection of Cadence uses (the load
//! generator's, the watcher's, its shared store's): rustls with ring, the webpki roots,
//! and optionally the PEM certificates of a private CA, so a staging endpoint or a
//! self-hosted database behind an internal CA is reached without turning checks off.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::path::Path;
use std::sync::Arc;

/// A TLS client configuration (rustls'), for [`crate::client::build_with_tls`].
pub type TlsConfig = rustls::ClientConfig;

/// Why a CA file cannot be used: its path and the reason, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the CA file {path}: {detail}")]
pub struct CaError {
    /// The CA file's path, as given.
    pub path: String,
    /// What is wrong with it: unreadable, not PEM, no certificate, or a certificate rustls
    /// rejects.
    pub detail: String,
}

/// A rustls client configuration trusting the webpki roots and every certificate of
/// `ca_file` (PEM), with no ALPN set (the caller's protocol adds its own).
pub fn client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, CaError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let ca = |detail: String| CaError {
            path: path.display().to_string(),
            detail,
        };
        let pem = cadence_base::input::read_bytes(path, cadence_base::input::CA_FILE)
            .map_err(|e| ca(e.reason()))?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ca(e.to_string()))?;
        if certs.is_empty() {
            return Err(ca("no PEM certificate in it".into()));
        }
        for c in certs {
            roots.add(c).map_err(|e| ca(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_roots_are_trusted_and_a_bad_ca_file_is_named() {
        let c = client_config(None).unwrap();
        assert!(c.alpn_protocols.is_empty());
        let dir = std::env::temp_dir().join(format!("cadence-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(Some(&empty)).unwrap_err();
        assert_eq!(e.path, empty.display().to_string());
        assert!(e.detail.contains("no PEM certificate"), "{e}");
        let missing = dir.join("missing.pem");
        let e = client_config(Some(&missing)).unwrap_err();
        assert!(e.to_string().contains("missing.pem"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
