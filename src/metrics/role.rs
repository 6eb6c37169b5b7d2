//! The relay's role, and the readiness `/readyz` derives from it.
//!
//! Several `pgoutbox run` on one slot form an active/standby group: PostgreSQL lets
//! one walsender hold a slot, so one relay streams (`active`) and the others wait
//! for it (`standby`) and take over when it goes away. A relay that is neither is
//! `connecting` (starting, or reconnecting after an error).
//!
//! Readiness means "this instance does its part": an active relay whose replication
//! stream and producer are both up, or a standby whose producer is up (it can take
//! over at once; that it was told "slot in use" proves PostgreSQL answers). A
//! standby is ready on purpose: Kubernetes rolls a Deployment out only as new pods
//! become Ready, and a PodDisruptionBudget counts Ready pods — a standby reported
//! unready would stall every rollout (the new pods stand by while the old one holds
//! the slot) and block every node drain. Which instance is active is in the body
//! and in the `pgoutbox_role` gauge, not in the status code. An active relay whose
//! end-to-end heartbeat went stale (`--heartbeat-max-age`) is not ready: its stream
//! delivers nothing, whatever the connections say.

/// What this relay is doing with the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// Starting, or reconnecting after an error.
    Connecting = 0,
    /// Streaming from the slot.
    Active = 1,
    /// Another process holds the slot; waiting to take over.
    Standby = 2,
}

impl Role {
    /// Every role, in the order of the gauge's series.
    pub const ALL: [Role; 3] = [Role::Active, Role::Standby, Role::Connecting];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Role::Connecting => "connecting",
            Role::Active => "active",
            Role::Standby => "standby",
        }
    }

    pub(super) fn from_u8(v: u8) -> Role {
        match v {
            1 => Role::Active,
            2 => Role::Standby,
            _ => Role::Connecting,
        }
    }
}

/// The connections `/readyz` reports on.
#[derive(Clone, Debug)]
pub(super) struct Health {
    pub(super) role: Role,
    pub(super) replication: bool,
    pub(super) producer: bool,
    /// Why the oldest in-flight record is stalled (`--stall-timeout`), until the
    /// next ack: an active relay is not ready meanwhile.
    pub(super) stalled: Option<String>,
    /// The heartbeat's line while it is on, and whether it is stale (an active
    /// relay is not ready meanwhile).
    pub(super) heartbeat: Option<(String, bool)>,
    /// The publication change that stops the relay: not ready from then on.
    pub(super) publication_change: Option<String>,
}

impl Health {
    /// Whether the instance does its part (see the module doc).
    pub(super) fn ready(&self) -> bool {
        match self.role {
            Role::Active => {
                let stale = self.heartbeat.as_ref().is_some_and(|(_, stale)| *stale);
                self.replication
                    && self.producer
                    && self.stalled.is_none()
                    && !stale
                    && self.publication_change.is_none()
            }
            Role::Standby => self.producer,
            Role::Connecting => false,
        }
    }

    /// The `/readyz` body: the role, then one line per connection.
    pub(super) fn body(&self) -> String {
        let up = |ok: bool| if ok { "connected" } else { "down" };
        let replication = match self.role {
            Role::Standby => "standing by: another relay holds the slot (with --source poll: the table's poll lock)",
            _ => up(self.replication),
        };
        let stall = match &self.stalled {
            Some(why) => format!("stalled: {why}\n"),
            None => String::new(),
        };
        let change = match &self.publication_change {
            Some(why) => format!("publication changed: {why}\n"),
            None => String::new(),
        };
        // A standby has no stream, so no heartbeat of its own to judge.
        let heartbeat = match (&self.heartbeat, self.role) {
            (Some((line, _)), Role::Active) => format!("{line}\n"),
            _ => String::new(),
        };
        format!(
            "role: {}\nreplication: {replication}\nproducer: {}\n{stall}{change}{heartbeat}",
            self.role.name(),
            up(self.producer)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(role: Role, replication: bool, producer: bool) -> Health {
        Health {
            role,
            replication,
            producer,
            stalled: None,
            heartbeat: None,
            publication_change: None,
        }
    }

    #[test]
    fn a_standby_is_ready_and_says_so_a_broken_relay_is_not() {
        let standby = health(Role::Standby, false, true);
        assert!(standby.ready());
        assert_eq!(
            standby.body(),
            "role: standby\nreplication: standing by: another relay holds the slot (with --source poll: the table's poll lock)\nproducer: connected\n"
        );
        let broken = health(Role::Connecting, false, true);
        assert!(!broken.ready());
        assert_eq!(
            broken.body(),
            "role: connecting\nreplication: down\nproducer: connected\n"
        );
        assert!(!health(Role::Standby, false, false).ready());
        assert!(!health(Role::Active, true, false).ready());
        assert!(!health(Role::Active, false, true).ready());
        assert!(health(Role::Active, true, true).ready());
        let stalled = Health {
            stalled: Some("no kafka ack for 61s".into()),
            ..health(Role::Active, true, true)
        };
        assert!(!stalled.ready());
        assert!(stalled.body().ends_with("stalled: no kafka ack for 61s\n"));
    }

    #[test]
    fn a_stale_heartbeat_makes_an_active_relay_unready_but_not_a_standby() {
        let beat = |stale| Some(("heartbeat: …".to_owned(), stale));
        let fresh = Health {
            heartbeat: beat(false),
            ..health(Role::Active, true, true)
        };
        assert!(fresh.ready());
        assert!(fresh
            .body()
            .ends_with("producer: connected\nheartbeat: …\n"));
        let stale = Health {
            heartbeat: beat(true),
            ..health(Role::Active, true, true)
        };
        assert!(!stale.ready());
        let standby = Health {
            heartbeat: beat(true),
            ..health(Role::Standby, false, true)
        };
        assert!(standby.ready(), "a standby has no stream to judge");
        assert!(!standby.body().contains("heartbeat"));
    }

    #[test]
    fn roles_round_trip_through_their_number() {
        for role in Role::ALL {
            assert_eq!(Role::from_u8(role as u8), role);
        }
    }
}
