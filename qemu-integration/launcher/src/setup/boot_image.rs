//! The guest kernel booted through its PVH entry. A distribution ships its kernel as a
//! compressed `bzImage` (the distro flavour's `vmlinuz`): under TCG the firmware's real-mode
//! set-up and the kernel's own decompression take about 1.3 s of every boot before the
//! kernel's first line. The same kernel as an uncompressed ELF carrying the PVH entry note
//! (`CONFIG_PVH`, which Debian's image has) is loaded by QEMU straight into memory and entered
//! in 32-bit protected mode, as the source-built flavours already boot. [`pvh_image`] takes
//! the ELF out of the `bzImage` once (its zstd payload, decoded by `ruzstd`; the note read by
//! `object`) into the cargo target directory, where a user who cannot write the root-owned
//! provisioning cache can keep it, and every later boot of that image uses it.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use object::read::elf::{FileHeader as _, ProgramHeader as _};

/// The ELF note type of the PVH entry point (`XEN_ELFNOTE_PHYS32_ENTRY`, owner `Xen`), which
/// QEMU needs to boot an uncompressed kernel.
const PVH_ENTRY_NOTE: u32 = 18;

/// The magic number that starts a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// What to boot for the kernel image `boot`: `boot` itself if it is an ELF already (the
/// source-built flavours' `vmlinux`), else the uncompressed kernel with its PVH note taken out
/// of it, kept as `<images>/<the image's directory name>/vmlinux` (a provisioned tree's name
/// carries its key, so a new image gets a new directory); `None` when `boot` holds no such
/// kernel (another compression, no PVH note), which then boots as it is.
///
/// # Errors
/// Reading the image or writing the uncompressed one.
pub fn pvh_image(boot: &Path, images: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut magic = [0u8; 4];
    std::fs::File::open(boot)?.read_exact(&mut magic)?;
    if magic == *b"\x7fELF" {
        return Ok(Some(boot.to_path_buf()));
    }
    let tree = boot.parent().and_then(Path::file_name).unwrap_or(boot.as_os_str());
    let kept = images.join(tree).join("vmlinux");
    if kept.is_file() {
        return Ok(Some(kept));
    }
    let Some(elf) = uncompressed_kernel(&std::fs::read(boot)?) else { return Ok(None) };
    if !has_pvh_entry(&elf) {
        return Ok(None);
    }
    let dir = images.join(tree);
    std::fs::create_dir_all(&dir)?;
    // Written aside and renamed, so that a run stopped half-way leaves no half a kernel.
    let partial = dir.join(format!("vmlinux.{}.partial", std::process::id()));
    std::fs::write(&partial, &elf)?;
    std::fs::rename(&partial, &kept)?;
    Ok(Some(kept))
}

/// The ELF kernel in `bzimage`: the first zstd frame that decodes to an ELF file (the way the
/// kernel's `scripts/extract-vmlinux` looks for it).
fn uncompressed_kernel(bzimage: &[u8]) -> Option<Vec<u8>> {
    let mut starts = bzimage.windows(ZSTD_MAGIC.len()).enumerate().filter(|(_, w)| *w == ZSTD_MAGIC).map(|(i, _)| i);
    starts.find_map(|at| {
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(&bzimage[at..]).ok()?;
        let mut elf = Vec::new();
        decoder.read_to_end(&mut elf).ok()?;
        elf.starts_with(b"\x7fELF").then_some(elf)
    })
}

