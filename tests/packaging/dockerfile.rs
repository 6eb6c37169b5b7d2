//! The `Dockerfile`: a multi-stage build with the committed lock file, a final stage
//! that runs the binary as PID 1 under a non-root user, the binary copied from the
//! stage that built it, and `COPY` sources that exist and that `.dockerignore` keeps in
//! the build context.
//!
//! The file is parsed by `parse-dockerfile` (Docker's grammar: continuations, the
//! `escape` directive, exec and shell forms, flags such as `COPY --from`).
//! [`Stage`] reduces each stage to what the checks read; the one hand-written step is
//! [`shell_text`], which turns a shell-form command into the line the shell receives.

use std::collections::BTreeSet;
use std::path::PathBuf;

use parse_dockerfile::{Command, Flag, Instruction, Source, UnescapedString};

use super::dockerignore;
use super::{read, repo, BINARY_PATH};

/// One build stage, as the checks see it. Repeated instructions keep their order; for
/// the single-valued ones the last wins, as in Docker.
#[derive(Debug, Default)]
struct Stage {
    image: String,
    name: Option<String>,
    /// `RUN` commands (shell form as the shell receives it, exec form joined by spaces).
    runs: Vec<String>,
    user: Option<String>,
    workdir: Option<String>,
    stopsignal: Option<String>,
    /// `ENTRYPOINT`: the exec-form words, or the shell-form text as the error.
    entrypoint: Option<Result<Vec<String>, String>>,
    /// `COPY` and `ADD`, in order.
    copies: Vec<FileCopy>,
}

/// A `COPY` or `ADD` instruction.
#[derive(Debug, PartialEq)]
struct FileCopy {
    keyword: &'static str,
    /// The `--from` stage (or image), if any.
    from: Option<String>,
    sources: Vec<String>,
    dest: String,
}

/// The stages of a Dockerfile, in order.
fn dockerfile_stages(text: &str) -> Vec<Stage> {
    let dockerfile = parse_dockerfile::parse(text).unwrap_or_else(|e| panic!("Dockerfile: {e}"));
    let escape = dockerfile
        .parser_directives
        .escape
        .as_ref()
        .map_or('\\', |d| d.value.value);
    dockerfile
        .stages()
        .map(|parsed| {
            let mut stage = Stage {
                image: parsed.from.image.value.to_string(),
                name: parsed.from.as_.as_ref().map(|(_, n)| n.value.to_string()),
                ..Stage::default()
            };
            for instruction in parsed.instructions {
                stage.read(instruction, escape);
            }
            stage
        })
        .collect()
}

impl Stage {
    fn read(&mut self, instruction: &Instruction<'_>, escape: char) {
        let text = |s: &UnescapedString<'_>| Some(s.value.to_string());
        match instruction {
            Instruction::Run(run) => {
                let words = command(&run.arguments, escape).map(|words| words.join(" "));
                self.runs.push(words.unwrap_or_else(|shell| shell));
            }
            Instruction::User(user) => self.user = text(&user.arguments),
            Instruction::Workdir(dir) => self.workdir = text(&dir.arguments),
            Instruction::Stopsignal(signal) => self.stopsignal = text(&signal.arguments),
            Instruction::Entrypoint(entrypoint) => {
                self.entrypoint = Some(command(&entrypoint.arguments, escape));
            }
            Instruction::Copy(copy) => {
                self.copies
                    .push(FileCopy::new("COPY", &copy.options, &copy.src, &copy.dest));
            }
            Instruction::Add(add) => {
                self.copies
                    .push(FileCopy::new("ADD", &add.options, &add.src, &add.dest));
            }
            _ => {}
        }
    }
}

