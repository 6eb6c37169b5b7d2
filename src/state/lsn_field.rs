//! The LSN's field in the state file's text, and the rule that lets it be rewritten
//! in place.
//!
//! Between two writes usually only the LSN moves. Its field has one width for every
//! LSN (`XXXXXXXX/XXXXXXXX`, eight hex digits a half, as `pg_lsn` reads them) and
//! ends its line with a check of its text (`# check 1a2b3c4d`), so that rewriting
//! those bytes in the open file ([`crate::state::Checkpoint::record`]) gives the text
//! a whole write would have given, with no new file, no rename and no fsync.
//!
//! Invariants:
//! - [`segment`] is [`SEGMENT_LEN`] bytes for every LSN; [`fixed`] is its LSN part.
//! - A text whose LSN line carries a check that does not match its LSN is refused by
//!   [`verify`] (a rewrite torn by a power loss, or a hand edit that kept the check):
//!   such an LSN is never taken as a position. A line without a check (written by an
//!   older pgoutbox, or edited by hand without one) is taken as it is.

use crate::pg::lsn::Lsn;

/// What the LSN's line starts with.
const KEY: &str = "confirmed_lsn = \"";

/// What stands between the LSN's closing quote and its check.
const CHECK: &str = "\" # check ";

/// The length of [`segment`]: the LSN, its closing quote and its check.
pub(super) const SEGMENT_LEN: usize = 17 + CHECK.len() + 8;

/// The LSN in the file's fixed width.
pub(super) fn fixed(lsn: Lsn) -> String {
    format!("{:08X}/{:08X}", lsn.0 >> 32, lsn.0 & 0xFFFF_FFFF)
}

/// The bytes from the LSN's first digit to the end of its check (the newline after
/// it excluded): what an in-place rewrite writes.
pub(super) fn segment(lsn: Lsn) -> String {
    let text = fixed(lsn);
    let check = check(&text);
    let segment = format!("{text}{CHECK}{check:08x}");
    debug_assert_eq!(segment.len(), SEGMENT_LEN);
    segment
}

/// FNV-1a (32 bits) of the LSN's text: enough to tell a torn rewrite from a whole one.
fn check(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// `body` (TOML whose LSN was serialized with [`fixed`]) with the check after the LSN.
pub(super) fn with_check(body: &str, lsn: Lsn) -> String {
    let plain = format!("{KEY}{}\"\n", fixed(lsn));
    let checked = format!("{KEY}{}\n", segment(lsn));
    body.replacen(&plain, &checked, 1)
}

/// Refuse a text whose LSN does not match its check; the error says why.
pub(super) fn verify(text: &str) -> Result<(), String> {
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(KEY) else {
            continue;
        };
        let Some((lsn, found)) = rest.split_once(CHECK) else {
            continue;
        };
        let expected = format!("{:08x}", check(lsn));
        if found.trim() != expected {
            return Err(format!(
                "its confirmed_lsn {lsn:?} does not match the check after it ({:?}): a rewrite torn by a power loss, or an edit that kept the check (an edited LSN must drop its \"# check\" comment)",
                found.trim()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_segment_has_one_length_and_reads_back() {
        for lsn in [0, 1, 0x16_B374_D848, u64::MAX] {
            let segment = segment(Lsn(lsn));
            assert_eq!(segment.len(), SEGMENT_LEN, "{segment}");
            let text = format!("{KEY}{segment}\n");
            assert_eq!(verify(&text), Ok(()));
            let value = segment.split('"').next().unwrap();
            assert_eq!(value.parse::<Lsn>().unwrap(), Lsn(lsn));
        }
    }

    #[test]
    fn a_torn_or_edited_lsn_is_refused_and_a_line_without_check_is_taken() {
        let older = segment(Lsn(0x1_FFFF_FFF0));
        let newer = segment(Lsn(0x2_0000_0010));
        // Every split of an old and a new rewrite that is neither of them.
        let mut refused = 0;
        for at in 1..SEGMENT_LEN {
            let torn = format!("{}{}", &newer[..at], &older[at..]);
            if torn != older && torn != newer {
                let err = verify(&format!("{KEY}{torn}\n")).expect_err(&torn);
                assert!(err.contains("torn"), "{err}");
                refused += 1;
            }
        }
        assert!(refused >= 16, "{refused}");
        let whole = format!("{KEY}{older}\n");
        assert_eq!(verify("confirmed_lsn = \"0/2A\"\n"), Ok(()));
        let edited = whole.replace("00000001/", "00000000/");
        assert!(verify(&edited).unwrap_err().contains("drop its"));
    }
}
