//! A process seen from outside: where its threads (and its children's) wait in the kernel, and
//! SIGKILL for the process group it leads. Used by the runner for a test that overran and by
//! the fuzzer for one that stopped making progress.
#![allow(unsafe_code)] // kill.

/// Where each thread of process `pid` (and of the children of any of its threads) waits: its
/// kernel function (`wchan`) and, readable by root, its kernel stack.
#[must_use]
pub fn where_threads_wait(pid: libc::pid_t) -> String {
    let mut out = Vec::new();
    let mut pids = vec![pid];
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(children.split_whitespace().filter_map(|c| c.parse::<libc::pid_t>().ok()));
        }
    }
    for p in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for task in tasks.flatten() {
            let dir = task.path();
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            let stack: Vec<String> =
                read("stack").lines().filter_map(|l| l.split_whitespace().nth(1).map(str::to_string)).take(8).collect();
            out.push(format!(
                "{p}/{} {} [{}]",
                task.file_name().to_string_lossy(),
                read("wchan").trim(),
                stack.join(" < ")
            ));
        }
    }
    out.join("; ")
}

/// SIGKILLs process group `pgid` (a child started as its group's leader, with everything it
/// started since).
pub fn kill_group(pgid: libc::pid_t) {
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}