impl FileCopy {
    fn new(
        keyword: &'static str,
        options: &[Flag<'_>],
        sources: &[Source<'_>],
        dest: &UnescapedString<'_>,
    ) -> FileCopy {
        let from = options
            .iter()
            .find(|f| f.name.value == "from")
            .and_then(|f| f.value.as_ref())
            .map(|v| v.value.to_string());
        let sources = sources
            .iter()
            .map(|source| match source {
                Source::Path(path) => path.value.to_string(),
                _ => panic!("{keyword} from a here-document: not checked by these tests"),
            })
            .collect();
        FileCopy {
            keyword,
            from,
            sources,
            dest: dest.value.to_string(),
        }
    }
}

/// A `RUN`/`CMD`/`ENTRYPOINT` command: the exec-form words, or the shell-form text as
/// the error.
fn command(command: &Command<'_>, escape: char) -> Result<Vec<String>, String> {
    match command {
        Command::Exec(words) => Ok(words.value.iter().map(|w| w.value.to_string()).collect()),
        Command::Shell(raw) => Err(shell_text(raw.value, escape)),
        other => panic!("a command form these tests do not know: {other:?}"),
    }
}

/// A shell-form command as the shell receives it: the parser keeps it as written, so
/// the escaped line ends are removed here and, as Docker does, the comment lines
/// between continued lines are dropped. Pieces are joined by one space.
fn shell_text(raw: &str, escape: char) -> String {
    let mut lines = raw.lines();
    let first = lines.next().into_iter();
    let pieces: Vec<&str> = first
        .chain(lines.filter(|l| !l.trim_start().starts_with('#')))
        .map(|l| {
            let l = l.trim_end();
            l.strip_suffix(escape).unwrap_or(l).trim()
        })
        .filter(|l| !l.is_empty())
        .collect();
    pieces.join(" ")
}

/// Debian codename in an image tag (`rust:1-bookworm` → `bookworm`).
fn debian_release(image: &str) -> Option<&'static str> {
    ["buster", "bullseye", "bookworm", "trixie", "forky"]
        .into_iter()
        .find(|r| image.contains(r))
}

#[test]
fn dockerfile_reader_joins_continuations_and_reads_copy_sources() {
    let stages = dockerfile_stages(
        "FROM --platform=linux/amd64 rust:1-bookworm AS build\n\
         WORKDIR /a\nWORKDIR /src\n\
         RUN apt-get update \\\n# a comment inside\n && cargo build \\\n    --locked\n\
         RUN [\"cargo\", \"build\"]\n\
         FROM debian:bookworm-slim\n\
         COPY --chown=1:1 --from=build [\"/src/x\", \"/y\"]\nADD a b c/\n\
         USER 10001:10001\nSTOPSIGNAL SIGTERM\nENTRYPOINT pgoutbox run\n",
    );
    assert_eq!(stages.len(), 2);
    let (build, last) = (&stages[0], &stages[1]);
    assert_eq!(
        (build.image.as_str(), build.name.as_deref()),
        ("rust:1-bookworm", Some("build"))
    );
    assert_eq!(build.workdir.as_deref(), Some("/src"));
    assert_eq!(
        build.runs,
        ["apt-get update && cargo build --locked", "cargo build"]
    );
    assert_eq!(
        (last.image.as_str(), last.name.as_deref()),
        ("debian:bookworm-slim", None)
    );
    let copy = |keyword, from: Option<&str>, sources: &[&str], dest: &str| FileCopy {
        keyword,
        from: from.map(str::to_owned),
        sources: sources.iter().map(|s| s.to_string()).collect(),
        dest: dest.to_owned(),
    };
    assert_eq!(
        last.copies,
        [
            copy("COPY", Some("build"), &["/src/x"], "/y"),
            copy("ADD", None, &["a", "b"], "c/"),
        ]
    );
    assert_eq!(last.user.as_deref(), Some("10001:10001"));
    assert_eq!(last.stopsignal.as_deref(), Some("SIGTERM"));
    assert_eq!(last.entrypoint, Some(Err("pgoutbox run".to_owned())));
}

#[test]
fn dockerfile_is_multi_stage_locked_non_root_and_execs_the_binary() {
    let stages = dockerfile_stages(&read("Dockerfile"));
    assert!(
        stages.len() >= 2,
        "expected a multi-stage build, got {} FROM",
        stages.len()
    );
    let last = stages.last().unwrap();
    let builders = &stages[..stages.len() - 1];

    // Built with the committed lock file, in release mode.
    let build = builders
        .iter()
        .flat_map(|s| &s.runs)
        .find(|r| r.contains("cargo build") || r.contains("cargo install"))
        .expect("a build stage runs cargo build");
    assert!(build.contains("--locked"), "`{build}` without --locked");
    assert!(build.contains("--release"), "`{build}` without --release");

    // The final stage runs as a non-root user.
    let user = last.user.as_deref().expect("the final stage sets USER");
    let user_name = user.split(':').next().unwrap().trim();
    assert!(
        !matches!(user_name, "root" | "0" | ""),
        "the final stage runs as {user:?}"
    );
    if user_name.parse::<u32>().is_err() {
        assert!(
            last.runs
                .iter()
                .any(|r| (r.contains("useradd") || r.contains("adduser")) && r.contains(user_name)),
            "USER {user_name} is never created in the final stage"
        );
    }

    // ENTRYPOINT execs the binary directly (exec form: it is PID 1 and gets SIGTERM).
    let entrypoint = last
        .entrypoint
        .clone()
        .expect("the final stage sets ENTRYPOINT");
    let entrypoint = entrypoint.unwrap_or_else(|shell| {
        panic!("ENTRYPOINT {shell} is in shell form: SIGTERM would not reach pgoutbox")
    });
    assert_eq!(entrypoint, vec![BINARY_PATH.to_owned()]);
    if let Some(signal) = last.stopsignal.as_deref() {
        assert!(matches!(signal, "SIGTERM" | "15"), "STOPSIGNAL {signal}");
    }

    // …and that binary is the one the build stage produced.
    let FileCopy {
        from,
        sources,
        dest,
        ..
    } = last
        .copies
        .iter()
        .find(|c| {
            c.keyword == "COPY"
                && c.from.is_some()
                && (c.dest == BINARY_PATH || c.dest.trim_end_matches('/') == "/usr/local/bin")
        })
        .expect("the final stage copies the binary from a build stage");
    let from = from.as_ref().unwrap();
    let stage = builders
        .iter()
        .find(|s| s.name.as_deref() == Some(from.as_str()))
        .unwrap_or_else(|| panic!("COPY --from={from}: no earlier stage of that name"));
    assert_eq!(sources.len(), 1);
    let workdir = stage.workdir.as_deref().unwrap_or("/");
    let expected = format!("{}/target/release/pgoutbox", workdir.trim_end_matches('/'));
    assert_eq!(sources[0], expected, "copied to {dest}");

    // Build and runtime images share the Debian release: the binary links glibc and
    // libz dynamically.
    let build_release = debian_release(&stage.image);
    let run_release = debian_release(&last.image);
    assert!(
        build_release.is_some() && build_release == run_release,
        "build image {} and runtime image {} are not the same Debian release",
        stage.image,
        last.image
    );
}

#[test]
fn dockerfile_copies_existing_paths_that_the_context_keeps() {
    let stages = dockerfile_stages(&read("Dockerfile"));
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap_or_default();
    let patterns = dockerignore::exclusions(&ignore);

    let mut copied = BTreeSet::new();
    for stage in &stages {
        for copy in &stage.copies {
            if copy.from.is_some() {
                continue;
            }
            for source in &copy.sources {
                assert!(
                    !source.contains(['*', '?', '[']),
                    "COPY {source}: globs are not checked by this test"
                );
                let path: PathBuf = repo().join(source.trim_start_matches("./"));
                assert!(
                    path.exists(),
                    "COPY {source}: no such path in the repository"
                );
                for pattern in &patterns {
                    assert!(
                        !dockerignore::excludes(pattern, source),
                        "COPY {source}: .dockerignore {pattern:?} keeps it out of the context"
                    );
                }
                copied.insert(
                    source
                        .trim_start_matches("./")
                        .trim_end_matches('/')
                        .to_owned(),
                );
            }
        }
    }
    // What `cargo build --locked` needs.
    let mut needed = vec!["Cargo.toml", "Cargo.lock", "src"];
    if repo().join("build.rs").exists() {
        needed.push("build.rs");
    }
    for path in needed {
        assert!(
            copied.contains(path),
            "the Dockerfile does not COPY {path}: {copied:?}"
        );
    }
}
