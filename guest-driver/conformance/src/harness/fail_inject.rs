//! `--fail-inject PERCENT`: the kernel's fault injection turned on for the tests' own tasks, so
//! that the module's error paths (its roll-backs after a failed allocation) run.
//!
//! Both of the kernel's allocation faults are set up through debugfs (`failslab`: slab
//! allocations, `kmalloc` and the kernel's caches; `fail_page_alloc`: whole pages), each failing
//! PERCENT of the allocations it is asked about, and asked only about allocations that
//!
//! - a task marked `make-it-fail` makes (`task-filter`): the test's own process, started from a
//!   thread marked only for the start, and the processes and threads it starts, which inherit
//!   the mark; never the runner's own checks, the module's workers or interrupt threads;
//! - with the module's code on the stack (`require-start`/`require-end`: the module's core, from
//!   `/proc/modules` and its `coresize`), so a failure lands where the module asked for memory,
//!   directly or through the kernel's C (files, fences, page tables, xarrays).
//!
//! Allocations that may sleep are failed too (`ignore-gfp-wait` off). Each fault's `times`
//! counts down once per failure, so the runner reads how many it injected during each test.
//!
//! Under injection a test's own verdict is not the question (an `ENOMEM` it did not expect
//! fails it); [`judge`] asks whether the module stayed sound: every device's live objects
//! (contexts, queues, allocations, doorbells, mapped GPU pages) are back where they were before
//! the test. The launcher's console check fails the run on any KASAN, kmemleak, lockdep, UBSAN
//! or DEBUG_OBJECTS report the failures provoke, and `conformance.sh` scans for leaks after the
//! suite.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::raw::{live_objects, RawDev};

/// Where debugfs is mounted in the guest.
const DEBUGFS: &str = "/sys/kernel/debug";

/// The two faults, by their debugfs directory.
const FAULTS: [&str; 2] = ["failslab", "fail_page_alloc"];

/// Each fault's budget of failures (`times`): far more than a run injects, so it never runs out
/// and what it counted down is the number injected.
const BUDGET: i64 = 1_000_000_000;

/// How long the module may take to release a test's objects after the test's processes ended
/// (deferred work: reclaim, the hang watchdog's reset, a reprobe).
const SETTLE: Duration = Duration::from_secs(15);

/// The module whose code must be on the stack.
const MODULE: &str = "belfry";

/// Fault injection as set up for this run.
#[derive(Debug)]
pub struct FailInject {
    /// The probability of each asked-about allocation failing, in percent.
    pub percent: u32,
}

/// Failures injected during one test: (slab, page).
pub type Injected = (i64, i64);

/// What the module held before a test: each device's live objects.
#[derive(Debug)]
pub struct Before {
    devices: Vec<(PathBuf, [u64; 5])>,
    budget: Injected,
}

impl FailInject {
    /// Sets up both faults for `percent` % of the module's allocations in marked tasks.
    ///
    /// # Errors
    /// The kernel has no fault injection (the distro kernel; `--kernel debug` has it), the
    /// module is not loaded, or a debugfs write failed.
    pub fn setup(percent: u32) -> io::Result<FailInject> {
        if !(1..=100).contains(&percent) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("--fail-inject {percent}: a percentage from 1 to 100"),
            ));
        }
        let (start, end) = filter_to_module()?;
        for fault in FAULTS {
            arm(fault, percent)?;
        }
        println!(
            "fault injection: failslab and fail_page_alloc at {percent} % of the allocations the tests' tasks make with the module ({start:#x}..{end:#x}) on the stack"
        );
        Ok(FailInject { percent })
    }

    /// Reads every device's live objects and the faults' budgets.
    ///
    /// # Errors
    /// A device did not open or answer, or debugfs did not answer.
    pub fn before(&self, devices: &[PathBuf]) -> io::Result<Before> {
        let mut held = Vec::new();
        for path in devices {
            let (objects, _) = objects(path)?;
            held.push((path.clone(), objects));
        }
        let budget = budgets()?;
        Ok(Before { devices: held, budget })
    }

    /// Runs `start` (which starts the test's process) with this thread marked for failures,
    /// so the process and whatever it starts inherit the mark and this thread keeps none.
    ///
    /// # Errors
    /// procfs did not take the mark, or `start`'s error.
    pub fn start_marked<T>(&self, start: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        marked(start)?
    }

    /// Waits until every device's live objects are back where `before` found them: the
    /// failures injected, or why the module did not stay sound.
    ///
    /// # Errors
    /// The objects a device still holds after [`SETTLE`], with what it held before.
    pub fn judge(&self, before: Before) -> Result<Injected, String> {
        let after = budgets().map_err(|e| format!("reading the faults' budgets: {e}"))?;
        let injected = (before.budget.0 - after.0, before.budget.1 - after.1);
        let deadline = Instant::now() + SETTLE;
        for (path, was) in &before.devices {
            loop {
                let (now, draining) = objects(path).map_err(|e| format!("{}: {e}", path.display()))?;
                if now == *was && draining == 0 {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{}: the module still holds (contexts, queues, allocations, doorbells, GPU pages) {now:?}, {draining} termination(s) draining, {}s after the test; {was:?} before it ({} slab and {} page allocation failures injected)",
                        path.display(),
                        SETTLE.as_secs(),
                        injected.0,
                        injected.1
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(injected)
    }
}

/// Both faults asked only about allocations with the module's code on the stack, sleeping ones
/// included (their other settings untouched): the module's core range.
///
/// # Errors
/// `NotFound` when the kernel has no fault injection or the module is not loaded; a debugfs
/// write failed.
fn filter_to_module() -> io::Result<(u64, u64)> {
    for fault in FAULTS {
        let dir = Path::new(DEBUGFS).join(fault);
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is absent: this kernel has no {fault} fault injection (the debug kernel has it)",
                    dir.display()
                ),
            ));
        }
    }
    let (start, end) = module_core(MODULE)?;
    for fault in FAULTS {
        let mut attrs: Vec<(&str, String)> = vec![
            ("stacktrace-depth", "32".into()),
            ("require-start", format!("{start:#x}")),
            ("require-end", format!("{end:#x}")),
            ("reject-start", "0".into()),
            ("reject-end", "0".into()),
            ("ignore-gfp-wait", "N".into()),
        ];
        if fault == "fail_page_alloc" {
            attrs.extend([("ignore-gfp-highmem", "N".into()), ("min-order", "0".into())]);
        } else {
            attrs.push(("cache-filter", "N".into()));
        }
        for (name, value) in attrs {
            write_attr(fault, name, &value)?;
        }
    }
    Ok((start, end))
}

