//! SCRAM channel binding (`SCRAM-SHA-256-PLUS`, `tls-server-end-point`).
//!
//! Owns two things:
//!
//! * the binding data: RFC 5929 §4.1 `tls-server-end-point` is a hash of the server's
//!   leaf certificate (DER). The hash is the one the certificate's own signature uses,
//!   except that MD5 and SHA-1 are replaced by SHA-256. PostgreSQL computes the same
//!   value on its side (`be_tls_get_certificate_hash`), so a TLS-terminating middlebox
//!   presenting another certificate makes the two disagree and the server refuses the
//!   login, even when the password is right;
//! * the choice of SASL mechanism and GS2 flag for a `channel_binding` setting, with
//!   libpq's semantics (RFC 5802 §6 and
//!   <https://www.postgresql.org/docs/current/sasl-authentication.html>):
//!
//! | channel_binding | TLS + server offers -PLUS | TLS, no -PLUS offered | no TLS           |
//! |-----------------|---------------------------|-----------------------|------------------|
//! | disable         | SCRAM-SHA-256, `n,,`      | SCRAM-SHA-256, `n,,`  | SCRAM, `n,,`     |
//! | prefer          | -PLUS, `p=tls-server-end-point,,` | SCRAM, `y,,`  | SCRAM, `n,,`     |
//! | require         | -PLUS, `p=tls-server-end-point,,` | refused       | refused          |
//!
//! `y,,` tells the server "I could bind but you did not offer it": a server that did
//! offer -PLUS rejects it as a downgrade. So `y` is only sent when the client really
//! holds binding data, and `n` otherwise.
//!
//! Invariant: with `require`, no password-based step that cannot bind (cleartext,
//! md5, SCRAM without -PLUS) is ever started, so the password never leaves the client
//! on an unbound exchange; and a login the server accepts without any SCRAM-PLUS
//! exchange (trust, cert) is refused too, as libpq does.
//! The GS2 header and `c=` encoding are done by `postgres_protocol`'s `ScramSha256`;
//! the unit tests below check its bytes against RFC 5802.

use postgres_protocol::authentication::sasl::{self, ChannelBinding as Gs2};

use crate::pg::client::conninfo::ChannelBinding;

/// Why no `tls-server-end-point` value can be derived from a certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndPointError {
    /// The certificate is not DER that this parser understands.
    #[error("the server certificate is not a well-formed X.509 DER certificate")]
    Malformed,
    /// RFC 5929 leaves the value undefined for signatures without a single hash
    /// (Ed25519, Ed448), and SHA-224 is not implemented here.
    #[error("the server certificate's signature algorithm (OID {oid}) has no hash usable for tls-server-end-point")]
    NoHash {
        /// Dotted OID of the signature algorithm.
        oid: String,
    },
}

/// What the transport can offer for channel binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsBinding {
    /// The connection is not encrypted (plain TCP or a Unix socket).
    NotTls,
    /// TLS, but the certificate gives no binding value.
    Unavailable(EndPointError),
    /// TLS, with the `tls-server-end-point` value.
    EndPoint(Vec<u8>),
}

impl TlsBinding {
    /// The binding state of a TLS session whose server presented `leaf` (DER), or
    /// `None` when it presented no certificate.
    pub fn from_leaf(leaf: Option<&[u8]>) -> Self {
        match leaf.map(tls_server_end_point) {
            Some(Ok(hash)) => TlsBinding::EndPoint(hash),
            Some(Err(err)) => TlsBinding::Unavailable(err),
            None => TlsBinding::Unavailable(EndPointError::Malformed),
        }
    }
}

/// The SASL mechanism and GS2 setting to authenticate with.
pub struct Plan {
    /// `SCRAM-SHA-256` or `SCRAM-SHA-256-PLUS`.
    pub mechanism: &'static str,
    /// The GS2 flag and binding data for `ScramSha256::new`.
    pub binding: Gs2,
}

impl Plan {
    /// Whether this exchange binds to the channel.
    pub fn is_bound(&self) -> bool {
        self.mechanism == sasl::SCRAM_SHA_256_PLUS
    }
}

