//! The boot and everything that runs during it: the QEMU command line ([`qemu`]), the device
//! processes and their flags ([`devices`]), the supervisor of the children, their streams and
//! the end of a run ([`supervise`]), the guest console's lines ([`console`]), waking a guest
//! from suspend-to-idle ([`wake`]) and the CPU hog of `--load` ([`load`]).

pub mod console;
pub mod devices;
pub mod load;
pub mod qemu;
pub mod supervise;
pub mod wake;
