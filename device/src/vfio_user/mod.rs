//! The vfio-user server: QEMU (or any vfio-user client) connects over a UNIX socket and drives
//! the device's control plane — configuration space, BAR accesses, DMA mappings, interrupts,
//! reset. Written on `vfio-bindings` and `vmm-sys-util` rather than rust-vmm's `vfio_user`
//! server, for the reasons in docs/DESIGN.md (errno fidelity, bounds checks, re-accept).

pub mod err_irq;
pub mod protocol;
pub mod server;

pub use server::{serve_connection, Listener, ServeError};
