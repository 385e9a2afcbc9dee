//! Device power figures (PWR): with runtime PM allowed through the device's sysfs `power/`
//! files, how long the module's D3 entry and D3 exit take (its `DEVICE_POWER` figures: the
//! runtime callbacks, the PCI core's PMCSR writes and their D3hot delay included), and what a
//! submission to a device in D3 sees (its reconnect, which resumes the device, and the work).

use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Device};

use crate::BoxError;

/// Samples of one D3 round trip each.
pub struct D3 {
    /// The module's D3 entry (runtime-suspend callback to D3hot).
    pub entry: Vec<Duration>,
    /// The module's D3 exit (runtime-resume callback to D0 and restored).
    pub exit: Vec<Duration>,
    /// `submit → work done` on a device in D3 (the reconnect resumes it).
    pub submit_from_d3: Vec<Duration>,
}

/// The PCI address of `/dev/belfry<index>`: the device whose MSI-X vectors include the one
/// `/proc/interrupts` names `belfry<index>-mb`.
fn pci_address(index: u32) -> Result<String, BoxError> {
    let name = format!(" belfry{index}-mb");
    let interrupts = std::fs::read_to_string("/proc/interrupts")?;
    let irq = interrupts
        .lines()
        .find(|l| l.trim_end().ends_with(&name))
        .and_then(|l| l.split(':').next())
        .map(|n| n.trim().to_string())
        .ok_or_else(|| format!("no{name} line in /proc/interrupts"))?;
    for entry in std::fs::read_dir("/sys/bus/pci/drivers/belfry")? {
        let address = entry?.file_name().to_string_lossy().into_owned();
        if address.contains(':')
            && std::path::Path::new(&format!("/sys/bus/pci/devices/{address}/msi_irqs/{irq}")).exists()
        {
            return Ok(address);
        }
    }
    Err(format!("no belfry device has IRQ {irq}").into())
}

/// `runs` D3 round trips of `/dev/belfry<index>` (`dev`), runtime PM allowed with a 20 ms
/// autosuspend delay for the duration (then `control` = `on` and the old delay again).
pub fn run(dev: &Device, index: u32, runs: u32) -> Result<D3, BoxError> {
    let dir = format!("/sys/bus/pci/devices/{}/power", pci_address(index)?);
    let delay_was = std::fs::read_to_string(format!("{dir}/autosuspend_delay_ms"))?;
    let ctx = dev.create_context()?;
    let target = ctx.alloc(4096, 0)?;
    let mut q = ctx.create_queue(&belfry_umd::QueueDesc::default())?;
    let mut cmds = CommandBuffer::new();
    cmds.write32(target.gpu_va(), 0xD3)?;
    let v = q.submit(&cmds)?;
    q.wait(v, Duration::from_secs(10))?;
    std::fs::write(format!("{dir}/autosuspend_delay_ms"), "20")?;
    std::fs::write(format!("{dir}/control"), "auto")?;
    let result = (|| -> Result<D3, BoxError> {
        let mut out = D3 { entry: Vec::new(), exit: Vec::new(), submit_from_d3: Vec::new() };
        for _ in 0..runs {
            let deadline = Instant::now() + Duration::from_secs(20);
            while std::fs::read_to_string(format!("{dir}/runtime_status"))?.trim() != "suspended" {
                if Instant::now() > deadline {
                    return Err("the device did not runtime-suspend within 20 s".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let start = Instant::now();
            let v = q.submit(&cmds)?;
            q.wait(v, Duration::from_secs(10))?;
            out.submit_from_d3.push(start.elapsed());
            let p = dev.device_power()?;
            out.entry.push(Duration::from_nanos(p.last_suspend_ns));
            out.exit.push(Duration::from_nanos(p.last_resume_ns));
        }
        Ok(out)
    })();
    let _ = std::fs::write(format!("{dir}/control"), "on");
    let _ = std::fs::write(format!("{dir}/autosuspend_delay_ms"), delay_was.trim());
    result
}
