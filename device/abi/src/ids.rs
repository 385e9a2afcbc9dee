//! Identifier newtypes, so a queue id cannot be passed where a context id is meant.
//!
//! The wire structs (mailbox blocks, ioctl arguments, interrupt records) keep plain integers:
//! they are byte layouts. Each side converts at its edge with [`QueueId::new`] and
//! [`QueueId::raw`] (and the same on every id) and uses the newtypes in its own maps and
//! signatures.

/// Declares one `#[repr(transparent)]` id newtype over an integer.
macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident($raw:ty), $prefix:literal) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name($raw);

        impl $name {
            /// The id of a raw wire value.
            pub const fn new(raw: $raw) -> Self {
                Self(raw)
            }

            /// The raw wire value.
            pub const fn raw(self) -> $raw {
                self.0
            }
        }

        impl From<$raw> for $name {
            fn from(raw: $raw) -> Self {
                Self(raw)
            }
        }

        impl From<$name> for $raw {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_newtype!(
    /// A hardware queue, device-wide (mailbox `CREATE_QUEUE`, interrupt records, the module's
    /// `CREATE_QUEUE` ioctl).
    QueueId(u32),
    "queue "
);
id_newtype!(
    /// A GPU context, device-wide.
    ContextId(u32),
    "context "
);
id_newtype!(
    /// An engine of the device (index into its engine list).
    EngineId(u32),
    "engine "
);
id_newtype!(
    /// A GPU address space (page-table root), device-wide; 0 is the system address space.
    AddressSpaceId(u32),
    "address space "
);
id_newtype!(
    /// A fence handle: a process-local handle in the ioctls, a global handle at the device.
    FenceHandle(u64),
    "fence "
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_name_their_kind() {
        let q = QueueId::new(7);
        assert_eq!(q.raw(), 7);
        assert_eq!(u32::from(q), 7);
        assert_eq!(QueueId::from(7), q);
        assert_eq!(FenceHandle::new(u64::MAX).raw(), u64::MAX);
        extern crate std;
        assert_eq!(std::format!("{}", ContextId::new(3)), "context 3");
        assert_eq!(std::format!("{}", AddressSpaceId::new(0)), "address space 0");
    }
}
