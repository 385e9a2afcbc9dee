//! Demotion under local-memory pressure (NF-14, NF-18; `--demotion-only`): what a fence costs
//! in VRAM and once demoted to system memory, against today's form under the same pressure
//! (the module's `demote_fences` off: an INTRA_GPU fence is refused with `ENOSPC`).
//!
//! Pressure is the module's `fence_vram_pages` set to 0 (no VRAM fence page free), as the
//! suite's NF tests make it; both parameters are put back at the end. Each part opens the
//! device afresh (a file of its own: demotion takes only the caller's own fences).
//!
//! - NF-14: an optimized DEFAULT fence (MonitoredValue in VRAM): GPU signal → a CPU thread
//!   sleeping in `WAIT_FENCE` runs, before and after the INTRA_GPU fence that demoted it.
//! - NF-18: an INTRA_GPU fence (both values in VRAM): a GPU wait released by another queue's GPU
//!   signal, before and after the next INTRA_GPU fence took its VRAM page.
//! - Both: the `CREATE_FENCE` of an INTRA_GPU fence with a VRAM page free, and the one that
//!   demotes (its `MOVE_MONITORED_VALUE` or `MOVE_FENCE_STORAGE` round trips included).

use std::time::{Duration, Instant};

use belfry_abi::uapi;
use belfry_umd::{Device, Fence, FenceKind};

use crate::{micros, BoxError};

/// A module parameter set until the guard drops (then put back).
struct Param {
    path: String,
    old: String,
}

impl Param {
    fn set(name: &str, value: u32) -> Result<Param, BoxError> {
        let path = format!("/sys/module/belfry/parameters/{name}");
        let old = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        std::fs::write(&path, value.to_string()).map_err(|e| format!("writing {path}: {e}"))?;
        Ok(Param { path, old: old.trim().to_string() })
    }
}

impl Drop for Param {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.old);
    }
}

/// Where `fence`'s values are: (CurrentValue, MonitoredValue) segments.
fn placed(fence: &Fence) -> Result<(u32, u32), BoxError> {
    let i = fence.info()?;
    Ok((i.current_segment, i.monitored_segment))
}

fn segment(s: u32) -> &'static str {
    match s {
        uapi::FENCE_SEGMENT_VRAM => "VRAM",
        uapi::FENCE_SEGMENT_SYSTEM => "system",
        _ => "?",
    }
}

/// Times `CREATE_FENCE` of an INTRA_GPU fence on `ctx`.
fn timed_intra(ctx: &belfry_umd::Context) -> Result<(Fence, Duration), BoxError> {
    let start = Instant::now();
    let fence = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    Ok((fence, start.elapsed()))
}

/// An INTRA_GPU fence created while no fence page may stay in VRAM (`fence_vram_pages` 0: an
/// older fence is demoted to make room), kept by the caller so the demotion stays; its creation
/// time and the demotions the device counted meanwhile.
fn timed_intra_demoting(dev: &Device, ctx: &belfry_umd::Context) -> Result<(Fence, Duration, u64), BoxError> {
    let demotions = dev.mm_stats()?.fence_demotions;
    let (fence, took) = {
        let _full = Param::set("fence_vram_pages", 0)?;
        timed_intra(ctx)?
    };
    Ok((fence, took, dev.mm_stats()?.fence_demotions - demotions))
}

/// One fence's figure before and after its demotion.
struct Demoted {
    before: (Duration, Duration),
    after: (Duration, Duration),
    placed_before: (u32, u32),
    placed_after: (u32, u32),
    create_free: Duration,
    create_demoting: Duration,
    demotions: u64,
}

fn print(name: &str, what: &str, d: &Demoted) {
    let at = |(c, m): (u32, u32)| format!("{}/{}", segment(c), segment(m));
    println!(
        "{name}: {what}, in place ({}): median {:9.1} µs  p99 {:9.1} µs",
        at(d.placed_before),
        micros(d.before.0),
        micros(d.before.1)
    );
    println!(
        "{name}: {what}, demoted ({}): median {:9.1} µs  p99 {:9.1} µs  ({:.2}x)",
        at(d.placed_after),
        micros(d.after.0),
        micros(d.after.1),
        d.after.0.as_secs_f64() / d.before.0.as_secs_f64()
    );
    println!(
        "{name}: INTRA_GPU CREATE_FENCE with a VRAM page free {:9.1} µs, the one that demoted {:9.1} µs ({} page(s) demoted)",
        micros(d.create_free),
        micros(d.create_demoting),
        d.demotions
    );
}

