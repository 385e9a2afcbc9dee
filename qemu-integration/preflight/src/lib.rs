//! What a guest run needs provisioned, as `provision.sh status` tells it, and the one root
//! command that provisions it. Standard library only: `cargo belfry` builds this crate's
//! binary first (in a second or two) so that it can say what is missing before the launcher
//! is compiled; the launcher's `doctor` uses the same status parsing and root command.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The provisioning script, relative to the repository root.
pub const PROVISION_SCRIPT: &str = "qemu-integration/provision/provision.sh";

/// The repository root (this crate is `qemu-integration/preflight`).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().and_then(Path::parent).unwrap_or(manifest);
    root.canonicalize().unwrap_or_else(|_| root.to_path_buf())
}

/// Parses `provision.sh status` (KEY=VALUE lines; a key may repeat).
pub fn parse_status(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            map.entry(k.trim().to_string()).or_default().push(v.trim().to_string());
        }
    }
    map
}

/// Runs `provision.sh status` (it builds and installs nothing); its parsed lines, or `None`
/// if it could not run.
pub fn read_status(script: &Path) -> Option<BTreeMap<String, Vec<String>>> {
    let out = Command::new(script).arg("status").stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| parse_status(&String::from_utf8_lossy(&out.stdout)))
}

/// The one root command that provisions everything both README commands need (the root and
/// both guest kernel flavours), with its estimate, as the script defines them: `provision.sh
/// status`'s `root-command=` and `root-command-estimate=` lines.
pub fn root_command(status: &BTreeMap<String, Vec<String>>) -> Option<String> {
    let get = |k: &str| status.get(k).and_then(|v| v.first()).filter(|v| !v.is_empty()).cloned();
    let command = get("root-command")?;
    Some(match get("root-command-estimate") {
        Some(estimate) => format!("once, as root ({estimate}): {command}; later runs need no root"),
        None => format!("once, as root: {command}; later runs need no root"),
    })
}

/// What an ordinary user must do before a guest run, from the status: `Some` (what is
/// missing and the root command) when the provisioning root is missing, since only root can
/// build it.
pub fn root_needed(status: &BTreeMap<String, Vec<String>>) -> Option<String> {
    let get = |k: &str| status.get(k).and_then(|v| v.first()).map(String::as_str).unwrap_or_default();
    let root = get("root");
    let path = root.strip_prefix("missing")?.trim();
    let command = root_command(status).unwrap_or_else(|| "provision.sh status gives no root command".into());
    Some(format!(
        "the provisioning root ({path}) and the guest kernels are not built, and building them needs root; run {command}"
    ))
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective user).
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_root_names_itself_and_the_command() {
        let status = parse_status(
            "cache=/c\nroot=missing /c/roots/t/rootfs\nkernel=missing (built after the root)\nall=missing\nroot-command=sudo env BELFRY_CACHE=/c /repo/provision.sh all\nroot-command-estimate=25 min\n",
        );
        let needed = root_needed(&status).expect("the root is missing");
        assert!(needed.contains("(/c/roots/t/rootfs)"), "{needed}");
        assert!(
            needed.ends_with(
                "run once, as root (25 min): sudo env BELFRY_CACHE=/c /repo/provision.sh all; later runs need no root"
            ),
            "{needed}"
        );
    }

    #[test]
    fn a_ready_root_needs_nothing() {
        let status = parse_status("cache=/c\nroot=ready /c/roots/t/rootfs\nkernel=missing /c/kernels/k\n");
        assert_eq!(root_needed(&status), None);
        assert_eq!(root_needed(&parse_status("")), None, "no status, no claim");
    }

    #[test]
    fn status_lines_parse_with_repeated_keys() {
        let status = parse_status("bootstrap=mmdebstrap\nbootstrap=debootstrap\nno line\nhost-qemu=none\n");
        assert_eq!(status["bootstrap"], vec!["mmdebstrap", "debootstrap"]);
        assert_eq!(status["host-qemu"], vec!["none"]);
        assert_eq!(status.len(), 2);
    }
}
