//! TLS for both PostgreSQL connections (replication and catalog), via rustls.
//!
//! Owns the mapping from libpq's `sslmode` to a rustls client configuration, and the
//! small bridge that lets tokio-postgres use the same configuration:
//!
//! | sslmode      | encrypted | chain checked against CA | host name checked |
//! |--------------|-----------|--------------------------|-------------------|
//! | disable      | no        | –                        | –                 |
//! | allow/prefer | if server offers it | no             | no                |
//! | require      | yes       | only if `sslrootcert` given (as libpq does) | no |
//! | verify-ca    | yes       | yes                      | no                |
//! | verify-full  | yes       | yes                      | yes               |
//!
//! `sslrootcert=system` uses the operating system's trust store, as libpq does through
//! OpenSSL: `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, else the distribution's bundle
//! (e.g. `/etc/ssl/certs` on Debian); it implies `sslmode=verify-full`
//! ([`conninfo`](crate::pg::client::conninfo) refuses a weaker mode). `sslcert` + `sslkey` present a
//! client certificate (for `cert` authentication or `clientcert=verify-full` in
//! pg_hba.conf); one without the other is an error, not a silent "no client cert".
//! After the handshake, the server's leaf certificate gives the SCRAM channel-binding
//! value ([`channel_binding`]) for both connections. Invariant: when no verification
//! is asked for, the handshake signatures are still checked (only the trust decision is
//! skipped), so the session keys are never negotiated with a party that cannot prove
//! it holds the presented key.
//! See <https://www.postgresql.org/docs/current/libpq-ssl.html>.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::Socket;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::pg::client::channel_binding::TlsBinding;
use crate::pg::client::conninfo::{ConnInfo, SslMode, SslNegotiation, SYSTEM_ROOTS};

