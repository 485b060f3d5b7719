//! A file written in whole units (pcapng blocks, JSON lines) that stays readable when the disk
//! fills: units are buffered in memory and written together; a write that fails (`ENOSPC`,
//! `EDQUOT`, ...) may have put part of the buffer on disk, so the file is cut back to the end of
//! the last unit written whole, and the buffered units are dropped (counted in [`Lost`]). The
//! next write tries again: writing resumes by itself once space returns.
//!
//! Owns: [`Sink`], [`Lost`] and [`Store`] (what a sink writes to: a [`File`], or a test double).

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};

/// What a [`Sink`] writes to: a seekable writer whose length can be cut.
pub trait Store: Write + Seek {
    /// Cuts (or extends) the store to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Its length now.
    fn size(&mut self) -> io::Result<u64>;
}

impl Store for File {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
    fn size(&mut self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

/// A failed write: the error and how many buffered units were dropped with it.
#[derive(Debug)]
pub struct Lost {
    /// The error of the write.
    pub error: io::Error,
    /// Units dropped (not on disk).
    pub units: u64,
}

impl From<io::Error> for Lost {
    fn from(error: io::Error) -> Lost {
        Lost { error, units: 0 }
    }
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} unit(s) dropped)", self.error, self.units)
    }
}

/// The buffered writer of whole units (see the module documentation).
#[derive(Debug)]
pub struct Sink<S: Store = File> {
    store: S,
    buf: Vec<u8>,
    units: u64,
    cap: usize,
    on_disk: u64,
}

impl<S: Store> Sink<S> {
    /// A sink appending to `store` (its length now is where it goes on), writing once `cap`
    /// bytes are buffered.
    pub fn new(mut store: S, cap: usize) -> io::Result<Sink<S>> {
        let on_disk = store.size()?;
        store.seek(SeekFrom::Start(on_disk))?;
        Ok(Sink {
            store,
            buf: Vec::with_capacity(cap.min(1 << 16)),
            units: 0,
            cap: cap.max(1),
            on_disk,
        })
    }

    /// Buffers one whole unit, writing the buffer when it holds `cap` bytes: `Ok(true)` when
    /// that write was made (so there was room).
    pub fn push(&mut self, unit: &[u8]) -> Result<bool, Lost> {
        self.buf.extend_from_slice(unit);
        self.units += 1;
        if self.buf.len() >= self.cap {
            self.flush()
        } else {
            Ok(false)
        }
    }

    /// Writes what is buffered: `Ok(true)` if there was something to write. On error the store
    /// is cut back to its last whole unit and the buffer dropped.
    pub fn flush(&mut self) -> Result<bool, Lost> {
        if self.buf.is_empty() {
            return Ok(false);
        }
        let r = self
            .store
            .write_all(&self.buf)
            .and_then(|()| self.store.flush());
        let units = std::mem::take(&mut self.units);
        let len = self.buf.len() as u64;
        self.buf.clear();
        match r {
            Ok(()) => {
                self.on_disk += len;
                Ok(true)
            }
            Err(error) => {
                // Part of the buffer may be there: cut it off (freeing its room), and go on
                // writing at the end of the last whole unit.
                let _ = self.store.set_len(self.on_disk);
                let _ = self.store.seek(SeekFrom::Start(self.on_disk));
                Err(Lost { error, units })
            }
        }
    }

    /// Bytes on disk and buffered.
    pub fn len(&self) -> u64 {
        self.on_disk + self.buf.len() as u64
    }

    /// Whether nothing is on disk or buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Units buffered, not yet on disk.
    pub fn pending(&self) -> u64 {
        self.units
    }

    /// Drops the buffer without writing it (how many units it held) and gives the store back.
    pub fn discard(mut self) -> (S, u64) {
        let n = self.units;
        self.buf.clear();
        (self.store, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A store that refuses writes beyond `room` bytes (as a full disk does, after a partial
    /// write), until `room` is raised.
    struct Disk {
        data: Cursor<Vec<u8>>,
        room: usize,
    }

    impl Write for Disk {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let pos = self.data.position() as usize;
            let free = self.room.saturating_sub(pos);
            if free == 0 {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            self.data.write(&b[..b.len().min(free)])
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    impl Seek for Disk {
        fn seek(&mut self, p: SeekFrom) -> io::Result<u64> {
            self.data.seek(p)
        }
    }
    impl Store for Disk {
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.data.get_mut().truncate(len as usize);
            Ok(())
        }
        fn size(&mut self) -> io::Result<u64> {
            Ok(self.data.get_ref().len() as u64)
        }
    }

    #[test]
    fn a_full_disk_loses_whole_units_and_writing_resumes() {
        let disk = Disk {
            data: Cursor::new(b"old\n".to_vec()),
            room: 14,
        };
        let mut s = Sink::new(disk, 8).unwrap();
        assert!(!s.push(b"one\n").unwrap());
        assert!(s.push(b"two\n").unwrap(), "8 bytes buffered: written");
        // room for 2 more bytes: a partial write, then ENOSPC; the part is cut off
        s.push(b"three\n").unwrap();
        let lost = s.push(b"four\n").unwrap_err();
        assert_eq!(lost.units, 2);
        assert_eq!(lost.error.raw_os_error(), Some(28));
        assert_eq!(s.len(), 12);
        // still full: lost again, nothing half written
        assert_eq!(s.push(b"fivefive\n").unwrap_err().units, 1);
        // space returns: writing resumes where the whole units end
        s.store.room = 100;
        s.push(b"six\n").unwrap();
        assert!(s.flush().unwrap());
        assert!(!s.flush().unwrap(), "nothing left to write");
        let (disk, pending) = s.discard();
        assert_eq!(pending, 0);
        assert_eq!(
            String::from_utf8(disk.data.into_inner()).unwrap(),
            "old\none\ntwo\nsix\n"
        );
    }

    #[test]
    fn dev_full_is_refused_and_counted() {
        let Ok(f) = File::options().write(true).open("/dev/full") else {
            return;
        };
        let mut s = Sink::new(f, 1 << 16).unwrap();
        s.push(b"a line\n").unwrap();
        s.push(b"another\n").unwrap();
        let lost = s.flush().unwrap_err();
        assert_eq!((lost.units, lost.error.raw_os_error()), (2, Some(28)));
        assert_eq!(s.pending(), 0);
    }
}
