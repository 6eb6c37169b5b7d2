//! A TCP proxy the tests control, to break a link without touching the servers
//! behind it (tansu keeps its data in memory, so stopping it would wipe the topics).
//!
//! Faults, each on every proxied connection:
//! - [`Proxy::down`] / [`Proxy::up`]: close every connection with a FIN and close new
//!   ones right after accept (the peer vanishes, as when a server dies); resume.
//! - [`Proxy::reset`]: abort every live connection with an RST (`SO_LINGER` 0, then
//!   close); new connections are accepted as usual.
//! - [`Proxy::blackhole`]: stop forwarding in both directions while the sockets stay
//!   open — no FIN, no RST, no byte; new connections are accepted but just as silent.
//!   Turning it off forwards what was held, in order (a healed partition).
//! - [`Proxy::blackhole_live`]: black-hole the connections open now, for good, while
//!   new ones work (a NAT or load balancer that silently forgot a flow).
//! - [`Proxy::latency`]: deliver every chunk `d` after it was read, in order.
//!
//! Design: per connection and direction, a reader thread stamps each chunk with the
//! time it was read and hands it over a bounded channel to a writer thread, which
//! waits out the latency and any black-hole before writing. Bytes are never dropped
//! or reordered; when the writer holds, the channel and then the kernel buffers
//! fill and the sender blocks, as on a real stalled path. An EOF travels the same
//! way, so a FIN is forwarded only after the bytes before it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often a held writer looks at the fault switches again.
const POLL: Duration = Duration::from_millis(10);
/// Chunks buffered per direction before the reader stops reading.
const CHANNEL_CHUNKS: usize = 64;

/// Switches shared by the proxy and its connections.
#[derive(Default)]
struct Faults {
    down: AtomicBool,
    blackhole: AtomicBool,
    latency_us: AtomicU64,
}

/// One proxied connection: both sockets, shared by its four threads. The sockets
/// close (FIN, or RST once `abort` set SO_LINGER 0) when the last thread lets go.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    /// Black-holed for good ([`Proxy::blackhole_live`]).
    held: AtomicBool,
    /// Being reset: threads stop without forwarding anything more.
    aborted: AtomicBool,
}

impl Conn {
    /// Abort: RST on both sides once every thread has dropped its handle. Shutting
    /// down the read side wakes the readers blocked in `read` without sending a FIN.
    fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        for s in [&self.client, &self.server] {
            let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
            let _ = s.shutdown(Shutdown::Read);
        }
    }

    fn aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

/// What a reader hands to its writer.
enum Chunk {
    Data(Instant, Vec<u8>),
    Eof,
}

/// A running proxy from `port` to `127.0.0.1:target`.
pub struct Proxy {
    pub port: u16,
    faults: Arc<Faults>,
    live: Arc<Mutex<Vec<Weak<Conn>>>>,
}

