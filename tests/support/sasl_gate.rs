//! A Kafka SASL_SSL gate in front of the (plaintext, unauthenticated) tansu broker:
//! TLS with a test certificate, then SASL/SCRAM-SHA-256 checked here, then the
//! connection is relayed to tansu unchanged.
//!
//! Why: tansu 0.6.0 cannot be the SASL_SSL endpoint itself (see
//! `scripts/start-tansu.sh`). With the gate, librdkafka runs its real SASL_SSL code:
//! certificate and host-name verification, SaslHandshake (v0/v1) and
//! SaslAuthenticate (v0/v1) carrying a full RFC 5802 SCRAM exchange — the gate checks
//! the client proof against the password and sends the server signature, which
//! librdkafka verifies. A wrong password gets SASL_AUTHENTICATION_FAILED (58) and the
//! connection is closed, as a Kafka broker does.
//!
//! Before authentication only ApiVersions (forwarded to tansu, so the versions are
//! the broker's) and the two SASL requests are served; anything else closes the
//! connection.

use std::net::TcpListener;
use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::tls::{Issued, Terminator};

const API_VERSIONS: i16 = 18;
const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const SASL_AUTHENTICATION_FAILED: i16 = 58;
const MECHANISM: &str = "SCRAM-SHA-256";
const ITERATIONS: u32 = 4096;

/// The one user the gate knows.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

/// Start the gate on `listener` (bound earlier, so tansu can advertise its port),
/// presenting `cert` and relaying authenticated connections to `127.0.0.1:backend`.
pub fn start(listener: TcpListener, cert: &Issued, backend: u16, creds: Credentials) -> Terminator {
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.server_config());
    Terminator::serve(listener, move |client| {
        let (acceptor, creds) = (acceptor.clone(), creds.clone());
        async move {
            let mut tls = acceptor.accept(client).await?;
            let mut broker = tokio::net::TcpStream::connect(("127.0.0.1", backend)).await?;
            if authenticate(&mut tls, &mut broker, &creds).await? {
                tokio::io::copy_bidirectional(&mut tls, &mut broker).await?;
            }
            Ok(())
        }
    })
}

/// One request: (api_key, api_version, correlation_id, body), and the raw frame.
struct Request {
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
    body: Vec<u8>,
    raw: Vec<u8>,
}

async fn read_frame<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Vec<u8>> {
    let size = stream.read_i32().await?;
    let size = usize::try_from(size).map_err(|_| std::io::Error::other("negative frame size"))?;
    if size > 1 << 20 {
        return Err(std::io::Error::other(
            "frame too large before authentication",
        ));
    }
    let mut frame = vec![0; size];
    stream.read_exact(&mut frame).await?;
    Ok(frame)
}

async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Request> {
    let frame = read_frame(stream).await?;
    let bad = || std::io::Error::other("short request header");
    let i16_at = |at: usize| -> std::io::Result<i16> {
        Ok(i16::from_be_bytes(
            frame.get(at..at + 2).ok_or_else(bad)?.try_into().unwrap(),
        ))
    };
    let api_key = i16_at(0)?;
    let api_version = i16_at(2)?;
    let correlation_id = i32::from_be_bytes(frame.get(4..8).ok_or_else(bad)?.try_into().unwrap());
    // Request header v1 (non-flexible): client_id as a nullable INT16-length string.
    let client_id_len = i16_at(8)?;
    let body_at = 10 + usize::try_from(client_id_len.max(0)).unwrap();
    let body = frame.get(body_at..).ok_or_else(bad)?.to_vec();
    let mut raw = (frame.len() as i32).to_be_bytes().to_vec();
    raw.extend_from_slice(&frame);
    Ok(Request {
        api_key,
        api_version,
        correlation_id,
        body,
        raw,
    })
}

async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    correlation_id: i32,
    body: &[u8],
) -> std::io::Result<()> {
    let mut frame = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame).await?;
    stream.flush().await
}

