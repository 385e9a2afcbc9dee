//! The usual prologue of a test in one call: open the device, create a context, a 4 KiB
//! allocation and a queue (by default user-mode, its doorbell as created: DISCONNECTED_RETRY).
//!
//! Tests destructure it, `let Fixture { dev, ctx, buf, mut q } = Fixture::new(path)?;`, so the
//! values drop in the reverse of that order, as the hand-written prologue's locals did (queue,
//! allocation, context, device). A field a test does not use is bound to `_name`, not `_` or
//! `..`, which would drop it at once.

use std::path::Path;

use belfry_umd::{Allocation, Context, Device, Queue, QueueDesc, QueueMode};

use crate::Error;

/// Size of [`Fixture::buf`].
pub(crate) const BUF_BYTES: u64 = 4096;

/// A device, a context on it, an allocation and a queue in that context.
#[derive(Debug)]
pub(crate) struct Fixture {
    /// The open device.
    pub(crate) dev: Device,
    /// A context of its own.
    pub(crate) ctx: Context,
    /// [`BUF_BYTES`] of GPU memory in the context, flags 0.
    pub(crate) buf: Allocation,
    /// A queue in the context.
    pub(crate) q: Queue,
}

impl Fixture {
    /// With a user-mode queue of the default description, its doorbell not yet connected.
    pub(crate) fn new(path: &Path) -> Result<Fixture, Error> {
        Self::with_queue(path, &QueueDesc::default())
    }

    /// With a user-mode queue whose doorbell is connected (`CONNECT_DOORBELL`).
    pub(crate) fn connected(path: &Path) -> Result<Fixture, Error> {
        let mut fx = Self::new(path)?;
        fx.q.connect_doorbell()?;
        Ok(fx)
    }

    /// With a kernel-mode queue of the default description.
    pub(crate) fn kernel_mode(path: &Path) -> Result<Fixture, Error> {
        Self::with_queue(path, &QueueDesc::default().with_mode(QueueMode::KernelMode))
    }

    /// With a queue of `desc`.
    pub(crate) fn with_queue(path: &Path, desc: &QueueDesc) -> Result<Fixture, Error> {
        let (dev, ctx) = open_context(path)?;
        let buf = ctx.alloc(BUF_BYTES, 0)?;
        let q = ctx.create_queue(desc)?;
        Ok(Fixture { dev, ctx, buf, q })
    }
}

/// The first two steps alone: the device and a context on it.
pub(crate) fn open_context(path: &Path) -> Result<(Device, Context), Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    Ok((dev, ctx))
}
