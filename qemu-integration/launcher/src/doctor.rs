//! `cargo belfry doctor`: checks what a run needs — the Rust toolchain and the guest target,
//! free disk space, the provisioning cache, KVM, namespaces, QEMU, root or not — and prints
//! one line per check with a fix for each problem. It builds, installs and changes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use belfry_preflight::{parse_status, root_command, PROVISION_SCRIPT};

use crate::boot::qemu::{self, AccelChoice, KvmProbe};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Fine.
    Ok,
    /// A run works, but slower or with a one-time step first.
    Note,
    /// A run fails until this is fixed.
    Problem,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What was checked.
    pub what: &'static str,
    /// How it came out.
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// How to fix it (empty when fine).
    pub fix: String,
}

fn finding(what: &'static str, level: Level, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { what, level, detail: detail.into(), fix: fix.into() }
}

/// Disk needed in the cache for a cold first run: the trixie root (~2.1 GiB) and the guest
/// kernel tree (~2.2 GiB), with some room.
const COLD_CACHE_BYTES: u64 = 5 << 30;
/// Disk needed in the target directory (host and guest builds, run directories).
const TARGET_BYTES: u64 = 3 << 30;

/// The first line a command prints on stdout, if it runs and succeeds.
fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_string())
}

/// Free bytes on the file system holding `path` (or its nearest existing ancestor).
fn free_bytes(path: &Path) -> Option<(PathBuf, u64)> {
    let existing = path.ancestors().find(|p| p.exists())?.to_path_buf();
    crate::sys::free_bytes(&existing).ok().map(|b| (existing, b))
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// The toolchain: cargo, rustc, and the guest target's standard library.
fn toolchain() -> Vec<Finding> {
    let mut found = Vec::new();
    match first_line("rustc", &["--version"]) {
        Some(v) => found.push(finding("rust toolchain", Level::Ok, v, "")),
        None => found.push(finding(
            "rust toolchain",
            Level::Problem,
            "rustc not found",
            "install Rust: https://rustup.rs (curl --proto '=https' -sSf https://sh.rustup.rs | sh)",
        )),
    }
    let libdir = first_line("rustc", &["--print", "target-libdir", "--target", crate::setup::compile::GUEST_TRIPLE]);
    match libdir {
        Some(dir) if Path::new(&dir).is_dir() => found.push(finding(
            "guest target",
            Level::Ok,
            format!("{} installed", crate::setup::compile::GUEST_TRIPLE),
            "",
        )),
        _ => found.push(finding(
            "guest target",
            Level::Problem,
            format!("the standard library for {} is missing", crate::setup::compile::GUEST_TRIPLE),
            format!("rustup target add {}", crate::setup::compile::GUEST_TRIPLE),
        )),
    }
    found
}

/// Free space in the cache and the target directory.
fn disk(cache: &Path, cache_cold: bool, target: &Path) -> Vec<Finding> {
    let mut found = Vec::new();
    let needs = [(cache, if cache_cold { COLD_CACHE_BYTES } else { 1 << 30 }), (target, TARGET_BYTES)];
    for (path, need) in needs {
        match free_bytes(path) {
            Some((on, free)) if free >= need => found.push(finding(
                "disk",
                Level::Ok,
                format!("{} free on {} (needs {})", gib(free), on.display(), gib(need)),
                "",
            )),
            Some((on, free)) => found.push(finding(
                "disk",
                Level::Problem,
                format!("{} free on {}, {} needed for {}", gib(free), on.display(), gib(need), path.display()),
                "free some space there, or point BELFRY_CACHE / CARGO_TARGET_DIR at a larger file system",
            )),
            None => found.push(finding(
                "disk",
                Level::Note,
                format!("cannot tell the free space of {}", path.display()),
                "",
            )),
        }
    }
    found
}

/// The cache: writable, and what a first run still has to build.
fn cache(status: &BTreeMap<String, Vec<String>>, root_user: bool) -> Vec<Finding> {
    let get = |k: &str| status.get(k).and_then(|v| v.first()).cloned().unwrap_or_default();
    let dir = PathBuf::from(get("cache"));
    let mut found = Vec::new();
    let writable = dir.ancestors().find(|p| p.exists()).is_some_and(|p| p.is_dir() && crate::sys::writable(p));
    let ready = get("all") == "ready";
    if writable || (ready && !root_user) {
        let how = if writable { "is writable" } else { "is provisioned (runs only read it)" };
        found.push(finding("cache", Level::Ok, format!("{} {how}", dir.display()), ""));
    } else {
        found.push(finding(
            "cache",
            Level::Problem,
            format!("{} is not writable by this user", dir.display()),
            format!(
                "export BELFRY_CACHE=\"${{XDG_CACHE_HOME:-$HOME/.cache}}/belfry\" (a cache of your own), or once as root: install -d -o \"$USER\" {}",
                dir.display()
            ),
        ));
    }
    let root = get("root");
    let bootstrap = status.get("bootstrap").cloned().unwrap_or_default();
    let command = root_command(status).unwrap_or_else(|| "provision.sh status gives no root command".into());
    if root.starts_with("ready") {
        found.push(finding("provisioning root", Level::Ok, root, ""));
    } else if !root_user {
        found.push(finding(
            "provisioning root",
            Level::Problem,
            format!(
                "{root}: the Debian trixie root (QEMU, kernel toolchain) and the guest kernels are not built, and building them needs root (mmdebstrap --mode=root and apt in a chroot; the kernels are built inside that root)"
            ),
            command.clone(),
        ));
    } else if bootstrap.is_empty() {
        found.push(finding(
            "provisioning root",
            Level::Note,
            format!("{root}: the first run builds it (~1.5 min) and installs mmdebstrap on the host with apt-get"),
            "to install it yourself first: apt-get install --no-install-recommends mmdebstrap",
        ));
    } else {
        found.push(finding(
            "provisioning root",
            Level::Note,
            format!("{root}: the first run builds it with {} (~1.5 min, 2.1 GiB)", bootstrap.join(" or ")),
            "",
        ));
    }
    found.extend(kernels(status, root_user, &command));
    found
}

/// The two guest kernel flavours (`kernel-distro=`, `kernel-debug=` lines): what a first run
/// of each still has to do. Only root builds them; anyone else is given `command`.
fn kernels(status: &BTreeMap<String, Vec<String>>, root_user: bool, command: &str) -> Vec<Finding> {
    let get = |k: &str| status.get(k).and_then(|v| v.first()).cloned().unwrap_or_default();
    let flavours: [(&'static str, &'static str, &str); 2] = [
        (
            "kernel distro",
            "kernel-distro",
            "the first `cargo belfry` run provisions it (the default: Debian's image + its rust/ metadata: 12 to 22 min measured on a busy 2-core machine, 1.3 GiB)",
        ),
        (
            "kernel debug",
            "kernel-debug",
            "`--kernel debug` and ci/test build it from source (8 to 30 min on 2 cores, 2.2 GiB)",
        ),
    ];
    flavours
        .into_iter()
        .map(|(what, key, cold)| {
            let state = get(key);
            if state.starts_with("ready") {
                finding(what, Level::Ok, state, "")
            } else if state.is_empty() {
                finding(what, Level::Note, "provision.sh status does not know this flavour", "")
            } else if !root_user {
                finding(
                    what,
                    Level::Problem,
                    format!("{state}: not built, and building it needs root; both README commands need it"),
                    command,
                )
            } else {
                finding(what, Level::Note, format!("{state}: {cold}"), "")
            }
        })
        .collect()
}

/// QEMU: a usable host QEMU, or the root's.
fn qemu_check(status: &BTreeMap<String, Vec<String>>) -> Finding {
    let get = |k: &str| status.get(k).and_then(|v| v.first()).cloned().unwrap_or_default();
    let host = get("host-qemu");
    let root_qemu = get("root-qemu");
    if host.starts_with("usable") || host.starts_with("BELFRY_QEMU") {
        let path = host.split_once(' ').map_or("", |(_, p)| p);
        let version = first_line(path, &["--version"]).unwrap_or_default();
        return finding("qemu", Level::Ok, format!("host {path}: {version}"), "");
    }
    if !root_qemu.is_empty() {
        let why = if host == "none" { "no host QEMU".to_string() } else { format!("host QEMU {host}, not") };
        return finding(
            "qemu",
            Level::Ok,
            format!("{root_qemu}, from the provisioning root ({why} ≥ 10.1 with vfio-user-pci)"),
            "",
        );
    }
    finding(
        "qemu",
        Level::Note,
        format!("no usable host QEMU ({host}); the provisioning root will bring QEMU ≥ 10.1 with vfio-user-pci"),
        "",
    )
}

/// KVM: usable and not kvm-pvm, else TCG.
fn kvm() -> Finding {
    let probe = KvmProbe::host();
    let (accel, why) = qemu::choose_accel(AccelChoice::Auto, probe);
    if accel == qemu::Accel::Kvm {
        return finding("kvm", Level::Ok, format!("{accel}: {why}"), "");
    }
    let fix = if probe.kvm_pvm {
        "none needed (kvm-pvm cannot run unmodified guests); bare metal or nested KVM would be faster"
    } else if Path::new("/dev/kvm").exists() {
        "add yourself to the kvm group (sudo usermod -aG kvm \"$USER\", then log in again)"
    } else {
        "on bare metal: load kvm_intel or kvm_amd; in a VM: enable nested virtualisation"
    };
    finding("kvm", Level::Note, format!("runs use TCG ({why}): slower, 2-5 min for the suite"), fix)
}

/// Namespaces: provision.sh runs QEMU and builds inside the root through `unshare -m` (as
/// root) or `unshare -r -m` (a user namespace, as anyone else).
fn namespaces(root_user: bool) -> Finding {
    let args: &[&str] = if root_user { &["-m", "true"] } else { &["-r", "-m", "true"] };
    let ok = Command::new("unshare")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let what = if root_user { "mount namespaces (unshare -m)" } else { "user and mount namespaces (unshare -r -m)" };
    if ok {
        finding("namespaces", Level::Ok, format!("{what} work"), "")
    } else {
        finding(
            "namespaces",
            Level::Problem,
            format!("{what} fail"),
            if root_user {
                "run outside a restricted container, or allow unshare(CLONE_NEWNS) (e.g. docker --privileged)"
            } else {
                "as root: sysctl -w kernel.unprivileged_userns_clone=1 user.max_user_namespaces=15000 (and kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu)"
            },
        )
    }
}

/// Root or not, and what that means.
fn user(root_user: bool) -> Finding {
    if root_user {
        finding("user", Level::Ok, "running as root", "")
    } else {
        finding(
            "user",
            Level::Ok,
            "not root: runs use user namespaces; only building the provisioning root needs root once",
            "",
        )
    }
}

/// Runs every check against the repository at `repo` and prints them.
pub fn check(repo: &Path) -> Vec<Finding> {
    let root_user = crate::sys::is_root();
    let script = repo.join(PROVISION_SCRIPT);
    let status = Command::new("bash")
        .arg(&script)
        .arg("status")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let status = parse_status(&status);
    let cache_dir = status.get("cache").and_then(|v| v.first()).map(PathBuf::from).unwrap_or_default();
    let cold = !status.get("kernel-distro").and_then(|v| v.first()).is_some_and(|k| k.starts_with("ready"));
    let target = crate::setup::compile::Workspace::new(repo.to_path_buf()).target_dir;
    let mut found = toolchain();
    found.extend(disk(&cache_dir, cold, &target));
    if status.is_empty() {
        found.push(finding(
            "cache",
            Level::Problem,
            "provision.sh status printed nothing",
            "run bash qemu-integration/provision/provision.sh status to see why",
        ));
    } else {
        found.extend(cache(&status, root_user));
        found.push(qemu_check(&status));
    }
    found.push(kvm());
    found.push(namespaces(root_user));
    found.push(user(root_user));
    found
}

/// One line per finding; `fix:` lines under problems and notes.
pub fn render(found: &[Finding]) -> String {
    let mut out = String::new();
    for f in found {
        let tag = match f.level {
            Level::Ok => "ok  ",
            Level::Note => "note",
            Level::Problem => "FIX ",
        };
        out.push_str(&format!("{tag} {:<18} {}\n", f.what, f.detail));
        if !f.fix.is_empty() {
            out.push_str(&format!("     {:<18} fix: {}\n", "", f.fix));
        }
    }
    out
}

/// `cargo belfry doctor`: prints the findings; fails if any is a problem.
pub fn run(repo: &Path) -> ExitCode {
    let found = check(repo);
    print!("{}", render(&found));
    let problems = found.iter().filter(|f| f.level == Level::Problem).count();
    if problems == 0 {
        println!("belfry doctor: ready to run `cargo belfry conformance`");
        ExitCode::SUCCESS
    } else {
        println!("belfry doctor: {problems} problem(s) to fix first (lines marked FIX)");
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_parsed() {
        let s = parse_status(
            "cache=/c\nroot=ready /c/roots/x/rootfs\nbootstrap=mmdebstrap\nbootstrap=debootstrap\nnoise\n",
        );
        assert_eq!(s["cache"], vec!["/c"]);
        assert_eq!(s["root"], vec!["ready /c/roots/x/rootfs"]);
        assert_eq!(s["bootstrap"], vec!["mmdebstrap", "debootstrap"]);
    }

    /// `provision.sh status` of this repository's script with the cache `cache`.
    fn script_status(cache: &Path) -> BTreeMap<String, Vec<String>> {
        // The supervisor's tests end every descendant of this process: not this one meanwhile.
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap();
        let out = Command::new("bash")
            .arg(repo.join("qemu-integration/provision/provision.sh"))
            .arg("status")
            .env("BELFRY_CACHE", cache)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        parse_status(&String::from_utf8_lossy(&out.stdout))
    }

    #[test]
    fn an_empty_cache_needs_the_one_root_command_for_ordinary_users() {
        let dir = tempfile::tempdir().unwrap();
        let status = script_status(dir.path());
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap();
        let one = format!(
            "sudo env BELFRY_CACHE={} {}/qemu-integration/provision/provision.sh all",
            dir.path().display(),
            repo.display()
        );
        let user = cache(&status, false);
        // The root and both kernel flavours, each with the same command and its estimate.
        for what in ["provisioning root", "kernel distro", "kernel debug"] {
            let f = user.iter().find(|f| f.what == what).unwrap();
            assert_eq!(f.level, Level::Problem, "{what}: {}", f.detail);
            assert!(f.fix.starts_with("once, as root (") && f.fix.contains(&one), "{what}: {}", f.fix);
            assert!(f.fix.contains(" min"), "{what} gives an estimate: {}", f.fix);
        }
        let as_root = cache(&status, true);
        assert!(as_root.iter().all(|f| f.level != Level::Problem), "{as_root:?}");
        assert_eq!(as_root.iter().find(|f| f.what == "kernel distro").unwrap().level, Level::Note);
        assert_eq!(as_root.iter().find(|f| f.what == "cache").unwrap().level, Level::Ok);
    }

    #[test]
    fn each_kernel_flavour_is_reported() {
        let status = parse_status(
            "cache=/c\nroot=ready /r\nkernel=ready /c/kernels/distro-x\nkernel-distro=ready /c/kernels/distro-x\nkernel-debug=missing /c/kernels/linux-y\n",
        );
        let found = kernels(&status, true, "CMD");
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].what, found[0].level), ("kernel distro", Level::Ok));
        assert_eq!((found[1].what, found[1].level), ("kernel debug", Level::Note));
        assert!(found[1].detail.starts_with("missing /c/kernels/linux-y: "), "{}", found[1].detail);
        assert!(found[1].detail.contains("--kernel debug"), "{}", found[1].detail);
        // An ordinary user cannot build the missing one: the root command.
        let user = kernels(&status, false, "CMD");
        assert_eq!((user[1].level, user[1].fix.as_str()), (Level::Problem, "CMD"));
        // A status without the flavour lines (an older provision.sh) is said, not taken as ready.
        let old = kernels(&parse_status("cache=/c\nkernel=ready /k\n"), false, "CMD");
        assert!(old.iter().all(|f| f.level == Level::Note && f.detail.contains("does not know")));
    }

    #[test]
    fn an_unwritable_cache_is_a_problem_with_a_fix_unless_it_is_provisioned() {
        // Under a file: no one can create it (a test of permissions would pass as root).
        let status = parse_status("cache=/dev/null/belfry\nroot=ready /r\nkernel=ready /k\nall=missing\n");
        let found = cache(&status, false);
        let c = found.iter().find(|f| f.what == "cache").unwrap();
        assert_eq!(c.level, Level::Problem);
        assert!(c.fix.contains("BELFRY_CACHE"));
        // Root provisioned it for this user: runs only read it.
        let ready = parse_status("cache=/dev/null/belfry\nroot=ready /r\nkernel-distro=ready /k\nall=ready\n");
        let c = cache(&ready, false).into_iter().find(|f| f.what == "cache").unwrap();
        assert_eq!(c.level, Level::Ok, "{}", c.detail);
    }

    #[test]
    fn rendering_marks_problems_and_gives_fixes() {
        let text = render(&[
            finding("kvm", Level::Note, "runs use TCG", "load kvm"),
            finding("disk", Level::Problem, "full", "free some"),
            finding("user", Level::Ok, "root", ""),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("note kvm"));
        assert!(lines[1].trim_start().starts_with("fix: load kvm"));
        assert!(lines[2].starts_with("FIX  disk"));
        assert!(lines[4].starts_with("ok   user"));
    }
}
