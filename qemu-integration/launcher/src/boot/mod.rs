//! The boot and everything that runs during it: the QEMU command line ([`qemu`]), the device
//! processes and their flags ([`devices`]), the supervisor of the children, their streams and
//! the end of a run ([`supervise`]), the guest console's lines ([`console`]) and waking a
//! guest from suspend-to-idle ([`wake`]).

pub mod console;
pub mod devices;
pub mod qemu;
pub mod supervise;
pub mod wake;
