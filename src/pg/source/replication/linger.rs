//! `--wal-linger`: at live rates, read the replication stream in batches instead of
//! waking once per transaction.
//!
//! With `synchronous_commit = on` every one-row transaction is a WAL flush of its
//! own, and the walsender sends it at once. A relay that reads whatever arrives wakes
//! once or twice per event, and each event it hands over wakes librdkafka's broker
//! thread (the record, then the response) and the relay again (the delivery report).
//! A wake-up costs 11–22 µs of CPU on the machines we measure on, against 3–8 µs of
//! work per event in a backlog. Lingering makes that one round of wake-ups per batch.
//!
//! ```text
//!  eager (low-water mark 1) ──read──▶ lingering until first read + linger
//!        ▲                            (low-water mark LINGER_LOWAT: the kernel does
//!        │                             not wake the task for less; that much is read
//!        │                             at once)
//!        └──── the linger is over: low-water mark back to 1; the kernel signals at
//!              once if anything arrived meanwhile (read it, linger again), else the
//!              task sleeps until something does
//! ```
//!
//! The first event after a quiet spell is read as it arrives; events that follow it
//! within the linger are read together when it is over, so an event waits at most
//! the linger, and only while events keep coming. Only a read that ended a
//! transaction (its last WAL message a Commit) starts a linger: a keepalive does not
//! hold back the event after it, and a transaction whose first messages arrived
//! alone is read to its end at once.
//!
//! Invariants:
//! - Lingering only delays reads; bytes are never dropped or reordered. The socket
//!   stays armed for the task throughout: an end of stream, an error, or
//!   [`LINGER_LOWAT`] bytes waiting wake it at once, so a backlog is read as fast
//!   as before, and the silence watchdog and keepalive replies work as before
//!   (a reply is at most one linger late).
//! - It works through the TCP socket's `SO_RCVLOWAT`: Linux signals readiness only
//!   past the mark, and lowering the mark signals at once when data waits
//!   (`tcp_set_rcvlowat`). Over a Unix socket, with a zero linger, or if the kernel
//!   refuses the option, the stream is read as it arrives.
//! - The mark is only ever [`LINGER_LOWAT`] or 1. [`LINGER_LOWAT`] (16 KiB) is a
//!   quarter of the smallest receive buffer Linux starts a TCP socket with (its
//!   default `tcp_rmem`, 128 KiB, holds 64 KiB of data), so raising the mark never
//!   makes the kernel grow the buffer or clamp the receive window.

use std::os::fd::RawFd;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The receive low-water mark while lingering: this many bytes waiting are read at
/// once instead of when the linger is over.
pub(super) const LINGER_LOWAT: i32 = 16 * 1024;

/// The lingering state of one stream (see the module docs).
pub(super) struct WalLinger {
    /// The TCP socket under the stream's transport; `None`: lingering is off.
    fd: Option<RawFd>,
    linger: Duration,
    /// Until when reads are gathered (`None`: eager, the mark is 1).
    until: Option<Instant>,
    timer: Pin<Box<Sleep>>,
}

