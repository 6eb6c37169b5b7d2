//! Checks of the harness's own helpers.

use super::*;

/// `network`'s outage check relies on this: a hold that starts after its
/// period already ended (writing the events outlasted the outage) still checks.
#[test]
fn hold_for_checks_even_when_called_after_its_period() {
    let since = Instant::now() - Duration::from_secs(5);
    let checks = hold_for(
        since,
        Duration::from_secs(1),
        Duration::from_millis(1),
        || {},
    );
    assert_eq!(checks, 1);
}

#[test]
fn hold_for_checks_again_after_the_period_ends() {
    let since = Instant::now();
    let mut last = since;
    let checks = hold_for(
        since,
        Duration::from_millis(30),
        Duration::from_millis(10),
        || {
            last = Instant::now();
        },
    );
    assert!(checks >= 2, "{checks}");
    assert!(last.duration_since(since) >= Duration::from_millis(30));
}
