//! The keyword/value form, `host=db port = 5433 password='it\'s'`, parsed into a
//! [`Raw`] as libpq's `conninfo_parse` does: pairs separated by whitespace, spaces
//! allowed around `=`, values optionally single-quoted with `\'` and `\\` escapes, and
//! outside quotes a backslash escapes the next character.
//!
//! Invariant: an unquoted password ends at the first space, so the word after it may
//! be the rest of the password; an error about that word never quotes it.

use std::iter::Peekable;
use std::str::Chars;

use super::error::{missing_equals, unknown_keyword, word_error};
use super::raw::Raw;
use super::ConnInfoError;

/// `key = value key2='quoted \' value'`, as libpq's `conninfo_parse`.
pub(super) fn parse_keyword_value(s: &str, raw: &mut Raw) -> Result<(), ConnInfoError> {
    let mut it = s.chars().peekable();
    // An unquoted password is cut at the first space, so the text right after it may be
    // the rest of the password: never quote that text in an error.
    let mut after_password = false;
    loop {
        skip_spaces(&mut it);
        if it.peek().is_none() {
            return Ok(());
        }
        let mut keyword = String::new();
        while let Some(c) = it.next_if(|c| !c.is_ascii_whitespace() && *c != '=') {
            keyword.push(c);
        }
        skip_spaces(&mut it);
        if it.next_if_eq(&'=').is_none() {
            return Err(word_error(keyword, after_password, missing_equals));
        }
        if keyword.is_empty() {
            return Err(ConnInfoError::Syntax("missing keyword before \"=\""));
        }
        skip_spaces(&mut it);
        let quoted = it.next_if_eq(&'\'').is_some();
        let value = if quoted {
            quoted_value(&mut it)?
        } else {
            bare_value(&mut it)
        };
        let is_password = keyword == "password";
        if !raw.set(&keyword, value) {
            return Err(word_error(keyword, after_password, unknown_keyword));
        }
        after_password = is_password && !quoted;
    }
}

fn skip_spaces(it: &mut Peekable<Chars<'_>>) {
    while it.next_if(|c| c.is_ascii_whitespace()).is_some() {}
}

/// The rest of a value after its opening `'`, up to and without the closing one.
fn quoted_value(it: &mut Peekable<Chars<'_>>) -> Result<String, ConnInfoError> {
    let mut value = String::new();
    loop {
        match it.next() {
            Some('\'') => return Ok(value),
            Some('\\') => match it.next() {
                Some(c) => value.push(c),
                None => return Err(ConnInfoError::Syntax("unterminated quoted value")),
            },
            Some(c) => value.push(c),
            None => return Err(ConnInfoError::Syntax("unterminated quoted value")),
        }
    }
}

/// An unquoted value: up to the next whitespace that is not escaped.
fn bare_value(it: &mut Peekable<Chars<'_>>) -> String {
    let mut value = String::new();
    while let Some(c) = it.next_if(|c| !c.is_ascii_whitespace()) {
        if c == '\\' {
            // libpq: a backslash escapes the next character, even a space; a
            // trailing backslash is dropped.
            if let Some(next) = it.next() {
                value.push(next);
            }
        } else {
            value.push(c);
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::super::testing::{parse, parse_err, tcp, unix};
    use super::super::ConnInfoError;

    #[test]
    fn keyword_value_with_quoting() {
        let c = parse(
            r"host=db port = 5433  user=app password='it\'s a \\secret' dbname='my db' options='-c wal_sender_timeout=2s' application_name=out\ box",
        );
        assert_eq!(c.hosts, vec![tcp("db", 5433)]);
        assert_eq!(c.user, "app");
        assert_eq!(c.password.unwrap().expose(), r"it's a \secret");
        assert_eq!(c.dbname, "my db");
        assert_eq!(c.options.as_deref(), Some("-c wal_sender_timeout=2s"));
        assert_eq!(c.application_name.as_deref(), Some("out box"));
    }

    #[test]
    fn keyword_value_details() {
        // Empty quoted value = unset; the later duplicate wins; tabs/newlines separate.
        let c = parse("dbname='' user=a\tuser=b\nhost='/var/run/postgresql'");
        assert_eq!(c.user, "b");
        assert_eq!(c.dbname, "b");
        assert_eq!(c.hosts, vec![unix("/var/run/postgresql", 5432)]);
        // The empty string is all defaults.
        assert_eq!(parse(""), parse("postgres://"));
        // Unicode in values is fine.
        assert_eq!(
            parse("application_name=bücher").application_name.as_deref(),
            Some("bücher")
        );
    }

    #[test]
    fn keyword_value_host_and_port_lists() {
        let c = parse("host=a,b,c port=1,,3");
        assert_eq!(c.hosts, vec![tcp("a", 1), tcp("b", 5432), tcp("c", 3)]);
        let c = parse("host=a,,/tmp port=7");
        assert_eq!(
            c.hosts,
            vec![tcp("a", 7), tcp("localhost", 7), unix("/tmp", 7)]
        );
        assert_eq!(
            parse_err("host=a,b,c port=1,2"),
            ConnInfoError::PortCountMismatch { ports: 2, hosts: 3 }
        );
        assert_eq!(
            parse_err("host=a,b,c port=1,2").to_string(),
            "could not match 2 port numbers to 3 hosts; fix: give one port for all hosts, or \
             one per host (an empty entry means 5432)"
        );
    }
}
