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

/// Engine power and health states reported by engine-state-change records.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineState {
    /// Powered (F0) and able to run work.
    Active = 0,
    /// Idle long enough: the driver should disconnect the engine's doorbells and power it to F1.
    TransitionToF1 = 1,
    /// A queue on the engine made no progress within the hang timeout.
    Hung = 2,
    /// Powered down (F1): work waits until the driver sets F0.
    F1 = 3,
}

impl EngineState {
    /// Name for traces.
    pub const fn name(self) -> &'static str {
        match self {
            EngineState::Active => "ACTIVE",
            EngineState::TransitionToF1 => "TRANSITION_TO_F1",
            EngineState::Hung => "HUNG",
            EngineState::F1 => "F1",
        }
    }
}

/// Hardware-queue states as reported by `QUERY_QUEUE`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// On its engine's runlist.
    Running = 1,
    /// Its context is suspended: off the runlist, doorbell kept, work accumulates.
    Suspended = 2,
    /// Blocked in a `FENCE_WAIT`.
    Waiting = 3,
    /// Stopped by the hang watchdog.
    Hung = 4,
    /// Stopped by a fault (its context is faulted).
    Faulted = 5,
}

/// Why a context faulted (in fault records and `QUERY_QUEUE`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultReason {
    /// GPU MMU: address beyond the VA range.
    MmuNonCanonical = 1,
    /// GPU MMU: not present.
    MmuNotPresent = 2,
    /// GPU MMU: write to a read-only page.
    MmuReadOnly = 3,
    /// GPU MMU: reserved bits in an entry.
    MmuReserved = 4,
    /// GPU MMU: table or page outside memory.
    MmuUnreachable = 5,
    /// Malformed packet (opcode, length, reserved bits, alignment, sizes).
    BadPacket = 6,
    /// Malformed ring (write index inconsistent, bad entry).
    BadRing = 7,
    /// A fence write on an engine that cannot write fences.
    EngineCannotWriteFence = 8,
    /// A `MONITORED_FENCE_SIGNAL` on a user-mode-submission queue (NF-21: user-mode queues
    /// cannot use monitored fences).
    MonitoredFenceOnUserModeQueue = 9,
    /// The driver reset the engine after this context's queue hung (`RESET_ENGINE`): its work
    /// was dropped (ENG-06, DB-16).
    EngineReset = 10,
}

impl FaultReason {
    /// Name for traces and driver messages.
    pub const fn name(self) -> &'static str {
        match self {
            FaultReason::MmuNonCanonical => "MMU_NON_CANONICAL",
            FaultReason::MmuNotPresent => "MMU_NOT_PRESENT",
            FaultReason::MmuReadOnly => "MMU_READ_ONLY",
            FaultReason::MmuReserved => "MMU_RESERVED",
            FaultReason::MmuUnreachable => "MMU_UNREACHABLE",
            FaultReason::BadPacket => "BAD_PACKET",
            FaultReason::BadRing => "BAD_RING",
            FaultReason::EngineCannotWriteFence => "ENGINE_CANNOT_WRITE_FENCE",
            FaultReason::MonitoredFenceOnUserModeQueue => "MONITORED_FENCE_ON_USER_MODE_QUEUE",
            FaultReason::EngineReset => "ENGINE_RESET",
        }
    }
}

impl TryFrom<u32> for FaultReason {
    type Error = u32;
    fn try_from(raw: u32) -> Result<Self, u32> {
        const ALL: [FaultReason; 9] = [
            FaultReason::MmuNonCanonical,
            FaultReason::MmuNotPresent,
            FaultReason::MmuReadOnly,
            FaultReason::MmuReserved,
            FaultReason::MmuUnreachable,
            FaultReason::BadPacket,
            FaultReason::BadRing,
            FaultReason::EngineCannotWriteFence,
            FaultReason::MonitoredFenceOnUserModeQueue,
        ];
        ALL.into_iter().find(|r| *r as u32 == raw).ok_or(raw)
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
    fn fault_reasons_round_trip() {
        for raw in 1..=9 {
            assert_eq!(FaultReason::try_from(raw).map(|r| r as u32), Ok(raw));
        }
        assert_eq!(FaultReason::try_from(0), Err(0));
        assert_eq!(FaultReason::try_from(10), Err(10));
    }
}
