//! The partitioner the relay gives librdkafka ([`JavaPartitioner`]): Kafka's Java
//! default for a keyed record, and the way the sink learns each topic's partition
//! count, which the per-partition first-write gate (`first_writes`) needs to know
//! where a record will go before handing it over.
//!
//! Invariants: a keyed record goes where librdkafka's `murmur2_random` (and the Java
//! client) puts it, `murmur2(key) & 0x7fffffff % partitions`, so placement is the
//! one consumers written against Debezium expect (checked end to end by
//! `run::twenty_thousand_events_arrive_exactly_once_with_contract_fields`); a record without
//! a key is spread at random, as librdkafka does (it only reaches the partitioner
//! with `sticky.partitioning.linger.ms=0`: otherwise librdkafka's sticky partitioner
//! places it). It is installed only while `partitioner` is the relay's default
//! (`murmur2_random`): a user's own choice is librdkafka's to run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdkafka::producer::Partitioner;

use super::first_writes::FirstWrites;

/// Kafka's murmur2 (the Java client's `Utils.murmur2`: seed `0x9747b28c`, four
/// bytes at a time little-endian, the tail folded in from its last byte down).
pub fn murmur2(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    // Kafka hashes with the length as a Java int; keys beyond 2 GiB do not exist.
    let mut h: u32 = 0x9747_b28c ^ (key.len() as u32);
    let mut chunks = key.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        h = h.wrapping_mul(M) ^ k.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The partition of `partitions` (more than 0) the Java client puts `key` on.
pub fn java_partition(key: &[u8], partitions: i32) -> i32 {
    // Both operands are non-negative i32 values: the result fits.
    ((murmur2(key) & 0x7fff_ffff) % partitions.max(1) as u32) as i32
}

/// librdkafka's partitioner callback for the relay's producers.
pub(super) struct JavaPartitioner {
    writes: Arc<FirstWrites>,
    /// xorshift state for records without a key.
    spread: AtomicU64,
}

impl JavaPartitioner {
    pub(super) fn new(writes: Arc<FirstWrites>) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Self {
            writes,
            spread: AtomicU64::new(seed),
        }
    }

    fn random(&self, partitions: i32) -> i32 {
        let mut x = self.spread.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.spread.store(x, Ordering::Relaxed);
        (x % partitions.max(1) as u64) as i32
    }
}

impl Partitioner for JavaPartitioner {
    fn partition(
        &self,
        topic_name: &str,
        key: Option<&[u8]>,
        partition_cnt: i32,
        _is_partition_available: impl Fn(i32) -> bool,
    ) -> i32 {
        self.writes.partitions_of(topic_name, partition_cnt);
        match key {
            Some(key) => java_partition(key, partition_cnt),
            None => self.random(partition_cnt),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{java_partition, murmur2};

    #[test]
    fn murmur2_matches_the_java_clients_test_vectors() {
        // Apache Kafka's UtilsTest.testMurmur2 (signed Java ints).
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, java) in cases {
            assert_eq!(
                murmur2(key) as i32,
                *java,
                "{:?}",
                String::from_utf8_lossy(key)
            );
        }
    }

    #[test]
    fn the_partition_is_the_positive_hash_modulo_the_count() {
        // 0x7fffffff & -973932308 = 1173551340.
        assert_eq!(java_partition(b"21", 3), 1_173_551_340 % 3);
        assert_eq!(java_partition(b"", 1), 0);
    }
}
