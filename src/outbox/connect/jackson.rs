//! JSON text exactly as Kafka Connect's `JsonConverter` (Jackson) writes it.
//!
//! Owns the byte-level rules the golden records show: strings escape `"` `\` and
//! the control characters below U+0020 (`\b \t \n \f \r` short, the rest as
//! `\u00XX` with upper-case hex); a character above U+FFFF is written as its UTF-16
//! surrogate pair `\uD83D\uDE00` (Jackson's default, `COMBINE_UNICODE_SURROGATES_IN_UTF8`
//! off); everything else — `/`, DEL, U+2028, non-ASCII — is copied as UTF-8.
//! Doubles are written like Java's `Double.toString` (`12.5`, `1.0E-6`,
//! `1.234567895E8`).
//!
//! Invariant: never panics; invalid UTF-8 in a string is written with U+FFFD for each
//! bad sequence, as Java's decoder does before Jackson sees the text.

use std::fmt::Write as _;

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Append `text` as a JSON string (with quotes).
pub fn push_string(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'"');
    for chunk in text.utf8_chunks() {
        push_valid(out, chunk.valid());
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{FFFD}".as_bytes());
        }
    }
    out.push(b'"');
}

fn push_valid(out: &mut Vec<u8>, text: &str) {
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let short = match c {
            '"' => Some(b'"'),
            '\\' => Some(b'\\'),
            '\u{8}' => Some(b'b'),
            '\t' => Some(b't'),
            '\n' => Some(b'n'),
            '\u{c}' => Some(b'f'),
            '\r' => Some(b'r'),
            _ => None,
        };
        let escape = short.is_some() || (c as u32) < 0x20 || (c as u32) > 0xFFFF;
        if !escape {
            continue;
        }
        out.extend_from_slice(&text.as_bytes()[start..i]);
        start = i + c.len_utf8();
        match short {
            Some(s) => out.extend_from_slice(&[b'\\', s]),
            None => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_unicode_escape(out, *unit);
                }
            }
        }
    }
    out.extend_from_slice(&text.as_bytes()[start..]);
}

fn push_unicode_escape(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(b"\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX[usize::from((unit >> shift) & 0xF)]);
    }
}

/// Append `value` as Java's `Double.toString` writes it (Jackson's default for a
/// `double`). Non-finite values cannot come from JSON and are written as Java
/// spells them.
pub fn push_double(out: &mut Vec<u8>, value: f64) {
    let mut text = String::new();
    write_double(&mut text, value);
    out.extend_from_slice(text.as_bytes());
}

fn write_double(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if value == 0.0 {
        out.push_str(if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        });
        return;
    }
    // Shortest round-trip digits and exponent, from Rust's `{:e}` ("1.2345e-7").
    let sci = format!("{:e}", value.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if value < 0.0 {
        out.push('-');
    }
    let abs = value.abs();
    if (1e-3..1e7).contains(&abs) {
        // Plain notation, at least one digit after the point.
        let point = exp + 1;
        if point <= 0 {
            out.push_str("0.");
            for _ in 0..-point {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let point = point as usize;
            let (int, frac) = if digits.len() > point {
                digits.split_at(point)
            } else {
                (digits.as_str(), "")
            };
            out.push_str(int);
            for _ in digits.len()..point {
                out.push('0');
            }
            out.push('.');
            out.push_str(if frac.is_empty() { "0" } else { frac });
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let _ = write!(
            out,
            "{first}.{}E{exp}",
            if rest.is_empty() { "0" } else { rest }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &[u8]) -> String {
        let mut out = Vec::new();
        push_string(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    fn double(v: f64) -> String {
        let mut out = String::new();
        write_double(&mut out, v);
        out
    }

    #[test]
    fn strings_escape_like_jackson() {
        // Bytes of the golden key of row text-controls (JsonConverter).
        assert_eq!(
            string("k\t\"\\é😀\u{1}\u{7f}\u{2028}".as_bytes()),
            "\"k\\t\\\"\\\\é\\uD83D\\uDE00\\u0001\u{7f}\u{2028}\""
        );
        assert_eq!(string(b"a/b\x1f\x08\x0c\r\n"), "\"a/b\\u001F\\b\\f\\r\\n\"");
        assert_eq!(string(b"bad \xff!"), "\"bad \u{FFFD}!\"");
    }

    #[test]
    fn doubles_print_like_java() {
        for (v, java) in [
            (12.5, "12.5"),
            (0.1, "0.1"),
            (1.0, "1.0"),
            (0.001, "0.001"),
            (0.000001, "1.0E-6"),
            (1e-7, "1.0E-7"),
            (123456789.5, "1.234567895E8"),
            (10000000.0, "1.0E7"),
            (9999999.0, "9999999.0"),
            (std::f64::consts::PI, "3.141592653589793"),
            (-2.5, "-2.5"),
            (-0.0, "-0.0"),
            (1.2345e300, "1.2345E300"),
        ] {
            assert_eq!(double(v), java, "{v}");
        }
    }
}
