//! Running the fuzzer in a forked child with a deadline: a wedged module (a call that never
//! returns despite the interval timer) is reported with the operation count and the last ioctl,
//! and whatever the child did is gone with it before the caller checks the module.
#![allow(unsafe_code)] // fork, waitpid, kill and a shared anonymous page.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use belfry_abi::ioctls;

use super::{run, Config, Progress, Stats};
use crate::harness::tasks::where_threads_wait;

/// What the child leaves in the shared page: its progress, then its statistics.
#[repr(C)]
struct Shared {
    progress: Progress,
    stats: Stats,
    done: u64,
}

/// Runs [`run`] in a child process and returns its statistics once it exited.
///
/// # Errors
/// The child did not finish within `deadline` (killed; the message names the last ioctl),
/// died, or could not be set up.
pub fn run_forked(path: &Path, config: &Config, deadline: Duration) -> Result<Stats, String> {
    let len = core::mem::size_of::<Shared>().next_multiple_of(4096);
    // SAFETY: a fresh anonymous shared mapping, unmapped below.
    let page = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the page is zeroed, which is a valid `Shared` (atomics and integers), and lives
    // until the munmap at the end of this function.
    let shared = unsafe { &mut *page.cast::<Shared>() };
    let result = fork_and_wait(path, config, deadline, shared);
    // SAFETY: the mapping made above, no longer referenced.
    unsafe { libc::munmap(page, len) };
    result
}

fn fork_and_wait(path: &Path, config: &Config, deadline: Duration, shared: &mut Shared) -> Result<Stats, String> {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // SAFETY: the caller is single-threaded; the child fuzzes and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = match run(path, config, &shared.progress) {
            Ok(s) => {
                shared.stats = s;
                shared.done = 1;
                0
            }
            Err(e) => {
                eprintln!("fuzz: {e}");
                1
            }
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let start = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if start.elapsed() > deadline {
            let ops = shared.progress.ops.load(Ordering::Relaxed);
            let code = shared.progress.last_ioctl.load(Ordering::Relaxed);
            let name = ioctls::ALL.iter().find(|(_, c)| u64::from(*c) == code).map_or("none", |(n, _)| n);
            let threads = where_threads_wait(pid);
            // SAFETY: our unreaped child; killed and reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(format!(
                "the fuzzer (seed {}) made no exit within {deadline:?}: {ops} operations, last ioctl {name}; its \
                 threads wait in: {threads}",
                config.seed
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 && shared.done == 1) {
        return Err(format!("the fuzzer (seed {}) died: wait status {status:#x}", config.seed));
    }
    Ok(shared.stats.clone())
}
