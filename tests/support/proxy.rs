//! A TCP proxy the tests control, to cut a link without touching the servers behind
//! it (tansu keeps its data in memory, so stopping it would wipe the topics).
//!
//! `down()` closes every proxied connection and makes new ones close right after
//! accept (the client sees the peer vanish, as when a broker dies); `up()` resumes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A running proxy from `port` to `target`.
pub struct Proxy {
    pub port: u16,
    down: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
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
        let down = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Mutex::new(Vec::new()));
        let (down2, live2) = (down.clone(), live.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if down2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    // Check the flag again under the lock `down` drains with: a
                    // connection accepted while it ran must not escape the cut.
                    let mut live = live2.lock().unwrap();
                    if down2.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        let _ = server.shutdown(Shutdown::Both);
                        continue;
                    }
                    live.push(client.try_clone().unwrap());
                    live.push(server.try_clone().unwrap());
                }
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Proxy { port, down, live }
    }

    /// Cut every connection and refuse new ones.
    pub fn down(&self) {
        let mut live = self.live.lock().unwrap();
        self.down.store(true, Ordering::SeqCst);
        for s in live.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Accept connections again.
    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
