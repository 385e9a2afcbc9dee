//! The lspci-style listing: extracting it from the guest's results channel, normalising PCI
//! bus addresses (they depend on slot assignment), comparing each default-configured device's
//! block with `qemu-integration/golden/lspci.txt`, and rewriting that file (`--bless`).

use std::fmt::Write as _;

/// Where the golden file lives in the repository.
pub const GOLDEN_LSPCI: &str = "qemu-integration/golden/lspci.txt";

/// The header written by `--bless` (lines starting with `#` are not compared).
const HEADER: &str = "\
# lspci-style listing of one Belfry device with default flags, as the guest script
# qemu-integration/guest/lspci.sh prints it; PCI addresses are normalised to xx:xx.x.
# Regenerate with: cargo belfry conformance --bless
";

/// The lines between `begin` and `end` marker lines (the last such section), if present.
pub fn extract_section(text: &str, begin: &str, end: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let start = lines.iter().rposition(|l| l.trim() == begin)?;
    let stop = start + 1 + lines[start + 1..].iter().position(|l| l.trim() == end)?;
    let mut section = lines[start + 1..stop].join("\n");
    section.push('\n');
    Some(section)
}

/// Whether `b` may stand next to an address (not part of a longer word).
fn is_separator(b: u8) -> bool {
    b.is_ascii() && !b.is_ascii_alphanumeric()
}

/// The length of the PCI address starting `b` (`dddd:bb:dd.f` or `bb:dd.f`), if any.
fn address_len(b: &[u8]) -> Option<usize> {
    let hex = |b: &u8| b.is_ascii_hexdigit();
    let short = |b: &[u8]| {
        b.len() >= 7
            && b[..2].iter().all(hex)
            && b[2] == b':'
            && b[3..5].iter().all(hex)
            && b[5] == b'.'
            && (b'0'..=b'7').contains(&b[6])
    };
    let ends_at = |n: usize| b.get(n).is_none_or(|&c| is_separator(c));
    if b.len() >= 12 && b[..4].iter().all(hex) && b[4] == b':' && short(&b[5..]) && ends_at(12) {
        return Some(12);
    }
    (short(b) && ends_at(7)).then_some(7)
}

/// Replaces PCI addresses (`dddd:bb:dd.f` and `bb:dd.f`) by `xx:xx.x`.
pub fn normalise_addresses(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if i == 0 || is_separator(bytes[i - 1]) {
            if let Some(len) = address_len(&bytes[i..]) {
                out.extend_from_slice(b"xx:xx.x");
                i += len;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    // Only ASCII runs were replaced, by ASCII: the bytes are still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Splits a listing into one block per device: a block starts at a non-indented line.
pub fn device_blocks(listing: &str) -> Vec<String> {
    let mut blocks: Vec<String> = Vec::new();
    for line in listing.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with([' ', '\t']) || blocks.is_empty() {
            blocks.push(String::new());
        }
        let block = blocks.last_mut().expect("pushed above");
        block.push_str(line);
        block.push('\n');
    }
    blocks
}

/// The golden text without comment lines and blank lines.
pub fn golden_body(golden: &str) -> String {
    golden.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).fold(String::new(), |mut s, l| {
        s.push_str(l.trim_end());
        s.push('\n');
        s
    })
}

/// The golden file's contents for `block`.
pub fn blessed(block: &str) -> String {
    format!("{HEADER}{block}")
}

/// A line diff of `expected` against `actual` (`-` expected only, `+` actual only).
pub fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    // Longest common subsequence table, from the ends.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "  {}", a[i]);
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            let _ = writeln!(out, "+ {}", b[j]);
            j += 1;
        } else {
            let _ = writeln!(out, "- {}", a[i]);
            i += 1;
        }
    }
    out
}

