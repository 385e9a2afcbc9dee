//! A sysfs-writable module parameter of `belfry` (`/sys/module/belfry/parameters/NAME`) set for
//! one test: the old value comes back on drop, a failed test included.

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