/// Why `channel_binding=require` (or the server's offer) rules out every mechanism.
/// The text completes "authentication of user … failed: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// require, but the connection has no TLS.
    #[error("channel_binding=require needs an encrypted connection, but the connection to {target} does not use TLS; fix: use sslmode=require, verify-ca or verify-full (with ssl = on in the server), or set channel_binding=prefer")]
    NotTls {
        /// `host:port`.
        target: String,
    },
    /// require, TLS, but the server did not offer SCRAM-SHA-256-PLUS.
    #[error("channel_binding=require, but the server at {target} does not offer SCRAM-SHA-256-PLUS (offered: {offered}); fix: connect to PostgreSQL 11 or later directly over TLS (connection poolers usually cannot bind), or set channel_binding=prefer")]
    NotOffered {
        /// `host:port`.
        target: String,
        /// The mechanisms the server listed.
        offered: String,
    },
    /// require, but the certificate gives no binding value.
    #[error("channel_binding=require, but {error}; fix: give the server a certificate signed with RSA or ECDSA and SHA-256/384/512, or set channel_binding=prefer")]
    Unavailable {
        /// Why (shown in the message, before the fix).
        error: EndPointError,
    },
    /// require, and the server asked for a method that cannot bind.
    #[error("channel_binding=require, but the server at {target} asks for {method} authentication, which cannot be bound to the TLS channel (no password was sent); fix: make this user's pg_hba.conf method scram-sha-256 with a SCRAM password, or set channel_binding=prefer")]
    Method {
        /// `host:port`.
        target: String,
        /// e.g. `md5`, `cleartext password`, `no password (trust or cert)`.
        method: &'static str,
    },
    /// The server offers no SCRAM mechanism at all.
    #[error("the server at {target} offers no SASL mechanism pgoutbox supports (offered: {offered}; supported: SCRAM-SHA-256, SCRAM-SHA-256-PLUS)")]
    NoScram {
        /// `host:port`.
        target: String,
        /// The mechanisms the server listed.
        offered: String,
    },
}

/// Choose mechanism and GS2 flag for `policy`, given what the transport can bind to
/// and the mechanisms the server offered (see the table in the module docs).
pub fn plan(
    policy: ChannelBinding,
    tls: &TlsBinding,
    offered: &[String],
    target: &str,
) -> Result<Plan, Refusal> {
    let plus = offered.iter().any(|m| m == sasl::SCRAM_SHA_256_PLUS);
    let scram = offered.iter().any(|m| m == sasl::SCRAM_SHA_256);
    let list = || offered.join(", ");
    let plain = |binding| Plan {
        mechanism: sasl::SCRAM_SHA_256,
        binding,
    };
    if policy == ChannelBinding::Disable {
        return if scram {
            Ok(plain(Gs2::unsupported()))
        } else {
            Err(Refusal::NoScram {
                target: target.to_owned(),
                offered: list(),
            })
        };
    }
    let require = policy == ChannelBinding::Require;
    match tls {
        TlsBinding::EndPoint(hash) if plus => Ok(Plan {
            mechanism: sasl::SCRAM_SHA_256_PLUS,
            binding: Gs2::tls_server_end_point(hash.clone()),
        }),
        _ if require => Err(match tls {
            TlsBinding::NotTls => Refusal::NotTls {
                target: target.to_owned(),
            },
            TlsBinding::Unavailable(error) => Refusal::Unavailable {
                error: error.clone(),
            },
            TlsBinding::EndPoint(_) => Refusal::NotOffered {
                target: target.to_owned(),
                offered: list(),
            },
        }),
        _ if !scram => Err(Refusal::NoScram {
            target: target.to_owned(),
            offered: list(),
        }),
        // We hold binding data but the server did not offer -PLUS: say so (`y`), so
        // a server that did offer it (and had the offer stripped) can object.
        TlsBinding::EndPoint(_) => Ok(plain(Gs2::unrequested())),
        TlsBinding::NotTls | TlsBinding::Unavailable(_) => Ok(plain(Gs2::unsupported())),
    }
}

/// The RFC 5929 `tls-server-end-point` value for a server certificate (DER).
pub fn tls_server_end_point(cert_der: &[u8]) -> Result<Vec<u8>, EndPointError> {
    let algorithm = signature_hash(cert_der)?;
    Ok(ring::digest::digest(algorithm, cert_der).as_ref().to_vec())
}

