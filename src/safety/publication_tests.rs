//! Unit tests of the publication watch's comparison and finding.

use super::*;

fn listed() -> PublicationState {
    PublicationState {
        oid: Some(16390),
        row_version: "724".into(),
        all_tables: false,
        publish: "insert".into(),
        tables: vec![TableState {
            table: "\"public\".\"outbox\"".into(),
            oid: Some(16384),
            member: Member::Table,
            member_oid: Some(16391),
            row_filter: None,
            created_by: Some("700".into()),
            member_by: Some("724".into()),
        }],
    }
}

fn changes(now: &PublicationState) -> Vec<String> {
    match compare("pgoutbox_pub", &listed(), now) {
        Verdict::Changed(changes) => changes,
        Verdict::Unchanged { adopted } => panic!("no change found; adopted {adopted:?}"),
    }
}

fn unchanged(before: &PublicationState, now: &PublicationState) -> Vec<String> {
    match compare("pgoutbox_pub", before, now) {
        Verdict::Unchanged { adopted } => adopted,
        Verdict::Changed(changes) => panic!("change found: {changes:?}"),
    }
}

#[test]
fn the_same_catalog_is_unchanged() {
    assert!(unchanged(&listed(), &listed()).is_empty());
}

#[test]
fn a_table_removed_from_the_publication_is_a_change() {
    let mut now = listed();
    now.tables[0].member = Member::None;
    now.tables[0].member_oid = None;
    let found = changes(&now);
    assert_eq!(found.len(), 1);
    assert!(
        found[0].contains("\"public\".\"outbox\" was removed from the publication"),
        "{found:?}"
    );
}

#[test]
fn a_recreated_table_is_a_change_whether_or_not_it_was_added_again() {
    let mut now = listed();
    now.tables[0].oid = Some(16400);
    now.tables[0].member = Member::None;
    now.tables[0].member_oid = None;
    assert!(changes(&now)[0].contains("re-created (OID 16384 → 16400) and is not published"));
    // Added to the publication again before the next reading: still a change.
    now.tables[0].member = Member::Table;
    now.tables[0].member_oid = Some(16402);
    let found = changes(&now);
    assert!(
        found[0].contains("pg_publication_rel row 16391 → 16402"),
        "{found:?}"
    );
}

#[test]
fn a_table_recreated_and_published_in_one_transaction_is_adopted() {
    let mut now = listed();
    now.tables[0].oid = Some(16400);
    now.tables[0].member_oid = Some(16402);
    now.tables[0].created_by = Some("800".into());
    now.tables[0].member_by = Some("800".into());
    let adopted = unchanged(&listed(), &now);
    assert!(
        adopted[0].contains("in the same transaction (xmin 800)"),
        "{adopted:?}"
    );
    // Added by a later transaction: rows in between went unpublished.
    now.tables[0].member_by = Some("801".into());
    assert!(changes(&now)[0].contains("re-created (OID 16384 → 16400) and added"));
}

#[test]
fn a_table_dropped_and_added_again_between_two_readings_is_a_change() {
    let mut now = listed();
    now.tables[0].member_oid = Some(16395);
    assert!(changes(&now)[0].contains("removed from \"pgoutbox_pub\" and added again"));
}

#[test]
fn a_dropped_table_is_a_change() {
    let mut now = listed();
    now.tables[0].oid = None;
    now.tables[0].member = Member::None;
    now.tables[0].member_oid = None;
    assert!(changes(&now)[0].contains("no longer exists"));
}

#[test]
fn inserts_switched_off_is_a_change_and_switched_back_on_still_is() {
    let mut now = listed();
    now.publish = "update, delete".into();
    now.row_version = "730".into();
    assert!(changes(&now)[0]
        .contains("no longer publishes inserts (publish = 'update, delete', was 'insert')"));
    now.publish = "insert".into();
    now.row_version = "731".into();
    assert!(changes(&now)[0].contains("xmin 724 to 731"));
}

#[test]
fn more_actions_with_inserts_are_adopted() {
    let mut now = listed();
    now.publish = "insert, update".into();
    now.row_version = "730".into();
    let adopted = unchanged(&listed(), &now);
    assert_eq!(adopted.len(), 1, "{adopted:?}");
}

#[test]
fn a_frozen_publication_row_is_the_same_row() {
    let mut now = listed();
    now.row_version = FROZEN_XMIN.into();
    assert!(unchanged(&listed(), &now).is_empty());
}

#[test]
fn a_row_filter_is_a_change_and_names_the_filter() {
    let mut now = listed();
    now.tables[0].row_filter = Some("(aggregate_type = 'order'::text)".into());
    now.tables[0].member_oid = Some(16399);
    let found = changes(&now);
    assert!(
        found[0].contains("WHERE (aggregate_type = 'order'::text) (was none)"),
        "{found:?}"
    );
}

