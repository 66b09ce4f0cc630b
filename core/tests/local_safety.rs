//! The Local adapter's place: one default file that every process of a user
//! agrees on whatever its environment, and folders or files that another
//! user could tamper with refused with a clear error.
//!
//! The test binary re-executes itself as the child processes: `child` below
//! does nothing unless `MISTRI_TEST_ROLE` is set.

mod common;
use common::*;
use mistri_locks::{
    internals::{user_default_path, PATH_ENV},
    local_default_path as default_path,
};
use mistri_locks::{Error, Locks};
use mistri_locks_testkit::unique;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(unique(name));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < secs(20.0),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(secs(0.005));
    }
}

/// The child processes' entry point: opens the default database (no path)
/// and reports what it saw into `MISTRI_TEST_DIR`.
#[test]
fn child() {
    let Ok(role) = std::env::var("MISTRI_TEST_ROLE") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("MISTRI_TEST_DIR").unwrap());
    let key = std::env::var("MISTRI_TEST_KEY").unwrap();
    let locks = Locks::local(None).unwrap();
    let path = default_path();
    match role.as_str() {
        "holder" => {
            assert!(locks.acquire(&key, secs(60.0)).unwrap());
            std::fs::write(dir.join("holder.path"), path.to_str().unwrap()).unwrap();
            wait_for(&dir.join("done"));
            assert!(locks.release(&key).unwrap());
        }
        "contender" => {
            let got = locks.acquire(&key, secs(60.0)).unwrap();
            if got {
                locks.release(&key).unwrap();
            }
            std::fs::write(dir.join("contender.path"), path.to_str().unwrap()).unwrap();
            std::fs::write(dir.join("contender.got"), got.to_string()).unwrap();
        }
        other => panic!("unknown role {other}"),
    }
}

fn child_command(role: &str, dir: &Path, key: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MISTRI_TEST_ROLE", role)
        .env("MISTRI_TEST_DIR", dir)
        .env("MISTRI_TEST_KEY", key)
        .env_remove(PATH_ENV)
        .stdout(Stdio::null());
    cmd
}

#[test]
fn processes_with_different_environments_share_the_default_database() {
    let dir = Dir::new("mistri-local-env");
    let (runtime, tmp_a, tmp_b) = (dir.0.join("run"), dir.0.join("ta"), dir.0.join("tb"));
    for d in [&runtime, &tmp_a, &tmp_b] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // A unique key on the real default database, released at the end.
    let key = unique("mistri-test-env-key");
    // A login shell: XDG_RUNTIME_DIR set, one TMPDIR.
    let mut holder = child_command("holder", &dir.0, &key)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("TMPDIR", &tmp_a)
        .spawn()
        .unwrap();
    wait_for(&dir.0.join("holder.path"));
    // A cron job: no XDG_RUNTIME_DIR, another TMPDIR.
    let contender = child_command("contender", &dir.0, &key)
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", &tmp_b)
        .status()
        .unwrap();
    std::fs::write(dir.0.join("done"), "").unwrap();
    assert!(holder.wait().unwrap().success(), "holder failed");
    assert!(contender.success(), "contender failed");
    let read = |name: &str| std::fs::read_to_string(dir.0.join(name)).unwrap();
    assert_eq!(read("holder.path"), read("contender.path"));
    assert_eq!(read("holder.path"), user_default_path().to_str().unwrap());
    assert_eq!(read("contender.got"), "false", "both held {key}");
    let default = Locks::local(Some(&user_default_path())).unwrap();
    assert!(!default.held(&key).unwrap(), "released on the way out");
}

#[test]
fn the_default_is_per_uid_under_var_tmp() {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    assert_eq!(
        user_default_path(),
        PathBuf::from(format!("/var/tmp/mistri_locks-{uid}/locks.db"))
    );
    let folder = user_default_path().parent().unwrap().to_owned();
    Locks::local(Some(&user_default_path())).unwrap();
    let meta = std::fs::symlink_metadata(&folder).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
}

fn refused(path: &Path, expect: &str) {
    let err = match Locks::local(Some(path)) {
        Ok(_) => panic!("{} was accepted", path.display()),
        Err(e) => e,
    };
    assert!(matches!(err, Error::Config(_)), "{err}");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(expect), "{text:?} does not say {expect:?}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_folder_of_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: only root can give a folder to another user");
        return;
    }
    let dir = Dir::new("mistri-local-nobody");
    for mode in [0o700, 0o1777] {
        let folder = dir.0.join(format!("f{mode:o}"));
        std::fs::create_dir(&folder).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(&folder, Some(65534), Some(65534)).unwrap();
        refused(&folder.join("locks.db"), "belongs to uid 65534");
        assert!(!folder.join("locks.db").exists(), "nothing created there");
    }
}

#[test]
fn a_folder_others_can_write_is_refused() {
    let dir = Dir::new("mistri-local-writable");
    for mode in [0o770, 0o777, 0o1777, 0o720] {
        let folder = dir.0.join(format!("f{mode:o}"));
        std::fs::create_dir(&folder).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(mode)).unwrap();
        refused(&folder.join("locks.db"), "writable by other users");
    }
}

#[test]
fn symbolic_links_are_refused() {
    let dir = Dir::new("mistri-local-symlink");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A symlinked file, dangling or not.
    let real = dir.0.join("real.db");
    Locks::local(Some(&real)).unwrap();
    let link = dir.0.join("locks.db");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    refused(&link, "symbolic link");
    let dangling = dir.0.join("dangling.db");
    std::os::unix::fs::symlink(dir.0.join("nowhere.db"), &dangling).unwrap();
    refused(&dangling, "symbolic link");
    assert!(!dir.0.join("nowhere.db").exists(), "the link was followed");
    // A symlinked folder.
    let real_folder = dir.0.join("real");
    std::fs::create_dir(&real_folder).unwrap();
    let linked_folder = dir.0.join("linked");
    std::os::unix::fs::symlink(&real_folder, &linked_folder).unwrap();
    refused(&linked_folder.join("locks.db"), "symbolic link");
}

#[test]
fn a_file_of_another_user_is_refused_and_ours_is_made_private() {
    let dir = Dir::new("mistri-local-file");
    let db = dir.0.join("locks.db");
    std::fs::write(&db, "").unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o666)).unwrap();
    Locks::local(Some(&db)).unwrap();
    let mode = std::fs::metadata(&db).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    if is_root() {
        let theirs = dir.0.join("theirs.db");
        std::fs::write(&theirs, "").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        refused(&theirs, "belongs to uid 65534");
    }
}

#[test]
fn the_environment_variable_names_the_default() {
    // Read in a child so this process's environment stays untouched.
    let dir = Dir::new("mistri-local-envvar");
    let db = dir.0.join("chosen.db");
    let key = unique("mistri-test-envvar-key");
    let mut cmd = child_command("contender", &dir.0, &key);
    cmd.env(PATH_ENV, &db);
    assert!(cmd.status().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(dir.0.join("contender.path")).unwrap(),
        db.to_str().unwrap()
    );
    assert!(db.exists());
}
