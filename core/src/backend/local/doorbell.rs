use super::bells::{bells_folder, create_bell, Bell};
use crate::contract::listen::{Plan, Subscriptions, LISTENER_IDLE};
use crate::contract::push::{Interest, Registry};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs until nobody watches (the listener thread's body); `db` is the
/// database, whose `-bells` folder it watches.
pub(super) fn run(db: &Path, registry: &Registry) {
    const FIRST_BACKOFF: Duration = Duration::from_millis(50);
    let mut backoff = FIRST_BACKOFF;
    let mut subs = Subscriptions::default();
    while !registry.retire_if_unwatched() {
        let started = Instant::now();
        let listened = listen(db, registry, &mut subs);
        // The descriptor is gone, whatever ended it.
        registry.unconfirm_all();
        match listened {
            Ok(()) => return,
            Err(_) => {
                if started.elapsed() > LISTENER_IDLE * 5 {
                    backoff = FIRST_BACKOFF;
                }
                // The folder or a file is unusable (or the descriptor
                // limits are hit): the tick poll serves meanwhile.
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(LISTENER_IDLE);
            }
        }
    }
}

/// A syscall's -1 as the OS error.
fn check(rc: libc::c_int) -> std::io::Result<libc::c_int> {
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc)
}

/// The descriptor a syscall just returned (inotify_init1, eventfd),
/// owned.
fn owned(rc: libc::c_int) -> std::io::Result<OwnedFd> {
    let fd = check(rc)?;
    // SAFETY: `fd` was just returned by the kernel and is owned here
    // only; OwnedFd closes it once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Wakes the listener: adds 1 to its eventfd. Non-blocking; a full
/// counter (EAGAIN) is already readable, so every error is ignored.
fn wake(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes the 8 bytes of `one`, which lives across the call,
    // to a descriptor this closure keeps open.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// One watched doorbell: its watch and the interests it rings for.
struct Watched {
    wd: i32,
    interests: HashSet<Interest>,
}

/// The watches of one inotify descriptor: one per doorbell that some
/// live interest maps to.
struct Bells {
    fd: OwnedFd,
    dir: PathBuf,
    by_bell: HashMap<Bell, Watched>,
    by_wd: HashMap<i32, Bell>,
}

impl Bells {
    /// Creates the doorbell `bell` if missing and watches it.
    fn add_watch(&self, bell: Bell) -> std::io::Result<i32> {
        let path = self.dir.join(bell.file_name());
        create_bell(&path)?;
        let name = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mask =
            libc::IN_CLOSE_WRITE | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_DONT_FOLLOW;
        // SAFETY: `fd` is a live inotify descriptor and `name` a valid
        // NUL-terminated path that outlives the call.
        check(unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), name.as_ptr(), mask) })
    }

    /// Drops the watch `wd` (best effort: a deleted file's watch is
    /// gone already).
    fn rm_watch(&self, wd: i32) {
        // SAFETY: plain syscall on a live descriptor; the result is
        // not needed.
        let _ = unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
    }

    /// `interest` is live from now: its doorbell is watched.
    fn add(&mut self, interest: &Interest) -> std::io::Result<()> {
        let bell = Bell::of(interest);
        if let Some(watched) = self.by_bell.get_mut(&bell) {
            watched.interests.insert(interest.clone());
            return Ok(());
        }
        let wd = self.add_watch(bell)?;
        let mut interests = HashSet::default();
        interests.insert(interest.clone());
        self.by_bell.insert(bell, Watched { wd, interests });
        self.by_wd.insert(wd, bell);
        Ok(())
    }

    /// `interest` is dropped: its doorbell's watch goes with the last
    /// interest that maps to it.
    fn remove(&mut self, interest: &Interest) {
        let bell = Bell::of(interest);
        let Some(watched) = self.by_bell.get_mut(&bell) else {
            return;
        };
        watched.interests.remove(interest);
        if watched.interests.is_empty() {
            let wd = watched.wd;
            self.by_bell.remove(&bell);
            self.by_wd.remove(&wd);
            self.rm_watch(wd);
        }
    }

    /// Reads every pending event: the doorbells that rang, those whose
    /// file went away, and whether the kernel's queue overflowed.
    fn read(&self, buf: &mut [u8]) -> Events {
        let mut events = Events::default();
        loop {
            // SAFETY: reads at most `buf.len()` bytes into `buf`, which
            // is valid for writes of that length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(n) else {
                break; // EAGAIN: drained
            };
            if n == 0 {
                break;
            }
            let mut at = 0;
            let head = std::mem::size_of::<libc::inotify_event>();
            while at + head <= n {
                // SAFETY: the kernel writes whole events; the header at
                // `at` lies within the `n` bytes read (checked above).
                // read_unaligned: the buffer has no alignment guarantee.
                let event: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
                at += head + event.len as usize;
                if event.mask & libc::IN_Q_OVERFLOW != 0 {
                    events.overflow = true;
                    continue;
                }
                // A watch we dropped ourselves maps to nothing now.
                let Some(&bell) = self.by_wd.get(&event.wd) else {
                    continue;
                };
                if event.mask & libc::IN_CLOSE_WRITE != 0 {
                    events.rang.insert(bell);
                }
                if event.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0
                {
                    events.gone.insert(bell);
                }
            }
        }
        events
    }

    /// Tells `registry` that `bell` rang: the engines read the flags of
    /// its bucket, the lines of its bucket try.
    fn deliver(&self, bell: Bell, registry: &Registry) {
        let Some(watched) = self.by_bell.get(&bell) else {
            return;
        };
        let mut keys: Vec<&str> = watched.interests.iter().map(Interest::key).collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            match bell {
                Bell::Raised(_) => registry.poll_flag(key),
                Bell::Next(_) => registry.released(key, None),
            }
        }
    }
}

