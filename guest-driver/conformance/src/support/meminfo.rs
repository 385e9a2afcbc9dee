//! The guest's free memory (`/proc/meminfo`), so a test can check that memory a process let go
//! of came back.

/// `MemAvailable`, in bytes.
///
/// # Errors
/// The file cannot be read or has no such line.
pub(crate) fn available() -> Result<u64, String> {
    let info = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}"))?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:")).ok_or("no MemAvailable in /proc/meminfo")?;
    let kib = line.split_whitespace().nth(1).ok_or("MemAvailable without a value")?;
    kib.parse::<u64>().map(|k| k * 1024).map_err(|e| format!("MemAvailable {kib}: {e}"))
}

/// Whether kmemleak runs (the debug kernel, with KASAN): there KASAN's quarantine holds freed
/// memory back (up to 1/32 of RAM), so MemAvailable is no leak check, and kmemleak, which
/// `conformance.sh` reads after the suite, is the check instead.
pub(crate) fn kmemleak_runs() -> bool {
    std::path::Path::new("/sys/kernel/debug/kmemleak").exists()
}
