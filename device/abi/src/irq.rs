//! Interrupt vectors and causes.
//!
//! Each cause has a bit in the interrupt block (`INT_RAWSTAT`/`INT_CLEAR`/`INT_MASK`/`INT_STATUS`,
//! see [`super::regs`]) and a default MSI-X vector. A device configured with fewer vectors
//! than [`VECTOR_COUNT`] folds the missing ones onto vector 0 ([`vector_for`]).

/// Vector for mailbox completions.
pub const VECTOR_MAILBOX: u16 = 0;
/// Vector for fence-signaled interrupts (native and monitored).
pub const VECTOR_FENCE: u16 = 1;
/// Vector for engine state changes (F1 transition, hang).
pub const VECTOR_ENGINE: u16 = 2;
/// Vector for faults (GPU page faults, malformed work).
pub const VECTOR_FAULT: u16 = 3;
/// Number of vectors with a dedicated cause; the default MSI-X vector count.
pub const VECTOR_COUNT: u16 = 4;

/// Interrupt cause bits, as laid out in `INT_RAWSTAT`, `INT_CLEAR`, `INT_MASK` and `INT_STATUS`.
pub mod cause {
    /// A mailbox command completed.
    pub const MAILBOX: u32 = 1 << 0;
    /// A native fence crossed its MonitoredValue.
    pub const NATIVE_FENCE: u32 = 1 << 1;
    /// A monitored (legacy) fence was written by an engine.
    pub const MONITORED_FENCE: u32 = 1 << 2;
    /// An engine changed state (TransitionToF1, Hung).
    pub const ENGINE_STATE: u32 = 1 << 3;
    /// A context faulted.
    pub const FAULT: u32 = 1 << 4;
    /// Every defined cause.
    pub const ALL: u32 = MAILBOX | NATIVE_FENCE | MONITORED_FENCE | ENGINE_STATE | FAULT;
}

/// Default vector of the cause bit `cause` on a device with `vectors` MSI-X vectors.
///
/// # Invariants
/// The result is always `< vectors` when `vectors > 0`; causes without a dedicated vector and
/// unknown bits use vector 0.
pub const fn vector_for(cause: u32, vectors: u16) -> u16 {
    let v = if cause & self::cause::NATIVE_FENCE != 0 || cause & self::cause::MONITORED_FENCE != 0 {
        VECTOR_FENCE
    } else if cause & self::cause::ENGINE_STATE != 0 {
        VECTOR_ENGINE
    } else if cause & self::cause::FAULT != 0 {
        VECTOR_FAULT
    } else {
        VECTOR_MAILBOX
    };
    if v < vectors {
        v
    } else {
        VECTOR_MAILBOX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_map_to_their_vectors_and_fold_onto_zero() {
        assert_eq!(vector_for(cause::MAILBOX, 4), VECTOR_MAILBOX);
        assert_eq!(vector_for(cause::NATIVE_FENCE, 4), VECTOR_FENCE);
        assert_eq!(vector_for(cause::ENGINE_STATE, 4), VECTOR_ENGINE);
        assert_eq!(vector_for(cause::FAULT, 4), VECTOR_FAULT);
        assert_eq!(vector_for(cause::FAULT, 2), VECTOR_MAILBOX);
        assert_eq!(vector_for(cause::NATIVE_FENCE, 1), VECTOR_MAILBOX);
    }
}
