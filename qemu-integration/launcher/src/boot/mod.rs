//! The boot and everything that runs during it: the QEMU command line ([`qemu`]), the device
//! processes and their flags ([`devices`]), the supervisor of the children, their streams and
//! the end of a run ([`supervise`]), the guest console's lines ([`console`]), waking a guest
//! from suspend-to-idle ([`wake`]) through QEMU's monitor ([`qmp`]), the CPU hog of `--load` ([`load`]) and where the guest and
//! the devices run on the host's CPUs ([`placement`]).

pub mod console;
pub mod devices;
pub mod load;
pub mod placement;
pub mod qemu;
pub mod qmp;
pub mod supervise;
pub mod wake;
