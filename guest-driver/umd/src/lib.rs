//! Belfry's user-mode driver (UMD role): the library a guest process uses to reach the GPU
//! through the kernel module's character device.
//!
//! Code map:
//! - [`Device`] (`device.rs`): `/dev/belfry<N>` and its module-wide debug counters;
//! - [`Caps`] (`caps.rs`): what the module and the device offer (`QUERY_CAPS`);
//! - [`Context`] (`context.rs`): a context and its address space, and the objects made in it;
//! - `handle.rs`: the module handles underneath every object (the device file, a handle
//!   destroyed on drop, a context's handle), which the object modules share without depending
//!   on each other: the module graph has no cycle (`handle` ← `memory`, `fence` ← `cmdbuf`
//!   ← `queue` ← `context` ← `device`);
//! - [`Allocation`] (`memory.rs`): GPU memory with a GPU VA and a bounds-checked CPU mapping;
//! - [`CommandBuffer`] (`cmdbuf.rs`): typed packet builder and [`decode`]r over the abi's
//!   packet list (`for_each_packet!`), refusing what the abi's `validate` refuses;
//! - [`Fence`] (`fence.rs`): native fences (CPU value read, signal, wait, pollable wait,
//!   export/import across processes, GPU VA);
//! - [`Queue`] (`queue.rs`): user-mode (ring, ring control, doorbell) or kernel-mode queues;
//! - [`DoorbellPages`] (`dbpages.rs`): a caller's own mapping of a queue's doorbell and status
//!   pages;
//! - [`logslot`]: the fence-log indices the library assigns to every native-fence wait and
//!   signal it queues (LOG-04/05);
//! - [`submit`]: the submission sequence as pure logic over [`QueueOps`], host-tested with a
//!   scripted fake;
//! - `timeline.rs`: the module's fence timeline ([`Timeline`]) and interrupt-path
//!   counters ([`Device::irq_debug`]);
//! - [`Deadline`] (`deadline.rs`): absolute `CLOCK_MONOTONIC` deadlines of every blocking wait
//!   (a wait interrupted by a signal goes on with the same deadline);
//! - [`wait_any`], [`wait_all`] (`wait.rs`): one wait on several fence and progress values;
//! - [`errno`]: errno names and texts for the messages of [`Error`];
//! - `sys.rs`: the only `unsafe` code (open, ioctl, mmap, volatile and atomic page access,
//!   the bytes of a packet struct).
//!
//! Global fence handles and engines are the abi's id newtypes ([`FenceHandle`], [`EngineId`]);
//! the module's per-file handles of contexts, allocations, queues and fences stay `u32`.
//!
//! Every object releases its module object on drop and keeps alive what it was created from
//! (allocations and queues hold their context, contexts hold the device file).
//!
//! The README follows.
#![doc = include_str!("../README.md")]
#![deny(unsafe_code)] // Allowed in `sys` only.

mod caps;
mod cmdbuf;
mod context;
mod dbpages;
mod dbsleep;
mod deadline;
mod device;
pub mod errno;
mod error;
mod fence;
mod handle;
pub mod logslot;
mod memory;
mod queue;
pub mod submit;
mod sys;
mod timeline;
mod verbose;
mod vidmem;
mod wait;

pub use caps::Caps;
pub use cmdbuf::{decode, CommandBuffer, DecodeError, LogSlot, Packet};
pub use context::{AllocFlags, Context, FenceFlags, ResetFlags, ResetStatus};
pub use dbpages::DoorbellPages;
pub use deadline::Deadline;
pub use device::{Device, InterruptCounts};
pub use error::{Error, Result};
pub use fence::{Fence, FenceEvent, FenceKind};
pub use memory::Allocation;
pub use queue::{Queue, QueueDesc};
pub use submit::{QueueMode, QueueOps, SubmitStats, Submitter};
pub use timeline::Timeline;
pub use verbose::VerboseLogWatch;
pub use vidmem::{Segment, SplitBuffer, SplitQueue, VideoAllocation};
pub use wait::{wait_all, wait_any, WaitPoint};

/// The contract crate, re-exported for packet, ring and uapi types.
pub use belfry_abi as abi;
/// The abi's id newtypes the library's API uses.
pub use belfry_abi::ids::{EngineId, FenceHandle};
