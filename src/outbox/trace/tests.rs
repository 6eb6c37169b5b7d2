//! Unit tests of trace-context extraction and the W3C format checks.

use super::*;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn keys(path: &str) -> Vec<String> {
    TraceField::parse(&format!("col.{path}"))
        .unwrap()
        .unwrap()
        .keys
}

fn header(v: &Option<Bytes>) -> Option<&str> {
    v.as_deref().map(|v| std::str::from_utf8(v).unwrap())
}

#[test]
fn field_specs_parse_and_print() {
    assert_eq!(TraceField::parse(" ").unwrap(), None);
    let f = TraceField::parse("payload.meta.traceparent")
        .unwrap()
        .unwrap();
    assert_eq!((f.column.as_str(), f.keys.len()), ("payload", 2));
    assert_eq!(f.to_string(), "payload.meta.traceparent");
    let err = TraceField::parse("payload..x").unwrap_err().to_string();
    assert!(err.contains("--trace-context \"payload..x\""), "{err}");
}

#[test]
fn a_bare_column_value_is_the_traceparent() {
    let raw = b(&format!(" {PARENT}\n"));
    let e = extract(Some(&raw), &[]);
    assert_eq!(header(&e.traceparent), Some(PARENT));
    assert_eq!(e.outcome(), Outcome::Propagated);
    assert_eq!((e.tracestate, e.problem), (None, None));
    assert_eq!(extract(None, &[]).outcome(), Outcome::Absent);
    assert_eq!(extract(Some(&b("  ")), &[]).outcome(), Outcome::Absent);
}

#[test]
fn json_carriers_strings_and_paths() {
    let headers = b(&format!(
        r#"{{"x": [1, {{"traceparent": "no"}}], "traceparent": "{PARENT}", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}}"#
    ));
    let e = extract(Some(&headers), &[]);
    assert_eq!(header(&e.traceparent), Some(PARENT));
    assert_eq!(
        header(&e.tracestate),
        Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    );
    // A jsonb column holding a JSON string.
    let e = extract(Some(&b(&format!("\"{PARENT}\""))), &[]);
    assert_eq!(header(&e.traceparent), Some(PARENT));
    // Keys into the payload: to a string, to an object, to nothing.
    let payload = b(&format!(
        r#"{{"order": {{"id": 7}}, "meta": {{"trace": {{"traceparent": "{PARENT}"}}, "tp": "{PARENT}"}}}}"#
    ));
    let at = |path: &str| extract(Some(&payload), &keys(path));
    assert_eq!(header(&at("meta.tp").traceparent), Some(PARENT));
    assert_eq!(header(&at("meta.trace").traceparent), Some(PARENT));
    assert_eq!(at("meta.missing").outcome(), Outcome::Absent);
    assert_eq!(at("order.id.deeper").outcome(), Outcome::Absent);
    // JSON null is no context; a number at the end of the path is malformed.
    assert_eq!(
        extract(Some(&b(r#"{"traceparent": null}"#)), &[]).outcome(),
        Outcome::Absent
    );
    let e = at("order.id");
    assert_eq!(e.outcome(), Outcome::Invalid);
    assert!(e.problem.unwrap().to_string().contains("a JSON number"));
}

#[test]
fn debezium_properties_text_is_a_carrier() {
    let raw = b(&format!(
        "#\n#Mon Dec 01 10:00:00 UTC 2026\ntraceparent={PARENT}\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61\n"
    ));
    let e = extract(Some(&raw), &[]);
    assert_eq!(header(&e.traceparent), Some(PARENT));
    assert_eq!(
        header(&e.tracestate),
        Some("rojo=00f067aa0ba902b7,congo=t61")
    );
}

#[test]
fn malformed_values_are_reported_never_sent() {
    for (value, why) in [
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "shorter",
        ),
        (
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "lowercase hex",
        ),
        (
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "version ff",
        ),
        (
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "trace id is all zeros",
        ),
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "parent id is all zeros",
        ),
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "exactly 55",
        ),
        (
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "separated",
        ),
    ] {
        let e = extract(Some(&b(value)), &[]);
        assert_eq!(e.outcome(), Outcome::Invalid, "{value}");
        assert_eq!(e.traceparent, None);
        let text = e.problem.unwrap().to_string();
        assert!(
            text.contains(why) && text.contains(value),
            "{value}: {text}"
        );
    }
    // A later version may carry more fields; they pass unchanged.
    let future = format!("01{}-cafe", &PARENT[2..]);
    assert_eq!(
        header(&extract(Some(&b(&future)), &[]).traceparent),
        Some(future.as_str())
    );
    let e = extract(Some(&b("{not json")), &[]);
    assert!(matches!(e.problem, Some(TraceError::Shape(_))), "{e:?}");
}

#[test]
fn an_invalid_tracestate_alone_is_dropped() {
    let raw = b(&format!(
        r#"{{"traceparent": "{PARENT}", "tracestate": "Bad Key=1"}}"#
    ));
    let e = extract(Some(&raw), &[]);
    assert_eq!(e.outcome(), Outcome::TracestateDropped);
    assert_eq!(header(&e.traceparent), Some(PARENT));
    assert_eq!(e.tracestate, None);
    // tracestate without a traceparent means nothing.
    let e = extract(Some(&b(r#"{"tracestate": "a=1"}"#)), &[]);
    assert_eq!(e.outcome(), Outcome::Absent);
}

#[test]
fn tracestate_rules() {
    for ok in [
        "",
        "congo=t61rcWkgMzE",
        "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE",
        "fw529a3039@dt=1,,  ",
        "a*b/c_d-e=x y",
    ] {
        assert_eq!(check_tracestate(ok.as_bytes()), Ok(()), "{ok:?}");
    }
    let many = vec!["k=v"; 33].join(",");
    for bad in [
        "novalue",
        "Upper=1",
        "k=",
        "k=a,b=",
        "k=a\tb",
        "1abc=1",
        many.as_str(),
    ] {
        assert!(check_tracestate(bad.as_bytes()).is_err(), "{bad:?}");
    }
}

proptest::proptest! {
    /// Whatever a row holds, extraction answers and never panics; what it sends is
    /// always a valid traceparent.
    #[test]
    fn any_bytes_are_answered_never_a_panic(
        raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
        path in proptest::sample::select(vec!["", "a", "traceparent", "a.b"]),
    ) {
        let keys: Vec<String> = path.split('.').filter(|k| !k.is_empty()).map(str::to_owned).collect();
        let e = extract(Some(&Bytes::from(raw)), &keys);
        if let Some(parent) = &e.traceparent {
            proptest::prop_assert!(check_traceparent(parent).is_ok());
        }
    }

    #[test]
    fn near_valid_traceparents_never_panic(
        cut in 0usize..60,
        extra in "[-0-9a-f]{0,8}",
    ) {
        let v = format!("{}{extra}", &PARENT[..cut.min(PARENT.len())]);
        let _ = check_traceparent(v.as_bytes());
        let _ = extract(Some(&b(&format!("traceparent={v}"))), &[]);
    }
}
