//! Fuzz the pgoutput decoder: arbitrary bytes must decode or fail, never panic.
//! The first input byte selects "inside a streamed transaction" (xid prefixes), the
//! rest is one pgoutput message; a successful decode must re-encode to the same bytes.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use pgoutbox::pg::source::pgoutput::{decode_message, encode::encode, Decoder};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else { return };
    let streamed = mode & 1 == 1;
    let bytes = Bytes::copy_from_slice(body);
    if let Ok(message) = decode_message(&bytes, streamed) {
        // Round trip: what decodes must encode back to the same message.
        let again = decode_message(&encode(&message, streamed), streamed)
            .expect("re-encoded message must decode");
        assert_eq!(again, message);
    }
    // The stateful decoder over a sequence: split the input on a marker byte.
    let mut decoder = Decoder::new();
    for chunk in body.split(|&b| b == 0xFF) {
        let _ = decoder.decode(Bytes::copy_from_slice(chunk));
    }
});
