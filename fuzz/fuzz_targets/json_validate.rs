//! Differential fuzzing of the payload JSON check: on any input it never panics,
//! and its verdict agrees with serde_json wherever serde_json can judge (serde_json
//! stops at 128 levels of nesting, which the check must not; there it is skipped).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgoutbox::outbox::json::validate;

fuzz_target!(|data: &[u8]| {
    let ours = validate(data).is_ok();
    match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(_) => assert!(ours, "serde_json accepts what the check refuses"),
        Err(e) if e.to_string().contains("recursion limit") => {}
        // serde_json refuses unpaired surrogate escapes, which PostgreSQL's json
        // type (and so the check) accepts.
        Err(e) if e.to_string().contains("surrogate") => {}
        // …and numbers beyond f64 (`1e999`) are legal JSON text that serde_json
        // refuses to represent.
        Err(e) if e.to_string().contains("number out of range") => {}
        Err(_) => assert!(!ours, "the check accepts what serde_json refuses"),
    }
});