// ---------------------------------------------------------------------------------
// Just enough DER to read `Certificate.signatureAlgorithm` (RFC 5280 §4.1):
//   Certificate ::= SEQUENCE { tbsCertificate SEQUENCE, signatureAlgorithm
//                              AlgorithmIdentifier, signatureValue BIT STRING }
//   AlgorithmIdentifier ::= SEQUENCE { algorithm OID, parameters ANY OPTIONAL }

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
/// `[0]` constructed, context-specific (RSASSA-PSS-params.hashAlgorithm).
const CONTEXT_0: u8 = 0xa0;

/// One DER element: (tag, contents, bytes after it).
fn element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), EndPointError> {
    let (&tag, rest) = input.split_first().ok_or(EndPointError::Malformed)?;
    let (&first, rest) = rest.split_first().ok_or(EndPointError::Malformed)?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return Err(EndPointError::Malformed);
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[count..])
    };
    if rest.len() < len {
        return Err(EndPointError::Malformed);
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn expect(tag: u8, input: &[u8]) -> Result<(&[u8], &[u8]), EndPointError> {
    match element(input)? {
        (t, contents, rest) if t == tag => Ok((contents, rest)),
        _ => Err(EndPointError::Malformed),
    }
}

/// The digest for the certificate's signature algorithm, per RFC 5929 §4.1.
fn signature_hash(cert_der: &[u8]) -> Result<&'static ring::digest::Algorithm, EndPointError> {
    let (certificate, _) = expect(SEQUENCE, cert_der)?;
    let (_tbs, rest) = expect(SEQUENCE, certificate)?;
    let (algorithm_identifier, _) = expect(SEQUENCE, rest)?;
    let (oid, params) = expect(OID, algorithm_identifier)?;
    let named = |oid: &[u8]| EndPointError::NoHash {
        oid: dotted(oid).unwrap_or_else(|| "?".into()),
    };
    let hash = match oid {
        RSASSA_PSS => pss_hash(params)?,
        _ => SIGNATURES
            .iter()
            .find(|(known, _)| *known == oid)
            .map(|(_, hash)| *hash)
            .ok_or_else(|| named(oid))?,
    };
    match hash {
        Hash::Md5 | Hash::Sha1 | Hash::Sha256 => Ok(&ring::digest::SHA256),
        Hash::Sha384 => Ok(&ring::digest::SHA384),
        Hash::Sha512 => Ok(&ring::digest::SHA512),
        Hash::Sha224 => Err(named(oid)),
    }
}

/// RSASSA-PSS-params ::= SEQUENCE { hashAlgorithm [0] AlgorithmIdentifier DEFAULT
/// sha1, … } (RFC 4055 §3.1).
fn pss_hash(params: &[u8]) -> Result<Hash, EndPointError> {
    let (params, _) = expect(SEQUENCE, params)?;
    let Ok((CONTEXT_0, explicit, _)) = element(params) else {
        return Ok(Hash::Sha1);
    };
    let (algorithm_identifier, _) = expect(SEQUENCE, explicit)?;
    let (oid, _) = expect(OID, algorithm_identifier)?;
    DIGESTS
        .iter()
        .find(|(known, _)| *known == oid)
        .map(|(_, hash)| *hash)
        .ok_or_else(|| EndPointError::NoHash {
            oid: dotted(oid).unwrap_or_else(|| "?".into()),
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hash {
    Md5,
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// 1.2.840.113549.1.1.10 (RSASSA-PSS): the hash is in the parameters.
const RSASSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];

/// Signature algorithm OIDs (DER contents) and their hash.
const SIGNATURES: &[(&[u8], Hash)] = &[
    // 1.2.840.113549.1.1.{4,5,11,12,13,14}: {md5,sha1,sha256,sha384,sha512,sha224}WithRSAEncryption
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04],
        Hash::Md5,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05],
        Hash::Sha1,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b],
        Hash::Sha256,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c],
        Hash::Sha384,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d],
        Hash::Sha512,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0e],
        Hash::Sha224,
    ),
    // 1.2.840.10045.4.1 ecdsa-with-SHA1; 1.2.840.10045.4.3.{1,2,3,4} ecdsa-with-SHA{224,256,384,512}
    (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01], Hash::Sha1),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x01],
        Hash::Sha224,
    ),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02],
        Hash::Sha256,
    ),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03],
        Hash::Sha384,
    ),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04],
        Hash::Sha512,
    ),
    // 1.2.840.10040.4.3 dsa-with-sha1; 2.16.840.1.101.3.4.3.2 dsa-with-sha256
    (&[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03], Hash::Sha1),
    (
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x02],
        Hash::Sha256,
    ),
];

