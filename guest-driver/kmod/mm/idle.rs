// SPDX-License-Identifier: GPL-2.0

//! A context kept idle on the device while the memory manager moves or frees one of its
//! allocations ([`Idle`]): `SUSPEND_CONTEXT` returns once no engine runs the context's queues,
//! and the device picks none of them until `RESUME_CONTEXT`; so no store of the context's work
//! lands between a paging buffer's read and the retarget of the allocation's entries (where it
//! would be lost), nor in a VRAM range after it was freed. Work the process submits meanwhile
//! runs on the resume, as after D3 entry's suspension.

use kernel::prelude::*;

use crate::{
    abi::ids::ContextId,
    hw::core::Core,
    queue::{build::QueueEnv, doorbell::Doorbells},
};

/// A context suspended for a move, resumed on drop; or nothing to resume (the context was not
/// running: suspended by D3 entry, faulted, destroyed, or spared by the caller).
pub(crate) struct Idle<'a> {
    core: &'a Core,
    doorbells: &'a Doorbells,
    suspended: Option<ContextId>,
}

impl<'a> Idle<'a> {
    /// Suspends `owner` if it runs and is not `spare` (a context the caller knows idle, whose
    /// suspension would end its split-buffer hold on a device without context save).
    ///
    /// # Errors
    ///
    /// The mailbox's (nothing was suspended).
    pub(crate) fn owner(env: &QueueEnv<'a>, owner: ContextId, spare: Option<ContextId>) -> Result<Self> {
        let mut idle = Self {
            core: env.fences.core(),
            doorbells: env.doorbells,
            suspended: None,
        };
        if Some(owner) == spare || !idle.core.objects().is_running(owner) {
            return Ok(idle);
        }
        let mut hw = idle.core.hw()?;
        idle.doorbells.suspend_context(&mut hw, owner, true)?;
        idle.suspended = Some(owner);
        Ok(idle)
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        let Some(context) = self.suspended else {
            return;
        };
        let resumed = self
            .core
            .hw()
            .and_then(|mut hw| self.doorbells.suspend_context(&mut hw, context, false));
        if let Err(e) = resumed {
            dev_warn!(
                self.core.device(),
                "context {} stays suspended after a video-memory move: {:?}\n",
                context.raw(),
                e
            );
        }
    }
}
