//! `mistri-locks`: the operator's command for mistri_locks leases and stop
//! flags — see who holds what (`status`, `list`), ask a holder to stop
//! (`stop`, `clear`), break a lease (`break`), and run a command while
//! holding a lease (`run`); `schema` prints the Postgres backend's DDL for
//! a team whose application role may not run it.
//!
//! Exit statuses (also in `--help` and the README):
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done (`status KEY…`: every KEY is held) |
//! | 1 | an error: unreachable Redis, refused Local folder, … (one line on stderr) |
//! | 2 | bad usage: unknown command, bad duration, empty key, bad URL |
//! | 3 | `status KEY…`: some KEY is not held |
//! | `run`: the child's status | the command ran to its end (killed by signal N: 128 + N) |
//! | 75 | `run`: the lease is held elsewhere (after `--wait`, if given) |
//! | 76 | `run`: stopped by its stop flag (the command was sent SIGTERM, SIGKILL after the grace) |
//! | 77 | `run`: the lease was lost (the command was sent SIGTERM, SIGKILL after the grace) |
//! | 126 / 127 | `run`: the command could not be executed / was not found |
//!
//! Every error is one line on stderr and a non-zero status; nothing panics
//! on bad input.

mod run;
mod serve;
mod show;

use clap::{CommandFactory, Parser, Subcommand};
use mistri_locks::{Error, Family, Locks, OpenOptions, StopOutcome};
use show::term;
use std::io::Write;
use std::time::Duration;

/// `eprintln!` that never panics: a closed stderr is no reason to stop
/// (least of all mid-`run`, with a command and a lease to see to).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use say;

/// Writes `text` to stdout, every output path's one way out. A reader
/// that went away (`| head -c 10`: EPIPE) ends the process quietly with
/// status 0, as `ls | head` ends, instead of a panic (101); another
/// write error is one line on stderr and status 1.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        say!("mistri-locks: cannot write to stdout: {e}");
        std::process::exit(EXIT_ERROR);
    }
}

/// Exit status: an error (backend unreachable, refused folder, …).
pub const EXIT_ERROR: i32 = 1;
/// Exit status: bad usage.
pub const EXIT_USAGE: i32 = 2;
/// Exit status of `status KEY…` when some KEY is not held.
pub const EXIT_NOT_HELD: i32 = 3;
/// Exit status of `run` when the lease is held elsewhere.
pub const EXIT_REFUSED: i32 = 75;
/// Exit status of `run` stopped by its stop flag.
pub const EXIT_STOPPED: i32 = 76;
/// Exit status of `run` whose lease was lost.
pub const EXIT_LOST: i32 = 77;

const AFTER_HELP: &str = "\
Backend: --url or $MISTRI_LOCKS_URL: redis://[user:pass@]host[:port][/db], rediss://… (TLS),
redis+cluster://h1:p1,h2:p2 (Cluster), redis+sentinel://s1:p1,s2:p2/service[/db] (Sentinel),
rediss+cluster://…, rediss+sentinel://… (optional ?min_replicas=N|all&replica_timeout=SECONDS;
an evicting maxmemory-policy is refused unless ?eviction=accept; ?settings_check=SECONDS, default 60),
postgres://[user:pass@]host[:port]/dbname or postgresql://… (libpq's conventions:
?sslmode=, ?application_name=, ?host=/socket/dir; ?schema=NAME, default mistri_locks)
or a libpq key/value DSN (host=h dbname=d),
mysql://[user:pass@]host[:port]/dbname or mariadb://… (?ssl-mode=DISABLED|PREFERRED|REQUIRED|
VERIFY_CA|VERIFY_IDENTITY; ?prefix=NAME for the table names, default mistri_),
memory:// (this process only),
or file://PATH or a path to a Local database file (default: the Local adapter's per-user file,
$MISTRI_LOCKS_LOCAL_PATH or /var/tmp/mistri_locks-<uid>/locks.db).

Durations are seconds (0.5, 10) or with a unit (250ms, 10s, 5m, 1h); `run --wait` also takes `forever`.

Exit statuses: 0 ok; 1 error; 2 bad usage; 3 `status KEY…` found a KEY not held;
`run`: the command's own status (128+N if killed by signal N), 75 lease held
elsewhere, 76 stopped by its stop flag, 77 lease lost, 126/127 command not
executable/not found.";

