//! Whose share an object counts against (no rule family): a process is its thread group for as
//! long as it lives — forked children are processes of their own, an exec from any of its
//! threads leaves it the same process, and a later process that reuses its number is another —
//! and one user's processes together cannot take every context of a device.
#![allow(unsafe_code)] // mknod, set*id, execv, pid_max.

use std::ffi::CString;
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use belfry_abi::mailbox::MAX_CONTEXTS;
use belfry_abi::uapi_debug;
use belfry_umd::{Device, Timeline};

use super::privilege::{drop_capability, CAP_SYS_ADMIN};
use crate::harness::channel::{Channel, Side};
use crate::harness::exec_probe;
use crate::harness::proc::{self, Child};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::other_user::{become_other_user, OpenNode};
use crate::support::work::{kernel_queue, write32};
use crate::support::WAIT;
use crate::{Test, TestResult};

/// One process's share of contexts (a quarter of the device's `MAX_CONTEXTS`).
const PROCESS_SHARE: u32 = MAX_CONTEXTS / 4;

/// How many process shares of contexts one user's processes may hold together.
const USER_SHARES: u32 = 3;

/// The forked children of [`forked_children_of_one_user_leave_another_user_a_context`].
const CHILDREN: usize = 8;

/// `CAP_PERFMON`.
const CAP_PERFMON: u32 = 38;

/// Creates up to `limit` contexts on `raw`: how many it got, and the errno that stopped it.
fn take_contexts(raw: &RawDev, limit: u32) -> (u32, Option<i32>) {
    for taken in 0..limit {
        if let Err(e) = raw.create_context() {
            return (taken, Some(e));
        }
    }
    (limit, None)
}

/// The per-user ceiling: [`CHILDREN`] forked children of this process (one user), each
/// creating up to a process's share of contexts (64) and holding them, get together no more than
/// [`USER_SHARES`] shares (192 of the device's 256), every child stopped short is refused with
/// `ENOSPC`, and a process of another user (`nobody`, on a node of the device it may open) then
/// still creates a context.
fn forked_children_of_one_user_leave_another_user_a_context(path: &Path) -> TestResult {
    let mut children: Vec<(Channel, Child)> = Vec::new();
    let mut got = Vec::new();
    let result = (|| -> TestResult {
        for _ in 0..CHILDREN {
            let ch = Channel::new(WAIT)?;
            let child = proc::spawn("a forked child", || {
                let raw = RawDev::open(path)?;
                let (taken, refused) = take_contexts(&raw, PROCESS_SHARE);
                let errno = refused.map_or(0, |e| u64::try_from(e).unwrap_or(u64::MAX));
                ch.send(Side::Child, u64::from(taken) | errno << 32, None)?;
                // Holds its contexts until the parent is done.
                ch.recv(Side::Child)?;
                Ok(())
            })?;
            let (word, _) = ch.recv(Side::Parent)?;
            children.push((ch, child));
            // CAST: the two halves of the word the child sent.
            got.push((word as u32, (word >> 32) as i32));
        }
        let node = OpenNode::new(path)?;
        let other = proc::spawn("a process of another user", || {
            become_other_user()?;
            let raw = RawDev::open(&node.path)?;
            raw.create_context().map_err(|e| {
                format!(
                    "another user's CREATE_CONTEXT after one user's {CHILDREN} children took theirs: {}",
                    errno_name(e)
                )
            })?;
            Ok(())
        })?;
        other.join()?;
        drop(node);
        let total: u32 = got.iter().map(|g| g.0).sum();
        ensure!(
            total <= USER_SHARES * PROCESS_SHARE,
            "{CHILDREN} forked children of one user hold {total} contexts, more than {USER_SHARES} shares of {PROCESS_SHARE}: {got:?}"
        );
        if let Some(g) = got.iter().find(|g| g.0 < PROCESS_SHARE && g.1 != libc::ENOSPC) {
            return Err(
                format!("a child stopped at {} contexts with errno {}, expected ENOSPC", g.0, errno_name(g.1)).into()
            );
        }
        Ok(())
    })();
    for (ch, child) in children {
        let _ = ch.send(Side::Parent, 1, None);
        child.join()?;
    }
    result
}

/// An exec from a non-leader thread keeps the process's share: a forked child takes its full
/// share of contexts (64) on a close-on-exec file, then a thread other than its main one
/// execs the suite's binary (`--count-contexts`); the exec closes the file, which gives back
/// all 64, so the process (the same process id) creates 64 contexts again.
fn an_exec_from_a_non_leader_thread_gives_the_whole_share_back(path: &Path) -> TestResult {
    let exe = std::env::current_exe()?;
    let child = proc::spawn("a process that execs from a thread", || {
        let raw = RawDev::open(path)?;
        let (taken, refused) = take_contexts(&raw, PROCESS_SHARE);
        ensure!(
            taken == PROCESS_SHARE,
            "the process created {taken} contexts before the exec: {:?}",
            refused.map(errno_name)
        );
        let args = [
            CString::new("belfry-conformance")?,
            CString::new(exec_probe::COUNT_CONTEXTS)?,
            CString::new(path.as_os_str().as_bytes())?,
        ];
        let exe = CString::new(exe.as_os_str().as_bytes())?;
        let thread = std::thread::spawn(move || {
            let argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).chain([core::ptr::null()]).collect();
            // SAFETY: `exe` and `argv` are valid, null-terminated; on success nothing returns.
            unsafe { libc::execv(exe.as_ptr(), argv.as_ptr()) };
            std::io::Error::last_os_error()
        });
        let e = thread.join().map_err(|_| "the exec thread panicked")?;
        drop(raw);
        Err(format!("execv from a thread: {e}").into())
    })?;
    let code = child.exit_code()?;
    ensure!(
        code == Some(i32::try_from(PROCESS_SHARE)?),
        "after an exec from a non-leader thread the process created {code:?} contexts (exit status), expected its whole share {PROCESS_SHARE}"
    );
    Ok(())
}

