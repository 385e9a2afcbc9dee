//! A sysfs-writable module parameter of `belfry` (`/sys/module/belfry/parameters/NAME`) set for
//! one test: the old value comes back on drop, a failed test included; and the shortened
//! timeouts of the tests that wait for one to run out.

/// The parameter `name` as it was before [`ModuleParam::set`].
pub(crate) struct ModuleParam {
    path: String,
    old: String,
}

impl ModuleParam {
    /// Sets parameter `name` to `value` until the guard is dropped.
    pub(crate) fn set(name: &str, value: u32) -> Result<ModuleParam, crate::Error> {
        let path = format!("/sys/module/belfry/parameters/{name}");
        let old = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        std::fs::write(&path, value.to_string()).map_err(|e| format!("writing {path}: {e}"))?;
        Ok(ModuleParam { path, old: old.trim().to_string() })
    }
}

impl Drop for ModuleParam {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.old);
    }
}

/// The module's mailbox timeout (`mailbox_timeout_ms`, 5 s by default) while a test waits for a
/// silent device's command to time out (ms): a command's round trip is a fraction of a
/// millisecond on the distro kernel and a few milliseconds on the debug kernel, so what is
/// tested (the timeout runs out, the device is lost and comes back) does not need the default's
/// length, and no answered command comes near this one.
pub(crate) const SILENT_DEVICE_MAILBOX_TIMEOUT_MS: u32 = 1500;

/// [`SILENT_DEVICE_MAILBOX_TIMEOUT_MS`] as the module's mailbox timeout until the guard is
/// dropped.
pub(crate) fn silent_device_mailbox_timeout() -> Result<ModuleParam, crate::Error> {
    ModuleParam::set("mailbox_timeout_ms", SILENT_DEVICE_MAILBOX_TIMEOUT_MS)
}

/// The module's wait for a closing file's queued work (`close_drain_timeout_ms`, 2 s by default)
/// while a test's process exits with work that can never finish (ms): the drain times out
/// whatever its length, and that it timed out, not how long it took, is what such a test checks.
pub(crate) const UNFINISHABLE_WORK_CLOSE_DRAIN_MS: u32 = 200;

/// [`UNFINISHABLE_WORK_CLOSE_DRAIN_MS`] as the module's close drain until the guard is dropped.
pub(crate) fn unfinishable_work_close_drain() -> Result<ModuleParam, crate::Error> {
    ModuleParam::set("close_drain_timeout_ms", UNFINISHABLE_WORK_CLOSE_DRAIN_MS)
}
