//! Engines, hardware-queue states and fault reasons.

/// The compute/3D engine.
pub const ENGINE_COMPUTE: u32 = 0;
/// The copy engine.
pub const ENGINE_COPY: u32 = 1;
/// Number of engines.
pub const ENGINE_COUNT: u32 = 2;

/// Name of engine `index`.
pub const fn engine_name(index: u32) -> &'static str {
    match index {
        ENGINE_COMPUTE => "compute",
        ENGINE_COPY => "copy",
        _ => "unknown",
    }
}

/// Queue priorities: higher runs first; equal priorities share an engine round robin.
pub const PRIORITY_MAX: u32 = 3;
/// The normal queue priority (the library's default). A queue above it runs before every
/// normal queue of its engine (strict priority), so the module grants priorities above normal
/// only to callers with `CAP_SYS_NICE` (as amdgpu does; `EACCES` otherwise).
pub const PRIORITY_NORMAL: u32 = 1;

crate::wire_enum! {
    /// Engine power and health states reported by engine-state-change records.
    pub enum EngineState {
        /// Powered (F0) and able to run work.
        Active = 0 => "ACTIVE",
        /// Idle long enough: the driver should disconnect the engine's doorbells and power it to F1.
        TransitionToF1 = 1 => "TRANSITION_TO_F1",
        /// A queue on the engine made no progress within the hang timeout.
        Hung = 2 => "HUNG",
        /// Powered down (F1): work waits until the driver sets F0.
        F1 = 3 => "F1",
    }
}

crate::wire_enum! {
    /// Hardware-queue states as reported by `QUERY_QUEUE`.
    pub enum QueueState {
        /// On its engine's runlist with work announced or in progress.
        Running = 1 => "RUNNING",
        /// Its context is suspended: off the runlist, doorbell kept, work accumulates.
        Suspended = 2 => "SUSPENDED",
        /// Blocked in a `FENCE_WAIT`.
        Waiting = 3 => "WAITING",
        /// Stopped by the hang watchdog.
        Hung = 4 => "HUNG",
        /// Stopped by a fault (its context is faulted).
        Faulted = 5 => "FAULTED",
        /// On its engine's runlist with no work: nothing announced since the device last read
        /// its ring empty. The device's own word, which no store of the process changes (its
        /// LastQueuedValue and ring control can only ask the driver to look).
        Idle = 6 => "IDLE",
    }
}

crate::wire_enum! {
    /// Why a context faulted (in fault records and `QUERY_QUEUE`).
    pub enum FaultReason {
        /// GPU MMU: address beyond the VA range.
        MmuNonCanonical = 1 => "MMU_NON_CANONICAL",
        /// GPU MMU: not present.
        MmuNotPresent = 2 => "MMU_NOT_PRESENT",
        /// GPU MMU: write to a read-only page.
        MmuReadOnly = 3 => "MMU_READ_ONLY",
        /// GPU MMU: reserved bits in an entry.
        MmuReserved = 4 => "MMU_RESERVED",
        /// GPU MMU: table or page outside memory.
        MmuUnreachable = 5 => "MMU_UNREACHABLE",
        /// Malformed packet (opcode, length, reserved bits, alignment, sizes).
        BadPacket = 6 => "BAD_PACKET",
        /// Malformed ring (write index inconsistent, bad entry).
        BadRing = 7 => "BAD_RING",
        /// A fence write on an engine that cannot write fences.
        EngineCannotWriteFence = 8 => "ENGINE_CANNOT_WRITE_FENCE",
        /// A `MONITORED_FENCE_SIGNAL` on a user-mode-submission queue (NF-21: user-mode queues
        /// cannot use monitored fences).
        MonitoredFenceOnUserModeQueue = 9 => "MONITORED_FENCE_ON_USER_MODE_QUEUE",
        /// The driver reset the engine after this context's queue hung (`RESET_ENGINE`): its work
        /// was dropped (ENG-06, DB-16).
        EngineReset = 10 => "ENGINE_RESET",
    }
}

impl From<super::mmu::MmuFault> for FaultReason {
    fn from(f: super::mmu::MmuFault) -> Self {
        use super::mmu::MmuFault;
        match f {
            MmuFault::NonCanonical => FaultReason::MmuNonCanonical,
            MmuFault::NotPresent => FaultReason::MmuNotPresent,
            MmuFault::ReadOnly => FaultReason::MmuReadOnly,
            MmuFault::Reserved => FaultReason::MmuReserved,
            MmuFault::Unreachable => FaultReason::MmuUnreachable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_reason_converts_from_its_word_engine_reset_included() {
        for raw in 1..=10 {
            assert_eq!(FaultReason::try_from(raw).map(|r| r as u32), Ok(raw));
        }
        assert_eq!(FaultReason::try_from(10), Ok(FaultReason::EngineReset));
        assert_eq!(FaultReason::ALL.len(), 10);
        for raw in [0, 11, u32::MAX] {
            assert_eq!(FaultReason::try_from(raw).map_err(|e| e.raw), Err(raw));
        }
    }

    #[test]
    fn engine_and_queue_states_convert_from_their_words() {
        for raw in 0..=3 {
            assert_eq!(EngineState::try_from(raw).map(|s| s as u32), Ok(raw));
        }
        assert!(EngineState::try_from(4).is_err());
        for raw in 1..=5 {
            assert_eq!(QueueState::try_from(raw).map(|s| s as u32), Ok(raw));
        }
        assert!(QueueState::try_from(0).is_err());
    }
}
