//! The one list of the ioctls on `/dev/belfry<N>`: [`for_each_ioctl!`](crate::for_each_ioctl),
//! expanded here into [`ALL`] (names and numbers, for fuzzers, tracers and decoders) and a
//! compile-time check of each number's encoded size, by the library into its typed requests and
//! by the kernel module into its `FromBytes`/`AsBytes` marks. Each ioctl's number and meaning
//! are defined beside its argument struct (`uapi`, `uapi_sync`, `vidmem`, `uapi_debug`); adding
//! an ioctl adds that definition and its row here.

/// The one list of ioctls, by argument struct: calls `$m! { ioctl::Handle { DESTROY_CONTEXT =
/// uapi::IOCTL_DESTROY_CONTEXT, ... } uapi::QueryCaps { QUERY_CAPS = uapi::IOCTL_QUERY_CAPS } ... }`
/// with every argument struct once, followed by the ioctls that take it: each one's name (its
/// number's constant without `IOCTL_`) and number. Paths are `module::item` from the contract's
/// root; each side puts its own root in front. A side that needs one item per argument struct
/// (the module's byte marks, the library's sealed argument trait) or per ioctl (the library's
/// typed requests, [`ALL`]) writes it once over this list.
#[macro_export]
macro_rules! for_each_ioctl {
    ($m:ident) => {
        $m! {
            ioctl::Handle {
                DESTROY_CONTEXT = uapi::IOCTL_DESTROY_CONTEXT,
                FREE = uapi::IOCTL_FREE,
                DESTROY_QUEUE = uapi::IOCTL_DESTROY_QUEUE,
                DESTROY_DOORBELL = uapi::IOCTL_DESTROY_DOORBELL,
                CONNECT_DOORBELL = uapi::IOCTL_CONNECT_DOORBELL,
                NOTIFY_WORK = uapi::IOCTL_NOTIFY_WORK,
                SUSPEND_CONTEXT = uapi::IOCTL_SUSPEND_CONTEXT,
                RESUME_CONTEXT = uapi::IOCTL_RESUME_CONTEXT,
                DESTROY_FENCE = uapi::IOCTL_DESTROY_FENCE,
                DESTROY_ALLOCATION = vidmem::IOCTL_DESTROY_ALLOCATION,
            }
            uapi::QueryCaps { QUERY_CAPS = uapi::IOCTL_QUERY_CAPS }
            uapi::CreateContext { CREATE_CONTEXT = uapi::IOCTL_CREATE_CONTEXT }
            uapi::Alloc { ALLOC = uapi::IOCTL_ALLOC }
            uapi::CreateQueue { CREATE_QUEUE = uapi::IOCTL_CREATE_QUEUE }
            uapi::CreateDoorbell { CREATE_DOORBELL = uapi::IOCTL_CREATE_DOORBELL }
            uapi::Submit { SUBMIT = uapi::IOCTL_SUBMIT }
            uapi::WaitProgress { WAIT_PROGRESS = uapi::IOCTL_WAIT_PROGRESS }
            uapi::CreateFence { CREATE_FENCE = uapi::IOCTL_CREATE_FENCE }
            uapi::FenceOp {
                SIGNAL_FENCE = uapi::IOCTL_SIGNAL_FENCE,
                WAIT_FENCE = uapi::IOCTL_WAIT_FENCE,
            }
            uapi::DisconnectDoorbell { DISCONNECT_DOORBELL = uapi::IOCTL_DISCONNECT_DOORBELL }
            uapi::FenceEventWait {
                CANCEL_FENCE_EVENTFD = uapi::IOCTL_CANCEL_FENCE_EVENTFD,
                WAIT_FENCE_EVENTFD = uapi::IOCTL_WAIT_FENCE_EVENTFD,
            }
            uapi::ExportFence { EXPORT_FENCE = uapi::IOCTL_EXPORT_FENCE }
            uapi::ImportFence { IMPORT_FENCE = uapi::IOCTL_IMPORT_FENCE }
            uapi::QueueFenceOp {
                QUEUE_WAIT_FENCE = uapi::IOCTL_QUEUE_WAIT_FENCE,
                QUEUE_SIGNAL_FENCE = uapi::IOCTL_QUEUE_SIGNAL_FENCE,
            }
            uapi::IrqModeration { IRQ_MODERATION = uapi::IOCTL_IRQ_MODERATION }
            uapi::VerboseLog { VERBOSE_LOG = uapi::IOCTL_VERBOSE_LOG }
            uapi_sync::WaitFences { WAIT_FENCES = uapi_sync::IOCTL_WAIT_FENCES }
            uapi_sync::ContextStatus { CONTEXT_STATUS = uapi_sync::IOCTL_CONTEXT_STATUS }
            uapi_sync::ExportSyncFile { EXPORT_SYNC_FILE = uapi_sync::IOCTL_EXPORT_SYNC_FILE }
            vidmem::CreateAllocation { CREATE_ALLOCATION = vidmem::IOCTL_CREATE_ALLOCATION }
            vidmem::AllocationRw { ALLOCATION_RW = vidmem::IOCTL_ALLOCATION_RW }
            vidmem::SubmitSplit { SUBMIT_SPLIT = vidmem::IOCTL_SUBMIT_SPLIT }
            vidmem::MmStats { MM_STATS = vidmem::IOCTL_MM_STATS }
            uapi_debug::DebugStats { DEBUG_STATS = uapi_debug::IOCTL_DEBUG_STATS }
            uapi_debug::FenceInfo { FENCE_INFO = uapi_debug::IOCTL_FENCE_INFO }
            uapi_debug::FenceDebug { FENCE_DEBUG = uapi_debug::IOCTL_FENCE_DEBUG }
            uapi_debug::ReadTimeline { READ_TIMELINE = uapi_debug::IOCTL_READ_TIMELINE }
            uapi_debug::IrqDebug { IRQ_DEBUG = uapi_debug::IOCTL_IRQ_DEBUG }
            uapi_debug::XadInfo { XAD_INFO = uapi_debug::IOCTL_XAD_INFO }
            uapi_debug::RecoveryDebug { RECOVERY_DEBUG = uapi_debug::IOCTL_RECOVERY_DEBUG }
            uapi_debug::PowerDebug { POWER_DEBUG = uapi_debug::IOCTL_POWER_DEBUG }
            uapi_debug::DevicePower { DEVICE_POWER = uapi_debug::IOCTL_DEVICE_POWER }
            uapi_debug::TeardownDebug { TEARDOWN_DEBUG = uapi_debug::IOCTL_TEARDOWN_DEBUG }
            uapi_debug::MailboxTiming { MAILBOX_TIMING = uapi_debug::IOCTL_MAILBOX_TIMING }
            uapi_debug::WakePath { WAKE_PATH = uapi_debug::IOCTL_WAKE_PATH }
        }
    };
}

