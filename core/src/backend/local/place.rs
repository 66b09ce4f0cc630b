//! Where the database lives: the default path and the checks on its
//! folder and file (owner, mode, symlinks) before it is opened.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The fixed base of the default database folder: the same for every
/// process of the host whatever its environment (`TMPDIR`,
/// `XDG_RUNTIME_DIR`, cron, systemd, `sudo -u`), and kept across logout and
/// reboot (FHS: `/var/tmp` is not cleaned at boot, unlike `/tmp` or the
/// per-session tmpfs `$XDG_RUNTIME_DIR`). It is a shared folder (mode 1777):
/// the only sticky, world-writable folder a database's path may pass through.
pub const DEFAULT_BASE: &str = "/var/tmp";

/// The environment variable naming the database file when no path is passed.
pub const PATH_ENV: &str = "MISTRI_LOCKS_LOCAL_PATH";

pub(crate) fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// This user's default database: `/var/tmp/mistri_locks-<uid>/locks.db`,
/// derived from the uid only, so every process of the user opens the same
/// file.
pub fn user_default_path() -> PathBuf {
    Path::new(DEFAULT_BASE)
        .join(format!("mistri_locks-{}", current_uid()))
        .join("locks.db")
}

/// The database a `None` path means: `$MISTRI_LOCKS_LOCAL_PATH` when set and
/// not empty, else [`user_default_path`].
pub fn default_path() -> PathBuf {
    match std::env::var_os(PATH_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => user_default_path(),
    }
}

pub(crate) fn config_err(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Config(format!("local lock database {}: {what}", path.display()))
}

pub(crate) const STICKY: u32 = 0o1000;

/// Creates this user's default folder under [`DEFAULT_BASE`] (mode 0700) if
/// it is missing. The base itself must be root's (or ours) and, if others may
/// write it, sticky, so nobody else can rename or delete our folder.
pub(crate) fn create_default_folder(path: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let base = dir.parent().unwrap_or(Path::new(DEFAULT_BASE));
    let meta = std::fs::metadata(base).map_err(|e| {
        config_err(
            path,
            format!(
                "the shared base folder {} is not usable: {e}",
                base.display()
            ),
        )
    })?;
    if !meta.is_dir() {
        return Err(config_err(
            path,
            format!("the shared base {} is not a folder", base.display()),
        ));
    }
    let uid = current_uid();
    if meta.uid() != 0 && meta.uid() != uid {
        return Err(config_err(
            path,
            format!(
                "the shared base folder {} belongs to uid {}, not to root or uid {uid}",
                base.display(),
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 && meta.mode() & STICKY == 0 {
        return Err(config_err(
            path,
            format!(
                "the shared base folder {} is writable by others without the sticky bit",
                base.display()
            ),
        ));
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        // Checked by check_folder, like any existing folder.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(config_err(
            path,
            format!("cannot create its folder {}: {e}", dir.display()),
        )),
    }
}

/// The folder that holds the database (and SQLite's `-wal` and `-shm`
/// files) must be a real folder (not a symbolic link), owned by this uid (or
/// root), and writable by nobody else: whoever can write it can delete or
/// replace the database under a running holder. The default folder must be
/// exactly private (no group or other bits at all).
pub(crate) fn check_folder(path: &Path, dir: &Path, default: bool) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display();
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| config_err(path, format!("cannot use its folder {shown}: {e}")))?;
    if meta.file_type().is_symlink() {
        return Err(config_err(
            path,
            format!("its folder {shown} is a symbolic link; refusing it (name the real folder)"),
        ));
    }
    if !meta.is_dir() {
        return Err(config_err(
            path,
            format!("its parent {shown} is not a folder"),
        ));
    }
    let uid = current_uid();
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(config_err(
            path,
            format!(
                "its folder {shown} belongs to uid {}, not to uid {uid} (this process); refusing it: its owner could delete or replace the database",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(config_err(
            path,
            format!(
                "its folder {shown} (mode {mode:04o}) is writable by other users; refusing it: make it mode 0700 or use another folder"
            ),
        ));
    }
    if default && mode & 0o077 != 0 {
        return Err(config_err(
            path,
            format!("its folder {shown} has mode {mode:04o}; it must be 0700 (chmod 700 it)"),
        ));
    }
    Ok(())
}

/// Opens (creating, mode 0600) the database file without following a
/// symbolic link, and checks what was opened: a regular file of ours.
pub(crate) fn check_file(path: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let symlink = || {
        config_err(
            path,
            "it is a symbolic link; refusing it (name the real file)",
        )
    };
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(symlink());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => symlink(),
            _ => config_err(path, format!("cannot open it for writing: {e}")),
        })?;
    let meta = file.metadata().map_err(|e| config_err(path, e))?;
    if !meta.is_file() {
        return Err(config_err(path, "it is not a regular file"));
    }
    let uid = current_uid();
    if meta.uid() != uid {
        return Err(config_err(
            path,
            format!(
                "it belongs to uid {}, not to uid {uid} (this process)",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        // Ours, in a folder only we can write: just make it private.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| config_err(path, format!("cannot make it private: {e}")))?;
    }
    Ok(())
}

/// Makes sure the folder and the file are safe to use before SQLite opens
/// the file by name: see [`check_folder`] and [`check_file`]. Only we can
/// write the checked folder, so nobody can swap the file in between.
pub(crate) fn prepare(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let default = path == user_default_path();
    if default {
        create_default_folder(path, dir)?;
    } else if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                config_err(
                    path,
                    format!("cannot create its folder {}: {e}", dir.display()),
                )
            })?;
    }
    check_folder(path, dir, default)?;
    check_file(path)
}