/// The kernel's per-task `fail-nth`: the Nth allocation the calling thread makes with the
/// module's code on the stack fails, whichever of the two faults asks (the probabilities do not
/// matter to it).
#[derive(Debug)]
pub struct NthFailure(());

impl NthFailure {
    /// Asks both faults about the module's allocations only ([`filter_to_module`]).
    ///
    /// # Errors
    /// `NotFound` when the kernel has no fault injection (the distro kernel); a debugfs write
    /// failed.
    pub fn set_up() -> io::Result<NthFailure> {
        filter_to_module()?;
        Ok(NthFailure(()))
    }

    /// Runs `f` with the `n`th of the module's allocations in this thread failing: what `f`
    /// returned, and whether the failure was injected (`f` made at least `n` allocations).
    ///
    /// # Errors
    /// `/proc/thread-self/fail-nth` did not take the count.
    pub fn fail<T>(&self, n: u32, f: impl FnOnce() -> T) -> io::Result<(T, bool)> {
        const FAIL_NTH: &str = "/proc/thread-self/fail-nth";
        fs::write(FAIL_NTH, n.to_string())?;
        let result = f();
        let left: u32 = fs::read_to_string(FAIL_NTH)?.trim().parse().unwrap_or(0);
        if left != 0 {
            fs::write(FAIL_NTH, "0")?;
        }
        Ok((result, left == 0))
    }
}

/// The kernel's `fail_page_alloc` failing every allocation of 2^`min_order` pages or more that
/// the calling thread makes with the module's code on the stack, while [`Self::fail`] runs:
/// memory as a guest long up (or a kernel without compaction) has it, with pages free but no
/// contiguous piece that large. Put back (nothing failed, any order) when dropped.
#[derive(Debug)]
pub struct HighOrderFailure(());

impl HighOrderFailure {
    /// Sets `fail_page_alloc` up for the module's allocations of `min_order` or more in marked
    /// tasks (`failslab` untouched).
    ///
    /// # Errors
    /// `NotFound` when the kernel has no fault injection (the distro kernel); a debugfs write
    /// failed.
    pub fn set_up(min_order: u32) -> io::Result<HighOrderFailure> {
        filter_to_module()?;
        arm(FAULTS[1], 100)?;
        write_attr(FAULTS[1], "min-order", &min_order.to_string())?;
        Ok(HighOrderFailure(()))
    }

    /// Runs `f` with the calling thread marked: what `f` returned, and how many allocations
    /// were failed meanwhile.
    ///
    /// # Errors
    /// procfs or debugfs did not answer.
    pub fn fail<T>(&self, f: impl FnOnce() -> T) -> io::Result<(T, i64)> {
        let before = read_attr(FAULTS[1], "times")?;
        let result = marked(f)?;
        Ok((result, before - read_attr(FAULTS[1], "times")?))
    }
}

