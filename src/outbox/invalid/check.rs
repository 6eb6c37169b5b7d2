//! The checks that find a poison row's cause on a built record, and [`diagnose`],
//! the verdict under the `--on-invalid` policy. Invariant: checks never panic and
//! never allocate on a valid row (nor on a row delivered by `null-key=deliver`).

use super::{Action, Cause, Invalid, InvalidPolicy};
use crate::outbox::json;
use crate::outbox::record::KafkaRecord;
use crate::outbox::routing::TopicTemplate;

/// What to do with a built record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Clean,
    /// Send it although its key is `NULL` or `empty` (which one is said):
    /// `--on-invalid null-key=deliver`.
    NullKeyDelivered(&'static str),
    /// A poison row: apply the cause's action.
    Poison(Invalid),
}

/// The verdict on `record`, built from a row whose route-by column held
/// `route_value` under `template`. Causes are looked for in the order null-key,
/// null-route, invalid-topic, invalid-json (`check_json`: the payload column is not
/// `json`/`jsonb`); with `null-key=deliver` a keyless record that has no other
/// cause is delivered.
pub fn diagnose(
    record: &KafkaRecord,
    route_value: Option<&[u8]>,
    template: &TopicTemplate,
    check_json: bool,
    policy: &InvalidPolicy,
) -> Verdict {
    let keyless = missing_key(record);
    if let Some(what) = keyless {
        if policy.action(Cause::NullKey) != Action::Deliver {
            return Verdict::Poison(null_key(what));
        }
    }
    if let Some(invalid) =
        check_route(route_value, template).or_else(|| check_rest(record, check_json))
    {
        return Verdict::Poison(invalid);
    }
    keyless.map_or(Verdict::Clean, Verdict::NullKeyDelivered)
}

/// The first cause that makes `record` unfit, if any (null-key, invalid-topic,
/// invalid-json). `check_json`: the payload column is not `json`/`jsonb`, so
/// PostgreSQL did not check its syntax.
pub fn check(record: &KafkaRecord, check_json: bool) -> Option<Invalid> {
    missing_key(record)
        .map(null_key)
        .or_else(|| check_rest(record, check_json))
}

/// `null-route`: the template uses the routing value and it is NULL or empty. The
/// topic would be the template without the value (`outbox.event.`): legal for
/// Kafka, read by no consumer. A template without `${routedByValue}` needs no value.
pub fn check_route(route_value: Option<&[u8]>, template: &TopicTemplate) -> Option<Invalid> {
    if !template.uses_value() {
        return None;
    }
    let what = match route_value {
        None => "NULL",
        Some([]) => "empty",
        Some(_) => return None,
    };
    Some(Invalid {
        cause: Cause::NullRoute,
        reason: format!(
            "the route-by column is {what}, so the topic would be {:?}, which no consumer reads",
            template.render("")
        ),
    })
}

/// `NULL` or `empty` when the record has no usable key.
fn missing_key(record: &KafkaRecord) -> Option<&'static str> {
    match &record.key {
        None => Some("NULL"),
        Some(k) if k.is_empty() => Some("empty"),
        Some(_) => None,
    }
}

fn null_key(what: &'static str) -> Invalid {
    Invalid {
        cause: Cause::NullKey,
        reason: format!("the key column is {what}"),
    }
}

