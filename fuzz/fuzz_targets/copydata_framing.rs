//! Fuzz the backend framing and the replication CopyData layer: a byte stream split
//! into frames (whatever the chunking), each CopyData payload parsed as XLogData or
//! keepalive, each XLogData body fed to the pgoutput decoder. Never panics, and never
//! allocates beyond the frame length cap.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgoutbox::pg::source::pgoutput::Decoder;
use pgoutbox::pg::source::protocol::{parse_copy_data, ReplicationMessage};
use pgoutbox::pg::client::frame::{parse_backend, Backend};
use postgres_protocol::message::backend::Message;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, stream)) = data.split_first() else { return };
    let chunk = usize::from(chunk).max(1);
    let mut buf = BytesMut::new();
    let mut decoder = Decoder::new();
    for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match parse_backend(&mut buf) {
                Ok(Some(Backend::Message(Message::CopyData(body)))) => {
                    if let Ok(ReplicationMessage::XLogData { data, .. }) =
                        parse_copy_data(body.into_bytes())
                    {
                        let _ = decoder.decode(data);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
