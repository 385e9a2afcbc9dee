//! The lspci check of a `conformance` run: the guest's listing is saved as the run
//! directory's `lspci.txt`, and each default-configured device's block is compared with the
//! golden file (or, with `--bless`, the first one is written to it).

use std::path::Path;

use crate::outcome::golden;
use crate::outcome::verdict::Verdict;
use crate::run_dir::RunDir;
use crate::setup::guest;

/// Compares (or, with `bless`, rewrites) the golden lspci listing; `defaults` are the indices
/// of the devices with default flags. A note for the user, or the failed verdict.
pub fn check(repo: &Path, run: &RunDir, defaults: &[usize], bless: bool) -> Result<String, Verdict> {
    let results = std::fs::read(run.results()).unwrap_or_default();
    let results = String::from_utf8_lossy(&results);
    let console = std::fs::read(run.console_log()).unwrap_or_default();
    let console = String::from_utf8_lossy(&console);
    let listing = golden::extract_section(&results, guest::LSPCI_BEGIN, guest::LSPCI_END)
        .or_else(|| golden::extract_section(&console, guest::LSPCI_BEGIN, guest::LSPCI_END))
        .ok_or_else(|| Verdict::failure("the guest wrote no lspci listing (results.txt)"))?;
    let normalised = golden::normalise_addresses(&listing);
    let _ = std::fs::write(run.lspci(), &normalised);
    let blocks = golden::device_blocks(&listing);
    let golden_path = repo.join(golden::GOLDEN_LSPCI);
    if bless {
        let Some(&first) = defaults.first() else {
            return Err(Verdict::failure("--bless needs a device with default flags"));
        };
        let block = golden::normalise_addresses(blocks.get(first).map_or("", String::as_str));
        if block.is_empty() {
            return Err(Verdict::failure("--bless: the listing has no device block"));
        }
        std::fs::write(&golden_path, golden::blessed(&block))
            .map_err(|e| Verdict::failure(format!("writing {}: {e}", golden_path.display())))?;
        return Ok(format!("blessed {}", golden::GOLDEN_LSPCI));
    }
    let golden = std::fs::read_to_string(&golden_path)
        .map_err(|e| Verdict::failure(format!("reading {}: {e} (create it with --bless)", golden::GOLDEN_LSPCI)))?;
    match golden::compare(&golden, &blocks, defaults) {
        golden::Comparison::Match { compared } => {
            Ok(format!("lspci listing matches {} ({compared} device(s) compared)", golden::GOLDEN_LSPCI))
        }
        golden::Comparison::Differs { device, diff } => {
            eprintln!(
                "belfry: lspci listing of device {device} differs from {} (- golden, + guest):",
                golden::GOLDEN_LSPCI
            );
            eprint!("{diff}");
            Err(Verdict::failure(format!(
                "lspci listing of device {device} differs from {} (diff above; --bless accepts it)",
                golden::GOLDEN_LSPCI
            )))
        }
        golden::Comparison::Missing { expected, found } => {
            Err(Verdict::failure(format!("lspci listing has {found} device block(s), expected at least {expected}")))
        }
    }
}
