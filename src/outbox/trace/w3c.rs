//! The W3C Trace Context format rules for `traceparent` and `tracestate`
//! (<https://www.w3.org/TR/trace-context/#traceparent-header>). Pure checks over
//! bytes: no allocation, no panic on any input.

fn is_lower_hex(s: &[u8]) -> bool {
    s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The W3C `traceparent` rules: `version-traceid-parentid-flags`, lowercase hex,
/// version `ff` forbidden, all-zero ids forbidden; version 00 is exactly 55
/// characters, a later version may append `-…` fields (passed on unchanged).
pub fn check_traceparent(v: &[u8]) -> Result<(), &'static str> {
    if v.len() < 55 {
        return Err("shorter than 55 characters");
    }
    let (version, trace_id, parent_id, flags) = (&v[0..2], &v[3..35], &v[36..52], &v[53..55]);
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return Err("fields are not separated by '-' at the W3C positions");
    }
    if ![version, trace_id, parent_id, flags]
        .into_iter()
        .all(is_lower_hex)
    {
        return Err("a field is not lowercase hex");
    }
    if version == b"ff" {
        return Err("version ff is forbidden");
    }
    if version == b"00" && v.len() != 55 {
        return Err("version 00 is exactly 55 characters");
    }
    if v.len() > 55 && v[55] != b'-' {
        return Err("a later version's extra fields must follow a '-'");
    }
    if trace_id.iter().all(|b| *b == b'0') {
        return Err("the trace id is all zeros");
    }
    if parent_id.iter().all(|b| *b == b'0') {
        return Err("the parent id is all zeros");
    }
    Ok(())
}

/// The W3C `tracestate` rules: at most 32 comma-separated `key=value` members
/// (empty members allowed); keys `[a-z][a-z0-9_*/-]{0,255}` or `tenant@system`;
/// values 1-256 printable ASCII characters except `,` and `=`, not ending in a space.
pub fn check_tracestate(v: &[u8]) -> Result<(), &'static str> {
    let mut members = 0;
    for member in v.split(|b| *b == b',') {
        let member = member.trim_ascii();
        if member.is_empty() {
            continue;
        }
        members += 1;
        let Some(eq) = member.iter().position(|b| *b == b'=') else {
            return Err("a member is not key=value");
        };
        let (key, value) = (&member[..eq], &member[eq + 1..]);
        if !is_tracestate_key(key) {
            return Err("a key is not [a-z][a-z0-9_*/-]{0,255} or tenant@system");
        }
        let printable = value
            .iter()
            .all(|b| (0x20..=0x7e).contains(b) && *b != b',' && *b != b'=');
        if value.is_empty() || value.len() > 256 || !printable || value.ends_with(b" ") {
            return Err("a value is not 1-256 printable characters without ',' or '='");
        }
    }
    if members > 32 {
        return Err("more than 32 members");
    }
    Ok(())
}

fn is_tracestate_key(key: &[u8]) -> bool {
    let part_ok = |s: &[u8], first_digit_ok: bool, max: usize| {
        let body = |b: &u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/');
        match s.first() {
            Some(b'a'..=b'z') => {}
            Some(b'0'..=b'9') if first_digit_ok => {}
            _ => return false,
        }
        s.len() <= max && s.iter().all(body)
    };
    match key.iter().position(|b| *b == b'@') {
        None => part_ok(key, false, 256),
        Some(at) => part_ok(&key[..at], true, 241) && part_ok(&key[at + 1..], false, 14),
    }
}