/// Digest OIDs (for RSASSA-PSS parameters).
const DIGESTS: &[(&[u8], Hash)] = &[
    // 1.3.14.3.2.26 sha1; 2.16.840.1.101.3.4.2.{1,2,3,4} sha{256,384,512,224}
    (&[0x2b, 0x0e, 0x03, 0x02, 0x1a], Hash::Sha1),
    (
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01],
        Hash::Sha256,
    ),
    (
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02],
        Hash::Sha384,
    ),
    (
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03],
        Hash::Sha512,
    ),
    (
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x04],
        Hash::Sha224,
    ),
];

/// An OID's DER contents in dotted form, for error messages.
fn dotted(oid: &[u8]) -> Option<String> {
    let (&first, rest) = oid.split_first()?;
    let mut parts = vec![u64::from(first / 40).min(2), 0];
    parts[1] = u64::from(first) - parts[0] * 40;
    let mut value: u64 = 0;
    for &b in rest {
        value = value.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            parts.push(value);
            value = 0;
        }
    }
    Some(
        parts
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use postgres_protocol::authentication::sasl::ScramSha256;

    fn cert(alg: &'static rcgen::SignatureAlgorithm) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn end_point_hash_follows_the_signature_hash() {
        let p256 = cert(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert_eq!(
            tls_server_end_point(&p256).unwrap(),
            ring::digest::digest(&ring::digest::SHA256, &p256).as_ref()
        );
        // Stronger than SHA-256: the certificate's own hash is used.
        let p384 = cert(&rcgen::PKCS_ECDSA_P384_SHA384);
        let hash = tls_server_end_point(&p384).unwrap();
        assert_eq!(hash.len(), 48);
        assert_eq!(
            hash,
            ring::digest::digest(&ring::digest::SHA384, &p384).as_ref()
        );
        // No hash in the signature: undefined by RFC 5929.
        let ed = cert(&rcgen::PKCS_ED25519);
        assert_eq!(
            tls_server_end_point(&ed),
            Err(EndPointError::NoHash {
                oid: "1.3.101.112".into()
            })
        );
    }

    #[test]
    fn md5_and_sha1_are_upgraded_and_pss_reads_its_parameters() {
        // A certificate is only read up to signatureAlgorithm: build the outer shell.
        let shell = |algorithm: &[u8]| {
            let mut alg = vec![SEQUENCE, algorithm.len() as u8];
            alg.extend_from_slice(algorithm);
            let mut body = vec![SEQUENCE, 0];
            body.extend(alg);
            let mut der = vec![SEQUENCE, body.len() as u8];
            der.extend(body);
            der
        };
        let oid = |bytes: &[u8]| [&[OID, bytes.len() as u8][..], bytes].concat();
        let sha1_rsa = shell(&oid(SIGNATURES[1].0));
        assert_eq!(tls_server_end_point(&sha1_rsa).unwrap().len(), 32);
        let md5_rsa = shell(&oid(SIGNATURES[0].0));
        assert_eq!(tls_server_end_point(&md5_rsa).unwrap().len(), 32);
        // RSASSA-PSS with hashAlgorithm sha512.
        let sha512 = [&[SEQUENCE, 11][..], &oid(DIGESTS[3].0)].concat();
        let explicit = [&[CONTEXT_0, sha512.len() as u8][..], &sha512].concat();
        let params = [&[SEQUENCE, explicit.len() as u8][..], &explicit].concat();
        let pss = shell(&[oid(RSASSA_PSS), params].concat());
        assert_eq!(tls_server_end_point(&pss).unwrap().len(), 64);
        // RSASSA-PSS with default parameters: SHA-1, so SHA-256.
        let pss_default = shell(&[oid(RSASSA_PSS), vec![SEQUENCE, 0]].concat());
        assert_eq!(tls_server_end_point(&pss_default).unwrap().len(), 32);
        assert_eq!(
            tls_server_end_point(b"\x30\x05garbage"),
            Err(EndPointError::Malformed)
        );
        assert_eq!(tls_server_end_point(b""), Err(EndPointError::Malformed));
    }

    fn offered(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn plans_follow_libpq() {
        use ChannelBinding::{Disable, Prefer, Require};
        let both = offered(&["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]);
        let scram = offered(&["SCRAM-SHA-256"]);
        let hash = TlsBinding::EndPoint(vec![7; 32]);
        let t = "db:5432";
        let gs2 = |p: Plan| {
            String::from_utf8(ScramSha256::new(b"pw", p.binding).message().to_vec()).unwrap()[..3]
                .to_owned()
        };
        assert!(plan(Prefer, &hash, &both, t).unwrap().is_bound());
        assert!(plan(Require, &hash, &both, t).unwrap().is_bound());
        assert_eq!(gs2(plan(Prefer, &hash, &both, t).unwrap()), "p=t");
        assert_eq!(gs2(plan(Disable, &hash, &both, t).unwrap()), "n,,");
        assert_eq!(gs2(plan(Prefer, &hash, &scram, t).unwrap()), "y,,");
        assert_eq!(
            gs2(plan(Prefer, &TlsBinding::NotTls, &scram, t).unwrap()),
            "n,,"
        );
        let no_hash = TlsBinding::Unavailable(EndPointError::Malformed);
        assert_eq!(gs2(plan(Prefer, &no_hash, &both, t).unwrap()), "n,,");
        assert!(matches!(
            plan(Require, &TlsBinding::NotTls, &scram, t),
            Err(Refusal::NotTls { .. })
        ));
        assert!(matches!(
            plan(Require, &hash, &scram, t),
            Err(Refusal::NotOffered { .. })
        ));
        assert!(matches!(
            plan(Require, &no_hash, &both, t),
            Err(Refusal::Unavailable { .. })
        ));
        assert!(matches!(
            plan(Prefer, &hash, &offered(&["OAUTHBEARER"]), t),
            Err(Refusal::NoScram { .. })
        ));
    }

    /// RFC 5802 §7: client-first = gs2-header client-first-bare, gs2-header =
    /// "p=" cb-name "," [authzid] ","; client-final starts with "c=" base64(gs2-header
    /// || cbind-data). PostgreSQL ignores the SCRAM user name, so `n=` is empty.
    #[test]
    fn gs2_header_and_cbind_input_match_rfc_5802() {
        let hash: Vec<u8> = (0u8..32).collect();
        let mut scram = ScramSha256::new(b"pencil", Gs2::tls_server_end_point(hash.clone()));
        let first = String::from_utf8(scram.message().to_vec()).unwrap();
        let bare = first
            .strip_prefix("p=tls-server-end-point,,")
            .unwrap_or_else(|| panic!("GS2 header: {first}"));
        let nonce = bare.strip_prefix("n=,r=").expect("client-first-bare");
        let server_first = format!("r={nonce}3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096");
        scram.update(server_first.as_bytes()).unwrap();
        let final_message = String::from_utf8(scram.message().to_vec()).unwrap();
        let c = final_message
            .strip_prefix("c=")
            .and_then(|m| m.split(',').next())
            .expect("c= attribute first");
        let cbind_input = STANDARD.decode(c).unwrap();
        let mut expected = b"p=tls-server-end-point,,".to_vec();
        expected.extend_from_slice(&hash);
        assert_eq!(cbind_input, expected);
        assert!(final_message.contains(&format!(",r={nonce}3rfcNHYJY1ZVvWVs7j,p=")));

        // Without binding the header is "n,," / "y,," and c= carries only it.
        for (binding, header) in [(Gs2::unsupported(), "n,,"), (Gs2::unrequested(), "y,,")] {
            let mut scram = ScramSha256::new(b"pencil", binding);
            let first = String::from_utf8(scram.message().to_vec()).unwrap();
            let nonce = first
                .strip_prefix(&format!("{header}n=,r="))
                .unwrap()
                .to_owned();
            scram
                .update(format!("r={nonce}x,s=QSXCR+Q6sek8bf92,i=4096").as_bytes())
                .unwrap();
            let final_message = String::from_utf8(scram.message().to_vec()).unwrap();
            let c = &final_message[2..final_message.find(',').unwrap()];
            assert_eq!(STANDARD.decode(c).unwrap(), header.as_bytes());
        }
    }
}