/// The operator's command for mistri_locks leases and stop flags.
#[derive(Parser, Debug)]
#[command(name = "mistri-locks", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Backend: redis://…, rediss://…, redis+cluster://…, redis+sentinel://…, postgres://…, mysql://… or a Local database path.
    #[arg(long, global = true, env = "MISTRI_LOCKS_URL", value_name = "URL")]
    url: Option<String>,
    /// Key namespace (Redis, Postgres and MySQL).
    #[arg(long, global = true, default_value = mistri_locks::DEFAULT_NAMESPACE, value_name = "NS")]
    namespace: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show who holds leases (all of them, or the KEYs given), and raised flags.
    Status {
        /// Leases to show (default: every live lease and flag).
        #[arg(value_parser = key)]
        keys: Vec<String>,
        #[command(flatten)]
        view: show::View,
    },
    /// List live leases and raised flags whose keys start with PREFIX.
    List {
        /// Key prefix (default: everything).
        #[arg(default_value = "")]
        prefix: String,
        #[command(flatten)]
        view: show::View,
    },
    /// Raise the flag FLAG (e.g. the stop key a holder watches), or with --holder-of KEY the stop keys of KEY's holders.
    Stop {
        /// The flag to raise, e.g. nightly:stop.
        #[arg(value_parser = key, required_unless_present = "holder_of", conflicts_with = "holder_of")]
        flag: Option<String>,
        /// Raise the stop key of every holder of this lease (as the page's Stop does).
        #[arg(long, value_parser = key, value_name = "KEY")]
        holder_of: Option<String>,
        /// How long the flag stays up.
        #[arg(long, value_parser = duration, default_value = "300", value_name = "S")]
        ttl: Duration,
    },
    /// Lower the flag FLAG.
    Clear {
        /// The flag to lower.
        #[arg(value_parser = key)]
        flag: String,
    },
    /// Delete the lease on KEY, whoever holds it (its holder finds out at its next renewal).
    Break {
        /// The lease to break.
        #[arg(value_parser = key)]
        key: String,
        /// Don't ask (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Run a command while holding the lease on KEY.
    #[command(after_help = run::AFTER_HELP)]
    Run(run::RunArgs),
    /// Serve the operator's page, its JSON, actions and /metrics over HTTP.
    #[command(after_help = serve::AFTER_HELP)]
    Serve(serve::ServeArgs),
    /// Print the Postgres (or, with a mysql:// --url or --prefix, the MySQL) backend's DDL for a DBA to run.
    #[command(after_help = SCHEMA_HELP)]
    Schema {
        /// Postgres: the schema to create (default: the --url's ?schema=, else mistri_locks).
        #[arg(long, value_name = "NAME", conflicts_with = "prefix")]
        schema: Option<String>,
        /// MySQL/MariaDB: the table prefix (default: the --url's ?prefix=, else mistri_).
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<String>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

const SCHEMA_HELP: &str = "\
For a team whose application role may not run DDL: an owner runs the output once
(psql -f, a migration), the application then finds the schema ready. Running it
again changes nothing; it refuses to touch a schema a newer release made.
Example: mistri-locks schema --schema app_locks | psql \"$DATABASE_URL\"
MySQL/MariaDB (tables and procedures, statements ended by lines of $$; chosen by a
mysql:// or mariadb:// --url, or by --prefix):
  mistri-locks schema --prefix app_ | mariadb --delimiter='$$' app_db";

/// The default schema of the Postgres backend.
const DEFAULT_SCHEMA: &str = "mistri_locks";

/// The `?schema=` of a postgres:// URL, if it names one.
fn schema_in_url(url: &str) -> Option<&str> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return None;
    }
    query_value(url, "schema")
}

/// The value of `name` in a URL's query, as written (the DDL's names are
/// plain identifiers, which need no decoding; anything else is refused).
fn query_value<'u>(url: &'u str, name: &str) -> Option<&'u str> {
    let query = url.split_once('?')?.1;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    query.split('&').find_map(|pair| {
        pair.split_once('=')
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
    })
}

/// A non-empty key.
fn key(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("a key must not be empty".into())
    } else {
        Ok(s.to_owned())
    }
}

/// Seconds (`0.5`, `10`) or a number with a unit (`250ms`, `10s`, `5m`, `1h`).
fn duration(s: &str) -> Result<Duration, String> {
    mistri_locks::duration_from_secs("duration", seconds(s)?).map_err(|e| e.message().to_owned())
}

