//! Minimal reproduction of the tansu 0.6.0 race behind the kill -9 test's "lost
//! 2,276" (issue 26): concurrent producers on ONE partition, a consumer tailing it,
//! then a fresh consumer reading it from offset 0. On tansu the tailing consumer
//! sometimes skips acked records — always one whole batch, offset N−1 → N+1 — that
//! the fresh consumer then returns: tansu's Produce raises the high watermark before
//! it stores the batch, so a Fetch in between serves a later batch and the consumer
//! moves past the earlier one (`tansu-storage/src/dynostore.rs`, `produce` and
//! `fetch`, at v0.6.0). Apache Kafka never skips (measured: 0 in 6 runs).
//!
//! It shows with small batches (1 or 10 records per request; librdkafka's default
//! batching hides it):
//!
//! ```text
//! scripts/start-tansu.sh 19792 /tmp/tansu-race &
//! cargo run --release --example tansu_race -- 127.0.0.1:19792 4 1000 false 1
//! # args: bootstrap, producers, records per producer, idempotence, batch.num.messages
//! ```
//!
//! Measured (2 cores, loaded): 6 of 13 small-batch runs skipped 1–10 acked records
//! (35 in all), every one returned by the fresh consumer; 0 offsets acked twice.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

type Recs = Vec<(i64, u64)>; // (offset, record id)

#[derive(Default)]
struct Ctx {
    acks: Mutex<Recs>,
    errors: AtomicU64,
}
impl ClientContext for Ctx {}
impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => self
                .acks
                .lock()
                .unwrap()
                .push((m.offset(), id_of(m.payload()))),
            Err((e, _)) => {
                if self.errors.fetch_add(1, SeqCst) == 0 {
                    eprintln!("delivery error: {e}");
                }
            }
        }
    }
}

fn id_of(p: Option<&[u8]>) -> u64 {
    u64::from_be_bytes(p.unwrap()[..8].try_into().unwrap())
}