fn put_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.extend_from_slice(&(s.len() as i16).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

/// SaslAuthenticate v0/v1 response body.
fn authenticate_response(version: i16, error: i16, message: Option<&str>, bytes: &[u8]) -> Vec<u8> {
    let mut body = error.to_be_bytes().to_vec();
    put_string(&mut body, message);
    body.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
    body.extend_from_slice(bytes);
    if version >= 1 {
        body.extend_from_slice(&0i64.to_be_bytes()); // session_lifetime_ms
    }
    body
}

/// Serve requests until the client authenticated (`true`) or must be dropped.
async fn authenticate<C, B>(
    client: &mut C,
    broker: &mut B,
    creds: &Credentials,
) -> std::io::Result<bool>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut scram: Option<ServerFirst> = None;
    loop {
        let request = read_request(client).await?;
        match request.api_key {
            API_VERSIONS => {
                broker.write_all(&request.raw).await?;
                let response = read_frame(broker).await?;
                client
                    .write_all(&(response.len() as i32).to_be_bytes())
                    .await?;
                client.write_all(&response).await?;
            }
            SASL_HANDSHAKE => {
                let body = &request.body;
                let len = usize::try_from(i16::from_be_bytes([body[0], body[1]])).unwrap_or(0);
                let asked = String::from_utf8_lossy(&body[2..2 + len]).into_owned();
                let error = if asked == MECHANISM {
                    0
                } else {
                    UNSUPPORTED_SASL_MECHANISM
                };
                let mut out = error.to_be_bytes().to_vec();
                out.extend_from_slice(&1i32.to_be_bytes());
                put_string(&mut out, Some(MECHANISM));
                respond(client, request.correlation_id, &out).await?;
                if error != 0 {
                    return Ok(false);
                }
            }
            SASL_AUTHENTICATE if request.api_version <= 1 => {
                let body = &request.body;
                let len =
                    usize::try_from(i32::from_be_bytes(body[..4].try_into().unwrap())).unwrap_or(0);
                let message = String::from_utf8_lossy(&body[4..4 + len]).into_owned();
                let version = request.api_version;
                match scram.take() {
                    None => {
                        let first = ServerFirst::new(&message, creds);
                        let reply = first
                            .as_ref()
                            .map(|f| f.message.clone())
                            .unwrap_or_default();
                        let error = if first.is_some() {
                            0
                        } else {
                            SASL_AUTHENTICATION_FAILED
                        };
                        let text = first
                            .is_none()
                            .then_some("Authentication failed: unknown user");
                        let out = authenticate_response(version, error, text, reply.as_bytes());
                        respond(client, request.correlation_id, &out).await?;
                        match first {
                            Some(first) => scram = Some(first),
                            None => return Ok(false),
                        }
                    }
                    Some(first) => {
                        return match first.finish(&message, creds) {
                            Some(server_final) => {
                                let out = authenticate_response(
                                    version,
                                    0,
                                    None,
                                    server_final.as_bytes(),
                                );
                                respond(client, request.correlation_id, &out).await?;
                                Ok(true)
                            }
                            None => {
                                let out = authenticate_response(
                                    version,
                                    SASL_AUTHENTICATION_FAILED,
                                    Some("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"),
                                    b"",
                                );
                                respond(client, request.correlation_id, &out).await?;
                                Ok(false)
                            }
                        };
                    }
                }
            }
            _ => return Ok(false),
        }
    }
}

/// The server side of RFC 5802 after the server-first message.
struct ServerFirst {
    /// client-first-message-bare
    client_first_bare: String,
    /// server-first-message, sent to the client
    message: String,
    nonce: String,
    salt: Vec<u8>,
}

impl ServerFirst {
    /// Parse `n,,n=user,r=nonce`; `None` for a malformed message or another user.
    fn new(client_first: &str, creds: &Credentials) -> Option<Self> {
        let bare = client_first.strip_prefix("n,,")?;
        let mut user = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            match attr.split_once('=')? {
                ("n", v) => user = Some(v.replace("=2C", ",").replace("=3D", "=")),
                ("r", v) => client_nonce = Some(v.to_owned()),
                _ => {}
            }
        }
        if user? != creds.user {
            return None;
        }
        let rng = ring::rand::SystemRandom::new();
        let mut random = [0u8; 18];
        rng.fill(&mut random).ok()?;
        let nonce = format!("{}{}", client_nonce?, STANDARD.encode(random));
        let mut salt = vec![0u8; 16];
        rng.fill(&mut salt).ok()?;
        let message = format!("r={nonce},s={},i={ITERATIONS}", STANDARD.encode(&salt));
        Some(ServerFirst {
            client_first_bare: bare.to_owned(),
            message,
            nonce,
            salt,
        })
    }

    /// Check `c=biws,r=nonce,p=proof`; the server-final message when the proof is right.
    fn finish(self, client_final: &str, creds: &Credentials) -> Option<String> {
        let (without_proof, proof) = client_final.rsplit_once(",p=")?;
        let mut channel = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            match attr.split_once('=')? {
                ("c", v) => channel = Some(v),
                ("r", v) => nonce = Some(v),
                _ => {}
            }
        }
        // c = base64("n,,"): no channel binding, no authzid.
        if channel? != "biws" || nonce? != self.nonce {
            return None;
        }
        let proof = STANDARD.decode(proof).ok()?;
        let mut salted = [0u8; 32];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            NonZeroU32::new(ITERATIONS).unwrap(),
            &self.salt,
            creds.password.as_bytes(),
            &mut salted,
        );
        let key = hmac::Key::new(hmac::HMAC_SHA256, &salted);
        let client_key = hmac::sign(&key, b"Client Key");
        let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.message
        );
        let signature = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        if proof.len() != 32 {
            return None;
        }
        let recovered: Vec<u8> = proof
            .iter()
            .zip(signature.as_ref())
            .map(|(p, s)| p ^ s)
            .collect();
        if digest::digest(&digest::SHA256, &recovered).as_ref() != stored_key.as_ref() {
            return None;
        }
        let server_key = hmac::sign(&key, b"Server Key");
        let server_signature = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, server_key.as_ref()),
            auth_message.as_bytes(),
        );
        Some(format!("v={}", STANDARD.encode(server_signature.as_ref())))
    }
}
