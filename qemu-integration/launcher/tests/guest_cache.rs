//! Guest-boot tests of the provisioning cache as the launcher uses it: each guest kernel
//! flavour boots through `provision.sh run-qemu` from a cache provisioned by root, run by an
//! ordinary user (this user, or `nobody` when the tests run as root), and through a cache
//! directory reached by a symlink. Each boot is the smallest guest (busybox and a script that
//! prints a marker); they need the provisioned cache (`provision.sh status`) and are ignored
//! unless asked for (`cargo test -p belfry-launcher --test guest_cache -- --ignored`).

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One boot at a time: they share two cores.
static BOOTS: Mutex<()> = Mutex::new(());

/// What the guest's `/belfry/run` prints.
const MARKER: &str = "belfry-cache-boot-ok";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("the repository").to_path_buf()
}

fn script() -> PathBuf {
    repo().join("qemu-integration/provision/provision.sh")
}

/// Who runs provision.sh: the tests' own user, or `nobody` (dropping root's rights).
#[derive(Clone, Copy, PartialEq, Eq)]
enum As {
    Myself,
    Nobody,
}

const NOBODY: u32 = 65534;

/// An ordinary user to boot as: this user unless it is root.
fn ordinary() -> As {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        As::Nobody
    } else {
        As::Myself
    }
}

/// `provision.sh ARGS` as `who`, with the cache `cache` (None: the script's default).
fn provision(who: As, cache: Option<&Path>, dir: &Path, args: &[OsString]) -> Command {
    let mut command = match who {
        As::Myself => Command::new("bash"),
        As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups", "--", "bash"]);
            c.env("HOME", dir);
            c
        }
    };
    command.arg(script()).args(args).current_dir(dir).stdin(Stdio::null());
    if let Some(cache) = cache {
        command.env("BELFRY_CACHE", cache);
    }
    command
}

/// The stdout line of a provision.sh subcommand that must succeed.
fn answer(who: As, cache: Option<&Path>, dir: &Path, args: &[&str]) -> String {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let out = provision(who, cache, dir, &args).output().expect("run provision.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "provision.sh {args:?} failed ({}):\n{}{}",
        out.status,
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().last().unwrap_or("").trim().to_string()
}

/// The provisioned cache (`provision.sh status`), if it holds the root and the `flavour` kernel.
fn provisioned(flavour: &str) -> Option<PathBuf> {
    let out = Command::new("bash").arg(script()).arg("status").stderr(Stdio::null()).output().ok()?;
    let status = String::from_utf8_lossy(&out.stdout).into_owned();
    let get = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=')).unwrap_or("");
    if !get("root").starts_with("ready") || !get(&format!("kernel-{flavour}")).starts_with("ready") {
        println!("skipped: the cache has no root or no {flavour} kernel yet (provision.sh status):\n{status}");
        return None;
    }
    Some(PathBuf::from(get("cache")))
}

/// A temporary directory that `who` may enter.
fn temp_dir(who: As) -> tempfile::TempDir {
    let temp = tempfile::tempdir().unwrap();
    if who == As::Nobody {
        fs::set_permissions(temp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    }
    temp
}

/// A directory that `who` owns.
fn owned_dir(who: As, path: &Path) -> PathBuf {
    fs::create_dir_all(path).unwrap();
    if who == As::Nobody {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    path.to_path_buf()
}

/// Boots the `flavour` kernel of cache `cache` (as spelled) as `who`, with its initramfs, console
/// and QEMU's working directory in `boot` (which `who` owns); returns the console output.
fn boot(who: As, cache: &Path, flavour: &str, boot: &Path) -> String {
    let _one_at_a_time = BOOTS.lock().unwrap_or_else(|e| e.into_inner());
    let tree = PathBuf::from(answer(who, Some(cache), boot, &["kernel", flavour]));
    assert!(
        tree.starts_with(cache),
        "provision.sh kernel answered {} outside the cache {}",
        tree.display(),
        cache.display()
    );
    let manifest = fs::read_to_string(tree.join(".belfry-manifest")).unwrap();
    let get = |key: &str| manifest.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=')).map(str::to_string);
    let image = tree.join(get("boot").unwrap_or_else(|| "vmlinux".into()));
    let run = boot.join("run");
    fs::write(&run, format!("#!/bin/sh\necho {MARKER}\n")).unwrap();
    fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).unwrap();
    let initrd = boot.join("initramfs.cpio");
    let add = format!("{}:/belfry/run", run.display());
    answer(who, Some(cache), boot, &["initramfs", initrd.to_str().unwrap(), "--add", &add]);
    let append = format!("console=ttyS0 quiet {}", get("append").unwrap_or_default());
    let mut args: Vec<OsString> =
        vec!["run-qemu".into(), "--bind".into(), tree.clone().into(), "--bind".into(), boot.into()];
    args.push("--".into());
    for a in [
        "-M",
        "q35",
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-smp",
        "2",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-net",
        "none",
        "-m",
        "512M",
        "-serial",
        "stdio",
    ] {
        args.push(a.into());
    }
    args.extend(["-kernel".into(), image.clone().into_os_string(), "-initrd".into(), initrd.into_os_string()]);
    args.extend(["-append".into(), append.into()]);
    let start = Instant::now();
    let child = provision(who, Some(cache), boot, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start provision.sh run-qemu");
    // A guard against a guest that never powers off, not a measure: the debug kernel boots
    // slowly under TCG on a loaded machine.
    let pid = child.id();
    let guard = std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(900);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_secs(1));
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid as i32, 0) } != 0 {
                return;
            }
        }
        // SAFETY: ends our own child (QEMU: run-qemu execs it).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    let _ = guard.join();
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!(
        "boot of {} as {}: {} after {:.1} s",
        image.display(),
        who_name(who),
        out.status,
        start.elapsed().as_secs_f64()
    );
    assert!(
        console.contains(MARKER) && console.contains("BELFRY-EXIT 0"),
        "the {flavour} kernel {} did not boot to /belfry/run ({}):\n--- stderr\n{stderr}--- console (last 2000 bytes)\n{}",
        image.display(),
        out.status,
        &console[console.len().saturating_sub(2000)..]
    );
    console
}

