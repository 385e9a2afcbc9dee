//! `belfry-trace replay` checks which build recorded a log before it starts: a log whose
//! configuration names another build of the device, or none, is refused with both builds named
//! and the flag that replays it anyway (`--allow-other-build`), which then says so first; a
//! log this build recorded replays without a word about builds.

use std::path::{Path, PathBuf};
use std::process::Command;

use belfry_device::build_identity::BUILD;
use belfry_device::config::DeviceConfig;
use belfry_device::record::{self, BUILD_FIELD};
use belfry_trace_schema::file::Compression;
use belfry_trace_schema::input_log::LogWriter;

/// Another build than this one, as a log names it.
const OTHER: &str = "belfry-device 0.0.1 (sources 0123456789abcdef)";

/// `belfry-trace replay ARGS`: whether it succeeded, its stdout and its stderr.
fn replay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_belfry-trace")).arg("replay").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// A log of a device that recorded nothing but its configuration, naming `build` as the build
/// that recorded it (none if `None`), at `dir/name`.
fn log_recorded_by(dir: &Path, name: &str, build: Option<&str>) -> PathBuf {
    let json = record::config_json(&DeviceConfig::default(), None).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&json).unwrap();
    let object = config.as_object_mut().unwrap();
    assert_eq!(object.get(BUILD_FIELD).and_then(|b| b.as_str()), Some(BUILD), "the device names its build: {json}");
    match build {
        Some(build) => object.insert(BUILD_FIELD.into(), build.into()),
        None => object.remove(BUILD_FIELD),
    };
    let path = dir.join(name);
    LogWriter::create(&path, Compression::None, &config.to_string()).unwrap().finish().unwrap();
    path
}

#[test]
fn a_log_another_build_recorded_is_refused_before_the_replay_starts_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let other = log_recorded_by(dir.path(), "other.record", Some(OTHER));
    let (ok, out, err) = replay(&[other.to_str().unwrap()]);
    assert!(!ok, "{out}");
    assert!(out.is_empty(), "nothing was replayed: {out}");
    assert!(err.contains(&format!("recorded by {OTHER}, not by this build, {BUILD}")), "{err}");
    assert!(err.contains("--allow-other-build to try anyway"), "{err}");

    let unnamed = log_recorded_by(dir.path(), "unnamed.record", None);
    let (ok, _, err) = replay(&[unnamed.to_str().unwrap()]);
    assert!(!ok && err.contains("recorded by a build that did not name itself"), "{err}");

    let (ok, out, err) = replay(&[other.to_str().unwrap(), "--allow-other-build"]);
    assert!(ok, "{out}{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(first.contains(&format!("recorded by {OTHER}, replayed by {BUILD} (--allow-other-build)")), "{out}");
    assert!(out.contains("no divergence"), "{out}");

    let same = log_recorded_by(dir.path(), "same.record", Some(BUILD));
    let (ok, out, err) = replay(&[same.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    assert!(!out.contains("recorded by"), "{out}");
    assert!(out.contains("no divergence"), "{out}");
}
