//! [`DeliveryTag`]: the `usize` librdkafka carries with each record (its delivery
//! opaque), packing the session generation and the record's transaction number.
//!
//! ```text
//!  bit 63 ........ 48 47 ................................ 0
//!      generation      transaction number (low 48 bits)
//! ```
//!
//! Owns the packing and unpacking. A report of an earlier session (another
//! generation, e.g. a record still in librdkafka's queue when the session failed)
//! is recognised and ignored: its record is resent from the slot anyway.
//!
//! Invariants: a transaction number never leaks into the generation bits; unpacking
//! restores the full transaction number as long as the transactions in flight span
//! fewer than 2^48 numbers (they span a handful), counting from the oldest one.

/// Bits of a tag used for the transaction number; the rest carries the generation.
const TXN_BITS: u32 = 48;
const TXN_MASK: u64 = (1 << TXN_BITS) - 1;

// The packing needs a 64-bit `usize` (librdkafka's opaque is a pointer).
const _: () = assert!(usize::BITS >= 64);

/// Packs and unpacks the delivery tags of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryTag {
    generation: u16,
}

impl DeliveryTag {
    /// Tags of the session with `generation`.
    pub fn new(generation: u16) -> Self {
        Self { generation }
    }

    /// The tag of a record of transaction `txn`.
    pub fn pack(self, txn: u64) -> usize {
        // Lossless: usize has 64 bits (asserted above).
        ((u64::from(self.generation) << TXN_BITS) | (txn & TXN_MASK)) as usize
    }

    /// The transaction of a tag of this session, `None` for another generation's.
    /// `oldest` is the oldest transaction that can still be in flight; the number is
    /// the first one at or after it with the tag's low 48 bits.
    pub fn unpack(self, tag: usize, oldest: u64) -> Option<u64> {
        let tag = tag as u64;
        if tag >> TXN_BITS != u64::from(self.generation) {
            return None;
        }
        let ahead = (tag & TXN_MASK).wrapping_sub(oldest) & TXN_MASK;
        Some(oldest.wrapping_add(ahead))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let tags = DeliveryTag::new(7);
        for (txn, oldest) in [(0, 0), (1, 0), (41, 40), (TXN_MASK, 5), (12_345, 12_345)] {
            let tag = tags.pack(txn);
            assert_eq!(tag >> 48, 7, "txn {txn}");
            assert_eq!(tags.unpack(tag, oldest), Some(txn), "txn {txn}");
        }
        let max = DeliveryTag::new(u16::MAX);
        assert_eq!(max.unpack(max.pack(3), 0), Some(3));
    }

    #[test]
    fn other_generations_are_recognised() {
        let old = DeliveryTag::new(1);
        let new = DeliveryTag::new(2);
        assert_eq!(new.unpack(old.pack(0), 0), None);
        assert_eq!(old.unpack(new.pack(9), 0), None);
        // Wrapped generations are still distinct from their neighbours.
        let last = DeliveryTag::new(u16::MAX);
        assert_eq!(DeliveryTag::new(0).unpack(last.pack(1), 0), None);
    }

    #[test]
    fn transaction_numbers_wrap_at_48_bits_without_touching_the_generation() {
        let tags = DeliveryTag::new(3);
        let txn = (1u64 << 48) + 5;
        let tag = tags.pack(txn);
        assert_eq!(tag, (3usize << 48) | 5);
        // Restored in full relative to the oldest transaction in flight, also across
        // the wrap of the low bits.
        assert_eq!(tags.unpack(tag, txn), Some(txn));
        assert_eq!(tags.unpack(tag, txn - 10), Some(txn));
        assert_eq!(tags.unpack(tags.pack(txn - 6), txn - 10), Some(txn - 6));
        assert_eq!(tags.unpack(tag, 0), Some(5), "relative to 0: the low bits");
    }
}
