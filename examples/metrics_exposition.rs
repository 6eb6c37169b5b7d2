//! The hand-written Prometheus exposition of `pgoutbox::metrics` against the
//! `prometheus-client` crate, in one process: what a hot-path update costs, what a
//! scrape costs, what each allocates, and whether the crate can reproduce the
//! exposition at all (the alert rules and dashboard under `deploy/` name its series).
//!
//! `cargo run --release --example metrics_exposition -- [ITERATIONS] [RUNS] [TOPICS]`
//!
//! Both sides hold the same families: the crate's registry is built from the
//! families, HELP lines, types and values of our own rendered exposition (HELP
//! without its final `.`, which the crate adds back; counter names without
//! `_total`, which the crate refuses and adds back to samples), the per-topic
//! counters and the two latency histograms with the same buckets and samples.
//! Label sets are `Vec<(String, String)>` for the small fixed families and
//! `[(&str, String); 1]` for the per-topic ones (the crate has no lookup by a
//! borrowed topic: one `String` per event). A measurement aid, never a pass/fail
//! test: prints medians over RUNS and the ratio ours / theirs (below 1: ours is
//! cheaper), single-threaded and uncontended.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use pgoutbox::metrics::Metrics;
use pgoutbox::outbox::invalid::{Action, Cause};
use pgoutbox::outbox::trace::Outcome;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Counts what the process allocates (bytes and calls); frees are not subtracted.
struct Counting;

static BYTES: AtomicU64 = AtomicU64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The latency buckets of `src/metrics/mod.rs` (`LATENCY_BUCKETS`).
const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// One measured run: ns per operation, bytes and allocations per operation.
#[derive(Clone, Copy)]
struct Run {
    ns: f64,
    bytes: f64,
    allocs: f64,
}

/// Median over `runs` runs of `iterations` calls of `op(i)`.
fn measure(runs: usize, iterations: u64, mut op: impl FnMut(u64)) -> Run {
    for i in 0..iterations.min(1_000) {
        op(i); // warm up (first-touch allocations, caches)
    }
    let mut all: Vec<Run> = (0..runs)
        .map(|_| {
            let (b0, a0) = (
                BYTES.load(Ordering::Relaxed),
                ALLOCS.load(Ordering::Relaxed),
            );
            let start = Instant::now();
            for i in 0..iterations {
                op(i);
            }
            let ns = start.elapsed().as_nanos() as f64 / iterations as f64;
            let per = |x: u64| x as f64 / iterations as f64;
            Run {
                ns,
                bytes: per(BYTES.load(Ordering::Relaxed) - b0),
                allocs: per(ALLOCS.load(Ordering::Relaxed) - a0),
            }
        })
        .collect();
    all.sort_by(|a, b| a.ns.total_cmp(&b.ns));
    all[all.len() / 2]
}

/// A family of our exposition, as its text says.
struct Parsed {
    name: String,
    help: String,
    kind: String,
    samples: Vec<(Vec<(String, String)>, String)>,
}

