//! A JSON syntax check (RFC 8259) for payloads stored in `text`-like columns.
//!
//! `json`/`jsonb` columns are checked by PostgreSQL itself; a `text` payload column
//! is not, and a consumer that gets a non-JSON value has no way to tell the relay.
//! This module only answers "is this one well-formed JSON text, and if not, where
//! does it break" — it builds nothing.
//!
//! Invariants: no recursion (nesting depth is bounded only by the input length:
//! 10,000-deep arrays cost 10,000 bits of stack-free state, not 10,000 frames); no
//! allocation for nesting up to 128 levels; linear time; never panics on any input.
//! Unpaired `\uD800`-style escapes are accepted, as PostgreSQL's `json` type does.

/// Where and why a payload is not JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not valid JSON at byte {offset}: {what}")]
pub struct JsonError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What was expected or found.
    pub what: &'static str,
}

/// Open containers, one bit each (1 = object, 0 = array).
struct Nesting {
    inline: u128,
    spill: Vec<u64>,
    depth: usize,
}

impl Nesting {
    const INLINE: usize = 128;

    fn new() -> Self {
        Self {
            inline: 0,
            spill: Vec::new(),
            depth: 0,
        }
    }

    fn push(&mut self, object: bool) {
        let d = self.depth;
        if d < Self::INLINE {
            let bit = 1u128 << d;
            self.inline = if object {
                self.inline | bit
            } else {
                self.inline & !bit
            };
        } else {
            let (word, bit) = ((d - Self::INLINE) / 64, 1u64 << ((d - Self::INLINE) % 64));
            if word == self.spill.len() {
                self.spill.push(0);
            }
            let w = &mut self.spill[word];
            *w = if object { *w | bit } else { *w & !bit };
        }
        self.depth += 1;
    }

    /// The innermost open container: `Some(true)` object, `Some(false)` array.
    fn top(&self) -> Option<bool> {
        let d = self.depth.checked_sub(1)?;
        Some(if d < Self::INLINE {
            self.inline & (1u128 << d) != 0
        } else {
            let (word, bit) = ((d - Self::INLINE) / 64, 1u64 << ((d - Self::INLINE) % 64));
            self.spill[word] & bit != 0
        })
    }

    fn pop(&mut self) {
        self.depth -= 1;
    }
}

/// Check that `input` is exactly one JSON value, optionally surrounded by whitespace.
pub fn validate(input: &[u8]) -> Result<(), JsonError> {
    if let Err(e) = std::str::from_utf8(input) {
        return Err(JsonError {
            offset: e.valid_up_to(),
            what: "invalid UTF-8",
        });
    }
    Checker {
        input,
        pos: 0,
        nesting: Nesting::new(),
    }
    .run()
}

struct Checker<'a> {
    input: &'a [u8],
    pos: usize,
    nesting: Nesting,
}

