//! The password file (`~/.pgpass`): where it is and which line's password applies.
//!
//! Consulted only when neither the string nor `PGPASSWORD` gives a password. The file is
//! named by the `passfile` keyword, else `PGPASSFILE`, else `$HOME/.pgpass`
//! (`%APPDATA%\postgresql\pgpass.conf` on Windows). Lines are
//! `hostname:port:database:username:password`; `*` matches anything in the first four
//! fields, `\:` and `\\` escape, `#` starts a comment, the first matching line wins.
//!
//! Invariants: a missing or unreadable file means "no password", never an error; each
//! host gets the password of its own first matching line (as libpq, which looks the
//! file up for every host it tries); a Unix socket
//! in one of the usual default directories matches `localhost`. Unlike libpq, the
//! file's permissions are not checked (see [`ConnInfo::parse`](super::ConnInfo::parse)).

use std::path::{Path, PathBuf};

use super::resolve::Env;
use super::{Host, HostAddr, DEFAULT_HOST};
use crate::secret::Secret;

/// Unix socket directories treated as "the default one", so that they match a
/// `localhost` entry in the password file as libpq's compiled-in directory does.
const DEFAULT_SOCKET_DIRS: &[&str] = &["/tmp", "/var/run/postgresql", "/run/postgresql"];

/// Set each host's [`HostAddr::passfile_password`] from the password file, for this
/// database and user. `passfile` is the keyword's value from the string.
pub(super) fn fill(
    passfile: Option<String>,
    env: Env,
    hosts: &mut [HostAddr],
    dbname: &str,
    user: &str,
) {
    let file = passfile
        .or_else(|| env.var("PGPASSFILE"))
        .map(PathBuf::from)
        .or_else(|| default_passfile(env));
    let Some(contents) = file.as_deref().and_then(read_passfile) else {
        return;
    };
    for h in hosts {
        h.passfile_password = password_for_host(&contents, h, dbname, user).map(Secret::from);
    }
}

fn default_passfile(env: Env) -> Option<PathBuf> {
    if cfg!(windows) {
        env.var("APPDATA")
            .map(|dir| Path::new(&dir).join("postgresql").join("pgpass.conf"))
    } else {
        env.var("HOME").map(|home| Path::new(&home).join(".pgpass"))
    }
}

/// The file's contents; any failure to read it means "no password from the file".
fn read_passfile(file: &Path) -> Option<Vec<u8>> {
    if !std::fs::metadata(file).ok()?.is_file() {
        return None;
    }
    std::fs::read(file).ok()
}

/// The password of the first line matching this host, if any.
fn password_for_host(contents: &[u8], h: &HostAddr, dbname: &str, user: &str) -> Option<String> {
    let host = match &h.host {
        Host::Tcp(name) => name.clone(),
        Host::Unix(dir) if DEFAULT_SOCKET_DIRS.iter().any(|d| dir == Path::new(d)) => {
            DEFAULT_HOST.to_owned()
        }
        Host::Unix(dir) => dir.to_string_lossy().into_owned(),
    };
    pgpass_lookup(contents, &host, &h.port.to_string(), dbname, user)
}

/// The password of the first line of a password file matching the four values.
/// An empty password on the matching line means none.
fn pgpass_lookup(
    contents: &[u8],
    host: &str,
    port: &str,
    dbname: &str,
    user: &str,
) -> Option<String> {
    contents
        .split(|b| *b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .find_map(|line| {
            let mut rest = line;
            for wanted in [host, port, dbname, user] {
                rest = pgpass_field_matches(rest, wanted)?;
            }
            Some(unescape(rest))
        })
        .filter(|password| !password.is_empty())
}

/// If the first field of `line` is `*` or equals `wanted` once unescaped, the rest of
/// the line after its `:`.
fn pgpass_field_matches<'a>(line: &'a str, wanted: &str) -> Option<&'a str> {
    if let Some(rest) = line.strip_prefix("*:") {
        return Some(rest);
    }
    let mut field = String::new();
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => field.push(chars.next()?.1),
            ':' => return (field == wanted).then(|| &line[i + 1..]),
            c => field.push(c),
        }
    }
    None
}

