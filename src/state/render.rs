//! The state file's text, rendered once per shape ([`Rendered`]).
//!
//! Between two writes usually only `confirmed_lsn` moves, while serializing the
//! rest as TOML (the publication baseline, the pinned column types) cost about
//! 214,000 instructions a write: 39 % of a relay's instructions at 50 events/s,
//! with the file written ten times a second (callgrind over 20 s of `bench/run.sh
//! live 50`). So the text around the LSN is kept and reused while nothing else
//! changed.
//!
//! Invariant: [`Rendered::text`] is byte-identical to [`SlotState::to_text`] of
//! the state it is given (unit-tested below); when the LSN's line cannot be found
//! exactly once in a fresh rendering, nothing is kept and every write renders in
//! full.

use super::lsn_field::segment;
use super::SlotState;
use crate::pg::lsn::Lsn;

/// An LSN no server reaches, standing in for the real one in a kept rendering.
const STAND_IN: Lsn = Lsn(u64::MAX);

/// The last shape rendered: the state (its LSN the stand-in) and the text before
/// and after the LSN.
#[derive(Debug, Default)]
pub(super) struct Rendered {
    kept: Option<(SlotState, String, String)>,
}

impl Rendered {
    /// The file's text for `state`.
    pub(super) fn text(&mut self, state: &SlotState) -> String {
        if let Some((shape, head, tail)) = &self.kept {
            if same_but_lsn(shape, state) {
                return format!("{head}{}{tail}", segment(state.confirmed_lsn));
            }
        }
        let mut shape = state.clone();
        shape.confirmed_lsn = STAND_IN;
        let text = shape.to_text();
        let stand_in = segment(STAND_IN);
        self.kept = match text.match_indices(&stand_in).collect::<Vec<_>>()[..] {
            [(at, _)] => {
                let (head, tail) = (&text[..at], &text[at + stand_in.len()..]);
                Some((shape, head.to_owned(), tail.to_owned()))
            }
            _ => None,
        };
        state.to_text()
    }

    /// Where the LSN's field ([`segment`]) starts in the text of `state` when its
    /// shape is the one kept (then every LSN's text differs from it in those
    /// bytes alone).
    pub(super) fn lsn_at(&self, state: &SlotState) -> Option<usize> {
        let (shape, head, _) = self.kept.as_ref()?;
        same_but_lsn(shape, state).then_some(head.len())
    }
}

/// Whether `a` and `b` differ in their LSN at most.
fn same_but_lsn(a: &SlotState, b: &SlotState) -> bool {
    // Every field named: a new one must be compared here too.
    let SlotState {
        version,
        system_id,
        timeline,
        database,
        slot,
        confirmed_lsn: _,
        publication,
        watermark,
        pinned_types,
    } = a;
    *version == b.version
        && *system_id == b.system_id
        && *timeline == b.timeline
        && *database == b.database
        && *slot == b.slot
        && *publication == b.publication
        && *watermark == b.watermark
        && *pinned_types == b.pinned_types
}

#[cfg(test)]
mod tests {
    use super::Rendered;
    use crate::pg::lsn::Lsn;
    use crate::state::tests::sample;

    use crate::state::WatermarkRecord;

    #[test]
    fn every_text_is_the_full_rendering_of_its_state() {
        let mut rendered = Rendered::default();
        let mut state = sample(42);
        let columns = [("aggregate_id".to_owned(), 25), ("id".to_owned(), 2950)];
        (state.pinned_types).insert("public.outbox".into(), columns.into_iter().collect());
        for lsn in [1, 0x1_0000_0000, 0xFFFF_FFFF_0000_0001, 7] {
            state.confirmed_lsn = Lsn(lsn);
            assert_eq!(rendered.text(&state), state.to_text(), "{lsn:#x}");
        }
        assert!(rendered.kept.is_some(), "the shape is kept");
        // Another field changes: rendered afresh, and kept anew.
        state.watermark = Some(WatermarkRecord {
            topic: "pgoutbox.offsets".into(),
            transactional_id: "t".into(),
        });
        assert_eq!(rendered.text(&state), state.to_text());
        state.confirmed_lsn = Lsn(99);
        assert_eq!(rendered.text(&state), state.to_text());
        state.timeline = Some(state.timeline.unwrap_or(1) + 1);
        assert_eq!(rendered.text(&state), state.to_text());
        state.pinned_types.clear();
        assert_eq!(rendered.text(&state), state.to_text());
    }

    #[test]
    fn a_stand_in_found_elsewhere_keeps_nothing() {
        let mut rendered = Rendered::default();
        let mut state = sample(42);
        state.slot = crate::state::lsn_field::segment(Lsn(u64::MAX));
        assert_eq!(rendered.text(&state), state.to_text());
        assert!(rendered.kept.is_none());
        state.confirmed_lsn = Lsn(5);
        assert_eq!(rendered.text(&state), state.to_text());
    }
}
