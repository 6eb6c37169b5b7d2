//! Lazy delivery reports ([`KafkaSink::wake_on_reports`], used by the relay's session
//! while nothing waits on reports, issue 29): a report then does not wake a caller
//! waiting in `next_delivery`, yet is served by its next call; with eagerness back
//! on, a report that waited is served at once and new ones wake the caller.

use std::time::Duration;

use crate::mock_kafka::{mock, next, record, sink};
use crate::support::WAIT;

/// Long enough for the mock's ack to arrive many times over.
const QUIET: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_report_wakes_nobody_but_is_served_by_the_next_call() {
    let mock = mock();
    let mut sink = sink(&mock, &[]);
    // The producer's first write to the topic (it goes alone), acked eagerly.
    sink.send(&record(0), 0).expect("taken");
    assert!(next(&mut sink).await.result.is_ok());

    sink.wake_on_reports(false);
    sink.send(&record(1), 1).expect("taken");
    let waited = tokio::time::timeout(QUIET, sink.next_delivery()).await;
    assert!(
        waited.is_err(),
        "a lazy report woke the waiting caller: {waited:?}"
    );
    let served = sink.try_next_delivery().expect("served by the next call");
    assert_eq!(served.tag, 1);
    assert!(served.result.is_ok(), "{:?}", served.result);

    // A report that arrived lazily is served at once when eagerness is back on.
    sink.send(&record(2), 2).expect("taken");
    tokio::time::sleep(QUIET).await;
    sink.wake_on_reports(true);
    let woken = tokio::time::timeout(WAIT, sink.next_delivery())
        .await
        .expect("the report that waited")
        .expect("channel open");
    assert_eq!(woken.tag, 2);
    // And an eager one wakes as before.
    sink.send(&record(3), 3).expect("taken");
    assert_eq!(next(&mut sink).await.tag, 3);
}