#[derive(Default)]
struct Events {
    rang: HashSet<Bell>,
    gone: HashSet<Bell>,
    overflow: bool,
}

/// One inotify descriptor following the registry's interests, until
/// nobody watches (Ok) or a doorbell can't be watched (Err: the caller
/// starts over).
fn listen(db: &Path, registry: &Registry, subs: &mut Subscriptions) -> std::io::Result<()> {
    // A new descriptor watches nothing yet.
    subs.clear();
    // No database, no doorbells: never make the folder next to a
    // database file that was deleted (its folder may be being removed).
    if !db.exists() {
        return Err(std::io::Error::other("the database file is gone"));
    }
    let dir = bells_folder(db).map_err(|e| std::io::Error::other(e.to_string()))?;
    // SAFETY: plain syscall with flag arguments; the result is checked.
    let fd = owned(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) })?;
    // SAFETY: plain syscall with flag arguments; the result is checked.
    let wake_fd = Arc::new(owned(unsafe {
        libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)
    })?);
    let waker = wake_fd.clone();
    registry.set_wake(Some(Arc::new(move || wake(&waker))));
    let mut bells = Bells {
        fd,
        dir,
        by_bell: HashMap::default(),
        by_wd: HashMap::default(),
    };
    let all = Plan {
        subscribe: registry.wanted(),
        unsubscribe: Vec::new(),
    };
    for interest in &all.subscribe {
        bells.add(interest)?;
    }
    subs.done(&all);
    registry.confirm(&all.subscribe);
    // Live from here: what was raised before is found by reading, and
    // every waiter tries once (a release may have gone unheard).
    registry.poll_now();
    registry.released_any();
    let mut buf = [0u8; 4096];
    let mut checked = Instant::now();
    loop {
        let now = Instant::now();
        let plan = subs.plan(registry, now);
        if !plan.is_empty() {
            for interest in &plan.subscribe {
                bells.add(interest)?;
            }
            registry.unconfirm(&plan.unsubscribe);
            for interest in &plan.unsubscribe {
                bells.remove(interest);
            }
            subs.done(&plan);
            registry.live(&plan.subscribe);
        }
        let mut wait = LISTENER_IDLE.saturating_sub(checked.elapsed());
        if let Some(at) = subs.next_leave() {
            wait = wait.min(at.saturating_duration_since(now));
        }
        // Rounded up: woken before a linger is due, it would spin.
        let wait_ms = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut pfds = [
            libc::pollfd {
                fd: bells.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake_fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds, count 2.
        let ready = unsafe { libc::poll(pfds.as_mut_ptr(), 2, wait_ms) };
        if ready < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        if ready > 0 && pfds[1].revents != 0 {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into `count`, valid for writes of
            // 8 bytes; the counter is reset (EAGAIN if already read).
            let _ = unsafe { libc::read(wake_fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        }
        if ready > 0 && pfds[0].revents != 0 {
            let events = bells.read(&mut buf);
            if !events.gone.is_empty() {
                // A doorbell was removed or replaced (maybe its whole
                // folder is being deleted): start over after a pause,
                // and only while the database is there, rather than
                // make files in a folder someone is emptying.
                return Err(std::io::Error::other("a doorbell was removed"));
            }
            if events.overflow {
                // Events were lost: look at everything once.
                registry.poll_now();
                registry.released_any();
            }
            for bell in &events.rang {
                bells.deliver(*bell, registry);
            }
        }
        if checked.elapsed() >= LISTENER_IDLE {
            if registry.retire_if_unwatched() {
                return Ok(());
            }
            registry.idle();
            checked = Instant::now();
        }
    }
}