/// How long to wait: a duration as for [`duration`], `0` (try once), or
/// `forever` (also `inf`).
fn wait(s: &str) -> Result<Duration, String> {
    if matches!(s.trim(), "forever" | "inf") {
        return Ok(Duration::MAX);
    }
    let waited = mistri_locks::wait_timeout_from_secs("wait", seconds(s)?)
        .map_err(|e| e.message().to_owned())?;
    Ok(waited.unwrap_or(Duration::MAX))
}

/// The number of seconds in `s` (a unit scales it; no range check).
fn seconds(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let value: f64 = num.trim().parse().map_err(|_| {
        format!("{s:?} is not a duration (use seconds like 0.5 or 10, or 250ms, 10s, 5m, 1h)")
    })?;
    Ok(value * scale)
}

/// A failure: the message (one line) and the exit status.
#[derive(Debug)]
pub struct Failure {
    status: i32,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            status: EXIT_USAGE,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let status = if e.is_bad_argument() {
            EXIT_USAGE
        } else {
            EXIT_ERROR
        };
        Failure {
            status,
            message: e.to_string(),
        }
    }
}

/// Opens the backend named by `url` (None: the Local default) through the
/// core's one scheme table, so the CLI takes what every face takes.
fn open(url: Option<&str>, namespace: &str) -> Result<Locks, Failure> {
    let Some(url) = url else {
        return Ok(Locks::local(None)?);
    };
    if url.is_empty() {
        return Err(Failure::usage("--url must not be empty"));
    }
    let bad_url = |e: Error| match e {
        Error::Config(m) => Failure::usage(format!("bad URL: {m}")),
        other => other.into(),
    };
    let family = mistri_locks::family_of(url).map_err(bad_url)?;
    let options = OpenOptions::new().namespace(namespace);
    Locks::open_with(url, &options).map_err(|e| {
        // A Local file's problem is the file's, not the URL's.
        if family == Family::Local {
            e.into()
        } else {
            bad_url(e)
        }
    })
}

fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    mistri_locks::internals::set_language("mistri-locks");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            match e.kind() {
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    // print() returns a write error (a closed pipe) rather
                    // than panicking: the status below stands.
                    let _ = e.print();
                    std::process::exit(
                        if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                            EXIT_USAGE
                        } else {
                            0
                        },
                    );
                }
                _ => {
                    // clap's first line is the error; the rest is usage.
                    let text = e.to_string();
                    let first = text.lines().next().unwrap_or("bad usage");
                    let first = first.strip_prefix("error: ").unwrap_or(first);
                    say!("mistri-locks: {} (see --help)", term(&one_line(first)));
                    std::process::exit(EXIT_USAGE);
                }
            }
        }
    };
    let status = match execute(cli) {
        Ok(status) => status,
        Err(f) => {
            say!("mistri-locks: {}", term(&one_line(&f.message)));
            f.status
        }
    };
    std::process::exit(status);
}

fn execute(cli: Cli) -> Result<i32, Failure> {
    if let Command::Completions { shell } = cli.command {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "mistri-locks", &mut script);
        emit(&String::from_utf8_lossy(&script));
        return Ok(0);
    }
    if let Command::Schema { schema, prefix } = &cli.command {
        let url = cli.url.as_deref();
        let mysql = prefix.is_some()
            || url.is_some_and(|u| {
                mistri_locks::family_of(u).is_ok_and(|f| f == mistri_locks::Family::MySql)
            });
        let sql = if mysql {
            let prefix = prefix
                .as_deref()
                .or_else(|| url.and_then(|u| query_value(u, "prefix")))
                .unwrap_or(mistri_locks::internals::MYSQL_PREFIX);
            mistri_locks::MySql::schema_sql(prefix).map_err(|e| match e {
                Error::Config(m) => Failure::usage(format!("bad table prefix: {m}")),
                other => other.into(),
            })?
        } else {
            let schema = schema
                .as_deref()
                .or_else(|| url.and_then(schema_in_url))
                .unwrap_or(DEFAULT_SCHEMA);
            mistri_locks::Postgres::schema_sql(schema).map_err(|e| match e {
                Error::Config(m) => Failure::usage(format!("bad schema name: {m}")),
                other => other.into(),
            })?
        };
        emit(&sql);
        if !sql.ends_with('\n') {
            emit("\n");
        }
        return Ok(0);
    }
    let locks = open(cli.url.as_deref(), &cli.namespace)?;
    match cli.command {
        Command::Status { keys, view } => show::status(&locks, &keys, &view),
        Command::List { prefix, view } => show::list(&locks, &prefix, &view),
        Command::Stop {
            holder_of: Some(key),
            ttl,
            ..
        } => stop_holders(&locks, &key, ttl),
        Command::Stop { flag, ttl, .. } => {
            let flag = flag.unwrap_or_default();
            locks.set_flag(&flag, ttl)?;
            emit(&format!(
                "raised flag {} for {}\n",
                term(&flag),
                show::human(ttl)
            ));
            Ok(0)
        }
        Command::Clear { flag } => {
            let was = locks.flag(&flag)?;
            locks.clear_flag(&flag)?;
            let flag = term(&flag);
            emit(&if was {
                format!("lowered flag {flag}\n")
            } else {
                format!("flag {flag} was not up\n")
            });
            Ok(0)
        }
        Command::Break { key, yes } => break_lease(&locks, &key, yes),
        Command::Run(args) => run::run(&locks, args),
        Command::Serve(args) => serve::serve(locks, args),
        Command::Completions { .. } | Command::Schema { .. } => Ok(0),
    }
}

