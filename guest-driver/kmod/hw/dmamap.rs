// SPDX-License-Identifier: GPL-2.0

//! The DMA mappings of every bound device, undone at the latest when the device unbinds.
//!
//! The memory a device reaches ([`super::dmamem::DmaBuf`], [`super::devmap::DeviceView`]) is
//! mapped for it with `dma_map_phys` and recorded here. A [`DmaMapping`] is undone when it is
//! dropped; one kept on purpose ([`DmaMapping::keep`]: the device may still use the address) and
//! every one still alive when the device unbinds are undone by [`release_device`], which the
//! unbind calls once the device is reset and no longer masters the bus. So no mapping of a
//! device outlives its binding (what the kernel's DMA-API debugging checks at release), while
//! the memory itself stays with whoever holds it — an open file, a process's mapping, the
//! quarantine — and is freed when they let go: the device can no longer reach it.

use kernel::{
    bindings,
    device::{Bound, Device},
    global_lock,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
    },
};

/// `DMA_MAPPING_ERROR`: the address `dma_map_phys` returns on failure.
const DMA_MAPPING_ERROR: u64 = u64::MAX;

/// The attributes of every mapping: `DMA_ATTR_SKIP_CPU_SYNC`. The memory is used as coherent
/// memory (x86-64's DMA is cache-coherent: there is nothing to sync), and a page several devices
/// share is mapped once for each, which the DMA-API debugging accepts only without syncs.
// CAST: a `u32` flag widened to `c_ulong`.
const ATTRS: usize = bindings::DMA_ATTR_SKIP_CPU_SYNC as usize;

/// The raw device of `dev`.
fn raw(dev: &Device) -> *mut bindings::device {
    // CAST: `Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::device>` (itself
    // transparent over the C struct); the C API takes a mutable pointer it does not write
    // through for these calls.
    core::ptr::from_ref(dev).cast::<bindings::device>().cast_mut()
}

/// The number of the next mapping: a mapping is found by it, never by its address (after an
/// unbind undid a mapping, a new binding of the same device may be given the same address).
static NEXT: Atomic<u64> = Atomic::new(1);

/// A live mapping as the registry records it.
struct Live {
    /// Its number.
    id: u64,
    /// The device, by address (its identity only; the mapping's owner holds a reference).
    dev: usize,
    /// The bus address.
    address: u64,
    /// Bytes mapped.
    size: usize,
}

global_lock! {
    // SAFETY: `init` runs at module load, before any device probes.
    unsafe(uninit) static LIVE: Mutex<KVec<Live>> = KVec::new();
}

/// Initialises the registry.
///
/// # Safety
///
/// Called once, at module load, before any device probes.
pub(crate) unsafe fn init() {
    // SAFETY: the caller calls this once, before any other use of the registry.
    unsafe { LIVE.init() };
}

/// Undoes the mapping `live` of `dev`.
///
/// # Safety
///
/// `live` is a mapping [`DmaMapping::new`] made for `dev` and recorded, now taken out of the
/// registry (so undone once).
unsafe fn unmap(dev: *mut bindings::device, live: &Live) {
    // SAFETY: the caller's promise; the device structure is alive (its caller holds it).
    unsafe {
        bindings::dma_unmap_phys(
            dev,
            live.address,
            live.size,
            bindings::dma_data_direction::DMA_BIDIRECTIONAL,
            ATTRS,
        )
    };
}

/// `size` bytes of memory at physical address `phys`, mapped for one device.
pub(crate) struct DmaMapping {
    /// The device.
    dev: ARef<Device>,
    /// Its bus address of the first byte.
    address: u64,
    /// Its number in the registry.
    id: u64,
    /// Whether the drop leaves the mapping to [`release_device`].
    kept: bool,
}

impl DmaMapping {
    /// Maps `size` bytes at `phys` for `dev`, both ways.
    ///
    /// # Errors
    ///
    /// `ENOMEM` (no room to record it, or the mapping failed).
    ///
    /// # Safety
    ///
    /// `phys..phys + size` is memory the caller owns and keeps until the mapping is dropped or
    /// the device unbinds (whichever is later when it is kept).
    pub(crate) unsafe fn new(dev: &Device<Bound>, phys: u64, size: usize) -> Result<Self> {
        let owner: &Device = dev;
        let mut live = LIVE.lock();
        live.reserve(1, GFP_KERNEL)?;
        // SAFETY: `dev` is bound; the memory is the caller's (above).
        let address = unsafe {
            bindings::dma_map_phys(
                raw(owner),
                phys,
                size,
                bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                ATTRS,
            )
        };
        // `dma_mapping_error`: an inline that compares with `DMA_MAPPING_ERROR` and, with
        // CONFIG_DMA_API_DEBUG, records that the address was checked.
        #[cfg(belfry_dma_api_debug)]
        // SAFETY: `dev` is bound; `address` is what `dma_map_phys` just returned for it.
        unsafe {
            bindings::debug_dma_mapping_error(raw(owner), address)
        };
        if address == DMA_MAPPING_ERROR {
            return Err(ENOMEM);
        }
        let id = NEXT.fetch_add(1, Relaxed);
        let entry = Live {
            id,
            dev: core::ptr::from_ref(owner) as usize,
            address,
            size,
        };
        // Room reserved above: cannot fail.
        let _ = live.push(entry, GFP_KERNEL);
        Ok(Self {
            dev: owner.into(),
            address,
            id,
            kept: false,
        })
    }

    /// The device's bus address of the first byte.
    pub(crate) fn address(&self) -> u64 {
        self.address
    }

    /// Whether it is `dev`'s mapping.
    pub(crate) fn is_for(&self, dev: &Device) -> bool {
        core::ptr::eq(&*self.dev, dev)
    }

    /// Leaves the mapping in place until the device unbinds: the device may still use the
    /// address.
    pub(crate) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for DmaMapping {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let mut live = LIVE.lock();
        // Not found: the device unbound, which undid it.
        if let Some(i) = live.iter().position(|l| l.id == self.id) {
            if let Ok(entry) = live.remove(i) {
                // SAFETY: recorded by `new` for this device, just taken out of the registry.
                unsafe { unmap(raw(&self.dev), &entry) };
            }
        }
    }
}

/// Undoes every mapping of `dev` still in place; returns how many. Called at unbind once `dev`
/// is reset and bus mastering is off: from then on it reaches none of that memory, which its
/// holders free when they let go.
pub(crate) fn release_device(dev: &Device) -> usize {
    let key = core::ptr::from_ref(dev) as usize;
    let mut live = LIVE.lock();
    let before = live.len();
    live.retain(|entry| {
        if entry.dev != key {
            return true;
        }
        // SAFETY: recorded by `DmaMapping::new` for `dev`; taken out of the registry here.
        unsafe { unmap(raw(dev), entry) };
        false
    });
    let undone = before - live.len();
    if live.is_empty() {
        // The last device unbound (module exit unbinds them all): the registry's buffer goes
        // too, as the static that holds it is never dropped.
        *live = KVec::new();
    }
    undone
}