impl Checker<'_> {
    fn fail<T>(&self, what: &'static str) -> Result<T, JsonError> {
        Err(JsonError {
            offset: self.pos,
            what,
        })
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn run(mut self) -> Result<(), JsonError> {
        // Each turn reads one value (opening containers as it goes), then closes
        // containers and consumes separators until the next value is due.
        loop {
            self.value()?;
            loop {
                self.skip_ws();
                match self.nesting.top() {
                    None => {
                        return if self.pos == self.input.len() {
                            Ok(())
                        } else {
                            self.fail("trailing characters after the JSON value")
                        };
                    }
                    Some(object) => match (self.peek(), object) {
                        (Some(b','), true) => {
                            self.pos += 1;
                            self.key()?;
                            break;
                        }
                        (Some(b','), false) => {
                            self.pos += 1;
                            break;
                        }
                        (Some(b'}'), true) | (Some(b']'), false) => {
                            self.pos += 1;
                            self.nesting.pop();
                        }
                        (None, _) => return self.fail("unexpected end of input"),
                        (_, true) => return self.fail("expected ',' or '}'"),
                        (_, false) => return self.fail("expected ',' or ']'"),
                    },
                }
            }
        }
    }

    /// One value; an opened container that is empty is closed here too, so on
    /// return the next token is a separator, a closer or the end.
    fn value(&mut self) -> Result<(), JsonError> {
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'{') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        return Ok(());
                    }
                    self.nesting.push(true);
                    self.key()?;
                    // and now the member's value
                }
                Some(b'[') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        return Ok(());
                    }
                    self.nesting.push(false);
                    // and now the first element
                }
                Some(b'"') => return self.string(),
                Some(b't') => return self.literal(b"true"),
                Some(b'f') => return self.literal(b"false"),
                Some(b'n') => return self.literal(b"null"),
                Some(b'-' | b'0'..=b'9') => return self.number(),
                None => return self.fail("unexpected end of input"),
                Some(_) => return self.fail("expected a JSON value"),
            }
        }
    }

    /// `"key" :` inside an object.
    fn key(&mut self) -> Result<(), JsonError> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return self.fail("expected a string key");
        }
        self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return self.fail("expected ':'");
        }
        self.pos += 1;
        Ok(())
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), JsonError> {
        if self.input[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            self.fail("invalid literal (expected true, false or null)")
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<(), JsonError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.fail("expected a digit"),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return self.fail("expected a digit after '.'");
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return self.fail("expected a digit in the exponent");
            }
        }
        Ok(())
    }

    /// A string starting at the opening quote. UTF-8 was checked up front.
    fn string(&mut self) -> Result<(), JsonError> {
        self.pos += 1;
        loop {
            let rest = &self.input[self.pos..];
            let Some(i) = rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
            else {
                self.pos = self.input.len();
                return self.fail("unterminated string");
            };
            self.pos += i;
            match self.input[self.pos] {
                b'"' => {
                    self.pos += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.pos += 1
                        }
                        Some(b'u') => {
                            let hex = self.input.get(self.pos + 1..self.pos + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return self.fail("expected 4 hex digits after \\u");
                            }
                            self.pos += 5;
                        }
                        _ => return self.fail("invalid escape"),
                    }
                }
                _ => return self.fail("control character in string"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_json_texts() {
        for ok in [
            "{}",
            "[]",
            " {\"a\": [1, -2.5e+3, 0, 0.0, true, false, null, \"x\\u00e9\\n\"]} ",
            "\"just a string\"",
            "12",
            "-0",
            "[[[]],{}]",
            "{\"a\":{\"b\":{}},\"c\":[{}]}",
            "\"\\ud800\"",
            "\"é ✓ 😀\"",
        ] {
            assert_eq!(validate(ok.as_bytes()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_with_a_position() {
        for (bad, offset) in [
            ("", 0),
            ("{", 1),
            ("{\"a\"}", 4),
            ("{\"a\":1,}", 7),
            ("[1,]", 3),
            ("[1 2]", 3),
            ("01", 1),
            ("1.", 2),
            ("1e", 2),
            ("-", 1),
            ("tru", 0),
            ("\"a", 2),
            ("\"\\x\"", 2),
            ("\"\\u12\"", 2),
            ("\"a\tb\"", 2),
            ("{} {}", 3),
            ("{1:2}", 1),
            ("[}", 1),
            ("{]", 1),
            ("plain text", 0),
        ] {
            let err = validate(bad.as_bytes()).unwrap_err();
            assert_eq!(err.offset, offset, "{bad:?}: {err}");
        }
    }

    #[test]
    fn invalid_utf8_and_nul_are_refused() {
        assert_eq!(validate(b"\"\xff\"").unwrap_err().what, "invalid UTF-8");
        assert_eq!(
            validate(b"\"a\0\"").unwrap_err().what,
            "control character in string"
        );
    }

    #[test]
    fn deep_nesting_is_fine_without_recursion() {
        let depth = 100_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(validate(text.as_bytes()), Ok(()));
        let objects = format!("{}1{}", "{\"k\":".repeat(depth), "}".repeat(depth));
        assert_eq!(validate(objects.as_bytes()), Ok(()));
        // Mixed containers deeper than the inline part must close with the right kind.
        let mixed = format!("{}0{}", "[{\"k\":".repeat(depth), "}]".repeat(depth));
        assert_eq!(validate(mixed.as_bytes()), Ok(()));
        let wrong = format!("{}0{}", "[{\"k\":".repeat(300), "]}".repeat(300));
        assert!(validate(wrong.as_bytes()).is_err());
        let unclosed = "[".repeat(depth);
        assert!(validate(unclosed.as_bytes()).is_err());
    }

    /// The oracle: is `bytes` one JSON text, as serde_json reads it *without* building
    /// a value. Parsing into `serde_json::Value` would be the wrong oracle: it turns
    /// every number into an `f64` and refuses those beyond its range (`1e310`),
    /// which RFC 8259 §6 allows and PostgreSQL's `json`/`jsonb` accept — a limit of
    /// that representation, not of the grammar. `RawValue` checks the grammar only,
    /// and still refuses invalid UTF-8 (the whole text is checked as a `str`), which
    /// `IgnoredAny` does not.
    fn serde_json_accepts(bytes: &[u8]) -> bool {
        serde_json::from_slice::<Box<serde_json::value::RawValue>>(bytes).is_ok()
    }

    /// Regression (proptest, fresh clone): `1e310` failed `agrees_with_serde_json`
    /// because the oracle parsed into `serde_json::Value`, which refuses numbers
    /// beyond `f64`. PostgreSQL's `json` and `jsonb` accept all of these.
    #[test]
    fn numbers_beyond_f64_are_json() {
        for number in ["1e310", "-1e310", "1e-400", "[1e310, -1e310, 1e-400]"] {
            assert_eq!(validate(number.as_bytes()), Ok(()), "{number}");
            assert!(serde_json_accepts(number.as_bytes()), "oracle: {number}");
        }
    }

    /// Regression (proptest seed `cc 37c53d4f…`, once in proptest-regressions/, now
    /// here so it runs every time): a lone UTF-8 lead byte in a string, which
    /// serde_json's `IgnoredAny` let through.
    #[test]
    fn lone_utf8_lead_byte_in_a_string_is_refused() {
        let bytes = [b'"', 0xc3, b'"'];
        assert!(validate(&bytes).is_err());
        assert!(!serde_json_accepts(&bytes), "oracle");
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            ".*".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
                prop::collection::btree_map(".*", inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Everything serde_json writes (compact or pretty) is accepted.
        #[test]
        fn serialized_values_are_valid(v in arb_json()) {
            prop_assert_eq!(validate(serde_json::to_string(&v).unwrap().as_bytes()), Ok(()));
            prop_assert_eq!(validate(serde_json::to_string_pretty(&v).unwrap().as_bytes()), Ok(()));
        }

        /// On arbitrary bytes the verdict agrees with serde_json's syntax check
        /// ([`serde_json_accepts`]; it stops at 128 levels, such inputs are not
        /// generated at this size).
        #[test]
        fn agrees_with_serde_json(bytes in prop::collection::vec(
            prop::sample::select(b" \t\n{}[],:\"\\/-+.0123456789eEtrufalsnbx\xc3\xa9\xff".to_vec()), 0..40)
        ) {
            let ours = validate(&bytes).is_ok();
            prop_assert_eq!(ours, serde_json_accepts(&bytes), "{:?}", String::from_utf8_lossy(&bytes));
        }
    }
}
