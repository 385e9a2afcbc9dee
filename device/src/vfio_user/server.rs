//! The connection loop: framing, validation and dispatch of vfio-user messages.
//!
//! Every message is read whole (header, then exactly `message_size - 16` bytes) before it is
//! judged, so a malformed message is answered with an error and the stream stays in sync.
//! A header claiming more than [`MAX_MESSAGE_SIZE`] is answered with `E2BIG` and the
//! connection closed (its body is never read: a client may not make the server wait for
//! bytes it will not serve), and the rest of a message whose header has come must arrive
//! within [`MESSAGE_DEADLINE`] or the connection ends. Requests are validated against the
//! specification and the device (bounds, indexes, fd counts) and answered with a meaningful
//! errno; nothing a client sends can panic the process.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use belfry_trace_schema::input_log::Entry;
use thiserror::Error;
use vfio_bindings::bindings::vfio::{
    vfio_irq_info, vfio_region_info, VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_INFO_AUTOMASKED,
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE, VFIO_IRQ_INFO_NORESIZE, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
};
use vm_memory::ByteValued;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::err_irq::{self, ErrorIrq};
use super::protocol::*;
use crate::device::Device;
use crate::irq::index_name;
use crate::record;
use crate::trace::{ConnectionState, DmaOp, Event, ResetSource};

/// Why serving stopped.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The socket path is held by a live server.
    #[error("Socket {0} is in use by a running server")]
    InUse(PathBuf),
    /// The socket path exists and is not a socket.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// `--fd` is not a connected UNIX socket.
    #[error("File descriptor {0} is not a socket")]
    BadFd(RawFd),
    /// Binding, accepting or reading the socket failed.
    #[error("Socket I/O failed: {0}")]
    Io(#[from] io::Error),
}

/// A listening socket at a path, removed when dropped.
pub struct Listener {
    listener: UnixListener,
    path: PathBuf,
}

