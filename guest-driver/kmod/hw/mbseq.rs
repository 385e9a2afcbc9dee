// SPDX-License-Identifier: GPL-2.0

//! Matching a mailbox completion to its command (pure, host-tested).
//!
//! The driver writes the sequence number it submits into the argument block's header (with
//! status PENDING) and the device copies the `MB_SUBMIT` value there on completion. A command
//! the driver gave up on (timed out) may still complete later: the device then writes its
//! payload, its sequence number and its status over the block the driver has since filled for
//! the next command, and raises the completion interrupt. Only a header that names the
//! sequence number just submitted, with a status other than PENDING, completes that command;
//! anything else is a stale completion, never the status of the command waiting.

use crate::abi::mailbox::Status;

/// What the argument block's header says about the command submitted with sequence `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Completion {
    /// The command completed with this raw status.
    Ours(u32),
    /// Another (earlier, abandoned) command's completion: its sequence number.
    Stale(u32),
    /// Nothing completed yet.
    Pending,
}

/// Judges the header words `header_seq` and `header_status` read back after the completion
/// interrupt of the command submitted with `seq`.
pub(crate) fn judge(seq: u16, header_seq: u32, header_status: u32) -> Completion {
    if header_seq != u32::from(seq) {
        Completion::Stale(header_seq)
    } else if header_status == Status::Pending as u32 {
        Completion::Pending
    } else {
        Completion::Ours(header_status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_submitted_sequence_with_a_final_status_is_ours() {
        assert_eq!(judge(7, 7, Status::Ok as u32), Completion::Ours(Status::Ok as u32));
        assert_eq!(judge(7, 7, Status::NoSpace as u32), Completion::Ours(Status::NoSpace as u32));
        assert_eq!(judge(u16::MAX, 0xffff, Status::Ok as u32), Completion::Ours(Status::Ok as u32));
    }

    #[test]
    fn an_earlier_command_completing_late_is_stale_whatever_its_status() {
        // Command 6 timed out; its completion lands in the block of command 7.
        assert_eq!(judge(7, 6, Status::Ok as u32), Completion::Stale(6));
        assert_eq!(judge(7, 6, Status::Pending as u32), Completion::Stale(6));
        // After a wrap the driver's 16-bit sequence is compared as the device wrote it.
        assert_eq!(judge(0, 0x1_0000, Status::Ok as u32), Completion::Stale(0x1_0000));
    }

    #[test]
    fn our_header_still_pending_is_not_a_completion() {
        assert_eq!(judge(7, 7, Status::Pending as u32), Completion::Pending);
    }
}