fn who_name(who: As) -> &'static str {
    match who {
        As::Myself => "this user",
        As::Nobody => "nobody",
    }
}

/// Each flavour from the provisioned cache as an ordinary user. An ordinary user's cache is
/// provisioned by root (`doctor` prints the command) into the user's own cache directory, so
/// the provisioning root holds the cache's path (root-owned) and the user's runs need
/// directories beside it: the boot directory is made beside the cache when the booting user may
/// write there, named longer than the kernel tree's path so that it is bound after the tree.
fn boots_from_a_root_owned_cache(flavour: &str) {
    let Some(cache) = provisioned(flavour) else { return };
    let who = ordinary();
    if who == As::Nobody && !world_readable(&script()) {
        println!("skipped: the tests run as root and nobody cannot read {}", script().display());
        return;
    }
    let parent = cache.parent().expect("the cache has a parent");
    let pad = "x".repeat(cache.as_os_str().len() + 80);
    let beside = parent.join(format!("belfry-boot-{flavour}-{}-{pad}", std::process::id()));
    let temp;
    let dir = if who == As::Myself && fs::create_dir(&beside).is_ok() {
        beside.clone()
    } else {
        println!("{} cannot write beside the cache; booting from a temporary directory", who_name(who));
        temp = temp_dir(who);
        owned_dir(who, &temp.path().join(&pad))
    };
    let result = std::panic::catch_unwind(|| boot(who, &cache, flavour, &dir));
    let _ = fs::remove_dir_all(&beside);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn world_readable(path: &Path) -> bool {
    path.ancestors().all(|p| fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005 || !m.is_dir()))
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn the_distro_kernel_boots_from_a_root_owned_cache_as_an_ordinary_user() {
    boots_from_a_root_owned_cache("distro");
}

#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn the_debug_kernel_boots_from_a_root_owned_cache_as_an_ordinary_user() {
    boots_from_a_root_owned_cache("debug");
}

/// `BELFRY_CACHE` a symlink to the provisioned cache: provision.sh answers paths spelled
/// through the link, and QEMU is given them; as this user and, when the tests run as root, as
/// nobody too.
#[test]
#[ignore = "boots a TCG guest: run with --ignored"]
fn a_kernel_boots_through_a_symlinked_cache() {
    let Some(cache) = provisioned("distro") else { return };
    let mut users = vec![As::Myself];
    if ordinary() == As::Nobody && world_readable(&script()) {
        users.push(As::Nobody);
    }
    for who in users {
        let temp = temp_dir(who);
        let top = owned_dir(who, &temp.path().join("t"));
        let link = top.join("cache");
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        let dir = owned_dir(who, &top.join("boot"));
        boot(who, &link, "distro", &dir);
    }
}