fn parse(text: &str) -> Vec<Parsed> {
    let mut families: Vec<Parsed> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            families.push(Parsed {
                name: name.into(),
                help: help.into(),
                kind: String::new(),
                samples: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let kind = rest.rsplit(' ').next().expect("TYPE kind");
            families.last_mut().expect("HELP first").kind = kind.into();
        } else {
            let (series, value) = line.rsplit_once(' ').expect("sample value");
            let labels = match series.split_once('{') {
                None => Vec::new(),
                Some((_, labels)) => labels
                    .trim_end_matches('}')
                    .split("\",")
                    .map(|pair| {
                        let (k, v) = pair.split_once("=\"").expect("label");
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect(),
            };
            let family = families.last_mut().expect("HELP first");
            family.samples.push((labels, value.to_owned()));
        }
    }
    families
}

type Labels = Vec<(String, String)>;
type TopicFamily = Family<[(&'static str, String); 1], Counter>;

/// The crate's side: the registry and the handles the hot path uses.
struct Theirs {
    registry: Registry,
    published: TopicFamily,
    reconnects: Counter,
    in_flight_records: Gauge,
    in_flight_bytes: Gauge,
    latency: Histogram,
}

fn theirs(ours_text: &str, latency_samples: &[i64]) -> Theirs {
    let mut registry = Registry::default();
    let help = |f: &Parsed| f.help.strip_suffix('.').unwrap_or(&f.help).to_owned();
    let counter_name = |f: &Parsed| f.name.strip_suffix("_total").unwrap_or(&f.name).to_owned();
    let mut published = None;
    let mut reconnects = None;
    let mut in_flight = (None, None);
    let mut latency = None;
    for f in parse(ours_text) {
        let labelled = f.samples.iter().any(|(l, _)| !l.is_empty()) || f.samples.is_empty();
        match (f.kind.as_str(), f.name.as_str()) {
            ("counter", pgoutbox::metrics::EVENTS_PUBLISHED | pgoutbox::metrics::EVENTS_FAILED) => {
                let family = TopicFamily::default();
                for (labels, value) in &f.samples {
                    let topic = labels[0].1.clone();
                    family
                        .get_or_create(&[("topic", topic)])
                        .inc_by(value.parse().unwrap());
                }
                if f.name == pgoutbox::metrics::EVENTS_PUBLISHED {
                    published = Some(family.clone());
                }
                registry.register(counter_name(&f), help(&f), family);
            }
            ("counter", _) if labelled => {
                let family = Family::<Labels, Counter>::default();
                for (labels, value) in &f.samples {
                    family.get_or_create(labels).inc_by(value.parse().unwrap());
                }
                registry.register(counter_name(&f), help(&f), family);
            }
            ("counter", _) => {
                let value: f64 = f.samples[0].1.parse().unwrap();
                if f.samples[0].1.contains('.') {
                    let counter = Counter::<f64, AtomicU64>::default();
                    counter.inc_by(value);
                    registry.register(counter_name(&f), help(&f), counter);
                } else {
                    let counter: Counter = Counter::default();
                    counter.inc_by(value as u64);
                    if f.name == pgoutbox::metrics::RECONNECTS {
                        reconnects = Some(counter.clone());
                    }
                    registry.register(counter_name(&f), help(&f), counter);
                }
            }
            ("gauge", _) if labelled => {
                let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
                for (labels, value) in &f.samples {
                    family.get_or_create(labels).set(value.parse().unwrap());
                }
                registry.register(f.name.clone(), help(&f), family);
            }
            ("gauge", _) if f.samples[0].1.contains('.') => {
                let gauge = Gauge::<f64, AtomicU64>::default();
                gauge.set(f.samples[0].1.parse().unwrap());
                registry.register(f.name.clone(), help(&f), gauge);
            }
            ("gauge", _) => {
                let gauge: Gauge<i64, AtomicI64> = Gauge::default();
                gauge.set(f.samples[0].1.parse().unwrap());
                match f.name.as_str() {
                    pgoutbox::metrics::IN_FLIGHT_RECORDS => in_flight.0 = Some(gauge.clone()),
                    pgoutbox::metrics::IN_FLIGHT_BYTES => in_flight.1 = Some(gauge.clone()),
                    _ => {}
                }
                registry.register(f.name.clone(), help(&f), gauge);
            }
            ("histogram", _) => {
                let histogram = Histogram::new(LATENCY_BUCKETS);
                if f.name == pgoutbox::metrics::RELAY_LATENCY {
                    for micros in latency_samples {
                        histogram.observe(*micros as f64 / 1e6);
                    }
                    latency = Some(histogram.clone());
                }
                registry.register(f.name.clone(), help(&f), histogram);
            }
            (kind, name) => panic!("{name}: unexpected type {kind}"),
        }
    }
    Theirs {
        registry,
        published: published.expect("published family"),
        reconnects: reconnects.expect("reconnects"),
        in_flight_records: in_flight.0.expect("in-flight records"),
        in_flight_bytes: in_flight.1.expect("in-flight bytes"),
        latency: latency.expect("latency histogram"),
    }
}

/// What our `render` reads from `/proc` at each scrape (the crate's registry has
/// no process collector: its side encodes those six series as constants).
fn read_proc() -> usize {
    let mut n = 0;
    for path in [
        "/proc/self/stat",
        "/proc/stat",
        "/proc/self/status",
        "/proc/self/limits",
    ] {
        n += std::fs::read_to_string(path).map_or(0, |t| t.len());
    }
    n + std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let iterations = args.next().unwrap_or(2_000_000);
    let runs = args.next().unwrap_or(7) as usize;
    let topic_count = args.next().unwrap_or(100) as usize;
    let render_iterations = (iterations / 1_000).max(200);

    let topics: Vec<String> = (0..topic_count)
        .map(|i| format!("outbox.event.aggregate_{i:03}"))
        .collect();
    let latency_samples: Vec<i64> = (0..4_096_i64)
        .map(|i| (i * 7_919) % 2_000_000) // 0-2 s, spread over every bucket below
        .collect();

    let ours = Metrics::default();
    for (i, topic) in topics.iter().enumerate() {
        for _ in 0..=i % 7 {
            ours.published(topic);
        }
        if i % 10 == 0 {
            ours.failed(topic);
        }
    }
    for micros in &latency_samples {
        ours.observe_latency_micros(*micros);
        ours.observe_kafka_latency_micros(*micros / 2);
    }
    ours.invalid_row(Cause::InvalidJson, Action::Skip);
    ours.trace_context(Outcome::Propagated);
    ours.set_slot(6_000_000_000, 8_192);
    ours.set_in_flight(12, 34_567);
    ours.reconnected();
    ours.set_replication_connected(true);
    ours.set_producer_connected(true);
    ours.set_role(pgoutbox::metrics::Role::Active);
    let ours_text = ours.render();
    let theirs = theirs(&ours_text, &latency_samples);

    let mut theirs_text = String::new();
    encode(&mut theirs_text, &theirs.registry).expect("encode");
    let ours_lines: BTreeSet<&str> = ours_text.lines().collect();
    let theirs_lines: BTreeSet<&str> = theirs_text.lines().collect();
    let differing = ours_lines.symmetric_difference(&theirs_lines).count();
    let only_ours: Vec<&&str> = ours_lines.difference(&theirs_lines).take(4).collect();
    let only_theirs: Vec<&&str> = theirs_lines.difference(&ours_lines).take(4).collect();

    let topic = |i: u64| &topics[i as usize % topics.len()];
    let sample = |i: u64| latency_samples[i as usize % latency_samples.len()];
    let rows = [
        (
            "counter inc",
            measure(runs, iterations, |_| ours.reconnected()),
            measure(runs, iterations, |_| {
                theirs.reconnects.inc();
            }),
        ),
        (
            "two gauges set",
            measure(runs, iterations, |i| {
                ours.set_in_flight(i as usize, i as usize * 100)
            }),
            measure(runs, iterations, |i| {
                theirs.in_flight_records.set(i as i64);
                theirs.in_flight_bytes.set(i as i64 * 100);
            }),
        ),
        (
            "histogram observe",
            measure(runs, iterations, |i| ours.observe_latency_micros(sample(i))),
            measure(runs, iterations, |i| {
                theirs.latency.observe(sample(i) as f64 / 1e6)
            }),
        ),
        (
            "per-topic counter inc",
            measure(runs, iterations, |i| ours.published(topic(i))),
            measure(runs, iterations, |i| {
                theirs
                    .published
                    .get_or_create(&[("topic", topic(i).clone())])
                    .inc();
            }),
        ),
        (
            "scrape (render / encode)",
            measure(runs, render_iterations, |_| {
                black_box(ours.render());
            }),
            measure(runs, render_iterations, |_| {
                let mut out = String::with_capacity(2048);
                encode(&mut out, &theirs.registry).expect("encode");
                black_box(out);
            }),
        ),
    ];
    let proc = measure(runs, render_iterations, |_| {
        black_box(read_proc());
    });

    println!(
        "iterations {iterations} (scrapes {render_iterations}), runs {runs} (medians), topics {topic_count}; ratio = ours / theirs"
    );
    println!(
        "{:<26} {:>10} {:>10} {:>7} {:>12} {:>12} {:>9} {:>9}",
        "operation", "ours ns", "theirs ns", "ratio", "ours B", "theirs B", "ours al", "their al"
    );
    for (what, o, t) in rows {
        println!(
            "{what:<26} {:>10.1} {:>10.1} {:>7.2} {:>12.1} {:>12.1} {:>9.2} {:>9.2}",
            o.ns,
            t.ns,
            o.ns / t.ns,
            o.bytes,
            t.bytes,
            o.allocs,
            t.allocs
        );
        if what.starts_with("scrape") {
            let enc = o.ns - proc.ns;
            println!(
                "{:<26} {:>10.1} {:>10.1} {:>7.2} {:>12.1} {:>12.1} {:>9.2} {:>9.2}",
                "  scrape less /proc reads",
                enc,
                t.ns,
                enc / t.ns,
                o.bytes - proc.bytes,
                t.bytes,
                o.allocs - proc.allocs,
                t.allocs
            );
            println!(
                "  (/proc reads alone: {:.1} ns, {:.0} B)",
                proc.ns, proc.bytes
            );
        }
    }
    println!(
        "exposition: ours {} bytes / {} lines, theirs {} bytes / {} lines; lines in one and not the other: {differing}",
        ours_text.len(),
        ours_text.lines().count(),
        theirs_text.len(),
        theirs_text.lines().count()
    );
    println!("  e.g. only ours:   {only_ours:?}");
    println!("  e.g. only theirs: {only_theirs:?}");
}
