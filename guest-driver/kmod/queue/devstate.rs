// SPDX-License-Identifier: GPL-2.0

//! Domain layer: what the device itself says about a queue (`QUERY_QUEUE`), the verdict
//! wherever the module asks whether a queue has work or how far its ring ran. The words a
//! process can write — a user-mode queue's LastQueuedValue page, and a ring-control page its
//! context maps (whose read index its own command buffers can store to) — are hints only: they
//! say when to ask, never the answer.

use kernel::prelude::*;

use crate::{
    abi::{
        engine::QueueState,
        ids::QueueId,
        mailbox::{self, Opcode, Status},
    },
    hw::command::HwGuard,
};

/// `QUERY_QUEUE` of `queue`: the device's reported state and its own read index; `None` when
/// the device has no such queue (destroyed meanwhile: it holds no work of it). Run through
/// [`HwGuard::mailbox`] so that answer is not logged as a failure.
///
/// # Errors
///
/// The mailbox's: `EIO`, `ETIMEDOUT`, `ENODEV`.
fn query(hw: &mut HwGuard<'_>, queue: QueueId) -> Result<Option<(Option<QueueState>, u32)>> {
    let mut args = mailbox::QueryQueueArgs {
        id: queue.raw(),
        ..Default::default()
    };
    match hw.mailbox(Opcode::QueryQueue, &mut args, &[], None)? {
        Status::Ok => Ok(Some((QueueState::from_raw(args.state), args.read_index))),
        Status::BadObject => Ok(None),
        _ => Err(EIO),
    }
}

/// Whether the device holds work of `queue`: announced, in progress or parked in a wait (its
/// state `RUNNING` or `WAITING`). A queue of a suspended context (`SUSPENDED`) counts too: the
/// device does not look inside it, and the work it may hold runs when the context resumes.
/// `IDLE`, `HUNG`, `FAULTED` and a queue the device no longer has hold none it would run.
///
/// # Errors
///
/// As [`query`].
pub(crate) fn has_work(hw: &mut HwGuard<'_>, queue: QueueId) -> Result<bool> {
    Ok(matches!(
        query(hw, queue)?,
        Some((Some(QueueState::Running | QueueState::Waiting | QueueState::Suspended), _))
    ))
}

/// The index of the next ring entry the device will execute for `queue`, as the device keeps
/// it (not the copy it writes to the ring-control page).
///
/// # Errors
///
/// As [`query`]; `EIO` when the device no longer has the queue.
pub(crate) fn read_index(hw: &mut HwGuard<'_>, queue: QueueId) -> Result<u32> {
    query(hw, queue)?.map(|(_, read)| read).ok_or(EIO)
}
