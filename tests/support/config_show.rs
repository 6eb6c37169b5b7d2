//! `pgoutbox config show` read from tests: which value a setting takes from the
//! flag, the environment and the config file.

use super::{Pgoutbox, WAIT};

/// The `KEY = …` line `pgoutbox config show` prints for `args` (after a dummy
/// `--database-url`) and the environment `env`: where a setting's value came from
/// (flag > env > file > default).
pub fn config_show_line(args: &[&str], env: &[(&str, &str)], key: &str) -> String {
    let mut all = vec!["config", "show", "--database-url", "postgres://x@h/db"];
    all.extend_from_slice(args);
    let mut p = Pgoutbox::spawn_with_env(&all, env);
    let status = p.wait_exit(WAIT);
    assert!(status.success(), "{all:?}: {}", p.stderr());
    let out = p.stdout_so_far().join("\n");
    let prefix = format!("{key} = ");
    out.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {key} line: {out}"))
        .to_owned()
}