impl Drop for HighOrderFailure {
    fn drop(&mut self) {
        let _ = write_attr(FAULTS[1], "probability", "0");
        let _ = write_attr(FAULTS[1], "min-order", "0");
    }
}

/// The live objects of the device at `path` now and the process terminations it is still
/// draining, read through a file opened for the purpose: a file held across a test that rebinds
/// the device would keep the old binding, and what it held, alive.
fn objects(path: &Path) -> io::Result<([u64; 5], u32)> {
    let dev = RawDev::open(path)?;
    dev.debug_stats().map(|s| (live_objects(&s), s.terminations_draining)).map_err(io::Error::from_raw_os_error)
}

/// Runs `f` with the calling thread's mark for failures cleared (and put back after): for a
/// device's bind and unbind and the module's load and unload, which run the kernel's own
/// interrupt set-up with the module on the stack, and the kernel's interrupt core leaves an
/// interrupt's `/proc/irq` entries half made when one of its allocations fails, then warns when
/// the interrupt is freed (`remove_proc_entry`, `name 'smp_affinity'`): the kernel's defect,
/// not the module's. A kernel without fault injection runs `f` as it is.
pub fn unmarked<T>(f: impl FnOnce() -> T) -> T {
    let marked = fs::read_to_string(MAKE_IT_FAIL).is_ok_and(|v| v.trim() == "1");
    if marked {
        let _ = mark(false);
    }
    let result = f();
    if marked {
        let _ = mark(true);
    }
    result
}

/// The calling thread's mark for failures (`task-filter`).
const MAKE_IT_FAIL: &str = "/proc/thread-self/make-it-fail";

/// Marks (or unmarks) the calling thread for failures; threads and processes it starts
/// inherit the mark.
fn mark(on: bool) -> io::Result<()> {
    fs::write(MAKE_IT_FAIL, if on { "1" } else { "0" })
}

/// Runs `f` with the calling thread marked for failures (what it starts inherits the mark),
/// then unmarks it.
fn marked<T>(f: impl FnOnce() -> T) -> io::Result<T> {
    mark(true)?;
    let result = f();
    mark(false)?;
    Ok(result)
}

/// Arms `fault` to fail `percent` % of the allocations it is asked about, in marked tasks only,
/// with a budget ([`BUDGET`]) it never runs out of.
fn arm(fault: &str, percent: u32) -> io::Result<()> {
    let attrs: [(&str, String); 6] = [
        ("probability", percent.to_string()),
        ("interval", "1".into()),
        ("times", BUDGET.to_string()),
        ("space", "0".into()),
        ("verbose", "0".into()),
        ("task-filter", "Y".into()),
    ];
    for (name, value) in attrs {
        write_attr(fault, name, &value)?;
    }
    Ok(())
}

/// Each fault's remaining budget: (slab, page).
fn budgets() -> io::Result<Injected> {
    Ok((read_attr(FAULTS[0], "times")?, read_attr(FAULTS[1], "times")?))
}

fn write_attr(fault: &str, name: &str, value: &str) -> io::Result<()> {
    let path = Path::new(DEBUGFS).join(fault).join(name);
    fs::write(&path, value).map_err(|e| io::Error::new(e.kind(), format!("writing {value} to {}: {e}", path.display())))
}

fn read_attr(fault: &str, name: &str) -> io::Result<i64> {
    let path = Path::new(DEBUGFS).join(fault).join(name);
    let text = fs::read_to_string(&path)?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{}: not a number: {text:?}", path.display())))
}

/// The address range of `module`'s core (its text first): `/proc/modules`' load address and
/// `/sys/module/NAME/coresize`.
fn module_core(module: &str) -> io::Result<(u64, u64)> {
    let modules = fs::read_to_string("/proc/modules")?;
    let base = modules.lines().find_map(|line| parse_module_line(line, module)).ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("{module} is not in /proc/modules (not loaded?)"))
    })?;
    let size: u64 = fs::read_to_string(format!("/sys/module/{module}/coresize"))?
        .trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "coresize is not a number"))?;
    if base == 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "/proc/modules shows the module at 0 (kptr_restrict)",
        ));
    }
    Ok((base, base + size))
}

/// The load address of `module` on its `/proc/modules` line (`NAME SIZE REFS DEPS STATE ADDR`).
fn parse_module_line(line: &str, module: &str) -> Option<u64> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.first() != Some(&module) {
        return None;
    }
    u64::from_str_radix(fields.get(5)?.trim_start_matches("0x"), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_address_is_the_sixth_field_of_the_modules_line() {
        let line = "belfry 1503232 0 - Live 0xffffffffc0200000 (OE)";
        assert_eq!(parse_module_line(line, "belfry"), Some(0xffff_ffff_c020_0000));
        assert_eq!(parse_module_line(line, "belfr"), None);
        assert_eq!(parse_module_line("belfry 1 0 - Live", "belfry"), None);
    }
}