fn json(d: &Demoted) -> serde_json::Value {
    let pair = |(m, p): (Duration, Duration)| serde_json::json!({"median": micros(m), "p99": micros(p)});
    serde_json::json!({
        "in_place_us": pair(d.before),
        "demoted_us": pair(d.after),
        "demoted_over_in_place": d.after.0.as_secs_f64() / d.before.0.as_secs_f64(),
        "segments_before": [d.placed_before.0, d.placed_before.1],
        "segments_after": [d.placed_after.0, d.placed_after.1],
        "create_intra_gpu_us": {"page_free": micros(d.create_free), "demoting": micros(d.create_demoting)},
        "fence_demotions": d.demotions,
    })
}

/// NF-14: the optimized DEFAULT fence's CPU wake-up before and after its demotion.
fn optimized_default(index: u32, n: u32) -> Result<Demoted, BoxError> {
    let dev = Device::open_index(index)?;
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let placed_before = placed(&fence)?;
    let mut queue = crate::fences::user_queue(&ctx)?;
    let before = crate::fences::wake_latency(&mut queue, &fence, n, true)?;
    let (_first, create_free) = timed_intra(&ctx)?;
    let (_second, create_demoting, demotions) = timed_intra_demoting(&dev, &ctx)?;
    let placed_after = placed(&fence)?;
    let after = crate::fences::wake_latency(&mut queue, &fence, n, true)?;
    Ok(Demoted { before, after, placed_before, placed_after, create_free, create_demoting, demotions })
}

/// NF-18: the INTRA_GPU fence's GPU wait before and after its storage was demoted.
fn intra_gpu(index: u32, n: u32) -> Result<Demoted, BoxError> {
    let dev = Device::open_index(index)?;
    let ctx = dev.create_context()?;
    let (fence, create_free) = timed_intra(&ctx)?;
    let placed_before = placed(&fence)?;
    let before = crate::cross_adapter::release_latency(&ctx, &fence, &ctx, &fence, n)?;
    let (_newer, create_demoting, demotions) = timed_intra_demoting(&dev, &ctx)?;
    let placed_after = placed(&fence)?;
    let after = crate::cross_adapter::release_latency(&ctx, &fence, &ctx, &fence, n)?;
    Ok(Demoted { before, after, placed_before, placed_after, create_free, create_demoting, demotions })
}

/// Today's form under the same pressure: `demote_fences` off, an INTRA_GPU fence is refused.
fn today(index: u32) -> Result<String, BoxError> {
    let _off = Param::set("demote_fences", 0)?;
    let dev = Device::open_index(index)?;
    let ctx = dev.create_context()?;
    let _default = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let _full = Param::set("fence_vram_pages", 0)?;
    Ok(match ctx.create_fence(FenceKind::IntraGpu, 0, 0) {
        Ok(_) => "created (the device still had a VRAM fence page)".to_string(),
        Err(e) => format!("refused: {e}"),
    })
}

/// Prints the figures of device `index` and returns them; the parameters are put back.
pub fn run(index: u32, n: u32) -> Result<serde_json::Value, BoxError> {
    let refused = today(index)?;
    let _demote = Param::set("demote_fences", 1)?;
    let nf14 = optimized_default(index, n)?;
    let nf18 = intra_gpu(index, n)?;
    println!("today's form (demote_fences 0), no VRAM fence page free: an INTRA_GPU fence is {refused}");
    print("NF-14", "GPU signal → sleeping CPU waiter, optimized DEFAULT fence", &nf14);
    print("NF-18", "GPU wait released by another queue's GPU signal, INTRA_GPU fence", &nf18);
    Ok(serde_json::json!({"today_intra_gpu_under_pressure": refused, "nf14": json(&nf14), "nf18": json(&nf18)}))
}
