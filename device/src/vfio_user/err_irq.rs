//! The error interrupt index (`VFIO_PCI_ERR_IRQ_INDEX`): one eventfd through which a device
//! may report an unrecoverable error. QEMU asks for it when a device is realized and, when a
//! device offers it, registers an eventfd that stops the VM if signalled (its AER path);
//! without it QEMU warns "Could not enable error recovery for the device". The device offers
//! the index and keeps the eventfd for the connection, and signals it only when the client
//! asks (the loopback trigger of `DEVICE_SET_IRQS`): nothing in the device is unrecoverable
//! for the guest, so it never raises it by itself.

use std::fs::File;
use std::io::Write as _;
use std::os::fd::OwnedFd;

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
};

/// Vectors of the error index.
pub const COUNT: u32 = 1;

/// The error interrupt of one connection.
#[derive(Debug, Default)]
pub struct ErrorIrq {
    eventfd: Option<File>,
    /// Times it was signalled (loopback requests).
    pub signalled: u64,
}

impl ErrorIrq {
    /// Whether the client registered an eventfd.
    pub fn registered(&self) -> bool {
        self.eventfd.is_some()
    }

    /// Handles `DEVICE_SET_IRQS` for the error index; the reason for the client if refused.
    pub fn set(&mut self, flags: u32, start: u32, count: u32, data: &[u8], fds: Vec<OwnedFd>) -> Result<(), String> {
        let data_type = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
        let known = VFIO_IRQ_SET_DATA_TYPE_MASK | VFIO_IRQ_SET_ACTION_TYPE_MASK;
        if data_type.count_ones() != 1 || action != VFIO_IRQ_SET_ACTION_TRIGGER || flags & !known != 0 {
            return Err(format!("flags {flags:#x}: the error index takes ACTION_TRIGGER with one data type"));
        }
        if count == 0 && data_type == VFIO_IRQ_SET_DATA_NONE {
            self.eventfd = None;
            return Ok(());
        }
        if start != 0 || count != COUNT {
            return Err(format!("vectors {start}+{count}: the error index has exactly {COUNT}"));
        }
        match data_type {
            VFIO_IRQ_SET_DATA_EVENTFD => {
                if fds.len() > 1 {
                    return Err(format!("{} eventfds for 1 vector", fds.len()));
                }
                // No fd: disable (QEMU cannot pass -1 over SCM_RIGHTS).
                let fd = fds.into_iter().next().map(crate::irq::adopt_eventfd).transpose();
                self.eventfd =
                    fd.map_err(|what| format!("the error interrupt fd is not an eventfd ({what})"))?.map(File::from);
                Ok(())
            }
            VFIO_IRQ_SET_DATA_BOOL if data.is_empty() => Err("DATA_BOOL without its byte".into()),
            VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_DATA_NONE => {
                if data_type == VFIO_IRQ_SET_DATA_NONE || data[0] != 0 {
                    self.signal();
                }
                Ok(())
            }
            _ => Err(format!("flags {flags:#x}: unknown data type")),
        }
    }

    fn signal(&mut self) {
        if let Some(file) = self.eventfd.as_mut() {
            // A failure (EAGAIN when the counter saturates) loses nothing: it is signalled.
            let _ = file.write_all(&1u64.to_ne_bytes());
            self.signalled += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd};

    fn eventfd() -> (OwnedFd, OwnedFd) {
        let efd = vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK).unwrap();
        // SAFETY: dup returns fresh descriptors (checked) that only the OwnedFds will own.
        let dup = |fd| unsafe {
            let d = libc::dup(fd);
            assert!(d >= 0);
            OwnedFd::from_raw_fd(d)
        };
        (dup(efd.as_raw_fd()), dup(efd.as_raw_fd()))
    }

    fn read_counter(fd: &OwnedFd) -> u64 {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from an fd we own.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        if n == 8 {
            u64::from_ne_bytes(buf)
        } else {
            0
        }
    }

    const SET_FD: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    const LOOPBACK: u32 = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;

    #[test]
    fn the_eventfd_is_kept_and_signalled_only_on_request() {
        let mut irq = ErrorIrq::default();
        let (ours, theirs) = eventfd();
        irq.set(SET_FD, 0, 1, &[], vec![theirs]).unwrap();
        assert!(irq.registered());
        assert_eq!(read_counter(&ours), 0, "never raised by itself");
        irq.set(LOOPBACK, 0, 1, &[], vec![]).unwrap();
        assert_eq!(read_counter(&ours), 1);
        irq.set(VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 1, &[0], vec![]).unwrap();
        assert_eq!(read_counter(&ours), 0);
        irq.set(LOOPBACK, 0, 0, &[], vec![]).unwrap();
        assert!(!irq.registered(), "count 0 with DATA_NONE disables");
        irq.set(LOOPBACK, 0, 1, &[], vec![]).unwrap();
        assert_eq!(irq.signalled, 1);
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut irq = ErrorIrq::default();
        let mask = VFIO_IRQ_SET_DATA_NONE | vfio_bindings::bindings::vfio::VFIO_IRQ_SET_ACTION_MASK;
        assert!(irq.set(mask, 0, 1, &[], vec![]).is_err(), "not maskable");
        assert!(irq.set(SET_FD, 1, 1, &[], vec![]).is_err(), "one vector");
        assert!(irq.set(SET_FD, 0, 2, &[], vec![]).is_err(), "one vector");
        assert!(irq.set(SET_FD | VFIO_IRQ_SET_DATA_NONE, 0, 1, &[], vec![]).is_err(), "two data types");
        let (a, b) = eventfd();
        assert!(irq.set(SET_FD, 0, 1, &[], vec![a, b]).is_err(), "two fds");
        assert!(irq.set(VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 1, &[], vec![]).is_err());
    }
}