/// `stop --holder-of KEY`: the core's [`Locks::stop_holders`] (each
/// holder's stop key raised once, for `ttl`), its outcome said as the
/// page's Stop says it. Nothing raised is a failure (exit 1).
fn stop_holders(locks: &Locks, key: &str, ttl: Duration) -> Result<i32, Failure> {
    let shown = term(key);
    let nothing = |message: String| {
        Err(Failure {
            status: EXIT_ERROR,
            message,
        })
    };
    match locks.stop_holders(key, ttl)? {
        StopOutcome::Raised(stops) => {
            let stops: Vec<_> = stops.iter().map(|s| term(s)).collect();
            emit(&format!("raised {}\n", stops.join(", ")));
            Ok(0)
        }
        StopOutcome::NotHeld => nothing(format!("no live lease on {shown}")),
        // NoStopKey (Outside needs a prefix, and the CLI acts on every
        // key), and any outcome added later: nothing was raised.
        _ => nothing(format!(
            "the holder of {shown} watches no stop key (Break deletes the lease instead)"
        )),
    }
}

fn break_lease(locks: &Locks, key: &str, yes: bool) -> Result<i32, Failure> {
    let Some(info) = locks.info(key)? else {
        emit(&format!("no live lease on {}\n", term(key)));
        return Ok(0);
    };
    let who = info
        .holder
        .as_ref()
        .map(|h| format!("{} (fence {})", term(&h.label), h.fence))
        .unwrap_or_else(|| "an unknown holder".into());
    let shown = term(key);
    if !yes {
        // SAFETY: isatty only inspects the descriptor number.
        let tty = unsafe { libc::isatty(0) } == 1;
        if !tty {
            return Err(Failure::usage(format!(
                "not breaking the lease on {shown} held by {who} without --yes (stdin is not a terminal)"
            )));
        }
        let _ = write!(
            std::io::stderr(),
            "break the lease on {shown} held by {who}? [y/N] "
        );
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            say!("left alone");
            return Ok(EXIT_ERROR);
        }
    }
    if locks.break_lease(key)? {
        emit(&format!("broke the lease on {shown} (was held by {who})\n"));
    } else {
        emit(&format!("no live lease on {shown}\n"));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("1h").unwrap(), Duration::from_secs(3600));
        for bad in ["", "abc", "-1", "0", "NaN", "inf", "5x", "1e99"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert_eq!(wait("0").unwrap(), Duration::ZERO);
        assert_eq!(wait("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(wait("forever").unwrap(), Duration::MAX);
        assert_eq!(wait("inf").unwrap(), Duration::MAX);
        for bad in ["", "abc", "-1", "NaN", "5x"] {
            assert!(wait(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schema_from_the_url() {
        assert_eq!(
            schema_in_url("postgres://h/db?sslmode=disable&schema=app"),
            Some("app")
        );
        assert_eq!(schema_in_url("postgresql://h/db?schema=x"), Some("x"));
        assert_eq!(schema_in_url("postgres://h/db"), None);
        assert_eq!(schema_in_url("redis://h/0?schema=x"), None);
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
