//! [`reaches_a_broker`]: whether a client gets an answer from any broker within a
//! timeout, asking for as little as the protocol allows.
//!
//! `fetch_metadata(None, …)` asks for every topic of the cluster: on a cluster of
//! thousands of topics that is megabytes for the broker to assemble and for the
//! relay to parse, every probe, from every relay. librdkafka's DescribeCluster
//! sends a Metadata request for the brokers only (an empty topic list, Metadata v1
//! and later), whose size does not grow with the cluster, that names no topic (so
//! the broker can create none) and that adds no topic to the client's own
//! metadata refreshes.
//!
//! Invariants: every handle created here (options, reply queue, result event) is
//! destroyed before returning. A request still outstanding when the wait times out
//! is librdkafka's to finish: its reply queue is reference counted, and a reply to a
//! destroyed queue is dropped.

use std::ffi::c_char;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::client::Client;
use rdkafka::ClientContext;

/// Ask `client`'s brokers to describe the cluster; `true` when one answered
/// without error within `timeout`. Blocks the calling thread for at most about
/// `timeout`.
pub fn reaches_a_broker<C: ClientContext>(client: &Client<C>, timeout: Duration) -> bool {
    let ms = i32::try_from(timeout.as_millis())
        .unwrap_or(i32::MAX)
        .max(1);
    let mut errstr: [c_char; 256] = [0; 256];
    // SAFETY: `native_ptr` is a live client for the whole call. The options and the
    // queue are created here, used only here and destroyed once; the event returned
    // by `rd_kafka_queue_poll` (if any) is ours to destroy.
    unsafe {
        let rk = client.native_ptr();
        let options = rdsys::rd_kafka_AdminOptions_new(
            rk,
            rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER,
        );
        if options.is_null() {
            return false;
        }
        // Fails only for a value past an hour: the request then keeps librdkafka's
        // default timeout, and the wait below still ends at `timeout`.
        rdsys::rd_kafka_AdminOptions_set_request_timeout(
            options,
            ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = rdsys::rd_kafka_queue_new(rk);
        rdsys::rd_kafka_DescribeCluster(rk, options, queue);
        let event = rdsys::rd_kafka_queue_poll(queue, ms);
        let answered = !event.is_null()
            && rdsys::rd_kafka_event_error(event)
                == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
        if !event.is_null() {
            rdsys::rd_kafka_event_destroy(event);
        }
        rdsys::rd_kafka_queue_destroy(queue);
        rdsys::rd_kafka_AdminOptions_destroy(options);
        answered
    }
}

/// A broker that answers is reached: see the integration tests with a real broker
/// (`run::metrics_show_progress_and_readiness_follows_the_broker`; librdkafka's mock
/// cluster does not answer DescribeCluster).
#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::producer::{BaseProducer, Producer};
    use rdkafka::ClientConfig;

    fn producer(config: &[(&str, &str)]) -> BaseProducer {
        let mut c = ClientConfig::new();
        for (k, v) in config {
            c.set(*k, *v);
        }
        c.create().unwrap()
    }

    #[test]
    fn no_broker_listening_is_not_reached_within_the_timeout() {
        // Port 1 on loopback: connections are refused at once, retried until the
        // timeout (a probe that ignored it would hang this test, not pass it).
        let p = producer(&[("bootstrap.servers", "127.0.0.1:1"), ("log_level", "0")]);
        assert!(!reaches_a_broker(p.client(), Duration::from_millis(300)));
    }
}