/// The outcome of comparing the listing with the golden file.
#[derive(Debug, PartialEq, Eq)]
pub enum Comparison {
    /// Every compared block matches.
    Match {
        /// How many device blocks were compared.
        compared: usize,
    },
    /// A block differs.
    Differs {
        /// The device index.
        device: usize,
        /// The diff, golden against actual.
        diff: String,
    },
    /// The listing has fewer blocks than devices.
    Missing {
        /// Blocks expected.
        expected: usize,
        /// Blocks found.
        found: usize,
    },
}

/// Compares the blocks of the devices in `default_devices` (indices of devices started with
/// default flags) with the golden block.
pub fn compare(golden: &str, blocks: &[String], default_devices: &[usize]) -> Comparison {
    let golden = golden_body(golden);
    let mut compared = 0;
    for &device in default_devices {
        let Some(block) = blocks.get(device) else {
            return Comparison::Missing {
                expected: default_devices.iter().max().map_or(0, |m| m + 1),
                found: blocks.len(),
            };
        };
        let actual = normalise_addresses(block);
        if actual != golden {
            return Comparison::Differs { device, diff: diff(&golden, &actual) };
        }
        compared += 1;
    }
    Comparison::Match { compared }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESULTS: &str = "noise\r\nBELFRY-LSPCI-BEGIN\r\n00:02.0 3D controller [0302]: Device [1234:be11] (rev 01)\r\n\tKernel driver in use: belfry\r\n00:03.0 3D controller [0302]: Device [1234:be11] (rev 01)\r\n\tKernel driver in use: belfry\r\nBELFRY-LSPCI-END\r\nmore\r\n";

    #[test]
    fn sections_are_extracted_without_carriage_returns() {
        let s = extract_section(RESULTS, "BELFRY-LSPCI-BEGIN", "BELFRY-LSPCI-END").unwrap();
        assert!(s.starts_with("00:02.0 3D controller"));
        assert!(!s.contains('\r'));
        assert_eq!(device_blocks(&s).len(), 2);
        assert_eq!(extract_section("x\n", "A", "B"), None);
        assert_eq!(extract_section("A\nx\n", "A", "B"), None);
    }

    #[test]
    fn addresses_are_normalised() {
        assert_eq!(
            normalise_addresses("0000:00:03.0 and 00:1f.7, not 12:34 or ab:cd.8 or x00:01.0"),
            "xx:xx.x and xx:xx.x, not 12:34 or ab:cd.8 or x00:01.0"
        );
        assert_eq!(normalise_addresses("é00:01.0é"), "é00:01.0é");
        assert_eq!(normalise_addresses("[00:01.0]"), "[xx:xx.x]");
        assert_eq!(normalise_addresses(""), "");
    }

    #[test]
    fn comparison_uses_default_devices_only() {
        let listing = extract_section(RESULTS, "BELFRY-LSPCI-BEGIN", "BELFRY-LSPCI-END").unwrap();
        let blocks = device_blocks(&listing);
        let golden = blessed(&normalise_addresses(&blocks[0]));
        assert_eq!(compare(&golden, &blocks, &[0, 1]), Comparison::Match { compared: 2 });
        assert_eq!(compare(&golden, &blocks, &[]), Comparison::Match { compared: 0 });
        let other = golden.replace("rev 01", "rev 02");
        match compare(&other, &blocks, &[1]) {
            Comparison::Differs { device: 1, diff } => {
                assert!(diff.contains("- xx:xx.x 3D controller [0302]: Device [1234:be11] (rev 02)"));
                assert!(diff.contains("+ xx:xx.x 3D controller [0302]: Device [1234:be11] (rev 01)"));
                assert!(diff.contains("  \tKernel driver in use: belfry"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(compare(&golden, &blocks, &[2]), Comparison::Missing { expected: 3, found: 2 });
    }

    #[test]
    fn diff_of_equal_texts_has_no_changes() {
        let d = diff("a\nb\n", "a\nb\n");
        assert!(!d.contains("\n-") && !d.starts_with('-') && !d.contains('+'));
    }
}