/// Whether the 64-bit ELF `elf` carries the PVH entry note.
fn has_pvh_entry(elf: &[u8]) -> bool {
    let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(elf) else { return false };
    let Ok(endian) = header.endian() else { return false };
    let Ok(segments) = header.program_headers(endian, elf) else { return false };
    segments.iter().any(|segment| {
        let Ok(Some(mut notes)) = segment.notes(endian, elf) else { return false };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"Xen" && note.n_type(endian) == object::elf::NoteType(PVH_ENTRY_NOTE) {
                return true;
            }
        }
        false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF with one `PT_NOTE` segment holding one note.
    fn elf_with_note(name: &[u8], kind: u32) -> Vec<u8> {
        let mut note = Vec::new();
        note.extend_from_slice(&u32::try_from(name.len() + 1).unwrap().to_le_bytes());
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&kind.to_le_bytes());
        note.extend_from_slice(name);
        note.push(0);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        note.extend_from_slice(&0x0100_0000u32.to_le_bytes());
        let (ehsize, phentsize) = (64u16, 56u16);
        let note_at = u64::from(ehsize) + u64::from(phentsize);
        let mut elf = Vec::new();
        elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
        elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        elf.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        elf.extend_from_slice(&1u32.to_le_bytes());
        elf.extend_from_slice(&0u64.to_le_bytes()); // entry
        elf.extend_from_slice(&u64::from(ehsize).to_le_bytes()); // phoff
        elf.extend_from_slice(&0u64.to_le_bytes()); // shoff
        elf.extend_from_slice(&0u32.to_le_bytes()); // flags
        elf.extend_from_slice(&ehsize.to_le_bytes());
        elf.extend_from_slice(&phentsize.to_le_bytes());
        elf.extend_from_slice(&1u16.to_le_bytes()); // phnum
        elf.extend_from_slice(&64u16.to_le_bytes()); // shentsize
        elf.extend_from_slice(&0u16.to_le_bytes()); // shnum
        elf.extend_from_slice(&0u16.to_le_bytes()); // shstrndx
        elf.extend_from_slice(&4u32.to_le_bytes()); // PT_NOTE
        elf.extend_from_slice(&4u32.to_le_bytes()); // PF_R
        elf.extend_from_slice(&note_at.to_le_bytes()); // offset
        elf.extend_from_slice(&0u64.to_le_bytes()); // vaddr
        elf.extend_from_slice(&0u64.to_le_bytes()); // paddr
        elf.extend_from_slice(&(note.len() as u64).to_le_bytes()); // filesz
        elf.extend_from_slice(&(note.len() as u64).to_le_bytes()); // memsz
        elf.extend_from_slice(&4u64.to_le_bytes()); // align
        elf.extend_from_slice(&note);
        elf
    }

    /// A bzImage-like file: a set-up part, a frame that is not zstd's, then `payload` as a
    /// zstd frame, then a trailer.
    fn bzimage(payload: &[u8]) -> Vec<u8> {
        let mut image = b"MZ set-up code".to_vec();
        image.extend_from_slice(&ZSTD_MAGIC);
        image.extend_from_slice(b"not a frame");
        image.extend_from_slice(&ruzstd::encoding::compress_to_vec(
            payload,
            ruzstd::encoding::CompressionLevel::Fastest,
        ));
        image.extend_from_slice(b"trailer");
        image
    }

    #[test]
    fn a_bzimage_with_a_pvh_kernel_gives_it_once_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("distro-7.3-key");
        std::fs::create_dir(&tree).unwrap();
        let kernel = elf_with_note(b"Xen", PVH_ENTRY_NOTE);
        std::fs::write(tree.join("vmlinuz"), bzimage(&kernel)).unwrap();
        let images = dir.path().join("images");
        let got = pvh_image(&tree.join("vmlinuz"), &images).unwrap().expect("a PVH kernel");
        assert_eq!(got, images.join("distro-7.3-key/vmlinux"));
        assert_eq!(std::fs::read(&got).unwrap(), kernel);
        // Kept: the image is not read again.
        std::fs::write(tree.join("vmlinuz"), b"gone").unwrap();
        assert_eq!(pvh_image(&tree.join("vmlinuz"), &images).unwrap(), Some(got));
    }

    #[test]
    fn an_elf_boots_as_it_is_and_a_kernel_without_the_note_is_not_taken_out() {
        let dir = tempfile::tempdir().unwrap();
        let elf = dir.path().join("vmlinux");
        std::fs::write(&elf, elf_with_note(b"Xen", PVH_ENTRY_NOTE)).unwrap();
        assert_eq!(pvh_image(&elf, dir.path()).unwrap(), Some(elf));
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("vmlinuz"), bzimage(&elf_with_note(b"GNU", PVH_ENTRY_NOTE))).unwrap();
        assert_eq!(pvh_image(&other.join("vmlinuz"), dir.path()).unwrap(), None, "no Xen note");
        std::fs::write(other.join("vmlinuz"), bzimage(&elf_with_note(b"Xen", 17))).unwrap();
        assert_eq!(pvh_image(&other.join("vmlinuz"), dir.path()).unwrap(), None, "another Xen note");
        std::fs::write(other.join("vmlinuz"), b"MZ no frame at all").unwrap();
        assert_eq!(pvh_image(&other.join("vmlinuz"), dir.path()).unwrap(), None);
    }
}
