//! The doorbells: files in `<database>-bells/` a ringer touches and the
//! listener ([`super::doorbell`]) watches with inotify.

use super::place::check_folder;
use super::place::config_err;
use super::place::user_default_path;
use crate::error::Result;
use std::path::{Path, PathBuf};

/// How many doorbells of each kind a database has: a key (or a key and a
/// line) rings the one its [`fnv1a`] hash selects, modulo this.
pub const BELL_BUCKETS: u64 = 4096;

/// 64-bit FNV-1a of `parts` concatenated. Fixed forever: processes of
/// every version on a host agree on it (it names the doorbell files), so
/// it is written here, not taken from std's hasher (which may change).
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash
}

/// The doorbell bucket of the flag `key`.
pub(crate) fn bucket_of(key: &str) -> u16 {
    // Below 4096: fits.
    (fnv1a(&[key.as_bytes()]) % BELL_BUCKETS) as u16
}

/// The doorbell bucket of the waiting line `line` of `key`: the key's
/// bytes, one 0 byte, the line's bytes.
pub(crate) fn line_bucket_of(key: &str, line: &str) -> u16 {
    (fnv1a(&[key.as_bytes(), &[0], line.as_bytes()]) % BELL_BUCKETS) as u16
}

/// One doorbell file in `<database>-bells/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Bell {
    /// `raised-<bucket>`: rung by `set_flag` of a key in the bucket.
    Raised(u16),
    /// `next-<bucket>`: rung by a release that makes a line in the bucket
    /// the next of its key's queue.
    Next(u16),
}

impl Bell {
    /// What rings for `interest`.
    #[cfg(target_os = "linux")]
    pub(crate) fn of(interest: &crate::contract::push::Interest) -> Bell {
        match interest {
            crate::contract::push::Interest::Flag(key) => Bell::Raised(bucket_of(key)),
            crate::contract::push::Interest::Line { key, line } => {
                Bell::Next(line_bucket_of(key, line))
            }
        }
    }

    /// Its file's name: the kind, a dash, the bucket as 3 lowercase hex
    /// digits.
    pub(crate) fn file_name(self) -> String {
        match self {
            Bell::Raised(b) => format!("raised-{b:03x}"),
            Bell::Next(b) => format!("next-{b:03x}"),
        }
    }
}

/// `<database>-bells`: the folder of the doorbells of the database at
/// `db`, next to it.
pub(crate) fn bells_dir_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-bells");
    PathBuf::from(name)
}

/// Rings the doorbell at `path`: opens it for writing and closes it, which
/// makes the kernel report `IN_CLOSE_WRITE` to its watchers. Never creates
/// it (a missing file means nobody ever watched that bucket), never follows
/// a symbolic link, never blocks (`O_NONBLOCK`: a FIFO put there can't hold
/// the ringer); every error is ignored (push is best effort).
pub(crate) fn ring(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
}

/// Makes (mode 0700, if missing) and checks the doorbell folder of the
/// database at `db`, by the database folder's rules ([`check_folder`]):
/// a real folder of this uid (or root) that nobody else can write.
/// Listeners only: ringers never create anything.
#[cfg(target_os = "linux")]
pub(crate) fn bells_folder(db: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = bells_dir_of(db);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(config_err(
                db,
                format!("cannot create its doorbell folder {}: {e}", dir.display()),
            ))
        }
    }
    check_folder(db, &dir, db == user_default_path())?;
    Ok(dir)
}

/// Creates the doorbell at `path` if missing (mode 0600, never through a
/// symbolic link). Opened read-only, so the close is not a ring
/// (`IN_CLOSE_NOWRITE`) for the other processes watching it.
#[cfg(target_os = "linux")]
pub(crate) fn create_bell(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_CREAT by hand: std refuses `create` without write access.
    std::fs::OpenOptions::new()
        .read(true)
        .mode(0o600)
        .custom_flags(libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .and_then(|file| match file.metadata()?.is_file() {
            true => Ok(()),
            false => Err(std::io::Error::other("not a regular file")),
        })
}
