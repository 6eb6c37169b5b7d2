//! [`QueueWakeup`]: librdkafka's main queue (delivery reports, client errors, log
//! lines) signals a [`Notify`] when it goes from empty to non-empty, so the relay's
//! own loop can serve it — no polling thread, no timer.
//!
//! ```text
//!  broker thread ─enqueue on empty queue─▶ wake() ─notify_one─▶ relay loop
//!                                                                 │ serve(): poll until empty
//!                                                                 ▼
//!                                                  ProducerContext::delivery → channel
//! ```
//!
//! Invariants: the callback is registered from [`QueueWakeup::new`] until
//! [`Drop`], and unregistered before the [`Notify`] it points to is freed (librdkafka
//! calls it under the queue's lock, and unregistering takes that lock, so no call is
//! running once `drop` returned); the queue handle is released before the producer
//! it belongs to is dropped — the owner keeps a `QueueWakeup` in a field declared
//! before the producer's. librdkafka signals only on the empty → non-empty edge:
//! whoever is woken must serve the queue until it is empty ([`QueueWakeup::pending`]).
//! A signal with nobody waiting is kept (a [`Notify`] permit), never lost.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdkafka::bindings as rdsys;
use rdkafka::client::Client;
use rdkafka::ClientContext;
use tokio::sync::Notify;

/// What the callback signals: a flag checked without touching librdkafka's
/// queue lock, and the task waiting for it.
struct Signal {
    /// An event landed on the empty queue since [`QueueWakeup::take`] last ran.
    raised: AtomicBool,
    notify: Notify,
}

/// The wake-up registration on one client's main queue.
pub struct QueueWakeup {
    /// Our own reference to the client's main queue (`rd_kafka_queue_get_main`).
    queue: *mut rdsys::rd_kafka_queue_t,
    signal: Arc<Signal>,
}

// SAFETY: librdkafka queue handles are thread-safe (every operation takes the
// queue's lock); the handle is only used for `rd_kafka_queue_length` and released
// once, in `drop`.
unsafe impl Send for QueueWakeup {}
// SAFETY: as above; `&self` only reads the queue length.
unsafe impl Sync for QueueWakeup {}

/// Called by librdkafka (on one of its threads, under the queue's lock) when an
/// event lands on the empty main queue. Must not block nor call into librdkafka.
unsafe extern "C" fn wake(_rk: *mut rdsys::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is `Arc::as_ptr` of the `Signal` that `QueueWakeup` keeps
    // alive until it unregistered this callback.
    let signal = unsafe { &*(opaque as *const Signal) };
    signal.raised.store(true, Ordering::Release);
    signal.notify.notify_one();
}

impl QueueWakeup {
    /// Register on `client`'s main queue.
    pub fn new<C: ClientContext>(client: &Client<C>) -> Self {
        // Raised from the start: events queued before the callback was registered
        // never signal (the queue was not empty when they came).
        let signal = Arc::new(Signal {
            raised: AtomicBool::new(true),
            notify: Notify::new(),
        });
        // SAFETY: `native_ptr` is a live client; the returned handle is ours to
        // destroy. The opaque pointer stays valid until `drop` unregisters.
        let queue = unsafe {
            let queue = rdsys::rd_kafka_queue_get_main(client.native_ptr());
            rdsys::rd_kafka_queue_cb_event_enable(
                queue,
                Some(wake),
                Arc::as_ptr(&signal) as *mut c_void,
            );
            queue
        };
        Self { queue, signal }
    }

    /// Events waiting on the queue (each may carry many delivery reports).
    pub fn pending(&self) -> usize {
        // SAFETY: the handle is live until `drop`.
        unsafe { rdsys::rd_kafka_queue_length(self.queue) }
    }

    /// Whether the queue was signalled since the last call (clears the flag): the
    /// caller must then serve it until [`QueueWakeup::pending`] is 0. Lock-free.
    pub fn take(&self) -> bool {
        self.signal.raised.swap(false, Ordering::AcqRel)
    }

    /// Signal again: the caller leaves events on the queue for a later turn.
    pub fn rearm(&self) {
        self.signal.raised.store(true, Ordering::Release);
        self.signal.notify.notify_one();
    }

    /// Resolves once an event landed on the empty queue since the last wake-up was
    /// taken (immediately if one is pending). Cancel-safe.
    pub async fn notified(&self) {
        self.signal.notify.notified().await
    }
}

impl Drop for QueueWakeup {
    fn drop(&mut self) {
        // SAFETY: unregister first (under the queue's lock: no call in progress
        // afterwards), then release our reference; `signal` is freed after this.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(self.queue, None, std::ptr::null_mut());
            rdsys::rd_kafka_queue_destroy(self.queue);
        }
    }
}
