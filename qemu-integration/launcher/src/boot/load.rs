//! `--load N`: N threads that spin on the host while the guest runs, as the other jobs of a
//! busy CI machine do, so a hunt for a rare failure (`conformance --repeat`) sees the device
//! threads and QEMU preempted at unlucky moments. The hog ends when it is dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Spinning threads; dropping it stops and joins them.
pub struct Hog {
    /// Set to end the threads.
    stop: Arc<AtomicBool>,
    /// Rounds the threads spun (so the loop does work the compiler keeps).
    rounds: Arc<AtomicU64>,
    /// The threads.
    threads: Vec<JoinHandle<()>>,
}

impl Hog {
    /// Starts `threads` spinning threads (none for 0).
    ///
    /// # Errors
    /// A thread that could not be spawned (those already running are stopped).
    pub fn start(threads: u16) -> std::io::Result<Self> {
        let mut hog =
            Self { stop: Arc::new(AtomicBool::new(false)), rounds: Arc::new(AtomicU64::new(0)), threads: Vec::new() };
        for i in 0..threads {
            let (stop, rounds) = (hog.stop.clone(), hog.rounds.clone());
            let thread = std::thread::Builder::new().name(format!("belfry-load{i}")).spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mut x = 0u64;
                    for j in 0..100_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(j));
                    }
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            })?;
            hog.threads.push(thread);
        }
        Ok(hog)
    }

    /// Rounds spun so far (each 100 000 multiply-adds).
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hog_spins_until_dropped() {
        let hog = Hog::start(1).unwrap();
        let start = std::time::Instant::now();
        while hog.rounds() < 3 && start.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::yield_now();
        }
        assert!(hog.rounds() >= 3, "the load thread did not spin");
        drop(hog);
        assert!(Hog::start(0).unwrap().threads.is_empty());
    }
}