/// Drop each escaping backslash (a trailing lone backslash stays).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(chars.next().unwrap_or('\\'));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::env_of;
    use super::super::ConnInfo;
    use super::*;

    /// A file in the temp directory removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("pgoutbox-conninfo-{}-{name}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }

        fn path(&self) -> &str {
            self.0.to_str().unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    const PGPASS: &str = "# hostname:port:database:username:password\n\
                          \n\
                          other:*:*:*:wrong\n\
                          db\\:weird:5432:*:app:colon\n\
                          *:5433:shop:app:pa\\:ss\\\\word\n\
                          localhost:5432:*:sock:via-socket\r\n\
                          /srv/pg:5432:*:sock:via-dir\n\
                          \\*:*:*:*:literal-star\n\
                          *:*:*:*:fallback\n";

    /// The password the first host would log in with.
    fn pw_of(c: &ConnInfo) -> Option<String> {
        c.password_for(&c.hosts[0]).map(|p| p.expose().to_owned())
    }

    #[test]
    fn pgpass_lookup_with_wildcards_and_escapes() {
        let file = TempFile::new("pgpass-main", PGPASS);
        let env = env_of(&[("PGPASSFILE", file.path())]);
        let pw = |s: &str| {
            let c = ConnInfo::parse_with_env(s, &env).unwrap();
            c.password_for(&c.hosts[0]).map(|p| p.expose().to_owned())
        };
        assert_eq!(
            pw("host=db port=5433 dbname=shop user=app").as_deref(),
            Some(r"pa:ss\word")
        );
        assert_eq!(pw(r"host=db:weird user=app").as_deref(), Some("colon"));
        assert_eq!(pw("host=other").as_deref(), Some("wrong"));
        assert_eq!(pw("host=/tmp user=sock").as_deref(), Some("via-socket"));
        assert_eq!(pw("host=/srv/pg user=sock").as_deref(), Some("via-dir"));
        assert_eq!(pw("host=*").as_deref(), Some("literal-star"));
        assert_eq!(pw("host=elsewhere").as_deref(), Some("fallback"));
        // Each host has its own line (libpq looks the file up per host).
        let hosts = TempFile::new("pgpass-hosts", "h2:*:*:*:second\nh3:*:*:*:third\n");
        let c = ConnInfo::parse_with_env("host=h1,h3,h2", &env_of(&[("PGPASSFILE", hosts.path())]))
            .unwrap();
        let per_host: Vec<Option<&str>> = c
            .hosts
            .iter()
            .map(|h| c.password_for(h).map(Secret::expose))
            .collect();
        assert_eq!(per_host, [None, Some("third"), Some("second")]);
        assert_eq!(c.password, None);
        assert_eq!(c.for_host(&c.hosts[2]).password.unwrap().expose(), "second");
        // hostaddr without host: the address is the name looked up.
        let addr = TempFile::new("pgpass-addr", "10.0.0.7:*:*:*:by-address\n");
        let c =
            ConnInfo::parse_with_env("hostaddr=10.0.0.7", &env_of(&[("PGPASSFILE", addr.path())]))
                .unwrap();
        assert_eq!(c.password_for(&c.hosts[0]).unwrap().expose(), "by-address");
        // A password given otherwise wins; the passfile keyword overrides PGPASSFILE.
        assert_eq!(pw("host=other password=given").as_deref(), Some("given"));
        let with_pgpassword = env_of(&[("PGPASSFILE", file.path()), ("PGPASSWORD", "envpw")]);
        let c = ConnInfo::parse_with_env("host=other", &with_pgpassword).unwrap();
        assert_eq!(c.password.unwrap().expose(), "envpw");
        let other = TempFile::new("pgpass-other", "*:*:*:*:from-keyword\n");
        let c = ConnInfo::parse_with_env(&format!("passfile='{}'", other.path()), &env).unwrap();
        assert_eq!(pw_of(&c).as_deref(), Some("from-keyword"));
    }

    #[test]
    fn pgpass_default_location_and_missing_file() {
        let home =
            std::env::temp_dir().join(format!("pgoutbox-conninfo-home-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join(".pgpass"), "*:*:*:app:from-home\n").unwrap();
        let env = env_of(&[("HOME", home.to_str().unwrap())]);
        let c = ConnInfo::parse_with_env("user=app", &env).unwrap();
        assert_eq!(pw_of(&c).as_deref(), Some("from-home"));
        let c = ConnInfo::parse_with_env("user=other", &env).unwrap();
        assert_eq!(pw_of(&c), None);
        std::fs::remove_dir_all(&home).unwrap();
        // Missing files and directories are ignored.
        let c = ConnInfo::parse_with_env("user=app", &env).unwrap();
        assert_eq!(pw_of(&c), None);
        let dir = std::env::temp_dir();
        let env = env_of(&[("PGPASSFILE", dir.to_str().unwrap())]);
        assert_eq!(pw_of(&ConnInfo::parse_with_env("", &env).unwrap()), None);
    }

    #[test]
    fn pgpass_line_matching() {
        let c = b"a:1:d:u\nshort:1:d\n#a:1:d:u:commented\na:1:d:u:\na:1:d:u:ok:with:colons\n";
        assert_eq!(
            pgpass_lookup(c, "a", "1", "d", "u"),
            None,
            "first match is empty"
        );
        let c = b"a:1:d:u\nshort:1:d\na:1:d:u:ok:with:colons\n";
        assert_eq!(
            pgpass_lookup(c, "a", "1", "d", "u").as_deref(),
            Some("ok:with:colons")
        );
        assert_eq!(pgpass_lookup(b"#a:1:d:u:x\n", "#a", "1", "d", "u"), None);
        assert_eq!(
            pgpass_lookup(b"a:1:d:u:trail\\", "a", "1", "d", "u").as_deref(),
            Some("trail\\")
        );
    }
}