impl Proxy {
    /// Listen on a free loopback port, forwarding to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        Self::serve(listener, target)
    }

    /// Forward from an already-bound listener.
    pub fn serve(listener: TcpListener, target: u16) -> Proxy {
        let port = listener.local_addr().unwrap().port();
        let faults = Arc::new(Faults::default());
        let live: Arc<Mutex<Vec<Weak<Conn>>>> = Arc::new(Mutex::new(Vec::new()));
        let (faults2, live2) = (faults.clone(), live.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if faults2.down.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let conn = Arc::new(Conn {
                    client,
                    server,
                    held: AtomicBool::new(false),
                    aborted: AtomicBool::new(false),
                });
                {
                    // Check the flag again under the lock `down` drains with: a
                    // connection accepted while it ran must not escape the cut.
                    let mut live = live2.lock().unwrap();
                    if faults2.down.load(Ordering::SeqCst) {
                        let _ = conn.client.shutdown(Shutdown::Both);
                        let _ = conn.server.shutdown(Shutdown::Both);
                        continue;
                    }
                    live.retain(|c| c.strong_count() > 0);
                    live.push(Arc::downgrade(&conn));
                }
                relay(conn.clone(), faults2.clone(), true);
                relay(conn, faults2.clone(), false);
            }
        });
        Proxy { port, faults, live }
    }

    fn live(&self) -> Vec<Arc<Conn>> {
        let mut live = self.live.lock().unwrap();
        live.retain(|c| c.strong_count() > 0);
        live.iter().filter_map(Weak::upgrade).collect()
    }

    /// Cut every connection (FIN both ways) and refuse new ones.
    pub fn down(&self) {
        // Set the flag under the lock the accept loop registers with, so a
        // connection accepted meanwhile is either cut here or refused there.
        let conns = {
            let mut live = self.live.lock().unwrap();
            self.faults.down.store(true, Ordering::SeqCst);
            live.retain(|c| c.strong_count() > 0);
            live.iter().filter_map(Weak::upgrade).collect::<Vec<_>>()
        };
        for conn in conns {
            let _ = conn.client.shutdown(Shutdown::Both);
            let _ = conn.server.shutdown(Shutdown::Both);
        }
    }

    /// Accept connections again.
    pub fn up(&self) {
        self.faults.down.store(false, Ordering::SeqCst);
    }

    /// Abort every live connection with an RST towards both ends; returns how many
    /// there were. New connections are accepted as usual.
    pub fn reset(&self) -> usize {
        let live = self.live();
        for conn in &live {
            conn.abort();
        }
        live.len()
    }

    /// Stop (`true`) or resume (`false`) forwarding on every connection, live or new.
    pub fn blackhole(&self, on: bool) {
        self.faults.blackhole.store(on, Ordering::SeqCst);
    }

    /// Black-hole the connections open now, for good; returns how many there were.
    /// Their ends see nothing more, not even a FIN, until they give up themselves.
    pub fn blackhole_live(&self) -> usize {
        let live = self.live();
        for conn in &live {
            conn.held.store(true, Ordering::SeqCst);
        }
        live.len()
    }

    /// Delay every forwarded chunk by `d` (zero to turn it off).
    pub fn latency(&self, d: Duration) {
        self.faults
            .latency_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }
}

/// Start the reader and writer of one direction (`upstream`: client → server).
fn relay(conn: Arc<Conn>, faults: Arc<Faults>, upstream: bool) {
    let (tx, rx) = sync_channel(CHANNEL_CHUNKS);
    let reader_conn = conn.clone();
    std::thread::spawn(move || read_side(&reader_conn, upstream, &tx));
    std::thread::spawn(move || write_side(&conn, &faults, upstream, &rx));
}

fn read_side(conn: &Conn, upstream: bool, tx: &SyncSender<Chunk>) {
    let mut from = if upstream { &conn.client } else { &conn.server };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if tx
                    .send(Chunk::Data(Instant::now(), buf[..n].to_vec()))
                    .is_err()
                {
                    return;
                }
            }
            // A reset by the peer: abort the other side too.
            Err(_) => {
                conn.abort();
                return;
            }
        }
    }
    let _ = tx.send(Chunk::Eof);
}

fn write_side(conn: &Conn, faults: &Faults, upstream: bool, rx: &Receiver<Chunk>) {
    let to = if upstream { &conn.server } else { &conn.client };
    while let Ok(chunk) = rx.recv() {
        // Hold while black-holed; forward after the latency has passed.
        let due = match &chunk {
            Chunk::Data(read_at, _) => {
                *read_at + Duration::from_micros(faults.latency_us.load(Ordering::SeqCst))
            }
            Chunk::Eof => Instant::now(),
        };
        loop {
            if conn.aborted() {
                return;
            }
            let holding =
                faults.blackhole.load(Ordering::SeqCst) || conn.held.load(Ordering::SeqCst);
            let now = Instant::now();
            if !holding && now >= due {
                break;
            }
            std::thread::sleep(if holding { POLL } else { (due - now).min(POLL) });
        }
        match chunk {
            Chunk::Data(_, bytes) => {
                if write_all(to, &bytes, conn).is_err() {
                    conn.abort();
                    return;
                }
            }
            Chunk::Eof => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
        }
    }
}

/// `write_all` that gives up when the connection is being reset (a blocked write
/// would otherwise keep the socket open).
fn write_all(mut to: &TcpStream, mut bytes: &[u8], conn: &Conn) -> std::io::Result<()> {
    to.set_write_timeout(Some(Duration::from_millis(100)))?;
    while !bytes.is_empty() {
        if conn.aborted() {
            return Err(std::io::ErrorKind::ConnectionAborted.into());
        }
        match to.write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
