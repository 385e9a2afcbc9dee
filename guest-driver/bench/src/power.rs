//! Engine power and recovery figures: the F1 → F0 wake a submission sees (its reconnect, the
//! module's `SET_ENGINE_POWER` F0, the work) against a submission to an awake engine, and how
//! long the module takes to detect a looping queue against its `hang_timeout_ms`.

use std::time::{Duration, Instant};

use belfry_umd::abi::uapi::DoorbellStatus;
use belfry_umd::{CommandBuffer, Device, Error};

use crate::BoxError;

/// The module's hang timeout parameter.
const TIMEOUT_PARAM: &str = "/sys/module/belfry/parameters/hang_timeout_ms";

/// Samples of `submit → work done` after the engine went to F1, and on an awake engine.
pub struct Wake {
    /// From the engine in F1 (the doorbell DISCONNECTED_RETRY).
    pub from_f1: Vec<Duration>,
    /// The same submission right after (engine in F0, doorbell connected).
    pub awake: Vec<Duration>,
}

/// Runs `runs` F1 round trips on `dev`'s compute engine (each waits for the device's idle
/// request, about a second).
pub fn wake(dev: &Device, runs: u32) -> Result<Wake, BoxError> {
    let ctx = dev.create_context()?;
    let target = ctx.alloc(4096, 0)?;
    let mut q = ctx.create_queue(&belfry_umd::QueueDesc::default())?;
    let mut cmds = CommandBuffer::new();
    cmds.write32(target.gpu_va(), 0xF1)?;
    let mut out = Wake { from_f1: Vec::new(), awake: Vec::new() };
    let timed = |q: &mut belfry_umd::Queue| -> Result<Duration, BoxError> {
        let start = Instant::now();
        let v = q.submit(&cmds)?;
        q.wait(v, Duration::from_secs(10))?;
        Ok(start.elapsed())
    };
    timed(&mut q)?;
    for _ in 0..runs {
        let before = dev.power_debug()?.engine_f1;
        let deadline = Instant::now() + Duration::from_secs(20);
        while dev.power_debug()?.engine_f1 == before || q.doorbell_status()? != DoorbellStatus::DisconnectedRetry {
            if Instant::now() > deadline {
                return Err("the engine did not go to F1 within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        out.from_f1.push(timed(&mut q)?);
        out.awake.push(timed(&mut q)?);
    }
    Ok(out)
}

/// For each timeout (ms), `runs` times: submit a `JUMP` to itself and time how long until the
/// wait on it ends with the context lost. The parameter is restored afterwards.
pub fn hang_detection(dev: &Device, timeouts: &[u32], runs: u32) -> Result<Vec<(u32, Vec<Duration>)>, BoxError> {
    let old = std::fs::read_to_string(TIMEOUT_PARAM)?;
    let result = (|| -> Result<Vec<(u32, Vec<Duration>)>, BoxError> {
        let mut out = Vec::new();
        for &t in timeouts {
            std::fs::write(TIMEOUT_PARAM, t.to_string())?;
            let mut samples = Vec::new();
            for _ in 0..runs {
                let ctx = dev.create_context()?;
                let mut spin = ctx.alloc(4096, 0)?;
                let mut jump = CommandBuffer::new();
                jump.jump(spin.gpu_va(), 16)?;
                spin.write(0, jump.as_bytes())?;
                let mut q = ctx.create_queue(&belfry_umd::QueueDesc::default())?;
                q.connect_doorbell()?;
                let start = Instant::now();
                let v = q.submit(&jump)?;
                match q.wait(v, Duration::from_secs(30)) {
                    Err(Error::ContextLost { .. }) => samples.push(start.elapsed()),
                    other => return Err(format!("a looping queue's wait: {other:?}, expected ContextLost").into()),
                }
            }
            out.push((t, samples));
        }
        Ok(out)
    })();
    std::fs::write(TIMEOUT_PARAM, old.trim())?;
    result
}
