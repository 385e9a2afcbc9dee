//! The CMP mailbox: commands the driver hands to the command processor.
//!
//! Protocol: the driver writes an argument block (a [`MailboxHeader`] followed by the command's
//! payload) into guest memory, writes its address to `MB_ARG_LO`/`MB_ARG_HI`, then writes a
//! sequence number to `MB_SUBMIT`. The command processor (never the vfio-user socket thread)
//! reads the block, executes it, writes results into the payload, then writes the header's
//! `status` (release order: payload first), updates `MB_STATUS` and raises the
//! `irq::cause::MAILBOX` interrupt. The interrupt handler reads the status from the block in
//! memory, never from a register. One command is in flight at a time; a submit while busy is
//! dropped (and traced) without touching `MB_STATUS`; [`Status::Busy`] is reserved for that.

use core::mem::size_of;

/// Alignment required of an argument block's guest physical address.
pub const BLOCK_ALIGN: u64 = 8;
/// Largest argument block, header included.
pub const BLOCK_MAX_LEN: u32 = 4096;

/// Header of every argument block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MailboxHeader {
    /// Command ([`Opcode`]).
    pub opcode: u32,
    /// Length of the block in bytes, header included.
    pub length: u32,
    /// Sequence number; the device copies the `MB_SUBMIT` value here on completion.
    pub seq: u32,
    /// Written by the device last: a [`Status`] value; [`Status::Pending`] until then.
    pub status: u32,
}
const _: () = assert!(size_of::<MailboxHeader>() == 16);

/// Mailbox commands.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// Raise a chosen MSI-X vector and answer a cookie ([`SelfTestArgs`]).
    SelfTest = 1,
}

impl Opcode {
    /// Size of this command's whole argument block.
    pub const fn block_len(self) -> u32 {
        match self {
            Opcode::SelfTest => size_of::<SelfTestArgs>() as u32,
        }
    }

    /// Name for traces.
    pub const fn name(self) -> &'static str {
        match self {
            Opcode::SelfTest => "SELF_TEST",
        }
    }
}

impl TryFrom<u32> for Opcode {
    type Error = u32;
    fn try_from(raw: u32) -> Result<Self, u32> {
        match raw {
            1 => Ok(Opcode::SelfTest),
            other => Err(other),
        }
    }
}

/// Completion status of a mailbox command.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not completed yet.
    Pending = 0,
    /// Completed successfully.
    Ok = 1,
    /// Unknown opcode.
    BadOpcode = 2,
    /// The header's length does not match the opcode or exceeds [`BLOCK_MAX_LEN`].
    BadLength = 3,
    /// The block's address is unaligned or not in guest memory.
    BadAddress = 4,
    /// A payload field is out of range.
    BadArgument = 5,
    /// A command was already in flight.
    Busy = 6,
    /// The device is disabled (`CONTROL.enable` is clear).
    Disabled = 7,
}

impl Status {
    /// Name for traces and driver messages.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Ok => "OK",
            Status::BadOpcode => "BAD_OPCODE",
            Status::BadLength => "BAD_LENGTH",
            Status::BadAddress => "BAD_ADDRESS",
            Status::BadArgument => "BAD_ARGUMENT",
            Status::Busy => "BUSY",
            Status::Disabled => "DISABLED",
        }
    }
}

impl TryFrom<u32> for Status {
    type Error = u32;
    fn try_from(raw: u32) -> Result<Self, u32> {
        Ok(match raw {
            0 => Status::Pending,
            1 => Status::Ok,
            2 => Status::BadOpcode,
            3 => Status::BadLength,
            4 => Status::BadAddress,
            5 => Status::BadArgument,
            6 => Status::Busy,
            7 => Status::Disabled,
            other => return Err(other),
        })
    }
}

/// `SELF_TEST`: the device writes [`self_test_response`] of `cookie` to `response`, then raises
/// MSI-X vector `vector` (instead of the mailbox vector) with the `MAILBOX` cause.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelfTestArgs {
    /// Header; `opcode` = [`Opcode::SelfTest`].
    pub header: MailboxHeader,
    /// MSI-X vector to raise; must be below `MSIX_INFO.vectors`.
    pub vector: u32,
    /// Any value chosen by the driver.
    pub cookie: u32,
    /// Written by the device: [`self_test_response`]`(cookie)`.
    pub response: u32,
    /// Reserved, zero.
    pub reserved: u32,
}
const _: () = assert!(size_of::<SelfTestArgs>() == 32);

/// The answer a healthy device gives to a self-test cookie.
pub const fn self_test_response(cookie: u32) -> u32 {
    cookie.rotate_left(8) ^ 0xBE11_BE11
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_and_statuses_round_trip() {
        assert_eq!(Opcode::try_from(Opcode::SelfTest as u32), Ok(Opcode::SelfTest));
        assert_eq!(Opcode::try_from(0), Err(0));
        for raw in 0..8 {
            assert_eq!(Status::try_from(raw).map(|s| s as u32), Ok(raw));
        }
        assert_eq!(Status::try_from(8), Err(8));
    }

    #[test]
    fn self_test_response_is_not_the_cookie() {
        for cookie in [0, 1, 0xBE11_BE11, u32::MAX] {
            assert_ne!(self_test_response(cookie), cookie);
        }
    }
}
