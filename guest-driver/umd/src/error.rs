//! The library's error type: one enum, each variant naming the operation that failed.

use std::io;
use std::path::PathBuf;

/// Result of the library's operations.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can fail in the library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening the character device failed.
    #[error("Cannot open {}", path.display())]
    Open {
        /// The device path.
        path: PathBuf,
        /// The error of `open`.
        #[source]
        source: io::Error,
    },
    /// An ioctl (or another system call, named likewise: `poll`, `eventfd`) failed; `name` is
    /// the uapi name (`CREATE_QUEUE`, ...). The message carries the errno's name and text
    /// (`ioctl WAIT_FENCE failed: ETIMEDOUT (Connection timed out)`), so it has no `source`.
    #[error("ioctl {name} failed: {}", crate::errno::describe(error))]
    Ioctl {
        /// The ioctl's uapi name.
        name: &'static str,
        /// The errno as an `io::Error`.
        error: io::Error,
    },
    /// Mapping an mmap offset returned by the module failed.
    #[error("Cannot map the {what}")]
    Map {
        /// What was being mapped (`doorbell page`, `allocation`, ...).
        what: &'static str,
        /// The error of `mmap`.
        #[source]
        source: io::Error,
    },
    /// The module speaks another uapi version.
    #[error("Module uapi version {found}, library {expected}")]
    UapiVersion {
        /// Version the module reported.
        found: u32,
        /// [`belfry_abi::uapi::UAPI_VERSION`].
        expected: u32,
    },
    /// An argument the library checks before the module sees it.
    #[error("Invalid argument: {0}")]
    Invalid(&'static str),
    /// A packet the device would refuse (`belfry_abi::packet`'s `validate`).
    #[error("{opcode:?} packet refused: {reason:?}")]
    Packet {
        /// The packet's opcode.
        opcode: belfry_abi::packet::Opcode,
        /// Why the device would refuse it.
        reason: belfry_abi::packet::PacketError,
    },
    /// An access outside an allocation's CPU mapping.
    #[error("Access of {len} bytes at {offset:#x} outside {size} bytes")]
    OutOfBounds {
        /// Offset of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the mapping.
        size: u64,
    },
    /// A command buffer does not fit a submission slot.
    #[error("Command buffer of {bytes} bytes exceeds the slot of {max} bytes")]
    CommandBufferTooLarge {
        /// Bytes needed, the closing progress signal included.
        bytes: usize,
        /// Slot size.
        max: usize,
    },
    /// The status page held a value that is no `DoorbellStatus`.
    #[error("Unknown doorbell status {0}")]
    UnknownStatus(u32),
    /// The doorbell read DISCONNECTED_RETRY after `retries` reconnects. The work stays in the
    /// ring (LastQueuedValue covers it) and runs at the queue's next successful ring.
    #[error("Doorbell still disconnected after {retries} reconnects (progress value {value})")]
    RetryLimit {
        /// Reconnects made.
        retries: u32,
        /// Progress value of the submission.
        value: u64,
    },
    /// A wait ended before the progress value was reached.
    #[error("Timed out waiting for progress value {value}")]
    Timeout {
        /// The value waited for.
        value: u64,
    },
    /// The progress value was submitted to a queue lost to DISCONNECTED_ABORT before it
    /// completed: it will never be signaled.
    #[error("Progress value {value} was lost with its queue")]
    Lost {
        /// The value.
        value: u64,
    },
    /// A wait for a progress value no submission has produced.
    #[error("Progress value {value} was never submitted (last {last})")]
    NotSubmitted {
        /// The value.
        value: u64,
        /// Last value submitted.
        last: u64,
    },
    /// A context was lost (a GPU fault or hang: its doorbells read DISCONNECTED_ABORT and it
    /// refuses new queues), so `value` will never be reached by its work: a queue's progress
    /// value whose submission will never run, or a fence value that a signal in the lost
    /// context's unexecuted work was going to write ([`crate::Fence::wait_until`]). The
    /// application must create a new context and queues; the lost queue can only be dropped.
    #[error(
        "Context lost after a GPU fault or hang: value {value} will never be reached by its work; create a new context"
    )]
    ContextLost {
        /// The progress value of the submission that found the queue lost, or the fence value
        /// waited for.
        value: u64,
    },
    /// A GPU signal of fence `handle` to `value` would move the fence backwards: the library
    /// knows it at or bound for `floor` (its CurrentValue, or a signal already submitted through
    /// the same [`crate::Fence`]). Fence values only move forward; a CPU signal below
    /// CurrentValue is refused with `EINVAL` likewise.
    #[error("Fence {handle}: a GPU signal to {value} would move it backwards (it is at or bound for {floor})")]
    FenceValueBackwards {
        /// The fence's handle.
        handle: u32,
        /// The value refused.
        value: u64,
        /// What the library knows the fence is at or bound for.
        floor: u64,
    },
    /// A pollable wait ([`crate::FenceEvent`]) became ready because its fence was destroyed
    /// before reaching the value: it never will.
    #[error("Fence {handle} was destroyed before reaching value {value}")]
    FenceGone {
        /// The fence's (former) handle.
        handle: u32,
        /// The value waited for.
        value: u64,
    },
    /// `WAIT_FENCE_EVENTFD` refused a pollable wait: this process already has `limit`
    /// ([`belfry_abi::uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS`]) pending. Waits count until they
    /// are signaled, their [`crate::FenceEvent`] is dropped or their fence destroyed.
    #[error("Too many pending pollable fence waits of this process on this device (limit {limit})")]
    TooManyFenceEvents {
        /// The per-process limit.
        limit: u32,
    },
    /// A fence of another context (of this or another device file) was named to a queue or
    /// a command buffer: its GPU VA means something else in any other context, so the library
    /// refuses it rather than let the GPU touch whatever sits there. Use a fence created in, or
    /// imported into ([`crate::Fence::export`], [`crate::Context::import_fence`]), the queue's
    /// context.
    #[error("Fence {handle} belongs to another context (or device file) than the queue or command buffer it was given to; create or import it in that context")]
    ForeignFence {
        /// The fence's handle (in its own device file).
        handle: u32,
    },
    /// The queue was lost and neither a user-mode nor a kernel-mode queue could replace it.
    #[error("Queue lost and not replaced")]
    QueueGone,
}

impl Error {
    /// The errno of a failed system call, if this error carries one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Open { source, .. } | Error::Ioctl { error: source, .. } | Error::Map { source, .. } => {
                source.raw_os_error()
            }
            Error::TooManyFenceEvents { .. } => Some(libc::ENOSPC),
            _ => None,
        }
    }

    /// The ioctl's uapi name, for [`Error::Ioctl`].
    pub fn ioctl_name(&self) -> Option<&'static str> {
        match self {
            Error::Ioctl { name, .. } => Some(name),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_errors_name_the_errno_in_their_message() {
        let e = Error::Ioctl { name: "WAIT_FENCE", error: io::Error::from_raw_os_error(libc::ETIMEDOUT) };
        assert_eq!(e.to_string(), "ioctl WAIT_FENCE failed: ETIMEDOUT (Connection timed out)");
        let e = Error::Ioctl { name: "SIGNAL_FENCE", error: io::Error::from_raw_os_error(libc::EPERM) };
        assert_eq!(e.to_string(), "ioctl SIGNAL_FENCE failed: EPERM (Operation not permitted)");
        assert_eq!(e.errno(), Some(libc::EPERM));
        // The reason is in the message, not repeated as a source.
        assert!(std::error::Error::source(&e).is_none());
    }
}
