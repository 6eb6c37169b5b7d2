//! The state file's format, atomic writes and the checkpoint's rules.
use super::*;

fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pgoutbox-state-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub(super) fn sample(lsn: u64) -> SlotState {
    SlotState::new("7351234567890123456", 1, "shop", "pgoutbox", Lsn(lsn))
}

#[tokio::test]
async fn a_kept_watermark_is_written_with_the_next_lsn_and_read_back() {
    let dir = temp_dir("watermark");
    let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
    file.write(&sample(10)).unwrap();
    let checkpoint = Checkpoint::new(file.clone(), sample(10));
    assert_eq!(checkpoint.watermark(), None);
    let record = WatermarkRecord {
        topic: "pgoutbox.offsets".into(),
        transactional_id: "pgoutbox-7-shop-pgoutbox".into(),
    };
    checkpoint.keep_watermark(&record);
    assert_eq!(
        file.load().unwrap().unwrap().watermark,
        None,
        "not on its own"
    );
    checkpoint.persist(Lsn(20)).await.unwrap();
    let on_disk = file.load().unwrap().unwrap();
    assert_eq!(on_disk.watermark.as_ref(), Some(&record));
    assert_eq!(SlotState::parse(&on_disk.to_text()).unwrap(), on_disk);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn pinned_column_types_are_written_with_every_lsn_and_seed_the_next_start() {
    use crate::outbox::pinned::PinnedTypes;
    let dir = temp_dir("pins");
    let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
    let mut first = sample(10);
    first.watermark = Some(WatermarkRecord {
        topic: "pgoutbox.offsets".into(),
        transactional_id: "id".into(),
    });
    file.write(&first).unwrap();
    let pins = PinnedTypes::default();
    let kept = KeptTypes::from([(
        "\"public\".\"outbox\"".to_owned(),
        BTreeMap::from([("aggregate_id".to_owned(), 20)]),
    )]);
    pins.seed(&kept);
    let checkpoint = Checkpoint::new(file.clone(), first).pinning(&pins, false);
    checkpoint.persist(Lsn(20)).await.unwrap();
    let on_disk = file.load().unwrap().unwrap();
    assert_eq!(on_disk.pinned_types, kept);
    assert_eq!(SlotState::parse(&on_disk.to_text()).unwrap(), on_disk);

    // The next process takes them back; --accept-type-change drops them.
    let next = PinnedTypes::default();
    let _ = Checkpoint::new(file.clone(), on_disk.clone()).pinning(&next, false);
    assert_eq!(next.kept(), kept);
    let accepted = PinnedTypes::default();
    let checkpoint = Checkpoint::new(file.clone(), on_disk).pinning(&accepted, true);
    assert!(accepted.kept().is_empty());
    checkpoint.persist(Lsn(30)).await.unwrap();
    assert!(file.load().unwrap().unwrap().pinned_types.is_empty());
    assert!(!sample(1).to_text().contains("pinned_types"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timeline_is_written_and_a_file_without_one_still_parses_as_unknown() {
    let text = sample(42).to_text();
    assert!(text.contains("timeline = 1"), "{text}");
    assert_eq!(SlotState::parse(&text).unwrap().timeline, Some(1));
    // What pgoutbox wrote before the timeline was recorded.
    let old = "version = 1\nsystem_id = \"7351234567890123456\"\ndatabase = \"shop\"\n\
               slot = \"pgoutbox\"\nconfirmed_lsn = \"0/2A\"\n";
    let parsed = SlotState::parse(old).unwrap();
    assert_eq!(parsed.timeline, None);
    assert_eq!(parsed.confirmed_lsn, Lsn(42));
    assert!(
        parsed.to_string().contains("timeline not recorded"),
        "{parsed}"
    );
    assert!(
        !parsed.to_text().contains("timeline"),
        "unknown stays unknown"
    );
}

#[test]
fn write_then_load_round_trips_and_leaves_no_temporary_file() {
    let dir = temp_dir("roundtrip").join("nested");
    let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
    assert_eq!(file.load().unwrap(), None, "no file yet");
    file.write(&sample(0x16_B374_D848)).unwrap();
    file.write(&sample(0x17_0000_0000)).unwrap();
    assert_eq!(file.load().unwrap(), Some(sample(0x17_0000_0000)));
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["shop.pgoutbox.state".to_owned()]);
    let text = std::fs::read_to_string(file.path()).unwrap();
    assert!(
        text.contains("confirmed_lsn = \"00000017/00000000\" # check "),
        "{text}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn a_failed_write_keeps_the_old_file() {
    let dir = temp_dir("failed");
    let file = StateFile::open(&dir, "shop", "s").unwrap();
    file.write(&sample(100)).unwrap();
    // A directory where the temporary file would go makes the write fail before
    // the rename.
    let tmp = dir.join(format!(".shop.s.state.{}.tmp", std::process::id()));
    std::fs::create_dir(&tmp).unwrap();
    let err = file.write(&sample(200)).unwrap_err();
    assert!(matches!(err, StateError::Write { .. }), "{err}");
    assert!(err.to_string().contains("shop.s.state"), "{err}");
    assert_eq!(file.load().unwrap(), Some(sample(100)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn corrupt_files_are_clear_errors_not_panics() {
    let dir = temp_dir("corrupt");
    let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
    let good = sample(42).to_text();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("garbage", b"\x00\xff\xfe not toml".to_vec()),
        ("truncated", good.as_bytes()[..good.len() / 2].to_vec()),
        (
            "bad lsn",
            good.replace("\"00000000/0000002A\"", "\"zz\"").into_bytes(),
        ),
        (
            "torn lsn",
            good.replace("00000000/0000002A", "00000000/0000003A")
                .into_bytes(),
        ),
        (
            "future version",
            good.replace("version = 1", "version = 9").into_bytes(),
        ),
        ("unknown key", format!("{good}extra = 1\n").into_bytes()),
        (
            "bad timeline",
            good.replace("timeline = 1", "timeline = -1").into_bytes(),
        ),
        (
            "bad system id",
            good.replace("7351234567890123456", "x").into_bytes(),
        ),
    ];
    for (what, bytes) in cases {
        std::fs::write(file.path(), &bytes).unwrap();
        let err = file.load().expect_err(what).to_string();
        assert!(err.contains("is corrupt"), "{what}: {err}");
        assert!(
            err.contains(&file.path().display().to_string()),
            "{what}: {err}"
        );
        assert!(err.contains("fix:"), "{what}: {err}");
    }
    std::fs::write(file.path(), good).unwrap();
    assert_eq!(file.load().unwrap(), Some(sample(42)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn file_names_are_unique_and_safe() {
    assert_eq!(file_name("shop", "pgoutbox"), "shop.pgoutbox.state");
    assert_eq!(file_name("a/b", "s"), "a%2Fb.s.state");
    assert_eq!(file_name("a.b", "s"), "a%2Eb.s.state");
    assert_eq!(file_name("..", "s"), "%2E%2E.s.state");
    assert_ne!(file_name("a%2Fb", "s"), file_name("a/b", "s"));
    assert_eq!(file_name("Ü", "s"), "%C3%9C.s.state");
}

#[test]
fn default_directory_follows_systemd_then_xdg_then_home() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    let all = env(&[
        ("STATE_DIRECTORY", "/var/lib/pgoutbox:/var/lib/other"),
        ("XDG_STATE_HOME", "/x"),
        ("HOME", "/h"),
    ]);
    assert_eq!(
        resolve_dir(Some("/d"), &all).unwrap(),
        Some(PathBuf::from("/d"))
    );
    assert_eq!(resolve_dir(Some("off"), &all).unwrap(), None);
    assert_eq!(
        resolve_dir(None, &all).unwrap(),
        Some(PathBuf::from("/var/lib/pgoutbox"))
    );
    let xdg = env(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")]);
    assert_eq!(
        resolve_dir(None, &xdg).unwrap(),
        Some(PathBuf::from("/x/pgoutbox"))
    );
    let relative_xdg = env(&[("XDG_STATE_HOME", "rel"), ("HOME", "/h")]);
    assert_eq!(
        resolve_dir(None, &relative_xdg).unwrap(),
        Some(PathBuf::from("/h/.local/state/pgoutbox"))
    );
    let err = resolve_dir(None, &env(&[])).unwrap_err().to_string();
    assert!(err.contains("--state-dir"), "{err}");
}

#[tokio::test]
async fn checkpoint_writes_only_forward_and_disabled_writes_nothing() {
    let dir = temp_dir("checkpoint");
    let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
    file.write(&sample(100)).unwrap();
    let cp = Checkpoint::new(file.clone(), sample(100));
    cp.persist(Lsn(50)).await.unwrap();
    assert_eq!(file.load().unwrap(), Some(sample(100)), "never backwards");
    cp.persist(Lsn(300)).await.unwrap();
    assert_eq!(file.load().unwrap(), Some(sample(300)));
    assert_eq!(cp.persisted(), Some(Lsn(300)));
    Checkpoint::disabled().persist(Lsn(1)).await.unwrap();
    assert_eq!(Checkpoint::disabled().persisted(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Cost of a record (an in-place rewrite) and of a persist (a record and
/// `fdatasync`) on this machine's temp directory (or `PGOUTBOX_STATE_BENCH_DIR`):
/// `cargo test --lib state::tests::persist_cost -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test"]
async fn persist_cost() {
    let dir = std::env::var("PGOUTBOX_STATE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| temp_dir("cost"));
    let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
    file.write(&sample(1)).unwrap();
    let cp = Checkpoint::new(file, sample(1));
    let mut lsn = 2u64;
    for durable in [false, true] {
        let mut samples = Vec::new();
        for _ in 0..200 {
            lsn += 1;
            let start = std::time::Instant::now();
            if durable {
                cp.persist(Lsn(lsn)).await.unwrap();
            } else {
                cp.record(Lsn(lsn)).await.unwrap();
            }
            samples.push(start.elapsed());
        }
        samples.sort();
        eprintln!(
            "{} in {}: p50 {:?} p99 {:?} max {:?} (200 writes)",
            if durable { "persist" } else { "record" },
            dir.display(),
            samples[100],
            samples[198],
            samples[199]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// A state file at `sample(10)` in a fresh directory, and a checkpoint over it.
fn fresh(tag: &str) -> (PathBuf, StateFile, Checkpoint) {
    let dir = temp_dir(tag);
    let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
    file.write(&sample(10)).unwrap();
    let cp = Checkpoint::new(file.clone(), sample(10));
    (dir, file, cp)
}

#[tokio::test]
async fn record_rewrites_the_lsn_in_place_and_persist_makes_it_durable() {
    let (dir, file, cp) = fresh("in-place");
    assert_eq!(
        cp.durable(),
        Some(Lsn::INVALID),
        "what it found is not known durable"
    );
    // The first write is whole (and durable): nothing of this process is open yet.
    cp.record(Lsn(20)).await.unwrap();
    assert_eq!(cp.durable(), Some(Lsn(20)));
    let written = inode(file.path());
    for lsn in [30, 0x1_0000_0000, 0xFFFF_FFFF_0000_0001] {
        cp.record(Lsn(lsn)).await.unwrap();
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert_eq!(text, sample(lsn).to_text(), "the text of a whole write");
        assert_eq!(file.load().unwrap(), Some(sample(lsn)));
        assert_eq!(inode(file.path()), written, "rewritten in place");
        assert_eq!(cp.durable(), Some(Lsn(20)), "not durable by itself");
        assert_eq!(cp.persisted(), Some(Lsn(lsn)));
    }
    // Durable once persisted, and still in place; an LSN on disk already is a no-op.
    cp.persist(Lsn(0x1_0000_0000)).await.unwrap();
    assert_eq!(cp.durable(), Some(Lsn(0xFFFF_FFFF_0000_0001)));
    assert_eq!(inode(file.path()), written);
    cp.record(Lsn(5)).await.unwrap();
    assert_eq!(file.load().unwrap(), Some(sample(0xFFFF_FFFF_0000_0001)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_kept_change_is_written_whole_and_in_place_rewrites_resume_after_it() {
    let (dir, file, cp) = fresh("in-place-shape");
    cp.record(Lsn(20)).await.unwrap();
    let before = inode(file.path());
    let record = WatermarkRecord {
        topic: "pgoutbox.offsets".into(),
        transactional_id: "t".into(),
    };
    cp.keep_watermark(&record);
    cp.record(Lsn(30)).await.unwrap();
    let on_disk = file.load().unwrap().unwrap();
    assert_eq!(
        on_disk.watermark.as_ref(),
        Some(&record),
        "not lost in place"
    );
    assert_eq!(on_disk.confirmed_lsn, Lsn(30));
    assert_ne!(inode(file.path()), before, "written whole");
    assert_eq!(cp.durable(), Some(Lsn(30)));
    let after = inode(file.path());
    cp.record(Lsn(40)).await.unwrap();
    assert_eq!(inode(file.path()), after, "in place again");
    let mut expected = sample(40);
    expected.watermark = Some(record);
    assert_eq!(file.load().unwrap(), Some(expected));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn persist_writes_whole_when_the_file_was_replaced_or_removed() {
    let (dir, file, cp) = fresh("in-place-replaced");
    cp.record(Lsn(20)).await.unwrap();
    cp.record(Lsn(30)).await.unwrap();
    // Another process replaces the file: this one's in-place rewrite went to the
    // old inode, so making it durable must write the file anew.
    file.write(&sample(25)).unwrap();
    cp.persist(Lsn(30)).await.unwrap();
    assert_eq!(file.load().unwrap(), Some(sample(30)));
    cp.record(Lsn(40)).await.unwrap();
    std::fs::remove_file(file.path()).unwrap();
    cp.persist(Lsn(40)).await.unwrap();
    assert_eq!(file.load().unwrap(), Some(sample(40)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn persist_of_what_another_process_left_writes_it_whole_first() {
    let (dir, file, cp) = fresh("in-place-found");
    let found = inode(file.path());
    cp.persist(Lsn(10)).await.unwrap();
    assert_eq!(cp.durable(), Some(Lsn(10)));
    assert_ne!(
        inode(file.path()),
        found,
        "written (and fsynced) by this process"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