macro_rules! names_and_numbers {
    ($($arg_module:ident::$arg:ident { $($name:ident = $module:ident::$number:ident),+ $(,)? })*) => {
        &[$($((stringify!($name), super::$module::$number)),+),*]
    };
}

/// Every ioctl with its name, in the order of [`for_each_ioctl!`](crate::for_each_ioctl).
pub const ALL: &[(&str, u32)] = crate::for_each_ioctl!(names_and_numbers);

/// The argument size an ioctl number encodes (`_IOC_SIZE`).
pub const fn encoded_size(number: u32) -> usize {
    ((number >> 16) & 0x3fff) as usize
}

macro_rules! sizes_match {
    ($($arg_module:ident::$arg:ident { $($name:ident = $module:ident::$number:ident),+ $(,)? })*) => {
        $($(
            const _: () = assert!(
                encoded_size(super::$module::$number) == core::mem::size_of::<super::$arg_module::$arg>(),
                concat!(stringify!($name), ": the number does not encode the size of its argument struct")
            );
        )+)*
    };
}
crate::for_each_ioctl!(sizes_match);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_encode_direction_type_and_are_unique() {
        let mut seen = 0u64;
        for &(name, code) in ALL {
            let nr = code & 0xff;
            assert_eq!((code >> 30, (code >> 8) & 0xff), (3, u32::from(b'B')), "{name}");
            assert!(nr < 64, "{name}: number {nr:#x}");
            assert_eq!(seen & (1 << nr), 0, "{name}: number {nr:#x} used twice");
            seen |= 1 << nr;
        }
        assert_eq!(encoded_size(crate::uapi::IOCTL_QUERY_CAPS), 64);
    }

    #[test]
    fn each_row_names_its_own_constant() {
        macro_rules! constant_names {
            ($($arg_module:ident::$arg:ident { $($name:ident = $module:ident::$number:ident),+ $(,)? })*) => {
                [$($((stringify!($name), stringify!($number))),+),*]
            };
        }
        for (name, constant) in crate::for_each_ioctl!(constant_names) {
            assert_eq!(constant.strip_prefix("IOCTL_"), Some(name));
        }
    }

    #[test]
    fn the_list_holds_every_ioctl_constant_once() {
        let source = [
            include_str!("uapi.rs"),
            include_str!("uapi_sync.rs"),
            include_str!("vidmem.rs"),
            include_str!("uapi_debug.rs"),
        ];
        let declared = source
            .iter()
            .flat_map(|file| file.lines())
            .filter_map(|l| l.strip_prefix("pub const IOCTL_"))
            .filter(|l| l.contains(": u32 = iowr("))
            .filter_map(|l| l.split(':').next());
        let mut count = 0;
        for name in declared {
            count += 1;
            assert_eq!(ALL.iter().filter(|(n, _)| *n == name).count(), 1, "for_each_ioctl! must list {name} once");
        }
        assert_eq!(count, ALL.len());
    }
}