fn cfg(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

fn produce(bootstrap: &str, topic: &str, idem: &str, batch: &str, t: u64, n: u64) -> (Recs, u64) {
    let p: BaseProducer<Ctx> = cfg(bootstrap)
        .set("batch.num.messages", batch)
        .set("linger.ms", "0")
        .set("acks", "all")
        .set("enable.idempotence", idem)
        .create_with_context(Ctx::default())
        .expect("producer");
    for i in 0..n {
        let payload = ((t << 32) | i).to_be_bytes();
        loop {
            match p.send(
                BaseRecord::<(), [u8]>::to(topic)
                    .partition(0)
                    .payload(&payload[..]),
            ) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    p.poll(Duration::from_millis(5));
                }
                Err((e, _)) => panic!("send: {e}"),
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    let acks = std::mem::take(&mut *p.context().acks.lock().unwrap());
    (acks, p.context().errors.load(SeqCst))
}

/// Reads partition 0 from the beginning until it has seen offset >= `target`
/// (target == i64::MAX means "not known yet"), or 60 s passed without progress once known.
fn consume(bootstrap: &str, topic: &str, group: &str, target: &AtomicI64) -> Recs {
    let c: BaseConsumer = cfg(bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let (mut seen, mut last, mut progress) = (Recs::new(), -1i64, Instant::now());
    loop {
        if let Some(r) = c.poll(Duration::from_millis(50)) {
            let m = r.expect("consume");
            seen.push((m.offset(), id_of(m.payload())));
            last = last.max(m.offset());
            progress = Instant::now();
        }
        let t = target.load(SeqCst);
        if t != i64::MAX && (last >= t || progress.elapsed() > Duration::from_secs(60)) {
            return seen;
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (bootstrap, np, n, idem) = (
        a[1].clone(),
        a[2].parse::<u64>().unwrap(),
        a[3].parse::<u64>().unwrap(),
        a[4].clone(),
    );
    let batch = a.get(5).cloned().unwrap_or_else(|| "10000".into()); // librdkafka default: 10000
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let topic = format!("race-{nanos}");
    let admin: AdminClient<DefaultClientContext> = cfg(&bootstrap).create().expect("admin");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let res = rt.block_on(admin.create_topics(
        &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
        &AdminOptions::new(),
    ));
    println!(
        "topic {topic}: create {:?}",
        res.map(|v| v.into_iter().map(|r| r.is_ok()).collect::<Vec<_>>())
    );
    thread::sleep(Duration::from_millis(500));

    let target = Arc::new(AtomicI64::new(i64::MAX));
    let tail = {
        let (b, t, tg) = (bootstrap.clone(), topic.clone(), target.clone());
        thread::spawn(move || consume(&b, &t, &format!("{t}-tail"), &tg))
    };
    thread::sleep(Duration::from_millis(500)); // tail is connected and fetching before producing starts
    let start = Instant::now();
    let producers: Vec<_> = (0..np)
        .map(|t| {
            let (b, tp, i, bn) = (
                bootstrap.clone(),
                topic.clone(),
                idem.clone(),
                batch.clone(),
            );
            thread::spawn(move || produce(&b, &tp, &i, &bn, t, n))
        })
        .collect();
    let mut acked = BTreeMap::new();
    let (mut errors, mut dup_acks) = (0, 0);
    for p in producers {
        let (acks, e) = p.join().unwrap();
        errors += e;
        for (o, id) in acks {
            if acked.insert(o, id).is_some() {
                dup_acks += 1;
            }
        }
    }
    let max = *acked.keys().next_back().expect("no acks");
    println!("produced in {:?}: acked {} records (offsets {}..={max}), delivery errors {errors}, offsets acked twice {dup_acks}",
        start.elapsed(), acked.len(), acked.keys().next().unwrap());
    target.store(max, SeqCst);
    let tail = tail.join().unwrap();
    let fresh = consume(&bootstrap, &topic, &format!("{topic}-fresh"), &target);

    let gaps: Vec<(i64, i64)> = tail
        .windows(2)
        .filter(|w| w[1].0 - w[0].0 > 1)
        .map(|w| (w[0].0, w[1].0))
        .collect();
    let tail_map: BTreeMap<i64, u64> = tail.iter().copied().collect();
    let fresh_map: BTreeMap<i64, u64> = fresh.iter().copied().collect();
    let fresh_gaps = fresh.windows(2).filter(|w| w[1].0 - w[0].0 > 1).count();
    println!(
        "tail read {} records ({} distinct offsets), {} gaps (offset jump > 1){}",
        tail.len(),
        tail_map.len(),
        gaps.len(),
        if gaps.is_empty() {
            String::new()
        } else {
            format!(", first: {:?}", &gaps[..gaps.len().min(8)])
        }
    );
    println!(
        "fresh read {} records ({} distinct offsets), {fresh_gaps} gaps",
        fresh.len(),
        fresh_map.len()
    );
    let missed: Vec<i64> = acked
        .keys()
        .copied()
        .filter(|o| !tail_map.contains_key(o))
        .collect();
    let missed_in_fresh: Vec<i64> = missed
        .iter()
        .copied()
        .filter(|o| fresh_map.get(o) == acked.get(o))
        .collect();
    let lost: Vec<i64> = acked
        .iter()
        .filter(|(o, id)| fresh_map.get(o) != Some(id))
        .map(|(o, _)| *o)
        .collect();
    println!("RESULT acked={} tail_read={} acked_not_seen_by_tail={} of_which_fresh_reads={} acked_not_in_fresh={}",
        acked.len(), tail_map.len(), missed.len(), missed_in_fresh.len(), lost.len());
    if !missed.is_empty() {
        println!(
            "  example offsets missed by tail: {:?}",
            &missed[..missed.len().min(10)]
        );
    }
    if !lost.is_empty() {
        println!(
            "  example acked offsets a fresh consumer does not return: {:?}",
            &lost[..lost.len().min(10)]
        );
    }
}
