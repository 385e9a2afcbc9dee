//! Everything a run does before the boot: the nested cargo builds ([`compile`]),
//! provision.sh ([`provision`]: guest kernel, module, QEMU, initramfs), what goes into the
//! initramfs ([`guest`]), `conformance --filter` ([`filter`]), the VFIO selftests and their
//! modules ([`selftests`]), one line per step ([`steps`]),
//! and [`prepare`], which runs them (the kernel alongside the cargo builds) and returns the
//! plan of the boot.

pub mod boot_image;
pub mod compile;
pub mod filter;
pub mod guest;
pub mod prepare;
pub mod provision;
pub mod selftests;
pub mod steps;
