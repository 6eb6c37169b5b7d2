//! What one thread wake-up costs on this machine, in CPU time: the unit every
//! live-rate figure of the relay is made of (a one-row transaction at a steady
//! rate wakes the relay's threads about four times: WAL in, hand-over to
//! librdkafka's broker thread, the broker's response, the delivery report).
//!
//! `cargo run --release --example wake_cost -- [ROUNDS] [GAP_US]`
//!
//! Two threads ping-pong one byte over a Unix socket pair; before each ping the
//! first sleeps `GAP_US` (default 1,000 µs, a 1,000/s trickle), so both threads are
//! idle when woken, as at a live rate. A round is three wake-ups from idle: the
//! sleeper's timer, the echo thread's read, the sleeper's read. Prints one JSON
//! line: the process's CPU time (user + system, `getrusage`) per wake-up, and the
//! same without the gap (a hot ping-pong, neither thread idles long) for scale.
//! A measurement aid for `bench/run.sh live`, never a pass/fail test.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// CPU time of the whole process so far (all threads), user + system.
fn cpu() -> Duration {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// CPU µs per wake-up over `rounds` ping-pongs, each after `gap` of sleep.
fn measure(rounds: u32, gap: Duration) -> f64 {
    let (mut near, mut far) = UnixStream::pair().expect("socket pair");
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8];
        while far.read_exact(&mut byte).is_ok() {
            if far.write_all(&byte).is_err() {
                break;
            }
        }
    });
    let mut byte = [0u8];
    let wakes_per_round = if gap.is_zero() { 2 } else { 3 };
    let start = cpu();
    for _ in 0..rounds {
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
        near.write_all(&byte).expect("ping");
        near.read_exact(&mut byte).expect("pong");
    }
    let spent = cpu() - start;
    drop(near);
    echo.join().expect("echo thread");
    spent.as_secs_f64() * 1e6 / f64::from(rounds * wakes_per_round)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: u32 = args.next().map_or(3_000, |a| a.parse().expect("ROUNDS"));
    let gap_us: u64 = args.next().map_or(1_000, |a| a.parse().expect("GAP_US"));
    let wall = Instant::now();
    let idle = measure(rounds, Duration::from_micros(gap_us));
    let hot = measure(rounds, Duration::ZERO);
    println!(
        "{{\"rounds\": {rounds}, \"gap_us\": {gap_us}, \"cpu_us_per_wake_from_idle\": {idle:.2}, \"cpu_us_per_wake_hot\": {hot:.2}, \"wall_s\": {:.2}}}",
        wall.elapsed().as_secs_f64()
    );
}
