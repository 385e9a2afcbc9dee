// SPDX-License-Identifier: GPL-2.0

//! Layer 1, the bottom: the raw `kernel::bindings` uses of the driver, kept here and nowhere
//! else. Nothing in this layer knows the driver: each file wraps one kernel facility the Linux
//! 7.3 Rust abstractions do not cover, in a form any driver could use.
//!
//! - [`pci`]: a PCI id for a vendor outside `pci::Vendor`'s list, the PCI disable that
//!   `enable_device_mem` lacks, `pci_clear_master`;
//! - [`mm`]: `vm_pgoff`, `remap_pfn_range` of the module's pages, `unmap_mapping_range` ([`mm::FileMapping`]) and the
//!   pfn of a kernel address;
//! - [`pfnmap`]: a one-page VM_PFNMAP|VM_IO mapping whose page is inserted on fault from a
//!   [`pfnmap::PfnTarget`] that can be retargeted and holds the system page it shows (7.3 has
//!   no `vm_operations_struct` hook);
//! - [`vmaref`]: VMAs holding a counted reference to what they map (`open`/`close`), as GEM's
//!   VMAs hold their object;
//! - [`anonfile`]: an `anon_inode` file holding one counted reference to any object;
//! - [`eventfd`]: eventfd contexts;
//! - [`dmafence`]: `dma_fence`s of our own and their `sync_file` export;
//! - [`param`]: the sysfs-writable `native_fences` and `hang_timeout_ms` module parameters and
//!   `PF_SIGNALED`;
//! - [`reprobe`]: `device_reprobe`, unbinding and probing a device again (device-lost recovery);
//! - [`reset`]: `reset_prepare`/`reset_done`, the PCI core's hooks around a function reset;
//! - [`cap`]: `capable`, the current task's capabilities;
//! - [`pid`]: a counted reference to a process's thread-group `struct pid`, its identity;
//! - [`taint`]: `add_taint` with `TAINT_TEST` (a device with test-only fault injections).
//! - [`signal`]: `fatal_signal_pending`, what ends a killable wait;
//! - [`runtime_pm`]: runtime PM hooks (a PM domain wrapping the PCI core's callbacks) and
//!   references (`pm_runtime_get_sync`, `pm_runtime_put_autosuspend`);
//! - [`workqueue`]: `system_percpu_wq` (the crate's `system()` is the deprecated `system_wq`),
//!   a workqueue of our own drained on drop, and `cancel_delayed_work_sync`.

pub(crate) mod anonfile;
pub(crate) mod cap;
pub(crate) mod dmafence;
pub(crate) mod eventfd;
pub(crate) mod mm;
pub(crate) mod param;
pub(crate) mod pci;
pub(crate) mod pfnmap;
pub(crate) mod pid;
pub(crate) mod reprobe;
pub(crate) mod reset;
pub(crate) mod runtime_pm;
pub(crate) mod signal;
pub(crate) mod taint;
pub(crate) mod vmaref;
pub(crate) mod workqueue;
