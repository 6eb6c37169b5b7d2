//! Percent coding for the URL form: decoding what the user wrote ([`percent_decode`])
//! and encoding what [`ConnInfo::redacted`](super::ConnInfo::redacted) writes
//! ([`encode`]).
//!
//! Invariant: a decoding error names only the URL component, never its text, since the
//! component may be the password.

use super::ConnInfoError;

/// RFC 3986 percent-decoding (no `+` → space, as in libpq). `%00`, a malformed escape
/// or a result that is not UTF-8 is an error naming only the component.
pub(super) fn percent_decode(s: &str, component: &'static str) -> Result<String, ConnInfoError> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let err = || ConnInfoError::PercentEncoding { component };
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                return Err(err());
            };
            let byte = u8::try_from(hi * 16 + lo).map_err(|_| err())?;
            if byte == 0 {
                return Err(err());
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| err())
}

/// Characters left as they are in query values besides the unreserved ones.
pub(super) const QUERY_KEEP: &[u8] = b"/:,@!$'()*+;";
/// The same inside a comma-separated list, where a literal comma must be escaped.
pub(super) const QUERY_KEEP_IN_LIST: &[u8] = b"/:@!$'()*+;";

/// Percent-encode everything but RFC 3986 unreserved characters and `keep`: each
/// other byte of the UTF-8 text becomes `%XX` (also used by the Debezium importer to
/// write URLs).
pub fn encode(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_and_encode() {
        assert_eq!(percent_decode("a%2Fb%20c", "host").unwrap(), "a/b c");
        assert_eq!(percent_decode("a+b", "host").unwrap(), "a+b");
        assert_eq!(percent_decode("%C3%BC", "host").unwrap(), "ü");
        for bad in ["%", "%2", "%zz", "%00", "%FF"] {
            assert_eq!(
                percent_decode(bad, "password"),
                Err(ConnInfoError::PercentEncoding {
                    component: "password"
                }),
                "{bad}"
            );
        }
        assert_eq!(encode("a b/c,d:ü", b""), "a%20b%2Fc%2Cd%3A%C3%BC");
        assert_eq!(encode("/a,b:c", QUERY_KEEP), "/a,b:c");
        assert_eq!(encode("/a,b:c", QUERY_KEEP_IN_LIST), "/a%2Cb:c");
        let text = "p@ss/w:rd% ü";
        assert_eq!(
            percent_decode(&encode(text, b""), "password").unwrap(),
            text
        );
    }
}
