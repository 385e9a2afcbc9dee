//! Retention on a real directory tree: which run directories are counted, kept and removed.

use super::*;

/// A run directory `name` under `root` holding `bytes` bytes.
fn run(root: &Path, name: &str, bytes: usize) -> PathBuf {
    let dir = root.join(name);
    fs::create_dir_all(dir.join("iteration-1")).unwrap();
    fs::write(dir.join("device0.trace.jsonl.gz"), vec![0u8; bytes]).unwrap();
    fs::write(dir.join("iteration-1/device0.trace.jsonl.gz"), [1u8; 10]).unwrap();
    dir
}

fn names(dirs: &[PathBuf]) -> Vec<String> {
    dirs.iter().map(|d| d.file_name().unwrap().to_string_lossy().into_owned()).collect()
}

#[test]
fn only_the_launchers_names_are_run_directories() {
    for name in ["20261128-220111-conformance", "20261128-220111-exec.2", "20261128-220111-soak"] {
        assert!(is_run_dir_name(name), "{name}");
    }
    for name in [
        "notes",
        "20261128-220111-",
        "20261128-2201-conformance",
        "20261128-220111-Conf",
        "20261128-220111-exec.",
        "x0261128-220111-exec",
    ] {
        assert!(!is_run_dir_name(name), "{name}");
    }
}

#[test]
fn the_newest_are_kept_and_nothing_else_under_the_root_is_touched() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    for (i, name) in [
        "20261128-100000-exec",
        "20261127-235959-conformance",
        "20261128-100000-exec.2",
        "20261128-100000-exec.10",
        "20261129-000001-soak",
    ]
    .iter()
    .enumerate()
    {
        run(root, name, 1000 * (i + 1));
    }
    fs::create_dir(root.join("mine")).unwrap();
    fs::write(root.join("20261101-000000-notes.txt"), "a file, not a run").unwrap();
    std::os::unix::fs::symlink(root.join("mine"), root.join("20261101-000000-link")).unwrap();
    assert_eq!(
        names(&run_dirs(root).unwrap()),
        [
            "20261127-235959-conformance",
            "20261128-100000-exec",
            "20261128-100000-exec.2",
            "20261128-100000-exec.10",
            "20261129-000001-soak"
        ],
        "oldest first, attempts in number order"
    );
    let removed = prune(root, 2, None).unwrap();
    assert_eq!(names(&removed.dirs), ["20261127-235959-conformance", "20261128-100000-exec", "20261128-100000-exec.2"]);
    assert_eq!(removed.bytes, 2000 + 1000 + 3000 + 30, "every file of every removed directory");
    assert_eq!(names(&run_dirs(root).unwrap()), ["20261128-100000-exec.10", "20261129-000001-soak"]);
    assert!(root.join("mine").is_dir() && root.join("20261101-000000-notes.txt").is_file());
    assert!(root.join("20261101-000000-link").exists(), "a symlink named like a run is not one");
    assert_eq!(prune(root, 2, None).unwrap(), Removed::default(), "nothing beyond the kept ones");
}

#[test]
fn zero_keeps_everything_and_the_current_run_is_never_removed() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let old = run(root, "20261128-100000-exec", 10);
    run(root, "20261128-110000-exec", 10);
    assert!(prune(root, 0, None).unwrap().dirs.is_empty());
    // A run whose clock went back: the directory in use is older by name than another.
    let removed = prune(root, 1, Some(&old)).unwrap();
    assert!(removed.dirs.is_empty() && old.is_dir());
}

#[test]
fn clean_all_removes_every_run_and_a_missing_root_has_none() {
    let root = tempfile::tempdir().unwrap();
    run(root.path(), "20261128-100000-exec", 10);
    run(root.path(), "20261128-110000-conformance", 10);
    assert_eq!(remove_all(root.path()).unwrap().dirs.len(), 2);
    assert!(run_dirs(root.path()).unwrap().is_empty());
    assert!(run_dirs(&root.path().join("absent")).unwrap().is_empty());
}

#[test]
fn the_count_comes_from_the_flag_then_the_environment_then_the_default() {
    assert_eq!(keep_count_from(Some(3), Some("7")), Ok(3));
    assert_eq!(keep_count_from(None, Some(" 7 ")), Ok(7));
    assert_eq!(keep_count_from(None, Some("")), Ok(DEFAULT_KEEP));
    assert_eq!(keep_count_from(None, None), Ok(10));
    assert!(keep_count_from(None, Some("ten")).unwrap_err().contains("BELFRY_KEEP_RUNS=\"ten\""));
}

#[test]
fn sizes_are_summed_and_said_for_people() {
    let root = tempfile::tempdir().unwrap();
    let dir = run(root.path(), "20261128-100000-exec", 2048);
    assert_eq!(dir_size(&dir), 2058);
    assert_eq!(human(512), "512 B");
    assert_eq!(human(2058), "2.0 KiB");
    assert_eq!(human(25 << 20), "25.0 MiB");
    assert_eq!(human(3 << 30), "3.0 GiB");
}