/// `/proc/sys/kernel/pid_max`.
const PID_MAX: &str = "/proc/sys/kernel/pid_max";

/// A low `pid_max` (the kernel takes 301 and up): once past it, pids wrap to 300, so they are
/// handed out again within 64 forks.
const PID_WINDOW_END: u32 = 364;

/// The pids below which the kernel never wraps (`RESERVED_PIDS`).
const RESERVED_PIDS: libc::pid_t = 300;

/// `pid_max` lowered to [`PID_WINDOW_END`] (so pids are handed out again within a few dozen
/// forks), restored on drop.
struct NarrowPids {
    saved: String,
}

impl NarrowPids {
    /// Lowers `pid_max`, then forks (children that exit at once) until the pids handed out are
    /// past [`RESERVED_PIDS`]: from then on they cycle through the window.
    fn new() -> Result<NarrowPids, crate::Error> {
        let saved = std::fs::read_to_string(PID_MAX)?;
        std::fs::write(PID_MAX, PID_WINDOW_END.to_string())?;
        let narrow = NarrowPids { saved };
        for _ in 0..=PID_WINDOW_END {
            let child = proc::spawn("a fork moving the pid cursor", || Ok(()))?;
            let pid = child.pid();
            child.join()?;
            if pid >= RESERVED_PIDS {
                return Ok(narrow);
            }
        }
        Err(format!("no fork got a pid of {RESERVED_PIDS} or above with pid_max {PID_WINDOW_END}").into())
    }
}

impl Drop for NarrowPids {
    fn drop(&mut self) {
        let _ = std::fs::write(PID_MAX, self.saved.trim());
    }
}

/// The thread events (`TIMELINE_CPU_WAIT_START` and on) the timeline shows `dev`'s caller.
fn thread_events(dev: &Device) -> Result<Vec<uapi_debug::TimelineEntry>, crate::Error> {
    let mut t = Timeline::new();
    Ok(t.read(dev)?.into_iter().filter(|e| uapi_debug::is_thread_event(e.operation)).collect())
}

/// A process that reuses a dead process's pid is a new process: process A (a forked child)
/// submits kernel-mode work (a thread event of its pid in the timeline), takes its full share of
/// contexts (64) on a file it hands to the suite, and exits; with `pid_max` narrowed the suite
/// forks until a child gets A's pid again. That child, without `CAP_PERFMON` and
/// `CAP_SYS_ADMIN`, reads no thread event in the timeline (A's are not its own) and creates a
/// context (A's 64, still held by its file, are not its own either).
fn a_process_reusing_a_pid_inherits_nothing_of_the_dead_one(path: &Path) -> TestResult {
    let narrow = NarrowPids::new()?;
    let ch = Channel::new(WAIT)?;
    let a = proc::spawn("process A", || {
        {
            let dev = Device::open(path)?;
            let ctx = dev.create_context()?;
            let buf = ctx.alloc(4096, 0)?;
            let mut q = kernel_queue(&ctx)?;
            let v = write32(&mut q, buf.gpu_va(), 0xA11CE)?;
            q.wait(v, WAIT)?;
        }
        let raw = RawDev::open(path)?;
        let (taken, refused) = take_contexts(&raw, PROCESS_SHARE);
        ensure!(taken == PROCESS_SHARE, "process A created {taken} contexts: {:?}", refused.map(errno_name));
        ch.send(Side::Child, u64::from(taken), Some(raw.as_fd()))?;
        Ok(())
    })?;
    let a_pid = a.pid();
    let (_, a_file) = ch.recv(Side::Parent)?;
    let a_file = a_file.ok_or("process A sent no file")?;
    a.join()?;
    let mut reused = false;
    for _ in 0..2 * PID_WINDOW_END {
        let b = proc::spawn("the process with A's pid", || {
            if std::process::id() != u32::try_from(a_pid)? {
                return Ok(());
            }
            drop_capability(CAP_PERFMON)?;
            drop_capability(CAP_SYS_ADMIN)?;
            let mut faults = Vec::new();
            let dev = Device::open(path)?;
            let seen = thread_events(&dev)?;
            if !seen.is_empty() {
                faults.push(format!(
                    "it read {} thread event(s) of its predecessor: {:?}",
                    seen.len(),
                    &seen[..seen.len().min(3)]
                ));
            }
            let raw = RawDev::open(path)?;
            if let Err(e) = raw.create_context() {
                faults.push(format!(
                    "its first CREATE_CONTEXT failed with {} (its predecessor's file holds 64)",
                    errno_name(e)
                ));
            }
            ensure!(faults.is_empty(), "a process reusing pid {a_pid}: {}", faults.join("; "));
            Ok(())
        })?;
        let got = b.pid() == a_pid;
        b.join()?;
        if got {
            reused = true;
            break;
        }
    }
    drop(narrow);
    drop(a_file);
    ensure!(
        reused,
        "pid {a_pid} was not handed out again within {} forks (pid_max {PID_WINDOW_END})",
        2 * PID_WINDOW_END
    );
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(forked_children_of_one_user_leave_another_user_a_context, Default, []),
        test_entry!(an_exec_from_a_non_leader_thread_gives_the_whole_share_back, Default, []),
        test_entry!(a_process_reusing_a_pid_inherits_nothing_of_the_dead_one, Default, []),
    ]
}
