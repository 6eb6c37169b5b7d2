//! `Secret`: a string that must never be shown.
//!
//! Owns the one wrapper type for credentials (database passwords today). Invariant: a
//! secret never reaches a log line, an error message or a printed configuration. Its
//! `Debug` and `Display` both print `[redacted]`, so a struct holding a `Secret` can
//! derive `Debug` safely, and the value is only reachable through the explicitly named
//! [`Secret::expose`], which belongs at the point where the credential is actually
//! used (the authentication exchange), nowhere else.
//!
//! The type deliberately has no `Serialize`, no `Deref<Target = str>` and no
//! `AsRef<str>`, so it cannot slip into output by accident. Equality is a plain string
//! comparison (not constant-time); it exists for tests and configuration comparison,
//! not for checking credentials.

use std::fmt;

/// A credential whose text is hidden from `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Secret(String);

impl Secret {
    /// The secret text. Call this only where the credential is consumed, never to
    /// format it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_and_display_are_redacted() {
        let s = Secret::from("hunter2".to_owned());
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{s}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some([redacted])");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn equality_and_clone() {
        let a = Secret::from("x");
        assert_eq!(a.clone(), a);
        assert_ne!(a, Secret::from("y"));
    }
}
