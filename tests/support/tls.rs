//! TLS for tests: a throw-away PKI (a CA and certificates it issues, as PEM files),
//! TLS terminators that sit in front of a server, and [`uses_tls`] to ask PostgreSQL
//! whether a session is encrypted.
//!
//! * [`Terminator::postgres_interceptor`]: a PostgreSQL-aware TLS interceptor — it
//!   answers the client's SSLRequest, presents its own certificate (one the client
//!   trusts), opens its own TLS session to the server and relays the bytes. This is
//!   the attack SCRAM channel binding exists to detect.
//!
//! Each terminator runs its own tokio runtime on a background thread, so it works from
//! sync and async tests alike, and lives until the test process exits.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pgoutbox::pg::source::replication::ReplicationClient;

use super::ClusterOptions;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SignatureAlgorithm};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::on_exit;

/// Whether the server sees `client`'s session as TLS (`pg_stat_ssl`).
pub async fn uses_tls(client: &mut ReplicationClient) -> bool {
    let rows = client
        .simple_query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .await
        .unwrap();
    rows[0].values[0].as_deref() == Some("t")
}

/// A certificate authority whose files live in a private temporary directory.
pub struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// A certificate issued by a [`Pki`], with its key, in memory and as PEM files.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    der: Vec<u8>,
    key_der: Vec<u8>,
}

impl Pki {
    /// A new CA named `name` (ECDSA P-256, so it signs with SHA-256); its files go to
    /// a directory removed at exit.
    pub fn new(name: &str) -> Pki {
        Self::with_algorithm(name, &rcgen::PKCS_ECDSA_P256_SHA256)
    }

    /// A CA whose key (and so the signature of every certificate it issues) uses `alg`.
    pub fn with_algorithm(name: &str, alg: &'static SignatureAlgorithm) -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "pgoutbox-pki-{}-{}",
            std::process::id(),
            name.replace(' ', "-")
        ));
        std::fs::create_dir_all(&dir).unwrap();
        on_exit(&format!("rm -rf {}", dir.display()));
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let ca_key = KeyPair::generate_for(alg).unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
        Pki { dir, ca, ca_key }
    }

    /// The CA certificate (PEM), for sslrootcert / ssl.ca.location / ssl_ca_file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The CA certificate as PEM text.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// Issue an ECDSA P-256 certificate (signed by the CA's algorithm) with common name `cn` and these subject
    /// alternative names (DNS names or IP addresses); files are named after `file`.
    pub fn issue(&self, file: &str, cn: &str, sans: &[&str]) -> Issued {
        self.issue_with(file, cn, sans, &rcgen::PKCS_ECDSA_P256_SHA256)
    }

    /// [`Pki::issue`] with a chosen key/signature algorithm.
    pub fn issue_with(
        &self,
        file: &str,
        cn: &str,
        sans: &[&str],
        alg: &'static SignatureAlgorithm,
    ) -> Issued {
        let key = KeyPair::generate_for(alg).unwrap();
        let names: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let cert_file = self.dir.join(format!("{file}.crt"));
        let key_file = self.dir.join(format!("{file}.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_file,
            key_file,
            der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }
}

/// Options for a cluster with TLS on (`ssl = on`) presenting the certificate
/// `cert_pem` with its key `key_pem` (as `server.crt`, `server.key`); a test adds a
/// CA file, its pg_hba.conf, other binaries.
pub fn server_options(cert_pem: &str, key_pem: &str) -> ClusterOptions {
    ClusterOptions {
        conf: vec![
            "ssl = on".into(),
            "ssl_cert_file = 'server.crt'".into(),
            "ssl_key_file = 'server.key'".into(),
        ],
        files: vec![
            ("server.crt".into(), cert_pem.as_bytes().to_vec()),
            ("server.key".into(), key_pem.as_bytes().to_vec()),
        ],
        ..ClusterOptions::default()
    }
}

impl Issued {
    /// [`server_options`] presenting this certificate.
    pub fn server_options(&self) -> ClusterOptions {
        server_options(&self.cert_pem, &self.key_pem)
    }

    /// The certificate in DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// A rustls server configuration presenting this certificate.
    pub(super) fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(self.der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone())),
            )
            .unwrap();
        Arc::new(config)
    }
}

/// A running TLS terminator.
pub struct Terminator {
    /// The port clients connect to (TLS).
    pub port: u16,
}

impl Terminator {
    /// A PostgreSQL TLS interceptor on a fresh port: it presents `cert` to the client,
    /// and reaches the server at `127.0.0.1:backend` over its own TLS session (trusting
    /// `server_ca`, server name `localhost`).
    pub fn postgres_interceptor(cert: &Issued, backend: u16, server_ca: &Path) -> Terminator {
        let acceptor = tokio_rustls::TlsAcceptor::from(cert.server_config());
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(server_ca).unwrap();
        for ca in CertificateDer::pem_slice_iter(&pem) {
            roots.add(ca.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        Self::serve(
            TcpListener::bind("127.0.0.1:0").unwrap(),
            move |mut client| {
                let (acceptor, connector) = (acceptor.clone(), connector.clone());
                async move {
                    // Client side: SSLRequest (length 8, code 80877103) → 'S' → TLS.
                    let mut request = [0u8; 8];
                    client.read_exact(&mut request).await?;
                    client.write_all(b"S").await?;
                    let tls_in = acceptor.accept(client).await?;
                    // Server side: the same request, then our own TLS session.
                    let mut server = tokio::net::TcpStream::connect(("127.0.0.1", backend)).await?;
                    server.write_all(&request).await?;
                    if server.read_u8().await? != b'S' {
                        return Err(std::io::Error::other("server refused SSL"));
                    }
                    let name = ServerName::try_from("localhost").unwrap();
                    let tls_out = connector.connect(name, server).await?;
                    relay(tls_in, tls_out).await
                }
            },
        )
    }

    /// Accept on `listener` forever, handling each connection with `handle` on this
    /// terminator's own runtime.
    pub(super) fn serve<F, Fut>(listener: TcpListener, handle: F) -> Terminator
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    tokio::spawn(handle(client));
                }
            });
        });
        Terminator { port }
    }
}

async fn relay<A, B>(mut a: A, mut b: B) -> std::io::Result<()>
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::io::copy_bidirectional(&mut a, &mut b)
        .await
        .map(|_| ())
}
