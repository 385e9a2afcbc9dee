//! The closed vocabularies of trace fields (a mailbox command's phase, an interrupt's delivery,
//! …): one enum each, written as its snake-case (or hyphenated) word. A word a later format adds
//! reads as the enum's `Other`, so an older reader still takes the record.

use serde::{Deserialize, Serialize};

/// Declares a vocabulary: the enum, its words (`name`, `Display`) and `ALL` (every known word,
/// which the documentation check looks for in `docs/TRACE.md`).
macro_rules! words {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $word:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $word)] $variant,)*
            /// A word this version does not know (a later format's).
            #[serde(other, rename = "other")]
            Other,
        }

        impl $name {
            /// Every word this version knows.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The word as written.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)*
                    $name::Other => "other",
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

words! {
    /// `connection.state`.
    ConnectionState {
        /// A client connected.
        Connected = "connected",
        /// It disconnected.
        Disconnected = "disconnected",
    }
}

words! {
    /// `mailbox.phase`.
    MailboxPhase {
        /// The driver submitted a command.
        Submit = "submit",
        /// The device completed it.
        Complete = "complete",
        /// The device dropped it (reset, D3).
        Dropped = "dropped",
    }
}

words! {
    /// `command_buffer.phase`.
    BufferPhase {
        /// A ring entry fetched: the buffer starts.
        Begin = "begin",
        /// The engine reached its end.
        End = "end",
    }
}

words! {
    /// `interrupt.delivery`.
    Delivery {
        /// Through the vector's MSI-X eventfd.
        Msix = "msix",
        /// Through the INTx eventfd.
        Intx = "intx",
        /// Held: the cause is masked.
        Masked = "masked",
        /// Held by interrupt moderation until the interval ends.
        Moderated = "moderated",
        /// No eventfd was set up for the vector.
        NoEventfd = "no-eventfd",
        /// A native-fence interrupt the monitored value made unneeded.
        Suppressed = "suppressed",
    }
}

words! {
    /// `dma.op`.
    DmaOp {
        /// A region mapped.
        Map = "map",
        /// A region mapped without an fd the device can reach (accesses to it fail).
        MapUnreachable = "map-unreachable",
        /// A range unmapped.
        Unmap = "unmap",
        /// A range unmapped that held only regions the device could not reach.
        UnmapUnreachable = "unmap-unreachable",
    }
}

words! {
    /// `reset.source`.
    ResetSource {
        /// The client's `VFIO_USER_DEVICE_RESET`.
        VfioUser = "vfio-user",
        /// The driver's write of the reset register.
        Register = "register",
        /// The client's connection ended.
        Connection = "connection",
        /// A Function Level Reset (PCI Express Device Control's initiate-FLR bit).
        FunctionLevel = "flr",
    }
}

words! {
    /// `fence_decision.source`.
    FenceSource {
        /// An engine's `FENCE_SIGNAL`.
        Signal = "signal",
        /// The command processor's `UPDATE_MONITORED_VALUES`.
        MonitoredUpdate = "monitored_update",
        /// The command processor's `NOTIFY_FENCE_CHANGED` (never interrupts).
        Notify = "notify",
    }
}

words! {
    /// `schedule.why`.
    ScheduleWhy {
        /// No other queue of the runlist could run.
        OnlyReady = "only_ready",
        /// The highest priority among the ready queues.
        Priority = "priority",
        /// Its turn among ready queues of its priority.
        RoundRobin = "round_robin",
    }
}

words! {
    /// Why another queue of the runlist did not run (`schedule.others`).
    Passed {
        /// Ready, not picked.
        Lost = "lost",
        /// Parked on a fence not reached.
        Waiting = "waiting",
        /// Its context is suspended.
        Suspended = "suspended",
        /// Its context faulted.
        Faulted = "faulted",
        /// It hung.
        Hung = "hung",
    }
}
