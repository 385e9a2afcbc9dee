//! The `BIND_SLOT` resource table of one command buffer (see [`split`](super::split)).

use belfry_abi::packet::BIND_SLOTS_MAX;

/// One slot's binding: `size` bytes at `va` (both 0: unbound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Binding {
    /// GPU VA.
    pub va: u64,
    /// Bytes.
    pub size: u64,
}

// CAST: BIND_SLOTS_MAX is 16.
const SLOTS: usize = BIND_SLOTS_MAX as usize;

/// The resource table of one command buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slots([Binding; SLOTS]);

impl Slots {
    /// The binding of `slot` if it is bound.
    pub fn get(&self, slot: u32) -> Option<Binding> {
        self.0.get(usize::try_from(slot).ok()?).copied().filter(|b| b.size != 0)
    }

    /// Sets `slot`'s binding; `None` past the table.
    pub fn set(&mut self, slot: u32, binding: Binding) -> Option<()> {
        *self.0.get_mut(usize::try_from(slot).ok()?)? = binding;
        Some(())
    }
}