#[test]
fn a_row_filter_kept_from_the_baseline_is_not_a_change() {
    let mut before = listed();
    before.tables[0].row_filter = Some("(shard = 1)".into());
    assert!(unchanged(&before, &before.clone()).is_empty());
}

#[test]
fn the_publication_dropped_or_recreated_is_a_change() {
    let mut now = listed();
    now.oid = None;
    assert!(changes(&now)[0].contains("no longer exists"));
    now.oid = Some(17000);
    assert!(changes(&now)[0].contains("dropped and re-created (OID 16390 → 17000)"));
}

#[test]
fn a_table_recreated_under_all_tables_or_its_schema_is_adopted() {
    for member in [Member::AllTables, Member::Schema] {
        let mut before = listed();
        before.all_tables = member == Member::AllTables;
        before.tables[0].member = member;
        before.tables[0].member_oid = (member == Member::Schema).then_some(16500);
        let mut now = before.clone();
        now.tables[0].oid = Some(16600);
        let adopted = unchanged(&before, &now);
        assert!(
            adopted[0].contains("re-created (OID 16384 → 16600)"),
            "{adopted:?}"
        );
    }
}

#[test]
fn a_schema_removed_and_added_again_is_a_change() {
    let mut before = listed();
    before.tables[0].member = Member::Schema;
    before.tables[0].member_oid = Some(16500);
    let mut now = before.clone();
    now.tables[0].member_oid = Some(16501);
    match compare("p", &before, &now) {
        Verdict::Changed(found) => assert!(found[0].contains("schema was removed"), "{found:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_finding_names_the_window_and_the_fix() {
    let finding = PublicationChanged {
        publication: "pgoutbox_pub".into(),
        changes: vec!["outbox table \"public\".\"outbox\" was removed from the publication".into()],
        since_lsn: Lsn(0x1_0000_0000),
        since: "2026-12-03T23:50:00.000000Z".into(),
        until_lsn: Lsn(0x1_0000_2000),
        until: "2026-12-03T23:50:01.000000Z".into(),
        tables: vec![TableName::parse("outbox").expect("name")],
    };
    let text = finding.to_string();
    for part in [
        "between 1/0 (2026-12-03T23:50:00.000000Z) and 1/2000 (2026-12-03T23:50:01.000000Z)",
        "not confirmed past 1/0",
        "ALTER PUBLICATION \"pgoutbox_pub\" ADD TABLE \"public\".\"outbox\"",
        "pgoutbox replay --from '2026-12-03T23:50:00.000000Z' --to '2026-12-03T23:50:01.000000Z'",
        "--accept-publication-change",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

#[test]
fn a_baseline_round_trips_through_the_state_file() {
    let mut state = crate::state::SlotState::new("7300000000000000001", 1, "db", "slot", Lsn(42));
    state.publication = Some(Baseline {
        repairs: Vec::new(),
        vouched_lsn: Lsn(0x16_B374_D848),
        checked_at: "2026-12-03 23:50:00.123+00".into(),
        state: listed(),
    });
    let text = state.to_text();
    assert!(text.contains("vouched_lsn = \"16/B374D848\""), "{text}");
    assert_eq!(crate::state::SlotState::parse(&text), Ok(state));
}

#[test]
fn a_publication_gone_gets_the_slot_safety_fix() {
    let mut now = listed();
    now.oid = Some(17000);
    let finding = PublicationChanged {
        publication: "pgoutbox_pub".into(),
        changes: changes(&now),
        since_lsn: Lsn(1),
        since: "t0".into(),
        until_lsn: Lsn(2),
        until: "t1".into(),
        tables: vec![TableName::parse("outbox").expect("name")],
    };
    assert!(finding.publication_gone());
    let text = finding.to_string();
    assert!(text.contains("pg_drop_replication_slot"), "{text}");
    assert!(text.contains("--accept-slot-reset"), "{text}");
    assert!(!text.contains("--accept-publication-change"), "{text}");
}

#[test]
fn tables_are_compared_by_name_whatever_the_relays_list_became() {
    let mut other = listed().tables[0].clone();
    other.table = "\"public\".\"outbox2\"".into();
    other.oid = Some(20000);
    other.member_oid = Some(20001);
    // A table put first in the relay's list since the baseline: no baseline of its
    // own, and the outbox table still compared with its own.
    let mut now = listed();
    now.tables.insert(0, other.clone());
    assert!(unchanged(&listed(), &now).is_empty());
    now.tables[1].member_oid = Some(16395);
    assert!(changes(&now)[0].contains("\"public\".\"outbox\" was removed"));
}