/// Why a TLS configuration or handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {what} file {path}")]
    ReadFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file held no usable PEM item.
    #[error(
        "{what} file {path} contains no PEM {expected}; fix: point {what} at a PEM-encoded file"
    )]
    NoPem {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    /// `sslrootcert=system` and the operating system's trust store had no usable root.
    #[error("sslrootcert=system found no CA certificate in the system trust store{}; fix: install the CA bundle (Debian: apt-get install ca-certificates), set SSL_CERT_FILE or SSL_CERT_DIR, or point sslrootcert at a CA file", system_store_errors(.errors))]
    NoSystemRoots { errors: Vec<String> },
    /// verify-ca / verify-full without a root certificate.
    #[error("sslmode={mode} needs a root certificate; fix: set sslrootcert=/path/to/ca.crt (or sslrootcert=system) in the connection string or PGSSLROOTCERT")]
    NoRootCert { mode: &'static str },
    /// Only one of sslcert / sslkey is set.
    #[error("{given} is set but {missing} is not; fix: give both sslcert (client certificate) and sslkey (its private key), or neither")]
    ClientCertHalf {
        given: &'static str,
        missing: &'static str,
    },
    /// The host name cannot be used as a TLS server name.
    #[error("host {host:?} is not a valid TLS server name")]
    ServerName { host: String },
    /// rustls rejected the configuration.
    #[error("invalid TLS configuration")]
    Config(#[source] rustls::Error),
    /// The handshake failed (certificate not trusted, wrong host name, …).
    #[error("TLS handshake with {host} failed: {error}{}", rustls_error(error).map_or("", alert_fix))]
    Handshake {
        host: String,
        /// Shown in the message, before the fix (so not a `source`).
        error: std::io::Error,
    },
    /// TLS failed after the handshake; with TLS 1.3 this is how a server rejecting
    /// the client certificate shows up (an alert on the first read).
    #[error("TLS session failed while {context}: {error}{}", alert_fix(error))]
    Session {
        context: String,
        /// Shown in the message, before the fix (so not a `source`).
        error: rustls::Error,
    },
}

impl TlsError {
    /// The rustls error of a failed handshake or session (kept in the message
    /// rather than as a `source`, so [`rustls_in_chain`] asks here).
    fn rustls(&self) -> Option<&rustls::Error> {
        match self {
            TlsError::Handshake { error, .. } => rustls_error(error),
            TlsError::Session { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// What went wrong reading the system trust store, for [`TlsError::NoSystemRoots`].
fn system_store_errors(errors: &[String]) -> String {
    if errors.is_empty() {
        String::new()
    } else {
        format!(" ({})", errors.join("; "))
    }
}

/// The rustls error inside an I/O error from a TLS stream, if any.
fn rustls_error(err: &std::io::Error) -> Option<&rustls::Error> {
    err.get_ref()?.downcast_ref::<rustls::Error>()
}

/// A fix for alerts that mean "the server does not accept our client certificate".
fn alert_fix(err: &rustls::Error) -> &'static str {
    use rustls::AlertDescription as A;
    match err {
        rustls::Error::AlertReceived(
            A::UnknownCA
            | A::BadCertificate
            | A::CertificateRequired
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::AccessDenied,
        ) => "; the server rejected the client certificate: fix: set sslcert/sslkey to a certificate (and its key) issued by a CA in the server's ssl_ca_file and still valid",
        _ => "",
    }
}

/// The rustls error somewhere in `err`'s source chain (looking inside I/O errors,
/// whose `source()` skips the error they wrap).
pub fn rustls_in_chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(found) = e.downcast_ref::<std::io::Error>().and_then(rustls_error) {
            return Some(found);
        }
        if let Some(found) = e.downcast_ref::<TlsError>().and_then(TlsError::rustls) {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// The client-certificate fix for a TLS failure in `err`'s chain, or "".
pub fn chain_fix(err: &(dyn std::error::Error + 'static)) -> &'static str {
    rustls_in_chain(err).map_or("", alert_fix)
}

/// [`TlsError::Session`] when `err` (from a TLS stream, while `context`) is a TLS
/// failure rather than a plain socket error.
pub fn session_error(context: &str, err: &std::io::Error) -> Option<TlsError> {
    Some(TlsError::Session {
        context: context.to_owned(),
        error: rustls_error(err)?.clone(),
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls client configuration for `info.sslmode`, or `None` for `disable`.
pub fn client_config(info: &ConnInfo) -> Result<Option<Arc<ClientConfig>>, TlsError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let roots = match (&info.sslmode, &info.sslrootcert) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err(TlsError::NoRootCert {
                mode: info.sslmode.as_str(),
            })
        }
        (SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull, Some(path)) => {
            Some(load_roots(path)?)
        }
        _ => None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match roots {
        None => Arc::new(NoTrustCheck {
            provider: provider.clone(),
        }),
        Some(roots) => {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(rustls::Error::General(e.to_string())))?;
            Arc::new(ChainVerifier {
                inner: webpki,
                check_host: matches!(info.sslmode, SslMode::VerifyFull),
            })
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&info.sslcert, &info.sslkey) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(TlsError::Config)?,
        (Some(_), None) => {
            return Err(TlsError::ClientCertHalf {
                given: "sslcert",
                missing: "sslkey",
            })
        }
        (None, Some(_)) => {
            return Err(TlsError::ClientCertHalf {
                given: "sslkey",
                missing: "sslcert",
            })
        }
        (None, None) => builder.with_no_client_auth(),
    };
    Ok(Some(Arc::new(with_alpn(config, info.sslnegotiation))))
}

/// Direct TLS (`sslnegotiation=direct`, PostgreSQL 17+) must announce the ALPN
/// protocol `postgresql`: the server refuses a direct handshake without it. With an
/// SSLRequest first it is left out, so servers before 17 see the same handshake as
/// always. See <https://www.postgresql.org/docs/current/protocol-flow.html#PROTOCOL-FLOW-SSL>.
fn with_alpn(mut config: ClientConfig, negotiation: SslNegotiation) -> ClientConfig {
    if negotiation == SslNegotiation::Direct {
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    }
    config
}

/// The ALPN protocol name PostgreSQL registered.
const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// Run the TLS handshake on an established TCP connection.
pub async fn handshake<S>(
    config: Arc<ClientConfig>,
    host: &str,
    tcp: S,
) -> Result<TlsStream<S>, TlsError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let name = ServerName::try_from(host.to_owned()).map_err(|_| TlsError::ServerName {
        host: host.to_owned(),
    })?;
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|error| TlsError::Handshake {
            host: host.to_owned(),
            error,
        })
}

/// What an established TLS session offers for SCRAM channel binding: the
/// `tls-server-end-point` hash of the certificate the server presented.
pub fn channel_binding<S>(stream: &TlsStream<S>) -> TlsBinding {
    let leaf = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first());
    TlsBinding::from_leaf(leaf.map(|cert| cert.as_ref()))
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::ReadFile {
        what,
        path: path.to_owned(),
        source,
    })
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    if path.as_os_str() == SYSTEM_ROOTS {
        return system_roots();
    }
    let (added, _ignored) = store.add_parsable_certificates(load_certs_as("sslrootcert", path)?);
    if added == 0 {
        return Err(TlsError::NoPem {
            what: "sslrootcert",
            path: path.to_owned(),
            expected: "certificate",
        });
    }
    Ok(store)
}

/// The operating system's trust store (`SSL_CERT_FILE` / `SSL_CERT_DIR`, else the
/// platform's bundle). Unparsable entries are skipped, as OpenSSL does; an empty
/// result is an error naming what failed.
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let errors = found.errors.iter().map(ToString::to_string).collect();
        return Err(TlsError::NoSystemRoots { errors });
    }
    Ok(store)
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    load_certs_as("sslcert", path)
}

fn load_certs_as(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoPem {
            what,
            path: path.to_owned(),
            expected: "certificate",
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("sslkey", path)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .ok()
        .ok_or_else(|| TlsError::NoPem {
            what: "sslkey",
            path: path.to_owned(),
            expected: "private key",
        })
}

/// Encrypt without deciding trust (sslmode prefer/require without a root certificate),
/// but still verify that the handshake was signed with the presented certificate's key.
#[derive(Debug)]
struct NoTrustCheck {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NoTrustCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Chain verification against the configured roots; the host name check is skipped
/// for `verify-ca` (libpq semantics) and kept for `verify-full`.
#[derive(Debug)]
struct ChainVerifier {
    inner: Arc<WebPkiServerVerifier>,
    check_host: bool,
}

impl ServerCertVerifier for ChainVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_host => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// tokio-postgres connector using the same rustls configuration as the replication
/// connection, so both connections honour `sslmode` identically.
#[derive(Clone)]
pub struct MakeRustlsConnect {
    config: Arc<ClientConfig>,
}

impl MakeRustlsConnect {
    /// Wrap a configuration from [`client_config`].
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self { config }
    }
}

/// One pending tokio-postgres TLS connection.
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
    host: String,
}

/// A TLS stream handed to tokio-postgres.
pub struct RustlsStream(TlsStream<Socket>);

impl tokio_postgres::tls::MakeTlsConnect<Socket> for MakeRustlsConnect {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = TlsError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, TlsError> {
        Ok(RustlsConnect {
            config: self.config.clone(),
            host: domain.to_owned(),
        })
    }
}

impl tokio_postgres::tls::TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = TlsError;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream, TlsError>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            handshake(self.config, &self.host, stream)
                .await
                .map(RustlsStream)
        })
    }
}

impl tokio_postgres::tls::TlsStream for RustlsStream {
    fn channel_binding(&self) -> tokio_postgres::tls::ChannelBinding {
        // tokio-postgres then applies channel_binding (set by ConnInfo::to_tokio_postgres)
        // with the same rules as the replication connection.
        match channel_binding(&self.0) {
            TlsBinding::EndPoint(hash) => {
                tokio_postgres::tls::ChannelBinding::tls_server_end_point(hash)
            }
            TlsBinding::NotTls | TlsBinding::Unavailable(_) => {
                tokio_postgres::tls::ChannelBinding::none()
            }
        }
    }
}

impl tokio::io::AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