impl WalLinger {
    /// Lingering for `linger` on socket `fd` (which must stay open as long as this
    /// lives); off with no socket or a zero `linger`.
    pub(super) fn new(fd: Option<RawFd>, linger: Duration) -> Self {
        Self {
            fd: fd.filter(|_| !linger.is_zero()),
            linger,
            until: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// Whether reads are being gathered now (the timer is armed).
    pub(super) fn lingering(&self) -> bool {
        self.until.is_some()
    }

    /// A read ended a transaction: gather what follows for the linger (counted from
    /// the first such read of a spell; reads during it do not extend it).
    pub(super) fn after_read(&mut self) {
        let Some(fd) = self.fd else { return };
        if self.until.is_some() {
            return;
        }
        if !self.set_lowat(fd, LINGER_LOWAT) {
            return;
        }
        let until = Instant::now() + self.linger;
        self.until = Some(until);
        self.timer.as_mut().reset(until);
    }

    /// Resolves when the linger is over (pending forever while not lingering).
    pub(super) async fn over(&mut self) {
        if self.until.is_none() {
            return std::future::pending().await;
        }
        self.timer.as_mut().await;
    }

    /// The linger is over: back to reading bytes as they arrive (anything that
    /// arrived meanwhile makes the socket readable at once).
    pub(super) fn end(&mut self) {
        self.until = None;
        if let Some(fd) = self.fd {
            self.set_lowat(fd, 1);
        }
    }

    /// Set the mark; on a refusal, turn lingering off for good (said once) and
    /// leave the mark as the kernel has it: the refused value was never applied,
    /// and 1 is the only other value ever set.
    fn set_lowat(&mut self, fd: RawFd, value: i32) -> bool {
        match set_rcvlowat(fd, value) {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(
                    error = %err,
                    "the kernel refused SO_RCVLOWAT on the replication socket; \
                     reading the stream as it arrives (--wal-linger has no effect)"
                );
                self.fd = None;
                self.until = None;
                false
            }
        }
    }
}

/// `setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, value)`.
fn set_rcvlowat(fd: RawFd, value: i32) -> std::io::Result<()> {
    // SAFETY: `fd` is the stream's open TCP socket (the stream task keeps its
    // transport alive as long as its `WalLinger`); the option value is a C int read
    // during the call only.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    /// The mark as the kernel holds it.
    fn rcvlowat(fd: RawFd) -> i32 {
        let mut value: i32 = 0;
        let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
        // SAFETY: a live socket; value and len are ours for the call.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut value as *mut i32).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        value
    }

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn a_read_raises_the_mark_until_the_linger_is_over() {
        let (client, _server) = pair();
        let fd = client.as_raw_fd();
        let mut linger = WalLinger::new(Some(fd), Duration::from_millis(2));
        assert!(!linger.lingering());
        assert_eq!(rcvlowat(fd), 1);
        linger.after_read();
        assert!(linger.lingering());
        assert_eq!(rcvlowat(fd), LINGER_LOWAT);
        // A second read within the linger does not extend it.
        let until = linger.until.unwrap();
        linger.after_read();
        assert_eq!(linger.until, Some(until));
        linger.over().await;
        assert!(tokio::time::Instant::now() >= until);
        linger.end();
        assert!(!linger.lingering());
        assert_eq!(rcvlowat(fd), 1);
    }

    #[test]
    fn off_without_a_socket_or_a_linger() {
        let (client, _server) = pair();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            for mut linger in [
                WalLinger::new(None, Duration::from_millis(2)),
                WalLinger::new(Some(client.as_raw_fd()), Duration::ZERO),
            ] {
                linger.after_read();
                assert!(!linger.lingering());
            }
        });
        assert_eq!(rcvlowat(client.as_raw_fd()), 1);
    }

    /// An edge-triggered epoll on `fd`, as tokio registers a socket: it reports an
    /// edge only when the kernel signals the socket, never a level.
    struct Edges(std::os::fd::OwnedFd);

    impl Edges {
        fn on(fd: RawFd) -> Self {
            // SAFETY: plain syscalls on descriptors of ours; the epoll fd is owned
            // from here on.
            unsafe {
                let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
                assert!(ep >= 0, "{}", std::io::Error::last_os_error());
                let mut event = libc::epoll_event {
                    events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                    u64: 0,
                };
                let rc = libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut event);
                assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
                Self(std::os::fd::FromRawFd::from_raw_fd(ep))
            }
        }

        /// Whether an edge came within `timeout_ms`.
        fn fired(&self, timeout_ms: i32) -> bool {
            let mut event = libc::epoll_event { events: 0, u64: 0 };
            // SAFETY: one event buffer of ours, for the call.
            let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), &mut event, 1, timeout_ms) };
            n == 1
        }
    }

    /// What the stream relies on, seen as tokio sees it (edge-triggered epoll):
    /// bytes under the mark raise no edge, yet a non-blocking read returns them;
    /// lowering the mark while bytes wait raises one at once (else the events of a
    /// linger would wait for the next arrival); bytes past the mark raise one.
    #[test]
    fn the_kernel_signals_past_the_mark_and_on_lowering_it() {
        let (mut client, mut server) = pair();
        let fd = client.as_raw_fd();
        client.set_nonblocking(true).unwrap();
        let edges = Edges::on(fd);
        set_rcvlowat(fd, LINGER_LOWAT).unwrap();
        server.write_all(&[7; 100]).unwrap();
        assert!(!edges.fired(300), "100 bytes under the mark raised an edge");
        set_rcvlowat(fd, 1).unwrap();
        assert!(
            edges.fired(0),
            "lowering the mark with bytes waiting raised no edge"
        );
        set_rcvlowat(fd, LINGER_LOWAT).unwrap();
        let mut buf = [0; 200];
        assert_eq!(client.read(&mut buf).unwrap(), 100, "a read under the mark");
        server.write_all(&[7; 10]).unwrap();
        assert!(!edges.fired(300), "10 bytes under the mark raised an edge");
        server.write_all(&[7; LINGER_LOWAT as usize]).unwrap();
        assert!(edges.fired(5_000), "a full mark raised no edge");
    }
}
