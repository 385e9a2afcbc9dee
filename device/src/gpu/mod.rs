//! The GPU behind the register file: the command processor and engine threads and everything
//! they work on — address spaces, contexts, hardware queues, registered fences, doorbell
//! bindings, engine state and the interrupt-record ring.
//!
//! Code map:
//! - [`ports`]: the narrow view of the rest of the device the GPU works through (guest memory,
//!   VRAM, interrupts, register file, doorbells, tracer, configuration); never the whole device.
//! - [`shared`]: [`Gpu`], the state the CMP and engine threads share (object tables behind one
//!   mutex, the condition variable, the record ring) and its ports.
//! - [`objects`]: the object tables.
//! - [`state`]: queue and context states and their transitions.
//! - [`scheduler`]: the runlists' choice of the next queue, as pure logic.
//! - [`cmp`]: the command-processor thread: wake-ups, mailbox, doorbells, idle engines.
//! - [`commands`]: the mailbox commands that program the GPU.
//! - [`engine`]: the engine threads and their slice loop (ring fetch, hang watchdog, faults).
//! - [`job`]: the snapshot of a queue an engine runs without the lock, and a packet's outcome.
//! - [`lost`]: `QUERY_LOST_SIGNALS`, the fences a faulted context's unexecuted work names.
//! - [`packets`]: execution of one packet, checked by the abi's packet rules.
//! - [`fences`]: the fence operations of packets (signal order, waits, fence logs).
//! - [`peer`]: peer signals (XAD-15): payloads into the other devices' peer-signal pages, and
//!   the poller of the device's own page.
//! - [`records`]: the interrupt-record ring.
//! - [`slots`]: a command buffer's `BIND_SLOT` table.
//! - [`split`]: `BIND_SLOT` bindings, `SLOT_COPY`, and the engine hold of a device without
//!   context save (split DMA buffers).
//!
//! Locking: one mutex guards the object tables; engines hold it only to pick work and to
//! publish results, never while they touch guest memory. Commands that tear a queue down wait
//! (on [`Gpu::changed`]) until no engine runs it.

pub mod block;
pub mod cmdring;
pub mod cmp;
pub mod commands;
pub mod engine;
pub mod fences;
pub mod job;
pub mod lost;
pub mod objects;
pub mod packets;
pub mod peer;
pub mod ports;
pub mod records;
pub mod scheduler;
pub mod shared;
pub mod slots;
pub mod split;
pub mod state;

pub use shared::Gpu;

#[cfg(test)]
mod tests;