/// invalid-topic, then invalid-json.
fn check_rest(record: &KafkaRecord, check_json: bool) -> Option<Invalid> {
    if !record.has_valid_topic() {
        return Some(Invalid {
            cause: Cause::InvalidTopic,
            reason: format!(
                "topic {:?} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-])",
                record.topic
            ),
        });
    }
    if check_json {
        if let Some(payload) = &record.value {
            if let Err(e) = json::validate(payload) {
                return Some(Invalid {
                    cause: Cause::InvalidJson,
                    reason: format!("payload is {e}"),
                });
            }
        }
    }
    None
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use bytes::Bytes;

    pub(in crate::outbox::invalid) fn record(
        key: Option<&'static str>,
        topic: &str,
        value: &'static str,
    ) -> KafkaRecord {
        KafkaRecord {
            topic: topic.into(),
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: Some(Bytes::from_static(value.as_bytes())),
            id: Some(Bytes::from_static(b"e1")),
            event_type: Some(Bytes::from_static(b"Created")),
            placed: crate::outbox::record::default_placed(Some(Bytes::from_static(b"Created"))),
            timestamp_ms: 7,
            headers: Vec::new(),
        }
    }

    #[test]
    fn checks_find_each_cause() {
        let cause = |r: &KafkaRecord, json: bool| check(r, json).map(|i| i.cause);
        assert_eq!(cause(&record(Some("k"), "t", "{}"), true), None);
        assert_eq!(cause(&record(None, "t", "{}"), true), Some(Cause::NullKey));
        assert_eq!(
            cause(&record(Some(""), "t", "{}"), true),
            Some(Cause::NullKey)
        );
        assert_eq!(
            cause(&record(Some("k"), "a b", "{}"), true),
            Some(Cause::InvalidTopic)
        );
        assert_eq!(
            cause(&record(Some("k"), "t", "nope"), true),
            Some(Cause::InvalidJson)
        );
        // json/jsonb columns are PostgreSQL's to check.
        assert_eq!(cause(&record(Some("k"), "t", "nope"), false), None);
    }

    #[test]
    fn null_or_empty_route_is_its_own_cause_when_the_template_uses_it() {
        let t = TopicTemplate::default();
        let invalid = check_route(None, &t).unwrap();
        assert_eq!(invalid.cause, Cause::NullRoute);
        assert_eq!(
            invalid.reason,
            "the route-by column is NULL, so the topic would be \"outbox.event.\", which no \
             consumer reads"
        );
        assert_eq!(
            check_route(Some(b""), &t).map(|i| i.cause),
            Some(Cause::NullRoute)
        );
        assert!(check_route(Some(b"order"), &t).is_none());
        // A fixed topic does not need the value.
        assert!(check_route(None, &TopicTemplate::new("all-events")).is_none());
    }

    #[test]
    fn diagnose_orders_causes_and_delivers_keyless_records_by_policy() {
        let t = TopicTemplate::default();
        let stop = InvalidPolicy::default();
        let deliver = InvalidPolicy::parse(&["null-key=deliver".into()], "d").unwrap();
        let verdict = |r: &KafkaRecord, route: Option<&[u8]>, p: &InvalidPolicy| {
            diagnose(r, route, &t, true, p)
        };
        let good = record(Some("k"), "outbox.event.order", "{}");
        assert_eq!(verdict(&good, Some(b"order"), &stop), Verdict::Clean);
        let cause = |v: Verdict| match v {
            Verdict::Poison(i) => Some(i.cause),
            _ => None,
        };
        let keyless = record(None, "outbox.event.order", "{}");
        assert_eq!(
            cause(verdict(&keyless, Some(b"order"), &stop)),
            Some(Cause::NullKey)
        );
        assert_eq!(
            verdict(&keyless, Some(b"order"), &deliver),
            Verdict::NullKeyDelivered("NULL")
        );
        let empty = record(Some(""), "outbox.event.order", "{}");
        assert_eq!(
            verdict(&empty, Some(b"order"), &deliver),
            Verdict::NullKeyDelivered("empty")
        );
        // Delivering a keyless record never lets another cause through.
        let unrouted = record(None, "outbox.event.", "{}");
        assert_eq!(
            cause(verdict(&unrouted, None, &deliver)),
            Some(Cause::NullRoute)
        );
        let bad_json = record(None, "outbox.event.order", "nope");
        assert_eq!(
            cause(verdict(&bad_json, Some(b"order"), &deliver)),
            Some(Cause::InvalidJson)
        );
        // Under the default policy the key is looked at first.
        assert_eq!(cause(verdict(&unrouted, None, &stop)), Some(Cause::NullKey));
    }
}