impl Listener {
    /// Binds `path`, replacing a stale socket file left by a dead server.
    pub fn bind(path: &Path) -> Result<Self, ServeError> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.file_type().is_socket() => return Err(ServeError::NotASocket(path.into())),
            Ok(_) => match UnixStream::connect(path) {
                Ok(_) => return Err(ServeError::InUse(path.into())),
                Err(_) => {
                    log::info!("removing stale socket {}", path.display());
                    std::fs::remove_file(path)?;
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        // Bind and listen under a temporary name, then rename into place: the socket file
        // appears only once it accepts connections, so a client that waits for the file (QEMU
        // started by a launcher) never meets a socket that is bound but not yet listening.
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let listener = UnixListener::bind(&tmp)?;
        if let Err(e) = std::fs::rename(&tmp, path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
        Ok(Listener { listener, path: path.into() })
    }

    /// Serves one client after another; returns after the first unless `persist`.
    pub fn serve(&self, device: &Arc<Device>, persist: bool) -> Result<(), ServeError> {
        loop {
            let (stream, _) = self.listener.accept()?;
            serve_connection(device, stream);
            if !persist {
                return Ok(());
            }
            log::info!("{}: waiting for the next client on {}", device.config.name, self.path.display());
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes an inherited, already connected socket (`--fd`).
pub fn stream_from_fd(fd: RawFd) -> Result<UnixStream, ServeError> {
    // SAFETY: fstat on an arbitrary integer only fills `st`; a bad fd yields an error.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(ServeError::BadFd(fd));
    }
    // SAFETY: fd is an open socket (checked above) that the parent handed to this process for
    // its exclusive use, per the vfio-user backend program conventions.
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}

/// How long the rest of a message may take to arrive once its first bytes have come. A
/// client sends a message whole (QEMU writes each with one `sendmsg`), so this only ends
/// connections whose client stopped mid-message.
pub const MESSAGE_DEADLINE: Duration = Duration::from_secs(5);

/// A failed request: the errno for the reply and a reason for the trace.
struct Failure {
    errno: i32,
    reason: String,
}

fn fail(errno: i32, reason: impl Into<String>) -> Failure {
    Failure { errno, reason: reason.into() }
}

type Reply = Result<Vec<u8>, Failure>;

/// The trace's name of a DMA map (`map`, `map-unreachable`).
fn dma_op(mapping: crate::dma::Mapping) -> DmaOp {
    match mapping {
        crate::dma::Mapping::Direct => DmaOp::Map,
        crate::dma::Mapping::Unreachable => DmaOp::MapUnreachable,
    }
}

struct Connection<'a> {
    device: &'a Device,
    stream: UnixStream,
    negotiated: bool,
    /// The error interrupt's eventfd (per connection).
    err_irq: ErrorIrq,
    /// An fd to send with the next reply (a mappable region's memory).
    reply_fd: Option<RawFd>,
    /// Which connection of the device's life it is (the input log's `connection`).
    number: u32,
}

/// Serves one client until it disconnects, then resets the device and forgets the client's
/// memory and eventfds.
pub fn serve_connection(device: &Arc<Device>, stream: UnixStream) {
    device.tracer.emit(Event::Connection { state: ConnectionState::Connected });
    log::info!("{}: client connected", device.config.name);
    let number = device.recording.connection_started();
    let mut conn =
        Connection { device, stream, negotiated: false, err_irq: ErrorIrq::default(), reply_fd: None, number };
    if let Err(e) = conn.run() {
        log::warn!("{}: connection ended: {e}", device.config.name);
    }
    // Replaying, the departure waits for its recorded place in the log.
    device.recording.note(|| Entry::Departure { connection: number });
    device.disconnect();
    device.tracer.emit(Event::Connection { state: ConnectionState::Disconnected });
    log::info!("{}: client disconnected", device.config.name);
}

impl Connection<'_> {
    fn run(&mut self) -> io::Result<()> {
        loop {
            let Some((header, fds)) = self.read_header()? else { return Ok(()) };
            self.handle(header, fds)?;
        }
    }

    /// Reads one header and the fds sent with it; `None` on a clean end of stream.
    fn read_header(&mut self) -> io::Result<Option<(Header, Vec<OwnedFd>)>> {
        let mut header = Header::default();
        let buf = header.as_mut_slice();
        let mut raw_fds = [-1 as RawFd; MAX_MSG_FDS];
        let mut iov = [libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }];
        // SAFETY: the iovec points into `header`, alive and exclusively borrowed for the call;
        // `raw_fds` has room for MAX_MSG_FDS descriptors.
        let (n, nfds) = unsafe { self.stream.recv_with_fds(&mut iov, &mut raw_fds) }
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
        // SAFETY: the kernel installed `nfds` new descriptors in this process; we own them now.
        let fds = raw_fds[..nfds].iter().map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) }).collect();
        if n == 0 {
            return Ok(None);
        }
        if n < HEADER_SIZE {
            let deadline = Instant::now() + MESSAGE_DEADLINE;
            self.read_by(&mut header.as_mut_slice()[n..], deadline)?;
        }
        Ok(Some((header, fds)))
    }

    /// Reads exactly `buf.len()` bytes, failing with `TimedOut` if they have not all come by
    /// `deadline`; blocking reads resume afterwards.
    fn read_by(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
        let result = self.read_until(buf, deadline);
        self.stream.set_read_timeout(None)?;
        result
    }

    fn read_until(&mut self, mut buf: &mut [u8], deadline: Instant) -> io::Result<()> {
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "message incomplete after the deadline"));
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("message incomplete after {MESSAGE_DEADLINE:?}"),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn handle(&mut self, header: Header, fds: Vec<OwnedFd>) -> io::Result<()> {
        let nfds = fds.len();
        let size = header.message_size;
        let body_len = (size as usize).saturating_sub(HEADER_SIZE);
        let oversized = size > MAX_MESSAGE_SIZE;
        let reply = if (size as usize) < HEADER_SIZE {
            // Nothing to drain: treat the message as header-only.
            Err(fail(libc::EINVAL, format!("message_size {size} is smaller than the header")))
        } else if oversized {
            // Never read: the connection closes after the reply.
            Err(fail(libc::E2BIG, format!("message_size {size} exceeds {MAX_MESSAGE_SIZE}: closing the connection")))
        } else {
            let mut body = vec![0u8; body_len];
            self.read_by(&mut body, Instant::now() + MESSAGE_DEADLINE)?;
            self.device.recording.note(|| Entry::Message {
                connection: self.number,
                fds: fds.iter().map(record::fd_identity).collect(),
                bytes: [header.as_slice(), &body].concat(),
            });
            if header.flags & FLAG_TYPE_MASK != FLAG_TYPE_COMMAND {
                Err(fail(libc::EINVAL, format!("flags {:#x}: not a command", header.flags)))
            } else {
                self.dispatch(header.command, &body, fds)
            }
        };
        let command: crate::trace::Name = Command::from_raw(header.command)
            .map_or_else(|| format!("UNKNOWN({})", header.command).into(), |c| c.name().into());
        let posted = header.flags & FLAG_NO_REPLY != 0;
        let (errno, error) = match &reply {
            Ok(_) => (None, None),
            Err(f) => {
                log::warn!("{}: {command} (id {}) failed: {}", self.device.config.name, header.message_id, f.reason);
                (Some(f.errno), Some(f.reason.clone()))
            }
        };
        self.device.tracer.emit(Event::Message {
            id: header.message_id,
            command,
            size,
            fds: nfds,
            errno,
            error,
            posted,
        });
        if !posted {
            self.send_reply(&header, reply)?;
        }
        if oversized {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("message {} claims {size} bytes, above the negotiated {MAX_MESSAGE_SIZE}", header.message_id),
            ));
        }
        Ok(())
    }

    fn send_reply(&mut self, request: &Header, reply: Reply) -> io::Result<()> {
        let reply_fd = std::mem::take(&mut self.reply_fd);
        let (payload, flags, error) = match reply {
            Ok(p) => (p, FLAG_TYPE_REPLY, 0),
            Err(f) => (Vec::new(), FLAG_TYPE_REPLY | FLAG_ERROR, f.errno as u32),
        };
        let message_size = u32::try_from(HEADER_SIZE + payload.len())
            .map_err(|_| io::Error::other(format!("reply of {} bytes is too large", payload.len())))?;
        let header = Header { message_id: request.message_id, command: request.command, message_size, flags, error };
        let mut out = Vec::with_capacity(HEADER_SIZE + payload.len());
        out.extend_from_slice(header.as_slice());
        out.extend_from_slice(&payload);
        self.device.recording.note(|| Entry::Reply { bytes: out.clone() });
        match reply_fd {
            // The fd goes with the first byte of the reply; the rest follows as usual.
            Some(fd) if error == 0 => {
                let sent = self.stream.send_with_fd(&out[..], fd).map_err(io::Error::from)?;
                self.stream.write_all(&out[sent..])
            }
            _ => self.stream.write_all(&out),
        }
    }

    fn dispatch(&mut self, raw: u16, body: &[u8], fds: Vec<OwnedFd>) -> Reply {
        let Some(command) = Command::from_raw(raw) else {
            return Err(fail(libc::ENOTSUP, format!("unknown command {raw}")));
        };
        if command != Command::Version && !self.negotiated {
            return Err(fail(libc::EINVAL, "VERSION must be negotiated first"));
        }
        let takes_fds = matches!(command, Command::DmaMap | Command::DeviceSetIrqs);
        if !takes_fds && !fds.is_empty() {
            return Err(fail(libc::EINVAL, format!("{} takes no file descriptors", command.name())));
        }
        match command {
            Command::Version => self.version(body),
            Command::DmaMap => self.dma_map(body, fds),
            Command::DmaUnmap => self.dma_unmap(body),
            Command::DeviceGetInfo => self.device_info(body),
            Command::DeviceGetRegionInfo => self.region_info(body),
            Command::DeviceGetIrqInfo => self.irq_info(body),
            Command::DeviceSetIrqs => self.set_irqs(body, fds),
            Command::RegionRead => self.region_read(body),
            Command::RegionWrite => self.region_write(body),
            Command::DeviceReset => {
                self.device.reset(ResetSource::VfioUser);
                Ok(Vec::new())
            }
            other => Err(fail(libc::ENOTSUP, format!("{} is not supported", other.name()))),
        }
    }

    fn version(&mut self, body: &[u8]) -> Reply {
        let v: VersionPayload = read_struct(body).ok_or_else(|| fail(libc::EINVAL, "VERSION payload too short"))?;
        if v.major != VERSION_MAJOR {
            return Err(fail(
                libc::ENOTSUP,
                format!("protocol version {}.{} (we speak {VERSION_MAJOR}.x)", v.major, v.minor),
            ));
        }
        let json = &body[std::mem::size_of::<VersionPayload>()..];
        let json = json.split(|&b| b == 0).next().unwrap_or(&[]);
        if !json.is_empty() {
            let caps: serde_json::Value = serde_json::from_slice(json)
                .map_err(|e| fail(libc::EINVAL, format!("capabilities are not JSON: {e}")))?;
            if !caps.is_object() {
                return Err(fail(libc::EINVAL, "capabilities are not a JSON object"));
            }
            log::debug!("{}: client capabilities {caps}", self.device.config.name);
        }
        self.negotiated = true;
        let ours = serde_json::json!({
            "capabilities": {
                "max_msg_fds": MAX_MSG_FDS,
                "max_data_xfer_size": MAX_DATA_XFER,
                "pgsizes": 4096,
                "max_dma_maps": MAX_DMA_MAPS,
            }
        });
        let mut out = VersionPayload { major: VERSION_MAJOR, minor: VERSION_MINOR.min(v.minor) }.as_slice().to_vec();
        out.extend_from_slice(ours.to_string().as_bytes());
        out.push(0);
        Ok(out)
    }

    fn dma_map(&mut self, body: &[u8], mut fds: Vec<OwnedFd>) -> Reply {
        let m: DmaMapPayload = read_struct(body).ok_or_else(|| fail(libc::EINVAL, "DMA_MAP payload too short"))?;
        if (m.argsz as usize) < std::mem::size_of::<DmaMapPayload>() {
            return Err(fail(libc::EINVAL, format!("DMA_MAP argsz {}", m.argsz)));
        }
        if fds.len() > 1 {
            return Err(fail(libc::EINVAL, format!("DMA_MAP with {} fds", fds.len())));
        }
        let mapping = self
            .device
            .ram
            .map(m.address, m.size, m.offset, m.flags, fds.pop())
            .map_err(|e| fail(e.errno(), e.to_string()))?;
        self.device.tracer.emit(Event::Dma { op: dma_op(mapping), address: m.address, size: m.size });
        Ok(Vec::new())
    }

    fn dma_unmap(&mut self, body: &[u8]) -> Reply {
        let mut u: DmaUnmapPayload =
            read_struct(body).ok_or_else(|| fail(libc::EINVAL, "DMA_UNMAP payload too short"))?;
        if (u.argsz as usize) < std::mem::size_of::<DmaUnmapPayload>() {
            return Err(fail(libc::EINVAL, format!("DMA_UNMAP argsz {}", u.argsz)));
        }
        let gone = match u.flags {
            0 => self.device.ram.unmap(u.address, u.size).map_err(|e| fail(e.errno(), e.to_string()))?,
            DMA_UNMAP_FLAG_ALL if u.address == 0 && u.size == 0 => self.device.ram.clear(),
            DMA_UNMAP_FLAG_ALL => {
                return Err(fail(
                    libc::EINVAL,
                    format!("DMA_UNMAP of all with address {:#x} size {:#x}", u.address, u.size),
                ));
            }
            other => {
                return Err(fail(libc::ENOTSUP, format!("DMA_UNMAP flags {other:#x} (dirty bitmaps unsupported)")));
            }
        };
        let op = if gone.direct == 0 && gone.unreachable > 0 { DmaOp::UnmapUnreachable } else { DmaOp::Unmap };
        self.device.tracer.emit(Event::Dma { op, address: u.address, size: u.size });
        u.argsz = wire_size(std::mem::size_of::<DmaUnmapPayload>());
        Ok(u.as_slice().to_vec())
    }

    fn device_info(&mut self, body: &[u8]) -> Reply {
        let info: DeviceInfoPayload =
            read_struct(body).ok_or_else(|| fail(libc::EINVAL, "DEVICE_GET_INFO payload too short"))?;
        if (info.argsz as usize) < std::mem::size_of::<DeviceInfoPayload>() {
            return Err(fail(libc::EINVAL, format!("DEVICE_GET_INFO argsz {}", info.argsz)));
        }
        let reply = DeviceInfoPayload {
            argsz: wire_size(std::mem::size_of::<DeviceInfoPayload>()),
            flags: VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET,
            num_regions: VFIO_PCI_NUM_REGIONS,
            num_irqs: VFIO_PCI_NUM_IRQS,
        };
        Ok(reply.as_slice().to_vec())
    }

    fn region_info(&mut self, body: &[u8]) -> Reply {
        let req: vfio_region_info =
            read_uapi(body).ok_or_else(|| fail(libc::EINVAL, "DEVICE_GET_REGION_INFO payload too short"))?;
        if (req.argsz as usize) < REGION_INFO_SIZE {
            return Err(fail(libc::EINVAL, format!("DEVICE_GET_REGION_INFO argsz {}", req.argsz)));
        }
        let (size, flags) =
            self.device.region_info(req.index).ok_or_else(|| fail(libc::EINVAL, format!("no region {}", req.index)))?;
        // A mappable region's memory goes with the reply (vfio-user: the region's fd, mapped
        // at `offset`; no sparse-mmap capability, the whole region is mappable).
        self.reply_fd = self.device.region_fd(req.index).map(|fd| fd.as_raw_fd());
        let info = vfio_region_info {
            argsz: wire_size(REGION_INFO_SIZE),
            flags,
            index: req.index,
            cap_offset: 0,
            size,
            offset: 0,
        };
        Ok(uapi_bytes(&info))
    }

    fn irq_info(&mut self, body: &[u8]) -> Reply {
        let req: vfio_irq_info =
            read_uapi(body).ok_or_else(|| fail(libc::EINVAL, "DEVICE_GET_IRQ_INFO payload too short"))?;
        if (req.argsz as usize) < IRQ_INFO_SIZE {
            return Err(fail(libc::EINVAL, format!("DEVICE_GET_IRQ_INFO argsz {}", req.argsz)));
        }
        if req.index >= VFIO_PCI_NUM_IRQS {
            return Err(fail(libc::EINVAL, format!("no IRQ index {}", req.index)));
        }
        let count =
            if req.index == VFIO_PCI_ERR_IRQ_INDEX { err_irq::COUNT } else { self.device.irqs.vector_count(req.index) };
        let flags = match (req.index, count) {
            (_, 0) => 0,
            (VFIO_PCI_INTX_IRQ_INDEX, _) => VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED,
            _ => VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
        };
        let info = vfio_irq_info { argsz: wire_size(IRQ_INFO_SIZE), flags, index: req.index, count };
        Ok(uapi_bytes(&info))
    }

    fn set_irqs(&mut self, body: &[u8], fds: Vec<OwnedFd>) -> Reply {
        let req: IrqSetPayload =
            read_struct(body).ok_or_else(|| fail(libc::EINVAL, "DEVICE_SET_IRQS payload too short"))?;
        if (req.argsz as usize) < IRQ_SET_SIZE {
            return Err(fail(libc::EINVAL, format!("DEVICE_SET_IRQS argsz {}", req.argsz)));
        }
        let data = &body[IRQ_SET_SIZE..];
        if req.index == VFIO_PCI_ERR_IRQ_INDEX {
            self.err_irq.set(req.flags, req.start, req.count, data, fds).map_err(|e| fail(libc::EINVAL, e))?;
        } else {
            self.device
                .irqs
                .set_irqs(req.index, req.flags, req.start, req.count, data, fds)
                .map_err(|e| fail(e.errno(), e.to_string()))?;
        }
        self.device.tracer.emit(Event::SetIrqs {
            index: index_name(req.index).into(),
            start: req.start,
            count: req.count,
            action: format!("{:#x}", req.flags),
        });
        Ok(Vec::new())
    }

    fn region_read(&mut self, body: &[u8]) -> Reply {
        let req: RegionAccessPayload =
            read_struct(body).ok_or_else(|| fail(libc::EINVAL, "REGION_READ payload too short"))?;
        if req.count > MAX_DATA_XFER {
            return Err(fail(libc::E2BIG, format!("REGION_READ of {} bytes exceeds {MAX_DATA_XFER}", req.count)));
        }
        let mut data = vec![0u8; req.count as usize];
        self.device.region_read(req.region, req.offset, &mut data).map_err(|e| fail(e.errno(), e.to_string()))?;
        let mut out = req.as_slice().to_vec();
        out.extend_from_slice(&data);
        Ok(out)
    }

    fn region_write(&mut self, body: &[u8]) -> Reply {
        let req: RegionAccessPayload =
            read_struct(body).ok_or_else(|| fail(libc::EINVAL, "REGION_WRITE payload too short"))?;
        let data = &body[std::mem::size_of::<RegionAccessPayload>()..];
        if data.len() != req.count as usize {
            return Err(fail(libc::EINVAL, format!("REGION_WRITE count {} but {} data bytes", req.count, data.len())));
        }
        self.device.region_write(req.region, req.offset, data).map_err(|e| fail(e.errno(), e.to_string()))?;
        Ok(req.as_slice().to_vec())
    }
}

/// The `argsz` of a vfio structure of `bytes` bytes (a few dozen bytes, so it always fits).
fn wire_size(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}
